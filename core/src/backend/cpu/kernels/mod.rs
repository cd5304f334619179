//! CPU kernels: one function per op, grouped by family.
//!
//! Every float kernel is generic over [`Float`] and runs in the *compute type*: f64 when the
//! result is f64, f32 otherwise. Inputs stored as bf16/f16/fp8 are widened exactly to the compute
//! type (inputs already in it are borrowed, not copied) and results are rounded once to the output
//! dtype (round to nearest even, saturating for fp8). Layout ops (`reshape`, `transpose`, ...)
//! move raw elements of any dtype without converting them.
//!
//! [`execute`] first checks the call against [`Op::infer`], so the kernels can rely on the shape
//! rules; ops whose rule does not check everything (the internal gradient ops) check the rest
//! themselves and answer with [`Error::Node`].

mod accumulate;
mod attention;
mod cast;
mod elementwise;
mod index;
mod integer;
mod layout;
mod matmul;
mod nn;
mod norm;
pub(crate) mod optim;
mod reduce;
mod select;
pub(crate) mod simd;
mod split;
mod strided;

use crate::backend::KernelCall;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::{HostData, HostTensor};
use crate::op::{Op, ReduceOp};
use crate::shape::fmt_shape;
use half::{bf16, f16};
use matmul::Trans;
use std::borrow::Cow;
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

/// The arithmetic the kernels need, implemented for f32 and f64 so both share one code path.
pub(crate) trait Float:
    Copy
    + Default
    + Send
    + Sync
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + std::fmt::Debug
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    const NEG_INFINITY: Self;
    /// Whether this is f64 (the precise reference type of gradient checks).
    const IS_F64: bool;
    /// Nearest value of this type (exact for f64, rounded for f32).
    fn of(x: f64) -> Self;
    fn exp(self) -> Self;
    /// `exp` for the hot loops (softmax): exact libm in f64; in f32 a branch-free polynomial
    /// (Cephes' `expf`, within 2 ulp of libm) that vectorises.
    fn exp_fast(self) -> Self;
    fn ln(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tanh(self) -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
    /// The elements of `data` in this type: borrowed when already stored so, else widened.
    fn read(data: &HostData) -> Cow<'_, [Self]>;
    /// Values of this type stored as `dtype` (moved when `dtype` is this type).
    fn store(values: Vec<Self>, dtype: DType) -> HostData;
    /// `C ← alpha·A·B` for row/column strides in elements (`matrixmultiply`'s gemm).
    ///
    /// # Safety
    /// The pointers and strides must address valid `m×k`, `k×n` and `m×n` matrices, and `c` must
    /// not alias `a`, `b` or itself.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

macro_rules! impl_float {
    ($t:ty, $variant:ident, $to_vec:ident, $from:ident, $gemm:ident, $exp_fast:path) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            const IS_F64: bool = std::mem::size_of::<$t>() == 8;
            #[inline]
            fn of(x: f64) -> Self {
                x as $t
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn exp_fast(self) -> Self {
                $exp_fast(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn read(data: &HostData) -> Cow<'_, [Self]> {
                match data {
                    HostData::$variant(v) => Cow::Borrowed(v),
                    other => Cow::Owned(other.$to_vec()),
                }
            }
            fn store(values: Vec<Self>, dtype: DType) -> HostData {
                match dtype {
                    DType::$variant => HostData::$variant(values),
                    other => HostData::$from(&values, other),
                }
            }
            unsafe fn gemm(
                m: usize,
                k: usize,
                n: usize,
                alpha: Self,
                a: *const Self,
                rsa: isize,
                csa: isize,
                b: *const Self,
                rsb: isize,
                csb: isize,
                c: *mut Self,
                rsc: isize,
                csc: isize,
            ) {
                // SAFETY: forwarded from the caller's contract (see the trait method's docs).
                unsafe { matrixmultiply::$gemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, csc) }
            }
        }
    };
}

impl_float!(f32, F32, to_f32_vec, from_f32, sgemm, simd::exp_f32);
impl_float!(f64, F64, to_f64_vec, from_f64, dgemm, f64::exp);

/// An element moved verbatim by layout ops (fp8 travels as its raw byte).
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    /// The elements of `data` if they are stored as this type.
    fn slice(data: &HostData) -> Option<&[Self]>;
    /// Elements of this type as `dtype` (which must store this type).
    fn wrap(values: Vec<Self>, dtype: DType) -> HostData;
}

