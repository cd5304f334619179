//! `sum`, `mean`, `amax` over any axes and the gradient of `amax` (`reduce.cu`).

use super::{coalesce, dims, fname, Scratch, View};
use crate::device::{Device, THREADS};
use crate::kernels::{compute_dtype, Arg, REDUCE};
use remat_core::Result;
use remat_core::{broadcast_strides, reduced, strides};

/// Reduction mode codes (`R_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Sum = 0,
    Mean = 1,
    Max = 2,
}

/// The input's axes split into kept (output order) and reduced, each coalesced with its strides.
struct Split {
    kept: (Vec<usize>, Vec<usize>),
    red: (Vec<usize>, Vec<usize>),
    n_out: usize,
    group: usize,
}

fn split(shape: &[usize], axes: &[usize]) -> Split {
    let st = strides(shape);
    let pick = |want: bool| -> (Vec<usize>, Vec<usize>) {
        let (s, t): (Vec<usize>, Vec<usize>) =
            (0..shape.len()).filter(|a| axes.contains(a) == want).map(|a| (shape[a], st[a])).unzip();
        let (cs, ct) = coalesce(&s, &[&t]);
        (cs, ct.into_iter().next().unwrap_or_default())
    };
    let (kept, red) = (pick(false), pick(true));
    let n_out = kept.0.iter().product();
    let group = red.0.iter().product();
    Split { kept, red, n_out, group }
}

/// `out` = the reduction of `x` over `axes`.
///
/// Contiguous groups: `reduce_rows_T(const T* x, T* out, Dims kept, Dims red, u64 n_out, u64
/// group, int mode)`, a block per output. Otherwise `reduce_cols_T(const T* x, C* partial, Dims
/// kept, Dims red, u64 n_out, u64 group, u64 chunk, int mode)` over `splits` slices of the group
/// and `reduce_finish_T(const C* partial, T* out, u64 n_out, u64 splits, u64 group, int mode)`.
pub(crate) fn reduce(dev: &Device, x: View<'_>, axes: &[usize], mode: Mode, out: View<'_>) -> Result<()> {
    let s = split(x.shape, axes);
    if s.n_out == 0 {
        return Ok(());
    }
    let kept = dims(dev, &s.kept.0, &s.kept.1)?;
    let red = dims(dev, &s.red.0, &s.red.1)?;
    let contiguous = s.red.1.last() == Some(&1);
    if contiguous && s.group >= 64 {
        let threads = if s.group >= 1024 { 256 } else { 128 };
        let grid = s.n_out.min((dev.sm_count * 64) as usize) as u32;
        let args =
            [x.arg(), out.arg(), kept, red, Arg::U64(s.n_out as u64), Arg::U64(s.group as u64), Arg::I32(mode as i32)];
        return dev.launch(&REDUCE, &fname(dev, "reduce_rows", x.dtype)?, (grid, 1, 1), (threads, 1, 1), &args);
    }
    // Enough threads to fill the device: split the group when there are few outputs.
    let want = (dev.sm_count as usize) * 1024;
    let mut splits = if s.n_out >= want { 1 } else { want.div_ceil(s.n_out) };
    splits = splits.min(s.group.div_ceil(32).max(1)).min(65_535);
    let chunk = s.group.div_ceil(splits).max(1);
    splits = s.group.div_ceil(chunk).max(1);
    let c = compute_dtype(x.dtype);
    let partial = Scratch::new(dev, splits * s.n_out * c.size())?;
    let grid_x = s.n_out.div_ceil(THREADS as usize).min(1 << 20) as u32;
    let args = [
        x.arg(),
        Arg::U64(partial.ptr),
        kept,
        red,
        Arg::U64(s.n_out as u64),
        Arg::U64(s.group as u64),
        Arg::U64(chunk as u64),
        Arg::I32(mode as i32),
    ];
    dev.launch(&REDUCE, &fname(dev, "reduce_cols", x.dtype)?, (grid_x, splits as u32, 1), (THREADS, 1, 1), &args)?;
    let args = [
        Arg::U64(partial.ptr),
        out.arg(),
        Arg::U64(s.n_out as u64),
        Arg::U64(splits as u64),
        Arg::U64(s.group as u64),
        Arg::I32(mode as i32),
    ];
    dev.launch_1d(&REDUCE, &fname(dev, "reduce_finish", x.dtype)?, s.n_out, &args)
}

/// `dx` = `g / count` at the tied maxima of each group, 0 elsewhere:
/// `amax_count_T(const T* x, const T* y, C* count, Dims kept, Dims red, u64 n_out, u64 group)`
/// then `amax_grad_T(const T* x, const T* y, const T* g, const C* count, T* dx, u64 n, Dims to_out)`.
pub(crate) fn amax_grad(
    dev: &Device,
    x: View<'_>,
    y: View<'_>,
    g: View<'_>,
    axes: &[usize],
    out: View<'_>,
) -> Result<()> {
    let s = split(x.shape, axes);
    let n = x.numel();
    if n == 0 {
        return Ok(());
    }
    let c = compute_dtype(x.dtype);
    let count = Scratch::new(dev, s.n_out * c.size())?;
    let args = [
        x.arg(),
        y.arg(),
        Arg::U64(count.ptr),
        dims(dev, &s.kept.0, &s.kept.1)?,
        dims(dev, &s.red.0, &s.red.1)?,
        Arg::U64(s.n_out as u64),
        Arg::U64(s.group as u64),
    ];
    dev.launch_1d(&REDUCE, &fname(dev, "amax_count", x.dtype)?, s.n_out, &args)?;
    let keep = reduced(x.shape, axes, true);
    let steps = broadcast_strides(&keep, x.shape);
    let (shape, st) = coalesce(x.shape, &[&steps]);
    let args =
        [x.arg(), y.arg(), g.arg(), Arg::U64(count.ptr), out.arg(), Arg::U64(n as u64), dims(dev, &shape, &st[0])?];
    dev.launch_1d(&REDUCE, &fname(dev, "amax_grad", x.dtype)?, n, &args)
}
