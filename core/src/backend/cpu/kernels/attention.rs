//! Fused scaled dot-product attention (the flash-attention scheme) and its gradient.
//!
//! The forward never forms the `t × t` scores: each block of query rows streams over key blocks
//! with an online softmax (running maximum, running sum, rescaled accumulator) and keeps only its
//! output rows and their log-sum-exp. The backward recomputes the probabilities block by block
//! from that log-sum-exp: `dq` by query block, `dk` and `dv` by key block, so every output block
//! is written by one thread and no reduction crosses threads. Within a block pair the products
//! are small GEMMs (`matrixmultiply`); the row loops between them (mask, scale, exponentials,
//! sums) are compiled eight lanes wide ([`crate::cpu_features::wide_fn!`]) with a vectorisable `exp`. Blocks are
//! spread over the kernels' threads; each is computed in a fixed order, so results do not depend
//! on the thread count. Operands are head-major (one attention's rows back to back) or
//! token-major (`[.., t, heads, d]`: an attention's rows `heads · d` apart); the block products
//! read either by strides ([`Dims::row`]), so both layouts compute the same bits.

use super::{finish, simd, split, Float, KernelCall};
use crate::error::Result;
use crate::host::HostTensor;
use crate::op::{AttnDims, AttnLayout};
use std::mem::MaybeUninit;

/// Query rows per block.
const Q_BLOCK: usize = 64;
/// Keys per block of the online softmax.
const K_BLOCK: usize = 64;

/// The dimensions of one call: `outer · heads` attentions (`heads` interleaved in each token
/// row, 1 in head-major layout), queries, keys, head dims.
#[derive(Clone, Copy)]
struct Dims {
    outer: usize,
    heads: usize,
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
    causal: bool,
}

impl Dims {
    fn of(layout: AttnLayout, q: &[usize], k: &[usize], v: &[usize], causal: bool) -> Dims {
        let AttnDims { outer, heads, tq, tk, d, dv } = layout.dims(q, k, v);
        Dims { outer, heads, tq, tk, d, dv, causal }
    }

    /// Where row `i` of attention `a` (`0..outer · heads`) starts in an operand of `t` rows of
    /// `w` elements per attention: `[.., heads, t, w]` when `heads` is 1, else `[.., t, heads, w]`.
    fn row(&self, a: usize, t: usize, i: usize, w: usize) -> usize {
        let (o, h) = (a / self.heads, a % self.heads);
        ((o * t + i) * self.heads + h) * w
    }

    /// The step between one attention's consecutive rows of `w` elements.
    fn stride(&self, w: usize) -> usize {
        self.heads * w
    }

    /// Keys the queries `..end` attend to: all, or `0..end` when causal (query `i` sees keys
    /// `0..=i`, top-left aligned like `torch`'s `is_causal`).
    fn keys_before(&self, end: usize) -> usize {
        if self.causal {
            end.min(self.tk)
        } else {
            self.tk
        }
    }
}

/// A row-major `[m × n]` product `a · b` into `out` (overwritten), operands by strides.
#[allow(clippy::too_many_arguments)]
fn mm<T: Float>(
    m: usize,
    k: usize,
    n: usize,
    a: &[T],
    (rsa, csa): (usize, usize),
    b: &[T],
    (rsb, csb): (usize, usize),
    out: &mut [T],
) {
    debug_assert!(out.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out[..m * n].iter_mut().for_each(|o| *o = T::ZERO);
        return;
    }
    let last_a = (m - 1) * rsa + (k - 1) * csa;
    let last_b = (k - 1) * rsb + (n - 1) * csb;
    assert!(last_a < a.len() && last_b < b.len(), "attention block product out of bounds");
    // SAFETY: the asserts above keep every addressed element of `a` and `b` inside their slices;
    // `out` holds `m × n` elements with row stride `n` and aliases neither (it is `&mut`).
    unsafe {
        T::gemm(
            m,
            k,
            n,
            T::ONE,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            rsb as isize,
            csb as isize,
            out.as_mut_ptr(),
            n as isize,
            1,
        )
    }
}

