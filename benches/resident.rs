//! A training step with the state on the host against one with it on the backend (issue 49):
//! `Model::step` (every parameter uploaded, every gradient downloaded) followed by the host
//! `AdamW` (f64 state), against `TrainState::step` (parameters, f32 moments and gradients stay
//! in the CPU backend's buffers; the update is the backend's kernel). A 2-layer GPT at d_model
//! 64, 256 and 512, both measured in the same run. Run with `cargo bench --bench resident`.

use criterion::{criterion_group, criterion_main, Criterion};
use remat::{AdamW, CpuBackend, DType, Model, Optimizer, TrainOptions, TrainState};
use remat_zoo::{self as zoo, GptConfig};
use std::hint::black_box;

fn optimizer_step(c: &mut Criterion) {
    // As the examples do: freed memory is kept, so neither path faults its pages in afresh.
    remat::keep_freed_memory();
    for d_model in [64, 256, 512] {
        let cfg =
            GptConfig { batch: 8, seq: 64, d_model, heads: 4, layers: 2, vocab: 64, dropout: 0.1, dtype: DType::F32 };
        let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
        let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
        let mut group = c.benchmark_group(format!("training_step/d{d_model}"));
        group.sample_size(10);
        let mut cpu = CpuBackend::new();
        let mut params = model.init_params(0).unwrap();
        let mut opt = AdamW::new(1e-4);
        group.bench_function("host params + host AdamW", |bench| {
            bench.iter(|| {
                let out = model.step(&mut cpu, &params, &feeds).unwrap();
                opt.step(&mut params, &out.grads).unwrap();
                black_box(out.loss)
            })
        });
        let mut cpu = CpuBackend::new();
        let options = TrainOptions::from(&AdamW::new(1e-4));
        let mut state = TrainState::new(&mut cpu, &model, &model.init_params(0).unwrap(), options).unwrap();
        group.bench_function("TrainState (resident)", |bench| {
            bench.iter(|| black_box(state.step(&mut cpu, &model, &feeds, 0).unwrap().loss))
        });
        group.finish();
    }
}

criterion_group!(benches, optimizer_step);
criterion_main!(benches);
