//! The gradient rule of every op, written with catalog ops.
//!
//! Each rule reads the smallest set of forward values it can (the output where that is cheaper
//! than the input: `exp`, `tanh`, `sigmoid`, `relu`, `softmax`), since whatever it reads must be
//! saved or recomputed.

use super::Backward;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{NodeId, Shape};
use crate::op::{BinaryOp, Op, ReduceOp, UnaryGradOp, UnaryOp};
use smallvec::{smallvec, SmallVec};

/// Which inputs (by position) gradients flow into. Ids and targets are integers (no gradient);
/// `scaled_matmul`'s scales are treated as constants.
pub(super) fn differentiable_inputs(op: &Op, arity: usize) -> SmallVec<[usize; 4]> {
    match op {
        Op::CrossEntropy => smallvec![0],
        Op::Embedding => smallvec![0],
        Op::IndexSelect { .. } | Op::Gather { .. } => smallvec![0],
        Op::Where => smallvec![1, 2],
        Op::Compare(_) => smallvec![],
        // Integer and boolean results (and one-hot rows of integer ids): nothing to differentiate.
        Op::Logic(_) | Op::LogicalNot | Op::ArgReduce { .. } | Op::Topk { .. } | Op::Argsort { .. } => smallvec![],
        Op::Bincount { .. } | Op::OneHot { .. } => smallvec![],
        Op::Cumsum { .. } => smallvec![0],
        Op::IndexAdd { .. } | Op::ScatterAdd { .. } => smallvec![0, 2],
        Op::ScaledMatmul => smallvec![0, 1],
        // Every input (listed: a new op is a compile error here until its gradient inputs are).
        Op::Unary(_) | Op::Binary(_) | Op::Reduce { .. } | Op::Clamp { .. } | Op::Pow { .. } | Op::Matmul => {
            (0..arity).collect()
        }
        Op::Reshape { .. } | Op::Transpose { .. } | Op::Expand { .. } | Op::Concat { .. } | Op::Slice { .. } => {
            (0..arity).collect()
        }
        Op::Softmax | Op::LogSoftmax | Op::LayerNorm { .. } | Op::RmsNorm { .. } | Op::Sdpa { .. } => {
            (0..arity).collect()
        }
        Op::Cast { .. } | Op::Dropout { .. } | Op::MatmulT { .. } => (0..arity).collect(),
        // Leaves have no inputs; backward-only ops are never differentiated again.
        Op::Input | Op::Param { .. } | Op::Constant { .. } | Op::ConstantData { .. } | Op::Arange { .. } => smallvec![],
        Op::SliceGrad { .. } | Op::IndexSelectGrad { .. } | Op::GatherGrad { .. } | Op::ClampGrad { .. } => {
            (0..arity).collect()
        }
        Op::UnaryGrad(_) | Op::SoftmaxGrad | Op::LogSoftmaxGrad | Op::LayerNormGrad { .. } => (0..arity).collect(),
        Op::RmsNormGrad { .. } | Op::SdpaGrad { .. } | Op::CrossEntropyGrad | Op::EmbeddingGrad { .. } => {
            (0..arity).collect()
        }
        Op::AmaxGrad { .. } => (0..arity).collect(),
    }
}

/// Each input that needs a gradient, with its contribution (inline: a node has a few inputs).
pub(super) type Contributions = SmallVec<[(NodeId, NodeId); 4]>;