/// A vector of the given chunk lengths' total, each chunk zeroed and then passed to
/// `f(unit, chunk)` on the backend's threads, units taken as threads get free (causal blocks grow with their index). Each chunk is zeroed by
/// the thread that fills it, so it is in that thread's cache, and no pass runs before the units.
fn parallel_units<T: Float>(lens: &[usize], f: impl Fn(usize, &mut [T]) + Sync) -> Vec<T> {
    let n = lens.iter().sum();
    let mut out: Vec<T> = Vec::with_capacity(n);
    let mut chunks = Vec::with_capacity(lens.len());
    let mut rest = &mut out.spare_capacity_mut()[..n];
    for (u, &len) in lens.iter().enumerate() {
        let (head, tail) = rest.split_at_mut(len);
        chunks.push((u, head));
        rest = tail;
    }
    let run = |(u, chunk): (usize, &mut [MaybeUninit<T>])| {
        chunk.iter_mut().for_each(|x| {
            x.write(T::ZERO);
        });
        // SAFETY: every element of `chunk` was just initialised, and `MaybeUninit<T>` has the
        // layout of `T`.
        f(u, unsafe { &mut *(chunk as *mut [MaybeUninit<T>] as *mut [T]) })
    };
    split::par_tasks(chunks, run);
    // SAFETY: the chunks cover `0..n`, and each was initialised above.
    unsafe { out.set_len(n) };
    out
}

/// Of query row `row` (absolute), the keys of the block starting at `kj` with `kn` keys it may
/// attend to: `..kn`, or fewer on the causal diagonal.
fn visible(causal: bool, row: usize, kj: usize, kn: usize) -> usize {
    if causal {
        (row + 1).saturating_sub(kj).min(kn)
    } else {
        kn
    }
}

// The block loops run over whole rows and then clear the masked tail, rather than over each
// row's visible prefix: with causal rows of every length, a prefix loop leaves most of its work
// to the vector loop's scalar remainder. Masked scores join the max as −∞ and the sums as exact
// zeros (`exp` of −∞), so the results are those of the prefix loops. Each step runs over the
// whole block before the next, so the long `exp` polynomial of one row overlaps the next row's
// instead of waiting on its own row's reductions.

/// The largest non-NaN element of `row` (−∞ if none), at full vector width (16 lanes, where
/// [`simd::lane_max`] keeps eight and propagates NaN): the NaN case is [`online_block`]'s.
#[inline(always)]
fn row_max<T: Float>(row: &[T]) -> T {
    simd::lane_max_by::<T, 16>(row, |m, v| if v > m { v } else { m })
}

crate::cpu_features::wide_fn! {
    #[allow(clippy::too_many_arguments)]
    /// One block `s` (`rows × kn`, query rows from `first_row`, keys from `kj`) of the online
    /// softmax: scales the visible scores, updates each row's running maximum `m` in place,
    /// replaces the scores by `exp(s − m)` (masked ones by 0) and writes each row's sum of them
    /// into `sums`. A row masked so far keeps `m = −∞` and gets a zero row and sum.
    fn online_block<[T: Float]>[T](s: &mut [T], kn: usize, first_row: usize, kj: usize, causal: bool, scale: T, m: &mut [T], sums: &mut [T]) -> () {
        for (i, row) in s.chunks_exact_mut(kn).enumerate() {
            row.iter_mut().for_each(|x| *x = *x * scale);
            let seen = visible(causal, first_row + i, kj, kn);
            row[seen..].iter_mut().for_each(|x| *x = T::NEG_INFINITY);
            let block_max = row_max(row);
            if block_max > m[i] {
                m[i] = block_max;
            } else if block_max == T::NEG_INFINITY && row[..seen].iter().any(|x| x.is_nan()) {
                // Only NaNs seen: the maximum must be NaN for the row's output to be NaN (a NaN
                // beside a number already is, through its `exp`).
                m[i] = T::of(f64::NAN);
            }
        }
        for (row, &mi) in s.chunks_exact_mut(kn).zip(m.iter()) {
            if mi == T::NEG_INFINITY {
                row.iter_mut().for_each(|x| *x = T::ZERO);
            } else {
                row.iter_mut().for_each(|x| *x = (*x - mi).exp_fast());
            }
        }
        for (row, sum) in s.chunks_exact(kn).zip(sums.iter_mut()) {
            *sum = simd::lane_sum(row, |x| x);
        }
    }
}

