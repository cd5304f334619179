//! Element types and their exact conversions.

use half::{bf16, f16};

/// The element type of a tensor.
///
/// Floating types compute in f32 on the CPU (f64 when the op's result is f64); narrower types
/// are *storage* formats converted with round-to-nearest-even. fp8 conversions saturate: values
/// beyond the format's largest finite value become that value (±448 for e4m3, ±57344 for e5m2),
/// NaN stays NaN. `I64` holds integer ids and targets, `I32` 32-bit integers. A cast goes from
/// every dtype to every dtype: to an integer a float is truncated toward zero, saturating at the
/// integer's range, NaN to 0; an i64 to `I32` saturates too; to
/// `Bool` a nonzero value (NaN included) is true; a `Bool` is 0 or 1 as a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float (reference computations, gradient checks).
    F64,
    /// bfloat16.
    BF16,
    /// IEEE half.
    F16,
    /// fp8 e4m3fn (no infinities, max 448).
    F8E4M3,
    /// fp8 e5m2 (max finite 57344).
    F8E5M2,
    /// 64-bit signed integers (ids, targets).
    I64,
    /// 32-bit signed integers (counts, positions: half the memory of i64).
    I32,
    /// Booleans, one byte each: what comparisons produce and `where` consumes. Not arithmetic:
    /// cast to a number to compute with a mask.
    Bool,
}

impl DType {
    /// All dtypes, in a fixed order.
    pub const ALL: [DType; 9] = [
        DType::F32,
        DType::F64,
        DType::BF16,
        DType::F16,
        DType::F8E4M3,
        DType::F8E5M2,
        DType::I64,
        DType::I32,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::BF16 | DType::F16 => 2,
            DType::F8E4M3 | DType::F8E5M2 | DType::Bool => 1,
        }
    }

    /// Whether values of this type are floating point (and so differentiable).
    pub fn is_float(self) -> bool {
        !matches!(self, DType::I64 | DType::I32 | DType::Bool)
    }

    /// Whether this is an integer dtype (`I64`, `I32`).
    pub fn is_int(self) -> bool {
        matches!(self, DType::I64 | DType::I32)
    }

    /// Whether this is one of the fp8 formats.
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }

    /// The name used in JSON, reports and the CLI (`"bf16"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::Bool => "bool",
        }
    }

    /// The dtype named `name` (see [`DType::name`]).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The dtype gradients of values of this dtype have: the same, except fp8 values, whose
    /// gradients are f32 (an fp8 gradient would lose nearly all information).
    pub fn grad_dtype(self) -> DType {
        if self.is_fp8() {
            DType::F32
        } else {
            self
        }
    }

    /// The largest finite value of a floating dtype.
    pub fn max_finite(self) -> f64 {
        match self {
            DType::F32 => f32::MAX as f64,
            DType::F64 => f64::MAX,
            DType::BF16 => bf16::MAX.to_f64(),
            DType::F16 => f16::MAX.to_f64(),
            // float8's own MAX constants are one step low; these are the formats' true maxima.
            DType::F8E4M3 => 448.0,
            DType::F8E5M2 => 57344.0,
            DType::I64 => i64::MAX as f64,
            DType::I32 => i32::MAX as f64,
            DType::Bool => 1.0,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Round an f32 to the nearest e4m3 value (ties to even), saturating at ±448; returns the bits.
pub fn f32_to_e4m3(x: f32) -> u8 {
    f64_to_e4m3(x as f64)
}

/// Round an f64 to the nearest e4m3 value in one rounding (ties to even), saturating at ±448.
pub fn f64_to_e4m3(x: f64) -> u8 {
    float8::F8E4M3::from_f64(x.clamp(-448.0, 448.0)).to_bits()
}

/// The f32 value of e4m3 bits.
pub fn e4m3_to_f32(bits: u8) -> f32 {
    float8::F8E4M3::from_bits(bits).to_f32()
}

/// Round an f32 to the nearest e5m2 value (ties to even), saturating at ±57344; returns the bits.
pub fn f32_to_e5m2(x: f32) -> u8 {
    f64_to_e5m2(x as f64)
}

/// Round an f64 to the nearest e5m2 value in one rounding (ties to even), saturating at ±57344.
pub fn f64_to_e5m2(x: f64) -> u8 {
    float8::F8E5M2::from_f64(x.clamp(-57344.0, 57344.0)).to_bits()
}

/// The f32 value of e5m2 bits.
pub fn e5m2_to_f32(bits: u8) -> f32 {
    float8::F8E5M2::from_bits(bits).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }

    #[test]
    fn fp8_saturates_at_true_maxima() {
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1e6)), 448.0);
        assert_eq!(e4m3_to_f32(f32_to_e4m3(-1e6)), -448.0);
        assert_eq!(e4m3_to_f32(f32_to_e4m3(448.0)), 448.0);
        assert_eq!(e5m2_to_f32(f32_to_e5m2(1e9)), 57344.0);
        assert!(e4m3_to_f32(f32_to_e4m3(f32::NAN)).is_nan());
    }

    #[test]
    fn fp8_rounds_to_nearest_even() {
        // e4m3 has 3 mantissa bits: between 1.0 and 1.125 the midpoint 1.0625 ties to 1.0 (even).
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1.0625)), 1.0);
        // 1.1875 is the midpoint of 1.125 (odd) and 1.25 (even).
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1.1875)), 1.25);
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1.07)), 1.125);
        // e5m2: 2 mantissa bits; 1.125 ties between 1.0 and 1.25 → 1.0.
        assert_eq!(e5m2_to_f32(f32_to_e5m2(1.125)), 1.0);
        // Every e4m3 bit pattern survives a round trip (NaNs aside).
        for bits in 0u8..=255 {
            let v = e4m3_to_f32(bits);
            if !v.is_nan() {
                assert_eq!(e4m3_to_f32(f32_to_e4m3(v)).to_bits(), v.to_bits(), "bits {bits:#x}");
            }
        }
    }
}
