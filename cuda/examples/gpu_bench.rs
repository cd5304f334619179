//! GPU benchmark: a GPT-style block (batch 8, sequence 1024, d_model 1024, 16 heads, bf16) per
//! checkpointing policy and partition strategy (offload included: its copies overlap with compute
//! on the two copy streams, and the table gives its step time, device peak and host peak beside
//! the same budget without offload), against ceilings measured in the same run (device
//! copy bandwidth, a large bf16 GEMM, and a large fp8 `scaled_matmul` for reference) and its own
//! GEMMs alone.
//!
//! `cargo run --release -p remat-cuda --example gpu_bench [-- --quick]`. Without a GPU it prints
//! why and exits 0 (exit 2 when `REMAT_REQUIRE` names `cuda`).
//!
//! `--demand` prints, without a GPU, what each policy's step asks of the device (GEMM FLOPs and
//! the bytes every other op moves) and its predicted device and host peaks, computed from its plan.
//!
//! Step time is the device time of one forward + backward plan execution with parameters and
//! inputs already resident (the plan's steps and frees, one synchronisation at the end); the
//! end-to-end `Model::step` time (uploads and gradient downloads included) is shown beside it.
//! A last table times a training step with host parameters and a host optimizer against one
//! with `TrainState` (everything resident), with the bytes each moves per step.

use remat_core::{enter_region, PolicyTable, RegionSpec};
use remat_core::{
    Backend, BinaryOp, Budget, DType, Graph, HostData, HostTensor, KernelCall, Model, Op, OpKind, Policy, ReduceOp,
    Result, Step, Strategy, UnaryOp,
};
use remat_cuda::{CudaBackend, CudaBuffer};
use remat_zoo as zoo;
use std::time::Instant;

#[path = "../../benches/common/require.rs"]
mod require;

static RECOMPUTE_ALL: RegionSpec = RegionSpec::new("block_part", PolicyTable::RECOMPUTE_ALL);
static SAVE_MATMULS: RegionSpec = RegionSpec::new(
    "block_part",
    PolicyTable { must_save: &[OpKind::Matmul], ..PolicyTable::uniform(Policy::PreferRecompute) },
);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn random(shape: &[usize], dtype: DType, seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n as u64).map(|i| remat_core::normal_f64(seed, 7, i) * 0.1).collect();
    HostTensor::new(shape.to_vec(), HostData::from_f64(&v, dtype)).expect("sizes match")
}

/// Seconds per call of `f` (median of `reps`, each synchronised).
fn time(g: &mut CudaBackend, reps: usize, mut f: impl FnMut(&mut CudaBackend) -> Result<()>) -> Result<f64> {
    f(g)?;
    g.synchronize()?;
    let mut t = Vec::new();
    for _ in 0..reps {
        let s = Instant::now();
        f(g)?;
        g.synchronize()?;
        t.push(s.elapsed().as_secs_f64());
    }
    Ok(median(t))
}

fn exec(g: &mut CudaBackend, op: &Op, inputs: &[&CudaBuffer], seed: u64) -> Result<CudaBuffer> {
    let metas: Vec<_> = inputs.iter().map(|b| (b.shape(), b.dtype())).collect();
    let (shape, dtype) = op.infer(&metas).map_err(remat_core::Error::internal)?;
    let call = KernelCall::new(remat_core::NodeId::new(0), op, &metas, &shape, dtype, seed);
    g.execute(&call, inputs)
}

/// One plan execution with resident values already on the device.
fn device_step(g: &mut CudaBackend, model: &Model, resident: &[CudaBuffer], seed: u64) -> Result<()> {
    let graph = model.joint().graph();
    let mut slots: Vec<Option<CudaBuffer>> = (0..graph.len()).map(|_| None).collect();
    let mut host: Vec<Option<remat_cuda::CudaHostBuffer>> = (0..graph.len()).map(|_| None).collect();
    let mut borrowed: Vec<Option<usize>> = vec![None; graph.len()];
    for (i, &id) in model.plan().resident().iter().enumerate() {
        borrowed[id.index()] = Some(i);
    }
    for step in model.plan().steps() {
        match *step {
            Step::Compute(id) | Step::Recompute(id) => {
                let node = graph.node(id);
                let ins: Vec<&CudaBuffer> = node
                    .inputs
                    .iter()
                    .map(|i| match borrowed[i.index()] {
                        Some(r) => &resident[r],
                        None => slots[i.index()].as_ref().expect("plan keeps inputs live"),
                    })
                    .collect();
                let metas: Vec<_> = node.inputs.iter().map(|&i| graph.node(i).meta()).collect();
                let out = g.execute(&KernelCall::for_node(graph, id, &metas, seed), &ins)?;
                slots[id.index()] = Some(out);
            }
            Step::Alias(id) => {
                let input = graph.node(id).inputs[0];
                let buffer = slots[input.index()].take().expect("plan aliases a live value");
                let metas = [graph.node(input).meta()];
                slots[id.index()] = Some(g.reshape_owned(&KernelCall::for_node(graph, id, &metas, seed), buffer)?);
            }
            Step::Free(id) => slots[id.index()] = None,
            Step::Offload(id) => {
                let buffer = slots[id.index()].as_ref().expect("plan offloads a live value");
                host[id.index()] = Some(g.offload(buffer)?);
            }
            Step::Fetch(id) => {
                let copy = host[id.index()].take().expect("plan fetches an offloaded value");
                slots[id.index()] = Some(g.fetch(copy)?);
            }
        }
    }
    Ok(())
}

