//! Row-wise network ops over the last axis: softmax, log-softmax, layer norm, cross-entropy,
//! their gradients, and the embedding gather and its scatter-add gradient.

use super::{finish, finish_raw, ids, node_err, per_elem, simd, split, Elem, Float, KernelCall};
use crate::dtype::DType;
use crate::error::Result;
use crate::host::HostTensor;
use crate::shape::fmt_shape;
use std::mem::MaybeUninit;

/// Length of the last axis (the row), at least 1 so `chunks_exact` is well-defined for empty rows.
fn row_len(shape: &[usize]) -> usize {
    shape.last().copied().unwrap_or(1).max(1)
}

fn row_max<T: Float>(row: &[T]) -> T {
    row.iter().fold(T::NEG_INFINITY, |m, &v| if v > m || v.is_nan() { v } else { m })
}

/// `max + ln Σ exp(x − max)`: stable log-sum-exp. A row of −∞ gives −∞ (not NaN).
fn logsumexp<T: Float>(row: &[T]) -> T {
    let max = row_max(row);
    if max == T::NEG_INFINITY {
        return max;
    }
    let sum = row.iter().fold(T::ZERO, |s, &v| s + (v - max).exp());
    max + sum.ln()
}

/// Softmax (or log-softmax when `log`) of each row, after subtracting the row max.
pub(super) fn softmax<T: Float>(call: &KernelCall<'_>, x: &HostTensor, log: bool) -> Result<HostTensor> {
    let xv = T::read(x.data());
    let d = row_len(x.shape());
    if log {
        let mut out = Vec::with_capacity(xv.len());
        for row in xv.chunks_exact(d) {
            let lse = logsumexp(row);
            out.extend(row.iter().map(|&v| v - lse));
        }
        return finish(call, out);
    }
    crate::cpu_features::wide_fn! {
    fn rows<[T: Float]>[T](out: &mut [T], xv: &[T], d: usize) -> () {
        for (row, o) in xv.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            let max = simd::lane_max(row);
            for (e, &v) in o.iter_mut().zip(row) {
                *e = (v - max).exp_fast();
            }
            // In a fixed order: the same on every run, thread count and strategy.
            let sum = simd::lane_sum(o, |e| e);
            for e in o.iter_mut() {
                *e = *e / sum;
            }
        }
    }
    }
    let mut out = vec![T::ZERO; xv.len()];
    split::par_rows(&mut out, d, |at, o| rows(o, &xv[at..at + o.len()], d));
    finish(call, out)
}

/// From the output `y` and incoming `g`: softmax `y·(g − Σ g·y)`, log-softmax `g − exp(y)·Σ g`.
pub(super) fn softmax_grad<T: Float>(
    call: &KernelCall<'_>,
    y: &HostTensor,
    g: &HostTensor,
    log: bool,
) -> Result<HostTensor> {
    let (yv, gv) = (T::read(y.data()), T::read(g.data()));
    let d = row_len(y.shape());
    if log {
        let mut out = Vec::with_capacity(yv.len());
        for (yr, gr) in yv.chunks_exact(d).zip(gv.chunks_exact(d)) {
            let sum = gr.iter().fold(T::ZERO, |s, &v| s + v);
            out.extend(yr.iter().zip(gr).map(|(&y, &g)| g - y.exp() * sum));
        }
        return finish(call, out);
    }
    crate::cpu_features::wide_fn! {
        fn rows<[T: Float]>[T](out: &mut [T], yv: &[T], gv: &[T], d: usize) -> () {
            for ((yr, gr), o) in yv.chunks_exact(d).zip(gv.chunks_exact(d)).zip(out.chunks_exact_mut(d)) {
                let dot = simd::lane_sum2(yr, gr, |y, g| y * g);
                for ((o, &y), &g) in o.iter_mut().zip(yr).zip(gr) {
                    *o = y * (g - dot);
                }
            }
        }
    }
    let mut out = vec![T::ZERO; yv.len()];
    split::par_rows(&mut out, d, |at, o| {
        let span = at..at + o.len();
        rows(o, &yv[span.clone()], &gv[span], d)
    });
    finish(call, out)
}

