//! The optimizer kernels against the host reference: `Backend::update` bit for bit with
//! `remat_core::host_update` for every parameter dtype, state dtype, rule and clipping;
//! `Backend::sum_squares` with `remat_core::host_sum_squares` to 1e-12 relative; and a whole
//! `TrainState` on the GPU against the CPU, moving only the batch and the loss.
//!
//! Without a usable GPU every test prints `skipped: <reason>` and passes, unless
//! `REMAT_REQUIRE` names `cuda`, which turns a missing GPU into a failure.

use remat_core::{
    host_sum_squares, host_update, normal_f64, AdamW, Backend, CpuBackend, DType, Feeds, HostData, HostTensor, Model,
    Params, Sgd, Trace, TrainOptions, TrainState, UpdateCall, UpdateRule,
};
use remat_cuda::CudaBackend;

mod common;

use common::gpu;

const PARAM_DTYPES: [DType; 6] = [DType::F32, DType::F64, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2];

/// `n` values of `dtype`: a few edge cases (zeros of both signs, an f16 subnormal, values near
/// the f16 maximum), then normal draws times `scale` (plus `shift`, then `abs` when `positive`).
fn values(n: usize, dtype: DType, seed: u64, scale: f64, positive: bool) -> HostTensor {
    let edges = [0.0, -0.0, 3e-6, -2e-7, 6.0e4, -6.5e4, 1.0, -1.0];
    let v: Vec<f64> = (0..n as u64)
        .map(|i| {
            let x = edges.get(i as usize).map_or_else(|| normal_f64(seed, 1, i) * scale, |&e| e * scale);
            if positive {
                x.abs()
            } else {
                x
            }
        })
        .collect();
    HostTensor::new(vec![n], HostData::from_f64(&v, dtype)).unwrap()
}

/// Bit patterns, so that signed zeros and NaNs compare too (every dtype widens exactly to f64).
fn bits(t: &HostTensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|x| x.to_bits()).collect()
}

fn rules() -> [UpdateRule; 3] {
    [
        UpdateRule::AdamW { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 },
        UpdateRule::Sgd { lr: 0.1, momentum: 0.9, weight_decay: 1e-4 },
        UpdateRule::Sgd { lr: 0.05, momentum: 0.0, weight_decay: 0.0 },
    ]
}

/// Three steps of `rule` on one parameter on both backends, from the same (nonzero) state and
/// the same sum of squares; `clip` scales the clipping norm to the gradients' (0.5: every step
/// clips), `None` runs without clipping. Returns the first difference.
fn check_update(
    g: &mut CudaBackend,
    (param_dtype, grad_dtype, state_dtype): (DType, DType, DType),
    rule: UpdateRule,
    clip: Option<f64>,
) -> Result<(), String> {
    let n = 4099;
    let what = format!("{param_dtype} param, {grad_dtype} grad, {state_dtype} state, {rule:?}, clip {clip:?}");
    let mut cpu_param = values(n, param_dtype, 1, 1.0, false);
    let mut cpu_state: Vec<HostTensor> =
        (0..rule.state_count()).map(|k| values(n, state_dtype, 10 + k as u64, 0.01, k == 1)).collect();
    let mut dev_param = g.upload(&cpu_param).unwrap();
    let mut dev_state: Vec<_> = cpu_state.iter().map(|s| g.upload(s).unwrap()).collect();
    for t in 1..=3u64 {
        let grad = values(n, grad_dtype, 100 + t, 0.1, false);
        let dev_grad = g.upload(&grad).unwrap();
        let sum = host_sum_squares(&[&grad]).unwrap();
        let max_norm = clip.map(|c| c * sum.sqrt());
        let dev_sum = max_norm.map(|_| g.upload(&HostTensor::f64(Vec::new(), vec![sum]).unwrap()).unwrap());
        let call = UpdateCall { name: "w", coefficients: rule.coefficients(t), max_norm };
        let mut refs: Vec<&mut HostTensor> = cpu_state.iter_mut().collect();
        host_update(&call, &mut cpu_param, &grad, &mut refs, max_norm.map(|_| sum)).unwrap();
        let (live, transfers) = (g.memory().live_bytes, g.transfers());
        g.reset_peak();
        g.update(&call, &mut dev_param, &dev_grad, &mut dev_state, dev_sum.as_ref())
            .map_err(|e| format!("{what}: {e}"))?;
        if (g.memory().live_bytes, g.memory().peak_bytes, g.transfers()) != (live, live, transfers) {
            return Err(format!("{what}: the update allocated or moved something"));
        }
        let got = g.download(&dev_param).unwrap();
        let diff = bits(&got).iter().zip(bits(&cpu_param)).position(|(a, b)| *a != b);
        if let Some(i) = diff {
            let (a, b) = (got.to_f64_vec()[i], cpu_param.to_f64_vec()[i]);
            return Err(format!("{what}: step {t}, element {i}: gpu {a:e}, cpu {b:e}"));
        }
        for (k, (d, c)) in dev_state.iter().zip(&cpu_state).enumerate() {
            if bits(&g.download(d).unwrap()) != bits(c) {
                return Err(format!("{what}: step {t}, state buffer {k} differs"));
            }
        }
    }
    Ok(())
}

