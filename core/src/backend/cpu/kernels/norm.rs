//! RMS normalisation over the last axis and its fused gradient.

use super::{finish, Float, KernelCall};
use crate::error::Result;
use crate::host::HostTensor;

fn row_len(shape: &[usize]) -> usize {
    shape.last().copied().unwrap_or(1).max(1)
}

/// `1 / sqrt(mean(x²) + eps)` of one row.
fn inv_rms<T: Float>(row: &[T], eps: T) -> T {
    let n = T::of(row.len() as f64);
    let ms = row.iter().fold(T::ZERO, |s, &v| s + v * v) / n;
    T::ONE / (ms + eps).sqrt()
}

/// `x / sqrt(mean(x²) + eps)` over the last axis (no gain: multiply by a weight for that).
pub(super) fn rms_norm<T: Float>(call: &KernelCall<'_>, x: &HostTensor, eps: f64) -> Result<HostTensor> {
    let xv = T::read(x.data());
    let d = row_len(x.shape());
    let mut out = Vec::with_capacity(xv.len());
    for row in xv.chunks_exact(d) {
        let r = inv_rms(row, T::of(eps));
        out.extend(row.iter().map(|&v| v * r));
    }
    finish(call, out)
}

/// Exact gradient of [`rms_norm`] wrt x in one pass per row: `r·(g − x̂·mean(g·x̂))` with
/// `x̂ = r·x`.
pub(super) fn rms_norm_grad<T: Float>(
    call: &KernelCall<'_>,
    x: &HostTensor,
    g: &HostTensor,
    eps: f64,
) -> Result<HostTensor> {
    let (xv, gv) = (T::read(x.data()), T::read(g.data()));
    let d = row_len(x.shape());
    let n = T::of(d as f64);
    let mut out = Vec::with_capacity(xv.len());
    for (xr, gr) in xv.chunks_exact(d).zip(gv.chunks_exact(d)) {
        let r = inv_rms(xr, T::of(eps));
        let gx = xr.iter().zip(gr).fold(T::ZERO, |s, (&v, &g)| s + g * v * r) / n;
        out.extend(xr.iter().zip(gr).map(|(&v, &g)| r * (g - v * r * gx)));
    }
    finish(call, out)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::op::Op;

    #[test]
    fn rms_norm_rows_have_unit_mean_square() {
        let x = t64(&[2, 3], &[1., 2., 3., -4., 0., 4.]);
        let y = run(&Op::RmsNorm { eps: 1e-12 }, &[&x]).unwrap().to_f64_vec();
        let ms0 = (y[0] * y[0] + y[1] * y[1] + y[2] * y[2]) / 3.0;
        assert!((ms0 - 1.0).abs() < 1e-9, "{ms0}");
        let r = (32.0f64 / 3.0).sqrt();
        assert_close(&y[3..], &[-4.0 / r, 0.0, 4.0 / r], 1e-9);
    }
}
