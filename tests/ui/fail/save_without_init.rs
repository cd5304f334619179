use remat::prelude::*;

#[checkpoint]
fn f(x: &Tensor) -> Tensor {
    #[recompute]
    let h;
    h = x.exp();
    h
}

fn main() {}