/// Mean and `1/sqrt(var + eps)` of a row (biased variance, two passes for accuracy).
#[inline(always)]
fn moments<T: Float>(row: &[T], eps: T) -> (T, T) {
    let n = T::of(row.len() as f64);
    let mean = simd::lane_sum(row, |v| v) / n;
    let var = simd::lane_sum(row, |v| (v - mean) * (v - mean)) / n;
    (mean, T::ONE / (var + eps).sqrt())
}

/// `(x − mean)/sqrt(var + eps)` over the last axis, no affine part.
pub(super) fn layer_norm<T: Float>(call: &KernelCall<'_>, x: &HostTensor, eps: f64) -> Result<HostTensor> {
    let xv = T::read(x.data());
    let d = row_len(x.shape());
    crate::cpu_features::wide_fn! {
        fn rows<[T: Float]>[T](out: &mut [MaybeUninit<T>], xv: &[T], d: usize, eps: T) -> () {
            for (row, o) in xv.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
                let (mean, rstd) = moments(row, eps);
                for (o, &v) in o.iter_mut().zip(row) {
                    o.write((v - mean) * rstd);
                }
            }
        }
    }
    // Rows cost several reductions each: threaded from a few thousand elements.
    let fill = |at: usize, o: &mut [MaybeUninit<T>]| rows(o, &xv[at..at + o.len()], d, T::of(eps));
    // SAFETY: chunks are whole rows (`par_fill_min` splits at multiples of `d`, and `xv` is rows
    // of `d`), and `rows` writes every element of each.
    let out = unsafe { split::par_fill_min(xv.len(), d, split::HEAVY_CHUNK, fill) };
    finish(call, out)
}

/// Exact gradient of [`layer_norm`] wrt x: `rstd·(g − mean(g) − x̂·mean(g·x̂))`.
pub(super) fn layer_norm_grad<T: Float>(
    call: &KernelCall<'_>,
    x: &HostTensor,
    g: &HostTensor,
    eps: f64,
) -> Result<HostTensor> {
    let (xv, gv) = (T::read(x.data()), T::read(g.data()));
    let d = row_len(x.shape());
    crate::cpu_features::wide_fn! {
        fn rows<[T: Float]>[T](out: &mut [MaybeUninit<T>], xv: &[T], gv: &[T], d: usize, eps: T) -> () {
            let n = T::of(d as f64);
            for ((xr, gr), o) in xv.chunks_exact(d).zip(gv.chunks_exact(d)).zip(out.chunks_exact_mut(d)) {
                let (mean, rstd) = moments(xr, eps);
                let g_mean = simd::lane_sum(gr, |v| v) / n;
                let gx_mean = simd::lane_sum2(xr, gr, |v, g| g * (v - mean) * rstd) / n;
                for ((o, &v), &g) in o.iter_mut().zip(xr).zip(gr) {
                    o.write(rstd * (g - g_mean - (v - mean) * rstd * gx_mean));
                }
            }
        }
    }
    let fill = |at: usize, o: &mut [MaybeUninit<T>]| {
        let span = at..at + o.len();
        rows(o, &xv[span.clone()], &gv[span], d, T::of(eps))
    };
    // SAFETY: as in `layer_norm`: whole rows, each element written.
    let out = unsafe { split::par_fill_min(xv.len(), d, split::HEAVY_CHUNK, fill) };
    finish(call, out)
}

/// The class of each row as an index, or an error naming the bad target and its position.
fn classes(call: &KernelCall<'_>, targets: &HostTensor, c: usize) -> Result<Vec<usize>> {
    let t = ids(call, targets)?;
    t.iter()
        .enumerate()
        .map(|(i, &v)| {
            usize::try_from(v)
                .ok()
                .filter(|&u| u < c)
                .ok_or_else(|| node_err(call, format!("target {v} at position {i} is out of range for {c} classes")))
        })
        .collect()
}

