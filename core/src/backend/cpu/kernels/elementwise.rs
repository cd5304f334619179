//! Elementwise kernels: broadcasting binary ops, unary ops, their pointwise gradients and
//! dropout.

use super::strided::{coalesce, row_offsets};
use super::{finish, node_err, Float, KernelCall};
use super::{simd, split};
use crate::error::Result;
use crate::host::HostTensor;
use crate::op::{BinaryOp, UnaryGradOp, UnaryOp};
use crate::rng;
use crate::shape::broadcast_strides;
use std::mem::MaybeUninit;

/// `f(a, b)` with numpy broadcasting into `out_shape`. Same shapes zip directly; otherwise the
/// coalesced loop runs over rows whose inner axis is contiguous or broadcast (a scalar operand,
/// or a trailing row like `[B, T, D] + [D]`), which covers the common cases with plain slices.
pub(super) fn broadcast_zip<T: Float>(
    out_shape: &[usize],
    (a_shape, a): (&[usize], &[T]),
    (b_shape, b): (&[usize], &[T]),
    f: impl Fn(T, T) -> T + Sync,
) -> Vec<T> {
    if a_shape == b_shape {
        return simd::zip(a, b, f);
    }
    let (sa, sb) = (broadcast_strides(a_shape, out_shape), broadcast_strides(b_shape, out_shape));
    let (shape, s) = coalesce(out_shape, &[&sa, &sb]);
    let r = shape.len();
    let inner = shape[r - 1].max(1);
    let rows_a = row_offsets(&shape, &s[0]);
    let rows_b = row_offsets(&shape, &s[1]);
    let steps = (s[0][r - 1], s[1][r - 1]);
    let fill = |at: usize, chunk: &mut [MaybeUninit<T>]| {
        let rows = at / inner..(at + chunk.len()) / inner;
        broadcast_rows(chunk, a, &rows_a[rows.clone()], b, &rows_b[rows], inner, steps, &f)
    };
    // SAFETY: chunks hold whole rows (`par_fill` splits at multiples of `inner`, and the output
    // is `rows · inner` long), and `broadcast_rows` writes every element of each row.
    unsafe { split::par_fill(out_shape.iter().product(), inner, fill) }
}

crate::cpu_features::wide_fn! {
    #[allow(clippy::too_many_arguments)]
    /// Rows of [`broadcast_zip`]: `out` holds consecutive rows of `inner` elements, row `i`
    /// reading `a` from `rows_a[i]` and `b` from `rows_b[i]` with inner steps `steps`. Writes
    /// every element of `out`.
    fn broadcast_rows<[T: Float, F: Fn(T, T) -> T]>[T, F](
        out: &mut [MaybeUninit<T>],
        a: &[T],
        rows_a: &[usize],
        b: &[T],
        rows_b: &[usize],
        inner: usize,
        steps: (usize, usize),
        f: &F,
    ) -> () {
        for ((o, &oa), &ob) in out.chunks_exact_mut(inner).zip(rows_a).zip(rows_b) {
            match steps {
                (1, 1) => o.iter_mut().zip(&a[oa..oa + inner]).zip(&b[ob..ob + inner]).for_each(|((o, &x), &y)| { o.write(f(x, y)); }),
                (1, 0) => o.iter_mut().zip(&a[oa..oa + inner]).for_each(|(o, &x)| { o.write(f(x, b[ob])); }),
                (0, 1) => o.iter_mut().zip(&b[ob..ob + inner]).for_each(|(o, &y)| { o.write(f(a[oa], y)); }),
                (ia, ib) => o.iter_mut().enumerate().for_each(|(j, o)| { o.write(f(a[oa + j * ia], b[ob + j * ib])); }),
            }
        }
    }
}

/// NaN-propagating maximum (like `torch.maximum`).
#[inline]
fn maximum<T: Float>(a: T, b: T) -> T {
    if a >= b || a.is_nan() {
        a
    } else {
        b
    }
}

/// NaN-propagating minimum (like `torch.minimum`).
#[inline]
fn minimum<T: Float>(a: T, b: T) -> T {
    if a <= b || a.is_nan() {
        a
    } else {
        b
    }
}

