use remat::prelude::*;

#[checkpoint(policy = rules(must_save = [matmul, gelu], must_recompute = [matmul]))]
fn f(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).gelu()
}

fn main() {}
