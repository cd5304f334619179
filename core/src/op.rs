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

mod infer {
    use super::*;

    /// Arithmetic needs a float dtype wide enough to compute in: fp8 values can only be cast,
    /// viewed, concatenated or fed to `scaled_matmul`.
    fn float(what: &str, m: Meta<'_>) -> Result<(), String> {
        if m.1.is_fp8() {
            Err(format!("{what} is {}: cast fp8 values to a wider dtype first (or use scaled_matmul)", m.1))
        } else if m.1.is_float() {
            Ok(())
        } else {
            Err(format!("{what} must be floating point, got {}", m.1))
        }
    }

    fn same_dtype(a: Meta<'_>, b: Meta<'_>) -> Result<(), String> {
        if a.1 == b.1 {
            Ok(())
        } else {
            Err(format!("dtypes differ: {} and {} (cast one of them)", a.1, b.1))
        }
    }

    fn check_axes(axes: &[usize], rank: usize) -> Result<(), String> {
        for (i, &a) in axes.iter().enumerate() {
            if a >= rank {
                return Err(format!("axis {a} out of range for rank {rank}"));
            }
            if axes[..i].contains(&a) {
                return Err(format!("axis {a} listed twice"));
            }
        }
        Ok(())
    }

    fn last_axis(what: &str, m: Meta<'_>) -> Result<(), String> {
        float(what, m)?;
        if m.0.is_empty() {
            return Err(format!("{what} needs at least one axis, got a scalar"));
        }
        Ok(())
    }

    fn ids(m: Meta<'_>) -> Result<(), String> {
        if m.1 == DType::I64 {
            Ok(())
        } else {
            Err(format!("ids/targets must be i64, got {}", m.1))
        }
    }