/// Mean over rows of `logsumexp(row) − row[target]` (NaN for zero rows: a mean of nothing).
pub(super) fn cross_entropy<T: Float>(
    call: &KernelCall<'_>,
    logits: &HostTensor,
    targets: &HostTensor,
) -> Result<HostTensor> {
    let c = logits.shape().last().copied().unwrap_or(0);
    let cls = classes(call, targets, c)?;
    let lv = T::read(logits.data());
    let mut total = T::ZERO;
    for (row, &t) in lv.chunks_exact(row_len(logits.shape())).zip(&cls) {
        total += logsumexp(row) - row[t];
    }
    finish(call, vec![total / T::of(cls.len() as f64)])
}

/// `(softmax(row) − onehot(target))·g / rows`, with the logits' shape.
pub(super) fn cross_entropy_grad<T: Float>(
    call: &KernelCall<'_>,
    logits: &HostTensor,
    targets: &HostTensor,
    g: &HostTensor,
) -> Result<HostTensor> {
    let ls = logits.shape();
    if ls.is_empty() || targets.shape() != &ls[..ls.len() - 1] || g.numel() != 1 || targets.dtype() != DType::I64 {
        return Err(node_err(
            call,
            format!(
                "expects logits [.., C], i64 targets [..] and a scalar gradient, got {}, {} {} and {}",
                fmt_shape(ls),
                fmt_shape(targets.shape()),
                targets.dtype(),
                fmt_shape(g.shape())
            ),
        ));
    }
    let c = ls[ls.len() - 1];
    let cls = classes(call, targets, c)?;
    let lv = T::read(logits.data());
    let scale = T::read(g.data())[0] / T::of(cls.len() as f64);
    let mut out = Vec::with_capacity(lv.len());
    for (row, &t) in lv.chunks_exact(row_len(ls)).zip(&cls) {
        let lse = logsumexp(row);
        let start = out.len();
        out.extend(row.iter().map(|&v| (v - lse).exp() * scale));
        out[start + t] = out[start + t] - scale;
    }
    finish(call, out)
}

/// Row indices of `ids` into a table of `rows`, or an error naming the bad id and its position.
fn rows_of(call: &KernelCall<'_>, id_tensor: &HostTensor, rows: usize) -> Result<Vec<usize>> {
    let v = ids(call, id_tensor)?;
    v.iter()
        .enumerate()
        .map(|(i, &id)| {
            usize::try_from(id).ok().filter(|&u| u < rows).ok_or_else(|| {
                node_err(call, format!("id {id} at position {i} is out of range for a table of {rows} rows"))
            })
        })
        .collect()
}

/// Gathers table rows by id, copying raw elements (exact for every storage dtype).
pub(super) fn embedding(call: &KernelCall<'_>, table: &HostTensor, id_tensor: &HostTensor) -> Result<HostTensor> {
    fn gather<E: Elem>(call: &KernelCall<'_>, table: &HostTensor, rows: &[usize]) -> Result<HostTensor> {
        let data = E::slice(table.data()).ok_or_else(|| node_err(call, "table dtype mismatch"))?;
        let d = table.shape()[1];
        let mut out = Vec::with_capacity(rows.len() * d);
        for &r in rows {
            out.extend_from_slice(&data[r * d..(r + 1) * d]);
        }
        finish_raw(call, out)
    }
    let rows = rows_of(call, id_tensor, table.shape()[0])?;
    per_elem!(table.dtype(), gather(call, table, &rows))
}

