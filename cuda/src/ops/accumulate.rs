//! `cumsum`, `index_add` and `scatter_add` (`accumulate.cu`): floats in their compute type
//! (every float dtype has its kernel, so nothing goes through scratch) or i64/i32, wrapping; each
//! sums in the CPU's order, so results agree with it bit for bit.

use super::select::check_ids;
use super::{around, num_fname, View};
use crate::device::{Device, Origin};
use crate::kernels::{Arg, ACCUMULATE};
use remat_core::Result;

/// `cumsum_T(const T* x, T* y, u64 outer, u64 dim, u64 inner, int reverse)`: a thread per row
/// along `axis`.
pub(crate) fn cumsum(dev: &Device, x: View<'_>, axis: usize, reverse: bool, out: View<'_>) -> Result<()> {
    let (outer, dim, inner) = around(x.shape, axis);
    if dim == 0 {
        return Ok(());
    }
    let args = [
        x.arg(),
        out.arg(),
        Arg::U64(outer as u64),
        Arg::U64(dim as u64),
        Arg::U64(inner as u64),
        Arg::I32(i32::from(reverse)),
    ];
    dev.launch_1d(&ACCUMULATE, &num_fname(dev, "cumsum", x.dtype)?, outer * inner, &args)
}

/// `index_add`: `x` plus `src`'s slices at indices `idx` (`[k]`) along `axis`.
pub(crate) fn index_add(
    dev: &Device,
    at: Origin,
    (x, idx, src): (View<'_>, View<'_>, View<'_>),
    axis: usize,
    out: View<'_>,
) -> Result<()> {
    add_at(dev, at, "index_add", (x, idx, src), axis, out)
}

/// `scatter_add`: `x` plus each element of `src` at its index along `axis` (`idx` has `src`'s
/// shape).
pub(crate) fn scatter_add(
    dev: &Device,
    at: Origin,
    (x, idx, src): (View<'_>, View<'_>, View<'_>),
    axis: usize,
    out: View<'_>,
) -> Result<()> {
    add_at(dev, at, "scatter_add", (x, idx, src), axis, out)
}

/// The id check, then `<base>_T(const T* x, const i64* idx, const T* src, T* y, u64 outer, u64
/// count, u64 dim, u64 inner)`: a thread per output element summing its matches in order.
fn add_at(
    dev: &Device,
    at: Origin,
    base: &str,
    (x, idx, src): (View<'_>, View<'_>, View<'_>),
    axis: usize,
    out: View<'_>,
) -> Result<()> {
    let (outer, dim, inner) = around(x.shape, axis);
    check_ids(dev, at, idx, dim)?;
    let args = [
        x.arg(),
        idx.arg(),
        src.arg(),
        out.arg(),
        Arg::U64(outer as u64),
        Arg::U64(src.shape[axis] as u64),
        Arg::U64(dim as u64),
        Arg::U64(inner as u64),
    ];
    dev.launch_1d(&ACCUMULATE, &num_fname(dev, base, x.dtype)?, outer * dim * inner, &args)
}