macro_rules! impl_elem {
    ($t:ty, $($variant:ident),+) => {
        impl Elem for $t {
            fn slice(data: &HostData) -> Option<&[Self]> {
                match data {
                    $(HostData::$variant(v) => Some(v),)+
                    _ => None,
                }
            }
            fn wrap(values: Vec<Self>, dtype: DType) -> HostData {
                impl_elem!(@wrap values, dtype, $($variant),+)
            }
        }
    };
    (@wrap $v:ident, $d:ident, $only:ident) => {{ let _ = $d; HostData::$only($v) }};
    (@wrap $v:ident, $d:ident, $first:ident, $second:ident) => {
        if $d == DType::$second { HostData::$second($v) } else { HostData::$first($v) }
    };
}

impl_elem!(f32, F32);
impl_elem!(f64, F64);
impl_elem!(bf16, BF16);
impl_elem!(f16, F16);
impl_elem!(i64, I64);
impl_elem!(i32, I32);
impl_elem!(bool, Bool);
impl_elem!(u8, F8E4M3, F8E5M2);

/// Runs `$f::<E>($args)` with `E` the storage element type of `$dtype`.
macro_rules! per_elem {
    ($dtype:expr, $f:ident($($args:expr),*)) => {
        match $dtype {
            DType::F32 => $f::<f32>($($args),*),
            DType::F64 => $f::<f64>($($args),*),
            DType::BF16 => $f::<half::bf16>($($args),*),
            DType::F16 => $f::<half::f16>($($args),*),
            DType::F8E4M3 | DType::F8E5M2 => $f::<u8>($($args),*),
            DType::I64 => $f::<i64>($($args),*),
            DType::I32 => $f::<i32>($($args),*),
            DType::Bool => $f::<bool>($($args),*),
        }
    };
}
pub(crate) use per_elem;

/// Runs `$f::<T>($args)` with `T` the compute type of `$call`: f64 for f64 results, else f32.
macro_rules! per_float {
    ($call:expr, $($f:ident)::+, ($($args:expr),*)) => {
        if $call.out_dtype == DType::F64 {
            $($f)::+::<f64>($($args),*)
        } else {
            $($f)::+::<f32>($($args),*)
        }
    };
}

/// An [`Error::Node`] for this call.
pub(crate) fn node_err(call: &KernelCall<'_>, message: impl Into<String>) -> Error {
    Error::Node { node: call.node, op: call.op.name(), message: message.into() }
}

/// The result tensor of `call` from compute-type values, rounded to the output dtype.
pub(crate) fn finish<T: Float>(call: &KernelCall<'_>, values: Vec<T>) -> Result<HostTensor> {
    HostTensor::new(call.out_shape.to_vec(), T::store(values, call.out_dtype))
        .map_err(|e| node_err(call, format!("kernel produced a wrong element count: {e}")))
}

/// The result tensor of `call` from raw elements already in the output dtype.
pub(crate) fn finish_raw<E: Elem>(call: &KernelCall<'_>, values: Vec<E>) -> Result<HostTensor> {
    HostTensor::new(call.out_shape.to_vec(), E::wrap(values, call.out_dtype))
        .map_err(|e| node_err(call, format!("kernel produced a wrong element count: {e}")))
}

/// The i64 elements of an ids/targets input (the shape rule has checked the dtype).
pub(crate) fn ids<'a>(call: &KernelCall<'_>, t: &'a HostTensor) -> Result<&'a [i64]> {
    match t.data() {
        HostData::I64(v) => Ok(v),
        other => Err(node_err(call, format!("ids/targets must be i64, got {}", other.dtype()))),
    }
}

/// Checks that the tensors match the call's metas and the metas match the op's shape rule, so
/// kernels can index without re-checking what [`Op::infer`] guarantees.
fn check(call: &KernelCall<'_>, inputs: &[&HostTensor]) -> Result<()> {
    if inputs.len() != call.inputs.len() {
        return Err(node_err(
            call,
            format!("got {} input tensors for {} input metas", inputs.len(), call.inputs.len()),
        ));
    }
    for (i, (t, m)) in inputs.iter().zip(call.inputs).enumerate() {
        // `HostTensor` keeps its data and shape in step; this is the kernels' own guard of it.
        if crate::shape::checked_numel(t.shape()) != Some(t.numel()) {
            return Err(node_err(
                call,
                format!(
                    "input {i} holds {} elements but its shape {} holds another count",
                    t.numel(),
                    fmt_shape(t.shape())
                ),
            ));
        }
        if t.shape() != m.0 || t.dtype() != m.1 {
            return Err(node_err(
                call,
                format!(
                    "input {i} is {} {} but the call declares {} {}",
                    fmt_shape(t.shape()),
                    t.dtype(),
                    fmt_shape(m.0),
                    m.1
                ),
            ));
        }
    }
    call.check_rule()
}

