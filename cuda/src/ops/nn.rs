//! Row-wise ops over the last axis and the embedding (`nn.cu`): one block per row.

use super::{fname, Scratch, View};
use crate::device::{Device, Origin};
use crate::kernels::{compute_dtype, elem_suffix, Arg, NN};
use remat_core::Result;

/// Rows and row length of a `[.., d]` tensor.
fn rows(shape: &[usize]) -> (usize, usize) {
    let d = shape.last().copied().unwrap_or(1);
    let n: usize = shape.iter().product();
    (n.checked_div(d).unwrap_or(0), d)
}

/// A block per row: threads for ~4 elements each, 32 to 1024; grid-stride over rows.
fn row_launch(dev: &Device, name: &str, rows: usize, d: usize, args: &[Arg]) -> Result<()> {
    if rows == 0 {
        return Ok(());
    }
    let threads = (d.div_ceil(4).div_ceil(32) * 32).clamp(32, 1024) as u32;
    let grid = rows.min(1 << 20) as u32;
    dev.launch(&NN, name, (grid, 1, 1), (threads, 1, 1), args)
}

/// `softmax_T(const T* x, T* y, u64 rows, u64 d, int log)`.
pub(crate) fn softmax(dev: &Device, x: View<'_>, out: View<'_>, log: bool) -> Result<()> {
    let (r, d) = rows(x.shape);
    let args = [x.arg(), out.arg(), Arg::U64(r as u64), Arg::U64(d as u64), Arg::I32(log as i32)];
    row_launch(dev, &fname(dev, "softmax", x.dtype)?, r, d, &args)
}

/// `softmax_grad_T(const T* y, const T* g, T* dx, u64 rows, u64 d, int log)`.
pub(crate) fn softmax_grad(dev: &Device, y: View<'_>, g: View<'_>, out: View<'_>, log: bool) -> Result<()> {
    let (r, d) = rows(y.shape);
    let args = [y.arg(), g.arg(), out.arg(), Arg::U64(r as u64), Arg::U64(d as u64), Arg::I32(log as i32)];
    row_launch(dev, &fname(dev, "softmax_grad", out.dtype)?, r, d, &args)
}

/// `layer_norm_T(const T* x, T* y, u64 rows, u64 d, double eps)`.
pub(crate) fn layer_norm(dev: &Device, x: View<'_>, out: View<'_>, eps: f64) -> Result<()> {
    let (r, d) = rows(x.shape);
    let args = [x.arg(), out.arg(), Arg::U64(r as u64), Arg::U64(d as u64), Arg::F64(eps)];
    row_launch(dev, &fname(dev, "layer_norm", x.dtype)?, r, d, &args)
}

/// `layer_norm_grad_T(const T* x, const T* g, T* dx, u64 rows, u64 d, double eps)`.
pub(crate) fn layer_norm_grad(dev: &Device, x: View<'_>, g: View<'_>, out: View<'_>, eps: f64) -> Result<()> {
    let (r, d) = rows(x.shape);
    let args = [x.arg(), g.arg(), out.arg(), Arg::U64(r as u64), Arg::U64(d as u64), Arg::F64(eps)];
    row_launch(dev, &fname(dev, "layer_norm_grad", out.dtype)?, r, d, &args)
}

/// `rms_norm_T(const T* x, T* y, u64 rows, u64 d, double eps)`.
pub(crate) fn rms_norm(dev: &Device, x: View<'_>, out: View<'_>, eps: f64) -> Result<()> {
    let (r, d) = rows(x.shape);
    let args = [x.arg(), out.arg(), Arg::U64(r as u64), Arg::U64(d as u64), Arg::F64(eps)];
    row_launch(dev, &fname(dev, "rms_norm", x.dtype)?, r, d, &args)
}

/// `rms_norm_grad_T(const T* x, const T* g, T* dx, u64 rows, u64 d, double eps)`.
pub(crate) fn rms_norm_grad(dev: &Device, x: View<'_>, g: View<'_>, out: View<'_>, eps: f64) -> Result<()> {
    let (r, d) = rows(x.shape);
    let args = [x.arg(), g.arg(), out.arg(), Arg::U64(r as u64), Arg::U64(d as u64), Arg::F64(eps)];
    row_launch(dev, &fname(dev, "rms_norm_grad", out.dtype)?, r, d, &args)
}

