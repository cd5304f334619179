use remat::prelude::*;

#[checkpoint(policy = arg(polcy))]
fn ffn(policy: &RegionPolicy, x: &Tensor) -> Tensor {
    let _ = policy;
    x.gelu()
}

#[checkpoint(policy = arg(p))]
fn attention(x: &Tensor) -> Tensor {
    x.softmax()
}

#[checkpoint(policy = arg("policy"))]
fn quoted(policy: RegionPolicy, x: &Tensor) -> Tensor {
    let _ = policy;
    x.exp()
}

fn main() {}
