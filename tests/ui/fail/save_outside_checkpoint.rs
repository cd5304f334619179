use remat::prelude::*;

fn f(x: &Tensor) -> Tensor {
    #[save]
    let h = x.exp();
    h
}

fn main() {}
