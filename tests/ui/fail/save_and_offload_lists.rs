use remat::prelude::*;

// An op kind has one policy: saved on the device or offloaded to the host, not both.
#[checkpoint(policy = rules(must_save = [matmul, gelu], prefer_offload = [matmul]))]
fn f(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).gelu()
}

#[checkpoint(policy = rules(must_offload = [softmax], prefer_save = [softmax]))]
fn g(x: &Tensor) -> Tensor {
    x.softmax()
}

fn main() {}
