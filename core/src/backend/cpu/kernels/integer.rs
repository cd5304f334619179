//! Integer and boolean elementwise kernels: i64 arithmetic (wrapping, like PyTorch's; division
//! floors, remainders take the divisor's sign, like Python's) and `bool` logic.

use super::strided::broadcast_map;
use super::{finish_raw, node_err, Elem, KernelCall};
use crate::dtype::DType;
use crate::error::Result;
use crate::host::HostTensor;
use crate::op::{BinaryOp, LogicOp};

/// An integer element: i64 or i32, with the arithmetic PyTorch gives them (wrapping).
pub(super) trait Int: Elem + Ord {
    fn wrapping_add(self, other: Self) -> Self;
    fn wrapping_sub(self, other: Self) -> Self;
    fn wrapping_mul(self, other: Self) -> Self;
    /// `a ⌊/⌋ b`: the quotient rounded toward negative infinity (`MIN ⌊/⌋ -1` wraps to `MIN`);
    /// `None` for a zero divisor.
    fn floor_div(self, b: Self) -> Option<Self>;
    /// `a mod b` with the sign of `b` (`a - b · (a ⌊/⌋ b)`); `None` for a zero divisor.
    fn floor_rem(self, b: Self) -> Option<Self>;
}

macro_rules! impl_int {
    ($t:ty) => {
        impl Int for $t {
            fn wrapping_add(self, other: Self) -> Self {
                <$t>::wrapping_add(self, other)
            }
            fn wrapping_sub(self, other: Self) -> Self {
                <$t>::wrapping_sub(self, other)
            }
            fn wrapping_mul(self, other: Self) -> Self {
                <$t>::wrapping_mul(self, other)
            }
            fn floor_div(self, b: Self) -> Option<Self> {
                let a = self;
                let q = a.checked_div(b).or_else(|| (b == -1).then(|| a.wrapping_neg()))?;
                Some(if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) { q - 1 } else { q })
            }
            fn floor_rem(self, b: Self) -> Option<Self> {
                if b == 0 {
                    return None;
                }
                let r = self.wrapping_rem(b);
                Some(if r != 0 && ((r < 0) != (b < 0)) { r + b } else { r })
            }
        }
    };
}

impl_int!(i64);
impl_int!(i32);

/// The integer elements of `t` (the shape rule has checked the dtype).
fn ints<'a, I: Int>(call: &KernelCall<'_>, t: &'a HostTensor) -> Result<&'a [I]> {
    I::slice(t.data()).ok_or_else(|| node_err(call, format!("unexpected dtype {}", t.dtype())))
}

/// `add sub mul div rem maximum minimum` on i64 or i32, broadcasting. A zero divisor is an error
/// naming the first output element it meets.
pub(super) fn binary(call: &KernelCall<'_>, op: BinaryOp, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
    fn run<I: Int>(call: &KernelCall<'_>, op: BinaryOp, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
        let (x, y) = ((a.shape(), ints::<I>(call, a)?), (b.shape(), ints::<I>(call, b)?));
        let map = |f: fn(I, I) -> I| broadcast_map(call.out_shape, x, y, f);
        let divide = |f: fn(I, I) -> Option<I>| {
            let out = broadcast_map(call.out_shape, x, y, f);
            match out.iter().position(Option::is_none) {
                Some(at) => Err(node_err(call, format!("integer division by zero at output element {at}"))),
                None => Ok(out.into_iter().flatten().collect()),
            }
        };
        let out = match op {
            BinaryOp::Add => map(I::wrapping_add),
            BinaryOp::Sub => map(I::wrapping_sub),
            BinaryOp::Mul => map(I::wrapping_mul),
            BinaryOp::Maximum => map(Ord::max),
            BinaryOp::Minimum => map(Ord::min),
            BinaryOp::Div => divide(I::floor_div)?,
            BinaryOp::Rem => divide(I::floor_rem)?,
            BinaryOp::MaximumMask => return Err(node_err(call, "maximum_mask is a float gradient mask, not integer")),
        };
        finish_raw(call, out)
    }
    match a.dtype() {
        DType::I32 => run::<i32>(call, op, a, b),
        _ => run::<i64>(call, op, a, b),
    }
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
    let (x, y) = ((a.shape(), ints::<i64>(call, a)?), (b.shape(), ints::<i64>(call, b)?));
    finish_raw(call, broadcast_map(call.out_shape, x, y, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Floor division and remainder against Python's definition, in 128-bit arithmetic: `r` has
    /// the divisor's sign and `a = b·q + r` exactly (the quotient wraps only for `i64::MIN / -1`).
    #[test]
    fn floor_division_matches_its_definition() {
        let (lo, hi) = (i64::from(i32::MIN), i64::from(i32::MAX));
        let edge =
            [i64::MIN, i64::MIN + 1, lo, lo + 1, -7, -3, -2, -1, 0, 1, 2, 3, 7, hi - 1, hi, i64::MAX - 1, i64::MAX];
        for &a in &edge {
            for &b in &edge {
                if b == 0 {
                    assert_eq!((a.floor_div(b), a.floor_rem(b)), (None, None));
                    continue;
                }
                let (wa, wb) = (i128::from(a), i128::from(b));
                let r = ((wa % wb) + wb) % wb;
                let q = (wa - r) / wb;
                assert_eq!(a.floor_rem(b), Some(r as i64), "{a} mod {b}");
                assert_eq!(a.floor_div(b), Some(q as i64), "{a} div {b}");
                // The same in i32, on the values that fit.
                if let (Ok(a), Ok(b)) = (i32::try_from(a), i32::try_from(b)) {
                    assert_eq!(a.floor_rem(b), Some(r as i32), "{a} mod {b} in i32");
                    assert_eq!(a.floor_div(b), Some(q as i32), "{a} div {b} in i32");
                }
            }
        }
    }
}
