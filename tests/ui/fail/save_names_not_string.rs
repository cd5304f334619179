use remat::prelude::*;

#[checkpoint(policy = save_names(42))]
fn f(x: &Tensor) -> Tensor {
    x.exp()
}

#[checkpoint(policy = save_names(attn))]
fn g(x: &Tensor) -> Tensor {
    x.exp().name("attn")
}

fn main() {}