/// `add sub mul div maximum minimum maximum_mask` on floats, broadcasting.
pub(super) fn binary<T: Float>(
    call: &KernelCall<'_>,
    op: BinaryOp,
    a: &HostTensor,
    b: &HostTensor,
) -> Result<HostTensor> {
    let (av, bv) = (T::read(a.data()), T::read(b.data()));
    let (x, y) = ((a.shape(), &av[..]), (b.shape(), &bv[..]));
    let half = T::of(0.5);
    let out = match op {
        BinaryOp::Add => broadcast_zip(call.out_shape, x, y, |p, q| p + q),
        BinaryOp::Sub => broadcast_zip(call.out_shape, x, y, |p, q| p - q),
        BinaryOp::Mul => broadcast_zip(call.out_shape, x, y, |p, q| p * q),
        BinaryOp::Div => broadcast_zip(call.out_shape, x, y, |p, q| p / q),
        BinaryOp::Maximum => broadcast_zip(call.out_shape, x, y, maximum),
        BinaryOp::Minimum => broadcast_zip(call.out_shape, x, y, minimum),
        BinaryOp::Rem => return Err(node_err(call, "rem is integer remainder: its operands must be i64")),
        BinaryOp::MaximumMask => broadcast_zip(call.out_shape, x, y, |p, q| {
            if p > q {
                T::ONE
            } else if p == q {
                half
            } else {
                T::ZERO
            }
        }),
    };
    finish(call, out)
}

/// The tanh-approximation GELU constants: √(2/π) and the cubic coefficient.
const GELU_C: f64 = 0.797_884_560_802_865_4;
const GELU_A: f64 = 0.044_715;

/// tanh as GELU uses it: exact in f64; in f32 a rational approximation (Eigen's, 13/6) within
/// 3e-7 (2.5 ulp) of libm's tanhf and five times faster, since GELU and its gradient are among the most
/// frequent ops a recompute replays.
#[inline]
fn gelu_tanh<T: Float>(u: T) -> T {
    if T::IS_F64 {
        return u.tanh();
    }
    let limit = T::of(7.905_311_107_635_498);
    let u = if u > limit {
        limit
    } else if u < -limit {
        -limit
    } else {
        u
    };
    let u2 = u * u;
    let c = T::of;
    let num = c(4.893_524_558_917_86e-3)
        + u2 * (c(6.372_619_288_754_36e-4)
            + u2 * (c(1.485_722_357_179_79e-5)
                + u2 * (c(5.122_297_090_371_14e-8)
                    + u2 * (c(-8.604_671_522_137_35e-11)
                        + u2 * (c(2.000_187_904_824_77e-13) + u2 * c(-2.760_768_477_423_55e-16))))));
    let den = c(4.893_525_185_543_85e-3)
        + u2 * (c(2.268_434_632_439e-3) + u2 * (c(1.185_347_056_866_54e-4) + u2 * c(1.198_258_394_667_02e-6)));
    let t = u * num / den;
    if t > T::ONE {
        T::ONE
    } else if t < -T::ONE {
        -T::ONE
    } else {
        t
    }
}

#[inline]
fn gelu<T: Float>(x: T) -> T {
    let (c, a, half) = (T::of(GELU_C), T::of(GELU_A), T::of(0.5));
    half * x * (T::ONE + gelu_tanh(c * (x + a * x * x * x)))
}

/// d/dx of [`gelu`]: ½(1 + tanh u) + ½x(1 − tanh²u)·c(1 + 3a x²), with u = c(x + a x³).
#[inline]
fn gelu_grad<T: Float>(x: T) -> T {
    let (c, a, half) = (T::of(GELU_C), T::of(GELU_A), T::of(0.5));
    let t = gelu_tanh(c * (x + a * x * x * x));
    half * (T::ONE + t) + half * x * (T::ONE - t * t) * c * (T::ONE + T::of(3.0) * a * x * x)
}

/// `max(x, 0)`; `<= 0` is false for NaN, so NaN passes through (as in torch).
#[inline]
fn relu<T: Float>(x: T) -> T {
    if x <= T::ZERO {
        T::ZERO
    } else {
        x
    }
}

/// SiLU `x·σ(x)`.
#[inline]
fn silu<T: Float>(x: T) -> T {
    x / (T::ONE + (-x).exp())
}

/// d/dx of [`silu`]: σ(x)·(1 + x·(1 − σ(x))).
#[inline]
fn silu_grad<T: Float>(x: T) -> T {
    let s = T::ONE / (T::ONE + (-x).exp());
    s * (T::ONE + x * (T::ONE - s))
}