    /// Batched matmul shape rule shared by `matmul` and `scaled_matmul`.
    fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
        if a.len() < 2 || b.len() < 2 {
            return Err(format!(
                "operands need rank >= 2, got {} and {} (reshape a vector to [1, n] or [n, 1])",
                fmt_shape(a),
                fmt_shape(b)
            ));
        }
        let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
        let (k2, n) = (b[b.len() - 2], b[b.len() - 1]);
        if k != k2 {
            return Err(format!("inner dimensions differ: {} · {} ({k} vs {k2})", fmt_shape(a), fmt_shape(b)));
        }
        let batch = broadcast(&a[..a.len() - 2], &b[..b.len() - 2])
            .ok_or_else(|| format!("batch dimensions of {} and {} do not broadcast", fmt_shape(a), fmt_shape(b)))?;
        Ok([batch, vec![m, n]].concat())
    }

    fn scalar_f32(what: &str, m: Meta<'_>) -> Result<(), String> {
        if m.1 != DType::F32 || numel(m.0) != 1 {
            return Err(format!("{what} must be a single f32 value, got {} {}", fmt_shape(m.0), m.1));
        }
        Ok(())
    }

    pub(super) fn infer(op: &Op, x: &[Meta<'_>]) -> Result<(Vec<usize>, DType), String> {
        let first = x.first().copied().unwrap_or((&[], DType::F32));
        let same = || (first.0.to_vec(), first.1);
        match op {
            Op::Input | Op::Param { .. } | Op::Constant { .. } => {
                Err("leaf ops take their shape and dtype from the trace, not from inputs".into())
            }
            Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Maximum | Op::MaximumMask => {
                float("operands", x[0])?;
                same_dtype(x[0], x[1])?;
                let shape = broadcast(x[0].0, x[1].0).ok_or_else(|| {
                    format!("shapes {} and {} do not broadcast", fmt_shape(x[0].0), fmt_shape(x[1].0))
                })?;
                Ok((shape, x[0].1))
            }
            Op::Clamp { min, max } => {
                float("input", first)?;
                if min > max || min.is_nan() || max.is_nan() {
                    return Err(format!("min {min} is above max {max}"));
                }
                Ok(same())
            }
            Op::Sum { axes, keepdim } | Op::Mean { axes, keepdim } | Op::Amax { axes, keepdim } => {
                float("input", first)?;
                check_axes(axes, first.0.len())?;
                Ok((reduced(first.0, axes, *keepdim), first.1))
            }
            Op::Matmul => {
                float("operands", x[0])?;
                same_dtype(x[0], x[1])?;
                Ok((matmul_shape(x[0].0, x[1].0)?, x[0].1))
            }
            Op::ScaledMatmul => {
                for (what, m) in [("a", x[0]), ("b", x[1])] {
                    if !m.1.is_fp8() {
                        return Err(format!("operand {what} must be fp8 (f8e4m3 or f8e5m2), got {}", m.1));
                    }
                }
                scalar_f32("scale_a", x[2])?;
                scalar_f32("scale_b", x[3])?;
                Ok((matmul_shape(x[0].0, x[1].0)?, DType::F32))
            }
            Op::Reshape { shape } => {
                if numel(shape) != numel(first.0) {
                    return Err(format!(
                        "cannot reshape {} ({} elements) to {} ({} elements)",
                        fmt_shape(first.0),
                        numel(first.0),
                        fmt_shape(shape),
                        numel(shape)
                    ));
                }
                Ok((shape.clone(), first.1))
            }
            Op::Transpose { perm } => {
                let rank = first.0.len();
                let mut seen = vec![false; rank];
                let valid =
                    perm.len() == rank && perm.iter().all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
                if !valid {
                    return Err(format!("{perm:?} is not a permutation of the {rank} axes of {}", fmt_shape(first.0)));
                }
                Ok((perm.iter().map(|&p| first.0[p]).collect(), first.1))
            }
            Op::Expand { shape } => {
                if !broadcasts_to(first.0, shape) {
                    return Err(format!("cannot expand {} to {}", fmt_shape(first.0), fmt_shape(shape)));
                }
                Ok((shape.clone(), first.1))
            }
            Op::Concat { axis } => {
                let rank = first.0.len();
                if *axis >= rank {
                    return Err(format!("axis {axis} out of range for rank {rank}"));
                }
                let mut out = first.0.to_vec();
                out[*axis] = 0;
                for m in x {
                    same_dtype(first, *m)?;
                    let agrees = m.0.len() == rank && (0..rank).all(|i| i == *axis || m.0[i] == first.0[i]);
                    if !agrees {
                        return Err(format!(
                            "shapes {} and {} differ outside axis {axis}",
                            fmt_shape(first.0),
                            fmt_shape(m.0)
                        ));
                    }
                    out[*axis] += m.0[*axis];
                }
                Ok((out, first.1))
            }
            Op::Slice { axis, start, len } => {
                let dim = first.0.get(*axis).copied().ok_or_else(|| format!("axis {axis} out of range"))?;
                if start + len > dim {
                    return Err(format!("range {start}..{} exceeds dim {dim}", start + len));
                }
                let mut out = first.0.to_vec();
                out[*axis] = *len;
                Ok((out, first.1))
            }
            Op::Softmax | Op::LogSoftmax => {
                last_axis("input", first)?;
                Ok(same())
            }
            Op::LayerNorm { eps } => {
                last_axis("input", first)?;
                if eps.is_nan() || *eps <= 0.0 {
                    return Err(format!("eps must be positive, got {eps}"));
                }
                Ok(same())
            }
            Op::CrossEntropy => {
                last_axis("logits", x[0])?;
                ids(x[1])?;
                let lead = &x[0].0[..x[0].0.len() - 1];
                if x[1].0 != lead {
                    return Err(format!(
                        "targets must have shape {} for logits {}, got {}",
                        fmt_shape(lead),
                        fmt_shape(x[0].0),
                        fmt_shape(x[1].0)
                    ));
                }
                Ok((vec![], x[0].1))
            }
            Op::Embedding => {
                float("table", x[0])?;
                ids(x[1])?;
                if x[0].0.len() != 2 {
                    return Err(format!("table must be [rows, dim], got {}", fmt_shape(x[0].0)));
                }
                Ok(([x[1].0, &x[0].0[1..]].concat(), x[0].1))
            }
            Op::Cast { dtype } => {
                if *dtype == DType::I64 && first.1 != DType::I64 {
                    return Err("cannot cast floating values to i64".into());
                }
                Ok((first.0.to_vec(), *dtype))
            }
            Op::Dropout { p, .. } => {
                float("input", first)?;
                if !(0.0..1.0).contains(p) {
                    return Err(format!("p must be in [0, 1), got {p}"));
                }
                Ok(same())
            }
            Op::ClampGrad { .. }
            | Op::ReluGrad
            | Op::GeluGrad
            | Op::SoftmaxGrad
            | Op::LogSoftmaxGrad
            | Op::LayerNormGrad { .. } => {
                if x[0].0 != x[1].0 {
                    return Err(format!("gradient {} does not match {}", fmt_shape(x[1].0), fmt_shape(x[0].0)));
                }
                Ok((x[0].0.to_vec(), x[1].1))
            }
            Op::CrossEntropyGrad => {
                infer(&Op::CrossEntropy, &x[..2])?;
                float("gradient", x[2])?;
                if numel(x[2].0) != 1 {
                    return Err(format!("the loss gradient must be one value, got {}", fmt_shape(x[2].0)));
                }
                Ok((x[0].0.to_vec(), x[0].1))
            }
            Op::EmbeddingGrad { rows } => {
                ids(x[0])?;
                float("gradient", x[1])?;
                let (g, lead) = (x[1].0, x[0].0);
                if g.len() != lead.len() + 1 || &g[..lead.len()] != lead {
                    return Err(format!("gradient {} does not fit ids {}", fmt_shape(g), fmt_shape(lead)));
                }
                Ok((vec![*rows, g[g.len() - 1]], x[1].1))
            }
            Op::AmaxGrad { axes, keepdim } => {
                float("input", x[0])?;
                check_axes(axes, x[0].0.len())?;
                let reduced_shape = reduced(x[0].0, axes, *keepdim);
                if x[1].0 != reduced_shape.as_slice() || x[2].0 != reduced_shape.as_slice() {
                    return Err(format!(
                        "max {} and gradient {} must have the reduced shape {}",
                        fmt_shape(x[1].0),
                        fmt_shape(x[2].0),
                        fmt_shape(&reduced_shape)
                    ));
                }
                Ok((x[0].0.to_vec(), x[2].1))
            }
            Op::Neg
            | Op::Exp
            | Op::Log
            | Op::Sin
            | Op::Cos
            | Op::Tanh
            | Op::Sigmoid
            | Op::Relu
            | Op::Gelu
            | Op::Abs
            | Op::Sqrt
            | Op::Rsqrt
            | Op::Reciprocal
            | Op::Square
            | Op::Sign => {
                float("input", first)?;
                Ok(same())
            }
        }
    }
}

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
        let s = Op::ScaledMatmul.infer(&[(&[2, 4], DType::F8E4M3), (&[4, 3], DType::F8E4M3), (&[], f), (&[], f)]);
        assert_eq!(s.unwrap(), (vec![2, 3], f));
    }
}
