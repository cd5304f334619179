//! Every op's gradient against central finite differences in f64, on random inputs, several
//! shapes each (broadcasting included). One test per op.

use remat_core::{AttnLayout, CpuBackend, DType, Domain, Feeds, HostTensor, Model, Params, Tensor, Trace, UnaryOp};

/// How to draw an operand's values.
#[derive(Clone, Copy)]
enum Draw {
    /// Standard normal.
    Normal,
    /// Uniform in [0.5, 2): for log, sqrt, rsqrt, denominators.
    Positive,
}

struct Operand<'a> {
    shape: &'a [usize],
    draw: Draw,
}

fn n(shape: &[usize]) -> Operand<'_> {
    Operand { shape, draw: Draw::Normal }
}

fn pos(shape: &[usize]) -> Operand<'_> {
    Operand { shape, draw: Draw::Positive }
}

/// Deterministic pseudo-random values (a tiny LCG: the test must not depend on the code it tests).
fn values(count: usize, draw: Draw, seed: u64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut uniform = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 11) as f64) / ((1u64 << 53) as f64)
    };
    (0..count)
        .map(|_| match draw {
            Draw::Positive => 0.5 + 1.5 * uniform(),
            Draw::Normal => {
                let (u1, u2) = (uniform().max(1e-12), uniform());
                (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
            }
        })
        .collect()
}

