//! Whole models traced, differentiated, planned and executed on the CPU.

use remat_core::{
    AdamW, Backend, CpuBackend, DType, Feeds, Graph, HostTensor, Model, Optimizer, Params, Sgd, Step, Trace,
};
use remat_zoo::{self as zoo, GptConfig, MlpConfig};

fn mlp_cfg() -> MlpConfig {
    MlpConfig { batch: 64, widths: vec![16, 32, 4] }
}

fn gpt_cfg(dropout: f64) -> GptConfig {
    GptConfig { batch: 4, seq: 16, d_model: 32, heads: 4, layers: 1, vocab: 16, dropout, dtype: DType::F32 }
}

/// Trains `model` for `steps` steps; returns the first and last losses.
fn train(model: &Model, opt: &mut dyn Optimizer, steps: u64, feeds: impl Fn(u64) -> Feeds) -> (f64, f64) {
    let mut cpu = CpuBackend::new();
    let mut params = model.init_params(1).unwrap();
    let mut losses = Vec::new();
    for step in 0..steps {
        let out = model.step_seeded(&mut cpu, &params, &feeds(step), step).unwrap();
        assert!(out.loss.is_finite(), "loss diverged at step {step}");
        opt.step(&mut params, &out.grads).unwrap();
        losses.push(out.loss);
    }
    (losses[0], *losses.last().unwrap())
}

#[test]
fn mlp_learns_with_sgd() {
    let cfg = mlp_cfg();
    let model = Model::new(zoo::mlp(&cfg).unwrap()).unwrap();
    let (first, last) = train(&model, &mut Sgd::new(0.5), 50, |s| zoo::mlp_feeds(&cfg, s % 4).unwrap());
    // Stated margin: 50 SGD steps at least halve the loss (it starts near ln 4 = 1.39).
    assert!(last < 0.5 * first, "loss {first} -> {last}");
}

#[test]
fn transformer_block_learns_with_sgd() {
    let cfg = gpt_cfg(0.0);
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let (first, last) =
        train(&model, &mut Sgd::new(0.1).with_momentum(0.9), 50, |s| zoo::synthetic_tokens(&cfg, s).unwrap());
    // Stated margin: from about ln 16 = 2.77, 50 SGD steps take at least 30 % off the loss.
    assert!(last < 0.7 * first, "loss {first} -> {last}");
}

#[test]
fn transformer_block_learns_with_adamw_and_dropout() {
    let cfg = gpt_cfg(0.1);
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let (first, last) = train(&model, &mut AdamW::new(3e-3), 50, |s| zoo::synthetic_tokens(&cfg, s).unwrap());
    assert!(last < 0.7 * first, "loss {first} -> {last}");
}

/// Saves every `keep_every`-th computed value the backward reads; the rest are recomputed.
fn sparse_saves(model_graph: Graph, keep_every: usize) -> Model {
    Model::with_saved(model_graph, |joint| {
        let mut reads = joint.backward_reads();
        let mut k = 0;
        for (i, r) in reads.iter_mut().enumerate() {
            if *r && !joint.graph().nodes()[i].op.info().leaf {
                *r = k % keep_every == 0;
                k += 1;
            }
        }
        reads
    })
    .unwrap()
}

fn models_under_test() -> Vec<(&'static str, Graph, Feeds)> {
    let mlp = mlp_cfg();
    let gpt = gpt_cfg(0.0);
    let gpt_drop = gpt_cfg(0.2);
    let two_layers = GptConfig { layers: 2, ..gpt_cfg(0.1) };
    let bf16 = GptConfig { dtype: DType::BF16, ..gpt_cfg(0.0) };
    vec![
        ("mlp", zoo::mlp(&mlp).unwrap(), zoo::mlp_feeds(&mlp, 0).unwrap()),
        ("gpt", zoo::gpt(&gpt).unwrap(), zoo::synthetic_tokens(&gpt, 0).unwrap()),
        ("gpt+dropout", zoo::gpt(&gpt_drop).unwrap(), zoo::synthetic_tokens(&gpt_drop, 0).unwrap()),
        ("gpt 2 layers", zoo::gpt(&two_layers).unwrap(), zoo::synthetic_tokens(&two_layers, 0).unwrap()),
        ("gpt bf16", zoo::gpt(&bf16).unwrap(), zoo::synthetic_tokens(&bf16, 0).unwrap()),
    ]
}

