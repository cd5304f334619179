//! Helpers for the kernel tests: build a [`KernelCall`] from tensors and run it.

use super::execute;
use crate::backend::KernelCall;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::host::HostTensor;
use crate::op::{AttnLayout, BinaryOp, Meta, Op, ReduceOp, UnaryGradOp, UnaryOp};

/// Runs `op` on `inputs` with run seed 0, the output shape and dtype from [`Op::infer`].
pub(crate) fn run(op: &Op, inputs: &[&HostTensor]) -> Result<HostTensor> {
    run_seeded(op, inputs, 0)
}

/// Runs `op` on `inputs` under `run_seed`.
pub(crate) fn run_seeded(op: &Op, inputs: &[&HostTensor], run_seed: u64) -> Result<HostTensor> {
    let metas: Vec<Meta<'_>> = inputs.iter().map(|t| (t.shape(), t.dtype())).collect();
    let (shape, dtype) = op.infer(&metas).map_err(Error::internal)?;
    let call = KernelCall::new(NodeId::new(0), op, &metas, &shape, dtype, run_seed);
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

/// An i32 tensor.
pub(crate) fn ti32(shape: &[usize], values: &[i32]) -> HostTensor {
    HostTensor::i32(shape.to_vec(), values.to_vec()).expect("test tensor")
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

/// Inputs of the kernels a training step runs — elementwise loops, norms, softmax, dropout,
/// reductions, a transpose, products, attention and their gradients — at sizes that split into
/// many chunks and leave remainders: `rows` rows of width 67, `heads` attention heads of 70
/// positions. For the tests that every way of running a kernel gives the same bits.
pub(crate) struct StepKernels {
    x: HostTensor,
    g: HostTensor,
    bias: HostTensor,
    w: HostTensor,
    qkv: [HostTensor; 3],
    saved: HostTensor,
    dsaved: HostTensor,
}

const SDPA: Op = Op::Sdpa { causal: true, scale: 0.25, layout: AttnLayout::HeadMajor };

impl StepKernels {
    pub(crate) fn new(rows: usize, heads: usize) -> Self {
        let d = 67;
        let qkv = [5, 6, 7].map(|salt| f32s(&[heads, 70, 16], salt));
        let saved = run(&SDPA, &[&qkv[0], &qkv[1], &qkv[2]]).expect("attention runs");
        let dsaved = f32s(saved.shape(), 8);
        let (x, g, bias, w) = (f32s(&[rows, d], 1), f32s(&[rows, d], 2), f32s(&[d], 3), f32s(&[d, 96], 4));
        StepKernels { x, g, bias, w, qkv, saved, dsaved }
    }

    /// Each kernel with its inputs.
    pub(crate) fn cases(&self) -> Vec<(Op, Vec<&HostTensor>)> {
        let StepKernels { x, g, bias, w, qkv: [q, k, v], saved, dsaved } = self;
        vec![
            (Op::Unary(UnaryOp::Gelu), vec![x]),
            (Op::Unary(UnaryOp::Exp), vec![x]),
            (Op::UnaryGrad(UnaryGradOp::GeluGrad), vec![x, g]),
            (Op::Binary(BinaryOp::Add), vec![x, bias]),
            (Op::Binary(BinaryOp::Mul), vec![x, g]),
            (Op::Softmax, vec![x]),
            (Op::SoftmaxGrad, vec![x, g]),
            (Op::LayerNorm { eps: 1e-5 }, vec![x]),
            (Op::LayerNormGrad { eps: 1e-5 }, vec![x, g]),
            (Op::Dropout { p: 0.1, seed: 3, key: 4 }, vec![x]),
            (Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdim: false }, vec![x]),
            (Op::Reduce { op: ReduceOp::Amax, axes: vec![1], keepdim: true }, vec![x]),
            (Op::Transpose { perm: vec![1, 0] }, vec![x]),
            (Op::Matmul, vec![x, w]),
            (Op::MatmulT { ta: true, tb: false, fold: false }, vec![x, g]),
            (SDPA, vec![q, k, v]),
            (Op::SdpaGrad { causal: true, scale: 0.25, layout: AttnLayout::HeadMajor }, vec![q, k, v, saved, dsaved]),
        ]
    }
}

/// The bits of each case's output, run under seed 9.
pub(crate) fn output_bits(cases: &[(Op, Vec<&HostTensor>)]) -> Vec<Vec<u32>> {
    cases
        .iter()
        .map(|(op, xs)| run_seeded(op, xs, 9).unwrap().to_f32_vec().iter().map(|v| v.to_bits()).collect())
        .collect()
}