/// Builds `loss = sum(f(params, trace) * r)` for a fixed random `r`, then compares the autodiff
/// gradient of every parameter element with a central difference.
fn check(operands: &[Operand<'_>], f: impl Fn(&Trace, &[Tensor]) -> Tensor) {
    check_tol(operands, 1e-6, 1e-5, f)
}

/// [`check`] with a relative tolerance `tol` and a finite-difference step `h`.
fn check_tol(operands: &[Operand<'_>], tol: f64, h: f64, f: impl Fn(&Trace, &[Tensor]) -> Tensor) {
    let trace = Trace::new();
    let params: Vec<Tensor> =
        operands.iter().enumerate().map(|(i, o)| trace.param(&format!("p{i}"), o.shape, DType::F64)).collect();
    let y = f(&trace, &params);
    let y_shape = y.shape();
    let r = trace.input("r", &y_shape, DType::F64);
    let loss = (&y * &r).sum_all();
    let model = Model::new(trace.finish(&loss).expect("the op traces")).expect("the op differentiates");

    let mut params = model.init_params(0).unwrap();
    for (i, o) in operands.iter().enumerate() {
        let count = o.shape.iter().product();
        params.set(&format!("p{i}"), HostTensor::f64(o.shape, values(count, o.draw, 11 + i as u64)).unwrap()).unwrap();
    }
    let r_count = y_shape.iter().product();
    let feeds = Feeds::new().with("r", HostTensor::f64(y_shape.clone(), values(r_count, Draw::Normal, 99)).unwrap());
    let mut cpu = CpuBackend::new();
    let out = model.step(&mut cpu, &params, &feeds).expect("the step runs");

    let loss_at = |p: &Params, cpu: &mut CpuBackend| model.step(cpu, p, &feeds).unwrap().loss;
    for (i, grad) in out.grads.iter().enumerate() {
        let analytic = grad.to_f64_vec();
        let base = params.values()[i].to_f64_vec();
        for j in 0..base.len() {
            let mut shifted = |delta: f64| {
                let mut v = base.clone();
                v[j] += delta;
                let mut p = params.clone();
                p.set(&format!("p{i}"), HostTensor::f64(operands[i].shape, v).unwrap()).unwrap();
                loss_at(&p, &mut cpu)
            };
            let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
            let err = (analytic[j] - numeric).abs();
            assert!(
                err <= tol * numeric.abs().max(1.0),
                "param {i} element {j}: autodiff {} vs finite difference {numeric} (error {err:e})",
                analytic[j]
            );
        }
    }
}

macro_rules! binary_test {
    ($name:ident, $op:expr, $b_draw:ident) => {
        #[test]
        fn $name() {
            let op = $op;
            let shapes: [(&[usize], &[usize]); 4] =
                [(&[3, 4], &[3, 4]), (&[2, 3, 4], &[4]), (&[3, 1], &[1, 4]), (&[], &[2, 3])];
            for (a, b) in shapes {
                check(&[n(a), $b_draw(b)], |_, p| op(&p[0], &p[1]));
            }
        }
    };
}

binary_test!(add, |a: &Tensor, b: &Tensor| a + b, n);
binary_test!(sub, |a: &Tensor, b: &Tensor| a - b, n);
binary_test!(mul, |a: &Tensor, b: &Tensor| a * b, n);
binary_test!(div, |a: &Tensor, b: &Tensor| a / b, pos);
binary_test!(maximum, |a: &Tensor, b: &Tensor| a.maximum(b), n);
binary_test!(minimum, |a: &Tensor, b: &Tensor| a.minimum(b), n);

/// Every op of the catalog's unary family, drawn from its declared domain: a new unary op is
/// checked here without a line of its own.
#[test]
fn every_unary_op() {
    for &u in UnaryOp::ALL {
        let draw = match u.domain() {
            Domain::Real => n,
            Domain::Positive => pos,
        };
        for shape in [&[5][..], &[2, 3, 4], &[]] {
            let checked = std::panic::catch_unwind(|| check(&[draw(shape)], |_, p| p[0].unary(u)));
            assert!(checked.is_ok(), "{} on {shape:?}: gradient does not match (see above)", u.name());
        }
    }
}

macro_rules! unary_test {
    ($name:ident, $draw:ident, $body:expr) => {
        #[test]
        fn $name() {
            let f = $body;
            for shape in [&[5][..], &[2, 3, 4], &[]] {
                check(&[$draw(shape)], |_, p| f(&p[0]));
            }
        }
    };
}

unary_test!(clamp, n, |x: &Tensor| x.clamp(-0.5, 0.7));
unary_test!(scalar_arithmetic, n, |x: &Tensor| (x * 3.0 + 1.0) / 2.0 - 0.25);

#[test]
fn sum() {
    check(&[n(&[2, 3, 4])], |_, p| p[0].sum(&[1], false));
    check(&[n(&[2, 3, 4])], |_, p| p[0].sum(&[0, 2], true));
    check(&[n(&[5])], |_, p| p[0].sum_all());
}

#[test]
fn mean() {
    check(&[n(&[2, 3, 4])], |_, p| p[0].mean(&[2], false));
    check(&[n(&[2, 3, 4])], |_, p| p[0].mean(&[0, 1], true));
    check(&[n(&[4, 3])], |_, p| p[0].mean_all());
}

#[test]
fn amax() {
    check(&[n(&[2, 3, 4])], |_, p| p[0].amax(&[2], false));
    check(&[n(&[2, 3, 4])], |_, p| p[0].amax(&[0, 1], true));
    check(&[n(&[6])], |_, p| p[0].amax(&[0], false));
}

#[test]
fn matmul() {
    let shapes: [(&[usize], &[usize]); 4] =
        [(&[3, 4], &[4, 5]), (&[2, 3, 4], &[4, 5]), (&[2, 1, 3, 4], &[3, 4, 2]), (&[3, 4], &[2, 4, 3])];
    for (a, b) in shapes {
        check(&[n(a), n(b)], |_, p| p[0].matmul(&p[1]));
    }
}

#[test]
fn reshape() {
    check(&[n(&[2, 3, 4])], |_, p| p[0].reshape(&[6, 4]));
    check(&[n(&[6])], |_, p| p[0].reshape(&[1, 2, 3]));
}

#[test]
fn transpose() {
    check(&[n(&[2, 3, 4])], |_, p| p[0].transpose(&[2, 0, 1]));
    check(&[n(&[3, 5])], |_, p| p[0].t());
}

#[test]
fn expand() {
    check(&[n(&[3, 1])], |_, p| p[0].expand(&[2, 3, 4]));
    check(&[n(&[4])], |_, p| p[0].expand(&[3, 4]));
}

#[test]
fn concat() {
    check(&[n(&[2, 3]), n(&[2, 2]), n(&[2, 1])], |_, p| p[0].concat(&[&p[1], &p[2]], 1));
    check(&[n(&[1, 4]), n(&[3, 4])], |_, p| p[0].concat(&[&p[1]], 0));
}

#[test]
fn softmax() {
    check(&[n(&[3, 5])], |_, p| p[0].softmax());
    check(&[n(&[2, 2, 4])], |_, p| p[0].softmax());
}

#[test]
fn log_softmax() {
    check(&[n(&[3, 5])], |_, p| p[0].log_softmax());
    check(&[n(&[2, 2, 4])], |_, p| p[0].log_softmax());
}

#[test]
fn layer_norm() {
    check(&[n(&[3, 6])], |_, p| p[0].layer_norm(1e-5));
    check(&[n(&[2, 2, 5])], |_, p| p[0].layer_norm(1e-3));
}

#[test]
fn cross_entropy() {
    for (logits, rows) in [(&[4usize, 5][..], &[4usize][..]), (&[2, 3, 4], &[2, 3])] {
        check(&[n(logits)], |trace, p| {
            let targets = trace.constant(0.0, rows, DType::I64);
            let shifted = trace.constant(2.0, rows, DType::I64);
            p[0].cross_entropy(&targets) + p[0].cross_entropy(&shifted)
        });
    }
}

#[test]
fn embedding() {
    check(&[n(&[5, 3])], |trace, p| {
        // Ids 0 and 3, with 3 repeated, so the scatter-add of the gradient is exercised.
        let zero = trace.constant(0.0, &[2, 2], DType::I64);
        let three = trace.constant(3.0, &[2, 1], DType::I64);
        let ids = zero.concat(&[&three], 1);
        p[0].embedding(&ids)
    });
}

#[test]
fn cast() {
    check(&[n(&[3, 4])], |_, p| p[0].cast(DType::F64));
    // Through f32 the function is rounded, so the step must dwarf f32 rounding (the central
    // difference of a square is exact for any step) and only f32 accuracy can be asked.
    check_tol(&[n(&[3, 4])], 1e-5, 1e-2, |_, p| p[0].cast(DType::F32).square().cast(DType::F64));
    // Through i64 or bool the value is piecewise constant: no gradient flows through the cast,
    // and away from the steps (a 3·x far from integers for these draws) differences agree.
    check(&[n(&[3, 4])], |_, p| &(&p[0] * 3.0).cast(DType::I64).cast(DType::F64) * &p[0]);
    check(&[n(&[3, 4])], |_, p| &(&p[0] * 3.0).cast(DType::I32).cast(DType::F64) * &p[0]);
    check(&[n(&[3, 4])], |_, p| &p[0].cast(DType::Bool).cast(DType::F64) * &p[0].exp());
}

#[test]
fn dropout() {
    check(&[n(&[4, 6])], |_, p| p[0].dropout(0.3, 5));
    check(&[n(&[17])], |_, p| p[0].dropout(0.5, 1).exp());
}

#[test]
fn scaled_matmul() {
    // fp8 casts are straight-through and rounding defeats finite differences, so the gradient
    // is checked against its closed form: dL/da = (r * sa * sb) · bᵀ, with a, b the fp8 values.
    let trace = Trace::new();
    let a = trace.param("a", &[2, 3], DType::F32);
    let b = trace.param("b", &[3, 2], DType::F32);
    let sa = trace.constant(0.5, &[], DType::F32);
    let sb = trace.constant(4.0, &[], DType::F32);
    let y = Tensor::scaled_matmul(&a.cast(DType::F8E4M3), &b.cast(DType::F8E4M3), &sa, &sb);
    let r = trace.input("r", &[2, 2], DType::F32);
    let loss = (&y * &r).sum_all();
    let model = Model::new(trace.finish(&loss).unwrap()).unwrap();
    let mut params = model.init_params(0).unwrap();
    // Values exactly representable in e4m3.
    let av = vec![1.0, -0.5, 2.0, 0.25, 3.0, -1.5];
    let bv = vec![0.5, 1.0, -2.0, 1.5, 0.75, -0.25];
    params.set("a", HostTensor::f32([2, 3], av.clone()).unwrap()).unwrap();
    params.set("b", HostTensor::f32([3, 2], bv.clone()).unwrap()).unwrap();
    let rv = vec![1.0f32, -1.0, 0.5, 2.0];
    let feeds = Feeds::new().with("r", HostTensor::f32([2, 2], rv.clone()).unwrap());
    let out = model.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
    let s = 0.5 * 4.0;
    let mut expect_loss = 0.0;
    let mut ga = vec![0.0f32; 6];
    let mut gb = vec![0.0f32; 6];
    for i in 0..2 {
        for j in 0..2 {
            let y: f32 = (0..3).map(|k| av[i * 3 + k] * bv[k * 2 + j]).sum::<f32>() * s;
            expect_loss += (y * rv[i * 2 + j]) as f64;
            for k in 0..3 {
                ga[i * 3 + k] += rv[i * 2 + j] * s * bv[k * 2 + j];
                gb[k * 2 + j] += rv[i * 2 + j] * s * av[i * 3 + k];
            }
        }
    }
    assert!((out.loss - expect_loss).abs() < 1e-5, "loss {} vs {expect_loss}", out.loss);
    assert_eq!(out.grads[0].to_f32_vec(), ga);
    assert_eq!(out.grads[1].to_f32_vec(), gb);
}

unary_test!(pow_integer, n, |x: &Tensor| x.pow(3.0));
unary_test!(pow_fractional, pos, |x: &Tensor| x.pow(-1.5));

#[test]
fn rms_norm() {
    check(&[n(&[3, 6])], |_, p| p[0].rms_norm(1e-5));
    check(&[n(&[2, 2, 5])], |_, p| p[0].rms_norm(1e-3));
}

#[test]
fn slice() {
    check(&[n(&[2, 5, 3])], |_, p| p[0].slice(1, 1, 3));
    check(&[n(&[4, 2])], |_, p| p[0].narrow(0, 3, 1).exp());
}

#[test]
fn index_select() {
    check(&[n(&[3, 4])], |trace, p| {
        // Repeated and reordered indices: the gradient's scatter-add sums the repeats.
        let idx = trace.constant_from("idx", HostTensor::i64([5], vec![2, 0, 2, 3, 2]).unwrap());
        p[0].index_select(1, &idx)
    });
    check(&[n(&[4, 2, 3])], |trace, p| {
        let idx = trace.constant_from("idx", HostTensor::i64([2], vec![3, 1]).unwrap());
        p[0].index_select(0, &idx)
    });
}

#[test]
fn cumsum() {
    check(&[n(&[2, 5, 3])], |_, p| p[0].cumsum(1));
    check(&[n(&[4, 3])], |_, p| p[0].reverse_cumsum(0));
    check(&[n(&[6])], |_, p| p[0].cumsum(0).cumsum(0));
}

#[test]
fn index_add() {
    // Repeated indices add up: each src slice's gradient is the target's.
    check(&[n(&[3, 4]), n(&[3, 5])], |trace, p| {
        let idx = trace.constant_from("idx", HostTensor::i64([5], vec![2, 0, 2, 3, 2]).unwrap());
        p[0].index_add(1, &idx, &p[1])
    });
    check(&[n(&[4, 2]), n(&[2, 2])], |trace, p| {
        let idx = trace.constant_from("idx", HostTensor::i64([2], vec![3, 3]).unwrap());
        p[0].index_add(0, &idx, &p[1]).square()
    });
}

#[test]
fn scatter_add() {
    check(&[n(&[3, 4]), n(&[3, 2])], |trace, p| {
        let idx = trace.constant_from("idx", HostTensor::i64([3, 2], vec![1, 1, 0, 3, 2, 0]).unwrap());
        p[0].scatter_add(1, &idx, &p[1]).square()
    });
    check(&[n(&[2, 3]), n(&[4, 3])], |trace, p| {
        let idx =
            trace.constant_from("idx", HostTensor::i64([4, 3], vec![0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1]).unwrap());
        p[0].scatter_add(0, &idx, &p[1])
    });
}

#[test]
fn topk_and_sort_values() {
    // Gradients reach the picked entries through the values' gather; the positions carry none.
    // Distinct random values: a small step does not reorder them.
    check(&[n(&[3, 6])], |_, p| p[0].topk(2, 1).0);
    check(&[n(&[5, 2])], |_, p| p[0].bottomk(3, 0).0.exp());
    check(&[n(&[2, 5])], |_, p| p[0].sort(1, true).0);
    check(&[n(&[4, 3])], |_, p| {
        let (weights, experts) = p[0].softmax().topk(2, 1);
        &weights * &experts.cast(DType::F64)
    });
}

#[test]
fn routing_carries_no_gradient() {
    // The selected positions, their one-hot rows and counts depend on x only through
    // comparisons: every path through them contributes nothing, and the rest is checked.
    check(&[n(&[4, 5])], |_, p| {
        let picked = p[0].argmax(1, false).one_hot(5, DType::F64);
        let load = p[0].argmin(1, false).bincount(5).cast(DType::F64);
        &(&p[0] * &picked) + &load
    });
}

#[test]
fn gather() {
    check(&[n(&[3, 4])], |trace, p| {
        // Repeats within a row: the scatter-add sums them.
        let idx = trace.constant_from("idx", HostTensor::i64([3, 2], vec![3, 3, 0, 1, 2, 0]).unwrap());
        p[0].gather(1, &idx)
    });
    check(&[n(&[4, 2, 3])], |trace, p| {
        let idx = trace
            .constant_from("idx", HostTensor::i64([2, 2, 3], (0..12).map(|i| (i * 7 % 4) as i64).collect()).unwrap());
        p[0].gather(0, &idx)
    });
}

#[test]
fn where_and_comparisons() {
    // The condition compares a constant pattern, so no point sits on the comparison's edge.
    check(&[n(&[3, 4]), n(&[4])], |trace, p| {
        let pattern =
            trace.constant_from("pat", HostTensor::f64([3, 4], (0..12).map(|i| (i % 3) as f64).collect()).unwrap());
        let one = trace.constant(1.0, &[], DType::F64);
        let cond = pattern.lt(&one);
        cond.where_(&p[0], &p[1])
    });
    check(&[n(&[2, 3])], |trace, p| {
        let ids = trace.arange(0.0, 1.0, 3, DType::I64);
        let two = trace.constant(2.0, &[], DType::I64);
        p[0].masked_fill(&ids.ge(&two), -1e4).softmax()
    });
}

#[test]
fn constant_data_and_arange_are_constants() {
    check(&[n(&[2, 3])], |trace, p| {
        let table = trace.constant_from("table", HostTensor::f64([3], vec![0.5, -1.0, 2.0]).unwrap());
        let steps = trace.arange(1.0, 0.5, 3, DType::F64);
        &(&p[0] * &table) + &steps
    });
}

/// The unfused composition the fused attention must agree with.
fn attention_reference(q: &Tensor, k: &Tensor, v: &Tensor, trace: &Trace, causal: bool, scale: f64) -> Tensor {
    let s = q.matmul(&k.t()) * scale;
    let s = if causal {
        let t = q.shape()[q.rank() - 2];
        let rows = trace.arange(0.0, 1.0, t, DType::I64).reshape(&[t, 1]);
        let cols = trace.arange(0.0, 1.0, t, DType::I64);
        s.masked_fill(&cols.gt(&rows), -1e30)
    } else {
        s
    };
    s.softmax().matmul(v)
}

#[test]
fn scaled_dot_product_attention() {
    for causal in [false, true] {
        check(&[n(&[2, 5, 3]), n(&[2, 5, 3]), n(&[2, 5, 4])], |_, p| {
            Tensor::scaled_dot_product_attention(&p[0], &p[1], &p[2], causal, 0.7)
        });
    }
    // More queries than keys, and a head axis.
    check(&[n(&[1, 2, 3, 2]), n(&[1, 2, 2, 2]), n(&[1, 2, 2, 3])], |_, p| {
        Tensor::scaled_dot_product_attention(&p[0], &p[1], &p[2], false, 0.5)
    });
    // Token-major `[o, t, heads, d]`: three heads read in place, more queries than keys.
    for causal in [false, true] {
        check(&[n(&[2, 4, 3, 2]), n(&[2, 3, 3, 2]), n(&[2, 3, 3, 3])], |_, p| {
            Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, &p[0], &p[1], &p[2], causal, 0.6)
        });
    }
}

#[test]
fn fused_attention_gradients_match_the_unfused_composition() {
    let (t, d) = (70, 8);
    let grads = |fused: bool, causal: bool| {
        let trace = Trace::new();
        let q = trace.param("q", &[2, t, d], DType::F64);
        let k = trace.param("k", &[2, t, d], DType::F64);
        let v = trace.param("v", &[2, t, d], DType::F64);
        let y = if fused {
            Tensor::scaled_dot_product_attention(&q, &k, &v, causal, 0.3)
        } else {
            attention_reference(&q, &k, &v, &trace, causal, 0.3)
        };
        let r = trace.input("r", &[2, t, d], DType::F64);
        let loss = (&y * &r).sum_all();
        let model = Model::new(trace.finish(&loss).unwrap()).unwrap();
        let mut params = model.init_params(0).unwrap();
        for (i, name) in ["q", "k", "v"].iter().enumerate() {
            params
                .set(name, HostTensor::f64([2, t, d], values(2 * t * d, Draw::Normal, 3 + i as u64)).unwrap())
                .unwrap();
        }
        let feeds = Feeds::new().with("r", HostTensor::f64([2, t, d], values(2 * t * d, Draw::Normal, 9)).unwrap());
        let out = model.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
        (out.loss, out.grads.iter().map(|g| g.to_f64_vec()).collect::<Vec<_>>())
    };
    for causal in [false, true] {
        let (fl, fg) = grads(true, causal);
        let (ul, ug) = grads(false, causal);
        assert!((fl - ul).abs() < 1e-9 * ul.abs().max(1.0), "loss {fl} vs {ul}");
        for (a, b) in fg.iter().zip(&ug) {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-9 * y.abs().max(1.0), "gradient {x} vs {y} (causal {causal})");
            }
        }
    }
}

#[test]
fn constant_data_is_resident_not_fed_and_not_recomputed() {
    let trace = Trace::new();
    let x = trace.param("x", &[2, 3], DType::F32);
    let table = trace.constant_from("table", HostTensor::f32([3], vec![1.0, 2.0, 3.0]).unwrap());
    let model = Model::new(trace.finish(&(&x * &table).sum_all()).unwrap()).unwrap();
    let id = table.id().unwrap();
    assert!(model.plan().resident().contains(&id), "a data constant is resident like a parameter");
    assert!(model.partition().unwrap().recomputed.iter().all(|&r| r != id));
    let mut params = model.init_params(0).unwrap();
    params.set("x", HostTensor::f32([2, 3], vec![1.0; 6]).unwrap()).unwrap();
    let out = model.step(&mut CpuBackend::new(), &params, &Feeds::new()).unwrap();
    assert_eq!(out.loss, 12.0);
    assert_eq!(out.grads[0].to_f32_vec(), [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    let fed = Feeds::new().with("table", HostTensor::f32([3], vec![0.0; 3]).unwrap());
    let err = model.step(&mut CpuBackend::new(), &params, &fed).unwrap_err().to_string();
    assert!(err.contains("not an input"), "{err}");
}
