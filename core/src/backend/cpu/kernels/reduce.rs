//! Reductions over any set of axes: `sum`, `mean`, `amax`, and the gradient of `amax`.
//!
//! Each input element maps to the output element of its reduction group through the strides of
//! the keepdim-shaped output with 0 along reduced axes. After coalescing, the inner loop either
//! folds a contiguous run into one output (the last axis is reduced) or adds a row into an
//! output row (it is kept).

use super::strided::{coalesce, row_offsets};
use super::{finish, node_err, Float, KernelCall};
use crate::error::Result;
use crate::host::HostTensor;
use crate::shape::{broadcast_strides, fmt_shape, numel, reduced, strides};

/// The coalesced loop over an input of `shape`: its shape, the input strides and the output
/// strides (0 along reduced axes).
fn plan(shape: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let kept = reduced(shape, axes, true);
    let out_steps = broadcast_strides(&kept, shape);
    let (loop_shape, mut s) = coalesce(shape, &[&strides(shape), &out_steps]);
    let out_s = s.pop().unwrap_or_default();
    let in_s = s.pop().unwrap_or_default();
    (loop_shape, in_s, out_s)
}

/// Folds a contiguous run into `init`: pairwise above [`BLOCK`] elements, through eight
/// independent lanes below. The compiler may not reorder float folds itself; separate lanes
/// vectorise, and the pairwise split keeps the rounding error of a long f32 sum at O(log n)
/// instead of O(n). `identity` must leave any value unchanged under `f`.
fn fold_row<T: Float>(init: T, row: &[T], identity: T, f: &impl Fn(T, T) -> T) -> T {
    f(init, fold_pairwise(row, identity, f))
}

/// Length below which [`fold_pairwise`] stops splitting.
const BLOCK: usize = 256;

fn fold_pairwise<T: Float>(row: &[T], identity: T, f: &impl Fn(T, T) -> T) -> T {
    if row.len() > BLOCK {
        let (left, right) = row.split_at(row.len() / 2);
        return f(fold_pairwise(left, identity, f), fold_pairwise(right, identity, f));
    }
    let mut lanes = [identity; 8];
    let mut chunks = row.chunks_exact(8);
    for chunk in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(chunk) {
            *l = f(*l, v);
        }
    }
    let tail = chunks.remainder().iter().fold(identity, |a, &v| f(a, v));
    let [a, b, c, d, e, g, h, i] = lanes;
    f(f(f(f(a, e), f(b, g)), f(f(c, h), f(d, i))), tail)
}

/// Folds every element of `x` into `acc` (one slot per output element) with `f(acc, x)`.
fn fold<T: Float>(x: &[T], shape: &[usize], axes: &[usize], acc: &mut [T], identity: T, f: impl Fn(T, T) -> T) {
    if x.is_empty() {
        return;
    }
    let (loop_shape, in_s, out_s) = plan(shape, axes);
    let r = loop_shape.len();
    let inner = loop_shape[r - 1];
    let rows_in = row_offsets(&loop_shape, &in_s);
    let rows_out = row_offsets(&loop_shape, &out_s);
    for (&i0, &o0) in rows_in.iter().zip(&rows_out) {
        match (in_s[r - 1], out_s[r - 1]) {
            (1, 0) => acc[o0] = fold_row(acc[o0], &x[i0..i0 + inner], identity, &f),
            (1, 1) => {
                for (a, &v) in acc[o0..o0 + inner].iter_mut().zip(&x[i0..i0 + inner]) {
                    *a = f(*a, v);
                }
            }
            (si, so) => {
                for j in 0..inner {
                    acc[o0 + j * so] = f(acc[o0 + j * so], x[i0 + j * si]);
                }
            }
        }
    }
}

/// `sum` (or `mean` when `mean`) over `axes`.
pub(super) fn sum<T: Float>(
    call: &KernelCall<'_>,
    x: &HostTensor,
    axes: &[usize],
    _keepdim: bool,
    mean: bool,
) -> Result<HostTensor> {
    let xv = T::read(x.data());
    let mut acc = vec![T::ZERO; numel(call.out_shape)];
    fold(&xv, x.shape(), axes, &mut acc, T::ZERO, |a, v| a + v);
    if mean {
        // An empty group has mean 0/0 = NaN, as in numpy and torch.
        let count = T::of(axes.iter().map(|&a| x.shape()[a]).product::<usize>() as f64);
        acc.iter_mut().for_each(|a| *a = *a / count);
    }
    finish(call, acc)
}

