use remat::prelude::*;

#[checkpoint]
fn f(x: &Tensor) -> Tensor {
    #[save]
    x.exp();
    x.sin()
}

fn main() {}
