//! Training with the state on the backend (`TrainState`), against oracles written here: the
//! host optimizers (`AdamW`, `Sgd`, f64 state), the textbook updates element by element with the
//! state rounded to f32, and `torch.nn.utils.clip_grad_norm_`'s formula over the host gradients
//! of `Model::step`. Also: what a step moves (the batch in, the loss out), predicted = measured
//! peak with the state and the update counted, and misuse.

use remat_core::{
    AdamW, Backend, Budget, CpuBackend, DType, Feeds, HostTensor, Model, Optimizer, Params, Sgd, Strategy, Trace,
    TrainOptions, TrainState, UpdateRule,
};

/// A two-layer MLP with a bias, dropout and a layer norm; parameters in `dtype` (computed in
/// f32), a named logits output beside the loss.
fn mlp(dtype: DType, strategy: Strategy) -> Model {
    Model::with_strategy(mlp_graph(dtype), strategy).unwrap()
}

fn mlp_graph(dtype: DType) -> remat_core::Graph {
    let trace = Trace::new();
    let x = trace.input("x", &[6, 8], DType::F32);
    let y = trace.input("y", &[6], DType::I64);
    let w1 = trace.param("w1", &[8, 16], dtype).cast(DType::F32);
    let b1 = trace.param("b1", &[16], dtype).cast(DType::F32);
    let w2 = trace.param("w2", &[16, 3], dtype).cast(DType::F32);
    let h = (&x.matmul(&w1) + &b1).gelu().dropout(0.1, 7).layer_norm(1e-5);
    let logits = h.matmul(&w2).name("logits");
    trace.finish_with(&logits.cross_entropy(&y), &[&logits]).unwrap()
}

fn feeds(step: u64) -> Feeds {
    let x = (0..48).map(|i| ((i as u64 * 37 + step * 11) % 17) as f32 / 8.0 - 1.0).collect();
    let y = (0..6).map(|i| ((i as u64 + step) % 3) as i64).collect();
    Feeds::new().with("x", HostTensor::f32([6, 8], x).unwrap()).with("y", HostTensor::i64([6], y).unwrap())
}

fn values(p: &Params) -> Vec<Vec<f64>> {
    p.values().iter().map(HostTensor::to_f64_vec).collect()
}

/// Bit patterns of every parameter, so NaNs and signed zeros compare too.
fn bits(p: &Params) -> Vec<Vec<u64>> {
    values(p).iter().map(|v| v.iter().map(|x| x.to_bits()).collect()).collect()
}

#[test]
fn adamw_with_f64_state_on_the_backend_follows_the_host_optimizer_bit_for_bit() {
    for dtype in [DType::F32, DType::BF16, DType::F64] {
        let model = mlp(dtype, Strategy::MinCut);
        let mut host_params = model.init_params(3).unwrap();
        let mut host_opt = AdamW::new(0.02);
        let mut cpu = CpuBackend::new();
        let options = TrainOptions::from(&host_opt).state_dtype(DType::F64);
        let mut state = TrainState::new(&mut cpu, &model, &host_params, options).unwrap();
        for step in 0..5 {
            let host = model.step_seeded(&mut CpuBackend::new(), &host_params, &feeds(step), step).unwrap();
            host_opt.step(&mut host_params, &host.grads).unwrap();
            let out = state.step(&mut cpu, &model, &feeds(step), step).unwrap();
            assert_eq!(out.loss.to_bits(), host.loss.to_bits(), "{dtype} step {step}");
            assert_eq!(out.outputs, host.outputs, "{dtype} step {step}");
            assert_eq!(bits(&state.params(&mut cpu).unwrap()), bits(&host_params), "{dtype} step {step}");
        }
        let (m, v) = host_opt.moments();
        let resident = state.adamw(&mut cpu).unwrap();
        assert_eq!((resident.moments().0, resident.moments().1, resident.t()), (m, v, host_opt.t()));
    }
}

