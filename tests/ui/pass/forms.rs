//! Every policy form, and `budget`, compile.
use remat::prelude::*;

#[checkpoint]
fn bare(x: &Tensor) -> Tensor {
    x.exp()
}

#[checkpoint(policy = recompute_all)]
fn recompute_all(x: &Tensor) -> Tensor {
    x.exp()
}

#[checkpoint(policy = save_all, budget = 0.5)]
fn save_all(x: &Tensor) -> Tensor {
    x.exp()
}

#[checkpoint(policy = save(matmul, gelu,))]
fn save(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).gelu()
}

#[checkpoint(budget = 0, policy = recompute(softmax, reshape))]
fn recompute(x: &Tensor) -> Tensor {
    x.softmax().reshape(&[12])
}

#[checkpoint(policy = save_names("attn", "h"))]
fn save_names(x: &Tensor) -> Tensor {
    x.exp().name("attn")
}

#[checkpoint(policy = rules(
    must_save = [matmul],
    prefer_save = [layer_norm],
    must_recompute = [gelu, reshape],
    prefer_recompute = [exp],
    default = prefer_save,
))]
fn rules(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).gelu().layer_norm(1e-5).exp()
}

#[checkpoint(policy = offload(matmul, gelu))]
fn offload(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).gelu()
}

#[checkpoint(policy = offload_names("ctx"), budget = 0.25)]
fn offload_names(x: &Tensor) -> Tensor {
    x.exp().name("ctx")
}

#[checkpoint(policy = rules(must_save = [matmul], must_offload = [gelu], prefer_offload = [exp], default = prefer_offload))]
fn offload_rules(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).gelu().exp()
}

#[checkpoint(policy = rules(default = must_recompute), budget = 1.0)]
fn rules_default(x: &Tensor) -> Tensor {
    x.exp()
}

fn main() {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[3, 3], DType::F32);
    let fs: [fn(&Tensor) -> Tensor; 7] =
        [bare, recompute_all, save_all, recompute, save_names, offload_names, rules_default];
    for f in fs {
        assert!(f(&x).tag().is_some());
    }
    assert!(save(&x, &w).tag().is_some());
    assert!(rules(&x, &w).tag().is_some());
    assert_eq!(offload(&x, &w).tag().unwrap().policy, Policy::MustOffload);
    assert_eq!(offload_names(&x).tag().unwrap().policy, Policy::MustOffload);
    assert_eq!(offload_rules(&x, &w).tag().unwrap().policy, Policy::PreferOffload);
}
