//! Indexing and masks: comparisons (to `bool`), `where`, `index_select` and its scatter-add
//! gradient, the zero-padding gradient of `slice`, and `arange`.

use super::elementwise::broadcast_zip;
use super::{finish, finish_raw, ids, node_err, per_elem, Elem, Float, KernelCall};
use crate::dtype::DType;
use crate::error::Result;
use crate::host::{HostData, HostTensor};
use crate::op::CompareOp;
use crate::shape::{broadcast_strides, numel};

/// `start + i·step` for each element, in the output dtype (integers are rounded).
pub(super) fn arange(call: &KernelCall<'_>, start: f64, step: f64) -> Result<HostTensor> {
    let n = numel(call.out_shape);
    let values: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
    let data = match call.out_dtype {
        DType::I64 => HostData::I64(values.iter().map(|&v| v.round() as i64).collect()),
        DType::I32 => HostData::I32(values.iter().map(|&v| v.round() as i32).collect()),
        d => HostData::from_f64(&values, d),
    };
    HostTensor::new(call.out_shape.to_vec(), data).map_err(|e| node_err(call, e.to_string()))
}

/// `a <op> b`, broadcasting, as `bool`: floats compared in f64, i64 as i64 (both exact).
pub(super) fn compare(call: &KernelCall<'_>, op: CompareOp, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
    if a.dtype() == DType::I64 {
        let f: fn(i64, i64) -> bool = match op {
            CompareOp::Eq => |p, q| p == q,
            CompareOp::Ne => |p, q| p != q,
            CompareOp::Lt => |p, q| p < q,
            CompareOp::Le => |p, q| p <= q,
            CompareOp::Gt => |p, q| p > q,
            CompareOp::Ge => |p, q| p >= q,
        };
        return super::integer::compare(call, f, a, b);
    }
    // Every float dtype is exact in f64.
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let f = |p: f64, q: f64| -> f64 {
        let r = match op {
            CompareOp::Eq => p == q,
            CompareOp::Ne => p != q,
            CompareOp::Lt => p < q,
            CompareOp::Le => p <= q,
            CompareOp::Gt => p > q,
            CompareOp::Ge => p >= q,
        };
        f64::from(u8::from(r))
    };
    let out = broadcast_zip(call.out_shape, (a.shape(), &av[..]), (b.shape(), &bv[..]), f);
    finish_raw(call, out.into_iter().map(|v| v != 0.0).collect::<Vec<bool>>())
}

/// `cond ? a : b` with all three broadcast to the output; raw elements (no conversion).
pub(super) fn select_where(
    call: &KernelCall<'_>,
    c: &HostTensor,
    a: &HostTensor,
    b: &HostTensor,
) -> Result<HostTensor> {
    fn run<E: Elem>(call: &KernelCall<'_>, c: &HostTensor, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
        let cv = <bool as Elem>::slice(c.data()).ok_or_else(|| node_err(call, "the condition must be bool"))?;
        let av = E::slice(a.data()).ok_or_else(|| node_err(call, "unexpected dtype"))?;
        let bv = E::slice(b.data()).ok_or_else(|| node_err(call, "unexpected dtype"))?;
        let out_shape = call.out_shape;
        let (sc, sa, sb) = (
            broadcast_strides(c.shape(), out_shape),
            broadcast_strides(a.shape(), out_shape),
            broadcast_strides(b.shape(), out_shape),
        );
        let n = numel(out_shape);
        let mut out = Vec::with_capacity(n);
        // The innermost axis runs as a tight loop; an odometer moves the offsets over the outer
        // axes, once per row (a per-element odometer cost most of a decoder step's cache update).
        let rank = out_shape.len();
        let row = if rank == 0 { 1 } else { out_shape[rank - 1] };
        let inner = |s: &[usize]| if rank == 0 { 0 } else { s[rank - 1] };
        let (ic, ia, ib) = (inner(&sc), inner(&sa), inner(&sb));
        let outer = &out_shape[..rank.saturating_sub(1)];
        let mut idx = vec![0usize; outer.len()];
        let (mut oc, mut oa, mut ob) = (0usize, 0usize, 0usize);
        for _ in 0..n.checked_div(row).unwrap_or(0) {
            // A last-axis stride is 1 or 0 (broadcast). A contiguous `b` row is copied whole and
            // `a` written over it where the condition holds (a masked update is mostly `b`).
            if ib == 1 {
                let start = out.len();
                out.extend_from_slice(&bv[ob..ob + row]);
                let dst = &mut out[start..];
                if ic == 0 {
                    if cv[oc] {
                        dst.iter_mut().enumerate().for_each(|(i, d)| *d = av[oa + i * ia]);
                    }
                } else {
                    for (i, _) in cv[oc..oc + row].iter().enumerate().filter(|(_, &c)| c) {
                        dst[i] = av[oa + i * ia];
                    }
                }
            } else {
                out.extend((0..row).map(|i| if cv[oc + i * ic] { av[oa + i * ia] } else { bv[ob + i * ib] }));
            }
            for ax in (0..outer.len()).rev() {
                idx[ax] += 1;
                oc += sc[ax];
                oa += sa[ax];
                ob += sb[ax];
                if idx[ax] < outer[ax] {
                    break;
                }
                oc -= sc[ax] * outer[ax];
                oa -= sa[ax] * outer[ax];
                ob -= sb[ax] * outer[ax];
                idx[ax] = 0;
            }
        }
        finish_raw(call, out)
    }
    per_elem!(a.dtype(), run(call, c, a, b))
}

