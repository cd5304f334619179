//! Ops: a catalog kind plus its attributes, with the shape/dtype rule and FLOP count of each.
//!
//! The list of kinds and their flags live in [`remat_catalog`]; this module gives each kind its
//! attributes ([`Op`]), its shape and dtype rule ([`Op::infer`]) and its cost ([`Op::flops`]),
//! all by exhaustive matches so no kind can be missed. Gradient rules are in `autodiff::rules`,
//! kernels in the backends.

use crate::dtype::DType;
use crate::host::HostTensor;
use crate::shape::{broadcast, broadcasts_to, fmt_shape, numel, reduced, Shape};
pub use remat_catalog::{
    ArgReduceOp, Arity, BinaryOp, CompareOp, Domain, GradReads, LogicOp, Member, OpInfo, OpKind, OtherKind, ReduceOp,
    UnaryGradOp, UnaryOp, CATALOG,
};
use std::sync::Arc;

/// How fused attention's q, k, v and output lay out their heads.
///
/// Head-major (`[.., heads, t, d]`, PyTorch's `scaled_dot_product_attention`) treats every
/// leading axis as a batch axis. Token-major (`[.., t, heads, d]`, flash-attention's layout) is
/// what a `[.., t, heads · d]` projection reshapes to without a transpose: the attention reads
/// each head's rows in place, with a row stride of `heads · d`, and its output reshapes back to
/// `[.., t, heads · dv]` the same way. Both compute every element in the same order: the results
/// are bit-identical.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnLayout {
    /// `[.., heads, t, d]` (any leading axes, heads among them).
    #[default]
    HeadMajor,
    /// `[.., t, heads, d]`.
    TokenMajor,
}

/// The dimensions of one attention call, whatever its layout: `outer · heads` independent
/// attentions of `tq` queries and `tk` keys, head dims `d` (q, k) and `dv` (v, output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnDims {
    /// Leading axes, multiplied out (head-major: the heads among them).
    pub outer: usize,
    /// Heads interleaved in each token row: 1 in head-major, where heads are a leading axis.
    pub heads: usize,
    /// Queries.
    pub tq: usize,
    /// Keys (and values).
    pub tk: usize,
    /// Head dim of q and k.
    pub d: usize,
    /// Head dim of v and of the output.
    pub dv: usize,
}

impl AttnLayout {
    /// Trailing axes of one attention's operand: `[t, d]` or `[t, heads, d]`.
    pub fn inner_rank(self) -> usize {
        match self {
            AttnLayout::HeadMajor => 2,
            AttnLayout::TokenMajor => 3,
        }
    }

    /// The dimensions of q, k, v of these shapes (checked by [`Op::infer`] first: each has at
    /// least [`AttnLayout::inner_rank`] axes).
    pub fn dims(self, q: &[usize], k: &[usize], v: &[usize]) -> AttnDims {
        let (r, inner) = (q.len(), self.inner_rank());
        let heads = if inner == 3 { q[r - 2] } else { 1 };
        AttnDims { outer: numel(&q[..r - inner]), heads, tq: q[r - inner], tk: k[r - inner], d: q[r - 1], dv: v[r - 1] }
    }
}