/// AdamW as Loshchilov & Hutter write it, in f64, with the moments stored in f32 between steps
/// (PyTorch's default state dtype for f32 parameters) and the weights rounded to f32.
#[test]
fn adamw_with_f32_state_matches_the_textbook_update_with_f32_moments() {
    let model = mlp(DType::F32, Strategy::Respect);
    let mut want = model.init_params(5).unwrap();
    let mut cpu = CpuBackend::new();
    let (lr, b1, b2, eps, wd) = (0.01, 0.8, 0.95, 1e-6, 0.1);
    let rule = UpdateRule::AdamW { lr, beta1: b1, beta2: b2, eps, weight_decay: wd };
    let mut state = TrainState::new(&mut cpu, &model, &want, TrainOptions::new(rule)).unwrap();
    let mut m: Vec<Vec<f32>> = want.values().iter().map(|p| vec![0.0; p.numel()]).collect();
    let mut v = m.clone();
    for step in 1..=4u64 {
        let grads = model.step_seeded(&mut CpuBackend::new(), &want, &feeds(step), step).unwrap().grads;
        state.step(&mut cpu, &model, &feeds(step), step).unwrap();
        for (k, p) in want.values_mut().iter_mut().enumerate() {
            let g = grads[k].to_f32_vec();
            let w: Vec<f32> = p.to_f32_vec();
            let new: Vec<f32> = (0..w.len())
                .map(|j| {
                    let (gj, wj) = (g[j] as f64, w[j] as f64);
                    let mj = b1 * m[k][j] as f64 + (1.0 - b1) * gj;
                    let vj = b2 * v[k][j] as f64 + (1.0 - b2) * gj * gj;
                    (m[k][j], v[k][j]) = (mj as f32, vj as f32);
                    let step = (mj / (1.0 - b1.powi(step as i32))) / ((vj / (1.0 - b2.powi(step as i32))).sqrt() + eps);
                    (wj - lr * (step + wd * wj)) as f32
                })
                .collect();
            *p = HostTensor::f32(p.shape().to_vec(), new).unwrap();
        }
        assert_eq!(bits(&state.params(&mut cpu).unwrap()), bits(&want), "step {step}");
    }
}

/// Mixed precision: a bf16 (and an f16) model with f32 master weights. The oracle keeps f32 masters and f32
/// moments itself, takes each step's gradients from `Model::step` on the masters rounded to
/// bf16, and applies the textbook AdamW to the masters: the state's bf16 weights are the
/// oracle's masters rounded, bit for bit, at every step.
#[test]
fn bf16_compute_with_f32_master_weights_matches_the_textbook_update_of_the_masters() {
    for dtype in [DType::BF16, DType::F16] {
        narrow_compute_with_f32_masters(dtype);
    }
}

fn narrow_compute_with_f32_masters(dtype: DType) {
    let model = mlp(dtype, Strategy::MinCut);
    let start = model.init_params(6).unwrap();
    let mut cpu = CpuBackend::new();
    let (lr, b1, b2, eps, wd) = (0.01, 0.9, 0.999, 1e-8, 0.01);
    let options = TrainOptions::from(&AdamW::new(lr)).master_weights(DType::F32);
    let mut state = TrainState::new(&mut cpu, &model, &start, options).unwrap();
    assert_eq!(state.master_bytes(), start.values().iter().map(|p| p.numel() * 4).sum::<usize>());
    let mut masters: Vec<Vec<f32>> = start.values().iter().map(HostTensor::to_f32_vec).collect();
    let mut m: Vec<Vec<f32>> = masters.iter().map(|w| vec![0.0; w.len()]).collect();
    let mut v = m.clone();
    let rounded = |masters: &[Vec<f32>]| {
        let mut p = start.clone();
        for (value, w) in p.values_mut().iter_mut().zip(masters) {
            *value = HostTensor::from_f32(value.shape().to_vec(), w, dtype).unwrap();
        }
        p
    };
    for step in 1..=4u64 {
        let grads = model.step_seeded(&mut CpuBackend::new(), &rounded(&masters), &feeds(step), step).unwrap().grads;
        let out = state.step(&mut cpu, &model, &feeds(step), step).unwrap();
        assert_eq!(out.measured_peak, out.predicted_peak);
        for (k, w) in masters.iter_mut().enumerate() {
            let g = grads[k].to_f64_vec();
            for j in 0..w.len() {
                let (gj, wj) = (g[j], w[j] as f64);
                let mj = b1 * m[k][j] as f64 + (1.0 - b1) * gj;
                let vj = b2 * v[k][j] as f64 + (1.0 - b2) * gj * gj;
                (m[k][j], v[k][j]) = (mj as f32, vj as f32);
                let s = (mj / (1.0 - b1.powi(step as i32))) / ((vj / (1.0 - b2.powi(step as i32))).sqrt() + eps);
                w[j] = (wj - lr * (s + wd * wj)) as f32;
            }
        }
        assert_eq!(bits(&state.params(&mut cpu).unwrap()), bits(&rounded(&masters)), "{dtype} step {step}");
    }
    // The updates are finer than bf16's spacing: the masters moved where the weights alone
    // would have rounded back.
    let moved: usize = masters
        .iter()
        .zip(start.values())
        .map(|(w, p)| w.iter().zip(p.to_f32_vec()).filter(|(a, b)| *a != b).count())
        .sum();
    assert!(moved > 0);
}