#[test]
fn measured_peak_equals_predicted_peak() {
    for (name, graph, feeds) in models_under_test() {
        for keep_every in [1, 2, 3, 1000] {
            let model = sparse_saves(graph.clone(), keep_every);
            let params = model.init_params(3).unwrap();
            let out = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, 7).unwrap();
            assert_eq!(out.measured_peak, out.predicted_peak, "{name}, saving every {keep_every}-th value");
            assert!(out.predicted_peak > model.plan().resident_bytes(), "{name}: the plan holds activations");
        }
    }
}

#[test]
fn recomputing_gives_bitwise_identical_gradients() {
    for (name, graph, feeds) in models_under_test() {
        let save_all = Model::new(graph.clone()).unwrap();
        let params = save_all.init_params(5).unwrap();
        let reference = save_all.step_seeded(&mut CpuBackend::new(), &params, &feeds, 11).unwrap();
        for keep_every in [2, 1000] {
            let model = sparse_saves(graph.clone(), keep_every);
            assert!(!model.plan().recomputed().is_empty(), "{name}: something is recomputed");
            let out = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, 11).unwrap();
            assert_eq!(out.loss.to_bits(), reference.loss.to_bits(), "{name}");
            for (g, r) in out.grads.iter().zip(&reference.grads) {
                assert_eq!(g, r, "{name}: gradients differ when saving every {keep_every}-th value");
            }
            assert!(model.plan().saved_bytes() < save_all.plan().saved_bytes(), "{name}: fewer bytes saved");
        }
    }
}

/// The thread count is the backend's: every count computes the same bits (work is split only
/// where each element is computed the same way whatever the split).
#[test]
fn every_thread_count_gives_the_same_bits() {
    for (name, graph, feeds) in models_under_test() {
        let model = Model::new(graph).unwrap();
        let params = model.init_params(5).unwrap();
        assert_same_bits_on_every_thread_count(name, &model, &params, &feeds, 3);
    }
    assert_eq!(CpuBackend::with_threads(0).threads(), 1);
}

/// A step of `model` under `seed` gives the loss and gradients of one thread, to the bit, on 2,
/// 3 and 7 threads.
fn assert_same_bits_on_every_thread_count(name: &str, model: &Model, params: &Params, feeds: &Feeds, seed: u64) {
    let one = model.step_seeded(&mut CpuBackend::with_threads(1), params, feeds, seed).unwrap();
    for threads in [2, 3, 7] {
        let mut cpu = CpuBackend::with_threads(threads);
        assert_eq!(cpu.threads(), threads);
        let out = model.step_seeded(&mut cpu, params, feeds, seed).unwrap();
        assert_eq!(out.loss.to_bits(), one.loss.to_bits(), "{name} on {threads} threads");
        assert_eq!(out.grads, one.grads, "{name} on {threads} threads");
    }
}

/// The gpt example's step (the threads bench's d64 model, with dropout): large enough that its
/// products, attention, norms, elementwise loops and dropout split into many chunks; the loss
/// and every gradient are the same bits on 1, 2, 3 and 7 threads.
#[test]
fn the_gpt_steps_gradients_are_the_same_bits_on_every_thread_count() {
    let cfg =
        GptConfig { batch: 8, seq: 32, d_model: 64, heads: 4, layers: 2, vocab: 32, dropout: 0.1, dtype: DType::F32 };
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let params = model.init_params(1).unwrap();
    let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
    assert_same_bits_on_every_thread_count("gpt d64", &model, &params, &feeds, 2);
}

