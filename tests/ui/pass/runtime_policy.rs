use remat::prelude::*;

#[checkpoint(policy = arg(policy))]
fn by_ref(policy: &RegionPolicy, x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).gelu()
}

#[checkpoint(policy = arg(policy), budget = 0.25)]
fn by_value(x: &Tensor, policy: RegionPolicy) -> Tensor {
    x.exp()
}

struct Layer {
    w: Tensor,
}

impl Layer {
    #[checkpoint(policy = arg(policy))]
    fn forward(&self, x: &Tensor, policy: &RegionPolicy) -> Tensor {
        x.matmul(&self.w).relu()
    }
}

const SAVE_MATMULS: RegionPolicy = policy!(save(matmul));
static NAMES: RegionPolicy = policy!(save_names("h"), budget = 0.5);

fn main() {
    let trace = Trace::new();
    let x = trace.input("x", &[2, 2], DType::F32);
    let w = trace.param("w", &[2, 2], DType::F32);
    for p in [SAVE_MATMULS, NAMES, policy!(policy = rules(must_recompute = [gelu], default = prefer_save))] {
        let _ = by_ref(&p, &x, &w);
        let _ = by_value(&x, p);
        let _ = Layer { w: w.clone() }.forward(&x, &p);
    }
    let parsed: RegionPolicy = "save(matmul)".parse().unwrap();
    assert_eq!(parsed, SAVE_MATMULS);
}