crate::cpu_features::wide_fn! {
    #[allow(clippy::too_many_arguments)]
    /// One block of the backward (`rows × kn`, query rows from `first_row`, keys from `kj`):
    /// `p = exp(scale·s − lse)` over the visible keys (0 past them) into `p`, and
    /// `ds = p·(dp − δ)` over `dp` in place (0 past them); row `i`'s `lse` at `lse.0[i · lse.1]`,
    /// its δ at `delta[i]`.
    fn grad_rows<[T: Float]>[T](p: &mut [T], ds: &mut [T], kn: usize, first_row: usize, kj: usize, causal: bool, scale: T, lse: (&[T], usize), delta: &[T]) -> () {
        let rows = p.chunks_exact_mut(kn).zip(ds.chunks_exact_mut(kn));
        for (i, (p, ds)) in rows.enumerate() {
            let (lse, delta) = (lse.0[i * lse.1], delta[i]);
            for (x, d) in p.iter_mut().zip(ds.iter_mut()) {
                let e = (*x * scale - lse).exp_fast();
                *x = e;
                *d = e * (*d - delta);
            }
            let seen = visible(causal, first_row + i, kj, kn);
            p[seen..].iter_mut().for_each(|x| *x = T::ZERO);
            ds[seen..].iter_mut().for_each(|x| *x = T::ZERO);
        }
    }
}

crate::cpu_features::wide_fn! {
    /// `out += x · scale`.
    fn add_scaled<[T: Float]>[T](out: &mut [T], x: &[T], scale: T) -> () {
        out.iter_mut().zip(x).for_each(|(o, &v)| *o += v * scale);
    }
}

/// `out` rows `first + r · stride` `+= part` row `r` `· scale`, for the rows of `w` elements of
/// `part`: one pass when the rows are contiguous.
fn add_rows<T: Float>(out: &mut [T], first: usize, stride: usize, part: &[T], w: usize, scale: T) {
    if stride == w {
        add_scaled(&mut out[first..first + part.len()], part, scale);
        return;
    }
    for (r, x) in part.chunks_exact(w).enumerate() {
        let at = first + r * stride;
        add_scaled(&mut out[at..at + w], x, scale);
    }
}

/// `(batch, first row, rows)` of every block of `len` rows per batch.
fn blocks(batch: usize, len: usize, block: usize) -> Vec<(usize, usize, usize)> {
    (0..batch).flat_map(|b| (0..len).step_by(block.max(1)).map(move |r| (b, r, block.min(len - r)))).collect()
}

/// The inputs of one call, read once in the compute type.
struct Operands<'a, T: Float> {
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    dm: Dims,
    scale: T,
}

impl<T: Float> Operands<'_, T> {
    /// `s = q[qi..qi+qn] · k[kj..kj+kn]ᵀ` of attention `a`, unscaled and unmasked (the row loops
    /// scale and mask).
    fn scores(&self, a: usize, (qi, qn): (usize, usize), (kj, kn): (usize, usize), s: &mut [T]) {
        let Dims { tq, tk, d, .. } = self.dm;
        let q = &self.q[self.dm.row(a, tq, qi, d)..];
        let k = &self.k[self.dm.row(a, tk, kj, d)..];
        mm(qn, d, kn, q, (self.dm.stride(d), 1), k, (1, self.dm.stride(d)), s);
    }
}

