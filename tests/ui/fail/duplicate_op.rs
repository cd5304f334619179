use remat::prelude::*;

#[checkpoint(policy = save(matmul, gelu, matmul))]
fn f(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).gelu()
}

fn main() {}