/// TFLOP/s of `scaled_matmul` on `s`×`s` e4m3 operands (an error on GPUs without fp8).
fn fp8_gemm(g: &mut CudaBackend, s: usize, reps: usize) -> Result<f64> {
    let a = g.upload(&random(&[s, s], DType::F8E4M3, 8))?;
    let b = g.upload(&random(&[s, s], DType::F8E4M3, 9))?;
    let one = g.upload(&HostTensor::f32(vec![], vec![1.0])?)?;
    let t = time(g, reps, |g| exec(g, &Op::ScaledMatmul, &[&a, &b, &one, &one], 0).map(|_| ()))?;
    Ok(2.0 * (s as f64).powi(3) / t / 1e12)
}

/// The plan's matrix products alone, on random operands of the same shapes.
fn gemms_alone(g: &mut CudaBackend, model: &Model, reps: usize) -> Result<f64> {
    let graph = model.joint().graph();
    let mut calls = Vec::new();
    for step in model.plan().steps() {
        if let Step::Compute(id) | Step::Recompute(id) = *step {
            let node = graph.node(id);
            if matches!(node.op.kind(), OpKind::Matmul | OpKind::MatmulT) {
                let a = graph.node(node.inputs[0]);
                let b = graph.node(node.inputs[1]);
                let (a, b) = (g.upload(&random(&a.shape, a.dtype, 1))?, g.upload(&random(&b.shape, b.dtype, 2))?);
                calls.push((node.op.clone(), a, b));
            }
        }
    }
    time(g, reps, |g| {
        for (op, a, b) in &calls {
            exec(g, op, &[a, b], 0)?;
        }
        Ok(())
    })
}

struct Row {
    name: &'static str,
    strategy: String,
    step: f64,
    /// Bytes read and written outside the GEMMs ([`demand`]).
    traffic: u64,
    e2e: f64,
    gemms: f64,
    peak: usize,
    predicted: usize,
    pool: u64,
    /// Measured host peak (offloaded copies) and the number of offloaded values.
    host: usize,
    offloaded: usize,
}

fn run_policy(
    g: &mut CudaBackend,
    name: &'static str,
    strategy: Strategy,
    graph: Graph,
    cfg: &zoo::GptConfig,
    reps: usize,
) -> Result<Row> {
    let model = Model::with_cost_model(graph, strategy, &g.cost_model())?;
    let params = model.init_params(0).unwrap();
    let feeds = zoo::synthetic_tokens(cfg, 0)?;
    let out = model.step(g, &params, &feeds)?; // warm-up: compiles kernels, fills the pool
    let e2e = time(g, reps, |g| model.step(g, &params, &feeds).map(|_| ()))?;
    // Resident values in plan order (params by name, inputs from the feeds).
    let fwd = model.forward_graph();
    let mut resident = Vec::new();
    let feed_values = [("tokens", tokens_of(cfg, 1)), ("targets", tokens_of(cfg, 2))];
    for &id in model.plan().resident() {
        let node = fwd.node(id);
        let name = node.name().unwrap_or_default().to_string();
        let value = match params.get(&name) {
            Some(v) => v.clone(),
            None => {
                feed_values.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone()).expect("every resident is fed")
            }
        };
        resident.push(g.upload(&value)?);
    }
    g.reset_pool_peak()?;
    let step = time(g, reps, |g| device_step(g, &model, &resident, 1))?;
    let pool = g.pool_peak()?;
    drop(resident);
    let gemms = gemms_alone(g, &model, reps)?;
    let strategy = strategy.to_string();
    let traffic = demand(&model).1;
    let offloaded = model.plan().offloaded().len();
    Ok(Row {
        name,
        strategy,
        step,
        traffic,
        e2e,
        gemms,
        peak: out.measured_peak,
        predicted: out.predicted_peak,
        pool,
        host: out.measured_host_peak,
        offloaded,
    })
}

