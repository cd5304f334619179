//! The README's 20-line example: an MLP whose hidden layer is checkpointed.
//!
//! `cargo run --release --example mlp`

use remat::prelude::*;

#[checkpoint(policy = save(matmul))]
fn hidden(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    (&x.matmul(w) + b).gelu()
}

#[cfg_attr(test, allow(dead_code))]
fn main() -> Result<(), remat::Error> {
    let trace = Trace::new();
    let (x, y) = (trace.input("x", &[64, 16], DType::F32), trace.input("y", &[64], DType::I64));
    let (w1, b1) = (trace.param("w1", &[16, 64], DType::F32), trace.param("b1", &[64], DType::F32));
    let w2 = trace.param("w2", &[64, 4], DType::F32);
    let loss = hidden(&x, &w1, &b1).matmul(&w2).cross_entropy(&y);
    let model = Model::new(trace.finish(&loss)?)?;
    let mut cpu = CpuBackend::new();
    let mut state = TrainState::new(&mut cpu, &model, &model.init_params(0)?, (&AdamW::new(1e-2)).into())?;
    let feeds = remat_zoo::mlp_feeds(&remat_zoo::MlpConfig { batch: 64, widths: vec![16, 4] }, 0)?;
    for step in 0..100 {
        let out = state.step(&mut cpu, &model, &feeds, step)?; // weights and AdamW's moments stay on the device
        if step % 25 == 0 || step == 99 {
            println!(
                "step {step:3}  loss {:.4}  peak {} B (predicted {} B)",
                out.loss, out.measured_peak, out.predicted_peak
            );
        }
    }
    Ok(())
}

#[test]
fn runs() {
    main().unwrap();
}
