//! Ops: a catalog kind plus its attributes, with the shape/dtype rule and FLOP count of each.
//!
//! The list of kinds and their flags live in [`remat_catalog`]; this module gives each kind its
//! attributes ([`Op`]), its shape and dtype rule ([`Op::infer`]) and its cost ([`Op::flops`]),
//! all by exhaustive matches so no kind can be missed. Gradient rules are in `autodiff::rules`,
//! kernels in the backends.

use crate::dtype::DType;
use crate::shape::{broadcast, broadcasts_to, fmt_shape, numel, reduced};
pub use remat_catalog::{Arity, OpInfo, OpKind, CATALOG};

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
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Neg,
    Exp,
    Log,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
    Abs,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Square,
    Clamp {
        min: f64,
        max: f64,
    },
    Sum {
        axes: Vec<usize>,
        keepdim: bool,
    },
    Mean {
        axes: Vec<usize>,
        keepdim: bool,
    },
    Amax {
        axes: Vec<usize>,
        keepdim: bool,
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
    Softmax,
    LogSoftmax,
    LayerNorm {
        eps: f64,
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
    Slice {
        axis: usize,
        start: usize,
        len: usize,
    },
    Sign,
    MaximumMask,
    ClampGrad {
        min: f64,
        max: f64,
    },
    ReluGrad,
    GeluGrad,
    SoftmaxGrad,
    LogSoftmaxGrad,
    LayerNormGrad {
        eps: f64,
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
            Op::Add => K::Add,
            Op::Sub => K::Sub,
            Op::Mul => K::Mul,
            Op::Div => K::Div,
            Op::Maximum => K::Maximum,
            Op::Neg => K::Neg,
            Op::Exp => K::Exp,
            Op::Log => K::Log,
            Op::Sin => K::Sin,
            Op::Cos => K::Cos,
            Op::Tanh => K::Tanh,
            Op::Sigmoid => K::Sigmoid,
            Op::Relu => K::Relu,
            Op::Gelu => K::Gelu,
            Op::Abs => K::Abs,
            Op::Sqrt => K::Sqrt,
            Op::Rsqrt => K::Rsqrt,
            Op::Reciprocal => K::Reciprocal,
            Op::Square => K::Square,
            Op::Clamp { .. } => K::Clamp,
            Op::Sum { .. } => K::Sum,
            Op::Mean { .. } => K::Mean,
            Op::Amax { .. } => K::Amax,
            Op::Matmul => K::Matmul,
            Op::Reshape { .. } => K::Reshape,
            Op::Transpose { .. } => K::Transpose,
            Op::Expand { .. } => K::Expand,
            Op::Concat { .. } => K::Concat,
            Op::Softmax => K::Softmax,
            Op::LogSoftmax => K::LogSoftmax,
            Op::LayerNorm { .. } => K::LayerNorm,
            Op::CrossEntropy => K::CrossEntropy,
            Op::Embedding => K::Embedding,
            Op::Cast { .. } => K::Cast,
            Op::Dropout { .. } => K::Dropout,
            Op::ScaledMatmul => K::ScaledMatmul,
            Op::Slice { .. } => K::Slice,
            Op::Sign => K::Sign,
            Op::MaximumMask => K::MaximumMask,
            Op::ClampGrad { .. } => K::ClampGrad,
            Op::ReluGrad => K::ReluGrad,
            Op::GeluGrad => K::GeluGrad,
            Op::SoftmaxGrad => K::SoftmaxGrad,
            Op::LogSoftmaxGrad => K::LogSoftmaxGrad,
            Op::LayerNormGrad { .. } => K::LayerNormGrad,
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

    /// Whether the op is elementwise over one input (`exp`, `relu`, ...).
    pub fn is_unary_elementwise(&self) -> bool {
        use OpKind as K;
        matches!(
            self.kind(),
            K::Neg
                | K::Exp
                | K::Log
                | K::Sin
                | K::Cos
                | K::Tanh
                | K::Sigmoid
                | K::Relu
                | K::Gelu
                | K::Abs
                | K::Sqrt
                | K::Rsqrt
                | K::Reciprocal
                | K::Square
                | K::Clamp
                | K::Sign
        )
    }

    /// Whether the op is a broadcasting binary elementwise op.
    pub fn is_binary_elementwise(&self) -> bool {
        use OpKind as K;
        matches!(self.kind(), K::Add | K::Sub | K::Mul | K::Div | K::Maximum | K::MaximumMask)
    }

    /// Attributes as `key=value` text for dumps and reports (empty when there are none).
    pub fn attrs_text(&self) -> String {
        match self {
            Op::Constant { value } => format!("value={value}"),
            Op::Param { init } if *init != Init::Auto => format!("init={init:?}"),
            Op::Clamp { min, max } | Op::ClampGrad { min, max } => format!("min={min}, max={max}"),
            Op::Sum { axes, keepdim }
            | Op::Mean { axes, keepdim }
            | Op::Amax { axes, keepdim }
            | Op::AmaxGrad { axes, keepdim } => {
                format!("axes={axes:?}, keepdim={keepdim}")
            }
            Op::Reshape { shape } | Op::Expand { shape } => format!("shape={shape:?}"),
            Op::Transpose { perm } => format!("perm={perm:?}"),
            Op::Concat { axis } => format!("axis={axis}"),
            Op::LayerNorm { eps } | Op::LayerNormGrad { eps } => format!("eps={eps}"),
            Op::Cast { dtype } => format!("dtype={dtype}"),
            Op::Dropout { p, seed, key } => format!("p={p}, seed={seed}, key={key}"),
            Op::Slice { axis, start, len } => format!("axis={axis}, start={start}, len={len}"),
            Op::EmbeddingGrad { rows } => format!("rows={rows}"),
            Op::MatmulT { ta, tb, fold } => format!("ta={ta}, tb={tb}, fold={fold}"),
            _ => String::new(),
        }
    }

    /// The shape and dtype this op produces from inputs of the given shapes and dtypes, or a
    /// message saying what is wrong (the caller adds the op name and source location).
    pub fn infer(&self, inputs: &[Meta<'_>]) -> Result<(Vec<usize>, DType), String> {
        let arity = self.info().arity;
        if !arity.accepts(inputs.len()) {
            return Err(match arity {
                Arity::Fixed(k) => format!("takes {k} input(s), got {}", inputs.len()),
                Arity::Variadic => "takes at least one input".to_string(),
            });
        }
        infer::infer(self, inputs)
    }

    /// Floating-point operations to compute this op once (multiply-adds count as two).
    pub fn flops(&self, inputs: &[Meta<'_>], out: &[usize]) -> u64 {
        let n = numel(out) as u64;
        let in0 = inputs.first().map_or(0, |m| numel(m.0) as u64);
        match self.kind() {
            OpKind::Matmul | OpKind::ScaledMatmul => {
                let k = inputs[0].0.last().copied().unwrap_or(1) as u64;
                2 * n * k
            }
            OpKind::MatmulT => {
                // The contracted length: every row of `a` for a fold, else its k axis.
                let a = inputs[0].0;
                let k = match self {
                    Op::MatmulT { fold: true, .. } => numel(&a[..a.len() - 1]),
                    Op::MatmulT { ta: true, .. } => a[a.len() - 2],
                    _ => a[a.len() - 1],
                };
                2 * n * k as u64
            }
            OpKind::Input | OpKind::Param | OpKind::Reshape | OpKind::Transpose | OpKind::Expand => 0,
            OpKind::Constant | OpKind::Concat | OpKind::Slice | OpKind::Cast | OpKind::Embedding => 0,
            OpKind::Sum | OpKind::Mean | OpKind::Amax => in0,
            OpKind::Softmax | OpKind::LogSoftmax | OpKind::CrossEntropy => 5 * in0,
            OpKind::LayerNorm => 8 * in0,
            OpKind::LayerNormGrad => 12 * in0,
            OpKind::SoftmaxGrad | OpKind::LogSoftmaxGrad | OpKind::CrossEntropyGrad => 5 * n,
            OpKind::EmbeddingGrad => numel(inputs[1].0) as u64,
            OpKind::Gelu | OpKind::GeluGrad => 10 * n,
            OpKind::Exp | OpKind::Log | OpKind::Sin | OpKind::Cos | OpKind::Tanh | OpKind::Sigmoid => 4 * n,
            _ => n,
        }
    }
}

mod infer;

#[cfg(test)]
mod tests {
    use super::*;

    /// One op of each kind, so the exhaustive matches above are checked against the catalog.
    pub(crate) fn example(kind: OpKind) -> Op {
        use OpKind as K;
        let axes = vec![0];
        match kind {
            K::Input => Op::Input,
            K::Param => Op::Param { init: Init::Auto },
            K::Constant => Op::Constant { value: 1.0 },
            K::Add => Op::Add,
            K::Sub => Op::Sub,
            K::Mul => Op::Mul,
            K::Div => Op::Div,
            K::Maximum => Op::Maximum,
            K::Neg => Op::Neg,
            K::Exp => Op::Exp,
            K::Log => Op::Log,
            K::Sin => Op::Sin,
            K::Cos => Op::Cos,
            K::Tanh => Op::Tanh,
            K::Sigmoid => Op::Sigmoid,
            K::Relu => Op::Relu,
            K::Gelu => Op::Gelu,
            K::Abs => Op::Abs,
            K::Sqrt => Op::Sqrt,
            K::Rsqrt => Op::Rsqrt,
            K::Reciprocal => Op::Reciprocal,
            K::Square => Op::Square,
            K::Clamp => Op::Clamp { min: 0.0, max: 1.0 },
            K::Sum => Op::Sum { axes, keepdim: false },
            K::Mean => Op::Mean { axes, keepdim: false },
            K::Amax => Op::Amax { axes, keepdim: false },
            K::Matmul => Op::Matmul,
            K::Reshape => Op::Reshape { shape: vec![1] },
            K::Transpose => Op::Transpose { perm: vec![0] },
            K::Expand => Op::Expand { shape: vec![1] },
            K::Concat => Op::Concat { axis: 0 },
            K::Softmax => Op::Softmax,
            K::LogSoftmax => Op::LogSoftmax,
            K::LayerNorm => Op::LayerNorm { eps: 1e-5 },
            K::CrossEntropy => Op::CrossEntropy,
            K::Embedding => Op::Embedding,
            K::Cast => Op::Cast { dtype: DType::F32 },
            K::Dropout => Op::Dropout { p: 0.1, seed: 0, key: 0 },
            K::ScaledMatmul => Op::ScaledMatmul,
            K::Slice => Op::Slice { axis: 0, start: 0, len: 1 },
            K::Sign => Op::Sign,
            K::MaximumMask => Op::MaximumMask,
            K::ClampGrad => Op::ClampGrad { min: 0.0, max: 1.0 },
            K::ReluGrad => Op::ReluGrad,
            K::GeluGrad => Op::GeluGrad,
            K::SoftmaxGrad => Op::SoftmaxGrad,
            K::LogSoftmaxGrad => Op::LogSoftmaxGrad,
            K::LayerNormGrad => Op::LayerNormGrad { eps: 1e-5 },
            K::CrossEntropyGrad => Op::CrossEntropyGrad,
            K::EmbeddingGrad => Op::EmbeddingGrad { rows: 1 },
            K::AmaxGrad => Op::AmaxGrad { axes, keepdim: false },
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
        assert_eq!(Op::Matmul.infer(&[(&[3, 2, 4], f), (&[4, 5], f)]).unwrap().0, vec![3, 2, 5]);
        assert!(Op::Matmul.infer(&[(&[2, 4], f), (&[3, 5], f)]).unwrap_err().contains("inner dimensions"));
        assert!(Op::Add.infer(&[(&[2], f), (&[2], DType::BF16)]).unwrap_err().contains("dtypes differ"));
        let r = Op::Reshape { shape: vec![5] }.infer(&[(&[2, 3], f)]);
        assert!(r.unwrap_err().contains("6 elements"));
        let t = Op::Transpose { perm: vec![1, 0, 2] }.infer(&[(&[2, 3, 4], f)]).unwrap();
        assert_eq!(t.0, vec![3, 2, 4]);
        assert!(Op::Transpose { perm: vec![0, 0] }.infer(&[(&[2, 3], f)]).is_err());
        let ce = Op::CrossEntropy.infer(&[(&[4, 10], f), (&[4], DType::I64)]).unwrap();
        assert_eq!(ce, (vec![], f));
        assert!(Op::CrossEntropy.infer(&[(&[4, 10], f), (&[5], DType::I64)]).is_err());
        let e = Op::Embedding.infer(&[(&[10, 3], f), (&[2, 5], DType::I64)]).unwrap();
        assert_eq!(e.0, vec![2, 5, 3]);
        let c = Op::Concat { axis: 1 }.infer(&[(&[2, 3], f), (&[2, 4], f)]).unwrap();
        assert_eq!(c.0, vec![2, 7]);
        assert!(Op::Neg.infer(&[]).unwrap_err().contains("takes 1 input"));
        let mt = |ta, tb, fold| Op::MatmulT { ta, tb, fold };
        assert_eq!(mt(true, false, false).infer(&[(&[3, 4, 2], f), (&[4, 5], f)]).unwrap().0, vec![3, 2, 5]);
        assert_eq!(mt(false, true, false).infer(&[(&[2, 4], f), (&[3, 5, 4], f)]).unwrap().0, vec![3, 2, 5]);
        assert_eq!(mt(true, true, false).infer(&[(&[4, 2], f), (&[5, 4], f)]).unwrap().0, vec![2, 5]);
        assert_eq!(mt(true, false, true).infer(&[(&[3, 7, 2], f), (&[3, 7, 5], f)]).unwrap().0, vec![2, 5]);
        assert!(mt(false, true, false).infer(&[(&[2, 4], f), (&[5, 3], f)]).unwrap_err().contains("inner dimensions"));
        let fold_err = mt(true, false, true).infer(&[(&[3, 7, 2], f), (&[1, 7, 5], f)]).unwrap_err();
        assert!(fold_err.contains("same leading axes"), "{fold_err}");
        assert!(mt(false, false, true).infer(&[(&[7, 2], f), (&[7, 5], f)]).unwrap_err().contains("fold"));
        let s = Op::ScaledMatmul.infer(&[(&[2, 4], DType::F8E4M3), (&[4, 3], DType::F8E4M3), (&[], f), (&[], f)]);
        assert_eq!(s.unwrap(), (vec![2, 3], f));
    }
}