/// Checked indices into an axis of length `dim`, naming the bad one.
pub(super) fn indices(call: &KernelCall<'_>, t: &HostTensor, dim: usize) -> Result<Vec<usize>> {
    ids(call, t)?
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            usize::try_from(v).ok().filter(|&u| u < dim).ok_or_else(|| {
                node_err(call, format!("index {v} at position {i} is out of range for an axis of {dim}"))
            })
        })
        .collect()
}

/// Entries of `axis` picked by `idx` (raw elements of any dtype).
pub(super) fn index_select(call: &KernelCall<'_>, x: &HostTensor, idx: &HostTensor, axis: usize) -> Result<HostTensor> {
    fn run<E: Elem>(call: &KernelCall<'_>, x: &HostTensor, idx: &[usize], axis: usize) -> Result<HostTensor> {
        let xv = E::slice(x.data()).ok_or_else(|| node_err(call, "unexpected dtype"))?;
        let shape = x.shape();
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let dim = shape[axis];
        let mut out = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for &i in idx {
                let at = (o * dim + i) * inner;
                out.extend_from_slice(&xv[at..at + inner]);
            }
        }
        finish_raw(call, out)
    }
    let idx = indices(call, idx, x.shape()[axis])?;
    per_elem!(x.dtype(), run(call, x, &idx, axis))
}

/// Gradient of [`index_select`]: `g`'s entries added into a zero tensor at their indices (in
/// index order, so repeated indices sum deterministically).
pub(super) fn index_select_grad<T: Float>(
    call: &KernelCall<'_>,
    idx: &HostTensor,
    g: &HostTensor,
    axis: usize,
) -> Result<HostTensor> {
    let dim = call.out_shape[axis];
    let idx = indices(call, idx, dim)?;
    let gv = T::read(g.data());
    let outer: usize = call.out_shape[..axis].iter().product();
    let inner: usize = call.out_shape[axis + 1..].iter().product();
    let mut out = vec![T::ZERO; numel(call.out_shape)];
    for o in 0..outer {
        for (k, &i) in idx.iter().enumerate() {
            let src = (o * idx.len() + k) * inner;
            let dst = (o * dim + i) * inner;
            for j in 0..inner {
                out[dst + j] += gv[src + j];
            }
        }
    }
    finish(call, out)
}

/// `out[o, j, i] = x[o, idx[o, j, i], i]` along `axis` (raw elements of any dtype).
pub(super) fn gather(call: &KernelCall<'_>, x: &HostTensor, idx: &HostTensor, axis: usize) -> Result<HostTensor> {
    fn run<E: Elem>(call: &KernelCall<'_>, x: &HostTensor, idx: &[usize], axis: usize) -> Result<HostTensor> {
        let xv = E::slice(x.data()).ok_or_else(|| node_err(call, "unexpected dtype"))?;
        let out_shape = call.out_shape;
        let inner: usize = out_shape[axis + 1..].iter().product();
        let (k, dim) = (out_shape[axis], x.shape()[axis]);
        let out = idx
            .iter()
            .enumerate()
            .map(|(p, &r)| {
                let (o, i) = (p / (k * inner), p % inner);
                xv[(o * dim + r) * inner + i]
            })
            .collect();
        finish_raw(call, out)
    }
    let idx = indices(call, idx, x.shape()[axis])?;
    per_elem!(x.dtype(), run(call, x, &idx, axis))
}

/// Gradient of [`gather`]: each `g[o, j, i]` added at `[o, idx[o, j, i], i]` of zeros, in order.
pub(super) fn gather_grad<T: Float>(
    call: &KernelCall<'_>,
    idx: &HostTensor,
    g: &HostTensor,
    axis: usize,
) -> Result<HostTensor> {
    let dim = call.out_shape[axis];
    let idx = indices(call, idx, dim)?;
    let gv = T::read(g.data());
    let inner: usize = call.out_shape[axis + 1..].iter().product();
    let k = g.shape()[axis];
    let mut out = vec![T::ZERO; numel(call.out_shape)];
    for (p, &r) in idx.iter().enumerate() {
        let (o, i) = (p / (k * inner), p % inner);
        out[(o * dim + r) * inner + i] += gv[p];
    }
    finish(call, out)
}

