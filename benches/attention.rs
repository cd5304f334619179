//! Fused attention (`sdpa`) against the unfused composition `softmax(q·kᵀ·s + mask)·v`, one
//! forward + backward step each at seq 128–1024, on the CPU: median step time and measured peak
//! bytes, with their ratios, measured in the same run.
//!
//! `cargo bench --bench attention` (add `-- --quick` for one small size, `-- --seqs 128,256`).

use remat::{CpuBackend, DType, Feeds, HostTensor, Model, Tensor, Trace};
use std::time::Instant;

const BATCH: usize = 1;
const HEADS: usize = 4;
const HEAD_DIM: usize = 64;

/// `loss = sum(attention(q, k, v) * r)` with q, k, v parameters `[1, 4, t, 64]`.
fn model(t: usize, fused: bool) -> Model {
    let trace = Trace::new();
    let shape = [BATCH, HEADS, t, HEAD_DIM];
    let (q, k, v) = (
        trace.param("q", &shape, DType::F32),
        trace.param("k", &shape, DType::F32),
        trace.param("v", &shape, DType::F32),
    );
    let scale = 1.0 / (HEAD_DIM as f64).sqrt();
    let y = if fused {
        Tensor::scaled_dot_product_attention(&q, &k, &v, true, scale)
    } else {
        let rows = trace.arange(0.0, 1.0, t, DType::I64).reshape(&[t, 1]);
        let cols = trace.arange(0.0, 1.0, t, DType::I64);
        let scores = (&q * scale).matmul(&k.t()).masked_fill(&cols.gt(&rows), -1e9);
        scores.softmax().matmul(&v)
    };
    let r = trace.input("r", &shape, DType::F32);
    Model::new(trace.finish(&(&y * &r).sum_all()).expect("traces")).expect("differentiates")
}

/// Median step seconds and the measured peak bytes of `reps` steps.
fn measure(t: usize, fused: bool, reps: usize) -> (f64, usize) {
    let model = model(t, fused);
    let params = model.init_params(0).unwrap();
    let n = BATCH * HEADS * t * HEAD_DIM;
    let r: Vec<f32> = (0..n).map(|i| ((i * 7919) % 13) as f32 / 13.0 - 0.5).collect();
    let feeds = Feeds::new().with("r", HostTensor::f32([BATCH, HEADS, t, HEAD_DIM], r).expect("n values"));
    let mut cpu = CpuBackend::new();
    let mut times = Vec::new();
    let mut peak = 0;
    for _ in 0..reps {
        let start = Instant::now();
        let out = model.step(&mut cpu, &params, &feeds).expect("steps");
        times.push(start.elapsed().as_secs_f64());
        peak = out.measured_peak;
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], peak)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let seqs: Vec<usize> = match args.iter().position(|a| a == "--seqs") {
        Some(i) => args[i + 1].split(',').map(|s| s.parse().expect("a sequence length")).collect(),
        None if quick => vec![64],
        None => vec![128, 256, 512, 1024],
    };
    let reps = if quick { 1 } else { 5 };
    println!(
        "causal attention, batch {BATCH}, {HEADS} heads, head dim {HEAD_DIM}, f32, CPU; forward + backward per step"
    );
    println!(
        "{:>6} {:>12} {:>12} {:>8} {:>14} {:>14} {:>8}",
        "seq", "fused ms", "unfused ms", "time", "fused peak", "unfused peak", "peak"
    );
    for t in seqs {
        let (ft, fp) = measure(t, true, reps);
        let (ut, up) = measure(t, false, reps);
        println!(
            "{t:>6} {:>12.2} {:>12.2} {:>7.2}x {:>12.1}KiB {:>12.1}KiB {:>7.2}x",
            ft * 1e3,
            ut * 1e3,
            ft / ut,
            fp as f64 / 1024.0,
            up as f64 / 1024.0,
            fp as f64 / up as f64
        );
    }
    println!("(median of {reps} steps; ratios are fused / unfused, measured in this run; peaks include q, k, v)");
}
