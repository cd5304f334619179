use remat::prelude::*;

#[checkpoint(policy = save(matmull))]
fn f(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w)
}

fn main() {}