#[test]
fn update_matches_host_update_bit_for_bit_for_every_dtype_rule_and_clipping() {
    let Some(mut g) = gpu() else { return };
    let mut failures = Vec::new();
    let mut cases = 0;
    // The gradient in the parameter's dtype; then master weights (f32, f64) with gradients of
    // every other float dtype, as a model computing in bf16 hands them over.
    let same = PARAM_DTYPES.iter().flat_map(|&p| [(p, p, DType::F32), (p, p, DType::F64)]);
    let masters = [DType::F32, DType::F64]
        .into_iter()
        .flat_map(|p| PARAM_DTYPES.into_iter().filter(move |&d| d != p).map(move |d| (p, d, DType::F32)));
    for dtypes in same.chain(masters) {
        for rule in rules() {
            for clip in [None, Some(0.5)] {
                cases += 1;
                if let Err(e) = check_update(&mut g, dtypes, rule, clip) {
                    failures.push(e);
                }
            }
        }
    }
    assert_eq!(cases, 72 + 60);
    assert!(failures.is_empty(), "{} of {cases} cases differ:\n{}", failures.len(), failures.join("\n"));
}

/// The shared check runs first on every backend: the CPU's errors are the GPU's.
fn misuse<B: Backend>(b: &mut B) {
    let rule = rules()[0];
    let call = UpdateCall { name: "layer.weight", coefficients: rule.coefficients(1), max_norm: None };
    let mut param = b.upload(&values(8, DType::F32, 1, 1.0, false)).unwrap();
    let mut state: Vec<_> = (0..2).map(|_| b.upload(&values(8, DType::F32, 2, 0.0, true)).unwrap()).collect();
    let wrong = b.upload(&values(9, DType::BF16, 3, 1.0, false)).unwrap();
    let err = b.update(&call, &mut param, &wrong, &mut state, None).unwrap_err().to_string();
    assert!(err.contains("layer.weight") && err.contains("[9]"), "{}: {err}", b.name());
    let ints = b.upload(&HostTensor::i64(vec![8], vec![1; 8]).unwrap()).unwrap();
    let err = b.update(&call, &mut param, &ints, &mut state, None).unwrap_err().to_string();
    assert!(err.contains("layer.weight") && err.contains("i64"), "{}: {err}", b.name());
    let grad = b.upload(&values(8, DType::F32, 3, 1.0, false)).unwrap();
    let err = b.update(&call, &mut param, &grad, &mut state[..1], None).unwrap_err().to_string();
    assert!(err.contains("layer.weight") && err.contains("2 state buffers"), "{}: {err}", b.name());
    let clipping = UpdateCall { max_norm: Some(1.0), ..call };
    let err = b.update(&clipping, &mut param, &grad, &mut state, None).unwrap_err().to_string();
    assert!(err.contains("layer.weight") && err.contains("missing"), "{}: {err}", b.name());
    let err = b.sum_squares(&[&grad, &ints]).err().expect("refused").to_string();
    assert!(err.contains("i64"), "{}: {err}", b.name());
}

#[test]
fn update_and_sum_squares_check_their_buffers_as_the_cpu_does() {
    misuse(&mut CpuBackend::new());
    let Some(mut g) = gpu() else { return };
    misuse(&mut g);
}

#[test]
fn sum_squares_matches_host_sum_squares_deterministically_on_the_device() {
    let Some(mut g) = gpu() else { return };
    let tensors = [
        values(300_001, DType::F32, 1, 1.0, false), // more elements than one pass of the grid
        values(1000, DType::F64, 2, 3.0, false),
        values(37, DType::BF16, 3, 1.0, false),
        values(35, DType::F16, 4, 1.0, false),
        values(64, DType::F8E4M3, 5, 4.0, false),
        values(3, DType::F8E5M2, 6, 1.0, false),
        HostTensor::f32(vec![0, 4], vec![]).unwrap(),
        HostTensor::f32(Vec::new(), vec![-2.5]).unwrap(),
    ];
    let on_gpu: Vec<_> = tensors.iter().map(|t| g.upload(t).unwrap()).collect();
    let mut lists: Vec<Vec<usize>> = (0..tensors.len()).map(|k| vec![k]).collect();
    lists.push((0..tensors.len()).collect());
    lists.push(vec![]);
    for list in lists {
        let host: Vec<&HostTensor> = list.iter().map(|&k| &tensors[k]).collect();
        let want = host_sum_squares(&host).unwrap();
        let dev: Vec<_> = list.iter().map(|&k| &on_gpu[k]).collect();
        let (live, transfers) = (g.memory().live_bytes, g.transfers());
        let sum = g.sum_squares(&dev).unwrap();
        let again = g.sum_squares(&dev).unwrap();
        assert_eq!((sum.shape(), sum.dtype()), (&[][..], DType::F64), "{list:?}");
        assert_eq!((g.memory().live_bytes, g.transfers()), (live + 16, transfers), "{list:?}: two 8-byte results");
        let (got, twice) = (g.download(&sum).unwrap().scalar().unwrap(), g.download(&again).unwrap().scalar().unwrap());
        assert_eq!(got.to_bits(), twice.to_bits(), "{list:?}: deterministic");
        assert!((got - want).abs() <= 1e-12 * want.abs(), "{list:?}: gpu {got:e}, cpu {want:e}");
        if list.is_empty() || list == [6] {
            assert_eq!(got, 0.0, "{list:?}: nothing to sum");
        }
    }
}

