//! Casts: every dtype to every dtype, one rounding at most.

use super::{node_err, KernelCall};
use crate::dtype::DType;
use crate::error::Result;
use crate::host::{HostData, HostTensor};

/// Any dtype to any dtype ([`DType`]'s rules): float to float through f64 when either side is
/// f64, else f32, each value rounded once to nearest even (saturating for fp8); an integer to
/// float rounded once; float to an integer truncated toward zero, saturating at its range, NaN to
/// 0; i64 to i32 saturating; to bool, nonzero (NaN included) is true; bool to a number, 0 or 1.
pub(super) fn cast(call: &KernelCall<'_>, x: &HostTensor, dtype: DType) -> Result<HostTensor> {
    let data = match (x.data(), dtype) {
        (d, _) if d.dtype() == dtype => d.clone(),
        (HostData::Bool(v), DType::I64) => HostData::I64(v.iter().map(|&b| i64::from(b)).collect()),
        (HostData::Bool(v), DType::I32) => HostData::I32(v.iter().map(|&b| i32::from(b)).collect()),
        (HostData::Bool(v), _) => {
            HostData::from_f64(&v.iter().map(|&b| f64::from(u8::from(b))).collect::<Vec<_>>(), dtype)
        }
        (HostData::I64(v), DType::Bool) => HostData::Bool(v.iter().map(|&i| i != 0).collect()),
        // Saturating, as from a float (PyTorch wraps instead).
        (HostData::I64(v), DType::I32) => {
            HostData::I32(v.iter().map(|&i| i.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32).collect())
        }
        (HostData::I32(v), DType::I64) => HostData::I64(v.iter().map(|&i| i64::from(i)).collect()),
        (HostData::I32(v), DType::Bool) => HostData::Bool(v.iter().map(|&i| i != 0).collect()),
        (HostData::I32(v), DType::F32) => HostData::F32(v.iter().map(|&i| i as f32).collect()),
        (HostData::I32(v), _) => HostData::from_f64(&v.iter().map(|&i| f64::from(i)).collect::<Vec<_>>(), dtype),
        // `as f32` rounds an i64 once; through f64 it could round twice.
        (HostData::I64(v), DType::F32) => HostData::F32(v.iter().map(|&i| i as f32).collect()),
        (HostData::I64(v), _) => HostData::from_f64(&v.iter().map(|&i| i as f64).collect::<Vec<_>>(), dtype),
        // Every float widens to f64 exactly; `as i64` truncates, saturates and maps NaN to 0.
        (_, DType::I64) => HostData::I64(x.to_f64_vec().into_iter().map(|v| v as i64).collect()),
        (_, DType::I32) => HostData::I32(x.to_f64_vec().into_iter().map(|v| v as i32).collect()),
        (_, DType::Bool) => HostData::Bool(x.to_f64_vec().into_iter().map(|v| v != 0.0).collect()),
        // Same shape; rounds once, through f64 when either side is f64.
        _ => return Ok(x.to_dtype(dtype)),
    };
    HostTensor::new(call.out_shape.to_vec(), data).map_err(|e| node_err(call, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::dtype::DType;
    use crate::host::{HostData, HostTensor};
    use crate::op::Op;
    use half::bf16;

    /// Every dtype casts to every other, by the rules of `cast`'s docs, checked against values
    /// written out by hand.
    #[test]
    fn casts_to_integers_and_bools_truncate_saturate_and_test_nonzero() {
        let x = HostTensor::f64(
            [10],
            vec![-1.7, 1.7, -0.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e30, -0.0, 9007199254740993.0, 3.0],
        )
        .unwrap();
        let ints = run(&Op::Cast { dtype: DType::I64 }, &[&x]).unwrap();
        assert_eq!(
            ints.data(),
            &HostData::I64(vec![-1, 1, 0, 0, i64::MAX, i64::MIN, i64::MAX, 0, 9007199254740992, 3])
        );
        let from_f32 = run(&Op::Cast { dtype: DType::I64 }, &[&run(&Op::Cast { dtype: DType::F32 }, &[&x]).unwrap()]);
        assert_eq!(
            from_f32.unwrap().data(),
            &HostData::I64(vec![-1, 1, 0, 0, i64::MAX, i64::MIN, i64::MAX, 0, 9007199254740992, 3])
        );
        let bools = run(&Op::Cast { dtype: DType::Bool }, &[&x]).unwrap();
        assert_eq!(bools.data(), &HostData::Bool(vec![true, true, true, true, true, true, true, false, true, true]));
        let from_bf16 =
            run(&Op::Cast { dtype: DType::Bool }, &[&run(&Op::Cast { dtype: DType::BF16 }, &[&x]).unwrap()]);
        assert_eq!(from_bf16.unwrap().data(), bools.data());
        let ints_to_bool = run(&Op::Cast { dtype: DType::Bool }, &[&ints]).unwrap();
        assert_eq!(
            ints_to_bool.data(),
            &HostData::Bool(vec![true, true, false, false, true, true, true, false, true, true])
        );
        let back = run(&Op::Cast { dtype: DType::I64 }, &[&bools]).unwrap();
        assert_eq!(back.data(), &HostData::I64(vec![1, 1, 1, 1, 1, 1, 1, 0, 1, 1]));
        let ints32 = run(&Op::Cast { dtype: DType::I32 }, &[&x]).unwrap();
        assert_eq!(ints32.data(), &HostData::I32(vec![-1, 1, 0, 0, i32::MAX, i32::MIN, i32::MAX, 0, i32::MAX, 3]));
        let narrowed = run(&Op::Cast { dtype: DType::I32 }, &[&ints]).unwrap();
        assert_eq!(narrowed, ints32, "i64 to i32 saturates as a float does");
        let widened = run(&Op::Cast { dtype: DType::I64 }, &[&ti32(&[3], &[i32::MIN, -1, i32::MAX])]).unwrap();
        assert_eq!(widened.data(), &HostData::I64(vec![i64::from(i32::MIN), -1, i64::from(i32::MAX)]));
    }

    #[test]
    fn casts_round_once() {
        let x = t32(&[3], &[1.0, 1.0 + 1.0 / 256.0, 1e6]);
        let b = run(&Op::Cast { dtype: DType::BF16 }, &[&x]).unwrap();
        // 1 + 2^-8 is the midpoint between bf16 1.0 and 1.0078125: ties to even.
        assert_eq!(b.data(), &HostData::BF16(vec![bf16::ONE, bf16::ONE, bf16::from_f32(1e6)]));
        let f8 = run(&Op::Cast { dtype: DType::F8E4M3 }, &[&x]).unwrap();
        assert_eq!(f8.to_f32_vec(), [1.0, 1.0, 448.0]);
        let back = run(&Op::Cast { dtype: DType::F64 }, &[&f8]).unwrap();
        assert_eq!(back.data(), &HostData::F64(vec![1.0, 1.0, 448.0]));
        let ids = ti64(&[2], &[3, (1 << 24) + 1]);
        let f = run(&Op::Cast { dtype: DType::F32 }, &[&ids]).unwrap();
        assert_eq!(f.to_f32_vec(), [3.0, 16777216.0]);
        assert_eq!(run(&Op::Cast { dtype: DType::I64 }, &[&ids]).unwrap(), ids);
    }
}
