//! The element types a joint graph may carry, and the bytes a value of one takes.

/// The element types a joint graph may carry: every dtype a framework exports, and opaque
/// `bytes` for anything else (whose size must then be given as `bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum StorageType {
    F64,
    F32,
    F16,
    BF16,
    F8E4M3,
    F8E5M2,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
    /// Anything else: sized by the node's `bytes`.
    Bytes,
}

impl StorageType {
    /// Every storage type, in the order error messages list them.
    pub const ALL: [StorageType; 13] = [
        StorageType::F64,
        StorageType::F32,
        StorageType::F16,
        StorageType::BF16,
        StorageType::F8E4M3,
        StorageType::F8E5M2,
        StorageType::I64,
        StorageType::I32,
        StorageType::I16,
        StorageType::I8,
        StorageType::U8,
        StorageType::Bool,
        StorageType::Bytes,
    ];

    /// The name in documents and reports (`"bf16"`).
    pub fn name(self) -> &'static str {
        match self {
            StorageType::F64 => "f64",
            StorageType::F32 => "f32",
            StorageType::F16 => "f16",
            StorageType::BF16 => "bf16",
            StorageType::F8E4M3 => "f8e4m3",
            StorageType::F8E5M2 => "f8e5m2",
            StorageType::I64 => "i64",
            StorageType::I32 => "i32",
            StorageType::I16 => "i16",
            StorageType::I8 => "i8",
            StorageType::U8 => "u8",
            StorageType::Bool => "bool",
            StorageType::Bytes => "bytes",
        }
    }

    /// The type named `name`.
    pub fn from_name(name: &str) -> Option<StorageType> {
        StorageType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Bytes per element; `None` for opaque `bytes`.
    pub fn size(self) -> Option<u64> {
        Some(match self {
            StorageType::F64 | StorageType::I64 => 8,
            StorageType::F32 | StorageType::I32 => 4,
            StorageType::F16 | StorageType::BF16 | StorageType::I16 => 2,
            StorageType::F8E4M3 | StorageType::F8E5M2 | StorageType::I8 | StorageType::U8 | StorageType::Bool => 1,
            StorageType::Bytes => return None,
        })
    }

    /// The storage type of a traced dtype (every dtype has one of the same name).
    pub fn of(dtype: crate::DType) -> StorageType {
        StorageType::from_name(dtype.name()).unwrap_or(StorageType::Bytes)
    }
}

impl std::fmt::Display for StorageType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The bytes of `shape` elements of `ty`, or why they cannot be counted (overflow, opaque type).
pub fn value_bytes(shape: &[usize], ty: StorageType) -> std::result::Result<u64, String> {
    let size = ty.size().ok_or_else(|| "dtype `bytes` needs an explicit `bytes`".to_string())?;
    let mut n: u64 = 1;
    for &d in shape {
        n = n
            .checked_mul(d as u64)
            .ok_or_else(|| format!("shape {} has more than 2^64 elements", crate::shape::fmt_shape(shape)))?;
    }
    n.checked_mul(size)
        .ok_or_else(|| format!("shape {} of {ty} is more than 2^64 bytes", crate::shape::fmt_shape(shape)))
}