/// SGD (with and without momentum) under global-norm clipping, against the formula of
/// `torch.nn.utils.clip_grad_norm_` (`min(1, max / (‖g‖ + 1e-6))`) over the host gradients.
#[test]
fn sgd_with_clipping_matches_clip_grad_norm_over_the_host_gradients() {
    for (momentum, max_norm) in [(0.0, 0.05), (0.9, 0.05), (0.9, 1e9), (0.5, 1e-30)] {
        let model = mlp(DType::F32, Strategy::Budget(Budget::Fraction(0.3)));
        let mut want = model.init_params(9).unwrap();
        let mut cpu = CpuBackend::new();
        let rule = UpdateRule::Sgd { lr: 0.3, momentum, weight_decay: 0.01 };
        let mut state =
            TrainState::new(&mut cpu, &model, &want, TrainOptions::new(rule).clip_grad_norm(max_norm)).unwrap();
        let mut velocity: Vec<Vec<f64>> = want.values().iter().map(|p| vec![0.0; p.numel()]).collect();
        let mut clipped_once = false;
        for step in 1..=3u64 {
            let grads = model.step_seeded(&mut CpuBackend::new(), &want, &feeds(step), step).unwrap().grads;
            let norm = grads.iter().flat_map(HostTensor::to_f64_vec).map(|g| g * g).sum::<f64>().sqrt();
            let scale = (max_norm / (norm + 1e-6)).min(1.0);
            clipped_once |= scale < 1.0;
            state.step(&mut cpu, &model, &feeds(step), step).unwrap();
            for (k, p) in want.values_mut().iter_mut().enumerate() {
                let g = grads[k].to_f64_vec();
                let new: Vec<f32> = p
                    .to_f64_vec()
                    .iter()
                    .enumerate()
                    .map(|(j, &w)| {
                        let vj = momentum * velocity[k][j] + g[j] * scale;
                        velocity[k][j] = vj as f32 as f64;
                        (w - 0.3 * (vj + 0.01 * w)) as f32
                    })
                    .collect();
                *p = HostTensor::f32(p.shape().to_vec(), new).unwrap();
            }
            assert_eq!(bits(&state.params(&mut cpu).unwrap()), bits(&want), "momentum {momentum}, step {step}");
        }
        assert_eq!(clipped_once, max_norm < 1.0, "momentum {momentum}, max {max_norm}");
    }
}

#[test]
fn a_step_moves_the_batch_in_and_the_loss_and_outputs_out_and_nothing_else() {
    let model = mlp(DType::F32, Strategy::MinCut);
    let mut cpu = CpuBackend::new();
    let options = TrainOptions::from(&AdamW::new(1e-3)).clip_grad_norm(1.0);
    let mut state = TrainState::new(&mut cpu, &model, &model.init_params(0).unwrap(), options).unwrap();
    let batch = 6 * 8 * 4 + 6 * 8;
    let loss_and_logits = 4 + 6 * 3 * 4;
    for step in 0..3 {
        let before = cpu.transfers();
        let out = state.step(&mut cpu, &model, &feeds(step), step).unwrap();
        assert_eq!(cpu.transfers().since(before), out.transfers);
        assert_eq!((out.transfers.to_device_bytes, out.transfers.to_host_bytes), (batch, loss_and_logits));
        assert_eq!(out.outputs[0].shape(), &[6, 3]);
    }
}