/// `cross_entropy_rows_T(const T* logits, const i64* targets, C* partial, u64 rows, u64 c, u64*
/// flag, u64 node)` then `mean_finish_T(const C* partial, T* out, u64 rows)`.
pub(crate) fn cross_entropy(
    dev: &Device,
    at: Origin,
    logits: View<'_>,
    targets: View<'_>,
    out: View<'_>,
) -> Result<()> {
    // One row per target: with zero classes there are no logits but every target is out of
    // range, which the kernel reports (as the CPU does).
    let (r, c) = (targets.numel(), logits.shape.last().copied().unwrap_or(0));
    let partial = Scratch::new(dev, r.max(1) * compute_dtype(logits.dtype).size())?;
    let args = [
        logits.arg(),
        targets.arg(),
        Arg::U64(partial.ptr),
        Arg::U64(r as u64),
        Arg::U64(c as u64),
        Arg::U64(dev.flag),
        at.arg(),
    ];
    row_launch(dev, &fname(dev, "cross_entropy_rows", logits.dtype)?, r, c, &args)?;
    let args = [Arg::U64(partial.ptr), out.arg(), Arg::U64(r as u64)];
    dev.launch(&NN, &fname(dev, "mean_finish", logits.dtype)?, (1, 1, 1), (1024, 1, 1), &args)
}

/// `cross_entropy_grad_T(const T* logits, const i64* targets, const T* g, T* dx, u64 rows, u64 c,
/// u64* flag, u64 node)`.
pub(crate) fn cross_entropy_grad(
    dev: &Device,
    at: Origin,
    logits: View<'_>,
    targets: View<'_>,
    g: View<'_>,
    out: View<'_>,
) -> Result<()> {
    let (r, c) = (targets.numel(), logits.shape.last().copied().unwrap_or(0));
    let args = [
        logits.arg(),
        targets.arg(),
        g.arg(),
        out.arg(),
        Arg::U64(r as u64),
        Arg::U64(c as u64),
        Arg::U64(dev.flag),
        at.arg(),
    ];
    row_launch(dev, &fname(dev, "cross_entropy_grad", out.dtype)?, r, c, &args)
}

/// `embedding_N(const E* table, const i64* ids, E* out, u64 n_ids, u64 d, u64 rows, u64* flag,
/// u64 node)`: raw elements of N bytes.
pub(crate) fn embedding(dev: &Device, at: Origin, table: View<'_>, ids: View<'_>, out: View<'_>) -> Result<()> {
    let (rows, d) = (table.shape[0], table.shape[1]);
    let n_ids = ids.numel();
    let name = format!("embedding_{}", elem_suffix(table.dtype.size()));
    let args = [
        table.arg(),
        ids.arg(),
        out.arg(),
        Arg::U64(n_ids as u64),
        Arg::U64(d as u64),
        Arg::U64(rows as u64),
        Arg::U64(dev.flag),
        at.arg(),
    ];
    dev.launch_1d(&NN, &name, n_ids * d, &args)
}

/// Output rows each block of `embedding_grad` owns.
const ROWS_PER_BLOCK: usize = 16;

/// `embedding_grad_T(const i64* ids, const T* g, C* acc, u64 n_ids, u64 d, u64 rows, u64
/// per_block, u64* flag, u64 node)` into `out` directly when it is f32/f64, else into f32
/// scratch cast once to `out`'s dtype (the CPU also accumulates in f32 and rounds once).
pub(crate) fn embedding_grad(dev: &Device, at: Origin, ids: View<'_>, g: View<'_>, out: View<'_>) -> Result<()> {
    let (rows, d) = (out.shape[0], out.shape[1]);
    let c = compute_dtype(out.dtype);
    let scratch = if c == out.dtype { None } else { Some(Scratch::new(dev, rows * d * c.size())?) };
    let acc = scratch.as_ref().map_or(out.ptr, |s| s.ptr);
    let blocks = rows.div_ceil(ROWS_PER_BLOCK).min(u32::MAX as usize) as u32;
    let threads = (d.div_ceil(32) * 32).clamp(32, 256) as u32;
    let args = [
        ids.arg(),
        g.arg(),
        Arg::U64(acc),
        Arg::U64(ids.numel() as u64),
        Arg::U64(d as u64),
        Arg::U64(rows as u64),
        Arg::U64(ROWS_PER_BLOCK as u64),
        Arg::U64(dev.flag),
        at.arg(),
    ];
    dev.launch(&NN, &fname(dev, "embedding_grad", g.dtype)?, (blocks, 1, 1), (threads, 1, 1), &args)?;
    if let Some(s) = &scratch {
        super::elementwise::cast(dev, View { ptr: s.ptr, shape: out.shape, dtype: c }, out)?;
    }
    Ok(())
}