#[test]
fn recompute_is_placed_before_first_use_and_values_are_freed() {
    let graph = zoo::mlp(&mlp_cfg()).unwrap();
    let model = sparse_saves(graph, 1000);
    let plan = model.plan();
    let g = model.joint().graph();
    let mut live = vec![false; g.len()];
    for &r in plan.resident() {
        live[r.index()] = true;
    }
    for step in plan.steps() {
        match *step {
            Step::Compute(id) | Step::Recompute(id) => {
                for i in &g.node(id).inputs {
                    assert!(live[i.index()], "{id} reads {i} which is not live");
                }
                live[id.index()] = true;
            }
            Step::Free(id) => {
                assert!(live[id.index()], "{id} freed twice");
                live[id.index()] = false;
            }
            // The reshape takes over its input's buffer: the input must be live, and is gone.
            Step::Alias(id) => {
                let input = g.node(id).inputs[0];
                assert!(live[input.index()], "{id} takes over {input} which is not live");
                live[input.index()] = false;
                live[id.index()] = true;
            }
            Step::Offload(_) | Step::Fetch(_) => unreachable!("this plan offloads nothing"),
        }
    }
    let still_live: Vec<usize> = (0..g.len()).filter(|&i| live[i]).collect();
    let mut expected: Vec<usize> = plan.resident().iter().chain(plan.kept()).map(|i| i.index()).collect();
    expected.sort();
    assert_eq!(still_live, expected, "only resident and returned values outlive the programs");
    // Each recompute comes right before the backward step that first needs it (or another
    // recompute feeding it), never earlier in the backward.
    let backward = plan.backward();
    for (pos, step) in backward.iter().enumerate() {
        if let Step::Recompute(_) = step {
            let next = backward[pos + 1..].iter().find(|s| !matches!(s, Step::Free(_)));
            assert!(next.is_some(), "a recompute is followed by its use");
        }
    }
}

#[test]
fn dropout_mask_is_reproduced_by_recompute_and_changes_with_the_run_seed() {
    let trace = Trace::new();
    let x = trace.param("x", &[8, 8], DType::F32);
    let y = x.exp().dropout(0.5, 3).sin();
    let graph = trace.finish(&y.sum_all()).unwrap();
    let save = Model::new(graph.clone()).unwrap();
    let recompute = Model::with_saved(graph, |j| vec![false; j.n_forward()]).unwrap();
    assert!(recompute.plan().recomputed().iter().any(|&i| recompute.joint().graph().node(i).op.name() == "dropout"));
    let params = save.init_params(0).unwrap();
    let feeds = Feeds::new();
    let a = save.step_seeded(&mut CpuBackend::new(), &params, &feeds, 1).unwrap();
    let b = recompute.step_seeded(&mut CpuBackend::new(), &params, &feeds, 1).unwrap();
    assert_eq!(a.grads, b.grads);
    let zeros = |g: &HostTensor| g.to_f32_vec().iter().filter(|&&v| v == 0.0).count();
    assert!((16..48).contains(&zeros(&a.grads[0])), "about half the mask drops");
    let c = save.step_seeded(&mut CpuBackend::new(), &params, &feeds, 2).unwrap();
    assert_ne!(a.grads, c.grads, "another run seed draws another mask");
}

#[test]
fn the_backend_ends_a_step_holding_nothing() {
    let cfg = gpt_cfg(0.0);
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let mut cpu = CpuBackend::new();
    let params = model.init_params(0).unwrap();
    model.step(&mut cpu, &params, &zoo::synthetic_tokens(&cfg, 0).unwrap()).unwrap();
    assert_eq!(cpu.memory().live_bytes, 0);
}

#[test]
fn dump_lists_every_node_with_shapes() {
    let graph = zoo::mlp(&MlpConfig { batch: 2, widths: vec![3, 4, 2] }).unwrap();
    let dump = graph.dump();
    assert!(dump.contains("= input() [2, 3] f32 name=x"), "{dump}");
    assert!(dump.contains("= matmul(%0, %2) [2, 4] f32"), "{dump}");
    assert!(dump.contains("= cross_entropy("), "{dump}");
    assert_eq!(dump.lines().filter(|l| l.starts_with('%')).count(), graph.len());
}