/// An op: its kind and attributes. Inputs are stored on the graph node.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)] // each variant is documented on its [`OpKind`]
pub enum Op {
    Input,
    Param {
        init: Init,
    },
    Constant {
        value: f64,
    },
    /// The values, shared (cloning the op does not copy them).
    ConstantData {
        value: Arc<HostTensor>,
    },
    Arange {
        start: f64,
        step: f64,
    },
    /// Every member of the [`UnaryOp`] family (one input, same shape and dtype).
    Unary(UnaryOp),
    /// Every member of the [`UnaryGradOp`] family: `(v, g)` of one shape to `g · f'(v)`.
    UnaryGrad(UnaryGradOp),
    /// Every member of the [`BinaryOp`] family (two inputs of one float dtype, broadcasting).
    Binary(BinaryOp),
    /// Every member of the [`CompareOp`] family (two inputs of one dtype, broadcasting; `bool`).
    Compare(CompareOp),
    /// Every member of the [`LogicOp`] family (two `bool` inputs, broadcasting; `bool`).
    Logic(LogicOp),
    LogicalNot,
    /// Every member of the [`ArgReduceOp`] family: one axis to its i64 index.
    ArgReduce {
        op: ArgReduceOp,
        axis: usize,
        keepdim: bool,
    },
    Topk {
        k: usize,
        axis: usize,
        largest: bool,
    },
    Argsort {
        axis: usize,
        descending: bool,
    },
    Bincount {
        bins: usize,
    },
    OneHot {
        classes: usize,
        dtype: DType,
    },
    Cumsum {
        axis: usize,
        reverse: bool,
    },
    IndexAdd {
        axis: usize,
    },
    ScatterAdd {
        axis: usize,
    },
    /// Every member of the [`ReduceOp`] family.
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
        keepdim: bool,
    },
    Clamp {
        min: f64,
        max: f64,
    },
    Pow {
        exponent: f64,
    },
    Matmul,
    Reshape {
        shape: Vec<usize>,
    },
    Transpose {
        perm: Vec<usize>,
    },
    Expand {
        shape: Vec<usize>,
    },
    Concat {
        axis: usize,
    },
    Slice {
        axis: usize,
        start: usize,
        len: usize,
    },
    IndexSelect {
        axis: usize,
    },
    Gather {
        axis: usize,
    },
    Where,
    Softmax,
    LogSoftmax,
    LayerNorm {
        eps: f64,
    },
    RmsNorm {
        eps: f64,
    },
    Sdpa {
        causal: bool,
        scale: f64,
        layout: AttnLayout,
    },
    CrossEntropy,
    Embedding,
    Cast {
        dtype: DType,
    },
    /// `key` identifies the mask stream (the forward node's id at trace time), so the gradient
    /// (a dropout of the incoming gradient with the same key) and any recompute reproduce it.
    Dropout {
        p: f64,
        seed: u64,
        key: u64,
    },
    ScaledMatmul,
    SliceGrad {
        axis: usize,
        start: usize,
        dim: usize,
    },
    IndexSelectGrad {
        axis: usize,
        dim: usize,
    },
    GatherGrad {
        axis: usize,
        dim: usize,
    },
    ClampGrad {
        min: f64,
        max: f64,
    },
    SoftmaxGrad,
    LogSoftmaxGrad,
    LayerNormGrad {
        eps: f64,
    },
    RmsNormGrad {
        eps: f64,
    },
    SdpaGrad {
        causal: bool,
        scale: f64,
        layout: AttnLayout,
    },
    CrossEntropyGrad,
    EmbeddingGrad {
        rows: usize,
    },
    AmaxGrad {
        axes: Vec<usize>,
        keepdim: bool,
    },
    /// `op(a) · op(b)`, where `op` swaps the last two axes of an operand whose flag is set, batch
    /// axes broadcast as in `matmul`. With `fold` (only with `ta` alone) the leading axes of `a`
    /// `[.., r, m]` and `b` `[.., r, n]` (the same) are contracted too: `[m, n]`, one GEMM over
    /// every row — the gradient of a weight shared by the whole batch.
    MatmulT {
        ta: bool,
        tb: bool,
        fold: bool,
    },
}

/// How a parameter is initialised by [`crate::Params::init`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal with std `1/sqrt(shape[rank-2])` for matrices (the fan-in of `x · w`), zeros for
    /// vectors and scalars.
    Auto,
    /// All zeros.
    Zeros,
    /// All ones (layer-norm gains).
    Ones,
    /// Normal with mean 0 and this standard deviation.
    Normal(f64),
}

