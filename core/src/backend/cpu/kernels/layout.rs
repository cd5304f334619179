//! Views materialised as copies: `reshape`, `transpose`, `expand`, `concat`, `slice`.
//!
//! These move raw elements of any dtype (fp8 as its byte, i64 as is) without converting them.

use super::strided::strided_copy;
use super::{finish_raw, node_err, per_elem, split, Elem, KernelCall};
use crate::dtype::DType;
use crate::error::Result;
use crate::host::HostTensor;
use crate::shape::{broadcast_strides, strides};

/// The elements of `x` as `E` (the dispatch picked `E` from `x`'s dtype).
fn elems<'a, E: Elem>(call: &KernelCall<'_>, x: &'a HostTensor) -> Result<&'a [E]> {
    E::slice(x.data()).ok_or_else(|| node_err(call, format!("unexpected input dtype {}", x.dtype())))
}

/// Same elements, the call's shape (copied on the kernels' threads).
pub(super) fn reshape(call: &KernelCall<'_>, x: &HostTensor) -> Result<HostTensor> {
    fn run<E: Elem>(call: &KernelCall<'_>, x: &HostTensor) -> Result<HostTensor> {
        finish_raw(call, split::par_copy(elems::<E>(call, x)?))
    }
    per_elem!(x.dtype(), run(call, x))
}

fn view<E: Elem>(call: &KernelCall<'_>, x: &HostTensor, base: usize, steps: &[usize]) -> Result<HostTensor> {
    finish_raw(call, strided_copy(elems::<E>(call, x)?, base, call.out_shape, steps))
}

/// Output axis `i` is input axis `perm[i]`.
pub(super) fn transpose(call: &KernelCall<'_>, x: &HostTensor, perm: &[usize]) -> Result<HostTensor> {
    let own = strides(x.shape());
    let steps: Vec<usize> = perm.iter().map(|&p| own[p]).collect();
    per_elem!(x.dtype(), view(call, x, 0, &steps))
}

/// Broadcast copy: size-1 (and missing leading) axes step by 0.
pub(super) fn expand(call: &KernelCall<'_>, x: &HostTensor) -> Result<HostTensor> {
    let steps = broadcast_strides(x.shape(), call.out_shape);
    per_elem!(x.dtype(), view(call, x, 0, &steps))
}

/// `len` entries of `axis` from `start` (the length is the output shape's).
pub(super) fn slice(call: &KernelCall<'_>, x: &HostTensor, axis: usize, start: usize) -> Result<HostTensor> {
    let steps = strides(x.shape());
    let base = start * steps.get(axis).copied().unwrap_or(0);
    per_elem!(x.dtype(), view(call, x, base, &steps))
}

