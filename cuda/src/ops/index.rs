//! Comparisons, `where`, `arange`, `index_select` and its gradient (`index.cu`).

use super::{coalesce, dims, fname, num_fname, View};
use crate::device::{Device, Origin};
use crate::kernels::{compute_dtype, elem_suffix, Arg, INDEX};
use remat_core::broadcast_strides;
use remat_core::{CompareOp, Result};

/// `compare_T(const T* a, const T* b, u8* y, u64 n, int op, Dims da, Dims db)` (`T` a float type,
/// i64 or i32).
pub(crate) fn compare(dev: &Device, op: CompareOp, a: View<'_>, b: View<'_>, out: View<'_>) -> Result<()> {
    let code = match op {
        CompareOp::Eq => 0,
        CompareOp::Ne => 1,
        CompareOp::Lt => 2,
        CompareOp::Le => 3,
        CompareOp::Gt => 4,
        CompareOp::Ge => 5,
    };
    let n = out.numel();
    let (sa, sb) = (broadcast_strides(a.shape, out.shape), broadcast_strides(b.shape, out.shape));
    let (shape, s) = coalesce(out.shape, &[&sa, &sb]);
    let name = num_fname(dev, "compare", a.dtype)?;
    let args = [
        a.arg(),
        b.arg(),
        out.arg(),
        Arg::U64(n as u64),
        Arg::I32(code),
        dims(dev, &shape, &s[0])?,
        dims(dev, &shape, &s[1])?,
    ];
    dev.launch_1d(&INDEX, &name, n, &args)
}

/// `where_N(const u8* c, const E* a, const E* b, E* y, u64 n, Dims dc, Dims da, Dims db)`.
pub(crate) fn select_where(dev: &Device, c: View<'_>, a: View<'_>, b: View<'_>, out: View<'_>) -> Result<()> {
    let n = out.numel();
    let strides: Vec<Vec<usize>> = [c, a, b].iter().map(|v| broadcast_strides(v.shape, out.shape)).collect();
    let (shape, s) = coalesce(out.shape, &[&strides[0], &strides[1], &strides[2]]);
    let args = [
        c.arg(),
        a.arg(),
        b.arg(),
        out.arg(),
        Arg::U64(n as u64),
        dims(dev, &shape, &s[0])?,
        dims(dev, &shape, &s[1])?,
        dims(dev, &shape, &s[2])?,
    ];
    dev.launch_1d(&INDEX, &format!("where_{}", elem_suffix(out.dtype.size())), n, &args)
}

/// `arange_T(T* y, u64 n, double start, double step)`.
pub(crate) fn arange(dev: &Device, start: f64, step: f64, out: View<'_>) -> Result<()> {
    let n = out.numel();
    let name = num_fname(dev, "arange", out.dtype)?;
    dev.launch_1d(&INDEX, &name, n, &[out.arg(), Arg::U64(n as u64), Arg::F64(start), Arg::F64(step)])
}

/// `index_select_N(const E* x, const i64* idx, E* y, u64 outer, u64 count, u64 dim, u64 inner, u64*
/// flag, u64 node)`: raw elements; a bad index is reported at the next synchronisation.
pub(crate) fn index_select(
    dev: &Device,
    at: Origin,
    x: View<'_>,
    idx: View<'_>,
    axis: usize,
    out: View<'_>,
) -> Result<()> {
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let (dim, count) = (x.shape[axis], idx.numel());
    let args = [
        x.arg(),
        idx.arg(),
        out.arg(),
        Arg::U64(outer as u64),
        Arg::U64(count as u64),
        Arg::U64(dim as u64),
        Arg::U64(inner as u64),
        Arg::U64(dev.flag),
        at.arg(),
    ];
    dev.launch_1d(&INDEX, &format!("index_select_{}", elem_suffix(x.dtype.size())), outer * count * inner, &args)
}

/// `gather_N(const E* x, const i64* idx, E* y, u64 outer, u64 count, u64 dim, u64 inner, u64* flag,
/// u64 node)`: raw elements; a bad index is reported at the next synchronisation.
pub(crate) fn gather(dev: &Device, at: Origin, x: View<'_>, idx: View<'_>, axis: usize, out: View<'_>) -> Result<()> {
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let (dim, count) = (x.shape[axis], idx.shape[axis]);
    let args = [
        x.arg(),
        idx.arg(),
        out.arg(),
        Arg::U64(outer as u64),
        Arg::U64(count as u64),
        Arg::U64(dim as u64),
        Arg::U64(inner as u64),
        Arg::U64(dev.flag),
        at.arg(),
    ];
    dev.launch_1d(&INDEX, &format!("gather_{}", elem_suffix(x.dtype.size())), outer * count * inner, &args)
}

/// `gather_grad_T(const i64* idx, const T* g, T* dx, u64 outer, u64 count, u64 dim, u64 inner)`.
pub(crate) fn gather_grad(dev: &Device, idx: View<'_>, g: View<'_>, axis: usize, out: View<'_>) -> Result<()> {
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product();
    let (dim, count) = (out.shape[axis], idx.shape[axis]);
    let args = [
        idx.arg(),
        g.arg(),
        out.arg(),
        Arg::U64(outer as u64),
        Arg::U64(count as u64),
        Arg::U64(dim as u64),
        Arg::U64(inner as u64),
    ];
    dev.launch_1d(&INDEX, &fname(dev, "gather_grad", out.dtype)?, outer * dim * inner, &args)
}

/// `index_select_grad_T(const i64* idx, const T* g, T* dx, u64 outer, u64 count, u64 dim, u64
/// inner)`, in the compute dtype (the backend promotes narrower gradients through scratch).
pub(crate) fn index_select_grad(dev: &Device, idx: View<'_>, g: View<'_>, axis: usize, out: View<'_>) -> Result<()> {
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product();
    let (dim, count) = (out.shape[axis], idx.numel());
    debug_assert!(compute_dtype(out.dtype) == out.dtype || out.dtype == g.dtype);
    let args = [
        idx.arg(),
        g.arg(),
        out.arg(),
        Arg::U64(outer as u64),
        Arg::U64(count as u64),
        Arg::U64(dim as u64),
        Arg::U64(inner as u64),
    ];
    dev.launch_1d(&INDEX, &fname(dev, "index_select_grad", out.dtype)?, outer * dim * inner, &args)
}
