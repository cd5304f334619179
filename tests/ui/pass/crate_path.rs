//! `crate = ".."` names remat by another path: a renamed import, or a module re-exporting it.
use remat::prelude::*;
use remat::RegionPolicy;

use remat as renamed;

/// Code that offers remat under its own name.
mod facade {
    pub use remat::*;
}

#[checkpoint(policy = save(matmul), crate = "renamed")]
fn renamed_import(x: &Tensor, w: &Tensor) -> Tensor {
    #[recompute]
    let h = x.matmul(w);
    h.gelu()
}

#[checkpoint(policy = arg(policy), budget = 0.5, crate = "crate::facade")]
fn through_a_module(policy: &RegionPolicy, x: &Tensor) -> Tensor {
    #[save]
    let e = x.exp();
    e.sin()
}

fn main() {
    let trace = Trace::new();
    let x = trace.input("x", &[2, 2], DType::F32);
    let w = trace.param("w", &[2, 2], DType::F32);
    let y = renamed_import(&x, &w);
    assert_eq!(y.tag().unwrap().policy, Policy::PreferRecompute);
    let z = through_a_module(&policy!(crate = "renamed", save_all), &x);
    assert_eq!(z.tag().unwrap().policy, Policy::PreferSave);
    let graph = trace.snapshot();
    let tagged: Vec<Policy> = graph.nodes().iter().filter_map(|n| n.tag.map(|t| t.policy)).collect();
    // matmul made must_recompute by `#[recompute]`, gelu, exp made must_save by `#[save]`, sin.
    assert_eq!(tagged, [Policy::MustRecompute, Policy::PreferRecompute, Policy::MustSave, Policy::PreferSave]);
    assert_eq!(graph.region(z.tag().unwrap().region).budget, Some(0.5));
    // `policy!` takes the same override, anywhere among its arguments.
    const BY_MODULE: RegionPolicy = policy!(save(matmul), budget = 0.25, crate = "crate::facade");
    assert_eq!(BY_MODULE, RegionPolicy::parse("save(matmul), budget = 0.25").unwrap());
}
