use remat::prelude::*;

#[checkpoint(policy = save(relu_grad))]
fn f(x: &Tensor) -> Tensor {
    x.relu()
}

fn main() {}
