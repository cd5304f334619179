//! `#[save]` / `#[recompute]` / `#[offload]` on `let`s, in nested blocks, with names and patterns.
use remat::prelude::*;

#[checkpoint(policy = save_names("attn"))]
fn block(x: &Tensor, w: &Tensor, flag: bool) -> Tensor {
    #[save]
    let h = x.matmul(w);
    #[recompute]
    let a = h.softmax().name("attn");
    let out = if flag {
        #[save]
        #[allow(unused_mut)]
        let mut t: Tensor = a.gelu();
        t
    } else {
        a.relu()
    };
    #[recompute]
    let (p, q) = (out.exp(), &out.sin());
    #[offload]
    let o = p.gelu();
    o + q
}

fn main() {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[3, 3], DType::F32);
    let y = block(&x, &w, true);
    assert_eq!(y.tag().unwrap().policy, Policy::PreferRecompute);
    assert_eq!(trace.error(), None);
}