/// Output shaped like q with `dv + 1` columns: each row's attention output followed by its
/// log-sum-exp.
pub(super) fn sdpa<T: Float>(
    call: &KernelCall<'_>,
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    (causal, scale, layout): (bool, f64, AttnLayout),
) -> Result<HostTensor> {
    let (qv, kv, vv) = (T::read(q.data()), T::read(k.data()), T::read(v.data()));
    let dm = Dims::of(layout, q.shape(), k.shape(), v.shape(), causal);
    let ops = Operands { q: &qv, k: &kv, v: &vv, dm, scale: T::of(scale) };
    let Dims { heads, tq, dv, .. } = dm;
    let width = dv + 1;
    // A unit is a block of query rows of every head of one outer index: a contiguous part of the
    // output (rows `qi..qi + qn`, each `heads` rows of `width`).
    let units = blocks(dm.outer, tq, Q_BLOCK);
    let lens: Vec<usize> = units.iter().map(|&(_, _, n)| n * heads * width).collect();
    let out = parallel_units(&lens, |u, o: &mut [T]| {
        let (outer, qi, qn) = units[u];
        // One scratch allocation per unit, reused by each head.
        let mut scratch = vec![T::ZERO; attend_scratch_len(&dm, qn)];
        for h in 0..heads {
            let (m, l, acc) = attend_rows(&ops, outer * heads + h, (qi, qn), &mut scratch);
            for i in 0..qn {
                let row = &mut o[(i * heads + h) * width..][..width];
                if l[i] == T::ZERO {
                    row[..dv].iter_mut().for_each(|x| *x = T::ZERO);
                    row[dv] = T::NEG_INFINITY;
                    continue;
                }
                let inv = T::ONE / l[i];
                for (x, &a) in row[..dv].iter_mut().zip(&acc[i * dv..(i + 1) * dv]) {
                    *x = a * inv;
                }
                row[dv] = m[i] + l[i].ln();
            }
        }
    });
    finish(call, out)
}

/// The scratch [`attend_rows`] needs for `qn` query rows: running maxima (and those before the
/// block), running sums, the block's sums, the accumulator, a score block and its product with v.
fn attend_scratch_len(dm: &Dims, qn: usize) -> usize {
    qn * (4 + 2 * dm.dv + K_BLOCK.min(dm.tk))
}

/// The online softmax of attention `a`'s query rows `qi..qi + qn` over its keys, in `scratch`
/// ([`attend_scratch_len`] long): returns the rows' maxima, sums and unnormalised outputs
/// (`qn × dv`), which live in `scratch`.
fn attend_rows<'s, T: Float>(
    ops: &Operands<'_, T>,
    a: usize,
    (qi, qn): (usize, usize),
    scratch: &'s mut [T],
) -> (&'s [T], &'s [T], &'s [T]) {
    let Dims { tk, dv, .. } = ops.dm;
    let (m, rest) = scratch.split_at_mut(qn);
    let (before, rest) = rest.split_at_mut(qn);
    let (l, rest) = rest.split_at_mut(qn);
    let (sums, rest) = rest.split_at_mut(qn);
    let (acc, rest) = rest.split_at_mut(qn * dv);
    let (pv, s) = rest.split_at_mut(qn * dv);
    m.iter_mut().for_each(|x| *x = T::NEG_INFINITY);
    l.iter_mut().for_each(|x| *x = T::ZERO);
    acc.iter_mut().for_each(|x| *x = T::ZERO);
    let n_keys = ops.dm.keys_before(qi + qn);
    for kj in (0..n_keys).step_by(K_BLOCK) {
        let kn = K_BLOCK.min(n_keys - kj);
        let s = &mut s[..qn * kn];
        ops.scores(a, (qi, qn), (kj, kn), s);
        before.copy_from_slice(m);
        online_block(s, kn, qi, kj, ops.dm.causal, ops.scale, m, sums);
        for i in 0..qn {
            if m[i] == T::NEG_INFINITY {
                continue; // every key so far is masked for this row
            }
            let correction = if before[i] == T::NEG_INFINITY { T::ZERO } else { (before[i] - m[i]).exp() };
            l[i] = l[i] * correction + sums[i];
            acc[i * dv..(i + 1) * dv].iter_mut().for_each(|a| *a = *a * correction);
        }
        let v = &ops.v[ops.dm.row(a, tk, kj, dv)..];
        mm(qn, kn, dv, s, (kn, 1), v, (ops.dm.stride(dv), 1), pv);
        acc.iter_mut().zip(pv.iter()).for_each(|(a, &x)| *a += x);
    }
    (m, l, acc)
}

