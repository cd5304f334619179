use remat::prelude::*;

#[checkpoint(polcy = save_all)]
fn f(x: &Tensor) -> Tensor {
    x.exp()
}

fn main() {}