/// The step's measured peak (parameters, optimizer state, forward, backward and update, by the
/// backend's meter) equals the prediction, for every rule, clipping or not, across strategies,
/// with memory held outside the state; and each gradient is taken before any parameter changes
/// (the gradients of `a` and `b` read each other).
#[test]
fn the_measured_peak_of_a_step_equals_the_prediction() {
    let strategies = [
        Strategy::Respect,
        Strategy::MinCut,
        Strategy::Budget(Budget::Fraction(0.0)),
        Strategy::BudgetOffload(Budget::Fraction(0.0)),
    ];
    let rules = [
        TrainOptions::from(&AdamW::new(1e-2)),
        TrainOptions::from(&AdamW::new(1e-2)).clip_grad_norm(0.5).state_dtype(DType::F64),
        TrainOptions::from(&Sgd::new(0.1)),
        TrainOptions::from(&Sgd::new(0.1).with_momentum(0.9)).clip_grad_norm(2.0),
        TrainOptions::from(&AdamW::new(1e-2)).master_weights(DType::F32).clip_grad_norm(1.0),
        TrainOptions::from(&Sgd::new(0.1)).master_weights(DType::F64),
    ];
    for strategy in strategies {
        for options in rules {
            let model = mlp(DType::BF16, strategy);
            let mut cpu = CpuBackend::new();
            let held_outside = cpu.upload(&HostTensor::f32([100], vec![1.0; 100]).unwrap()).unwrap();
            let mut state = TrainState::new(&mut cpu, &model, &model.init_params(1).unwrap(), options).unwrap();
            for step in 0..2 {
                let out = state.step(&mut cpu, &model, &feeds(step), step).unwrap();
                assert_eq!(out.measured_peak, out.predicted_peak, "{strategy:?} {options:?}");
                assert_eq!(out.measured_host_peak, out.predicted_host_peak, "{strategy:?} {options:?}");
                assert!(out.predicted_peak >= model.plan().predicted_peak() + state.state_bytes());
            }
            drop(held_outside);
        }
    }
    // loss = Σ a·b + Σ c²: the gradient of `a` reads `b` and that of `b` reads `a`.
    let trace = Trace::new();
    let a = trace.param("a", &[4], DType::F32);
    let b = trace.param("b", &[4], DType::F32);
    let c = trace.param("c", &[4], DType::F32);
    let loss = &(&a * &b).sum_all() + &(&c * &c).sum_all();
    let model = Model::new(trace.finish(&loss).unwrap()).unwrap();
    let mut cpu = CpuBackend::new();
    let start = model.init_params(2).unwrap();
    let mut state = TrainState::new(&mut cpu, &model, &start, TrainOptions::from(&Sgd::new(0.5))).unwrap();
    let out = state.step(&mut cpu, &model, &Feeds::new(), 0).unwrap();
    assert_eq!(out.measured_peak, out.predicted_peak);
    // Each parameter moved by its own gradient taken before any update: a -= 0.5 b, b -= 0.5 a.
    let (a0, b0) = (start.get("a").unwrap().to_f64_vec(), start.get("b").unwrap().to_f64_vec());
    let after = state.params(&mut cpu).unwrap();
    let a1: Vec<f64> = a0.iter().zip(&b0).map(|(a, b)| (a - 0.5 * b) as f32 as f64).collect();
    let b1: Vec<f64> = b0.iter().zip(&a0).map(|(b, a)| (b - 0.5 * a) as f32 as f64).collect();
    assert_eq!(after.get("a").unwrap().to_f64_vec(), a1);
    assert_eq!(after.get("b").unwrap().to_f64_vec(), b1);
}

#[test]
fn every_strategy_trains_to_the_same_bits() {
    // In f32, and in bf16 with f32 master weights.
    for (dtype, masters) in [(DType::F32, None), (DType::BF16, Some(DType::F32))] {
        let run = |strategy| {
            let model = mlp(dtype, strategy);
            let mut cpu = CpuBackend::new();
            let mut options = TrainOptions::from(&AdamW::new(1e-2)).clip_grad_norm(0.1);
            options.master_dtype = masters;
            let mut state = TrainState::new(&mut cpu, &model, &model.init_params(4).unwrap(), options).unwrap();
            for step in 0..3 {
                state.step(&mut cpu, &model, &feeds(step), step).unwrap();
            }
            bits(&state.params(&mut cpu).unwrap())
        };
        let reference = run(Strategy::Respect);
        let others =
            [Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.0)), Strategy::BudgetOffload(Budget::Fraction(0.0))];
        for strategy in others {
            assert_eq!(run(strategy), reference, "{dtype} {strategy:?}");
        }
    }
}