/// Outputs from this many bytes up are reserved before their kernel runs (and released again),
/// so that a size this machine cannot hold is an error naming the node, not an abort inside the
/// kernel. Smaller ones are not worth the system call.
const RESERVE_FROM_BYTES: usize = 256 << 20;

fn reserve_output(call: &KernelCall<'_>) -> Result<()> {
    let bytes = crate::shape::checked_bytes(call.out_shape, call.out_dtype.size());
    if bytes.is_some_and(|b| b < RESERVE_FROM_BYTES) {
        return Ok(());
    }
    let unavailable = || output_memory(call, Error::HostMemory { what: String::new(), bytes: bytes.map(|b| b as u64) });
    let bytes = bytes.ok_or_else(unavailable)?;
    Vec::<u8>::new().try_reserve_exact(bytes).map_err(|_| unavailable())
}

/// A host-memory error for `call`'s output, naming the node.
fn output_memory(call: &KernelCall<'_>, e: Error) -> Error {
    match e {
        Error::HostMemory { bytes, .. } => Error::HostMemory {
            what: format!(
                "the output of node {} ({}), {} {}",
                call.node,
                call.op.name(),
                fmt_shape(call.out_shape),
                call.out_dtype
            ),
            bytes,
        },
        other => other,
    }
}

/// Computes one op on host tensors.
pub(crate) fn execute(call: &KernelCall<'_>, inputs: &[&HostTensor]) -> Result<HostTensor> {
    use elementwise as ew;
    check(call, inputs)?;
    reserve_output(call)?;
    let x = inputs;
    match call.op {
        Op::Input | Op::Param { .. } => Err(node_err(call, "leaf values are fed to a run, not computed by a kernel")),
        Op::ConstantData { value } => Ok(value.as_ref().clone()),
        Op::Constant { value } => {
            HostTensor::full(call.out_shape.to_vec(), *value, call.out_dtype).map_err(|e| output_memory(call, e))
        }
        Op::Arange { start, step } => index::arange(call, *start, *step),
        Op::Binary(b) if call.out_dtype.is_int() => integer::binary(call, *b, x[0], x[1]),
        Op::Binary(b) => per_float!(call, ew::binary, (call, *b, x[0], x[1])),
        Op::Logic(l) => integer::logic(call, *l, x[0], x[1]),
        Op::LogicalNot => integer::logical_not(call, x[0]),
        Op::ArgReduce { op, axis, .. } => select::arg_reduce(call, *op, x[0], *axis),
        Op::Topk { k, axis, largest } => select::topk(call, x[0], *k, *axis, *largest),
        Op::Argsort { axis, descending } => select::argsort(call, x[0], *axis, *descending),
        Op::Bincount { bins } => select::bincount(call, x[0], *bins),
        Op::OneHot { classes, .. } => select::one_hot(call, x[0], *classes),
        Op::Cumsum { axis, reverse } => accumulate::cumsum(call, x[0], *axis, *reverse),
        Op::IndexAdd { axis } => accumulate::index_add(call, x[0], x[1], x[2], *axis),
        Op::ScatterAdd { axis } => accumulate::scatter_add(call, x[0], x[1], x[2], *axis),
        Op::Compare(c) => index::compare(call, *c, x[0], x[1]),
        Op::Where => index::select_where(call, x[0], x[1], x[2]),
        Op::Unary(u) => per_float!(call, ew::unary, (call, x[0], *u)),
        Op::Clamp { min, max } => per_float!(call, ew::clamp, (call, x[0], *min, *max)),
        Op::Pow { exponent } => per_float!(call, ew::pow_const, (call, x[0], *exponent)),
        Op::UnaryGrad(k) => per_float!(call, ew::unary_grad, (call, x[0], x[1], *k)),
        Op::ClampGrad { min, max } => per_float!(call, ew::clamp_grad, (call, x[0], x[1], *min, *max)),
        Op::Dropout { p, seed, key } => {
            per_float!(call, ew::dropout, (call, x[0], *p, *seed, *key))
        }
        Op::Cast { dtype } => cast::cast(call, x[0], *dtype),
        Op::Reduce { op: ReduceOp::Sum, axes, keepdim } => {
            per_float!(call, reduce::sum, (call, x[0], axes, *keepdim, false))
        }
        Op::Reduce { op: ReduceOp::Mean, axes, keepdim } => {
            per_float!(call, reduce::sum, (call, x[0], axes, *keepdim, true))
        }
        Op::Reduce { op: ReduceOp::Amax, axes, keepdim } => {
            per_float!(call, reduce::amax, (call, x[0], axes, *keepdim))
        }
        Op::AmaxGrad { axes, keepdim } => per_float!(call, reduce::amax_grad, (call, x[0], x[1], x[2], axes, *keepdim)),
        Op::Matmul => per_float!(call, matmul::matmul, (call, x[0], x[1], Trans::NONE)),
        Op::MatmulT { ta, tb, fold: false } => {
            per_float!(call, matmul::matmul, (call, x[0], x[1], Trans { a: *ta, b: *tb }))
        }
        Op::MatmulT { fold: true, .. } => per_float!(call, matmul::folded, (call, x[0], x[1])),
        Op::ScaledMatmul => matmul::scaled_matmul(call, x[0], x[1], x[2], x[3]),
        Op::Reshape { .. } => layout::reshape(call, x[0]),
        Op::Transpose { perm } => layout::transpose(call, x[0], perm),
        Op::Expand { .. } => layout::expand(call, x[0]),
        Op::Concat { axis } => layout::concat(call, x, *axis),
        Op::Slice { axis, start, .. } => layout::slice(call, x[0], *axis, *start),
        Op::SliceGrad { axis, start, .. } => index::slice_grad(call, x[0], *axis, *start),
        Op::IndexSelect { axis } => index::index_select(call, x[0], x[1], *axis),
        Op::IndexSelectGrad { axis, .. } => per_float!(call, index::index_select_grad, (call, x[0], x[1], *axis)),
        Op::Gather { axis } => index::gather(call, x[0], x[1], *axis),
        Op::GatherGrad { axis, .. } => per_float!(call, index::gather_grad, (call, x[0], x[1], *axis)),
        Op::Softmax => per_float!(call, nn::softmax, (call, x[0], false)),
        Op::LogSoftmax => per_float!(call, nn::softmax, (call, x[0], true)),
        Op::SoftmaxGrad => per_float!(call, nn::softmax_grad, (call, x[0], x[1], false)),
        Op::LogSoftmaxGrad => per_float!(call, nn::softmax_grad, (call, x[0], x[1], true)),
        Op::LayerNorm { eps } => per_float!(call, nn::layer_norm, (call, x[0], *eps)),
        Op::LayerNormGrad { eps } => {
            per_float!(call, nn::layer_norm_grad, (call, x[0], x[1], *eps))
        }
        Op::RmsNorm { eps } => per_float!(call, norm::rms_norm, (call, x[0], *eps)),
        Op::RmsNormGrad { eps } => per_float!(call, norm::rms_norm_grad, (call, x[0], x[1], *eps)),
        Op::Sdpa { causal, scale, layout } => {
            per_float!(call, attention::sdpa, (call, x[0], x[1], x[2], (*causal, *scale, *layout)))
        }
        Op::SdpaGrad { causal, scale, layout } => {
            per_float!(call, attention::sdpa_grad, (call, x, (*causal, *scale, *layout)))
        }
        Op::CrossEntropy => per_float!(call, nn::cross_entropy, (call, x[0], x[1])),
        Op::CrossEntropyGrad => per_float!(call, nn::cross_entropy_grad, (call, x[0], x[1], x[2])),
        Op::Embedding => nn::embedding(call, x[0], x[1]),
        Op::EmbeddingGrad { rows } => {
            per_float!(call, nn::embedding_grad, (call, x[0], x[1], *rows))
        }
    }
}

