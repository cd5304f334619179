//! i64 and i32 arithmetic and bool logic (`integer.cu`), broadcasting like the float binary kernels.

use super::{coalesce, dims, View};
use crate::device::{Device, Origin};
use crate::kernels::{self, Arg, INTEGER};
use remat_core::{broadcast_strides, BinaryOp, OpKind, Result};

/// `a` and `b` viewed over the (coalesced) output shape: the kernels' `Dims da, Dims db`.
fn operands(dev: &Device, a: View<'_>, b: View<'_>, out: View<'_>) -> Result<[Arg; 2]> {
    let (sa, sb) = (broadcast_strides(a.shape, out.shape), broadcast_strides(b.shape, out.shape));
    let (shape, s) = coalesce(out.shape, &[&sa, &sb]);
    Ok([dims(dev, &shape, &s[0])?, dims(dev, &shape, &s[1])?])
}

/// `binary_T(const T* a, const T* b, T* y, u64 n, int op, Dims da, Dims db, u64* flag, u64
/// node)` for `T` i64 or i32: a zero divisor of `div` or `rem` is reported at the next
/// synchronisation.
pub(crate) fn binary(dev: &Device, at: Origin, op: BinaryOp, a: View<'_>, b: View<'_>, out: View<'_>) -> Result<()> {
    let n = out.numel();
    let [da, db] = operands(dev, a, b, out)?;
    let args = [
        a.arg(),
        b.arg(),
        out.arg(),
        Arg::U64(n as u64),
        Arg::I32(kernels::binary_code(op)),
        da,
        db,
        Arg::U64(dev.flag),
        at.arg(),
    ];
    let suffix =
        kernels::int_suffix(out.dtype).ok_or_else(|| dev.err(format!("no integer kernel for {}", out.dtype)))?;
    dev.launch_1d(&INTEGER, &format!("binary_{suffix}"), n, &args)
}

/// `logic(const u8* a, const u8* b, u8* y, u64 n, int op, Dims da, Dims db)` for the logic op
/// of kind `kind`.
pub(crate) fn logic(dev: &Device, kind: OpKind, a: View<'_>, b: View<'_>, out: View<'_>) -> Result<()> {
    let code = kernels::logic_code(kind).ok_or_else(|| dev.err(format!("{kind} is not a logic op")))?;
    let n = out.numel();
    let [da, db] = operands(dev, a, b, out)?;
    let args = [a.arg(), b.arg(), out.arg(), Arg::U64(n as u64), Arg::I32(code), da, db];
    dev.launch_1d(&INTEGER, "logic", n, &args)
}

/// `logical_not(const u8* x, u8* y, u64 n)`.
pub(crate) fn logical_not(dev: &Device, x: View<'_>, out: View<'_>) -> Result<()> {
    let n = out.numel();
    dev.launch_1d(&INTEGER, "logical_not", n, &[x.arg(), out.arg(), Arg::U64(n as u64)])
}
