use remat::prelude::*;

#[checkpoint(polcy = save_all, policy = save(matmull, reshape), budget = 2.0, policy = save_all)]
fn f(x: &Tensor, w: &Tensor) -> Tensor {
    #[save]
    #[recompute]
    let h = x.matmul(w);
    h
}

fn main() {}
