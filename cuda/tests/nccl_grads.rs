//! `NcclGradients` on one rank: `DataParallel::train_step_with` reducing on the GPU trains a small
//! GPT exactly as `TrainState::step` does on the same backend (the mean over one rank is the
//! gradient), in f32 and in bf16 with f32 master weights, and no gradient byte crosses to the host.
//! Skipped, saying why, without a GPU or without NCCL.
#![cfg(feature = "nccl")]

mod common;

use common::{gpu, require};
use remat_core::{AdamW, DType, Feeds, Model, Params, TrainOptions, TrainState};
use remat_cuda::{CudaBackend, NcclGradients};
use remat_dist::{DataParallel, Local};
use remat_zoo::{self as zoo, GptConfig};

fn cfg(dtype: DType) -> GptConfig {
    GptConfig { batch: 2, seq: 8, d_model: 16, heads: 2, layers: 2, vocab: 32, dropout: 0.1, dtype }
}

fn bits(p: &Params) -> Vec<Vec<u64>> {
    p.values().iter().map(|v| v.to_f64_vec().iter().map(|x| x.to_bits()).collect()).collect()
}

/// The reducer, or `None` after printing why NCCL is missing (any other failure fails the test).
fn nccl_reducer(g: &CudaBackend, bucket_bytes: usize) -> Option<NcclGradients> {
    match NcclGradients::new(g, &mut Local, bucket_bytes) {
        Ok(r) => Some(r),
        Err(e) if e.to_string().contains("NCCL (libnccl.so.2) was not found") => {
            require::skip("nccl", format!("no NCCL here: {e}"));
            None
        }
        Err(e) => panic!("NcclGradients::new on one rank: {e}"),
    }
}

/// Three steps of both paths from the same parameters on one backend.
fn one_rank_matches_the_plain_step(
    g: &mut CudaBackend,
    reducer: &mut NcclGradients,
    options: TrainOptions,
    dtype: DType,
) {
    let model = Model::new(zoo::gpt(&cfg(dtype)).unwrap()).unwrap();
    let start = model.init_params(5).unwrap();
    let mut plain = TrainState::new(g, &model, &start, options).unwrap();
    let mut reduced = TrainState::new(g, &model, &start, options).unwrap();
    let mut dp = DataParallel::new(Local).with_bucket_bytes(1000);
    let planned = dp.plan_comm(&model, &start);
    let sent_before = reducer.bytes_sent();
    for step in 0..3 {
        let feeds: Feeds = zoo::synthetic_tokens(&cfg(dtype), step).unwrap();
        let batch: usize = feeds.names().map(|n| feeds.get(n).unwrap().bytes()).sum();
        let want = plain.step(g, &model, &feeds, step).unwrap();
        let got = dp.train_step_with(&model, g, &mut reduced, &feeds, step, reducer).unwrap();
        assert_eq!(got.loss.to_bits(), want.loss.to_bits(), "{dtype} step {step}: losses differ");
        let moved = (got.local.transfers.to_device_bytes as usize, got.local.transfers.to_host_bytes);
        assert_eq!(moved, (batch, 4), "{dtype} step {step}: the batch in, the loss out, no gradient");
        assert_eq!(got.local.measured_peak, want.measured_peak, "{dtype} step {step}: the buckets are not metered");
        let stats = reducer.stats();
        assert_eq!(stats.buckets, planned.buckets.len(), "{dtype} step {step}: DataParallel's buckets");
        assert!(stats.buckets >= 2 && stats.buffer_peak_bytes > 0, "{dtype} step {step}: {stats:?}");
        assert_eq!(stats.bytes_sent, 0, "one rank sends nothing");
    }
    assert_eq!(reducer.bytes_sent(), sent_before);
    let (a, b) = (reduced.params(g).unwrap(), plain.params(g).unwrap());
    assert_eq!(bits(&a), bits(&b), "{dtype}: parameters differ from TrainState::step");
    assert_ne!(bits(&a), bits(&start), "{dtype}: the steps changed nothing");
}

#[test]
fn one_rank_reducing_on_the_gpu_is_the_plain_resident_step() {
    let Some(mut g) = gpu() else { return };
    let Some(mut reducer) = nccl_reducer(&g, 1000) else { return };
    let adamw = TrainOptions::from(&AdamW::new(1e-2));
    one_rank_matches_the_plain_step(&mut g, &mut reducer, adamw, DType::F32);
    one_rank_matches_the_plain_step(&mut g, &mut reducer, adamw.master_weights(DType::F32), DType::BF16);
}

/// A reducer belongs to the backend it was made on: another backend's gradients are refused
/// before anything is queued.
#[test]
fn another_backends_gradients_are_refused() {
    let Some(g) = gpu() else { return };
    let Some(mut reducer) = nccl_reducer(&g, 1000) else { return };
    let Some(mut other) = gpu() else { return };
    let model = Model::new(zoo::gpt(&cfg(DType::F32)).unwrap()).unwrap();
    let start = model.init_params(5).unwrap();
    let mut state = TrainState::new(&mut other, &model, &start, TrainOptions::from(&AdamW::new(1e-2))).unwrap();
    let feeds = zoo::synthetic_tokens(&cfg(DType::F32), 0).unwrap();
    let err = DataParallel::new(Local).train_step_with(&model, &mut other, &mut state, &feeds, 0, &mut reducer);
    let text = err.unwrap_err().to_string();
    assert!(text.contains("made for another CUDA backend"), "{text}");
}
