//! Routing ops (`select.cu`): argmax/argmin, topk and argsort, bincount, one_hot, and the id
//! check of the ops that write at ids. Inputs are floats, i64 or i32; results are i64 positions that
//! match the CPU's exactly (the same total, stable order).

use super::elementwise::{pattern, zero};
use super::{around, num_fname, View};
use crate::device::{Device, Origin};
use crate::kernels::{elem_suffix, Arg, SELECT};
use remat_core::Result;

/// Lanes per row of `arg_reduce` (a warp).
const WARP: usize = 32;

/// `arg_reduce_T(const T* x, i64* y, u64 outer, u64 dim, u64 inner, int want_max)`: a warp per
/// row along `axis` (`keepdim` changes only the output's shape).
pub(crate) fn arg_reduce(dev: &Device, x: View<'_>, axis: usize, want_max: bool, out: View<'_>) -> Result<()> {
    let (outer, dim, inner) = around(x.shape, axis);
    let args = [
        x.arg(),
        out.arg(),
        Arg::U64(outer as u64),
        Arg::U64(dim as u64),
        Arg::U64(inner as u64),
        Arg::I32(i32::from(want_max)),
    ];
    dev.launch_1d(&SELECT, &num_fname(dev, "arg_reduce", x.dtype)?, outer * inner * WARP, &args)
}

/// The first `k` positions of each row along `axis` in sorted order (descending or
/// ascending, stable): `topk` (`k` of them) and `argsort` (all). `rank_sort_T(const T* x, i64* y,
/// u64 outer, u64 dim, u64 inner, u64 k, int descending)`, a thread per input entry.
pub(crate) fn sorted(dev: &Device, x: View<'_>, axis: usize, k: usize, descending: bool, out: View<'_>) -> Result<()> {
    let (outer, dim, inner) = around(x.shape, axis);
    let args = [
        x.arg(),
        out.arg(),
        Arg::U64(outer as u64),
        Arg::U64(dim as u64),
        Arg::U64(inner as u64),
        Arg::U64(k as u64),
        Arg::I32(i32::from(descending)),
    ];
    dev.launch_1d(&SELECT, &num_fname(dev, "rank_sort", x.dtype)?, outer * dim * inner, &args)
}

/// Reports an id outside `0..bound` at the next synchronisation: `check_ids(const i64* ids, u64
/// n, u64 bound, u64* flag, u64 node)`.
pub(crate) fn check_ids(dev: &Device, at: Origin, ids: View<'_>, bound: usize) -> Result<()> {
    let n = ids.numel();
    let args = [ids.arg(), Arg::U64(n as u64), Arg::U64(bound as u64), Arg::U64(dev.flag), at.arg()];
    dev.launch_1d(&SELECT, "check_ids", n, &args)
}

/// Counts of each id in `0..bins` (`out` zeroed first): `bincount(const i64* ids, u64* counts,
/// u64 n, u64 bins, u64* flag, u64 node)`.
pub(crate) fn bincount(dev: &Device, at: Origin, ids: View<'_>, out: View<'_>) -> Result<()> {
    zero(dev, out)?;
    let n = ids.numel();
    let args = [ids.arg(), out.arg(), Arg::U64(n as u64), Arg::U64(out.numel() as u64), Arg::U64(dev.flag), at.arg()];
    dev.launch_1d(&SELECT, "bincount", n, &args)
}

/// Rows of `classes`, 1 at the id, 0 elsewhere, in `out`'s dtype: the id check, then
/// `one_hot_N(const i64* ids, E* y, u64 n, u64 classes, E one)` on raw elements.
pub(crate) fn one_hot(dev: &Device, at: Origin, ids: View<'_>, classes: usize, out: View<'_>) -> Result<()> {
    check_ids(dev, at, ids, classes)?;
    let n = ids.numel();
    let name = format!("one_hot_{}", elem_suffix(out.dtype.size()));
    let args = [ids.arg(), out.arg(), Arg::U64(n as u64), Arg::U64(classes as u64), pattern(dev, 1.0, out.dtype)?];
    dev.launch_1d(&SELECT, &name, n * classes, &args)
}
