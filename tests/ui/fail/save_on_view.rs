use remat::prelude::*;

#[checkpoint]
fn f(x: &Tensor, w: &Tensor) -> Tensor {
    let h = x.matmul(w);
    #[save]
    let v = h.reshape(&[12]);
    #[save]
    let t = h.t().name("ht");
    v.exp() + t.sum_all()
}

fn main() {}
