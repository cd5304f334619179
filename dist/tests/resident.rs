//! Data parallelism from a training state on the backend (`DataParallel::train_step`): two
//! in-process ranks (threads) against the host path (`DataParallel::step` + the host AdamW,
//! f64 state) bit for bit, and one rank against `TrainState::step`, with the bytes a step moves.

mod common;

use common::job_owning;
use remat_core::{AdamW, CpuBackend, DType, Feeds, Model, Optimizer, Params, TrainOptions, TrainState};
use remat_dist::{DataParallel, Engine, Local};
use remat_zoo::{self as zoo, GptConfig};

/// The whole batch is 4 rows; each of 2 ranks runs 2.
fn cfg(batch: usize) -> GptConfig {
    GptConfig { batch, seq: 8, d_model: 16, heads: 2, layers: 2, vocab: 32, dropout: 0.1, dtype: DType::F32 }
}

fn bits(p: &Params) -> Vec<Vec<u64>> {
    p.values().iter().map(|v| v.to_f64_vec().iter().map(|x| x.to_bits()).collect()).collect()
}

/// What a rank ends with: the resident state's parameters and the host path's (bits), and
/// both losses of each step.
type RankEnd = (Vec<Vec<u64>>, Vec<Vec<u64>>, Vec<(u64, u64)>);

/// Per rank, after 3 steps: the resident state's parameters and the host path's, and the
/// losses of both.
fn two_ranks(rank: usize, engine: Engine) -> RankEnd {
    let model = Model::new(zoo::gpt(&cfg(2)).unwrap()).unwrap();
    let mut dp = DataParallel::new(engine).with_bucket_bytes(2000);
    let mut host_params = model.init_params(11).unwrap();
    dp.broadcast_params(&mut host_params).unwrap();
    let mut host_opt = AdamW::new(1e-2);
    let mut cpu = CpuBackend::new();
    let options = TrainOptions::from(&host_opt).state_dtype(DType::F64);
    let mut state = TrainState::new(&mut cpu, &model, &host_params, options).unwrap();
    let mut losses = Vec::new();
    for step in 0..3 {
        let shard = dp.shard_feeds(&zoo::synthetic_tokens(&cfg(4), step).unwrap()).unwrap();
        let host = dp.step(&model, &mut CpuBackend::new(), &host_params, &shard, step).unwrap();
        host_opt.step(&mut host_params, &host.grads).unwrap();
        let resident = dp.train_step(&model, &mut cpu, &mut state, &shard, step).unwrap();
        assert_eq!(resident.comm.buckets, host.comm.buckets, "rank {rank}");
        assert_eq!(resident.local.measured_peak, resident.local.predicted_peak, "rank {rank}");
        losses.push((resident.loss.to_bits(), host.loss.to_bits()));
    }
    (bits(&state.params(&mut cpu).unwrap()), bits(&host_params), losses)
}

#[test]
fn two_ranks_train_the_resident_state_as_the_host_path_does_bit_for_bit() {
    let ranks = job_owning(2, two_ranks);
    for (rank, (resident, host, losses)) in ranks.iter().enumerate() {
        assert_eq!(resident, host, "rank {rank}: resident and host parameters differ");
        for (step, (a, b)) in losses.iter().enumerate() {
            assert_eq!(a, b, "rank {rank}, step {step}: losses differ");
        }
    }
    assert_eq!(ranks[0].0, ranks[1].0, "the ranks' parameters differ");
    assert_ne!(ranks[0].0, bits(&Model::new(zoo::gpt(&cfg(2)).unwrap()).unwrap().init_params(11).unwrap()));
}

/// What a rank of the ZeRO-1 job ends with: the sharded state's parameters and the host
/// path's, the gathered moments' and the host optimizer's (bits), and the state's bytes.
type ZeroEnd = (Vec<Vec<u64>>, Vec<Vec<u64>>, Vec<Vec<u64>>, Vec<Vec<u64>>, usize);

fn moment_bits(opt: &AdamW) -> Vec<Vec<u64>> {
    let (m, v) = opt.moments();
    m.iter().chain(v).map(|x| x.iter().map(|x| x.to_bits()).collect()).collect()
}

fn zero_ranks(_: usize, engine: Engine) -> ZeroEnd {
    let model = Model::new(zoo::gpt(&cfg(2)).unwrap()).unwrap();
    let mut dp = DataParallel::new(engine).with_bucket_bytes(2000);
    let mut host_params = model.init_params(12).unwrap();
    dp.broadcast_params(&mut host_params).unwrap();
    let mut host_opt = AdamW::new(1e-2);
    let mut cpu = CpuBackend::new();
    let options = TrainOptions::from(&host_opt).state_dtype(DType::F64).clip_grad_norm(0.5);
    let mut state = TrainState::new(&mut cpu, &model, &host_params, options).unwrap();
    dp.shard_state(&mut state).unwrap();
    for step in 0..3 {
        let shard = dp.shard_feeds(&zoo::synthetic_tokens(&cfg(4), step).unwrap()).unwrap();
        let host = dp.step(&model, &mut CpuBackend::new(), &host_params, &shard, step).unwrap();
        // The host path clips as the state does: by the global norm of the averaged gradients.
        let norm = host.grads.iter().flat_map(|g| g.to_f64_vec()).map(|g| g * g).sum::<f64>();
        let scale = remat_core::clip_factor(0.5, norm);
        let clipped: Vec<_> = host
            .grads
            .iter()
            .map(|g| {
                // In f64, as the update kernel scales them (no rounding to f32 between).
                let v: Vec<f64> = g.to_f64_vec().iter().map(|x| x * scale).collect();
                remat_core::HostTensor::f64(g.shape().to_vec(), v).unwrap()
            })
            .collect();
        host_opt.step(&mut host_params, &clipped).unwrap();
        dp.train_step(&model, &mut cpu, &mut state, &shard, step).unwrap();
    }
    let gathered = dp.gather_adamw(&mut cpu, &state).unwrap();
    let bytes = state.state_bytes();
    (bits(&state.params(&mut cpu).unwrap()), bits(&host_params), moment_bits(&gathered), moment_bits(&host_opt), bytes)
}

