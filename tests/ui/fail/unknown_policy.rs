use remat::prelude::*;

#[checkpoint(policy = save_everything)]
fn f(x: &Tensor) -> Tensor {
    x.exp()
}

#[checkpoint(policy = sav_all)]
fn g(x: &Tensor) -> Tensor {
    x.exp()
}

fn main() {}