/// A shape and dtype: what an op produces, what it reads.
pub type Meta<'a> = (&'a [usize], DType);

impl Op {
    /// The catalog kind of this op.
    pub fn kind(&self) -> OpKind {
        use OpKind as K;
        match self {
            Op::Input => K::Input,
            Op::Param { .. } => K::Param,
            Op::Constant { .. } => K::Constant,
            Op::ConstantData { .. } => K::ConstantData,
            Op::Arange { .. } => K::Arange,
            Op::Unary(u) => u.kind(),
            Op::UnaryGrad(u) => u.kind(),
            Op::Binary(b) => b.kind(),
            Op::Compare(c) => c.kind(),
            Op::Logic(l) => l.kind(),
            Op::LogicalNot => K::LogicalNot,
            Op::ArgReduce { op, .. } => op.kind(),
            Op::Topk { .. } => K::Topk,
            Op::Argsort { .. } => K::Argsort,
            Op::Bincount { .. } => K::Bincount,
            Op::OneHot { .. } => K::OneHot,
            Op::Cumsum { .. } => K::Cumsum,
            Op::IndexAdd { .. } => K::IndexAdd,
            Op::ScatterAdd { .. } => K::ScatterAdd,
            Op::Reduce { op, .. } => op.kind(),
            Op::Clamp { .. } => K::Clamp,
            Op::Pow { .. } => K::Pow,
            Op::Matmul => K::Matmul,
            Op::Reshape { .. } => K::Reshape,
            Op::Transpose { .. } => K::Transpose,
            Op::Expand { .. } => K::Expand,
            Op::Concat { .. } => K::Concat,
            Op::Slice { .. } => K::Slice,
            Op::IndexSelect { .. } => K::IndexSelect,
            Op::Gather { .. } => K::Gather,
            Op::GatherGrad { .. } => K::GatherGrad,
            Op::Where => K::Where,
            Op::Softmax => K::Softmax,
            Op::LogSoftmax => K::LogSoftmax,
            Op::LayerNorm { .. } => K::LayerNorm,
            Op::RmsNorm { .. } => K::RmsNorm,
            Op::Sdpa { .. } => K::Sdpa,
            Op::CrossEntropy => K::CrossEntropy,
            Op::Embedding => K::Embedding,
            Op::Cast { .. } => K::Cast,
            Op::Dropout { .. } => K::Dropout,
            Op::ScaledMatmul => K::ScaledMatmul,
            Op::SliceGrad { .. } => K::SliceGrad,
            Op::IndexSelectGrad { .. } => K::IndexSelectGrad,
            Op::ClampGrad { .. } => K::ClampGrad,
            Op::SoftmaxGrad => K::SoftmaxGrad,
            Op::LogSoftmaxGrad => K::LogSoftmaxGrad,
            Op::LayerNormGrad { .. } => K::LayerNormGrad,
            Op::RmsNormGrad { .. } => K::RmsNormGrad,
            Op::SdpaGrad { .. } => K::SdpaGrad,
            Op::CrossEntropyGrad => K::CrossEntropyGrad,
            Op::EmbeddingGrad { .. } => K::EmbeddingGrad,
            Op::AmaxGrad { .. } => K::AmaxGrad,
            Op::MatmulT { .. } => K::MatmulT,
        }
    }

