//! Helpers for the kernel tests: build a [`KernelCall`] from tensors and run it.

use super::execute;
use crate::backend::KernelCall;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::host::HostTensor;
use crate::op::{Meta, Op};

/// Runs `op` on `inputs` with run seed 0, the output shape and dtype from [`Op::infer`].
pub(crate) fn run(op: &Op, inputs: &[&HostTensor]) -> Result<HostTensor> {
    run_seeded(op, inputs, 0)
}

/// Runs `op` on `inputs` under `run_seed`.
pub(crate) fn run_seeded(op: &Op, inputs: &[&HostTensor], run_seed: u64) -> Result<HostTensor> {
    let metas: Vec<Meta<'_>> = inputs.iter().map(|t| (t.shape(), t.dtype())).collect();
    let (shape, dtype) = op.infer(&metas).map_err(Error::internal)?;
    let call = KernelCall { node: NodeId::new(0), op, inputs: &metas, out_shape: &shape, out_dtype: dtype, run_seed };
    execute(&call, inputs)
}

/// `f()` run as a kernel of a backend with `threads` threads.
pub(crate) fn on_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    crate::backend::cpu::threads::Pool::new(threads).enter(f)
}

/// An f32 tensor (panics on a bad element count: test inputs only).
pub(crate) fn t32(shape: &[usize], values: &[f32]) -> HostTensor {
    HostTensor::f32(shape.to_vec(), values.to_vec()).expect("test tensor")
}

/// An f32 tensor of `shape` holding [`values`] drawn with `salt`.
pub(crate) fn f32s(shape: &[usize], salt: u64) -> HostTensor {
    let n = shape.iter().product();
    t32(shape, &values(n, salt).iter().map(|&v| v as f32).collect::<Vec<_>>())
}

/// An f64 tensor.
pub(crate) fn t64(shape: &[usize], values: &[f64]) -> HostTensor {
    HostTensor::f64(shape.to_vec(), values.to_vec()).expect("test tensor")
}

/// An i64 tensor.
pub(crate) fn ti64(shape: &[usize], values: &[i64]) -> HostTensor {
    HostTensor::i64(shape.to_vec(), values.to_vec()).expect("test tensor")
}

/// Deterministic pseudo-random values in [-2, 2).
pub(crate) fn values(n: usize, salt: u64) -> Vec<f64> {
    (0..n as u64).map(|i| crate::rng::uniform_f64(salt, 99, i) * 4.0 - 2.0).collect()
}

/// Asserts `got` and `want` agree elementwise within `tol` (absolute plus relative).
#[track_caller]
pub(crate) fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "element {i}: got {g}, want {w}");
    }
}