/// ZeRO-1 on the resident state: each rank keeps the moments of its own parameters (about half
/// the bytes), updates those and broadcasts them; every rank ends with the host path's
/// parameters, and the moments gathered for a save are the host optimizer's, bit for bit.
#[test]
fn zero_1_on_the_resident_state_shards_the_moments_and_keeps_the_bits() {
    let ranks = job_owning(2, zero_ranks);
    let whole: usize = Model::new(zoo::gpt(&cfg(2)).unwrap())
        .unwrap()
        .init_params(0)
        .unwrap()
        .values()
        .iter()
        .map(|p| p.numel() * 16)
        .sum();
    for (rank, (params, host, moments, host_moments, bytes)) in ranks.iter().enumerate() {
        assert_eq!(params, host, "rank {rank}: parameters differ from the host path");
        assert_eq!(moments, host_moments, "rank {rank}: gathered moments differ");
        assert!(*bytes < whole * 3 / 4, "rank {rank} keeps {bytes} of {whole} bytes of moments");
    }
    assert_eq!(ranks[0].4 + ranks[1].4, whole, "the shards cover the moments once");
}

/// One rank: `train_step` is `TrainState::step` (the mean over one rank is the gradient), and
/// the step reads the gradients in place: the batch and the reduced gradients written back go
/// in, the loss comes out.
#[test]
fn one_rank_is_the_plain_resident_step() {
    let model = Model::new(zoo::gpt(&cfg(2)).unwrap()).unwrap();
    let start = model.init_params(5).unwrap();
    let options = TrainOptions::from(&AdamW::new(1e-2));
    let (mut a_cpu, mut b_cpu) = (CpuBackend::new(), CpuBackend::new());
    let mut plain = TrainState::new(&mut a_cpu, &model, &start, options).unwrap();
    let mut dp_state = TrainState::new(&mut b_cpu, &model, &start, options).unwrap();
    let mut dp = DataParallel::new(Local).with_bucket_bytes(1000);
    let grad_bytes: usize = start.values().iter().map(|p| p.bytes()).sum();
    for step in 0..3 {
        let feeds: Feeds = zoo::synthetic_tokens(&cfg(2), step).unwrap();
        let batch: usize = feeds.names().map(|n| feeds.get(n).unwrap().bytes()).sum();
        let want = plain.step(&mut a_cpu, &model, &feeds, step).unwrap();
        let got = dp.train_step(&model, &mut b_cpu, &mut dp_state, &feeds, step).unwrap();
        assert_eq!(got.loss.to_bits(), want.loss.to_bits());
        assert_eq!(got.local.measured_peak, got.local.predicted_peak);
        assert_eq!(got.local.transfers.to_device_bytes as usize, batch + grad_bytes);
        assert_eq!(got.local.transfers.to_host_bytes, 4);
        assert!(got.comm.buckets >= 2);
    }
    assert_eq!(bits(&dp_state.params(&mut b_cpu).unwrap()), bits(&plain.params(&mut a_cpu).unwrap()));
}

/// A reducer that counts what it is handed and leaves the gradients (one rank: the mean is the
/// gradient).
struct Counting {
    handed: Vec<usize>,
    finished: usize,
}

impl remat_core::GradientReducer<CpuBackend> for Counting {
    fn gradient(&mut self, _: &mut CpuBackend, param: usize, _: &remat_core::CpuBuffer) -> remat_core::Result<()> {
        self.handed.push(param);
        Ok(())
    }

    fn finish(
        &mut self,
        _: &mut CpuBackend,
        grads: &mut remat_core::Gradients<'_, CpuBackend>,
    ) -> remat_core::Result<()> {
        self.finished += grads.len();
        Ok(())
    }
}

/// `train_step_with` hands every gradient to the given reducer in the order the backward
/// finishes them, and with one rank trains as `TrainState::step` does.
#[test]
fn a_reducer_of_ones_own_gets_every_gradient_in_the_backwards_order() {
    let model = Model::new(zoo::gpt(&cfg(2)).unwrap()).unwrap();
    let start = model.init_params(5).unwrap();
    let options = TrainOptions::from(&AdamW::new(1e-2));
    let (mut a_cpu, mut b_cpu) = (CpuBackend::new(), CpuBackend::new());
    let mut plain = TrainState::new(&mut a_cpu, &model, &start, options).unwrap();
    let mut other = TrainState::new(&mut b_cpu, &model, &start, options).unwrap();
    let mut dp = DataParallel::new(Local);
    for step in 0..2 {
        let feeds = zoo::synthetic_tokens(&cfg(2), step).unwrap();
        let mut reducer = Counting { handed: Vec::new(), finished: 0 };
        let got = dp.train_step_with(&model, &mut b_cpu, &mut other, &feeds, step, &mut reducer).unwrap();
        assert_eq!(reducer.handed, model.gradient_order());
        assert_eq!(reducer.finished, start.len());
        assert_eq!(got.loss.to_bits(), plain.step(&mut a_cpu, &model, &feeds, step).unwrap().loss.to_bits());
    }
    assert_eq!(bits(&other.params(&mut b_cpu).unwrap()), bits(&plain.params(&mut a_cpu).unwrap()));
}
