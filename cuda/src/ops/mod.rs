//! Launch code per op family; [`crate::backend`] dispatches each `Op` here.
//!
//! Everything works on [`View`]s (a device pointer, a shape, a dtype); the output is allocated
//! by the caller. Temporary device memory is a [`Scratch`], freed stream-ordered on drop.

pub(crate) mod accumulate;
pub(crate) mod attention;
pub(crate) mod buckets;
pub(crate) mod elementwise;
pub(crate) mod index;
pub(crate) mod integer;
pub(crate) mod layout;
pub(crate) mod nn;
pub(crate) mod optim;
pub(crate) mod reduce;
pub(crate) mod select;

use crate::device::Device;
use crate::kernels::{Arg, Dims};
use remat_core::{DType, Result};

/// A tensor on the device as kernels see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct View<'a> {
    pub ptr: u64,
    pub shape: &'a [usize],
    pub dtype: DType,
}

impl View<'_> {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }
    pub fn arg(&self) -> Arg {
        Arg::U64(self.ptr)
    }
}

/// Unmetered temporary device memory, returned to the pool (stream-ordered) on drop.
pub(crate) struct Scratch<'d> {
    dev: &'d Device,
    pub ptr: u64,
}

impl<'d> Scratch<'d> {
    pub fn new(dev: &'d Device, bytes: usize) -> Result<Scratch<'d>> {
        Ok(Scratch { dev, ptr: dev.alloc_raw(bytes)? })
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        self.dev.free_raw(self.ptr);
    }
}

pub(crate) use remat_core::{coalesce, odometer};

/// A [`Dims`] argument, or an error when the (coalesced) view has more than `MAXD` axes.
pub(crate) fn dims(dev: &Device, shape: &[usize], strides: &[usize]) -> Result<Arg> {
    Dims::new(shape, strides).map(Arg::Dims).ok_or_else(|| {
        dev.err(format!("a strided view of shape {shape:?} has more than {} non-mergeable axes", crate::kernels::MAXD))
    })
}

/// The kernel name `base_<suffix>` for float storage dtype `d`.
pub(crate) fn fname(dev: &Device, base: &str, d: DType) -> Result<String> {
    crate::kernels::float_suffix(d)
        .map(|s| format!("{base}_{s}"))
        .ok_or_else(|| dev.err(format!("{base} has no kernel for {d}")))
}

/// The kernel name of a number dtype: [`fname`] for floats, `base_i64` or `base_i32` for the
/// integers (`FOR_NUMBERS`).
pub(crate) fn num_fname(dev: &Device, base: &str, d: DType) -> Result<String> {
    match crate::kernels::int_suffix(d) {
        Some(s) => Ok(format!("{base}_{s}")),
        None => fname(dev, base, d),
    }
}

/// `(outer, dim, inner)`: the extents of `shape` before, at and after `axis`.
pub(crate) fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}