/// One block pair of the backward: probabilities `p` and score gradients `ds = p·(dp − δ)` of
/// attention `a`'s queries `qi..qi+qn` against keys `kj..kj+kn`, recomputed from the
/// log-sum-exp; `delta` holds the attention's δ rows.
#[allow(clippy::too_many_arguments)]
fn grad_block<T: Float>(
    ops: &Operands<'_, T>,
    saved: &[T],
    g: &[T],
    delta: &[T],
    a: usize,
    (qi, qn): (usize, usize),
    (kj, kn): (usize, usize),
    p: &mut [T],
    ds: &mut [T],
) {
    let dm = ops.dm;
    let Dims { tq, tk, dv, .. } = dm;
    let width = dv + 1;
    ops.scores(a, (qi, qn), (kj, kn), p);
    // dp = dout · vᵀ (dout rows are the packed gradient's `[dout | dlse]` rows).
    let (g_rows, v_rows) = (&g[dm.row(a, tq, qi, width)..], &ops.v[dm.row(a, tk, kj, dv)..]);
    mm(qn, dv, kn, g_rows, (dm.stride(width), 1), v_rows, (1, dm.stride(dv)), ds);
    let lse = (&saved[dm.row(a, tq, qi, width) + dv..], dm.stride(width));
    grad_rows(&mut p[..qn * kn], &mut ds[..qn * kn], kn, qi, kj, dm.causal, ops.scale, lse, &delta[qi..]);
}