/// loss = Σ (w − x)² + Σ (b − x)², `b` in bf16: every gradient is elementwise (2·(w − x)), so
/// the CPU and the GPU compute it to the same bits and the parameters after each step show the
/// update alone. The loss itself is a sum in another order on each.
fn squares_model() -> Model {
    let trace = Trace::new();
    let x = trace.input("x", &[64], DType::F32);
    let w = trace.param("w", &[64], DType::F32);
    let b = trace.param("b", &[64], DType::BF16).cast(DType::F32);
    let (dw, db) = (&w - &x, &b - &x);
    let loss = &(&dw * &dw).sum_all() + &(&db * &db).sum_all();
    Model::new(trace.finish(&loss).unwrap()).unwrap()
}

fn batch(step: u64) -> Feeds {
    let x = (0..64).map(|i| normal_f64(step, 5, i) as f32).collect();
    Feeds::new().with("x", HostTensor::f32([64], x).unwrap())
}

/// `steps` steps of `options` from `params` on `backend`: the parameters after each step, and
/// checks that each step moved the batch in and the loss out only, within its predicted peak.
fn train<B: Backend>(backend: &mut B, model: &Model, params: &Params, options: TrainOptions) -> Vec<(f64, Params)> {
    let mut state = TrainState::new(backend, model, params, options).unwrap();
    let mut after = Vec::new();
    for step in 0..4 {
        let out = state.step(backend, model, &batch(step), step).unwrap();
        let moved = (out.transfers.to_device_bytes, out.transfers.to_host_bytes);
        assert_eq!(moved, (64 * 4, 4), "{}: {options:?} step {step}: the batch in, the loss out", backend.name());
        assert_eq!(out.measured_peak, out.predicted_peak, "{}: {options:?} step {step}", backend.name());
        after.push((out.loss, state.params(backend).unwrap()));
    }
    after
}

#[test]
fn train_state_on_the_gpu_follows_the_cpu() {
    let model = squares_model();
    let params = model.init_params(3).unwrap();
    let exact = [
        TrainOptions::from(&AdamW::new(0.05)),
        TrainOptions::from(&AdamW::new(0.05)).state_dtype(DType::F64),
        TrainOptions::from(&Sgd::new(0.1).with_momentum(0.9)),
        // `b` gets f32 master weights, updated from its bf16 gradient, and a bf16 working copy.
        TrainOptions::from(&AdamW::new(0.05)).master_weights(DType::F32),
    ];
    let clipped = TrainOptions::from(&AdamW::new(0.05)).clip_grad_norm(0.5);
    let on_cpu: Vec<_> =
        exact.iter().chain([&clipped]).map(|&o| train(&mut CpuBackend::new(), &model, &params, o)).collect();
    let Some(mut g) = gpu() else { return };
    for (options, want) in exact.iter().chain([&clipped]).zip(&on_cpu) {
        let got = train(&mut g, &model, &params, *options);
        for (step, ((loss, p), (want_loss, q))) in got.iter().zip(want).enumerate() {
            assert!(
                (loss - want_loss).abs() <= 1e-5 * want_loss.abs(),
                "{options:?} step {step}: loss {loss} vs {want_loss}"
            );
            for ((name, a), b) in p.names().iter().zip(p.values()).zip(q.values()) {
                if options.max_grad_norm.is_none() {
                    assert_eq!(bits(a), bits(b), "{options:?} step {step}: `{name}` differs");
                } else {
                    // The sums of squares differ in order, so the clip factors by a rounding.
                    let rtol = if a.dtype() == DType::BF16 { 1e-2 } else { 1e-5 };
                    for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                        assert!(
                            (x - y).abs() <= rtol * y.abs().max(1e-3),
                            "{options:?} step {step}: `{name}` {x} vs {y}"
                        );
                    }
                }
            }
        }
    }
}