/// NaN-propagating maximum.
#[inline]
fn max<T: Float>(a: T, v: T) -> T {
    if v > a || v.is_nan() {
        v
    } else {
        a
    }
}

/// `amax` over `axes` (−∞ for an empty group).
pub(super) fn amax<T: Float>(
    call: &KernelCall<'_>,
    x: &HostTensor,
    axes: &[usize],
    _keepdim: bool,
) -> Result<HostTensor> {
    let xv = T::read(x.data());
    let mut acc = vec![T::NEG_INFINITY; numel(call.out_shape)];
    fold(&xv, x.shape(), axes, &mut acc, T::NEG_INFINITY, max);
    finish(call, acc)
}

/// Gradient of `amax`: `g / count` at the `count` tied maxima of each group, 0 elsewhere.
pub(super) fn amax_grad<T: Float>(
    call: &KernelCall<'_>,
    x: &HostTensor,
    y: &HostTensor,
    g: &HostTensor,
    axes: &[usize],
    keepdim: bool,
) -> Result<HostTensor> {
    let rank = x.shape().len();
    if let Some(&bad) = axes.iter().find(|&&a| a >= rank) {
        return Err(node_err(call, format!("axis {bad} out of range for rank {rank}")));
    }
    let want = reduced(x.shape(), axes, keepdim);
    for (what, t) in [("max", y), ("gradient", g)] {
        if t.shape() != &want[..] {
            return Err(node_err(
                call,
                format!(
                    "{what} has shape {}, expected {} for input {}",
                    fmt_shape(t.shape()),
                    fmt_shape(&want),
                    fmt_shape(x.shape())
                ),
            ));
        }
    }
    let (xv, yv, gv) = (T::read(x.data()), T::read(y.data()), T::read(g.data()));
    let mut out = vec![T::ZERO; xv.len()];
    if xv.is_empty() {
        return finish(call, out);
    }
    // Output offsets of every input element, in input order (the input is contiguous).
    let kept = reduced(x.shape(), axes, true);
    let out_steps = broadcast_strides(&kept, x.shape());
    let (loop_shape, s) = coalesce(x.shape(), &[&out_steps]);
    let (r, so) = (loop_shape.len(), &s[0]);
    let inner = loop_shape[r - 1];
    let group = |i: usize, row: usize| row + (i % inner) * so[r - 1];
    let rows = row_offsets(&loop_shape, so);
    let mut count = vec![0usize; yv.len()];
    for (i, &v) in xv.iter().enumerate() {
        let o = group(i, rows[i / inner]);
        if v == yv[o] {
            count[o] += 1;
        }
    }
    for (i, (&v, d)) in xv.iter().zip(out.iter_mut()).enumerate() {
        let o = group(i, rows[i / inner]);
        if v == yv[o] {
            *d = gv[o] / T::of(count[o] as f64);
        }
    }
    finish(call, out)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::op::{Op, ReduceOp};

    /// Naive reference: sum of `x[2,3,4]` over `axes` (keepdim shape), by full index loops.
    fn naive_sum(x: &[f64], axes: &[usize]) -> Vec<f64> {
        let dims = [2, 3, 4];
        let kept: Vec<usize> = (0..3).map(|a| if axes.contains(&a) { 1 } else { dims[a] }).collect();
        let mut out = vec![0.0; kept.iter().product()];
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    let idx = [i, j, k];
                    let o: Vec<usize> = (0..3).map(|a| if axes.contains(&a) { 0 } else { idx[a] }).collect();
                    out[o[0] * kept[1] * kept[2] + o[1] * kept[2] + o[2]] += x[i * 12 + j * 4 + k];
                }
            }
        }
        out
    }

    #[test]
    fn sums_over_every_axis_set() {
        let x = values(24, 1);
        let t = t64(&[2, 3, 4], &x);
        for axes in [vec![], vec![0], vec![1], vec![2], vec![0, 2], vec![2, 0], vec![1, 2], vec![0, 1, 2]] {
            for keepdim in [false, true] {
                let y = run(&Op::Reduce { op: ReduceOp::Sum, axes: axes.clone(), keepdim }, &[&t]).unwrap();
                assert_close(&y.to_f64_vec(), &naive_sum(&x, &axes), 1e-12);
            }
        }
        let m = run(&Op::Reduce { op: ReduceOp::Mean, axes: vec![0, 2], keepdim: false }, &[&t]).unwrap();
        assert_eq!(m.shape(), &[3]);
        let want: Vec<f64> = naive_sum(&x, &[0, 2]).iter().map(|v| v / 8.0).collect();
        assert_close(&m.to_f64_vec(), &want, 1e-12);
    }

    #[test]
    fn long_rows_fold_through_lanes() {
        let x = values(1003, 2);
        let t = t64(&[1003], &x);
        let s = run(&Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdim: false }, &[&t]).unwrap();
        assert_close(&s.to_f64_vec(), &[x.iter().sum()], 1e-12);
        let m = run(&Op::Reduce { op: ReduceOp::Amax, axes: vec![0], keepdim: false }, &[&t]).unwrap();
        assert_eq!(m.to_f64_vec(), [x.iter().cloned().fold(f64::MIN, f64::max)]);
        let mut with_nan = x.clone();
        with_nan[500] = f64::NAN;
        let m = run(&Op::Reduce { op: ReduceOp::Amax, axes: vec![0], keepdim: false }, &[&t64(&[1003], &with_nan)])
            .unwrap();
        assert!(m.to_f64_vec()[0].is_nan());
        // A million 0.1s: one f32 chain would drift by ~1%, the pairwise fold stays close.
        let ones = t32(&[1 << 20], &vec![0.1; 1 << 20]);
        let s = run(&Op::Reduce { op: ReduceOp::Mean, axes: vec![0], keepdim: false }, &[&ones]).unwrap();
        assert!((s.to_f32_vec()[0] - 0.1).abs() < 1e-5, "{:?}", s.to_f32_vec());
    }

    #[test]
    fn amax_and_its_gradient_share_ties() {
        let x = t32(&[2, 3], &[1., 5., 5., 7., 2., 3.]);
        let op = Op::Reduce { op: ReduceOp::Amax, axes: vec![1], keepdim: false };
        let y = run(&op, &[&x]).unwrap();
        assert_eq!(y.to_f32_vec(), [5., 7.]);
        let g = t32(&[2], &[1., 10.]);
        let dx = run(&Op::AmaxGrad { axes: vec![1], keepdim: false }, &[&x, &y, &g]).unwrap();
        assert_eq!(dx.to_f32_vec(), [0., 0.5, 0.5, 10., 0., 0.]);
        // Over axis 0 with keepdim: columns (1,7) (5,2) (5,3).
        let y0 = run(&Op::Reduce { op: ReduceOp::Amax, axes: vec![0], keepdim: true }, &[&x]).unwrap();
        assert_eq!(y0.to_f32_vec(), [7., 5., 5.]);
        let g0 = t32(&[1, 3], &[1., 2., 3.]);
        let dx0 = run(&Op::AmaxGrad { axes: vec![0], keepdim: true }, &[&x, &y0, &g0]).unwrap();
        assert_eq!(dx0.to_f32_vec(), [0., 2., 3., 1., 0., 0.]);
        // All four elements tie in a full reduction.
        let flat = t32(&[2, 2], &[4.; 4]);
        let yf = run(&Op::Reduce { op: ReduceOp::Amax, axes: vec![0, 1], keepdim: false }, &[&flat]).unwrap();
        let df = run(&Op::AmaxGrad { axes: vec![0, 1], keepdim: false }, &[&flat, &yf, &t32(&[], &[2.])]).unwrap();
        assert_eq!(df.to_f32_vec(), [0.5; 4]);
    }

    #[test]
    fn amax_grad_checks_shapes() {
        let x = t32(&[2, 3], &[0.; 6]);
        let bad = t32(&[3], &[0.; 3]);
        let err = run(&Op::AmaxGrad { axes: vec![1], keepdim: false }, &[&x, &bad, &bad]).unwrap_err();
        assert!(err.to_string().contains("must have the reduced shape [2]"), "{err}");
    }
}