    /// The catalog entry of this op's kind.
    pub fn info(&self) -> &'static OpInfo {
        self.kind().info()
    }

    /// The DSL name of this op's kind.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Whether the op is elementwise over one input (`exp`, `relu`, `clamp`, `pow`, ...).
    pub fn is_unary_elementwise(&self) -> bool {
        matches!(self, Op::Unary(_) | Op::Clamp { .. } | Op::Pow { .. })
    }

    /// Whether the op is a broadcasting binary elementwise op.
    pub fn is_binary_elementwise(&self) -> bool {
        matches!(self, Op::Binary(_))
    }

    /// The inputs (by position) whose values are indices into another operand or a class count:
    /// what a comparison feeding them selects (the routing rule of docs/policies.md).
    pub fn index_inputs(&self) -> &'static [usize] {
        match self {
            Op::Embedding | Op::IndexSelect { .. } | Op::Gather { .. } | Op::CrossEntropy => &[1],
            Op::IndexAdd { .. } | Op::ScatterAdd { .. } => &[1],
            Op::OneHot { .. } | Op::Bincount { .. } => &[0],
            _ => &[],
        }
    }

    /// Whether the value is resident (fed or held for the whole step, like inputs and
    /// parameters) rather than computed.
    pub fn is_resident(&self) -> bool {
        matches!(self, Op::Input | Op::Param { .. } | Op::ConstantData { .. })
    }

    /// Attributes as `key=value` text for dumps and reports (empty when there are none).
    pub fn attrs_text(&self) -> String {
        match self {
            Op::Constant { value } => format!("value={value}"),
            Op::Param { init } if *init != Init::Auto => format!("init={init:?}"),
            Op::Clamp { min, max } | Op::ClampGrad { min, max } => format!("min={min}, max={max}"),
            Op::Reduce { axes, keepdim, .. } | Op::AmaxGrad { axes, keepdim } => {
                format!("axes={axes:?}, keepdim={keepdim}")
            }
            Op::ConstantData { value } => format!("values={}", value.numel()),
            Op::Arange { start, step } => format!("start={start}, step={step}"),
            Op::Pow { exponent } => format!("exponent={exponent}"),
            Op::IndexSelect { axis } | Op::Gather { axis } => format!("axis={axis}"),
            Op::IndexAdd { axis } | Op::ScatterAdd { axis } => format!("axis={axis}"),
            Op::ArgReduce { axis, keepdim, .. } => format!("axis={axis}, keepdim={keepdim}"),
            Op::Topk { k, axis, largest } => format!("k={k}, axis={axis}, largest={largest}"),
            Op::Argsort { axis, descending } => format!("axis={axis}, descending={descending}"),
            Op::Bincount { bins } => format!("bins={bins}"),
            Op::OneHot { classes, dtype } => format!("classes={classes}, dtype={dtype}"),
            Op::Cumsum { axis, reverse } => format!("axis={axis}, reverse={reverse}"),
            Op::IndexSelectGrad { axis, dim } | Op::GatherGrad { axis, dim } => format!("axis={axis}, dim={dim}"),
            Op::SliceGrad { axis, start, dim } => format!("axis={axis}, start={start}, dim={dim}"),
            Op::RmsNorm { eps } | Op::RmsNormGrad { eps } => format!("eps={eps}"),
            Op::Sdpa { causal, scale, layout } | Op::SdpaGrad { causal, scale, layout } => match layout {
                AttnLayout::HeadMajor => format!("causal={causal}, scale={scale}"),
                AttnLayout::TokenMajor => format!("causal={causal}, scale={scale}, layout=token_major"),
            },
            Op::Reshape { shape } | Op::Expand { shape } => format!("shape={shape:?}"),
            Op::Transpose { perm } => format!("perm={perm:?}"),
            Op::Concat { axis } => format!("axis={axis}"),
            Op::LayerNorm { eps } | Op::LayerNormGrad { eps } => format!("eps={eps}"),
            Op::Cast { dtype } => format!("dtype={dtype}"),
            Op::Dropout { p, seed, key } => format!("p={p}, seed={seed}, key={key}"),
            Op::Slice { axis, start, len } => format!("axis={axis}, start={start}, len={len}"),
            Op::EmbeddingGrad { rows } => format!("rows={rows}"),
            Op::MatmulT { ta, tb, fold } => format!("ta={ta}, tb={tb}, fold={fold}"),
            // No attributes (listed: a new op is a compile error here until its attributes are).
            Op::Param { .. } | Op::Input | Op::Unary(_) | Op::UnaryGrad(_) | Op::Binary(_) | Op::Compare(_) => {
                String::new()
            }
            Op::Logic(_) | Op::LogicalNot => String::new(),
            Op::Where | Op::Softmax | Op::LogSoftmax | Op::CrossEntropy | Op::Embedding | Op::ScaledMatmul => {
                String::new()
            }
            Op::Matmul | Op::SoftmaxGrad | Op::LogSoftmaxGrad | Op::CrossEntropyGrad => String::new(),
        }
    }

    /// The shape and dtype this op produces from inputs of the given shapes and dtypes, or a
    /// message saying what is wrong (the caller adds the op name and source location).
    pub fn infer(&self, inputs: &[Meta<'_>]) -> Result<(Shape, DType), String> {
        let arity = self.info().arity;
        if !arity.accepts(inputs.len()) {
            return Err(match arity {
                Arity::Fixed(k) => format!("takes {k} input(s), got {}", inputs.len()),
                Arity::Variadic => "takes at least one input".to_string(),
            });
        }
        infer::infer(self, inputs)
    }

    /// The shape and dtype this op would produce from these inputs: [`Op::infer`]'s answer where
    /// it has one, else a best guess (a matmul's `[.., m, n]`, a reshape's target, the
    /// broadcast of the inputs, the first input's shape), so that a value poisoned by a shape
    /// error still has a plausible shape and the model code after it runs on to the point where
    /// the error is reported.
    pub fn guess(&self, inputs: &[Meta<'_>]) -> (Vec<usize>, DType) {
        if let Ok((shape, dtype)) = self.infer(inputs) {
            return (shape.into_vec(), dtype);
        }
        let Some(&(first, dtype)) = inputs.first() else {
            return (Vec::new(), DType::F32);
        };
        let last_of = |k: usize| inputs.get(k).and_then(|m| m.0.last().copied());
        let shape = match self {
            Op::Matmul | Op::MatmulT { .. } | Op::ScaledMatmul => {
                let lead = &first[..first.len().saturating_sub(1)];
                lead.iter().copied().chain([last_of(1).unwrap_or(1)]).collect()
            }
            Op::Reshape { shape } | Op::Expand { shape } => Shape::from_slice(shape),
            // The fused value: the output with the log-sum-exp column, `[.., t, dv + 1]`.
            Op::Sdpa { .. } => {
                first[..first.len().saturating_sub(1)].iter().copied().chain([last_of(2).unwrap_or(0) + 1]).collect()
            }
            Op::Reduce { axes, keepdim, .. } if axes.iter().all(|&a| a < first.len()) => reduced(first, axes, *keepdim),
            _ => {
                let first = Shape::from_slice(first);
                inputs.iter().try_fold(first.clone(), |acc, m| broadcast(&acc, m.0)).unwrap_or(first)
            }
        };
        let dtype = match self {
            Op::Compare(_) | Op::Logic(_) | Op::LogicalNot => DType::Bool,
            Op::ArgReduce { .. } | Op::Topk { .. } | Op::Argsort { .. } | Op::Bincount { .. } => DType::I64,
            Op::Cast { dtype } | Op::OneHot { dtype, .. } => *dtype,
            Op::ScaledMatmul => DType::F32,
            _ => dtype,
        };
        (shape.into_vec(), dtype)
    }

    /// Floating-point operations to compute this op once (multiply-adds count as two).
    pub fn flops(&self, inputs: &[Meta<'_>], out: &[usize]) -> u64 {
        let n = numel(out) as u64;
        let in0 = inputs.first().map_or(0, |m| numel(m.0) as u64);
        match self {
            Op::Unary(u) => u.flops_per_element() * n,
            Op::UnaryGrad(u) => u.flops_per_element() * n,
            Op::Binary(b) => b.flops_per_element() * n,
            Op::Compare(c) => c.flops_per_element() * n,
            Op::Logic(l) => l.flops_per_element() * n,
            Op::LogicalNot | Op::Cumsum { .. } | Op::OneHot { .. } => n,
            Op::ArgReduce { op, .. } => op.flops_per_element() * in0,
            // A comparison sort of every row.
            Op::Topk { axis, .. } | Op::Argsort { axis, .. } => {
                let len = inputs[0].0.get(*axis).copied().unwrap_or(1).max(2) as u64;
                in0 * (64 - (len - 1).leading_zeros()) as u64
            }
            Op::Bincount { .. } => in0,
            Op::IndexAdd { .. } | Op::ScatterAdd { .. } => n + inputs.get(2).map_or(0, |m| numel(m.0) as u64),
            Op::Reduce { op, .. } => op.flops_per_element() * in0,
            Op::Matmul | Op::ScaledMatmul => {
                let k = inputs[0].0.last().copied().unwrap_or(1) as u64;
                2 * n * k
            }
            Op::MatmulT { ta, fold, .. } => {
                // The contracted length: every row of `a` for a fold, else its k axis.
                let a = inputs[0].0;
                let k = match (fold, ta) {
                    (true, _) => numel(&a[..a.len() - 1]),
                    (false, true) => a[a.len() - 2],
                    (false, false) => a[a.len() - 1],
                };
                2 * n * k as u64
            }
            Op::Sdpa { layout, causal, .. } | Op::SdpaGrad { layout, causal, .. } => {
                // q·kᵀ and p·v per (query, key) pair (halved when causal); the backward also
                // recomputes the scores and forms dp, ds·k and the two key-side products.
                let AttnDims { outer, heads, tq, tk, d, dv } = layout.dims(inputs[0].0, inputs[1].0, inputs[2].0);
                let pairs = (outer * heads) as u64 * (tq * tk) as u64 / if *causal { 2 } else { 1 };
                let per_pair = if matches!(self, Op::Sdpa { .. }) { 2 * (d + dv) + 5 } else { 4 * d + 4 * dv + 8 };
                pairs * per_pair as u64
            }
            // Leaves, views and copies: no arithmetic.
            Op::Input | Op::Param { .. } | Op::ConstantData { .. } | Op::Reshape { .. } | Op::Transpose { .. } => 0,
            Op::Expand { .. } | Op::Slice { .. } | Op::SliceGrad { .. } => 0,
            Op::Constant { .. } | Op::Arange { .. } | Op::Concat { .. } | Op::Cast { .. } | Op::Embedding => 0,
            Op::IndexSelect { .. } | Op::Gather { .. } | Op::Where => 0,
            Op::Softmax | Op::LogSoftmax | Op::CrossEntropy => 5 * in0,
            Op::LayerNorm { .. } => 8 * in0,
            Op::RmsNorm { .. } => 4 * in0,
            Op::LayerNormGrad { .. } => 12 * in0,
            Op::RmsNormGrad { .. } => 8 * in0,
            Op::SoftmaxGrad | Op::LogSoftmaxGrad | Op::CrossEntropyGrad => 5 * n,
            Op::EmbeddingGrad { .. } | Op::IndexSelectGrad { .. } | Op::GatherGrad { .. } => numel(inputs[1].0) as u64,
            Op::Pow { .. } => 6 * n,
            Op::Clamp { .. } | Op::ClampGrad { .. } | Op::Dropout { .. } | Op::AmaxGrad { .. } => n,
        }
    }
}

mod infer;

#[cfg(test)]
mod tests {
    use super::*;

    /// One op of each kind, so the exhaustive matches above are checked against the catalog.
    pub(crate) fn example(kind: OpKind) -> Op {
        use OtherKind as K;
        let other = match kind.member() {
            Member::UnaryOp(u) => return Op::Unary(u),
            Member::UnaryGradOp(u) => return Op::UnaryGrad(u),
            Member::BinaryOp(b) => return Op::Binary(b),
            Member::CompareOp(c) => return Op::Compare(c),
            Member::LogicOp(l) => return Op::Logic(l),
            Member::ArgReduceOp(op) => return Op::ArgReduce { op, axis: 0, keepdim: false },
            Member::ReduceOp(op) => return Op::Reduce { op, axes: vec![0], keepdim: false },
            Member::Other(other) => other,
        };
        match other {
            K::Input => Op::Input,
            K::Param => Op::Param { init: Init::Auto },
            K::Constant => Op::Constant { value: 1.0 },
            K::ConstantData => {
                Op::ConstantData { value: Arc::new(HostTensor::f32(vec![1], vec![1.0]).expect("one element for [1]")) }
            }
            K::Arange => Op::Arange { start: 0.0, step: 1.0 },
            K::Clamp => Op::Clamp { min: 0.0, max: 1.0 },
            K::Pow => Op::Pow { exponent: 2.0 },
            K::Matmul => Op::Matmul,
            K::Reshape => Op::Reshape { shape: vec![1] },
            K::Transpose => Op::Transpose { perm: vec![0] },
            K::Expand => Op::Expand { shape: vec![1] },
            K::Concat => Op::Concat { axis: 0 },
            K::Slice => Op::Slice { axis: 0, start: 0, len: 1 },
            K::IndexSelect => Op::IndexSelect { axis: 0 },
            K::Where => Op::Where,
            K::LogicalNot => Op::LogicalNot,
            K::Topk => Op::Topk { k: 1, axis: 0, largest: true },
            K::Argsort => Op::Argsort { axis: 0, descending: false },
            K::Bincount => Op::Bincount { bins: 4 },
            K::OneHot => Op::OneHot { classes: 4, dtype: DType::F32 },
            K::Cumsum => Op::Cumsum { axis: 0, reverse: false },
            K::IndexAdd => Op::IndexAdd { axis: 0 },
            K::ScatterAdd => Op::ScatterAdd { axis: 0 },
            K::Gather => Op::Gather { axis: 0 },
            K::GatherGrad => Op::GatherGrad { axis: 0, dim: 2 },
            K::Softmax => Op::Softmax,
            K::LogSoftmax => Op::LogSoftmax,
            K::LayerNorm => Op::LayerNorm { eps: 1e-5 },
            K::RmsNorm => Op::RmsNorm { eps: 1e-5 },
            K::Sdpa => Op::Sdpa { causal: true, scale: 0.5, layout: AttnLayout::HeadMajor },
            K::CrossEntropy => Op::CrossEntropy,
            K::Embedding => Op::Embedding,
            K::Cast => Op::Cast { dtype: DType::F32 },
            K::Dropout => Op::Dropout { p: 0.1, seed: 0, key: 0 },
            K::ScaledMatmul => Op::ScaledMatmul,
            K::SliceGrad => Op::SliceGrad { axis: 0, start: 0, dim: 2 },
            K::IndexSelectGrad => Op::IndexSelectGrad { axis: 0, dim: 2 },
            K::ClampGrad => Op::ClampGrad { min: 0.0, max: 1.0 },
            K::SoftmaxGrad => Op::SoftmaxGrad,
            K::LogSoftmaxGrad => Op::LogSoftmaxGrad,
            K::LayerNormGrad => Op::LayerNormGrad { eps: 1e-5 },
            K::RmsNormGrad => Op::RmsNormGrad { eps: 1e-5 },
            K::SdpaGrad => Op::SdpaGrad { causal: true, scale: 0.5, layout: AttnLayout::HeadMajor },
            K::CrossEntropyGrad => Op::CrossEntropyGrad,
            K::EmbeddingGrad => Op::EmbeddingGrad { rows: 1 },
            K::AmaxGrad => Op::AmaxGrad { axes: vec![0], keepdim: false },
            K::MatmulT => Op::MatmulT { ta: true, tb: false, fold: false },
        }
    }

    #[test]
    fn every_kind_has_an_op() {
        for kind in OpKind::all() {
            assert_eq!(example(kind).kind(), kind);
        }
    }

    #[test]
    fn shape_rules() {
        let f = DType::F32;
        assert_eq!(Op::Matmul.infer(&[(&[3, 2, 4], f), (&[4, 5], f)]).unwrap().0, Shape::from_slice(&[3, 2, 5]));
        assert!(Op::Matmul.infer(&[(&[2, 4], f), (&[3, 5], f)]).unwrap_err().contains("inner dimensions"));
        assert!(Op::Binary(BinaryOp::Add)
            .infer(&[(&[2], f), (&[2], DType::BF16)])
            .unwrap_err()
            .contains("dtypes differ"));
        let r = Op::Reshape { shape: vec![5] }.infer(&[(&[2, 3], f)]);
        assert!(r.unwrap_err().contains("6 elements"));
        let t = Op::Transpose { perm: vec![1, 0, 2] }.infer(&[(&[2, 3, 4], f)]).unwrap();
        assert_eq!(t.0, Shape::from_slice(&[3, 2, 4]));
        assert!(Op::Transpose { perm: vec![0, 0] }.infer(&[(&[2, 3], f)]).is_err());
        let ce = Op::CrossEntropy.infer(&[(&[4, 10], f), (&[4], DType::I64)]).unwrap();
        assert_eq!(ce, (Shape::from_slice(&[]), f));
        assert!(Op::CrossEntropy.infer(&[(&[4, 10], f), (&[5], DType::I64)]).is_err());
        let e = Op::Embedding.infer(&[(&[10, 3], f), (&[2, 5], DType::I64)]).unwrap();
        assert_eq!(e.0, Shape::from_slice(&[2, 5, 3]));
        let c = Op::Concat { axis: 1 }.infer(&[(&[2, 3], f), (&[2, 4], f)]).unwrap();
        assert_eq!(c.0, Shape::from_slice(&[2, 7]));
        assert!(Op::Unary(UnaryOp::Neg).infer(&[]).unwrap_err().contains("takes 1 input"));
        let mt = |ta, tb, fold| Op::MatmulT { ta, tb, fold };
        assert_eq!(
            mt(true, false, false).infer(&[(&[3, 4, 2], f), (&[4, 5], f)]).unwrap().0,
            Shape::from_slice(&[3, 2, 5])
        );
        assert_eq!(
            mt(false, true, false).infer(&[(&[2, 4], f), (&[3, 5, 4], f)]).unwrap().0,
            Shape::from_slice(&[3, 2, 5])
        );
        assert_eq!(mt(true, true, false).infer(&[(&[4, 2], f), (&[5, 4], f)]).unwrap().0, Shape::from_slice(&[2, 5]));
        assert_eq!(
            mt(true, false, true).infer(&[(&[3, 7, 2], f), (&[3, 7, 5], f)]).unwrap().0,
            Shape::from_slice(&[2, 5])
        );
        assert!(mt(false, true, false).infer(&[(&[2, 4], f), (&[5, 3], f)]).unwrap_err().contains("inner dimensions"));
        let fold_err = mt(true, false, true).infer(&[(&[3, 7, 2], f), (&[1, 7, 5], f)]).unwrap_err();
        assert!(fold_err.contains("same leading axes"), "{fold_err}");
        assert!(mt(false, false, true).infer(&[(&[7, 2], f), (&[7, 5], f)]).unwrap_err().contains("fold"));
        let s = Op::ScaledMatmul.infer(&[(&[2, 4], DType::F8E4M3), (&[4, 3], DType::F8E4M3), (&[], f), (&[], f)]);
        assert_eq!(s.unwrap(), (Shape::from_slice(&[2, 3]), f));
    }
}
