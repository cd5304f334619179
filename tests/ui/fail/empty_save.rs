use remat::prelude::*;

#[checkpoint(policy = save())]
fn f(x: &Tensor) -> Tensor {
    x.exp()
}

fn main() {}
