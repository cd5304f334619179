//! Sums that run along an axis or into positions: `cumsum`, `index_add`, `scatter_add`, on
//! floats (in the compute type, f32 or f64) and on i64 and i32 (wrapping). Each sums in one fixed order —
//! along the axis, then in index order — so results are the same run to run and thread count to
//! thread count.

use super::index::indices;
use super::{finish, finish_raw, node_err, Elem, Float, KernelCall};
use crate::dtype::DType;
use crate::error::Result;
use crate::host::HostTensor;

/// What the sums add: a float compute type or i64 (wrapping, like PyTorch's integer sums).
trait Sum: Copy {
    fn plus(self, other: Self) -> Self;
}

impl Sum for f32 {
    fn plus(self, other: Self) -> Self {
        self + other
    }
}

impl Sum for f64 {
    fn plus(self, other: Self) -> Self {
        self + other
    }
}

impl Sum for i64 {
    fn plus(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
}

impl Sum for i32 {
    fn plus(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
}

/// Runs `$body` with `$v` bound to each named tensor's values as the sum type of the call (i64,
/// i32, or the float compute type) and `$done` the matching finisher.
macro_rules! per_sum {
    ($call:expr, |$done:ident| $body:expr, $($v:ident = $t:expr),+) => {
        if $call.out_dtype == DType::I64 {
            $( let $v: &[i64] = <i64 as Elem>::slice($t.data()).ok_or_else(|| node_err($call, "expected i64"))?; )+
            let $done = |v: Vec<i64>| finish_raw($call, v);
            $body
        } else if $call.out_dtype == DType::I32 {
            $( let $v: &[i32] = <i32 as Elem>::slice($t.data()).ok_or_else(|| node_err($call, "expected i32"))?; )+
            let $done = |v: Vec<i32>| finish_raw($call, v);
            $body
        } else if $call.out_dtype == DType::F64 {
            $( let $v = &*<f64 as Float>::read($t.data()); )+
            let $done = |v: Vec<f64>| finish($call, v);
            $body
        } else {
            $( let $v = &*<f32 as Float>::read($t.data()); )+
            let $done = |v: Vec<f32>| finish($call, v);
            $body
        }
    };
}

/// `outer`, `dim`, `inner` of `shape` around `axis`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

/// The running sum along `axis`, from the last entry back when `reverse`.
fn running<S: Sum>(values: &[S], shape: &[usize], axis: usize, reverse: bool) -> Vec<S> {
    let (outer, dim, inner) = around(shape, axis);
    let mut out = values.to_vec();
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * dim + j) * inner + i;
            for step in 1..dim {
                let (j, prev) = if reverse { (dim - 1 - step, dim - step) } else { (step, step - 1) };
                out[at(j)] = out[at(j)].plus(out[at(prev)]);
            }
        }
    }
    out
}

/// `cumsum` along `axis`.
pub(super) fn cumsum(call: &KernelCall<'_>, x: &HostTensor, axis: usize, reverse: bool) -> Result<HostTensor> {
    per_sum!(call, |done| done(running(v, x.shape(), axis, reverse)), v = x)
}

/// `x` with `src[.., k, ..]` added at `x[.., idx[k], ..]` along `axis`, in `k` order.
fn add_slices<S: Sum>(x: &[S], shape: &[usize], axis: usize, idx: &[usize], src: &[S]) -> Vec<S> {
    let (outer, dim, inner) = around(shape, axis);
    let mut out = x.to_vec();
    for o in 0..outer {
        for (k, &r) in idx.iter().enumerate() {
            let (from, to) = ((o * idx.len() + k) * inner, (o * dim + r) * inner);
            for j in 0..inner {
                out[to + j] = out[to + j].plus(src[from + j]);
            }
        }
    }
    out
}

/// `index_add`: `x` plus `src`'s slices at `idx` along `axis`.
pub(super) fn index_add(
    call: &KernelCall<'_>,
    x: &HostTensor,
    idx: &HostTensor,
    src: &HostTensor,
    axis: usize,
) -> Result<HostTensor> {
    let idx = indices(call, idx, x.shape()[axis])?;
    per_sum!(call, |done| done(add_slices(xv, x.shape(), axis, &idx, sv)), xv = x, sv = src)
}

/// `x` with `src[o, j, i]` added at `x[o, idx[o, j, i], i]` along `axis`, in element order.
fn add_elements<S: Sum>(x: &[S], shape: &[usize], axis: usize, idx: &[usize], k: usize, src: &[S]) -> Vec<S> {
    let (_, dim, inner) = around(shape, axis);
    let mut out = x.to_vec();
    for (p, &r) in idx.iter().enumerate() {
        let (o, i) = (p / (k * inner), p % inner);
        let to = (o * dim + r) * inner + i;
        out[to] = out[to].plus(src[p]);
    }
    out
}

/// `scatter_add`: `x` plus each `src` element at its index along `axis`.
pub(super) fn scatter_add(
    call: &KernelCall<'_>,
    x: &HostTensor,
    idx: &HostTensor,
    src: &HostTensor,
    axis: usize,
) -> Result<HostTensor> {
    let k = idx.shape()[axis];
    let idx = indices(call, idx, x.shape()[axis])?;
    per_sum!(call, |done| done(add_elements(xv, x.shape(), axis, &idx, k, sv)), xv = x, sv = src)
}