/// Valid random ids `[batch, seq]` (`Feeds` does not expose its values; any valid ids time alike).
fn tokens_of(cfg: &zoo::GptConfig, seed: u64) -> HostTensor {
    let n = cfg.batch * cfg.seq;
    let v: Vec<i64> =
        (0..n as u64).map(|i| (remat_core::uniform_u32(seed, 5, i) as usize % cfg.vocab) as i64).collect();
    HostTensor::i64(vec![cfg.batch, cfg.seq], v).expect("sizes match")
}

/// The benchmark's GPT block: one layer, batch 8, sequence 1024, d_model 1024, 16 heads, bf16.
fn block_config() -> zoo::GptConfig {
    zoo::GptConfig {
        batch: 8,
        seq: 1024,
        d_model: 1024,
        heads: 16,
        layers: 1,
        vocab: 4096,
        dropout: 0.1,
        dtype: DType::BF16,
    }
}

/// The policies under the default strategy (tags taken literally), then the other strategies:
/// min-cut with the save-matmuls tags and on the untagged block, a byte budget halfway
/// between the smallest feasible saved set and saving everything, and the offload solver at that
/// budget and at the smallest (with the GPU's cost model).
fn policies(cfg: &zoo::GptConfig) -> Result<Vec<(&'static str, Strategy, Graph)>> {
    let wrap = |spec: &'static RegionSpec| {
        zoo::gpt_with(cfg, &move |part, x, p, heads| {
            let _region = enter_region(spec);
            match part {
                zoo::Part::Attention => zoo::attention(x, p, heads),
                zoo::Part::FeedForward => zoo::feed_forward(x, p),
            }
        })
    };
    Ok(vec![
        ("no checkpointing", Strategy::Respect, zoo::gpt(cfg)?),
        ("full recompute", Strategy::Respect, wrap(&RECOMPUTE_ALL)?),
        ("save matmuls", Strategy::Respect, wrap(&SAVE_MATMULS)?),
        ("save matmuls", Strategy::MinCut, wrap(&SAVE_MATMULS)?),
        ("no tags", Strategy::MinCut, zoo::gpt(cfg)?),
        ("no tags", Strategy::Budget(Budget::Fraction(0.5)), zoo::gpt(cfg)?),
        ("no tags", Strategy::BudgetOffload(Budget::Fraction(0.5)), zoo::gpt(cfg)?),
        ("no tags", Strategy::BudgetOffload(Budget::Fraction(0.0)), zoo::gpt(cfg)?),
    ])
}

/// What a step of `model` asks of the device: the FLOPs of its matrix products and the bytes
/// every other op reads and writes (each input and output once, as an unfused kernel must).
/// Against measured ceilings, `(GEMM time + bytes / copy bandwidth) / GEMM time` bounds the
/// step/GEMM ratio from below for op-by-op execution.
fn demand(model: &Model) -> (u64, u64) {
    let graph = model.joint().graph();
    let bytes = |id: remat_core::NodeId| graph.node(id).bytes() as u64;
    let (mut flops, mut traffic) = (0u64, 0u64);
    for step in model.plan().steps() {
        if let Step::Compute(id) | Step::Recompute(id) = *step {
            let node = graph.node(id);
            if node.op.info().compute_intensive {
                flops += remat_core::node_flops(graph, id);
            } else {
                traffic += node.inputs.iter().map(|&i| bytes(i)).sum::<u64>() + bytes(id);
            }
        }
    }
    (flops, traffic)
}

