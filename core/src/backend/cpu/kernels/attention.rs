//! Fused scaled dot-product attention (the flash-attention scheme) and its gradient.
//!
//! The forward never forms the `t × t` scores: each query row streams over key blocks with an
//! online softmax (running maximum, running sum, rescaled accumulator) and keeps only its output
//! row and its log-sum-exp. The backward recomputes the probabilities block by block from that
//! log-sum-exp. Rows are spread over threads; every row is computed by one thread in a fixed order,
//! so results do not depend on the thread count.

use super::{finish, node_err, Float, KernelCall};
use crate::error::Result;
use crate::host::HostTensor;
use std::thread;

/// Keys per block of the online softmax.
const KEY_BLOCK: usize = 64;

/// The dimensions of one call: batch (every leading axis), queries, keys, head dims.
#[derive(Clone, Copy)]
struct Dims {
    batch: usize,
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
    causal: bool,
}

impl Dims {
    fn of(q: &[usize], k: &[usize], v: &[usize], causal: bool) -> Dims {
        let r = q.len();
        Dims { batch: q[..r - 2].iter().product(), tq: q[r - 2], tk: k[r - 2], d: q[r - 1], dv: v[r - 1], causal }
    }

    /// Keys query `i` attends to: all, or `0..=i` when causal (top-left aligned, like
    /// `torch`'s `is_causal`).
    fn keys(&self, i: usize) -> usize {
        if self.causal {
            (i + 1).min(self.tk)
        } else {
            self.tk
        }
    }
}

fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    a.iter().zip(b).fold(T::ZERO, |s, (&x, &y)| s + x * y)
}

/// Runs `f(unit, out_chunk)` for `units` units of `width` outputs each, on all cores; each unit's
/// output is written by exactly one thread.
fn parallel_rows<T: Float>(units: usize, width: usize, out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    let threads = thread::available_parallelism().map_or(1, |t| t.get()).min(units.max(1));
    if threads <= 1 || units * width < 4096 {
        for (u, chunk) in out.chunks_mut(width.max(1)).enumerate().take(units) {
            f(u, chunk);
        }
        return;
    }
    let per = units.div_ceil(threads);
    thread::scope(|s| {
        for (t, block) in out.chunks_mut(per * width).enumerate() {
            let f = &f;
            s.spawn(move || {
                for (j, chunk) in block.chunks_mut(width).enumerate() {
                    f(t * per + j, chunk);
                }
            });
        }
    });
}

/// Output `[.., tq, dv + 1]`: each row's attention output followed by its log-sum-exp.
pub(super) fn sdpa<T: Float>(
    call: &KernelCall<'_>,
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    causal: bool,
    scale: f64,
) -> Result<HostTensor> {
    let (qv, kv, vv) = (T::read(q.data()), T::read(k.data()), T::read(v.data()));
    let dm = Dims::of(q.shape(), k.shape(), v.shape(), causal);
    let Dims { tq, tk, d, dv, .. } = dm;
    let scale = T::of(scale);
    let width = dv + 1;
    let mut out = vec![T::ZERO; dm.batch * tq * width];
    parallel_rows(dm.batch * tq, width, &mut out, |row, o| {
        let (b, i) = (row / tq, row % tq);
        let qi = &qv[(b * tq + i) * d..][..d];
        let (kb, vb) = (&kv[b * tk * d..][..tk * d], &vv[b * tk * dv..][..tk * dv]);
        let n = dm.keys(i);
        let (acc, lse) = o.split_at_mut(dv);
        let mut m = T::NEG_INFINITY;
        let mut l = T::ZERO;
        let mut s = [T::ZERO; KEY_BLOCK];
        for j0 in (0..n).step_by(KEY_BLOCK) {
            let len = KEY_BLOCK.min(n - j0);
            let mut block_max = T::NEG_INFINITY;
            for (jj, sj) in s[..len].iter_mut().enumerate() {
                *sj = dot(qi, &kb[(j0 + jj) * d..][..d]) * scale;
                if *sj > block_max {
                    block_max = *sj;
                }
            }
            let m_new = if block_max > m { block_max } else { m };
            let correction = if m == T::NEG_INFINITY { T::ZERO } else { (m - m_new).exp() };
            l = l * correction;
            for a in acc.iter_mut() {
                *a = *a * correction;
            }
            for (jj, &sj) in s[..len].iter().enumerate() {
                let p = (sj - m_new).exp();
                l += p;
                for (a, &x) in acc.iter_mut().zip(&vb[(j0 + jj) * dv..][..dv]) {
                    *a += p * x;
                }
            }
            m = m_new;
        }
        if n == 0 {
            lse[0] = T::NEG_INFINITY;
            return;
        }
        let inv = T::ONE / l;
        for a in acc.iter_mut() {
            *a = *a * inv;
        }
        lse[0] = m + l.ln();
    });
    finish(call, out)
}

