//! The first motivating failure (DESIGN.md §1): a float8 linear + relu + residual whose region
//! policy says "save matmuls, recompute everything else". PyTorch's partitioner saved the fp8
//! cast of the input, the transposed fp8 weight and two inverse scales anyway, because to a free
//! min-cut those were the cheapest bytes.
//!
//! With `#[checkpoint(policy = save(scaled_matmul))]` remat saves the matmul output, the
//! region's boundary values and what is resident anyway, and recomputes every cast, scale and
//! amax — under `Respect` and `MinCut` alike, since Prefer tags bind min-cut too. A generous
//! budget may save more, and the report says which Prefer tag it overrode. The run starts with
//! the same layer without a region, partitioned by min-cut on bytes alone, for contrast.
//!
//! `cargo run --release --example float8_linear`

use remat::prelude::*;
use remat::{Budget, Graph, Strategy};

/// Per-tensor fp8 quantisation: amax → scale → clamp → cast; returns the values and the
/// inverse scale `scaled_matmul` multiplies back in.
fn to_fp8(t: &Tensor) -> (Tensor, Tensor) {
    let amax = t.abs().amax(&[0, 1], false);
    let scale = amax.reciprocal() * 448.0;
    let q = (t * &scale).clamp(-448.0, 448.0).cast(DType::F8E4M3);
    (q, scale.reciprocal())
}

fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    let (xq, x_inv) = to_fp8(x);
    let (wq, w_inv) = to_fp8(w);
    let y = Tensor::scaled_matmul(&xq, &wq, &x_inv, &w_inv);
    &(&y + b).relu() + x
}

#[checkpoint(policy = save(scaled_matmul))]
fn linear_in_region(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    linear(x, w, b)
}

fn graph(with_region: bool, rows: usize, width: usize) -> Result<Graph, remat::Error> {
    let trace = Trace::new();
    let input = trace.input("input", &[rows, width], DType::F32);
    let (w0, b0) = (trace.param("w0", &[width, width], DType::F32), trace.param("b0", &[width], DType::F32));
    let w = trace.param("w", &[width, width], DType::F32);
    let b = trace.param("b", &[width], DType::F32);
    // The layer's input is an activation (not resident), as inside a real network.
    let x = &input.matmul(&w0) + &b0;
    let out = if with_region { linear_in_region(&x, &w, &b) } else { linear(&x, &w, &b) };
    trace.finish(&out.square().mean_all())
}

fn show(title: &str, graph: Graph, strategy: Strategy, rows: usize, width: usize) -> Result<Model, remat::Error> {
    let model = Model::with_strategy(graph, strategy)?;
    let xs: Vec<f32> = (0..rows * width).map(|i| ((i * 37 % 17) as f32 - 8.0) / 4.0).collect();
    let feeds = Feeds::new().with("input", HostTensor::f32([rows, width], xs)?);
    let out = model.step(&mut CpuBackend::new(), &model.init_params(0)?, &feeds)?;
    println!("== {title} ==");
    println!("{}", model.report(Some(out.measured_peak)).unwrap_or_default());
    Ok(model)
}

fn run(rows: usize, width: usize) -> Result<(), remat::Error> {
    show("no region, MinCut on bytes alone (for contrast)", graph(false, rows, width)?, Strategy::MinCut, rows, width)?;
    for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Fraction(1.0))] {
        let title = format!("#[checkpoint(policy = save(scaled_matmul))], {strategy}");
        show(&title, graph(true, rows, width)?, strategy, rows, width)?;
    }
    show(
        "the same region under a generous byte budget",
        graph(true, rows, width)?,
        Strategy::Budget(Budget::Bytes(1 << 30)),
        rows,
        width,
    )?;
    Ok(())
}

#[cfg_attr(test, allow(dead_code))]
fn main() {
    if let Err(e) = run(64, 128) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[test]
fn quick() {
    run(4, 8).unwrap();
    let g = graph(true, 4, 8).unwrap();
    assert_eq!(g.regions().len(), 1);
    assert_eq!(g.untagged_inside_regions(), vec![]);
}
