//! Views materialised as copies (`layout.cu`): raw elements, any dtype.

use super::{coalesce, dims, elementwise::copy, View};
use crate::device::Device;
use crate::kernels::{elem_suffix, Arg, LAYOUT};
use remat_core::Result;
use remat_core::{broadcast_strides, strides};

/// Copies the view of `x` starting at element `base` with `steps` (one per output axis) into
/// the contiguous `out`: a plain copy when contiguous, a tiled transpose when the two inner
/// axes are swapped, else `gather_N(const E* x, E* y, u64 base, Dims view, u64 n)`.
fn view_copy(dev: &Device, x: View<'_>, base: usize, steps: &[usize], out: View<'_>) -> Result<()> {
    let n = out.numel();
    if n == 0 {
        return Ok(());
    }
    let esz = x.dtype.size();
    let (shape, s) = coalesce(out.shape, &[steps]);
    let st = &s[0];
    let r = shape.len();
    if r == 1 && st[0] == 1 {
        return copy(dev, x.ptr + (base * esz) as u64, out.ptr, n * esz);
    }
    let suffix = elem_suffix(esz);
    if r >= 2 && st[r - 1] != 1 && st[r - 2] == 1 && shape[r - 1] >= 8 && shape[r - 2] >= 8 {
        let batches: usize = shape[..r - 2].iter().product();
        // gridDim.y (row tiles) and gridDim.z (batches) are limited to 65535.
        if batches <= 65_535 && shape[r - 2].div_ceil(32) <= 65_535 {
            // transpose_tiled_N(const E* x, E* y, u64 base, Dims batch, u64 rows, u64 cols, u64 step)
            let (rows, cols) = (shape[r - 2], shape[r - 1]);
            let args = [
                x.arg(),
                out.arg(),
                Arg::U64(base as u64),
                dims(dev, &shape[..r - 2], &st[..r - 2])?,
                Arg::U64(rows as u64),
                Arg::U64(cols as u64),
                Arg::U64(st[r - 1] as u64),
            ];
            let grid = (cols.div_ceil(32) as u32, rows.div_ceil(32) as u32, batches as u32);
            return dev.launch(&LAYOUT, &format!("transpose_tiled_{suffix}"), grid, (32, 8, 1), &args);
        }
    }
    let args = [x.arg(), out.arg(), Arg::U64(base as u64), dims(dev, &shape, st)?, Arg::U64(n as u64)];
    dev.launch_1d(&LAYOUT, &format!("gather_{suffix}"), n, &args)
}

/// Same bytes, new shape.
pub(crate) fn reshape(dev: &Device, x: View<'_>, out: View<'_>) -> Result<()> {
    copy(dev, x.ptr, out.ptr, out.bytes())
}

/// Output axis `i` is input axis `perm[i]`.
pub(crate) fn transpose(dev: &Device, x: View<'_>, perm: &[usize], out: View<'_>) -> Result<()> {
    let own = strides(x.shape);
    let steps: Vec<usize> = perm.iter().map(|&p| own[p]).collect();
    view_copy(dev, x, 0, &steps, out)
}

/// Broadcast copy.
pub(crate) fn expand(dev: &Device, x: View<'_>, out: View<'_>) -> Result<()> {
    view_copy(dev, x, 0, &broadcast_strides(x.shape, out.shape), out)
}

/// `len` entries of `axis` from `start`.
pub(crate) fn slice(dev: &Device, x: View<'_>, axis: usize, start: usize, out: View<'_>) -> Result<()> {
    let steps = strides(x.shape);
    let base = start * steps.get(axis).copied().unwrap_or(0);
    view_copy(dev, x, base, &steps, out)
}

/// Gradient of `slice`: zeros, then `g` copied in at `start` of `axis` (`copy_rows_N`).
pub(crate) fn slice_grad(dev: &Device, g: View<'_>, axis: usize, start: usize, out: View<'_>) -> Result<()> {
    super::elementwise::zero(dev, out)?;
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product();
    let (ld, cols) = (out.shape[axis] * inner, g.shape[axis] * inner);
    let esz = out.dtype.size();
    let args = [
        g.arg(),
        out.arg(),
        Arg::U64(outer as u64),
        Arg::U64(cols as u64),
        Arg::U64(ld as u64),
        Arg::U64((start * inner) as u64),
    ];
    dev.launch_1d(&LAYOUT, &format!("copy_rows_{}", elem_suffix(esz)), outer * cols, &args)
}

/// Joins inputs along `axis`: `copy_rows_N(const E* x, E* y, u64 outer, u64 cols, u64 ld, u64
/// col_off)` per input.
pub(crate) fn concat(dev: &Device, xs: &[View<'_>], axis: usize, out: View<'_>) -> Result<()> {
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product();
    let ld = out.shape[axis] * inner;
    let esz = out.dtype.size();
    let mut col = 0usize;
    for x in xs {
        let cols = x.shape[axis] * inner;
        if outer == 1 {
            copy(dev, x.ptr, out.ptr + (col * esz) as u64, cols * esz)?;
        } else {
            let args = [
                x.arg(),
                out.arg(),
                Arg::U64(outer as u64),
                Arg::U64(cols as u64),
                Arg::U64(ld as u64),
                Arg::U64(col as u64),
            ];
            dev.launch_1d(&LAYOUT, &format!("copy_rows_{}", elem_suffix(esz)), outer * cols, &args)?;
        }
        col += cols;
    }
    Ok(())
}