#[cfg(test)]
mod same_bits;
#[cfg(test)]
pub(crate) mod testutil;

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use crate::backend::{Backend, KernelCall};
    use crate::graph::NodeId;
    use crate::op::UnaryOp;
    use crate::CpuBackend;

    #[test]
    fn calls_that_disagree_with_the_shape_rule_are_errors() {
        let x = t32(&[2, 3], &[0.0; 6]);
        let metas = [(x.shape(), x.dtype())];
        let call = KernelCall::new(NodeId::new(7), &Op::Unary(UnaryOp::Exp), &metas, &[3, 2], DType::F32, 0);
        let err = execute(&call, &[&x]).unwrap_err().to_string();
        assert!(err.contains("node") && err.contains("exp") && err.contains("[3, 2]"), "{err}");
        let err = execute(&call, &[]).unwrap_err().to_string();
        assert!(err.contains("0 input tensors"), "{err}");
        let y = t32(&[6], &[0.0; 6]);
        let err = execute(&KernelCall { out_shape: &[2, 3], ..call }, &[&y]).unwrap_err().to_string();
        assert!(err.contains("input 0 is [6] f32"), "{err}");
        let bad = [(x.shape(), DType::I64)];
        let i = ti64(&[2, 3], &[0; 6]);
        let err = execute(&KernelCall { inputs: &bad, out_shape: &[2, 3], ..call }, &[&i]).unwrap_err();
        assert!(err.to_string().contains("floating point"), "{err}");
    }

    /// A call made from a graph known to hold its invariants is not checked again; one made from
    /// a graph nothing checked, or with metas other than the graph's, is.
    #[test]
    fn the_shape_rule_is_checked_once_per_graph() {
        use crate::graph::{Graph, Node};
        use crate::{JointGraph, Trace};
        let trace = Trace::new();
        let w = trace.param("w", &[2, 3], DType::F32);
        let joint = JointGraph::new(&trace.finish(&w.exp().sum_all()).unwrap()).unwrap();
        let g = joint.graph();
        let exp = g.ids().find(|&i| matches!(g.node(i).op, Op::Unary(UnaryOp::Exp))).unwrap();
        let metas = [g.node(g.node(exp).inputs[0]).meta()];
        assert!(KernelCall::for_node(g, exp, &metas, 0).is_checked());
        let other = [(&[3usize, 2][..], DType::F32)];
        assert!(!KernelCall::for_node(g, exp, &other, 0).is_checked(), "metas that are not the graph's");
        // A graph built by hand with a wrong shape: nothing vouches for it, so the backend checks.
        let mut bad = Graph::default();
        let node = |op, inputs: &[NodeId], shape: &[usize]| Node {
            op,
            inputs: inputs.iter().copied().collect(),
            shape: shape.iter().copied().collect(),
            dtype: DType::F32,
            tag: None,
            label: None,
        };
        let x = bad.push(node(Op::Input, &[], &[2, 3]));
        let y = bad.push(node(Op::Unary(UnaryOp::Exp), &[x], &[6]));
        let metas = [bad.node(x).meta()];
        let call = KernelCall::for_node(&bad, y, &metas, 0);
        assert!(!call.is_checked());
        let err = execute(&call, &[&t32(&[2, 3], &[0.0; 6])]).unwrap_err().to_string();
        assert!(err.contains("asks for [6] f32 but the op produces [2, 3] f32"), "{err}");
    }

    #[test]
    fn the_backend_meters_kernel_results() {
        let mut cpu = CpuBackend::new();
        let a = cpu.upload(&t64(&[2, 2], &[1.0, 2.0, 3.0, 4.0])).unwrap();
        let metas = [(&[2usize, 2][..], DType::F64), (&[2usize, 2][..], DType::F64)];
        let call = KernelCall::new(NodeId::new(1), &Op::Matmul, &metas, &[2, 2], DType::F64, 0);
        let c = cpu.execute(&call, &[&a, &a]).unwrap();
        assert_eq!(cpu.download(&c).unwrap().to_f64_vec(), [7.0, 10.0, 15.0, 22.0]);
        assert_eq!(cpu.memory().live_bytes, 64);
        drop(c);
        assert_eq!(cpu.memory().live_bytes, 32);
    }
}

/// The claim of [`simd`]: whichever copy of a vector loop the CPU runs (AVX-512, AVX2 or
/// baseline), every kernel gives the same bits. Checked on the kernels a training step runs,
/// with sizes that split over threads and leave loop remainders.
#[cfg(test)]
mod widths {
    use super::testutil::*;
    use crate::cpu_features::WIDTH_CAP;
    use std::sync::atomic::Ordering;

    #[test]
    fn every_vector_width_gives_the_same_bits() {
        let kernels = StepKernels::new(301, 3);
        let cases = kernels.cases();
        let bits = |cap: u8| -> Vec<Vec<u32>> {
            WIDTH_CAP.store(cap, Ordering::Relaxed);
            let out = output_bits(&cases);
            WIDTH_CAP.store(2, Ordering::Relaxed);
            out
        };
        let (widest, avx2, baseline) = (bits(2), bits(1), bits(0));
        for (i, (op, _)) in cases.iter().enumerate() {
            assert_eq!(widest[i], avx2[i], "{}: AVX-512 and AVX2 copies differ", op.name());
            assert_eq!(widest[i], baseline[i], "{}: AVX-512 and baseline copies differ", op.name());
        }
    }
}