/// Gradient of `slice`: `g` placed at `start..` of `axis` in zeros of the output shape.
pub(super) fn slice_grad(call: &KernelCall<'_>, g: &HostTensor, axis: usize, start: usize) -> Result<HostTensor> {
    fn run<E: Elem + Default>(call: &KernelCall<'_>, g: &HostTensor, axis: usize, start: usize) -> Result<HostTensor> {
        let gv = E::slice(g.data()).ok_or_else(|| node_err(call, "unexpected dtype"))?;
        let out_shape = call.out_shape;
        let outer: usize = out_shape[..axis].iter().product();
        let inner: usize = out_shape[axis + 1..].iter().product();
        let (dim, len) = (out_shape[axis], g.shape()[axis]);
        let mut out = vec![E::default(); numel(out_shape)];
        for o in 0..outer {
            let src = o * len * inner;
            let dst = (o * dim + start) * inner;
            out[dst..dst + len * inner].copy_from_slice(&gv[src..src + len * inner]);
        }
        finish_raw(call, out)
    }
    // Zero bits are zero in every float format.
    per_elem!(g.dtype(), run(call, g, axis, start))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::host::{HostData, HostTensor};
    use crate::op::{CompareOp, Op};
    use crate::DType;

    #[test]
    fn comparisons_and_where() {
        let a = t32(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let b = t32(&[3], &[2., 2., 2.]);
        let lt = run(&Op::Compare(CompareOp::Lt), &[&a, &b]).unwrap();
        assert_eq!(lt.data(), &HostData::Bool(vec![true, false, false, false, false, false]));
        let ge = run(&Op::Compare(CompareOp::Ge), &[&a, &b]).unwrap();
        assert_eq!(ge.dtype(), DType::Bool);
        let w = run(&Op::Where, &[&lt, &a, &t32(&[], &[-1.])]).unwrap();
        assert_eq!(w.to_f32_vec(), [1., -1., -1., -1., -1., -1.]);
        let col = HostTensor::bool(vec![2, 1], vec![false, true]).unwrap();
        let w = run(&Op::Where, &[&col, &a, &b]).unwrap();
        assert_eq!(w.to_f32_vec(), [2., 2., 2., 4., 5., 6.]);
        let err = run(&Op::Where, &[&a, &a, &b]).unwrap_err().to_string();
        assert!(err.contains("condition must be bool"), "{err}");
        let err = run(&Op::Unary(crate::op::UnaryOp::Exp), &[&lt]).unwrap_err().to_string();
        assert!(err.contains("bool") && err.contains("cast"), "{err}");
    }

    #[test]
    fn index_select_and_its_gradient() {
        let x = t32(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let idx = ti64(&[4], &[2, 0, 2, 1]);
        let y = run(&Op::IndexSelect { axis: 1 }, &[&x, &idx]).unwrap();
        assert_eq!(y.shape(), &[2, 4]);
        assert_eq!(y.to_f32_vec(), [3., 1., 3., 2., 6., 4., 6., 5.]);
        let g = t32(&[2, 4], &[1., 2., 3., 4., 5., 6., 7., 8.]);
        let gx = run(&Op::IndexSelectGrad { axis: 1, dim: 3 }, &[&idx, &g]).unwrap();
        assert_eq!(gx.to_f32_vec(), [2., 4., 4., 6., 8., 12.]);
        let bad = ti64(&[1], &[3]);
        let err = run(&Op::IndexSelect { axis: 1 }, &[&x, &bad]).unwrap_err().to_string();
        assert!(err.contains("index 3 at position 0 is out of range"), "{err}");
    }

    #[test]
    fn gather_picks_per_position() {
        let x = t32(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let idx = ti64(&[2, 2], &[2, 0, 1, 1]);
        let y = run(&Op::Gather { axis: 1 }, &[&x, &idx]).unwrap();
        assert_eq!(y.to_f32_vec(), [3., 1., 5., 5.]);
        let g = t32(&[2, 2], &[1., 2., 3., 4.]);
        let gx = run(&Op::GatherGrad { axis: 1, dim: 3 }, &[&idx, &g]).unwrap();
        assert_eq!(gx.to_f32_vec(), [2., 0., 1., 0., 7., 0.]);
    }

    #[test]
    fn slice_grad_pads_with_zeros_and_arange_counts() {
        let g = t32(&[2, 1], &[7., 8.]);
        let y = run(&Op::SliceGrad { axis: 1, start: 1, dim: 3 }, &[&g]).unwrap();
        assert_eq!(y.to_f32_vec(), [0., 7., 0., 0., 8., 0.]);
    }
}
