//! Integer and boolean elementwise kernels: i64 arithmetic (wrapping, like PyTorch's; division
//! floors, remainders take the divisor's sign, like Python's) and `bool` logic.

use super::strided::broadcast_map;
use super::{finish_raw, node_err, Elem, KernelCall};
use crate::error::Result;
use crate::host::HostTensor;
use crate::op::{BinaryOp, LogicOp};

/// `a ⌊/⌋ b`: the quotient rounded toward negative infinity (`i64::MIN ⌊/⌋ -1` wraps to
/// `i64::MIN`); `None` for a zero divisor.
pub(crate) fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b).or_else(|| (b == -1).then(|| a.wrapping_neg()))?;
    Some(if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) { q - 1 } else { q })
}

/// `a mod b` with the sign of `b` (`a - b · (a ⌊/⌋ b)`); `None` for a zero divisor.
pub(crate) fn floor_rem(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let r = a.wrapping_rem(b);
    Some(if r != 0 && ((r < 0) != (b < 0)) { r + b } else { r })
}

/// The i64 elements of `t` (the shape rule has checked the dtype).
fn i64s<'a>(call: &KernelCall<'_>, t: &'a HostTensor) -> Result<&'a [i64]> {
    <i64 as Elem>::slice(t.data()).ok_or_else(|| node_err(call, format!("expected i64, got {}", t.dtype())))
}

/// `add sub mul div rem maximum minimum` on i64, broadcasting. A zero divisor is an error naming
/// the first output element it meets.
pub(super) fn binary(call: &KernelCall<'_>, op: BinaryOp, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
    let (x, y) = ((a.shape(), i64s(call, a)?), (b.shape(), i64s(call, b)?));
    let map = |f: fn(i64, i64) -> i64| broadcast_map(call.out_shape, x, y, f);
    let divide = |f: fn(i64, i64) -> Option<i64>| {
        let out = broadcast_map(call.out_shape, x, y, f);
        match out.iter().position(Option::is_none) {
            Some(at) => Err(node_err(call, format!("integer division by zero at output element {at}"))),
            None => Ok(out.into_iter().flatten().collect()),
        }
    };
    let out = match op {
        BinaryOp::Add => map(i64::wrapping_add),
        BinaryOp::Sub => map(i64::wrapping_sub),
        BinaryOp::Mul => map(i64::wrapping_mul),
        BinaryOp::Maximum => map(i64::max),
        BinaryOp::Minimum => map(i64::min),
        BinaryOp::Div => divide(floor_div)?,
        BinaryOp::Rem => divide(floor_rem)?,
        BinaryOp::MaximumMask => return Err(node_err(call, "maximum_mask is a float gradient mask, not i64")),
    };
    finish_raw(call, out)
}

/// The `bool` elements of `t`.
fn bools<'a>(call: &KernelCall<'_>, t: &'a HostTensor) -> Result<&'a [bool]> {
    <bool as Elem>::slice(t.data()).ok_or_else(|| node_err(call, format!("expected bool, got {}", t.dtype())))
}

/// `logical_and or xor`, broadcasting.
pub(super) fn logic(call: &KernelCall<'_>, op: LogicOp, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
    let (x, y) = ((a.shape(), bools(call, a)?), (b.shape(), bools(call, b)?));
    let f: fn(bool, bool) -> bool = match op {
        LogicOp::And => |p, q| p && q,
        LogicOp::Or => |p, q| p || q,
        LogicOp::Xor => |p, q| p != q,
    };
    finish_raw(call, broadcast_map(call.out_shape, x, y, f))
}

/// `!x`.
pub(super) fn logical_not(call: &KernelCall<'_>, x: &HostTensor) -> Result<HostTensor> {
    finish_raw(call, bools(call, x)?.iter().map(|&v| !v).collect())
}

/// Exact comparison of i64 values (through f64 two values above 2⁵³ apart could compare equal).
pub(super) fn compare(
    call: &KernelCall<'_>,
    f: fn(i64, i64) -> bool,
    a: &HostTensor,
    b: &HostTensor,
) -> Result<HostTensor> {
    let (x, y) = ((a.shape(), i64s(call, a)?), (b.shape(), i64s(call, b)?));
    finish_raw(call, broadcast_map(call.out_shape, x, y, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Floor division and remainder against Python's definition, in 128-bit arithmetic: `r` has
    /// the divisor's sign and `a = b·q + r` exactly (the quotient wraps only for `i64::MIN / -1`).
    #[test]
    fn floor_division_matches_its_definition() {
        let edge = [i64::MIN, i64::MIN + 1, -7, -3, -2, -1, 0, 1, 2, 3, 7, i64::MAX - 1, i64::MAX];
        for &a in &edge {
            for &b in &edge {
                if b == 0 {
                    assert_eq!((floor_div(a, b), floor_rem(a, b)), (None, None));
                    continue;
                }
                let (wa, wb) = (i128::from(a), i128::from(b));
                let r = ((wa % wb) + wb) % wb;
                let q = (wa - r) / wb;
                assert_eq!(floor_rem(a, b), Some(r as i64), "{a} mod {b}");
                assert_eq!(floor_div(a, b), Some(q as i64), "{a} div {b}");
            }
        }
    }
}
