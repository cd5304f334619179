//! Tracing and planning `#[checkpoint]` functions nested 5 000, 10 000 and 20 000 levels deep (a
//! recursive checkpointed function, one op per level): the time of each phase and its ratio to
//! the shallowest depth. Linear work doubles with each doubling of the depth; the quadratic
//! region lookup this guards against (10 000 levels took 1.5 s to trace) quadrupled.
//!
//! ```sh
//! cargo bench --bench nesting
//! ```

use remat::prelude::*;
use remat::DType;
use std::time::Instant;

#[checkpoint]
fn level(x: &Tensor, depth: usize) -> Tensor {
    let h = x.tanh();
    if depth == 0 {
        h
    } else {
        level(&h, depth - 1)
    }
}

/// Seconds to trace `depth` levels, then to plan the model (`Model::new`, mincut).
fn run(depth: usize) -> (f64, f64) {
    let start = Instant::now();
    let trace = Trace::new();
    let x = trace.input("x", &[4], DType::F32);
    let w = trace.param("w", &[4], DType::F32);
    let out = level(&(&x * &w), depth - 1);
    let graph = trace.finish(&out.sum_all()).expect("the nested model traces");
    let traced = start.elapsed().as_secs_f64();
    assert_eq!(graph.regions().len(), depth);
    let start = Instant::now();
    Model::new(graph).expect("the nested model plans");
    (traced, start.elapsed().as_secs_f64())
}

fn main() {
    // Recursion 20 000 frames deep needs more than a default thread's stack.
    let worker = std::thread::Builder::new().stack_size(1 << 30).spawn(|| {
        println!("depth   trace s  ratio   plan s  ratio");
        let mut first = None;
        for depth in [5_000, 10_000, 20_000] {
            let (trace, plan) = run(depth);
            let (t0, p0) = *first.get_or_insert((trace, plan));
            println!("{depth:>6}  {trace:>7.3}  {:>5.2}  {plan:>7.3}  {:>5.2}", trace / t0, plan / p0);
        }
    });
    worker.expect("the thread starts").join().expect("the bench runs");
}
