//! CPU baselines later work reports ratios against: one GEMM, and one training step of a
//! transformer block. Run with `cargo bench --bench step`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use remat::backend::{Backend, KernelCall};
use remat::{CpuBackend, DType, HostTensor, Model, NodeId, Op};
use remat_zoo::{self as zoo, GptConfig};
use std::hint::black_box;

fn gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemm");
    for n in [256usize, 512] {
        let mut cpu = CpuBackend::new();
        let a = cpu.upload(&HostTensor::full([n, n], 0.5, DType::F32).unwrap()).unwrap();
        let b = cpu.upload(&HostTensor::full([n, n], 0.25, DType::F32).unwrap()).unwrap();
        let metas = [(&[n, n][..], DType::F32), (&[n, n][..], DType::F32)];
        let out_shape = [n, n];
        let call = KernelCall::new(NodeId::new(0), &Op::Matmul, &metas, &out_shape, DType::F32, 0);
        group.throughput(Throughput::Elements(2 * (n * n * n) as u64));
        group.bench_function(format!("f32 {n}x{n}x{n} (elements = flops)"), |bench| {
            bench.iter(|| black_box(cpu.execute(&call, &[&a, &b]).unwrap()))
        });
    }
    group.finish();
}

fn train_step(c: &mut Criterion) {
    let cfg =
        GptConfig { batch: 8, seq: 64, d_model: 128, heads: 4, layers: 1, vocab: 64, dropout: 0.1, dtype: DType::F32 };
    let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let params = model.init_params(0).unwrap();
    let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
    let mut cpu = CpuBackend::new();
    let mut group = c.benchmark_group("train_step");
    group.sample_size(20);
    group.bench_function("gpt block b8 t64 d128 h4 f32", |bench| {
        bench.iter(|| black_box(model.step(&mut cpu, &params, &feeds).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, gemm, train_step);
criterion_main!(benches);
