//! The shape and dtype rule of every op ([`super::Op::infer`]).

use super::*;
use crate::shape::Shape;

/// Arithmetic needs a float dtype wide enough to compute in: fp8 values can only be cast,
/// viewed, concatenated or fed to `scaled_matmul`.
fn float(what: &str, m: Meta<'_>) -> Result<(), String> {
    if m.1 == DType::Bool {
        Err(format!("{what} is bool: arithmetic needs numbers, cast the mask to f32 first or use `where`"))
    } else if m.1.is_fp8() {
        Err(format!("{what} is {}: cast fp8 values to a wider dtype first (or use scaled_matmul)", m.1))
    } else if m.1.is_float() {
        Ok(())
    } else {
        Err(format!("{what} must be floating point, got {}", m.1))
    }
}

/// What each binary op computes on: every op on floats (but `rem`), and on integers all but the
/// internal mask.
fn binary_dtype(op: BinaryOp, m: Meta<'_>) -> Result<(), String> {
    match (op, m.1) {
        (BinaryOp::Rem, d) if d.is_int() => Ok(()),
        (BinaryOp::Rem, d) if d.is_float() && !d.is_fp8() => {
            Err(format!("operands are {d}: rem is integer remainder (i64, i32); for floats use a - b * floor(a / b)"))
        }
        (BinaryOp::MaximumMask, _) => float("operands", m),
        (_, d) if d.is_int() => Ok(()),
        (_, DType::Bool) => Err("operands are bool: use logical_and/or/xor, or cast to i64 or f32 first".into()),
        _ => float("operands", m),
    }
}

/// Logic needs `bool`.
fn boolean(what: &str, m: Meta<'_>) -> Result<(), String> {
    if m.1 == DType::Bool {
        Ok(())
    } else {
        Err(format!("{what} must be bool (from a comparison or a cast), got {}", m.1))
    }
}

/// Ordering, picking and sums need numbers: a float (not fp8) or an integer.
fn numbers(what: &str, m: Meta<'_>) -> Result<(), String> {
    if m.1.is_int() {
        Ok(())
    } else {
        float(what, m)
    }
}

