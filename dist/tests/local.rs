//! One process (`Local`): data-parallel steps and ZeRO-1 reduce to the plain ones, bit for bit.

use remat_core::{AdamW, CpuBackend, DType, Model, Optimizer};
use remat_dist::{Collective, DataParallel, Local, ShardedAdamW};
use remat_zoo::{self as zoo, GptConfig};

fn model(batch: usize) -> Model {
    let cfg = GptConfig { batch, seq: 8, d_model: 16, heads: 2, layers: 2, vocab: 32, dropout: 0.1, dtype: DType::F32 };
    Model::new(zoo::gpt(&cfg).unwrap()).unwrap()
}

#[test]
fn one_rank_steps_exactly_like_the_model() {
    let model = model(2);
    let cfg =
        GptConfig { batch: 2, seq: 8, d_model: 16, heads: 2, layers: 2, vocab: 32, dropout: 0.1, dtype: DType::F32 };
    let mut params = model.init_params(3).unwrap();
    let mut dp = DataParallel::new(Local).with_bucket_bytes(1000);
    dp.broadcast_params(&mut params).unwrap();
    for step in 0..3 {
        let feeds = zoo::synthetic_tokens(&cfg, step).unwrap();
        let plain = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, step).unwrap();
        let out = dp.step(&model, &mut CpuBackend::new(), &params, &dp.shard_feeds(&feeds).unwrap(), step).unwrap();
        assert_eq!(out.loss.to_bits(), plain.loss.to_bits());
        assert_eq!(out.grads.len(), plain.grads.len());
        for (a, b) in out.grads.iter().zip(&plain.grads) {
            assert_eq!(a, b, "gradients differ");
        }
        assert!(out.comm.buckets >= 2, "small buckets: several per step");
        let plan = dp.plan_comm(&model, &params);
        assert_eq!((plan.buckets.len(), plan.buffer_peak_bytes), (out.comm.buckets, out.comm.buffer_peak_bytes));
        let mut all: Vec<usize> = plan.buckets.concat();
        all.sort_unstable();
        assert_eq!(all, (0..params.len()).collect::<Vec<_>>(), "every parameter in exactly one bucket");
        assert_eq!(out.comm.bytes_sent, 0);
        assert_eq!(out.local.predicted_peak, out.local.measured_peak);
    }
}

#[test]
fn sharded_adamw_on_one_rank_is_adamw() {
    let model = model(2);
    let mut a = model.init_params(5).unwrap();
    let mut b = a.clone();
    let mut plain = AdamW::new(1e-2);
    let mut sharded = ShardedAdamW::new(AdamW::new(1e-2), &b, 0, 1).unwrap();
    for step in 0..5u64 {
        let grads: Vec<_> = a
            .values()
            .iter()
            .map(|p| {
                remat_core::HostTensor::from_fn(p.shape().to_vec(), p.dtype(), |i| {
                    ((i as u64 * 7 + step) % 11) as f64 * 0.1 - 0.5
                })
                .unwrap()
            })
            .collect();
        plain.step(&mut a, &grads).unwrap();
        sharded.step(&mut Local, &mut b, &grads).unwrap();
        assert_eq!(a.values(), b.values(), "step {step}");
    }
    let (m, v) = sharded.gather_moments(&mut Local).unwrap();
    let (pm, pv) = plain.moments();
    assert_eq!(m, pm.concat());
    assert_eq!(v, pv.concat());
    assert_eq!(sharded.state_bytes(), 16 * m.len());
    // Whole again, and sharded again from it: the same state.
    let whole = sharded.to_adamw(&mut Local, &b).unwrap();
    assert_eq!((whole.t(), whole.moments()), (plain.t(), plain.moments()));
    let again = ShardedAdamW::from_adamw(&whole, &b, 0, 1).unwrap();
    assert_eq!((again.t(), again.gather_moments(&mut Local).unwrap()), (sharded.t(), (m, v)));
    // Moments that do not fit the parameters are refused, naming the parameter.
    let e =
        AdamW::new(1e-2).with_state(&b, 1, vec![vec![0.0]; b.len()], vec![vec![0.0]; b.len()]).unwrap_err().to_string();
    assert!(e.contains(&b.names()[0]) && e.contains("1 values for"), "{e}");
}