/// `x^p` for a constant `p`: exact small integer powers by multiplication (so `pow(x, 2)`
/// equals `square`), else `exp(p·ln x)` (NaN for negative `x`, as `powf`).
#[inline]
pub(super) fn pow<T: Float>(x: T, p: f64) -> T {
    if p == 0.0 {
        return T::ONE;
    }
    if p.fract() == 0.0 && p.abs() <= 16.0 {
        let mut r = T::ONE;
        for _ in 0..p.abs() as u32 {
            r = r * x;
        }
        return if p < 0.0 { T::ONE / r } else { r };
    }
    if x == T::ZERO {
        return if p > 0.0 { T::ZERO } else { T::ONE / T::ZERO };
    }
    (T::of(p) * x.ln()).exp()
}

fn map<T: Float>(x: &[T], f: impl Fn(T) -> T + Sync) -> Vec<T> {
    simd::map(x, f)
}

/// `min(max(x, lo), hi)`.
pub(super) fn clamp<T: Float>(call: &KernelCall<'_>, x: &HostTensor, min: f64, max: f64) -> Result<HostTensor> {
    let (lo, hi) = (T::of(min), T::of(max));
    let clamped = |v| {
        if v < lo {
            lo
        } else if v > hi {
            hi
        } else {
            v
        }
    };
    finish(call, map(&T::read(x.data()), clamped))
}

/// `x^p` for a constant `p`.
pub(super) fn pow_const<T: Float>(call: &KernelCall<'_>, x: &HostTensor, p: f64) -> Result<HostTensor> {
    finish(call, map(&T::read(x.data()), |v| pow(v, p)))
}

/// The [`UnaryOp`] family: one expression per op.
pub(super) fn unary<T: Float>(call: &KernelCall<'_>, x: &HostTensor, unary: UnaryOp) -> Result<HostTensor> {
    let xv = T::read(x.data());
    let x = &xv[..];
    let out = match unary {
        UnaryOp::Neg => map(x, |v| -v),
        UnaryOp::Exp => map(x, T::exp),
        UnaryOp::Log => map(x, T::ln),
        UnaryOp::Sin => map(x, T::sin),
        UnaryOp::Cos => map(x, T::cos),
        UnaryOp::Tanh => map(x, T::tanh),
        UnaryOp::Sigmoid => map(x, |v| T::ONE / (T::ONE + (-v).exp())),
        UnaryOp::Relu => map(x, relu),
        UnaryOp::Gelu => map(x, gelu),
        UnaryOp::Silu => map(x, silu),
        UnaryOp::Abs => map(x, T::abs),
        UnaryOp::Sqrt => map(x, T::sqrt),
        UnaryOp::Rsqrt => map(x, |v| T::ONE / v.sqrt()),
        UnaryOp::Reciprocal => map(x, |v| T::ONE / v),
        UnaryOp::Square => map(x, |v| v * v),
        UnaryOp::Softplus => map(x, |v| relu(v) + (T::ONE + (-v.abs()).exp()).ln()),
    };
    finish(call, out)
}

/// `-1`, `0` or `1` by the sign of `v`; 0 stays 0 and NaN stays NaN.
#[inline]
fn sign<T: Float>(v: T) -> T {
    if v > T::ZERO {
        T::ONE
    } else if v < T::ZERO {
        -T::ONE
    } else {
        v * T::ZERO
    }
}

/// `g` where `lo <= x <= hi`, else 0 (`clamp_grad`), same shapes (checked by the shape rule).
pub(super) fn clamp_grad<T: Float>(
    call: &KernelCall<'_>,
    x: &HostTensor,
    g: &HostTensor,
    min: f64,
    max: f64,
) -> Result<HostTensor> {
    let (xv, gv) = (T::read(x.data()), T::read(g.data()));
    let (lo, hi) = (T::of(min), T::of(max));
    finish(call, simd::zip(&xv, &gv, |v, g| if lo <= v && v <= hi { g } else { T::ZERO }))
}

