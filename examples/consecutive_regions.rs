//! The second motivating failure (DESIGN.md §1): two back-to-back regions `g(f(x))`, every op
//! in both tagged "recompute". Knowing each node's region, remat saves the tensor crossing from
//! f into g — as eager checkpointing would — and recomputes the inside of each region: in the
//! backward 18 matmuls (3 recomputed and 6 gradient GEMMs per region) and only the first `cos`
//! of each region.
//!
//! `cargo run --release --example consecutive_regions`

use remat::prelude::*;
use remat::Step;

/// `cos → 3 chained square matmuls (t = t·t) → cos`, all recomputed.
#[checkpoint(policy = recompute_all)]
fn chain(x: &Tensor) -> Tensor {
    let mut t = x.cos();
    for _ in 0..3 {
        t = t.matmul(&t);
    }
    t.cos()
}

fn run(n: usize) -> Result<(), remat::Error> {
    let trace = Trace::new();
    let x = trace.param("x", &[n, n], DType::F32);
    let between = chain(&(&x * 0.1));
    let loss = chain(&between).sum_all();
    let graph = trace.finish(&loss)?;
    assert!(graph.untagged_inside_regions().is_empty(), "every op inside a region is tagged");
    let model = Model::new(graph)?;
    let out = model.step(&mut CpuBackend::new(), &model.init_params(0)?, &Feeds::new())?;
    let partition = model.partition().expect("with_strategy partitions");
    println!("{}", model.report(Some(out.measured_peak)).unwrap_or_default());
    let g = model.joint().graph();
    let count = |kind: &str| {
        model
            .plan()
            .backward()
            .iter()
            .filter(|s| matches!(s, Step::Compute(id) | Step::Recompute(id) if g.node(*id).op.name() == kind))
            .count()
    };
    let id = between.id().expect("traced without errors");
    println!("f's output {id}: saved = {}", partition.saved[id.index()]);
    println!(
        "backward: {} matmuls (recomputed and gradient), {} cos",
        count("matmul") + count("matmul_t"),
        count("cos")
    );
    Ok(())
}

#[cfg_attr(test, allow(dead_code))]
fn main() {
    if let Err(e) = run(4) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[test]
fn quick() {
    run(4).unwrap();
}
