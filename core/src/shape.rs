//! Shape arithmetic: element counts, strides, broadcasting.

/// A node's shape: up to four dimensions held inline (what shape inference gives, so that
/// inferring one allocates nothing).
pub type Shape = smallvec::SmallVec<[usize; 4]>;

/// Number of elements of a shape (1 for a scalar `[]`).
pub fn numel(shape: &[usize]) -> usize {
    // Saturating: a shape too large to count is caught by `Graph::validate`, never wrapped.
    checked_numel(shape).unwrap_or(usize::MAX)
}

/// The element count of `shape`, or `None` when it overflows `usize`.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// The bytes of `shape` elements of `size` bytes each, or `None` when they overflow `usize`.
pub fn checked_bytes(shape: &[usize], size: usize) -> Option<usize> {
    checked_numel(shape)?.checked_mul(size)
}

/// Row-major strides of a contiguous tensor of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The numpy-style broadcast of two shapes (aligned on the right), or `None` when they clash.
pub fn broadcast(a: &[usize], b: &[usize]) -> Option<Shape> {
    let rank = a.len().max(b.len());
    let mut out: Shape = smallvec::smallvec![0; rank];
    for (i, o) in out.iter_mut().enumerate() {
        let da = dim_from_right(a, rank - 1 - i);
        let db = dim_from_right(b, rank - 1 - i);
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Whether `from` broadcasts to exactly `to` (aligned on the right; each dim 1 or equal).
pub fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && (0..from.len()).all(|i| {
            let f = dim_from_right(from, i);
            f == 1 || f == dim_from_right(to, i)
        })
}

/// The dim `k` places from the right (0 = last), or 1 past the front.
fn dim_from_right(shape: &[usize], k: usize) -> usize {
    if k < shape.len() {
        shape[shape.len() - 1 - k]
    } else {
        1
    }
}

/// For each output element index of `out`, the strides to step an input of shape `inp` that
/// broadcasts to `out`: the input's own stride, or 0 along broadcast axes.
pub fn broadcast_strides(inp: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(inp);
    let lead = out.len() - inp.len();
    (0..out.len()).map(|i| if i < lead || inp[i - lead] == 1 { 0 } else { own[i - lead] }).collect()
}

/// Element offsets of each matrix of a batched operand `[.., r, c]` (row-major, contiguous) for
/// every index of the broadcast `batch` axes, in row-major batch order: 0 steps along the axes
/// the operand broadcasts. Both backends' batched products use it.
pub fn matrix_offsets(shape: &[usize], batch: &[usize]) -> Vec<usize> {
    let r = shape.len();
    let size = shape[r - 2] * shape[r - 1];
    let steps = broadcast_strides(&shape[..r - 2], batch);
    odometer(batch).iter().map(|idx| idx.iter().zip(&steps).map(|(i, s)| i * s).sum::<usize>() * size).collect()
}

/// Every multi-index of `shape`, row-major (one empty index for a scalar).
pub fn odometer(shape: &[usize]) -> Vec<Vec<usize>> {
    let n = numel(shape);
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        out.push(idx.clone());
        for a in (0..shape.len()).rev() {
            idx[a] += 1;
            if idx[a] < shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}

/// Merges adjacent axes that are contiguous in every stride set and drops size-1 axes.
/// Returns the new shape and stride sets (rank ≥ 1: a scalar becomes `[1]` with stride 0).
/// Backends use it to turn strided loops into as few, as long, rows as possible.
pub fn coalesce(shape: &[usize], strides: &[&[usize]]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_shape: Vec<usize> = Vec::with_capacity(shape.len());
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::with_capacity(shape.len()); strides.len()];
    for (axis, &dim) in shape.iter().enumerate() {
        if dim == 1 {
            continue;
        }
        let mergeable = out_shape.last().is_some()
            && strides.iter().zip(&out_strides).all(|(s, o)| o.last() == Some(&(s[axis] * dim)));
        if mergeable {
            if let Some(last) = out_shape.last_mut() {
                *last *= dim;
            }
            for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                if let Some(last) = o.last_mut() {
                    *last = s[axis];
                }
            }
        } else {
            out_shape.push(dim);
            for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                o.push(s[axis]);
            }
        }
    }
    if out_shape.is_empty() {
        out_shape.push(1);
        for o in &mut out_strides {
            o.push(0);
        }
    }
    (out_shape, out_strides)
}

/// Shape after reducing `axes` of `shape`.
pub fn reduced(shape: &[usize], axes: &[usize], keepdim: bool) -> Shape {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keepdim) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// `[a, b, c]` for messages.
///
/// A shape of more than 12 dims is elided in the middle (`[1, 2, 3, 4, 5, 6, …990
/// more…, 7, 8]`), so that a message stays one reasonable line whatever a document declares.
pub fn fmt_shape(shape: &[usize]) -> String {
    if shape.len() <= SHAPE_DIMS {
        return format!("{shape:?}");
    }
    let (head, tail) = (SHAPE_DIMS - 4, 2);
    let join = |dims: &[usize]| dims.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    let more = shape.len() - head - tail;
    format!("[{}, …{more} more…, {}]", join(&shape[..head]), join(&shape[shape.len() - tail..]))
}

/// The most dims [`fmt_shape`] writes out in full.
pub const SHAPE_DIMS: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_shapes_are_elided() {
        assert_eq!(fmt_shape(&[2, 3]), "[2, 3]");
        assert_eq!(fmt_shape(&[]), "[]");
        let long: Vec<usize> = (0..1000).collect();
        assert_eq!(fmt_shape(&long), "[0, 1, 2, 3, 4, 5, 6, 7, …990 more…, 998, 999]");
        assert_eq!(fmt_shape(&long[..SHAPE_DIMS]).matches(',').count(), SHAPE_DIMS - 1);
    }

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast(&[4, 1, 3], &[5, 3]), Some(Shape::from_slice(&[4, 5, 3])));
        assert_eq!(broadcast(&[], &[2, 2]), Some(Shape::from_slice(&[2, 2])));
        assert_eq!(broadcast(&[2, 3], &[3, 2]), None);
        assert!(broadcasts_to(&[1, 3], &[4, 3]));
        assert!(!broadcasts_to(&[2, 3], &[4, 3]));
        assert_eq!(broadcast_strides(&[1, 3], &[2, 4, 3]), vec![0, 0, 1]);
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(reduced(&[2, 3, 4], &[1], true), Shape::from_slice(&[2, 1, 4]));
        assert_eq!(reduced(&[2, 3, 4], &[0, 2], false), Shape::from_slice(&[3]));
    }
}