/// The gradient contributions of node `id` (output gradient `g`) to its inputs that need one.
/// Forward node `id` is read from the joint graph under construction, whose first nodes are the
/// forward graph's: its op, inputs and their shapes are copied out first, as the rules append to
/// that graph.
pub(super) fn backprop(bw: &mut Backward, id: NodeId, g: NodeId, needs: &[bool]) -> Result<Contributions> {
    let node = bw.graph.node(id);
    let wanted: SmallVec<[usize; 4]> = differentiable_inputs(&node.op, node.inputs.len())
        .into_iter()
        .filter(|&k| needs[node.inputs[k].index()])
        .collect();
    if wanted.is_empty() {
        return Ok(Contributions::new());
    }
    let (op, x) = (node.op.clone(), node.inputs.clone());
    let x = &x;
    let shapes: SmallVec<[Shape; 4]> = x.iter().map(|&i| bw.graph.node(i).shape.clone()).collect();
    let gd = bw.dtype(g);
    let shape_of = |k: usize| shapes[k].clone();
    let mut out: SmallVec<[(usize, NodeId); 4]> = SmallVec::new();
    match &op {
        Op::Input | Op::Param { .. } | Op::Constant { .. } | Op::ConstantData { .. } | Op::Arange { .. } => {}
        Op::Compare(_) | Op::Logic(_) | Op::LogicalNot | Op::ArgReduce { .. } | Op::Topk { .. } => {}
        Op::Argsort { .. } | Op::Bincount { .. } | Op::OneHot { .. } => {}
        // Integer remainder: i64 operands never need a gradient.
        Op::Binary(BinaryOp::Rem) => {}
        Op::Cumsum { axis, reverse } => out.push((0, bw.op(Op::Cumsum { axis: *axis, reverse: !reverse }, &[g])?)),
        Op::IndexAdd { axis } => {
            out.push((0, g));
            if wanted.contains(&2) {
                out.push((2, bw.op(Op::IndexSelect { axis: *axis }, &[g, x[1]])?));
            }
        }
        Op::ScatterAdd { axis } => {
            out.push((0, g));
            if wanted.contains(&2) {
                out.push((2, bw.op(Op::Gather { axis: *axis }, &[g, x[1]])?));
            }
        }
        Op::Unary(u) => out.push((0, unary_grad(bw, *u, x[0], id, g)?)),
        Op::Pow { exponent } => {
            // d(x^p)/dx = p·x^(p−1).
            let p = bw.scalar(*exponent, gd);
            let xp = bw.op(Op::Pow { exponent: exponent - 1.0 }, &[x[0]])?;
            let gp = bw.op(Op::Binary(BinaryOp::Mul), &[g, p])?;
            out.push((0, bw.op(Op::Binary(BinaryOp::Mul), &[gp, xp])?));
        }
        Op::Where => {
            let zero = bw.scalar(0.0, gd);
            if wanted.contains(&1) {
                let ga = bw.op(Op::Where, &[x[0], g, zero])?;
                out.push((1, bw.unbroadcast(ga, &shape_of(1))?));
            }
            if wanted.contains(&2) {
                let gb = bw.op(Op::Where, &[x[0], zero, g])?;
                out.push((2, bw.unbroadcast(gb, &shape_of(2))?));
            }
        }
        Op::Slice { axis, start, .. } => {
            let dim = shape_of(0)[*axis];
            out.push((0, bw.op(Op::SliceGrad { axis: *axis, start: *start, dim }, &[g])?));
        }
        Op::IndexSelect { axis } => {
            let dim = shape_of(0)[*axis];
            out.push((0, bw.op(Op::IndexSelectGrad { axis: *axis, dim }, &[x[1], g])?));
        }
        Op::Gather { axis } => {
            let dim = shape_of(0)[*axis];
            out.push((0, bw.op(Op::GatherGrad { axis: *axis, dim }, &[x[1], g])?));
        }
        Op::RmsNorm { eps } => out.push((0, bw.op(Op::RmsNormGrad { eps: *eps }, &[x[0], g])?)),
        Op::Sdpa { causal, scale, layout } => {
            // One fused gradient op; dq, dk and dv are views of its flat result, each one
            // attention's `[t, d]` (or `[t, heads, d]`) block after another.
            let op = Op::SdpaGrad { causal: *causal, scale: *scale, layout: *layout };
            let flat = bw.op(op, &[x[0], x[1], x[2], id, g])?;
            let last = bw.shape(flat).len() - 1;
            let mut start = 0;
            for k in 0..3 {
                let shape = shape_of(k);
                let len: usize = shape[shape.len() - layout.inner_rank()..].iter().product();
                if wanted.contains(&k) {
                    let part = bw.op(Op::Slice { axis: last, start, len }, &[flat])?;
                    out.push((k, bw.op(Op::Reshape { shape: shape.to_vec() }, &[part])?));
                }
                start += len;
            }
        }
        Op::Binary(BinaryOp::Add) => {
            out.push((0, bw.unbroadcast(g, &shape_of(0))?));
            out.push((1, bw.unbroadcast(g, &shape_of(1))?));
        }
        Op::Binary(BinaryOp::Sub) => {
            out.push((0, bw.unbroadcast(g, &shape_of(0))?));
            let neg = bw.op(Op::Unary(UnaryOp::Neg), &[g])?;
            out.push((1, bw.unbroadcast(neg, &shape_of(1))?));
        }
        Op::Binary(BinaryOp::Mul) => {
            if wanted.contains(&0) {
                let ga = bw.op(Op::Binary(BinaryOp::Mul), &[g, x[1]])?;
                out.push((0, bw.unbroadcast(ga, &shape_of(0))?));
            }
            if wanted.contains(&1) {
                let gb = bw.op(Op::Binary(BinaryOp::Mul), &[g, x[0]])?;
                out.push((1, bw.unbroadcast(gb, &shape_of(1))?));
            }
        }
        Op::Binary(BinaryOp::Div) => {
            if wanted.contains(&0) {
                let ga = bw.op(Op::Binary(BinaryOp::Div), &[g, x[1]])?;
                out.push((0, bw.unbroadcast(ga, &shape_of(0))?));
            }
            if wanted.contains(&1) {
                // d(a/b)/db = -(a/b)/b: read the output rather than a.
                let gy = bw.op(Op::Binary(BinaryOp::Mul), &[g, id])?;
                let q = bw.op(Op::Binary(BinaryOp::Div), &[gy, x[1]])?;
                let gb = bw.op(Op::Unary(UnaryOp::Neg), &[q])?;
                out.push((1, bw.unbroadcast(gb, &shape_of(1))?));
            }
        }
        Op::Binary(BinaryOp::Maximum) => {
            let mask = bw.op(Op::Binary(BinaryOp::MaximumMask), &[x[0], x[1]])?;
            let ga = bw.op(Op::Binary(BinaryOp::Mul), &[g, mask])?;
            let gb = bw.op(Op::Binary(BinaryOp::Sub), &[g, ga])?;
            out.push((0, bw.unbroadcast(ga, &shape_of(0))?));
            out.push((1, bw.unbroadcast(gb, &shape_of(1))?));
        }
        Op::Binary(BinaryOp::Minimum) => {
            // min(a, b) = -max(-a, -b): `a` takes the gradient where b > a, half of it on ties.
            let mask = bw.op(Op::Binary(BinaryOp::MaximumMask), &[x[1], x[0]])?;
            let ga = bw.op(Op::Binary(BinaryOp::Mul), &[g, mask])?;
            let gb = bw.op(Op::Binary(BinaryOp::Sub), &[g, ga])?;
            out.push((0, bw.unbroadcast(ga, &shape_of(0))?));
            out.push((1, bw.unbroadcast(gb, &shape_of(1))?));
        }
        Op::Clamp { min, max } => out.push((0, bw.op(Op::ClampGrad { min: *min, max: *max }, &[x[0], g])?)),
        Op::Reduce { op: ReduceOp::Sum | ReduceOp::Mean, axes, keepdim } => {
            let xs = shape_of(0);
            let kept = crate::shape::reduced(&xs, axes, true);
            let gk = if *keepdim { g } else { bw.op(Op::Reshape { shape: kept.into_vec() }, &[g])? };
            let mut ge = bw.op(Op::Expand { shape: xs.to_vec() }, &[gk])?;
            if matches!(op, Op::Reduce { op: ReduceOp::Mean, .. }) {
                let count: usize = axes.iter().map(|&a| xs[a]).product();
                let inv = bw.scalar(1.0 / count as f64, gd);
                ge = bw.op(Op::Binary(BinaryOp::Mul), &[ge, inv])?;
            }
            out.push((0, ge));
        }
        Op::Reduce { op: ReduceOp::Amax, axes, keepdim } => {
            let op = Op::AmaxGrad { axes: axes.clone(), keepdim: *keepdim };
            out.push((0, bw.op(op, &[x[0], id, g])?));
        }
        Op::Matmul => matmul_grads(bw, x[0], x[1], g, &wanted, &mut out)?,
        Op::ScaledMatmul => {
            // Scales are constants: d/da = (g·s_a·s_b)·bᵀ with a, b dequantised to f32.
            let s = bw.op(Op::Binary(BinaryOp::Mul), &[x[2], x[3]])?;
            let gs = bw.op(Op::Binary(BinaryOp::Mul), &[g, s])?;
            let a = bw.op(Op::Cast { dtype: DType::F32 }, &[x[0]])?;
            let b = bw.op(Op::Cast { dtype: DType::F32 }, &[x[1]])?;
            // Positions 0 and 1 map back to the fp8 operands, which receive f32 gradients.
            matmul_grads(bw, a, b, gs, &wanted, &mut out)?;
        }
        Op::Reshape { .. } => out.push((0, bw.op(Op::Reshape { shape: shape_of(0).to_vec() }, &[g])?)),
        Op::Transpose { perm } => {
            let mut inverse = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i;
            }
            out.push((0, bw.op(Op::Transpose { perm: inverse }, &[g])?));
        }
        Op::Expand { .. } => out.push((0, bw.unbroadcast(g, &shape_of(0))?)),
        Op::Concat { axis } => {
            let mut start = 0;
            for k in 0..x.len() {
                let len = shape_of(k)[*axis];
                if wanted.contains(&k) {
                    out.push((k, bw.op(Op::Slice { axis: *axis, start, len }, &[g])?));
                }
                start += len;
            }
        }
        Op::Softmax => out.push((0, bw.op(Op::SoftmaxGrad, &[id, g])?)),
        Op::LogSoftmax => out.push((0, bw.op(Op::LogSoftmaxGrad, &[id, g])?)),
        Op::LayerNorm { eps } => out.push((0, bw.op(Op::LayerNormGrad { eps: *eps }, &[x[0], g])?)),
        Op::CrossEntropy => out.push((0, bw.op(Op::CrossEntropyGrad, &[x[0], x[1], g])?)),
        Op::Embedding => {
            let rows = shape_of(0)[0];
            out.push((0, bw.op(Op::EmbeddingGrad { rows }, &[x[1], g])?));
        }
        Op::Cast { .. } => {
            let target = bw.dtype(x[0]).grad_dtype();
            out.push((0, bw.cast_to(g, target)?));
        }
        Op::Dropout { .. } => out.push((0, bw.op(op.clone(), &[g])?)),
        Op::SliceGrad { .. }
        | Op::IndexSelectGrad { .. }
        | Op::GatherGrad { .. }
        | Op::UnaryGrad(_)
        | Op::RmsNormGrad { .. }
        | Op::SdpaGrad { .. }
        | Op::Binary(BinaryOp::MaximumMask)
        | Op::ClampGrad { .. }
        | Op::SoftmaxGrad
        | Op::LogSoftmaxGrad
        | Op::LayerNormGrad { .. }
        | Op::CrossEntropyGrad
        | Op::EmbeddingGrad { .. }
        | Op::AmaxGrad { .. }
        | Op::MatmulT { .. } => {
            return Err(Error::Node {
                node: id,
                op: op.name(),
                message: "internal backward op in a forward graph: it has no gradient".into(),
            })
        }
    }
    Ok(out.into_iter().filter(|(k, _)| wanted.contains(k)).map(|(k, grad)| (x[k], grad)).collect())
}