fn axis_of(axis: usize, shape: &[usize]) -> Result<(), String> {
    if axis < shape.len() {
        Ok(())
    } else {
        Err(format!("axis {axis} out of range for rank {}", shape.len()))
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

/// The shape `matmul_t` multiplies: `a` and `b` with the last two axes of each flagged operand
/// swapped, or for `fold` the 2-D `[rows, m]ᵀ · [rows, n]` of every leading axis.
fn matmul_t_shape(a: &[usize], b: &[usize], ta: bool, tb: bool, fold: bool) -> Result<Shape, String> {
    if a.len() < 2 || b.len() < 2 {
        return matmul_shape(a, b);
    }
    let swap = |s: &[usize], t: bool| {
        let mut s = Shape::from_slice(s);
        let r = s.len();
        if t {
            s.swap(r - 2, r - 1);
        }
        s
    };
    if !fold {
        return matmul_shape(&swap(a, ta), &swap(b, tb));
    }
    if !ta || tb {
        return Err("fold contracts the leading axes of a transposed `a` with a plain `b` (ta, not tb)".into());
    }
    let (lead_a, lead_b) = (&a[..a.len() - 1], &b[..b.len() - 1]);
    if lead_a != lead_b {
        return Err(format!("fold needs the same leading axes, got {} and {}", fmt_shape(a), fmt_shape(b)));
    }
    Ok(smallvec::smallvec![a[a.len() - 1], b[b.len() - 1]])
}

/// Batched matmul shape rule shared by `matmul` and `scaled_matmul`.
fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Shape, String> {
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
    let mut out = batch;
    out.extend([m, n]);
    Ok(out)
}

fn scalar_f32(what: &str, m: Meta<'_>) -> Result<(), String> {
    if m.1 != DType::F32 || numel(m.0) != 1 {
        return Err(format!("{what} must be a single f32 value, got {} {}", fmt_shape(m.0), m.1));
    }
    Ok(())
}

fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Shape, String> {
    broadcast(a, b).ok_or_else(|| format!("shapes {} and {} do not broadcast", fmt_shape(a), fmt_shape(b)))
}

/// Checks q, k, v of fused attention in `layout` (`q [.., tq, d]`, `k [.., tk, d]`,
/// `v [.., tk, dv]`, each `[.., t, heads, d]` when token-major, with the same leading axes and
/// heads, one float dtype) and returns their dimensions.
fn attention_shapes(x: &[Meta<'_>], scale: f64, layout: AttnLayout) -> Result<AttnDims, String> {
    float("q", x[0])?;
    same_dtype(x[0], x[1])?;
    same_dtype(x[0], x[2])?;
    let (q, k, v) = (x[0].0, x[1].0, x[2].0);
    let inner = layout.inner_rank();
    let form = match layout {
        AttnLayout::HeadMajor => "[.., t, d]",
        AttnLayout::TokenMajor => "[.., t, heads, d] (token-major)",
    };
    if q.len() < inner || k.len() != q.len() || v.len() != q.len() {
        return Err(format!(
            "q, k and v need the same rank >= {inner} ({form}), got {}, {} and {}",
            fmt_shape(q),
            fmt_shape(k),
            fmt_shape(v)
        ));
    }
    let r = q.len();
    if q[..r - inner] != k[..r - inner] || q[..r - inner] != v[..r - inner] {
        return Err(format!(
            "q, k and v need the same leading axes, got {}, {} and {}",
            fmt_shape(q),
            fmt_shape(k),
            fmt_shape(v)
        ));
    }
    if inner == 3 && (q[r - 2] != k[r - 2] || q[r - 2] != v[r - 2]) {
        return Err(format!(
            "q, k and v need the same number of heads (axis {}), got {}, {} and {}",
            r - 2,
            fmt_shape(q),
            fmt_shape(k),
            fmt_shape(v)
        ));
    }
    if q[r - 1] != k[r - 1] {
        return Err(format!("q and k need the same last axis, got {} and {}", fmt_shape(q), fmt_shape(k)));
    }
    if k[r - inner] != v[r - inner] {
        return Err(format!("k and v need the same number of keys, got {} and {}", fmt_shape(k), fmt_shape(v)));
    }
    if !scale.is_finite() || scale <= 0.0 {
        return Err(format!("scale must be positive and finite, got {scale}"));
    }
    Ok(layout.dims(q, k, v))
}

pub(super) fn infer(op: &Op, x: &[Meta<'_>]) -> Result<(Shape, DType), String> {
    let first = x.first().copied().unwrap_or((&[], DType::F32));
    let same = || (Shape::from_slice(first.0), first.1);
    match op {
        Op::Input | Op::Param { .. } | Op::Constant { .. } | Op::ConstantData { .. } | Op::Arange { .. } => {
            Err("leaf ops take their shape and dtype from the trace, not from inputs".into())
        }
        Op::Binary(b) => {
            binary_dtype(*b, x[0])?;
            same_dtype(x[0], x[1])?;
            Ok((broadcast_shape(x[0].0, x[1].0)?, x[0].1))
        }
        Op::Logic(_) => {
            boolean("operands", x[0])?;
            boolean("operands", x[1])?;
            Ok((broadcast_shape(x[0].0, x[1].0)?, DType::Bool))
        }
        Op::LogicalNot => {
            boolean("input", first)?;
            Ok(same())
        }
        Op::ArgReduce { axis, keepdim, .. } => {
            numbers("input", first)?;
            axis_of(*axis, first.0)?;
            if first.0[*axis] == 0 {
                return Err(format!("axis {axis} is empty: no entry to pick"));
            }
            Ok((reduced(first.0, &[*axis], *keepdim), DType::I64))
        }
        Op::Topk { k, axis, .. } => {
            numbers("input", first)?;
            axis_of(*axis, first.0)?;
            if *k > first.0[*axis] {
                return Err(format!("k = {k} is more than the {} entries of axis {axis}", first.0[*axis]));
            }
            let mut out = Shape::from_slice(first.0);
            out[*axis] = *k;
            Ok((out, DType::I64))
        }
        Op::Argsort { axis, .. } => {
            numbers("input", first)?;
            axis_of(*axis, first.0)?;
            Ok((Shape::from_slice(first.0), DType::I64))
        }
        Op::Bincount { bins } => {
            ids(first)?;
            Ok((smallvec::smallvec![*bins], DType::I64))
        }
        Op::OneHot { classes, dtype } => {
            ids(first)?;
            if dtype.is_fp8() {
                return Err(format!("one_hot into {dtype}: use a wider dtype (and cast)"));
            }
            let mut out = Shape::from_slice(first.0);
            out.push(*classes);
            Ok((out, *dtype))
        }
        Op::Cumsum { axis, .. } => {
            numbers("input", first)?;
            axis_of(*axis, first.0)?;
            Ok(same())
        }
        Op::IndexAdd { axis } => {
            numbers("x", x[0])?;
            same_dtype(x[0], x[2])?;
            ids(x[1])?;
            axis_of(*axis, x[0].0)?;
            if x[1].0.len() != 1 {
                return Err(format!("indices must be one axis [k], got {}", fmt_shape(x[1].0)));
            }
            let mut want = Shape::from_slice(x[0].0);
            want[*axis] = x[1].0[0];
            if x[2].0 != &want[..] {
                return Err(format!(
                    "src must be {} (x {} with axis {axis} as long as the {} indices), got {}",
                    fmt_shape(&want),
                    fmt_shape(x[0].0),
                    x[1].0[0],
                    fmt_shape(x[2].0)
                ));
            }
            Ok((Shape::from_slice(x[0].0), x[0].1))
        }
        Op::ScatterAdd { axis } => {
            numbers("x", x[0])?;
            same_dtype(x[0], x[2])?;
            ids(x[1])?;
            let (xs, is, ss) = (x[0].0, x[1].0, x[2].0);
            axis_of(*axis, xs)?;
            if is != ss {
                return Err(format!("indices {} and src {} must have one shape", fmt_shape(is), fmt_shape(ss)));
            }
            if is.len() != xs.len() || (0..xs.len()).any(|i| i != *axis && is[i] != xs[i]) {
                return Err(format!(
                    "indices {} must match x {} on every axis but {axis}",
                    fmt_shape(is),
                    fmt_shape(xs)
                ));
            }
            Ok((Shape::from_slice(xs), x[0].1))
        }
        Op::Compare(_) => {
            if x[0].1.is_fp8() || x[0].1 == DType::Bool {
                return Err(format!("operands are {}: compare numbers (cast to a wider dtype first)", x[0].1));
            }
            same_dtype(x[0], x[1])?;
            Ok((broadcast_shape(x[0].0, x[1].0)?, DType::Bool))
        }
        Op::Where => {
            if x[0].1 != DType::Bool {
                return Err(format!("the condition must be bool (from a comparison), got {}", x[0].1));
            }
            same_dtype(x[1], x[2])?;
            let ab = broadcast_shape(x[1].0, x[2].0)?;
            Ok((broadcast_shape(x[0].0, &ab)?, x[1].1))
        }
        Op::Pow { exponent } => {
            float("input", first)?;
            if !exponent.is_finite() {
                return Err(format!("the exponent must be finite, got {exponent}"));
            }
            Ok(same())
        }
        Op::IndexSelect { axis } => {
            if x[0].1.is_fp8() {
                return Err(format!("input is {}: cast fp8 values to a wider dtype first", x[0].1));
            }
            ids(x[1])?;
            let rank = x[0].0.len();
            if *axis >= rank {
                return Err(format!("axis {axis} out of range for rank {rank}"));
            }
            if x[1].0.len() != 1 {
                return Err(format!("indices must be one axis [k], got {}", fmt_shape(x[1].0)));
            }
            let mut out = Shape::from_slice(x[0].0);
            out[*axis] = x[1].0[0];
            Ok((out, x[0].1))
        }
        Op::Gather { axis } => {
            if x[0].1.is_fp8() {
                return Err(format!("input is {}: cast fp8 values to a wider dtype first", x[0].1));
            }
            ids(x[1])?;
            let (xs, is) = (x[0].0, x[1].0);
            if *axis >= xs.len() {
                return Err(format!("axis {axis} out of range for rank {}", xs.len()));
            }
            if is.len() != xs.len() || (0..xs.len()).any(|i| i != *axis && is[i] != xs[i]) {
                return Err(format!(
                    "indices {} must match input {} on every axis but {axis}",
                    fmt_shape(is),
                    fmt_shape(xs)
                ));
            }
            Ok((Shape::from_slice(is), x[0].1))
        }
        Op::GatherGrad { axis, dim } => {
            ids(x[0])?;
            float("gradient", x[1])?;
            if x[0].0 != x[1].0 || *axis >= x[1].0.len() {
                return Err(format!("gradient {} does not fit indices {}", fmt_shape(x[1].0), fmt_shape(x[0].0)));
            }
            let mut out = Shape::from_slice(x[1].0);
            out[*axis] = *dim;
            Ok((out, x[1].1))
        }
        Op::IndexSelectGrad { axis, dim } => {
            ids(x[0])?;
            float("gradient", x[1])?;
            let g = x[1].0;
            if *axis >= g.len() || x[0].0.len() != 1 || x[0].0[0] != g[*axis] {
                return Err(format!(
                    "gradient {} does not fit indices {} on axis {axis}",
                    fmt_shape(g),
                    fmt_shape(x[0].0)
                ));
            }
            let mut out = Shape::from_slice(g);
            out[*axis] = *dim;
            Ok((out, x[1].1))
        }
        Op::SliceGrad { axis, start, dim } => {
            float("gradient", first)?;
            let len = first.0.get(*axis).copied().ok_or_else(|| format!("axis {axis} out of range"))?;
            slice_range(*start, len, *dim)?;
            let mut out = Shape::from_slice(first.0);
            out[*axis] = *dim;
            Ok((out, first.1))
        }
        Op::RmsNorm { eps } => {
            last_axis("input", first)?;
            if eps.is_nan() || *eps <= 0.0 {
                return Err(format!("eps must be positive, got {eps}"));
            }
            Ok(same())
        }
        Op::Sdpa { scale, layout, .. } => {
            let dims = attention_shapes(x, *scale, *layout)?;
            let mut out = Shape::from_slice(x[0].0);
            let r = out.len();
            out[r - 1] = dims.dv.checked_add(1).ok_or("the value dim is too large")?;
            Ok((out, x[0].1))
        }
        Op::SdpaGrad { scale, layout, .. } => {
            let AttnDims { heads, tq, tk, d, dv, .. } = attention_shapes(&x[..3], *scale, *layout)?;
            let q = x[0].0;
            // The saved output and its gradient: q's shape with `[out | lse]` rows.
            let packed = [&q[..q.len() - 1], &[dv.checked_add(1).ok_or("the value dim is too large")?]].concat();
            for (what, m) in [("the saved output", x[3]), ("the gradient", x[4])] {
                if m.0 != packed.as_slice() {
                    return Err(format!("{what} must be {}, got {}", fmt_shape(&packed), fmt_shape(m.0)));
                }
            }
            let lead = &q[..q.len() - layout.inner_rank()];
            let per_head = tq
                .checked_mul(d)
                .zip(tk.checked_mul(d))
                .zip(tk.checked_mul(dv))
                .and_then(|((a, b), c)| a.checked_add(b)?.checked_add(c));
            let packed_grads =
                per_head.and_then(|p| p.checked_mul(heads)).ok_or("the packed gradients are too large")?;
            Ok((lead.iter().copied().chain([packed_grads]).collect(), x[0].1))
        }
        Op::Clamp { min, max } => {
            float("input", first)?;
            if min > max || min.is_nan() || max.is_nan() {
                return Err(format!("min {min} is above max {max}"));
            }
            Ok(same())
        }
        Op::Reduce { axes, keepdim, .. } => {
            float("input", first)?;
            check_axes(axes, first.0.len())?;
            Ok((reduced(first.0, axes, *keepdim), first.1))
        }
        Op::Matmul => {
            float("operands", x[0])?;
            same_dtype(x[0], x[1])?;
            Ok((matmul_shape(x[0].0, x[1].0)?, x[0].1))
        }
        Op::MatmulT { ta, tb, fold } => {
            float("operands", x[0])?;
            same_dtype(x[0], x[1])?;
            Ok((matmul_t_shape(x[0].0, x[1].0, *ta, *tb, *fold)?, x[0].1))
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
            let (to, from) = (crate::shape::checked_numel(shape), crate::shape::checked_numel(first.0));
            if to.is_none() || to != from {
                return Err(format!(
                    "cannot reshape {} ({} elements) to {} ({} elements)",
                    fmt_shape(first.0),
                    numel(first.0),
                    fmt_shape(shape),
                    numel(shape)
                ));
            }
            Ok((Shape::from_slice(shape), first.1))
        }
        Op::Transpose { perm } => {
            let rank = first.0.len();
            let mut seen = vec![false; rank];
            let valid = perm.len() == rank && perm.iter().all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
            if !valid {
                return Err(format!(
                    "{} is not a permutation of the {rank} axes of {}",
                    fmt_shape(perm),
                    fmt_shape(first.0)
                ));
            }
            Ok((perm.iter().map(|&p| first.0[p]).collect(), first.1))
        }
        Op::Expand { shape } => {
            if !broadcasts_to(first.0, shape) {
                return Err(format!("cannot expand {} to {}", fmt_shape(first.0), fmt_shape(shape)));
            }
            Ok((Shape::from_slice(shape), first.1))
        }
        Op::Concat { axis } => {
            let rank = first.0.len();
            if *axis >= rank {
                return Err(format!("axis {axis} out of range for rank {rank}"));
            }
            let mut out = Shape::from_slice(first.0);
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
                out[*axis] = out[*axis]
                    .checked_add(m.0[*axis])
                    .ok_or_else(|| format!("the concatenated axis {axis} has more than 2^64 elements"))?;
            }
            Ok((out, first.1))
        }
        Op::Slice { axis, start, len } => {
            let dim = first.0.get(*axis).copied().ok_or_else(|| format!("axis {axis} out of range"))?;
            slice_range(*start, *len, dim)?;
            let mut out = Shape::from_slice(first.0);
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
            Ok((Shape::new(), x[0].1))
        }
        Op::Embedding => {
            float("table", x[0])?;
            ids(x[1])?;
            if x[0].0.len() != 2 {
                return Err(format!("table must be [rows, dim], got {}", fmt_shape(x[0].0)));
            }
            Ok((x[1].0.iter().chain(&x[0].0[1..]).copied().collect(), x[0].1))
        }
        // Every dtype to every dtype (the values' rules in `DType`'s docs).
        Op::Cast { dtype } => Ok((Shape::from_slice(first.0), *dtype)),
        Op::Dropout { p, .. } => {
            float("input", first)?;
            if !(0.0..1.0).contains(p) {
                return Err(format!("p must be in [0, 1), got {p}"));
            }
            Ok(same())
        }
        Op::ClampGrad { .. }
        | Op::UnaryGrad(_)
        | Op::SoftmaxGrad
        | Op::LogSoftmaxGrad
        | Op::LayerNormGrad { .. }
        | Op::RmsNormGrad { .. } => {
            if x[0].0 != x[1].0 {
                return Err(format!("gradient {} does not match {}", fmt_shape(x[1].0), fmt_shape(x[0].0)));
            }
            Ok((Shape::from_slice(x[0].0), x[1].1))
        }
        Op::CrossEntropyGrad => {
            infer(&Op::CrossEntropy, &x[..2])?;
            float("gradient", x[2])?;
            if numel(x[2].0) != 1 {
                return Err(format!("the loss gradient must be one value, got {}", fmt_shape(x[2].0)));
            }
            Ok((Shape::from_slice(x[0].0), x[0].1))
        }
        Op::EmbeddingGrad { rows } => {
            ids(x[0])?;
            float("gradient", x[1])?;
            let (g, lead) = (x[1].0, x[0].0);
            if g.len() != lead.len() + 1 || &g[..lead.len()] != lead {
                return Err(format!("gradient {} does not fit ids {}", fmt_shape(g), fmt_shape(lead)));
            }
            Ok((smallvec::smallvec![*rows, g[g.len() - 1]], x[1].1))
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
            Ok((Shape::from_slice(x[0].0), x[2].1))
        }
        Op::Unary(_) => {
            float("input", first)?;
            Ok(same())
        }
    }
}

/// Checks that `start..start + len` lies within a dim of `dim` elements, without wrapping.
fn slice_range(start: usize, len: usize, dim: usize) -> Result<(), String> {
    match start.checked_add(len) {
        Some(end) if end <= dim => Ok(()),
        Some(end) => Err(format!("range {start}..{end} exceeds dim {dim}")),
        None => Err(format!("a range of {len} from {start} exceeds dim {dim} (its end is past 2^64)")),
    }
}
