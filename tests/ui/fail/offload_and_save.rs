use remat::prelude::*;

#[checkpoint]
fn f(x: &Tensor) -> Tensor {
    #[offload]
    #[save]
    let h = x.exp();
    h
}

#[checkpoint]
fn g(x: &Tensor) -> Tensor {
    #[offload]
    let t = x.t();
    t
}

fn main() {}
