//! Routing kernels: the ops whose i64 results select data (`argmax`, `argmin`, `topk`,
//! `argsort`, `bincount`) and `one_hot`. Every order is total and stable — NaN ranks above every
//! number, ties go to the lower index — so a value computed twice selects the same entries.

use super::{finish_raw, ids, node_err, Elem, KernelCall};
use crate::error::Result;
use crate::host::{HostData, HostTensor};
use crate::op::ArgReduceOp;
use std::cmp::Ordering;

/// A value that ranks: a float (read as f64, exact for every float dtype) or an i64.
trait Rank: Copy {
    /// The total order of the kernels: NaN above every number, NaNs equal.
    fn rank(&self, other: &Self) -> Ordering;
    /// Whether this is NaN.
    fn is_nan(&self) -> bool;
}

impl Rank for f64 {
    fn rank(&self, other: &Self) -> Ordering {
        match (self.is_nan(), other.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => self.partial_cmp(other).unwrap_or(Ordering::Equal),
        }
    }
    fn is_nan(&self) -> bool {
        f64::is_nan(*self)
    }
}

impl Rank for i64 {
    fn rank(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
    fn is_nan(&self) -> bool {
        false
    }
}

/// Runs `$f::<K>($x, $args)` with `$x`'s values as ranks: i64 as they are, floats as f64.
macro_rules! per_rank {
    ($call:expr, $x:expr, $f:ident($($args:expr),*)) => {
        match <i64 as Elem>::slice($x.data()) {
            Some(v) => $f::<i64>($call, $x.shape(), v, $($args),*),
            None => $f::<f64>($call, $x.shape(), &$x.to_f64_vec(), $($args),*),
        }
    };
}

/// For every row of `values` (shape `shape`) along `axis`, the positions `pick` chooses from
/// the row's values; the result lays them out along `axis` (`outer × out_len × inner`).
fn per_row<K: Rank>(
    shape: &[usize],
    values: &[K],
    axis: usize,
    out_len: usize,
    mut pick: impl FnMut(&[K]) -> Vec<i64>,
) -> Vec<i64> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let dim = shape[axis];
    let mut out = vec![0i64; outer * out_len * inner];
    let mut row = Vec::with_capacity(dim);
    for o in 0..outer {
        for i in 0..inner {
            row.clear();
            row.extend((0..dim).map(|j| values[(o * dim + j) * inner + i]));
            for (j, p) in pick(&row).into_iter().enumerate() {
                out[(o * out_len + j) * inner + i] = p;
            }
        }
    }
    out
}

/// The row's positions sorted by rank, descending or ascending, stable (ties keep index order).
fn sorted_positions<K: Rank>(row: &[K], descending: bool) -> Vec<i64> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    if descending {
        order.sort_by(|&a, &b| row[b].rank(&row[a]));
    } else {
        order.sort_by(|&a, &b| row[a].rank(&row[b]));
    }
    order.into_iter().map(|p| p as i64).collect()
}

/// `argmax` / `argmin` along `axis`: the first position of the extreme, or of the first NaN (as
/// in PyTorch, where NaN propagates through `max` and `min`).
pub(super) fn arg_reduce(call: &KernelCall<'_>, op: ArgReduceOp, x: &HostTensor, axis: usize) -> Result<HostTensor> {
    fn run<K: Rank>(
        call: &KernelCall<'_>,
        shape: &[usize],
        v: &[K],
        op: ArgReduceOp,
        axis: usize,
    ) -> Result<HostTensor> {
        let wanted = match op {
            ArgReduceOp::Argmax => Ordering::Greater,
            ArgReduceOp::Argmin => Ordering::Less,
        };
        let out = per_row(shape, v, axis, 1, |row| {
            let mut best = 0;
            for (j, r) in row.iter().enumerate().skip(1) {
                if row[best].is_nan() {
                    break;
                }
                if r.is_nan() || r.rank(&row[best]) == wanted {
                    best = j;
                }
            }
            vec![best as i64]
        });
        finish_raw(call, out)
    }
    per_rank!(call, x, run(op, axis))
}

/// `topk`: the positions of the `k` largest (or smallest) entries along `axis`, in rank order.
pub(super) fn topk(call: &KernelCall<'_>, x: &HostTensor, k: usize, axis: usize, largest: bool) -> Result<HostTensor> {
    fn run<K: Rank>(
        call: &KernelCall<'_>,
        shape: &[usize],
        v: &[K],
        k: usize,
        axis: usize,
        largest: bool,
    ) -> Result<HostTensor> {
        finish_raw(call, per_row(shape, v, axis, k, |row| sorted_positions(row, largest)[..k].to_vec()))
    }
    per_rank!(call, x, run(k, axis, largest))
}

/// `argsort`: the positions that sort `axis`, stable.
pub(super) fn argsort(call: &KernelCall<'_>, x: &HostTensor, axis: usize, descending: bool) -> Result<HostTensor> {
    fn run<K: Rank>(
        call: &KernelCall<'_>,
        shape: &[usize],
        v: &[K],
        axis: usize,
        descending: bool,
    ) -> Result<HostTensor> {
        finish_raw(call, per_row(shape, v, axis, shape[axis], |row| sorted_positions(row, descending)))
    }
    per_rank!(call, x, run(axis, descending))
}

/// The ids as positions below `classes`, naming the first that is not.
fn classes_of(call: &KernelCall<'_>, x: &HostTensor, classes: usize) -> Result<Vec<usize>> {
    ids(call, x)?
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            usize::try_from(v)
                .ok()
                .filter(|&c| c < classes)
                .ok_or_else(|| node_err(call, format!("id {v} at position {i} is out of range for {classes} classes")))
        })
        .collect()
}

/// `bincount`: how many ids equal each of `0..bins`.
pub(super) fn bincount(call: &KernelCall<'_>, x: &HostTensor, bins: usize) -> Result<HostTensor> {
    let mut counts = vec![0i64; bins];
    for c in classes_of(call, x, bins)? {
        counts[c] += 1;
    }
    finish_raw(call, counts)
}

/// `one_hot`: a row of `classes` per id, 1 at the id, 0 elsewhere, in the output dtype.
pub(super) fn one_hot(call: &KernelCall<'_>, x: &HostTensor, classes: usize) -> Result<HostTensor> {
    let hot = classes_of(call, x, classes)?;
    let data = HostData::try_from_fn(hot.len() * classes, call.out_dtype, |p| {
        f64::from(u8::from(hot[p / classes] == p % classes))
    })?;
    HostTensor::new(call.out_shape.to_vec(), data).map_err(|e| node_err(call, e.to_string()))
}
