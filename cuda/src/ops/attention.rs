//! Fused scaled dot-product attention and its gradient (`attention.cu`): a warp per row.

use super::{fname, Scratch, View};
use crate::device::Device;
use crate::kernels::{compute_dtype, Arg, ATTENTION};
use remat_core::{AttnDims, AttnLayout, Result};

/// Threads per block (8 warps, one row each).
const THREADS: u32 = 256;
/// Most head dims a warp keeps in registers (`ATT_MAXD`).
const MAXD: usize = 256;

/// `(attentions, heads, tq, tk, d, dv)` of q, k, v in `layout`: `outer · heads` attentions,
/// `heads` interleaved in each token row (1 in head-major layout).
fn shapes(layout: AttnLayout, q: &View<'_>, k: &View<'_>, v: &View<'_>) -> (usize, usize, usize, usize, usize, usize) {
    let AttnDims { outer, heads, tq, tk, d, dv } = layout.dims(q.shape, k.shape, v.shape);
    (outer * heads, heads, tq, tk, d, dv)
}

fn warp_grid(rows: usize) -> (u32, u32, u32) {
    let per_block = (THREADS / 32) as usize;
    (rows.div_ceil(per_block).clamp(1, 1 << 20) as u32, 1, 1)
}

/// `sdpa_fwd_T(q, k, v, y, u64 batch, u64 heads, u64 tq, u64 tk, u64 d, u64 dv, int causal,
/// double scale)`.
pub(crate) fn sdpa(
    dev: &Device,
    (q, k, v): (View<'_>, View<'_>, View<'_>),
    (causal, scale, layout): (bool, f64, AttnLayout),
    out: View<'_>,
) -> Result<()> {
    let (batch, heads, tq, tk, d, dv) = shapes(layout, &q, &k, &v);
    if d > MAXD || dv > MAXD {
        return Err(dev.err(format!("sdpa supports head dims up to {MAXD}, got {d} and {dv}")));
    }
    if batch * tq == 0 {
        return Ok(());
    }
    let args = [
        q.arg(),
        k.arg(),
        v.arg(),
        out.arg(),
        Arg::U64(batch as u64),
        Arg::U64(heads as u64),
        Arg::U64(tq as u64),
        Arg::U64(tk as u64),
        Arg::U64(d as u64),
        Arg::U64(dv as u64),
        Arg::I32(causal as i32),
        Arg::F64(scale),
    ];
    dev.launch(&ATTENTION, &fname(dev, "sdpa_fwd", q.dtype)?, warp_grid(batch * tq), (THREADS, 1, 1), &args)
}

/// `sdpa_delta_T(o, g, C* delta, u64 rows, u64 heads, u64 tq, u64 dv)`, then `sdpa_dq_T` and
/// `sdpa_dkv_T(q, k, v, o, g, const C* delta, out, u64 batch, u64 heads, u64 tq, u64 tk, u64 d,
/// u64 dv, int causal, double scale)`.
pub(crate) fn sdpa_grad(
    dev: &Device,
    x: &[View<'_>],
    (causal, scale, layout): (bool, f64, AttnLayout),
    out: View<'_>,
) -> Result<()> {
    let (q, k, v, o, g) = (x[0], x[1], x[2], x[3], x[4]);
    let (batch, heads, tq, tk, d, dv) = shapes(layout, &q, &k, &v);
    if d > MAXD || dv > MAXD {
        return Err(dev.err(format!("sdpa supports head dims up to {MAXD}, got {d} and {dv}")));
    }
    if out.numel() == 0 {
        return Ok(());
    }
    let delta = Scratch::new(dev, (batch * tq).max(1) * compute_dtype(q.dtype).size())?;
    let args = [
        o.arg(),
        g.arg(),
        Arg::U64(delta.ptr),
        Arg::U64((batch * tq) as u64),
        Arg::U64(heads as u64),
        Arg::U64(tq as u64),
        Arg::U64(dv as u64),
    ];
    dev.launch(&ATTENTION, &fname(dev, "sdpa_delta", q.dtype)?, warp_grid(batch * tq), (THREADS, 1, 1), &args)?;
    let args = [
        q.arg(),
        k.arg(),
        v.arg(),
        o.arg(),
        g.arg(),
        Arg::U64(delta.ptr),
        out.arg(),
        Arg::U64(batch as u64),
        Arg::U64(heads as u64),
        Arg::U64(tq as u64),
        Arg::U64(tk as u64),
        Arg::U64(d as u64),
        Arg::U64(dv as u64),
        Arg::I32(causal as i32),
        Arg::F64(scale),
    ];
    dev.launch(&ATTENTION, &fname(dev, "sdpa_dq", q.dtype)?, warp_grid(batch * tq), (THREADS, 1, 1), &args)?;
    dev.launch(&ATTENTION, &fname(dev, "sdpa_dkv", q.dtype)?, warp_grid(batch * tk), (THREADS, 1, 1), &args)
}