/// Joins inputs along `axis`: each outer index takes one contiguous chunk from every input.
pub(super) fn concat(call: &KernelCall<'_>, xs: &[&HostTensor], axis: usize) -> Result<HostTensor> {
    fn run<E: Elem>(call: &KernelCall<'_>, xs: &[&HostTensor], axis: usize) -> Result<HostTensor> {
        let outer: usize = call.out_shape[..axis].iter().product();
        let inner: usize = call.out_shape[axis + 1..].iter().product();
        let parts = xs.iter().map(|x| Ok((elems::<E>(call, x)?, x.shape()[axis] * inner)));
        let parts: Vec<(&[E], usize)> = parts.collect::<Result<_>>()?;
        let mut out = Vec::with_capacity(call.out_shape.iter().product());
        for o in 0..outer {
            for (data, chunk) in &parts {
                out.extend_from_slice(&data[o * chunk..(o + 1) * chunk]);
            }
        }
        finish_raw(call, out)
    }
    let dtype: DType = call.out_dtype;
    per_elem!(dtype, run(call, xs, axis))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::dtype::DType;
    use crate::host::{HostData, HostTensor};
    use crate::op::Op;
    use crate::shape::strides;

    #[test]
    fn transpose_with_a_three_axis_perm() {
        let shape = [2, 3, 4];
        let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
        let perm = vec![2, 0, 1];
        let y = run(&Op::Transpose { perm: perm.clone() }, &[&t32(&shape, &x)]).unwrap();
        assert_eq!(y.shape(), &[4, 2, 3]);
        let got = y.to_f32_vec();
        let st = strides(&shape);
        for a in 0..4 {
            for b in 0..2 {
                for c in 0..3 {
                    // out[a][b][c] = x[b][c][a]
                    assert_eq!(got[a * 6 + b * 3 + c], x[b * st[0] + c * st[1] + a]);
                }
            }
        }
    }

    #[test]
    fn transpose_last_two_axes_of_a_batch() {
        let (b, r, c) = (3, 33, 40);
        let x: Vec<f64> = (0..b * r * c).map(|i| i as f64).collect();
        let y = run(&Op::Transpose { perm: vec![0, 2, 1] }, &[&t64(&[b, r, c], &x)]).unwrap();
        let got = y.to_f64_vec();
        for k in 0..b {
            for i in 0..c {
                for j in 0..r {
                    assert_eq!(got[k * r * c + i * r + j], x[k * r * c + j * c + i]);
                }
            }
        }
    }

    #[test]
    fn expand_reshape_slice_concat() {
        let x = t32(&[2, 1], &[1.0, 2.0]);
        let e = run(&Op::Expand { shape: vec![3, 2, 2] }, &[&x]).unwrap();
        assert_eq!(e.to_f32_vec(), [1.0, 1.0, 2.0, 2.0].repeat(3));
        let r = run(&Op::Reshape { shape: vec![4, 3] }, &[&e]).unwrap();
        assert_eq!(r.shape(), &[4, 3]);
        let a = t32(&[2, 3], &[0., 1., 2., 3., 4., 5.]);
        let s = run(&Op::Slice { axis: 1, start: 1, len: 2 }, &[&a]).unwrap();
        assert_eq!(s.to_f32_vec(), [1., 2., 4., 5.]);
        let b = t32(&[2, 1], &[9., 8.]);
        let c = run(&Op::Concat { axis: 1 }, &[&a, &b, &a]).unwrap();
        assert_eq!(c.shape(), &[2, 7]);
        assert_eq!(c.to_f32_vec(), [0., 1., 2., 9., 0., 1., 2., 3., 4., 5., 8., 3., 4., 5.]);
        let c0 = run(&Op::Concat { axis: 0 }, &[&a, &a]).unwrap();
        assert_eq!(c0.to_f32_vec(), [0., 1., 2., 3., 4., 5., 0., 1., 2., 3., 4., 5.]);
    }

    #[test]
    fn layout_ops_copy_raw_i64_and_fp8() {
        let ids = ti64(&[2, 2], &[1, 2, 3, i64::MAX]);
        let t = run(&Op::Transpose { perm: vec![1, 0] }, &[&ids]).unwrap();
        assert_eq!(t.data(), &HostData::I64(vec![1, 3, 2, i64::MAX]));
        // Every e5m2 byte, NaN patterns included, survives untouched.
        let bytes: Vec<u8> = (0..=255).collect();
        let f8 = HostTensor::new(vec![16, 16], HostData::F8E5M2(bytes.clone())).unwrap();
        let s = run(&Op::Slice { axis: 0, start: 4, len: 2 }, &[&f8]).unwrap();
        assert_eq!(s.dtype(), DType::F8E5M2);
        assert_eq!(s.data(), &HostData::F8E5M2(bytes[64..96].to_vec()));
        let c = run(&Op::Concat { axis: 0 }, &[&f8, &f8]).unwrap();
        assert_eq!(c.data(), &HostData::F8E5M2([bytes.clone(), bytes].concat()));
    }

    #[test]
    fn empty_tensors_and_scalars() {
        let e = t32(&[0, 3], &[]);
        let t = run(&Op::Transpose { perm: vec![1, 0] }, &[&e]).unwrap();
        assert_eq!(t.shape(), &[3, 0]);
        let s = t32(&[], &[5.0]);
        let x = run(&Op::Expand { shape: vec![2, 2] }, &[&s]).unwrap();
        assert_eq!(x.to_f32_vec(), [5.0; 4]);
    }
}