/// The [`UnaryGradOp`] family: `g · f'(v)` for `(v, g)` of one shape, one expression per op.
pub(super) fn unary_grad<T: Float>(
    call: &KernelCall<'_>,
    v: &HostTensor,
    g: &HostTensor,
    op: UnaryGradOp,
) -> Result<HostTensor> {
    let (xv, gv) = (T::read(v.data()), T::read(g.data()));
    let out = match op {
        UnaryGradOp::ReluGrad => simd::zip(&xv, &gv, |y, g| if y > T::ZERO { g } else { T::ZERO }),
        UnaryGradOp::GeluGrad => simd::zip(&xv, &gv, |v, g| g * gelu_grad(v)),
        UnaryGradOp::SiluGrad => simd::zip(&xv, &gv, |v, g| g * silu_grad(v)),
        UnaryGradOp::AbsGrad => simd::zip(&xv, &gv, |v, g| g * sign(v)),
    };
    finish(call, out)
}

/// Inverted dropout. Element `i` is kept iff `rng::dropout_keeps` (the tests' rule) says so for
/// the op's stream seed, key and `i`, so the forward pass, its recompute and the gradient (the
/// same op applied to the incoming gradient) all see one mask. The Philox block behind four consecutive
/// elements is computed once here instead of four times; a test checks the two agree.
pub(super) fn dropout<T: Float>(
    call: &KernelCall<'_>,
    x: &HostTensor,
    p: f64,
    seed: u64,
    key: u64,
) -> Result<HostTensor> {
    let xv = T::read(x.data());
    if p == 0.0 {
        // Keeps everything, scaled by 1: a copy (what inference runs).
        return finish(call, xv.into_owned());
    }
    let seed = rng::stream_seed(seed, call.run_seed);
    let threshold = rng::drop_threshold(p);
    let keep_prob = T::of(1.0 - p);
    let philox_key = [seed as u32, (seed >> 32) as u32];
    // Chunks start on a group of Philox blocks: each element's word depends only on its index,
    // so the mask is the same however the elements are split over threads.
    let fill = |at: usize, o: &mut [MaybeUninit<T>]| {
        dropout_loop(&xv[at..at + o.len()], o, at / DROPOUT_SPAN, key, philox_key, threshold, keep_prob)
    };
    // SAFETY: `dropout_loop` writes every element of its output chunk.
    let out = unsafe { split::par_fill_min(xv.len(), DROPOUT_SPAN, split::HEAVY_CHUNK, fill) };
    finish(call, out)
}

/// Elements per group of `rng::LANES` Philox blocks (four words each).
const DROPOUT_SPAN: usize = 4 * rng::LANES;

