//! Tensors in host memory: what users feed in and get back, and the CPU backend's storage.

use crate::dtype::{self, DType};
use crate::error::{Error, Result};
use crate::shape::{checked_numel, fmt_shape, numel};
use half::{bf16, f16};

/// The elements of a host tensor, stored in their own dtype (fp8 as raw bits).
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum HostData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    BF16(Vec<bf16>),
    F16(Vec<f16>),
    F8E4M3(Vec<u8>),
    F8E5M2(Vec<u8>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
}

/// The elements of a host tensor as mutable slices of their own type ([`HostTensor::values_mut`]).
#[derive(Debug)]
#[allow(missing_docs)]
pub enum HostValuesMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    BF16(&'a mut [bf16]),
    F16(&'a mut [f16]),
    F8E4M3(&'a mut [u8]),
    F8E5M2(&'a mut [u8]),
    I64(&'a mut [i64]),
    I32(&'a mut [i32]),
    Bool(&'a mut [bool]),
}

/// A dense, row-major tensor in host memory.
///
/// Invariant: the data holds exactly as many elements as the shape. Every constructor checks it
/// and nothing hands out the data in a form whose length could change ([`HostTensor::values_mut`]
/// lends slices), so kernels may index by the shape.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    shape: Vec<usize>,
    data: HostData,
}

impl HostData {
    /// The dtype of these elements.
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
            HostData::BF16(_) => DType::BF16,
            HostData::F16(_) => DType::F16,
            HostData::F8E4M3(_) => DType::F8E4M3,
            HostData::F8E5M2(_) => DType::F8E5M2,
            HostData::I64(_) => DType::I64,
            HostData::I32(_) => DType::I32,
            HostData::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::F64(v) => v.len(),
            HostData::BF16(v) => v.len(),
            HostData::F16(v) => v.len(),
            HostData::F8E4M3(v) | HostData::F8E5M2(v) => v.len(),
            HostData::I64(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::Bool(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements converted exactly to f64 (i64 as its value).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            HostData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::F64(v) => v.clone(),
            HostData::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostData::F8E4M3(v) => v.iter().map(|&b| dtype::e4m3_to_f32(b) as f64).collect(),
            HostData::F8E5M2(v) => v.iter().map(|&b| dtype::e5m2_to_f32(b) as f64).collect(),
            HostData::I64(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            HostData::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
        }
    }

    /// Elements as f32 (exact for every dtype but f64 and large i64).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match self {
            HostData::F32(v) => v.clone(),
            HostData::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
            HostData::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            HostData::F8E4M3(v) => v.iter().map(|&b| dtype::e4m3_to_f32(b)).collect(),
            HostData::F8E5M2(v) => v.iter().map(|&b| dtype::e5m2_to_f32(b)).collect(),
            other => other.to_f64_vec().into_iter().map(|x| x as f32).collect(),
        }
    }

    /// f32 values stored as `dtype`, rounding to nearest even (saturating for fp8).
    pub fn from_f32(values: &[f32], dtype: DType) -> HostData {
        match dtype {
            DType::F32 => HostData::F32(values.to_vec()),
            DType::F64 => HostData::F64(values.iter().map(|&x| x as f64).collect()),
            DType::BF16 => HostData::BF16(values.iter().map(|&x| bf16::from_f32(x)).collect()),
            DType::F16 => HostData::F16(values.iter().map(|&x| f16::from_f32(x)).collect()),
            DType::F8E4M3 => HostData::F8E4M3(values.iter().map(|&x| dtype::f32_to_e4m3(x)).collect()),
            DType::F8E5M2 => HostData::F8E5M2(values.iter().map(|&x| dtype::f32_to_e5m2(x)).collect()),
            DType::I64 => HostData::I64(values.iter().map(|&x| x as i64).collect()),
            DType::I32 => HostData::I32(values.iter().map(|&x| x as i32).collect()),
            DType::Bool => HostData::Bool(values.iter().map(|&x| x != 0.0).collect()),
        }
    }

    /// `n` elements of `dtype`, element `i` being `value(i)` rounded once to `dtype` as
    /// [`HostData::from_f64`] rounds it. The memory is reserved first, so a count this machine
    /// cannot hold is an error, not an abort.
    pub fn try_from_fn(n: usize, dtype: DType, mut value: impl FnMut(usize) -> f64) -> Result<HostData> {
        fn fill<T>(n: usize, dtype: DType, f: impl FnMut(usize) -> T) -> Result<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| Error::HostMemory {
                what: format!("{n} elements of {dtype}"),
                bytes: n.checked_mul(dtype.size()).map(|b| b as u64),
            })?;
            v.extend((0..n).map(f));
            Ok(v)
        }
        Ok(match dtype {
            DType::F64 => HostData::F64(fill(n, dtype, value)?),
            DType::F32 => HostData::F32(fill(n, dtype, |i| value(i) as f32)?),
            DType::BF16 => HostData::BF16(fill(n, dtype, |i| bf16::from_f64(value(i)))?),
            DType::F16 => HostData::F16(fill(n, dtype, |i| f16::from_f64(value(i)))?),
            DType::F8E4M3 => HostData::F8E4M3(fill(n, dtype, |i| dtype::f64_to_e4m3(value(i)))?),
            DType::F8E5M2 => HostData::F8E5M2(fill(n, dtype, |i| dtype::f64_to_e5m2(value(i)))?),
            DType::I64 => HostData::I64(fill(n, dtype, |i| value(i) as i64)?),
            DType::I32 => HostData::I32(fill(n, dtype, |i| value(i) as i32)?),
            DType::Bool => HostData::Bool(fill(n, dtype, |i| value(i) != 0.0)?),
        })
    }

    /// f64 values stored as `dtype`, each rounded once to nearest even (fp8 saturating).
    pub fn from_f64(values: &[f64], dtype: DType) -> HostData {
        match dtype {
            DType::F64 => HostData::F64(values.to_vec()),
            DType::F32 => HostData::F32(values.iter().map(|&x| x as f32).collect()),
            DType::F8E4M3 => HostData::F8E4M3(values.iter().map(|&x| dtype::f64_to_e4m3(x)).collect()),
            DType::F8E5M2 => HostData::F8E5M2(values.iter().map(|&x| dtype::f64_to_e5m2(x)).collect()),
            DType::I64 => HostData::I64(values.iter().map(|&x| x as i64).collect()),
            DType::I32 => HostData::I32(values.iter().map(|&x| x as i32).collect()),
            DType::BF16 => HostData::BF16(values.iter().map(|&x| bf16::from_f64(x)).collect()),
            DType::F16 => HostData::F16(values.iter().map(|&x| f16::from_f64(x)).collect()),
            DType::Bool => HostData::Bool(values.iter().map(|&x| x != 0.0).collect()),
        }
    }
}

impl HostTensor {
    /// A tensor from a shape and matching data; errors when the element count differs.
    pub fn new(shape: impl Into<Vec<usize>>, data: HostData) -> Result<Self> {
        let shape = shape.into();
        if numel(&shape) != data.len() {
            return Err(Error::config(
                "shape",
                format!("shape {} holds {} elements, data has {}", fmt_shape(&shape), numel(&shape), data.len()),
            ));
        }
        Ok(HostTensor { shape, data })
    }

    /// Gives the tensor another shape with the same element count (a reshape without copying);
    /// errors, leaving it unchanged, when the counts differ.
    pub fn reshape_in_place(&mut self, shape: &[usize]) -> Result<()> {
        if numel(shape) != self.data.len() {
            return Err(Error::config(
                "shape",
                format!(
                    "cannot reshape {} elements to {} ({} elements)",
                    self.data.len(),
                    fmt_shape(shape),
                    numel(shape)
                ),
            ));
        }
        self.shape = shape.to_vec();
        Ok(())
    }

    /// A tensor of no elements (shape `[0]`, f32), holding no memory.
    pub(crate) fn empty() -> Self {
        HostTensor { shape: vec![0], data: HostData::F32(Vec::new()) }
    }

    /// An f32 tensor.
    pub fn f32(shape: impl Into<Vec<usize>>, values: Vec<f32>) -> Result<Self> {
        Self::new(shape, HostData::F32(values))
    }

    /// An f64 tensor.
    pub fn f64(shape: impl Into<Vec<usize>>, values: Vec<f64>) -> Result<Self> {
        Self::new(shape, HostData::F64(values))
    }

    /// An i64 tensor (ids, targets).
    pub fn i64(shape: impl Into<Vec<usize>>, values: Vec<i64>) -> Result<Self> {
        Self::new(shape, HostData::I64(values))
    }

    /// An i32 tensor.
    pub fn i32(shape: impl Into<Vec<usize>>, values: Vec<i32>) -> Result<Self> {
        Self::new(shape, HostData::I32(values))
    }

    /// A bool tensor (masks).
    pub fn bool(shape: impl Into<Vec<usize>>, values: Vec<bool>) -> Result<Self> {
        Self::new(shape, HostData::Bool(values))
    }

    /// A tensor of `shape` and `dtype` with every element `value`; an error, not an abort, when
    /// the shape is more than this machine can hold.
    pub fn full(shape: impl Into<Vec<usize>>, value: f64, dtype: DType) -> Result<Self> {
        let shape = shape.into();
        let data = HostData::try_from_fn(Self::count(&shape, dtype)?, dtype, |_| value)?;
        Ok(HostTensor { shape, data })
    }

    /// A tensor of `shape` and `dtype` whose element `i` (row-major) is `value(i)`, rounded once
    /// to `dtype`; an error, not an abort, when the shape is more than this machine can hold.
    pub fn from_fn(shape: impl Into<Vec<usize>>, dtype: DType, value: impl FnMut(usize) -> f64) -> Result<Self> {
        let shape = shape.into();
        let data = HostData::try_from_fn(Self::count(&shape, dtype)?, dtype, value)?;
        Ok(HostTensor { shape, data })
    }

    /// The element count of `shape`, or an error when it overflows.
    fn count(shape: &[usize], dtype: DType) -> Result<usize> {
        checked_numel(shape).ok_or_else(|| Error::HostMemory {
            what: format!("a tensor of shape {} {dtype} (more than 2^64 elements)", fmt_shape(shape)),
            bytes: None,
        })
    }

    /// f32 values converted to `dtype`.
    pub fn from_f32(shape: impl Into<Vec<usize>>, values: &[f32], dtype: DType) -> Result<Self> {
        Self::new(shape, HostData::from_f32(values, dtype))
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The elements.
    pub fn data(&self) -> &HostData {
        &self.data
    }

    /// The elements, mutably, as a slice of their own type: values can change, their number
    /// cannot (to store another count, build a new tensor or use [`HostTensor::set_data`]).
    pub fn values_mut(&mut self) -> HostValuesMut<'_> {
        match &mut self.data {
            HostData::F32(v) => HostValuesMut::F32(v),
            HostData::F64(v) => HostValuesMut::F64(v),
            HostData::BF16(v) => HostValuesMut::BF16(v),
            HostData::F16(v) => HostValuesMut::F16(v),
            HostData::F8E4M3(v) => HostValuesMut::F8E4M3(v),
            HostData::F8E5M2(v) => HostValuesMut::F8E5M2(v),
            HostData::I64(v) => HostValuesMut::I64(v),
            HostData::I32(v) => HostValuesMut::I32(v),
            HostData::Bool(v) => HostValuesMut::Bool(v),
        }
    }

    /// Replaces the elements with `data` of the same count (any dtype); an error, leaving the
    /// tensor unchanged, when the count differs from the shape's.
    pub fn set_data(&mut self, data: HostData) -> Result<()> {
        if data.len() != self.data.len() {
            return Err(Error::config(
                "data",
                format!(
                    "shape {} holds {} elements, the new data has {}",
                    fmt_shape(&self.shape),
                    self.data.len(),
                    data.len()
                ),
            ));
        }
        self.data = data;
        Ok(())
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Bytes the elements occupy.
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype().size()
    }

    /// Elements as f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.data.to_f64_vec()
    }

    /// Elements as f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        self.data.to_f32_vec()
    }

    /// The single element of a one-element tensor, as f64.
    pub fn scalar(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::config(
                "shape",
                format!("expected one element, tensor has shape {}", fmt_shape(&self.shape)),
            ));
        }
        Ok(self.to_f64_vec()[0])
    }

    /// The same values, stored as `dtype`.
    pub fn to_dtype(&self, dtype: DType) -> HostTensor {
        let data = if dtype == DType::F64 || self.dtype() == DType::F64 {
            HostData::from_f64(&self.to_f64_vec(), dtype)
        } else {
            HostData::from_f32(&self.to_f32_vec(), dtype)
        };
        HostTensor { shape: self.shape.clone(), data }
    }
}
