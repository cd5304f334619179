//! Wider vectors for the elementwise loops, chosen at run time.
//!
//! The crate is compiled for baseline x86-64 (SSE2), so plain loops vectorise four f32 lanes
//! wide at most. [`wide_fn!`] compiles a loop twice more, with AVX2 and FMA and with AVX-512,
//! and calls the widest copy the CPU runs: eight or sixteen lanes (the AVX-512 copy takes GELU
//! and its gradient from 12 to 8 ms per GPT step on the development machine). Results are
//! bit-identical whichever runs: Rust never contracts `a * b + c` into a fused multiply-add by
//! itself, every lane computes what the scalar loop computes, and reductions keep their own
//! fixed [`LANES`] accumulators whatever the vector width (a test runs a training step's kernels
//! under each copy and compares their bits).

use super::split::par_fill;
use crate::cpu_features::wide_fn;
use std::mem::MaybeUninit;

wide_fn! {
    /// Writes every element of `out` (`x` is at least as long).
    fn map_into<[T: Copy, U: Copy, F: Fn(T) -> U]>[T, U, F](out: &mut [MaybeUninit<U>], x: &[T], f: &F) -> () {
        for (o, &v) in out.iter_mut().zip(x) {
            o.write(f(v));
        }
    }
}

wide_fn! {
    /// Writes every element of `out` (`a` and `b` are at least as long).
    fn zip_into<[T: Copy, U: Copy, F: Fn(T, T) -> U]>[T, U, F](out: &mut [MaybeUninit<U>], a: &[T], b: &[T], f: &F) -> () {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            o.write(f(x, y));
        }
    }
}

/// `f` of every element: vectorised, and threaded for large slices.
pub(crate) fn map<T: Copy + Sync, U: Copy + Send, F: Fn(T) -> U + Sync>(x: &[T], f: F) -> Vec<U> {
    // SAFETY: each chunk `at..at + len` of the output has its input `x[at..at + len]`, and
    // `map_into` writes every element of the chunk.
    unsafe { par_fill(x.len(), 1, |at, chunk| map_into(chunk, &x[at..at + chunk.len()], &f)) }
}

/// `f` of every pair of elements of two slices (as long as the shorter): vectorised, and
/// threaded for large slices.
pub(crate) fn zip<T: Copy + Sync, U: Copy + Send, F: Fn(T, T) -> U + Sync>(a: &[T], b: &[T], f: F) -> Vec<U> {
    let n = a.len().min(b.len());
    let fill = |at: usize, chunk: &mut [MaybeUninit<U>]| {
        zip_into(chunk, &a[at..at + chunk.len()], &b[at..at + chunk.len()], &f)
    };
    // SAFETY: both inputs have at least `n` elements, and `zip_into` writes every element.
    unsafe { par_fill(n, 1, fill) }
}

// The lane loops index on purpose: fixed-size indexed loops are what the compiler vectorises.
/// Accumulators a row reduction keeps: the loop carries eight independent sums (which the
/// compiler keeps in one vector register) instead of one long dependency chain.
pub(crate) const LANES: usize = 8;

/// `Σ f(x[i])` over eight interleaved partial sums, combined in a fixed order: the same result
/// on every run, every thread count and every strategy (not the left-to-right sum's bits).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(crate) fn lane_sum<T: super::Float>(x: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] += f(c[l]);
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] += f(v);
    }
    combine(acc)
}

/// `Σ f(a[i], b[i])` as [`lane_sum`] does it.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(crate) fn lane_sum2<T: super::Float>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> T {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [T::ZERO; LANES];
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            acc[l] += f(x[l], y[l]);
        }
    }
    for (l, (&x, &y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        acc[l] += f(x, y);
    }
    combine(acc)
}

/// The NaN-propagating maximum of `x` (−∞ for an empty row), over eight lanes.
#[inline(always)]
pub(crate) fn lane_max<T: super::Float>(x: &[T]) -> T {
    lane_max_by::<T, LANES>(x, |m, v| if v > m || v.is_nan() { v } else { m })
}

/// The maximum of `x` as `pick(max so far, element)` chooses it (−∞ for an empty row), over
/// `W` lanes folded pairwise. A maximum is exact in any order, so the lane count changes no
/// result; `pick` decides what a NaN does.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(crate) fn lane_max_by<T: super::Float, const W: usize>(x: &[T], pick: impl Fn(T, T) -> T) -> T {
    let mut acc = [T::NEG_INFINITY; W];
    let mut chunks = x.chunks_exact(W);
    for c in &mut chunks {
        for l in 0..W {
            acc[l] = pick(acc[l], c[l]);
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] = pick(acc[l], v);
    }
    fold_pairwise(acc, pick)
}