/// `--demand`: the GEMM FLOPs and other traffic of each policy's step, computed from its plan
/// (no GPU needed).
fn print_demand() -> Result<()> {
    let cfg = block_config();
    println!(
        "{:<18} {:<20} {:>12} {:>16} {:>14} {:>16}",
        "policy", "strategy", "GEMM GFLOP", "other traffic GB", "device MiB", "host MiB (n)"
    );
    for (name, strategy, graph) in policies(&cfg)? {
        let model = Model::with_cost_model(graph, strategy, &remat_core::CostModel::H200)?;
        let (flops, traffic) = demand(&model);
        let plan = model.plan();
        println!(
            "{name:<18} {:<20} {:>12.1} {:>16.2} {:>14.1} {:>16}",
            strategy.to_string(),
            flops as f64 / 1e9,
            traffic as f64 / 1e9,
            plan.predicted_peak() as f64 / 1048576.0,
            format!("{:.1} ({})", plan.predicted_host_peak() as f64 / 1048576.0, plan.offloaded().len())
        );
    }
    Ok(())
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    if std::env::args().any(|a| a == "--demand") {
        if let Err(e) = print_demand() {
            eprintln!("gpu_bench --demand failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    let mut g = match CudaBackend::new(0) {
        Ok(g) => g,
        Err(e) => {
            println!("skipped: {e}");
            if require::required("cuda") {
                std::process::exit(2);
            }
            return;
        }
    };
    if let Err(e) = bench(&mut g, quick) {
        eprintln!("gpu_bench failed: {e}");
        std::process::exit(1);
    }
}

fn bench(g: &mut CudaBackend, quick: bool) -> Result<()> {
    let reps = if quick { 3 } else { 10 };
    println!("device: {} (sm_{})", g.device_name(), g.compute_capability());

    // Ceilings, measured in this run.
    let n = 256usize << 20; // 256 Mi bf16 elements = 512 MiB
    let big = g.upload(&random(&[n / 1024, 1024], DType::BF16, 3))?;
    let big2 = g.upload(&random(&[n / 1024, 1024], DType::BF16, 4))?;
    let bytes = (n * 2) as f64;
    let copy = time(g, reps, |g| exec(g, &Op::Reshape { shape: vec![n] }, &[&big], 0).map(|_| ()))?;
    let copy_bw = 2.0 * bytes / copy;
    let s = 8192usize;
    let (a, b) = (g.upload(&random(&[s, s], DType::BF16, 5))?, g.upload(&random(&[s, s], DType::BF16, 6))?);
    let t = time(g, reps, |g| exec(g, &Op::Matmul, &[&a, &b], 0).map(|_| ()))?;
    let tflops = 2.0 * (s as f64).powi(3) / t / 1e12;
    drop((a, b));
    println!("\nceilings: device copy {:.0} GB/s (read + write), bf16 GEMM {s}^3 {:.0} TFLOP/s", copy_bw / 1e9, tflops);
    match fp8_gemm(g, s, reps) {
        Ok(t) => println!("fp8 scaled_matmul {s}^3 (e4m3, f32 out, B transposed per call): {:.0} TFLOP/s", t),
        Err(e) => println!("fp8 scaled_matmul {s}^3: not measured: {e}"),
    }

    println!("\n{:<28} {:>10} {:>8}", "kernel (bf16, 512 MiB)", "GB/s", "vs copy");
    let kernels: Vec<(&str, Op, usize, f64)> = vec![
        ("gelu", Op::Unary(UnaryOp::Gelu), 1, 2.0),
        ("add", Op::Binary(BinaryOp::Add), 2, 3.0),
        ("dropout p=0.1", Op::Dropout { p: 0.1, seed: 1, key: 2 }, 1, 2.0),
        ("cast -> f32", Op::Cast { dtype: DType::F32 }, 1, 3.0),
        ("softmax rows of 1024", Op::Softmax, 1, 2.0),
        ("layer_norm rows of 1024", Op::LayerNorm { eps: 1e-5 }, 1, 2.0),
        ("sum over last axis", Op::Reduce { op: ReduceOp::Sum, axes: vec![1], keepdim: false }, 1, 1.0),
        ("sum over first axis", Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdim: false }, 1, 1.0),
        ("transpose [n/1024,1024]", Op::Transpose { perm: vec![1, 0] }, 1, 2.0),
    ];
    for (name, op, arity, traffic) in kernels {
        let ins: Vec<&CudaBuffer> = if arity == 1 { vec![&big] } else { vec![&big, &big2] };
        let t = time(g, reps, |g| exec(g, &op, &ins, 0).map(|_| ()))?;
        let bw = traffic * bytes / t;
        println!("{name:<28} {:>10.0} {:>7.0}%", bw / 1e9, 100.0 * bw / copy_bw);
    }
    drop((big, big2));

    let cfg = block_config();
    let policies = policies(&cfg)?;
    println!(
        "\nGPT block: batch {}, seq {}, d_model {}, {} heads, vocab {}, dropout {}, {}",
        cfg.batch, cfg.seq, cfg.d_model, cfg.heads, cfg.vocab, cfg.dropout, cfg.dtype
    );
    println!(
        "{:<18} {:<20} {:>10} {:>10} {:>10} {:>9} {:>9} {:>12} {:>12} {:>12} {:>9} {:>12}",
        "policy",
        "strategy",
        "step ms",
        "e2e ms",
        "GEMMs ms",
        "step/GEMM",
        "bound",
        "peak MiB",
        "predicted",
        "pool MiB",
        "vs none",
        "host MiB (n)"
    );
    let mut base: Option<f64> = None;
    for (name, strategy, graph) in policies {
        let r = run_policy(g, name, strategy, graph, &cfg, reps)?;
        let vs = base.map_or(1.0, |b| r.step / b);
        base.get_or_insert(r.step);
        println!(
            "{:<18} {:<20} {:>10.2} {:>10.2} {:>10.2} {:>8.2}x {:>8.2}x {:>12.1} {:>12.1} {:>12.1} {:>8.2}x {:>12}",
            r.name,
            r.strategy,
            r.step * 1e3,
            r.e2e * 1e3,
            r.gemms * 1e3,
            r.step / r.gemms,
            (r.gemms + r.traffic as f64 / copy_bw) / r.gemms,
            r.peak as f64 / 1048576.0,
            r.predicted as f64 / 1048576.0,
            r.pool as f64 / 1048576.0,
            vs,
            format!("{:.1} ({})", r.host as f64 / 1048576.0, r.offloaded)
        );
    }
    println!(
        "\ntargets: no checkpointing step/GEMM <= 1.3x; elementwise/reduction >= 70% of copy; full recompute <= 1.4x and \
         save matmuls <= 1.15x no checkpointing. `bound` is the least step/GEMM op-by-op kernels can reach: (GEMM \
         time + bytes the other ops move / copy bandwidth) / GEMM time. `peak` is the metered buffers (equals \
         `predicted`); `pool` adds the {} MiB cuBLAS workspace and transient scratch; `host` is the measured host \
         peak of offloaded copies (equals the plan's) and `n` the number of offloaded values.",
        remat_cuda::CUBLAS_WORKSPACE >> 20
    );
    training_state(g, &cfg, reps)
}

/// A training step of the GPT block two ways, measured in the same run: host parameters
/// (`Model::step` uploads every parameter and downloads every gradient, then AdamW on the host)
/// against `TrainState` (parameters, AdamW's f32 moments and the gradients stay on the device;
/// the batch goes up, the loss comes back), with each step's transfers by the backend's counters
/// and the resident step's predicted and measured peaks (optimizer state and update included).
fn training_state(g: &mut CudaBackend, cfg: &zoo::GptConfig, reps: usize) -> Result<()> {
    use remat_core::{AdamW, Optimizer, TrainOptions, TrainState};
    let model = Model::with_cost_model(zoo::gpt(cfg)?, Strategy::MinCut, &g.cost_model())?;
    let feeds = zoo::synthetic_tokens(cfg, 0)?;
    let mut params = model.init_params(0)?;
    let mut host_opt = AdamW::new(1e-4);
    let mut host_step = |g: &mut CudaBackend| -> Result<remat_core::TransferStats> {
        let out = model.step(g, &params, &feeds)?;
        host_opt.step(&mut params, &out.grads)?;
        Ok(out.transfers)
    };
    let host_moved = host_step(g)?; // warm-up
    let host_time = time(g, reps, |g| host_step(g).map(|_| ()))?;
    let options = TrainOptions::from(&AdamW::new(1e-4)).master_weights(DType::F32);
    let mut state = TrainState::new(g, &model, &model.init_params(0)?, options)?;
    let out = state.step(g, &model, &feeds, 0)?; // warm-up
    let resident_time = time(g, reps, |g| state.step(g, &model, &feeds, 0).map(|_| ()))?;
    println!(
        "
training step of the GPT block, mincut, AdamW ({} parameters in {}):",
        model.init_params(0)?.len(),
        cfg.dtype
    );
    println!(
        "{:<34} {:>10} {:>16} {:>16} {:>12} {:>12}",
        "", "step ms", "to device B", "to host B", "peak MiB", "predicted"
    );
    println!(
        "{:<34} {:>10.2} {:>16} {:>16} {:>12} {:>12}",
        "host params + host AdamW (f64)",
        host_time * 1e3,
        host_moved.to_device_bytes,
        host_moved.to_host_bytes,
        "-",
        "-"
    );
    println!(
        "{:<34} {:>10.2} {:>16} {:>16} {:>12.1} {:>12.1}",
        "TrainState (f32 masters, moments)",
        resident_time * 1e3,
        out.transfers.to_device_bytes,
        out.transfers.to_host_bytes,
        out.measured_peak as f64 / 1048576.0,
        out.predicted_peak as f64 / 1048576.0
    );
    println!("resident / host step time: {:.2}x", resident_time / host_time);
    Ok(())
}