#[test]
fn bad_shards_are_refused() {
    let e = ShardedAdamW::new(AdamW::new(1e-2), &model(2).init_params(1).unwrap(), 2, 2).unwrap_err();
    assert!(matches!(&e, remat_core::Error::Config { setting, .. } if setting == "rank"), "{e:?}");
    let dp = DataParallel::new(Local);
    assert_eq!(dp.shard(5).unwrap(), 0..5);
    assert_eq!(Local.world_size(), 1);
    let e = dp.expect_world_size(2).unwrap_err();
    assert!(matches!(&e, remat_core::Error::Config { setting, .. } if setting == "world size"), "{e:?}");
    assert!(e.to_string().contains("this job has 1 rank(s), the run expects 2"), "{e}");
}

#[test]
fn sharded_feeds_keep_i64_values_exactly() {
    // The reproducer shard_feeds_i64_rounds.rs: 2^53 + 1 came back as 2^53 (through f64).
    let v = (1i64 << 53) + 1;
    let values = vec![v, i64::MAX, i64::MIN, -v, 3];
    let feeds = remat_core::Feeds::new()
        .with("ids", remat_core::HostTensor::i64([5, 1], values.clone()).unwrap())
        .with("x", remat_core::HostTensor::f64([5], vec![0.1, 1e300, -0.0, f64::MIN_POSITIVE, 2.5]).unwrap());
    let shard = DataParallel::new(Local).shard_feeds(&feeds).unwrap();
    assert_eq!(shard.get("ids").unwrap().data(), &remat_core::HostData::I64(values));
    assert_eq!(shard.get("ids").unwrap().shape(), &[5, 1]);
    assert_eq!(shard.get("x").unwrap(), feeds.get("x").unwrap());
}

#[test]
fn every_bad_timeout_is_a_one_line_error_naming_the_value() {
    // 1e20 and 1e30 panicked ("cannot convert float seconds to Duration") on every rank.
    for text in ["0", "abc", "NaN", "inf", "-inf", "-1", "1e20", "1e30", "", "1e-9", "0x10", "5s"] {
        let e = remat_dist::parse_timeout(text).unwrap_err();
        assert!(matches!(&e, remat_core::Error::Config { setting, .. } if setting == "REMAT_DIST_TIMEOUT"), "{e:?}");
        let e = e.to_string();
        assert!(e.starts_with(&format!("REMAT_DIST_TIMEOUT={text:?}: expected a positive number of seconds")), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    for (text, seconds) in [("120", 120.0), (" 1.5 ", 1.5), ("1e9", 1e9), ("0.001", 0.001)] {
        assert_eq!(remat_dist::parse_timeout(text).unwrap().as_secs_f64(), seconds, "{text}");
    }
}

#[test]
fn one_rank_always_agrees_with_itself() {
    let model = model(2);
    let params = model.init_params(1).unwrap();
    let mut dp = DataParallel::new(Local).with_bucket_bytes(1000);
    let config = remat_dist::RankConfig { batch: 2, shard_rows: 2, steps: 3, ..dp.rank_config(&model, &params) };
    let plan = dp.plan_comm(&model, &params);
    assert_eq!(
        (config.world_size, config.bucket_bytes, config.buckets, config.bucket_layout),
        (1, 1000, plan.buckets.len() as u64, plan.layout_digest())
    );
    assert_eq!(config.gradient_values, params.values().iter().map(|p| p.numel() as u64).sum::<u64>());
    dp.agree(&config).unwrap();
}