/// The lanes' sums added pairwise: (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then 0+1.
#[inline(always)]
fn combine<T: super::Float>(acc: [T; LANES]) -> T {
    fold_pairwise(acc, |a, b| a + b)
}

/// `acc` folded by `op` in halves: lane `l` with lane `l + N/2`, then with `l + N/4`, … (`N` a
/// power of two), so that the fold is log₂ N dependent steps in a fixed order.
#[inline(always)]
pub(crate) fn fold_pairwise<T: Copy, const N: usize>(mut acc: [T; N], op: impl Fn(T, T) -> T) -> T {
    let mut width = N / 2;
    while width > 0 {
        for l in 0..width {
            acc[l] = op(acc[l], acc[l + width]);
        }
        width /= 2;
    }
    acc[0]
}

/// `e^x` in f32 without a libm call, so loops over it vectorise: Cephes' `expf` (range
/// reduction by ln 2 in two parts, a degree-6 polynomial, the exponent put in by bits), within
/// 2 ulp of libm. Below −87.3 it is 0 (as `exp` underflows there); NaN stays NaN.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const HI: f32 = 88.3;
    const LO: f32 = -87.3;
    let under = x < LO;
    let xc = if x > HI {
        HI
    } else if under {
        LO
    } else {
        x
    };
    // Round x·log2(e) to the nearest integer (1.5·2^23 pushes the fraction out of the mantissa).
    let magic = 12_582_912.0f32;
    let shifted = xc * std::f32::consts::LOG2_E + magic;
    let n = shifted - magic;
    let r = xc - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = 1.987_569_1e-4f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 0.166_666_65;
    let p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // `shifted` is `magic + n` exactly (|n| ≤ 128, and its ulp is 1), so `n` is also its low
    // mantissa bits: the exponent comes from integer ops, where a float-to-int cast would be
    // a saturating one that the compiler does not vectorise.
    let n_bits = (shifted.to_bits() as i32).wrapping_sub(magic.to_bits() as i32);
    let scale = f32::from_bits((n_bits.wrapping_add(127) as u32) << 23);
    let e = y * scale;
    if under {
        0.0
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_f32_is_within_two_ulp_of_libm() {
        let mut worst = 0u32;
        for i in -87_000..88_000 {
            let x = i as f32 * 1e-3 + 0.000_123;
            let (got, want) = (exp_f32(x), x.exp());
            worst = worst.max(got.to_bits().abs_diff(want.to_bits()));
        }
        assert!(worst <= 2, "{worst} ulp");
        assert_eq!(exp_f32(-1e9), 0.0);
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn lane_reductions() {
        let x: Vec<f64> = (0..37).map(|i| i as f64 * 0.5 - 3.0).collect();
        let want: f64 = x.iter().sum();
        assert!((lane_sum(&x, |v| v) - want).abs() < 1e-12);
        assert!((lane_sum2(&x, &x, |a, b| a * b) - x.iter().map(|v| v * v).sum::<f64>()).abs() < 1e-9);
        assert_eq!(lane_max(&x), 15.0);
        assert_eq!(lane_max::<f64>(&[]), f64::NEG_INFINITY);
        let mut with_nan = x.clone();
        with_nan[3] = f64::NAN;
        assert!(lane_max(&with_nan).is_nan());
        // In the remainder past the last whole chunk of lanes too.
        let mut nan_in_tail = x.clone();
        nan_in_tail[35] = f64::NAN;
        assert!(lane_max(&nan_in_tail).is_nan());
        // A `pick` that skips NaN gives the largest number, at any lane count.
        let skip_nan = |m: f64, v: f64| if v > m { v } else { m };
        assert_eq!(lane_max_by::<f64, 16>(&with_nan, skip_nan), 15.0);
        assert_eq!(lane_max_by::<f64, 4>(&nan_in_tail, skip_nan), 15.0);
    }

    #[test]
    fn map_and_zip_are_the_scalar_loops() {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 100.0).collect();
        assert_eq!(map(&x, |v| v * 2.0 + 1.0), x.iter().map(|v| v * 2.0 + 1.0).collect::<Vec<_>>());
        assert_eq!(zip(&x, &x[1..], |a, b| a - b).len(), 999);
    }
}
