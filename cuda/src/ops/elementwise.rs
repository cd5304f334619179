//! Unary and binary ops, pointwise gradients, dropout, casts, fills (`elementwise.cu`, `cast.cu`).

use super::{coalesce, dims, fname, View};
use crate::device::Device;
use crate::kernels::{self, dtype_code, elem_suffix, Arg, CAST, ELEMENTWISE};
use remat_core::broadcast_strides;
use remat_core::{drop_threshold, stream_seed, BinaryOp, DType, HostTensor, Result, UnaryGradOp, UnaryOp};

/// A launch of the unary kernel: the op's `U_*` code and its two constants (clamp's bounds,
/// `pow`'s exponent, else unused).
pub(crate) struct UnaryCode {
    code: i32,
    lo: f64,
    hi: f64,
}

impl UnaryCode {
    /// A member of the [`UnaryOp`] family.
    pub(crate) fn op(op: UnaryOp) -> UnaryCode {
        UnaryCode { code: kernels::unary_code(op), lo: 0.0, hi: 0.0 }
    }

    /// `clamp(min, max)`.
    pub(crate) fn clamp(min: f64, max: f64) -> UnaryCode {
        UnaryCode { code: kernels::U_CLAMP, lo: min, hi: max }
    }

    /// `pow(exponent)`.
    pub(crate) fn pow(exponent: f64) -> UnaryCode {
        UnaryCode { code: kernels::U_POW, lo: exponent, hi: 0.0 }
    }
}

/// `unary_T(const T* x, T* y, u64 n, int op, double lo, double hi)`.
pub(crate) fn unary(dev: &Device, op: UnaryCode, x: View<'_>, out: View<'_>) -> Result<()> {
    let n = out.numel();
    let args = [x.arg(), out.arg(), Arg::U64(n as u64), Arg::I32(op.code), Arg::F64(op.lo), Arg::F64(op.hi)];
    dev.launch_1d(&ELEMENTWISE, &fname(dev, "unary", out.dtype)?, n.div_ceil(4), &args)
}

/// `binary_T(a, b, y, u64 n, int op)` for equal shapes, else
/// `binary_bcast_T(a, b, y, u64 n, int op, Dims da, Dims db)`.
pub(crate) fn binary(dev: &Device, op: BinaryOp, a: View<'_>, b: View<'_>, out: View<'_>) -> Result<()> {
    let code = kernels::binary_code(op);
    let n = out.numel();
    if a.shape == b.shape {
        let args = [a.arg(), b.arg(), out.arg(), Arg::U64(n as u64), Arg::I32(code)];
        return dev.launch_1d(&ELEMENTWISE, &fname(dev, "binary", out.dtype)?, n.div_ceil(4), &args);
    }
    let (sa, sb) = (broadcast_strides(a.shape, out.shape), broadcast_strides(b.shape, out.shape));
    let (shape, s) = coalesce(out.shape, &[&sa, &sb]);
    let args = [
        a.arg(),
        b.arg(),
        out.arg(),
        Arg::U64(n as u64),
        Arg::I32(code),
        dims(dev, &shape, &s[0])?,
        dims(dev, &shape, &s[1])?,
    ];
    dev.launch_1d(&ELEMENTWISE, &fname(dev, "binary_bcast", out.dtype)?, n, &args)
}

/// What the pointwise-gradient kernel computes.
pub(crate) enum PointwiseGrad {
    /// A member of the [`UnaryGradOp`] family.
    Op(UnaryGradOp),
    /// `clamp_grad` with clamp's bounds.
    Clamp { min: f64, max: f64 },
}

/// `pointwise_grad_T(const T* x, const T* g, T* y, u64 n, int op, double lo, double hi)`.
pub(crate) fn pointwise_grad(dev: &Device, op: PointwiseGrad, x: View<'_>, g: View<'_>, out: View<'_>) -> Result<()> {
    let (code, lo, hi) = match op {
        PointwiseGrad::Op(k) => (kernels::grad_code(k), 0.0, 0.0),
        PointwiseGrad::Clamp { min, max } => (kernels::G_CLAMP_GRAD, min, max),
    };
    let n = out.numel();
    let args = [x.arg(), g.arg(), out.arg(), Arg::U64(n as u64), Arg::I32(code), Arg::F64(lo), Arg::F64(hi)];
    dev.launch_1d(&ELEMENTWISE, &fname(dev, "pointwise_grad", out.dtype)?, n.div_ceil(4), &args)
}

