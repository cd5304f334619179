use remat::prelude::*;

#[checkpoint(policy = offload(matmul, reshape))]
fn f(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).reshape(&[12])
}

#[checkpoint(policy = rules(prefer_offload = [transpose]))]
fn g(x: &Tensor) -> Tensor {
    x.t()
}

fn main() {}