/// `[rows, D]` scatter-add of `g`'s rows (`g` is `ids.shape + [D]`) by id.
pub(super) fn embedding_grad<T: Float>(
    call: &KernelCall<'_>,
    id_tensor: &HostTensor,
    g: &HostTensor,
    rows: usize,
) -> Result<HostTensor> {
    let d = g.shape().last().copied().unwrap_or(1);
    let lead = &g.shape()[..g.shape().len().saturating_sub(1)];
    if id_tensor.dtype() != DType::I64 || lead != id_tensor.shape() || !g.dtype().is_float() {
        return Err(node_err(
            call,
            format!(
                "expects i64 ids [..] and a float gradient [.., D] of the same leading shape, got {} {} and {} {}",
                fmt_shape(id_tensor.shape()),
                id_tensor.dtype(),
                fmt_shape(g.shape()),
                g.dtype()
            ),
        ));
    }
    let idx = rows_of(call, id_tensor, rows)?;
    let gv = T::read(g.data());
    let mut out = vec![T::ZERO; rows * d];
    if d > 0 {
        for (&r, gr) in idx.iter().zip(gv.chunks_exact(d)) {
            for (o, &v) in out[r * d..(r + 1) * d].iter_mut().zip(gr) {
                *o += v;
            }
        }
    }
    finish(call, out)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::dtype::DType;
    use crate::host::{HostData, HostTensor};
    use crate::op::Op;
    use half::bf16;

    #[test]
    fn softmax_rows_sum_to_one_and_match_log_softmax() {
        let x = values(3 * 7, 11);
        let t = t64(&[3, 7], &x);
        let s = run(&Op::Softmax, &[&t]).unwrap().to_f64_vec();
        let ls = run(&Op::LogSoftmax, &[&t]).unwrap().to_f64_vec();
        for r in 0..3 {
            assert!((s[r * 7..(r + 1) * 7].iter().sum::<f64>() - 1.0).abs() < 1e-14);
        }
        assert_close(&s, &ls.iter().map(|v| v.exp()).collect::<Vec<_>>(), 1e-14);
        // Large logits stay finite thanks to the max shift.
        let big = run(&Op::Softmax, &[&t32(&[2], &[1000.0, 1000.0])]).unwrap();
        assert_eq!(big.to_f32_vec(), [0.5, 0.5]);
    }

    #[test]
    fn softmax_grads_match_finite_differences() {
        let x = values(5, 12);
        let g = values(5, 13);
        let f = |xs: &[f64], log: bool| -> f64 {
            let op = if log { Op::LogSoftmax } else { Op::Softmax };
            let y = run(&op, &[&t64(&[5], xs)]).unwrap().to_f64_vec();
            y.iter().zip(&g).map(|(a, b)| a * b).sum()
        };
        for log in [false, true] {
            let op = if log { Op::LogSoftmax } else { Op::Softmax };
            let y = run(&op, &[&t64(&[5], &x)]).unwrap();
            let gop = if log { Op::LogSoftmaxGrad } else { Op::SoftmaxGrad };
            let dx = run(&gop, &[&y, &t64(&[5], &g)]).unwrap().to_f64_vec();
            for i in 0..5 {
                let (mut p, mut m) = (x.clone(), x.clone());
                p[i] += 1e-6;
                m[i] -= 1e-6;
                assert!((dx[i] - (f(&p, log) - f(&m, log)) / 2e-6).abs() < 1e-7, "log={log} i={i}");
            }
        }
    }

    #[test]
    fn layer_norm_and_its_gradient() {
        let x = values(4 * 6, 14);
        let t = t64(&[4, 6], &x);
        let y = run(&Op::LayerNorm { eps: 1e-5 }, &[&t]).unwrap().to_f64_vec();
        for row in y.chunks(6) {
            let mean = row.iter().sum::<f64>() / 6.0;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 6.0;
            assert!(mean.abs() < 1e-12);
            assert!((var - 1.0).abs() < 1e-3, "var {var}");
        }
        let g = values(6, 15);
        let xr = &x[..6];
        let f = |xs: &[f64]| -> f64 {
            let y = run(&Op::LayerNorm { eps: 1e-5 }, &[&t64(&[6], xs)]).unwrap().to_f64_vec();
            y.iter().zip(&g).map(|(a, b)| a * b).sum()
        };
        let dx = run(&Op::LayerNormGrad { eps: 1e-5 }, &[&t64(&[6], xr), &t64(&[6], &g)]).unwrap().to_f64_vec();
        for i in 0..6 {
            let (mut p, mut m) = (xr.to_vec(), xr.to_vec());
            p[i] += 1e-6;
            m[i] -= 1e-6;
            assert!((dx[i] - (f(&p) - f(&m)) / 2e-6).abs() < 1e-6, "i={i}");
        }
    }

    #[test]
    fn cross_entropy_known_case_and_gradient() {
        // Row 0: uniform logits over 2 classes → ln 2. Row 1: [0, ln 3] target 1 → ln(4/3).
        let logits = t64(&[2, 2], &[1.0, 1.0, 0.0, 3f64.ln()]);
        let targets = ti64(&[2], &[0, 1]);
        let l = run(&Op::CrossEntropy, &[&logits, &targets]).unwrap();
        assert_eq!(l.shape(), &[] as &[usize]);
        assert_close(&l.to_f64_vec(), &[(2f64.ln() + (4.0f64 / 3.0).ln()) / 2.0], 1e-15);
        let g = t64(&[], &[2.0]);
        let d = run(&Op::CrossEntropyGrad, &[&logits, &targets, &g]).unwrap();
        // (softmax − onehot)·2/2: row 0 [0.5−1, 0.5], row 1 [0.25, 0.75−1].
        assert_close(&d.to_f64_vec(), &[-0.5, 0.5, 0.25, -0.25], 1e-15);
    }

    #[test]
    fn out_of_range_targets_and_ids_are_named() {
        let logits = t32(&[2, 3], &[0.0; 6]);
        let err = run(&Op::CrossEntropy, &[&logits, &ti64(&[2], &[1, 3])]).unwrap_err().to_string();
        assert!(err.contains("target 3 at position 1") && err.contains("3 classes"), "{err}");
        let g = t32(&[], &[1.0]);
        let err = run(&Op::CrossEntropyGrad, &[&logits, &ti64(&[2], &[-1, 0]), &g]).unwrap_err().to_string();
        assert!(err.contains("target -1 at position 0"), "{err}");
        let table = t32(&[4, 2], &[0.0; 8]);
        let err = run(&Op::Embedding, &[&table, &ti64(&[3], &[0, 1, 7])]).unwrap_err().to_string();
        assert!(err.contains("id 7 at position 2") && err.contains("4 rows"), "{err}");
        let err = run(&Op::EmbeddingGrad { rows: 4 }, &[&ti64(&[1], &[9]), &t32(&[1, 2], &[1.0, 1.0])]).unwrap_err();
        assert!(err.to_string().contains("id 9 at position 0"), "{err}");
    }

    #[test]
    fn embedding_gather_and_scatter_add_with_repeated_ids() {
        let table = HostTensor::from_f32(vec![3, 2], &[0., 1., 10., 11., 20., 21.], DType::BF16).unwrap();
        let ids = ti64(&[2, 2], &[2, 0, 2, 1]);
        let e = run(&Op::Embedding, &[&table, &ids]).unwrap();
        assert_eq!((e.shape(), e.dtype()), (&[2, 2, 2][..], DType::BF16));
        assert_eq!(e.to_f32_vec(), [20., 21., 0., 1., 20., 21., 10., 11.]);
        let g = t32(&[2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
        let dt = run(&Op::EmbeddingGrad { rows: 4 }, &[&ids, &g]).unwrap();
        assert_eq!(dt.shape(), &[4, 2]);
        assert_eq!(dt.to_f32_vec(), [3., 4., 7., 8., 6., 8., 0., 0.]);
        let gb = HostTensor::from_f32(vec![2, 2, 2], &[1.; 8], DType::BF16).unwrap();
        let db = run(&Op::EmbeddingGrad { rows: 3 }, &[&ids, &gb]).unwrap();
        let want: Vec<bf16> = [1., 1., 1., 1., 2., 2.].iter().map(|&v: &f32| bf16::from_f32(v)).collect();
        assert_eq!(db.data(), &HostData::BF16(want));
    }
}