/// The gradient of unary op `u` at input `x` with output `y`, from the incoming gradient `g`:
/// one rule per op, reading exactly what the op's catalog row says ([`UnaryOp::reads`]).
fn unary_grad(bw: &mut Backward, u: UnaryOp, x: NodeId, y: NodeId, g: NodeId) -> Result<NodeId> {
    use BinaryOp::{Div, Mul, Sub};
    let gd = bw.dtype(g);
    let mul = |bw: &mut Backward, a, b| bw.op(Op::Binary(Mul), &[a, b]);
    let fused = |bw: &mut Backward, k: UnaryGradOp, v| bw.op(Op::UnaryGrad(k), &[v, g]);
    match u {
        UnaryOp::Neg => bw.op(Op::Unary(UnaryOp::Neg), &[g]),
        UnaryOp::Exp => mul(bw, g, y),
        UnaryOp::Log => bw.op(Op::Binary(Div), &[g, x]),
        UnaryOp::Sin => {
            let c = bw.op(Op::Unary(UnaryOp::Cos), &[x])?;
            mul(bw, g, c)
        }
        UnaryOp::Cos => {
            let s = bw.op(Op::Unary(UnaryOp::Sin), &[x])?;
            let gs = mul(bw, g, s)?;
            bw.op(Op::Unary(UnaryOp::Neg), &[gs])
        }
        UnaryOp::Tanh => {
            let one = bw.scalar(1.0, gd);
            let y2 = bw.op(Op::Unary(UnaryOp::Square), &[y])?;
            let d = bw.op(Op::Binary(Sub), &[one, y2])?;
            mul(bw, g, d)
        }
        UnaryOp::Sigmoid => {
            let one = bw.scalar(1.0, gd);
            let q = bw.op(Op::Binary(Sub), &[one, y])?;
            let d = mul(bw, y, q)?;
            mul(bw, g, d)
        }
        UnaryOp::Relu => fused(bw, UnaryGradOp::ReluGrad, y),
        UnaryOp::Gelu => fused(bw, UnaryGradOp::GeluGrad, x),
        UnaryOp::Silu => fused(bw, UnaryGradOp::SiluGrad, x),
        UnaryOp::Abs => fused(bw, UnaryGradOp::AbsGrad, x),
        UnaryOp::Sqrt => {
            let half = bw.scalar(0.5, gd);
            let gh = mul(bw, g, half)?;
            bw.op(Op::Binary(Div), &[gh, y])
        }
        UnaryOp::Rsqrt => {
            // d(x^-1/2)/dx = -x^-3/2 / 2 = -y^3 / 2.
            let c = bw.scalar(-0.5, gd);
            let y2 = bw.op(Op::Unary(UnaryOp::Square), &[y])?;
            let y3 = mul(bw, y2, y)?;
            let gc = mul(bw, g, c)?;
            mul(bw, gc, y3)
        }
        UnaryOp::Reciprocal => {
            let y2 = bw.op(Op::Unary(UnaryOp::Square), &[y])?;
            let gy = mul(bw, g, y2)?;
            bw.op(Op::Unary(UnaryOp::Neg), &[gy])
        }
        UnaryOp::Softplus => {
            let s = bw.op(Op::Unary(UnaryOp::Sigmoid), &[x])?;
            mul(bw, g, s)
        }
        UnaryOp::Square => {
            let two = bw.scalar(2.0, gd);
            let x2 = mul(bw, x, two)?;
            mul(bw, g, x2)
        }
    }
}