/// Stopping after two steps, saving (parameters and AdamW state through the host) and resuming
/// gives the bits of an uninterrupted run, with f32 and with f64 state.
#[test]
fn a_resumed_state_continues_as_if_never_stopped() {
    for state_dtype in [DType::F32, DType::F64] {
        let model = mlp(DType::F32, Strategy::MinCut);
        let options = TrainOptions::from(&AdamW::new(1e-2)).state_dtype(state_dtype);
        let mut cpu = CpuBackend::new();
        let start = model.init_params(8).unwrap();
        let mut whole = TrainState::new(&mut cpu, &model, &start, options).unwrap();
        let mut first = TrainState::new(&mut cpu, &model, &start, options).unwrap();
        for step in 0..4 {
            whole.step(&mut cpu, &model, &feeds(step), step).unwrap();
        }
        for step in 0..2 {
            first.step(&mut cpu, &model, &feeds(step), step).unwrap();
        }
        let params = first.params(&mut cpu).unwrap();
        let saved = first.adamw(&mut cpu).unwrap();
        drop(first);
        let mut resumed = TrainState::resume(&mut cpu, &model, &params, &saved, options).unwrap();
        assert_eq!(resumed.t(), 2);
        for step in 2..4 {
            resumed.step(&mut cpu, &model, &feeds(step), step).unwrap();
        }
        assert_eq!(bits(&resumed.params(&mut cpu).unwrap()), bits(&whole.params(&mut cpu).unwrap()), "{state_dtype}");
    }
}

#[test]
fn misuse_is_an_error_that_names_the_setting_or_the_value_and_changes_nothing() {
    let model = mlp(DType::F32, Strategy::MinCut);
    let params = model.init_params(0).unwrap();
    let mut cpu = CpuBackend::new();
    let bad = [
        (TrainOptions::from(&AdamW::new(f64::NAN)), "lr"),
        (TrainOptions::from(&AdamW::new(1e-3)).clip_grad_norm(0.0), "max_grad_norm"),
        (TrainOptions::from(&AdamW::new(1e-3)).state_dtype(DType::BF16), "f32 or f64"),
        (TrainOptions::from(&AdamW::new(1e-3)).master_weights(DType::F16), "master"),
        (TrainOptions::new(UpdateRule::Sgd { lr: 0.1, momentum: 1.5, weight_decay: 0.0 }), "momentum"),
    ];
    for (options, named) in bad {
        let err = TrainState::new(&mut cpu, &model, &params, options).err().expect("refused").to_string();
        assert!(err.contains(named), "{err}");
    }
    let mut state = TrainState::new(&mut cpu, &model, &params, TrainOptions::from(&AdamW::new(1e-3))).unwrap();
    // A wrong batch: refused before anything runs; the parameters and step count stay.
    let wrong = Feeds::new()
        .with("x", HostTensor::f32([6, 7], vec![0.0; 42]).unwrap())
        .with("y", HostTensor::i64([6], vec![0; 6]).unwrap());
    let err = state.step(&mut cpu, &model, &wrong, 0).unwrap_err().to_string();
    assert!(err.contains('x') && err.contains("[6, 7]"), "{err}");
    let missing = Feeds::new().with("x", HostTensor::f32([6, 8], vec![0.0; 48]).unwrap());
    let err = state.step(&mut cpu, &model, &missing, 0).unwrap_err().to_string();
    assert!(err.contains("`y`") || err.contains("y"), "{err}");
    assert_eq!((bits(&state.params(&mut cpu).unwrap()), state.t()), (bits(&params), 0));
    // Another model's parameters, or another model's step.
    let other = mlp(DType::BF16, Strategy::MinCut);
    let err = state.step(&mut cpu, &other, &feeds(0), 0).unwrap_err().to_string();
    assert!(err.contains("another model") && err.contains("w1") && err.contains("bf16"), "{err}");
    assert_eq!(bits(&state.params(&mut cpu).unwrap()), bits(&params));
    let sgd = TrainOptions::from(&Sgd::new(0.1));
    let err = TrainState::resume(&mut cpu, &model, &params, &AdamW::new(1e-3), sgd).err().unwrap().to_string();
    assert!(err.contains("SGD"), "{err}");
    let err = state.set_lr(-1.0).unwrap_err().to_string();
    assert!(err.contains("lr"), "{err}");
}