/// The CPU backend without its own `reshape_owned`: the trait's default, which copies.
struct Copying(CpuBackend);

impl Backend for Copying {
    type Buffer = <CpuBackend as Backend>::Buffer;
    type Host = <CpuBackend as Backend>::Host;
    fn name(&self) -> String {
        "cpu (reshapes copy)".into()
    }
    fn upload(&mut self, t: &HostTensor) -> remat_core::Result<Self::Buffer> {
        self.0.upload(t)
    }
    fn download(&mut self, b: &Self::Buffer) -> remat_core::Result<HostTensor> {
        self.0.download(b)
    }
    fn execute(&mut self, call: &remat_core::KernelCall<'_>, x: &[&Self::Buffer]) -> remat_core::Result<Self::Buffer> {
        self.0.execute(call, x)
    }
    fn memory(&self) -> remat_core::MemoryStats {
        self.0.memory()
    }
    fn reset_peak(&mut self) {
        self.0.reset_peak()
    }
    fn offload(&mut self, b: &Self::Buffer) -> remat_core::Result<Self::Host> {
        self.0.offload(b)
    }
    fn fetch(&mut self, h: Self::Host) -> remat_core::Result<Self::Buffer> {
        self.0.fetch(h)
    }
    fn host_memory(&self) -> remat_core::MemoryStats {
        self.0.host_memory()
    }

    fn transfers(&self) -> remat_core::TransferStats {
        self.0.transfers()
    }
}

#[test]
fn a_reshape_whose_input_dies_there_takes_over_its_buffer() {
    let cfg = gpt_cfg(0.1);
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let (plan, g) = (model.plan(), model.joint().graph());
    let steps: Vec<Step> = plan.steps().copied().collect();
    let aliases: Vec<usize> = (0..steps.len()).filter(|&k| matches!(steps[k], Step::Alias(_))).collect();
    assert!(aliases.len() >= 4, "the GPT's head splits and merges alias: {}", aliases.len());
    for &k in &aliases {
        let Step::Alias(id) = steps[k] else { unreachable!() };
        assert_eq!(g.node(id).op.name(), "reshape");
        // Until the input is computed again (a recompute makes a new buffer), nothing after the
        // alias reads, frees or offloads it: its buffer is the reshape's.
        let input = g.node(id).inputs[0];
        let redefines = |s: &Step| matches!(*s, Step::Compute(n) | Step::Recompute(n) | Step::Fetch(n) if n == input);
        let uses = |s: &Step| match *s {
            Step::Compute(n) | Step::Recompute(n) | Step::Alias(n) => g.node(n).inputs.contains(&input),
            Step::Free(n) | Step::Offload(n) => n == input,
            Step::Fetch(_) => false,
        };
        let until = steps[k + 1..].iter().position(redefines).map_or(steps.len(), |p| k + 1 + p);
        let bad = steps[k + 1..until].iter().find(|s| uses(s));
        assert!(bad.is_none(), "{input} is used by {bad:?} after {id} took it over");
        assert!(until < steps.len() || !plan.kept().contains(&input));
    }
    // The same step where reshapes copy (the trait's default): bitwise the same results, and
    // the measured peak is the plan's only when the reshape takes the buffer over.
    let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
    let params = model.init_params(2).unwrap();
    let taken = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, 3).unwrap();
    let copied = model.step_seeded(&mut Copying(CpuBackend::new()), &params, &feeds, 3).unwrap();
    assert_eq!(taken.loss.to_bits(), copied.loss.to_bits());
    assert_eq!(taken.grads, copied.grads);
    assert_eq!(taken.measured_peak, taken.predicted_peak);
    assert!(copied.measured_peak >= taken.measured_peak);
}