/// `dropout_T(const T* x, T* y, u64 n, u64 seed, u64 key, u64 threshold, double keep)`, with the
/// stream seed and threshold from remat-core's random streams so masks match the CPU bit for bit.
pub(crate) fn dropout(
    dev: &Device,
    x: View<'_>,
    out: View<'_>,
    p: f64,
    seed: u64,
    key: u64,
    run_seed: u64,
) -> Result<()> {
    let n = out.numel();
    let args = [
        x.arg(),
        out.arg(),
        Arg::U64(n as u64),
        Arg::U64(stream_seed(seed, run_seed)),
        Arg::U64(key),
        Arg::U64(drop_threshold(p)),
        Arg::F64(1.0 - p),
    ];
    dev.launch_1d(&ELEMENTWISE, &fname(dev, "dropout", out.dtype)?, n.div_ceil(4), &args)
}

/// `cast(const void* x, int from, void* y, int to, u64 n)`; same dtype is a copy.
pub(crate) fn cast(dev: &Device, x: View<'_>, out: View<'_>) -> Result<()> {
    if x.dtype == out.dtype {
        return copy(dev, x.ptr, out.ptr, out.bytes());
    }
    let n = out.numel();
    let args = [x.arg(), Arg::I32(dtype_code(x.dtype)), out.arg(), Arg::I32(dtype_code(out.dtype)), Arg::U64(n as u64)];
    dev.launch_1d(&CAST, "cast", n, &args)
}

/// Device-to-device copy of `bytes`, stream-ordered.
pub(crate) fn copy(dev: &Device, src: u64, dst: u64, bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: both ranges are `bytes` long inside live allocations of this stream.
    unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, dev.stream.cu_stream()) }
        .map_err(|e| dev.fail(format!("device copy of {bytes} bytes"), e))
}

/// `value` rounded to `dtype` (the CPU's `HostTensor::full`), as the raw bits of one element:
/// the `E v` argument of the raw-element kernels (`fill_N`, `one_hot_N`).
pub(crate) fn pattern(dev: &Device, value: f64, dtype: DType) -> Result<Arg> {
    let one = HostTensor::full(vec![1], value, dtype)?;
    let bytes = crate::transfer::host_bytes(&one);
    Ok(match bytes.len() {
        1 => Arg::U8(bytes[0]),
        2 => Arg::U16(u16::from_ne_bytes([bytes[0], bytes[1]])),
        4 => Arg::U32(u32::from_ne_bytes(bytes[..4].try_into().map_err(|_| dev.err("fill pattern"))?)),
        _ => Arg::U64(u64::from_ne_bytes(bytes[..8].try_into().map_err(|_| dev.err("fill pattern"))?)),
    })
}

/// Every element of `out` = `value` rounded to its dtype (the CPU's `HostTensor::full`).
/// `fill_N(E* y, u64 n, E v)` with the element's raw bits.
pub(crate) fn constant(dev: &Device, value: f64, out: View<'_>) -> Result<()> {
    let n = out.numel();
    let name = format!("fill_{}", elem_suffix(out.dtype.size()));
    dev.launch_1d(&ELEMENTWISE, &name, n, &[out.arg(), Arg::U64(n as u64), pattern(dev, value, out.dtype)?])
}

/// `out` = a host tensor's bytes (a `constant_data` op computed rather than held resident).
pub(crate) fn upload_into(dev: &Device, value: &HostTensor, out: View<'_>) -> Result<()> {
    let bytes = crate::transfer::host_bytes(value);
    if bytes.len() != out.bytes() {
        return Err(dev.err(format!("constant data of {} bytes for a {}-byte buffer", bytes.len(), out.bytes())));
    }
    if bytes.is_empty() {
        return Ok(());
    }
    // SAFETY: `out` holds exactly `bytes.len()` bytes; the stream is synchronised before `bytes`
    // (borrowed from `value`, which outlives the call) can change.
    unsafe { cudarc::driver::result::memcpy_htod_async(out.ptr, bytes, dev.stream.cu_stream()) }
        .map_err(|e| dev.fail(format!("upload of {} bytes", bytes.len()), e))?;
    dev.stream.synchronize().map_err(|e| dev.fail("upload", e))
}

/// Zeros `out` (stream-ordered memset).
pub(crate) fn zero(dev: &Device, out: View<'_>) -> Result<()> {
    if out.bytes() == 0 {
        return Ok(());
    }
    // SAFETY: `out` is `bytes()` long inside a live allocation of this stream.
    unsafe { cudarc::driver::result::memset_d8_async(out.ptr, 0, out.bytes(), dev.stream.cu_stream()) }
        .map_err(|e| dev.fail("memset", e))
}