/// Gradients `[.., heads · (tq·d + tk·d + tk·dv)]`: per outer index, dq `[tq, heads, d]`, dk
/// `[tk, heads, d]` and dv `[tk, heads, dv]` flattened (heads is 1 in head-major layout), from
/// q, k, v, the saved `[out | lse]` and its gradient `[dout | dlse]`.
pub(super) fn sdpa_grad<T: Float>(
    call: &KernelCall<'_>,
    x: &[&HostTensor],
    (causal, scale, layout): (bool, f64, AttnLayout),
) -> Result<HostTensor> {
    let (q, k, v, saved, g) = (x[0], x[1], x[2], x[3], x[4]);
    let dm = Dims::of(layout, q.shape(), k.shape(), v.shape(), causal);
    let Dims { outer, heads, tq, tk, d, dv, .. } = dm;
    let (qv, kv, vv) = (T::read(q.data()), T::read(k.data()), T::read(v.data()));
    let (ov, gv) = (T::read(saved.data()), T::read(g.data()));
    let ops = Operands { q: &qv, k: &kv, v: &vv, dm, scale: T::of(scale) };
    let width = dv + 1;
    let scale = ops.scale;
    // One unit per outer index, in its own slice of the output `[dq | dk | dv]`, its heads one
    // after another: key blocks in order, and for each the query blocks that see it, so every
    // block pair's probabilities are computed once, and each gradient row sums its block
    // products in the same order on any number of threads (dq_i over key blocks ascending, dk_j
    // and dv_j over query blocks).
    let per = heads * (tq * d + tk * d + tk * dv);
    let out = parallel_units(&vec![per; outer], |o, unit: &mut [T]| {
        let (dq, rest) = unit.split_at_mut(heads * tq * d);
        let (dk, dvs) = rest.split_at_mut(heads * tk * d);
        // One scratch allocation, sized for the largest block pair of this call: p, ds, a
        // block product, and the attention's δ rows.
        let (qb, kb) = (Q_BLOCK.min(tq), K_BLOCK.min(tk));
        let mut scratch = vec![T::ZERO; 2 * qb * kb + qb.max(kb) * d.max(dv) + tq];
        let (p, rest) = scratch.split_at_mut(qb * kb);
        let (ds, rest) = rest.split_at_mut(qb * kb);
        let (part, delta) = rest.split_at_mut(qb.max(kb) * d.max(dv));
        for h in 0..heads {
            let a = o * heads + h;
            // δ_i = dout_i · out_i − dlse_i: the row term of the softmax gradient.
            for (i, dl) in delta.iter_mut().enumerate() {
                let r = dm.row(a, tq, i, width);
                let (out_row, g_row) = (&ov[r..][..width], &gv[r..][..width]);
                *dl = out_row[..dv].iter().zip(&g_row[..dv]).fold(T::ZERO, |s, (&x, &y)| s + x * y) - g_row[dv];
            }
            // Within the unit, head `h`'s rows are those of attention `h` of outer index 0.
            for kj in (0..tk).step_by(K_BLOCK) {
                let kn = K_BLOCK.min(tk - kj);
                // Causal: queries before `kj` see none of these keys.
                let first = if causal { (kj / Q_BLOCK) * Q_BLOCK } else { 0 };
                for qi in (first..tq).step_by(Q_BLOCK) {
                    let qn = Q_BLOCK.min(tq - qi);
                    grad_block(&ops, &ov, &gv, delta, a, (qi, qn), (kj, kn), p, ds);
                    // dq_i += scale · ds · k_j.
                    mm(qn, kn, d, ds, (kn, 1), &kv[dm.row(a, tk, kj, d)..], (dm.stride(d), 1), part);
                    add_rows(dq, dm.row(h, tq, qi, d), dm.stride(d), &part[..qn * d], d, scale);
                    // dk_j += scale · dsᵀ · q_i and dv_j += pᵀ · dout_i: read transposed by stride.
                    mm(kn, qn, d, ds, (1, kn), &qv[dm.row(a, tq, qi, d)..], (dm.stride(d), 1), part);
                    add_rows(dk, dm.row(h, tk, kj, d), dm.stride(d), &part[..kn * d], d, scale);
                    let g_rows = &gv[dm.row(a, tq, qi, width)..];
                    mm(kn, qn, dv, p, (1, kn), g_rows, (dm.stride(width), 1), part);
                    add_rows(dvs, dm.row(h, tk, kj, dv), dm.stride(dv), &part[..kn * dv], dv, T::ONE);
                }
            }
        }
    });
    finish(call, out)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::op::{AttnLayout, Op};

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
    fn a_nan_score_makes_its_rows_nan_even_when_it_is_all_a_row_sees() {
        // Key 0 is NaN: query 0 (causal) sees only it, later queries see it beside numbers;
        // 70 keys put the NaN in the first of two key blocks.
        let (t, d) = (70, 2);
        let (q, mut k, v) = (values(t * d, 1), values(t * d, 2), values(t * d, 3));
        k[0] = f64::NAN;
        let op = Op::Sdpa { causal: true, scale: 0.5, layout: AttnLayout::HeadMajor };
        for dtype_f32 in [false, true] {
            let tensor = |x: &[f64]| {
                if dtype_f32 {
                    t32(&[1, t, d], &x.iter().map(|&v| v as f32).collect::<Vec<_>>())
                } else {
                    t64(&[1, t, d], x)
                }
            };
            let y = run(&op, &[&tensor(&q), &tensor(&k), &tensor(&v)]).unwrap().to_f64_vec();
            for (row, out) in y.chunks(d + 1).enumerate() {
                assert!(out.iter().all(|x| x.is_nan()), "row {row} (f32: {dtype_f32}): {out:?}");
            }
        }
    }

    #[test]
    fn matches_the_unfused_composition_across_key_blocks() {
        // 150 keys: two full blocks and a partial one.
        let (t, d) = (150, 4);
        let (q, k, v) = (values(t * d, 1), values(t * d, 2), values(t * d, 3));
        for causal in [false, true] {
            let op = Op::Sdpa { causal, scale: 0.5, layout: AttnLayout::HeadMajor };
            let y = run(&op, &[&t64(&[1, t, d], &q), &t64(&[1, t, d], &k), &t64(&[1, t, d], &v)]).unwrap();
            assert_eq!(y.shape(), &[1, t, d + 1]);
            assert_close(&y.to_f64_vec(), &reference(&q, &k, &v, t, d, causal, 0.5), 1e-12);
        }
    }

    /// Token-major attention (`[o, t, heads, d]`, heads read in place) gives the bits of
    /// head-major attention on the transposed operands, forward and backward: every element is
    /// summed in the same order. Shapes cross key and query blocks, with `tq ≠ tk`, `d ≠ dv`.
    #[test]
    fn token_major_layout_matches_head_major_bit_for_bit() {
        let f32s = |shape: &[usize], seed| {
            let v: Vec<f32> = values(shape.iter().product(), seed).iter().map(|&x| x as f32).collect();
            t32(shape, &v)
        };
        // [o, t, h, w] <-> [o, h, t, w].
        let swap = |x: &crate::host::HostTensor| run(&Op::Transpose { perm: vec![0, 2, 1, 3] }, &[x]).unwrap();
        let bits = |x: &crate::host::HostTensor| x.to_f32_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let (o, h) = (2, 3);
        for (tq, tk, d, dv, causal) in [(150, 150, 8, 5, true), (70, 130, 4, 6, false), (1, 9, 3, 3, true)] {
            let (q, k, v) = (f32s(&[o, tq, h, d], 1), f32s(&[o, tk, h, d], 2), f32s(&[o, tk, h, dv], 3));
            let (qh, kh, vh) = (swap(&q), swap(&k), swap(&v));
            let op = |layout| Op::Sdpa { causal, scale: 0.3, layout };
            let tokens = run(&op(AttnLayout::TokenMajor), &[&q, &k, &v]).unwrap();
            let heads = run(&op(AttnLayout::HeadMajor), &[&qh, &kh, &vh]).unwrap();
            assert_eq!(tokens.shape(), &[o, tq, h, dv + 1]);
            assert_eq!(bits(&tokens), bits(&swap(&heads)), "forward {tq}×{tk}, causal {causal}");
            let g = f32s(&[o, tq, h, dv + 1], 4);
            let grad = |layout| Op::SdpaGrad { causal, scale: 0.3, layout };
            let gt = run(&grad(AttnLayout::TokenMajor), &[&q, &k, &v, &tokens, &g]).unwrap();
            let gh = run(&grad(AttnLayout::HeadMajor), &[&qh, &kh, &vh, &heads, &swap(&g)]).unwrap();
            assert_eq!(gt.shape(), &[o, h * (tq * d + tk * d + tk * dv)]);
            // Head-major: per (o, head), dq [tq, d] | dk [tk, d] | dv [tk, dv]; token-major: per o,
            // dq [tq, h, d] | dk [tk, h, d] | dv [tk, h, dv].
            let (gt, gh) = (gt.to_f32_vec(), gh.to_f32_vec());
            let per_head = tq * d + tk * d + tk * dv;
            for (oi, hi) in (0..o).flat_map(|oi| (0..h).map(move |hi| (oi, hi))) {
                let head = &gh[(oi * h + hi) * per_head..][..per_head];
                let unit = &gt[oi * h * per_head..][..h * per_head];
                let parts = [(0, 0, tq, d), (tq * d, h * tq * d, tk, d), (tq * d + tk * d, h * (tq + tk) * d, tk, dv)];
                for (from, to, rows, w) in parts {
                    for r in 0..rows {
                        let want = &head[from + r * w..][..w];
                        let got = &unit[to + (r * h + hi) * w..][..w];
                        assert!(
                            want.iter().zip(got).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "gradient {tq}×{tk}, outer {oi}, head {hi}, row {r} at {to}"
                        );
                    }
                }
            }
        }
    }
}