/// Gradients `[.., tq·d + tk·d + tk·dv]` (dq, dk, dv flattened per batch) from q, k, v, the saved
/// `[out | lse]` and its gradient `[dout | dlse]`. `dq` is formed query row by query row, `dk`
/// and `dv` key row by key row, each recomputing its probabilities from the log-sum-exp.
pub(super) fn sdpa_grad<T: Float>(
    call: &KernelCall<'_>,
    x: &[&HostTensor],
    causal: bool,
    scale: f64,
) -> Result<HostTensor> {
    let (q, k, v, saved, g) = (x[0], x[1], x[2], x[3], x[4]);
    let dm = Dims::of(q.shape(), k.shape(), v.shape(), causal);
    let Dims { batch, tq, tk, d, dv, .. } = dm;
    let (qv, kv, vv) = (T::read(q.data()), T::read(k.data()), T::read(v.data()));
    let (ov, gv) = (T::read(saved.data()), T::read(g.data()));
    let scale = T::of(scale);
    let width = dv + 1;
    // delta_i = dout_i · out_i − dlse_i: the row term of the softmax gradient.
    let delta: Vec<T> = (0..batch * tq)
        .map(|r| {
            let (o, go) = (&ov[r * width..][..width], &gv[r * width..][..width]);
            dot(&o[..dv], &go[..dv]) - go[dv]
        })
        .collect();
    let lse = |r: usize| ov[r * width + dv];
    // p_ij and ds_ij of batch b for query i, key j.
    let pair = |b: usize, i: usize, j: usize| -> (T, T) {
        let qi = &qv[(b * tq + i) * d..][..d];
        let kj = &kv[(b * tk + j) * d..][..d];
        let p = (dot(qi, kj) * scale - lse(b * tq + i)).exp();
        let dp = dot(&gv[(b * tq + i) * width..][..dv], &vv[(b * tk + j) * dv..][..dv]);
        (p, p * (dp - delta[b * tq + i]))
    };
    let mut dq = vec![T::ZERO; batch * tq * d];
    parallel_rows(batch * tq, d, &mut dq, |row, out| {
        let (b, i) = (row / tq, row % tq);
        for j in 0..dm.keys(i) {
            let (_, ds) = pair(b, i, j);
            let c = ds * scale;
            for (o, &x) in out.iter_mut().zip(&kv[(b * tk + j) * d..][..d]) {
                *o += c * x;
            }
        }
    });
    // One unit per key row: its dk (d values) then its dv (dv values).
    let mut dkv = vec![T::ZERO; batch * tk * (d + dv)];
    parallel_rows(batch * tk, d + dv, &mut dkv, |row, out| {
        let (b, j) = (row / tk, row % tk);
        let (dk, dvj) = out.split_at_mut(d);
        let first = if causal { j } else { 0 };
        for i in first..tq {
            let (p, ds) = pair(b, i, j);
            let c = ds * scale;
            for (o, &x) in dk.iter_mut().zip(&qv[(b * tq + i) * d..][..d]) {
                *o += c * x;
            }
            for (o, &x) in dvj.iter_mut().zip(&gv[(b * tq + i) * width..][..dv]) {
                *o += p * x;
            }
        }
    });
    let per = tq * d + tk * d + tk * dv;
    let mut out = Vec::with_capacity(batch * per);
    for b in 0..batch {
        out.extend_from_slice(&dq[b * tq * d..][..tq * d]);
        let rows = &dkv[b * tk * (d + dv)..][..tk * (d + dv)];
        out.extend(rows.chunks_exact(d + dv).flat_map(|r| r[..d].iter().copied()));
        out.extend(rows.chunks_exact(d + dv).flat_map(|r| r[d..].iter().copied()));
    }
    if out.len() != batch * per {
        return Err(node_err(call, "attention gradient has the wrong size"));
    }
    finish(call, out)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::op::Op;

    /// The unfused reference: softmax(q·kᵀ·scale + mask)·v and the row log-sum-exp.
    fn reference(q: &[f64], k: &[f64], v: &[f64], t: usize, d: usize, causal: bool, scale: f64) -> Vec<f64> {
        let mut out = Vec::new();
        for i in 0..t {
            let n = if causal { i + 1 } else { t };
            let s: Vec<f64> =
                (0..n).map(|j| (0..d).map(|c| q[i * d + c] * k[j * d + c]).sum::<f64>() * scale).collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let l: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for c in 0..d {
                out.push((0..n).map(|j| (s[j] - m).exp() / l * v[j * d + c]).sum());
            }
            out.push(m + l.ln());
        }
        out
    }

    #[test]
    fn matches_the_unfused_composition_across_key_blocks() {
        // 150 keys: two full blocks and a partial one.
        let (t, d) = (150, 4);
        let (q, k, v) = (values(t * d, 1), values(t * d, 2), values(t * d, 3));
        for causal in [false, true] {
            let op = Op::Sdpa { causal, scale: 0.5 };
            let y = run(&op, &[&t64(&[1, t, d], &q), &t64(&[1, t, d], &k), &t64(&[1, t, d], &v)]).unwrap();
            assert_eq!(y.shape(), &[1, t, d + 1]);
            assert_close(&y.to_f64_vec(), &reference(&q, &k, &v, t, d, causal, 0.5), 1e-12);
        }
    }
}