/// The CPU backend splits a large update over its threads; every element is the host
/// reference's (`host_update`, one thread), bit for bit, whatever the thread count.
#[test]
fn the_threaded_cpu_update_is_the_host_reference() {
    use remat_core::{host_sum_squares, host_update, HostData, UpdateCall};
    let n = 50_001;
    let tensor = |salt: u64, dtype: DType, f: fn(f64) -> f64| {
        let values: Vec<f64> = (0..n).map(|i| f(remat_core::normal_f64(salt, 0, i as u64))).collect();
        HostTensor::new(vec![n], HostData::from_f64(&values, dtype)).unwrap()
    };
    let rule = UpdateRule::AdamW { lr: 0.01, beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.1 };
    let call = UpdateCall { name: "w", coefficients: rule.coefficients(3), max_norm: Some(1.0) };
    for (param_dtype, state_dtype) in [(DType::F32, DType::F32), (DType::BF16, DType::F64), (DType::F8E4M3, DType::F32)]
    {
        let (w, g) = (tensor(1, param_dtype, |x| x), tensor(2, param_dtype, |x| x));
        // Moments as a few steps leave them: any m, a non-negative v.
        let (m, v) = (tensor(3, state_dtype, |x| 0.1 * x), tensor(4, state_dtype, |x| 0.01 * x * x));
        let (mut hw, mut hm, mut hv) = (w.clone(), m.clone(), v.clone());
        host_update(&call, &mut hw, &g, &mut [&mut hm, &mut hv], Some(host_sum_squares(&[&g]).unwrap())).unwrap();
        assert_ne!(hw, w, "the step changes the weights");
        for threads in [1, 3, 4] {
            let mut cpu = CpuBackend::with_threads(threads);
            let (mut bw, bg) = (cpu.upload(&w).unwrap(), cpu.upload(&g).unwrap());
            let mut state = vec![cpu.upload(&m).unwrap(), cpu.upload(&v).unwrap()];
            let sum = cpu.sum_squares(&[&bg]).unwrap();
            cpu.update(&call, &mut bw, &bg, &mut state, Some(&sum)).unwrap();
            let at = format!("{param_dtype} {state_dtype} on {threads} threads");
            assert_eq!(cpu.download(&bw).unwrap(), hw, "{at}");
            assert_eq!(
                (cpu.download(&state[0]).unwrap(), cpu.download(&state[1]).unwrap()),
                (hm.clone(), hv.clone()),
                "{at}"
            );
        }
    }
}

/// `Model::for_training` with `peak=B`: the planner gets B less what the optimizer holds, so
/// the whole step (state, masters, update included) predicts at most B, and measures what it
/// predicts; a B below the optimizer's own bytes is refused naming both.
#[test]
fn a_peak_for_training_bounds_the_whole_step() {
    let options = TrainOptions::from(&AdamW::new(1e-2)).master_weights(DType::F32).clip_grad_norm(1.0);
    let unbounded = {
        let model = Model::for_training(mlp_graph(DType::BF16), Strategy::Respect, &options).unwrap();
        let mut cpu = CpuBackend::new();
        TrainState::new(&mut cpu, &model, &model.init_params(0).unwrap(), options).unwrap().predicted_peak(&model)
    };
    let (mut fitted, mut refused) = (0, 0);
    for less in (0..12).map(|k| k * 24) {
        let limit = unbounded as u64 - less;
        let model = match Model::for_training(mlp_graph(DType::BF16), Strategy::Peak(limit), &options) {
            Ok(model) => model,
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("optimizer holds"), "{text}");
                let remat_core::Error::Infeasible { asked, least, .. } = e else { panic!("{text}") };
                assert_eq!(asked, limit, "{text}");
                assert!(least.is_none_or(|l| l > limit), "{text}");
                refused += 1;
                continue;
            }
        };
        let mut cpu = CpuBackend::new();
        let mut state = TrainState::new(&mut cpu, &model, &model.init_params(0).unwrap(), options).unwrap();
        let out = state.step(&mut cpu, &model, &feeds(0), 0).unwrap();
        assert!(out.predicted_peak as u64 <= limit, "peak={limit}: predicted {}", out.predicted_peak);
        assert_eq!(out.measured_peak, out.predicted_peak, "peak={limit}");
        fitted += 1;
    }
    assert!(fitted >= 2 && refused >= 1, "{fitted} limits fitted, {refused} refused");
    let err = Model::for_training(mlp_graph(DType::BF16), Strategy::Peak(100), &options).err().unwrap().to_string();
    assert!(err.contains("peak=100") && err.contains("optimizer holds"), "{err}");
}