crate::cpu_features::wide_fn! {
    /// The body of [`dropout`] for `xv`, which starts at group `first_group`: `rng::LANES`
    /// Philox blocks at a time, element `4·block + w` taking word `w` of its block.
    /// Writes every element of `out` (as long as `xv`).
    fn dropout_loop<[T: Float]>[T](xv: &[T], out: &mut [MaybeUninit<T>], first_group: usize, key: u64, seed: [u32; 2], threshold: u64, keep_prob: T) -> () {
        const SPAN: usize = DROPOUT_SPAN;
        let keep = |w: u32, v: T| if w as u64 >= threshold { v / keep_prob } else { T::ZERO };
        let mut src = xv.chunks_exact(SPAN);
        let mut dst = out.chunks_exact_mut(SPAN);
        let mut group = first_group;
        for (s, d) in (&mut src).zip(&mut dst) {
            let words = rng::philox_lanes((group * rng::LANES) as u64, key, seed);
            // Full groups: constant indices, so the word transpose becomes shuffles.
            for i in 0..SPAN {
                d[i].write(keep(words[i % 4][i / 4], s[i]));
            }
            group += 1;
        }
        let words = rng::philox_lanes((group * rng::LANES) as u64, key, seed);
        for (i, (&v, o)) in src.remainder().iter().zip(dst.into_remainder()).enumerate() {
            o.write(keep(words[i % 4][i / 4], v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::{gelu, gelu_grad};
    use crate::dtype::{self, DType};
    use crate::host::{HostData, HostTensor};
    use crate::op::UnaryGradOp;
    use crate::op::{BinaryOp, Op, UnaryOp};
    use crate::rng;
    use half::bf16;

    #[test]
    fn binary_ops_broadcast() {
        let a = t32(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let row = t32(&[3], &[10., 20., 30.]);
        assert_eq!(run(&Op::Binary(BinaryOp::Add), &[&a, &row]).unwrap().to_f32_vec(), [11., 22., 33., 14., 25., 36.]);
        let col = t32(&[2, 1], &[1., 2.]);
        assert_eq!(run(&Op::Binary(BinaryOp::Sub), &[&a, &col]).unwrap().to_f32_vec(), [0., 1., 2., 2., 3., 4.]);
        let s = t32(&[], &[2.]);
        assert_eq!(
            run(&Op::Binary(BinaryOp::Div), &[&s, &a]).unwrap().to_f32_vec(),
            [2., 1., 2. / 3., 0.5, 0.4, 2. / 6.]
        );
        // [2, 1, 3] * [4, 1]: both operands broadcast.
        let p = t32(&[2, 1, 3], &[1., 2., 3., 4., 5., 6.]);
        let q = t32(&[4, 1], &[1., 2., 3., 4.]);
        let y = run(&Op::Binary(BinaryOp::Mul), &[&p, &q]).unwrap();
        assert_eq!(y.shape(), &[2, 4, 3]);
        let got = y.to_f32_vec();
        for i in 0..2 {
            for j in 0..4 {
                for k in 0..3 {
                    assert_eq!(got[i * 12 + j * 3 + k], (i * 3 + k + 1) as f32 * (j + 1) as f32);
                }
            }
        }
        let m = run(&Op::Binary(BinaryOp::Maximum), &[&a, &t32(&[3], &[2., 2., 7.])]).unwrap();
        assert_eq!(m.to_f32_vec(), [2., 2., 7., 4., 5., 7.]);
        let mm = run(&Op::Binary(BinaryOp::MaximumMask), &[&a, &t32(&[3], &[2., 2., 7.])]).unwrap();
        assert_eq!(mm.to_f32_vec(), [0., 0.5, 0., 1., 1., 0.]);
    }

    #[test]
    fn unary_ops() {
        let x = t64(&[5], &[-2., -0.5, 0., 0.5, 3.]);
        let get = |op: Op| run(&op, &[&x]).unwrap().to_f64_vec();
        assert_eq!(get(Op::Unary(UnaryOp::Relu)), [0., 0., 0., 0.5, 3.]);
        assert_eq!(get(Op::Clamp { min: -1., max: 1. }), [-1., -0.5, 0., 0.5, 1.]);
        assert_eq!(get(Op::Unary(UnaryOp::Square)), [4., 0.25, 0., 0.25, 9.]);
        assert_close(
            &get(Op::Unary(UnaryOp::Sigmoid)),
            &[-2., -0.5, 0., 0.5, 3.].map(|v: f64| 1. / (1. + (-v).exp())),
            1e-15,
        );
        // gelu(x) ≈ x·Φ(x); known values of the tanh form.
        assert_close(&get(Op::Unary(UnaryOp::Gelu)), &[-0.045402306, -0.15428599, 0., 0.34571401, 2.996362608], 1e-8);
        let r = run(&Op::Unary(UnaryOp::Rsqrt), &[&t32(&[2], &[4., 0.25])]).unwrap();
        assert_eq!(r.to_f32_vec(), [0.5, 2.]);
    }

    #[test]
    fn f32_gelu_tanh_is_within_3e_7_of_tanhf() {
        let worst = (-100_000..=100_000)
            .map(|i| i as f32 * 1e-4)
            .map(|u| (super::gelu_tanh(u) - u.tanh()).abs())
            .fold(0.0f32, f32::max);
        assert!(worst <= 3e-7, "worst error {worst:e}");
        assert_eq!(super::gelu_tanh(50.0f32), 1.0);
        assert_eq!(super::gelu_tanh(-50.0f32), -1.0);
    }

    #[test]
    fn gelu_grad_matches_finite_differences() {
        for x in [-3.0f64, -1.0, -0.1, 0.0, 0.3, 1.7, 4.0] {
            let h = 1e-6;
            let fd = (gelu(x + h) - gelu(x - h)) / (2.0 * h);
            assert!((gelu_grad(x) - fd).abs() < 1e-8, "x={x}");
        }
        let x = t32(&[2], &[0.5, -1.0]);
        let g = t32(&[2], &[2.0, 3.0]);
        let y = run(&Op::UnaryGrad(UnaryGradOp::GeluGrad), &[&x, &g]).unwrap().to_f64_vec();
        assert_close(&y, &[2.0 * gelu_grad(0.5), 3.0 * gelu_grad(-1.0)], 1e-6);
    }

    #[test]
    fn pointwise_grads() {
        let x = t32(&[4], &[-2., 0., 1., 2.]);
        let g = t32(&[4], &[1., 2., 3., 4.]);
        let c = run(&Op::ClampGrad { min: 0., max: 1. }, &[&x, &g]).unwrap();
        assert_eq!(c.to_f32_vec(), [0., 2., 3., 0.]);
        let r = run(&Op::UnaryGrad(UnaryGradOp::ReluGrad), &[&x, &g]).unwrap();
        assert_eq!(r.to_f32_vec(), [0., 0., 3., 4.]);
        let nan = t32(&[5], &[-2., 0., 1., f32::NAN, -0.0]);
        let a = run(&Op::UnaryGrad(UnaryGradOp::AbsGrad), &[&nan, &t32(&[5], &[1., 2., 3., 4., 5.])]).unwrap();
        let a = a.to_f32_vec();
        assert_eq!(a[..3], [-1., 0., 3.]);
        assert!(a[3].is_nan() && a[4] == 0.0, "NaN stays NaN, -0 gives 0: {a:?}");
    }

    #[test]
    fn dropout_masks_are_replayable() {
        // Large enough to be split over threads (and not a multiple of a Philox group).
        let n = 300_007;
        let x = t32(&[n], &vec![1.0; n]);
        let op = Op::Dropout { p: 0.25, seed: 5, key: 9 };
        let a = run_seeded(&op, &[&x], 3).unwrap().to_f32_vec();
        let b = run_seeded(&op, &[&x], 3).unwrap().to_f32_vec();
        assert_eq!(a, b);
        let other = run_seeded(&Op::Dropout { p: 0.25, seed: 5, key: 10 }, &[&x], 3).unwrap().to_f32_vec();
        assert_ne!(a, other);
        let kept = a.iter().filter(|&&v| v != 0.0).count();
        assert!((223_000..227_000).contains(&kept), "kept {kept}");
        assert!(a.iter().all(|&v| v == 0.0 || v == 1.0 / 0.75));
        // The per-block fast path agrees with the reference predicate element by element.
        let seed = rng::stream_seed(5, 3);
        for (i, &v) in a.iter().enumerate() {
            assert_eq!(v != 0.0, rng::dropout_keeps(seed, 9, i as u64, 0.25), "element {i}");
        }
    }

    #[test]
    fn narrow_storage_computes_in_f32_and_rounds_once() {
        // bf16 inputs: 1 + 2^-7 and 2^-9 are exact; the f32 sum 1 + 2^-7 + 2^-9 rounds to bf16.
        let a = HostTensor::from_f32(vec![1], &[1.0078125], DType::BF16).unwrap();
        let b = HostTensor::from_f32(vec![1], &[0.001953125], DType::BF16).unwrap();
        let s = run(&Op::Binary(BinaryOp::Add), &[&a, &b]).unwrap();
        assert_eq!(s.dtype(), DType::BF16);
        assert_eq!(s.to_f32_vec(), [1.0078125]);
        let e = HostTensor::new(vec![2], HostData::F8E4M3(vec![dtype::f32_to_e4m3(1.5), dtype::f32_to_e4m3(-2.0)]))
            .unwrap();
        // fp8 is a storage format only: arithmetic on it is refused, pointing at a cast.
        let err = run(&Op::Unary(UnaryOp::Neg), &[&e]).unwrap_err().to_string();
        assert!(err.contains("cast fp8 values to a wider dtype first"), "{err}");
    }

    #[test]
    fn constants_and_leaves() {
        use super::super::execute;
        use crate::backend::KernelCall;
        use crate::graph::NodeId;
        let call = KernelCall::new(NodeId::new(0), &Op::Constant { value: 2.5 }, &[], &[2, 2], DType::BF16, 0);
        let c = execute(&call, &[]).unwrap();
        assert_eq!(c.data(), &HostData::BF16(vec![bf16::from_f32(2.5); 4]));
        let leaf = KernelCall { op: &Op::Param { init: crate::op::Init::Auto }, ..call };
        let err = execute(&leaf, &[]).unwrap_err().to_string();
        assert!(err.contains("fed"), "{err}");
    }
}