/// Gradients of `a · b` (batched, broadcast batch dims) for the wanted operands.
fn matmul_grads(
    bw: &mut Backward,
    a: NodeId,
    b: NodeId,
    g: NodeId,
    wanted: &[usize],
    out: &mut SmallVec<[(usize, NodeId); 4]>,
) -> Result<()> {
    let (a_rank, b_rank) = (bw.shape(a).len(), bw.shape(b).len());
    // Operands are read transposed by the product itself (`matmul_t`): no transposed copies.
    if wanted.contains(&0) {
        let ga = bw.op(Op::MatmulT { ta: false, tb: true, fold: false }, &[g, b])?;
        let a_shape = Shape::from_slice(bw.shape(a));
        out.push((0, bw.unbroadcast(ga, &a_shape)?));
    }
    if wanted.contains(&1) {
        let gb = if b_rank == 2 && a_rank > 2 {
            // A shared weight: the batch folds into the rows, one GEMM instead of a batch and a sum.
            bw.op(Op::MatmulT { ta: true, tb: false, fold: true }, &[a, g])?
        } else {
            let gb = bw.op(Op::MatmulT { ta: true, tb: false, fold: false }, &[a, g])?;
            let b_shape = Shape::from_slice(bw.shape(b));
            bw.unbroadcast(gb, &b_shape)?
        };
        out.push((1, gb));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::op::{GradReads, Op, UnaryOp};
    use crate::{DType, JointGraph, Trace};

    /// Every unary op's gradient rule reads what its catalog row declares: the partitioner keeps
    /// (or recomputes) exactly those values, so a row that lied would cost memory or break a plan.
    #[test]
    fn every_unary_gradient_reads_what_its_row_declares() {
        for &u in UnaryOp::ALL {
            let t = Trace::new();
            let w = t.param("w", &[4], DType::F32);
            // A computed `x` whose own gradient (`g · 2`) does not read it, nor does `sum`'s
            // read `y`: whatever the backward reads of the two, the rule of `u` reads.
            let x = &w * 2.0;
            let y = x.apply(Op::Unary(u), &[]);
            let g = t.finish(&y.sum(&[0], false)).unwrap();
            let (xi, yi) = (x.id().unwrap().index(), y.id().unwrap().index());
            let reads = JointGraph::new(&g).unwrap().backward_reads();
            let expected = match u.reads() {
                GradReads::Nothing => (false, false),
                GradReads::Input => (true, false),
                GradReads::Output => (false, true),
            };
            assert_eq!((reads[xi], reads[yi]), expected, "{}: declared {:?}", u.name(), u.reads());
        }
    }
}
