use remat::prelude::*;

#[checkpoint(policy = rules(must_sav = [matmul], default = save_all))]
fn f(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w)
}

fn main() {}
