use remat::prelude::*;

#[checkpoint]
fn f(x: &Tensor) -> Tensor {
    #[save]
    #[recompute]
    let h = x.exp();
    h
}

fn main() {}
