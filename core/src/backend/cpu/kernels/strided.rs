//! Strided iteration shared by the layout, broadcast and reduction kernels.
//!
//! A strided view is a shape plus, per axis, the step in elements through some buffer. Before
//! iterating, `shape::coalesce` merges axes that step contiguously in every view and drops size-1
//! axes, so `[B, T, D] + [D]` becomes a `[B·T, D]` loop whose inner rows are plain slices.

use super::split;
pub(super) use crate::shape::coalesce;
use std::mem::MaybeUninit;

/// The buffer offset of the start of every row (all axes but the last), in row-major order.
pub(super) fn row_offsets(shape: &[usize], strides: &[usize]) -> Vec<usize> {
    let outer = &shape[..shape.len().saturating_sub(1)];
    let rows: usize = outer.iter().product();
    let mut offsets = Vec::with_capacity(rows);
    if rows == 0 {
        return offsets;
    }
    let mut idx = vec![0usize; outer.len()];
    let mut off = 0usize;
    for _ in 0..rows {
        offsets.push(off);
        for axis in (0..outer.len()).rev() {
            idx[axis] += 1;
            off += strides[axis];
            if idx[axis] < outer[axis] {
                break;
            }
            off -= strides[axis] * outer[axis];
            idx[axis] = 0;
        }
    }
    offsets
}

/// `f(a, b)` over `out_shape` with both operands broadcast to it, for elements of any type
/// (integers, booleans; the float kernels have their own vectorised loop): row by row, serial.
pub(super) fn broadcast_map<A: Copy, B: Copy, R>(
    out_shape: &[usize],
    (a_shape, a): (&[usize], &[A]),
    (b_shape, b): (&[usize], &[B]),
    f: impl Fn(A, B) -> R,
) -> Vec<R> {
    let n: usize = out_shape.iter().product();
    if n == 0 {
        return Vec::new();
    }
    let (sa, sb) =
        (crate::shape::broadcast_strides(a_shape, out_shape), crate::shape::broadcast_strides(b_shape, out_shape));
    let (shape, s) = coalesce(out_shape, &[&sa, &sb]);
    let r = shape.len();
    let (inner, ia, ib) = (shape[r - 1], s[0][r - 1], s[1][r - 1]);
    let mut out = Vec::with_capacity(n);
    for (oa, ob) in row_offsets(&shape, &s[0]).into_iter().zip(row_offsets(&shape, &s[1])) {
        out.extend((0..inner).map(|j| f(a[oa + j * ia], b[ob + j * ib])));
    }
    out
}

/// Side of the tiles [`strided_copy`] transposes through, to keep both sides in cache.
const TILE: usize = 32;

/// Copies the view of `src` starting at `base` with `shape` and `strides` into a new contiguous
/// buffer, rows (or, for a transpose, whole matrices) spread over the kernels' threads. A view
/// whose two inner axes are swapped (a matrix transpose) goes tile by tile.
pub(super) fn strided_copy<E: Copy + Send + Sync>(
    src: &[E],
    base: usize,
    shape: &[usize],
    strides: &[usize],
) -> Vec<E> {
    let n: usize = shape.iter().product();
    if n == 0 {
        return Vec::new();
    }
    let (shape, strides) = coalesce(shape, &[strides]);
    let strides = &strides[0];
    let r = shape.len();
    let (inner, step) = (shape[r - 1], strides[r - 1]);
    if r >= 2 && step != 1 && strides[r - 2] == 1 {
        // Transpose: out[i][j] = src[i + j·step] for an `rows × inner` block per batch.
        let rows = shape[r - 2];
        let batches = row_offsets(&shape[..r - 1], &strides[..r - 1]);
        let fill = |at: usize, out: &mut [MaybeUninit<E>]| {
            for (b, dst) in out.chunks_exact_mut(rows * inner).enumerate() {
                let from = base + batches[at / (rows * inner) + b];
                transpose_tiles(&src[from..], step, rows, inner, dst);
            }
        };
        // SAFETY: every chunk is whole matrices, and `transpose_tiles` writes all of each.
        return unsafe { split::par_fill(n, split::copy_rows(n, rows * inner), fill) };
    }
    let rows = row_offsets(&shape, strides);
    let fill = |at: usize, out: &mut [MaybeUninit<E>]| {
        for (row, dst) in rows[at / inner..].iter().zip(out.chunks_exact_mut(inner)) {
            let at = base + row;
            match step {
                1 => dst.iter_mut().zip(&src[at..at + inner]).for_each(|(o, &v)| {
                    o.write(v);
                }),
                s => dst.iter_mut().enumerate().for_each(|(j, o)| {
                    o.write(src[at + j * s]);
                }),
            }
        }
    };
    // SAFETY: every chunk is whole rows of `inner` elements, each written above.
    unsafe { split::par_fill(n, split::copy_rows(n, inner), fill) }
}

/// `dst[i·inner + j] = src[i + j·step]`: one `rows × inner` matrix, tile by tile; writes all of
/// `dst`.
fn transpose_tiles<E: Copy>(src: &[E], step: usize, rows: usize, inner: usize, dst: &mut [MaybeUninit<E>]) {
    for i0 in (0..rows).step_by(TILE) {
        for j0 in (0..inner).step_by(TILE) {
            for i in i0..(i0 + TILE).min(rows) {
                for j in j0..(j0 + TILE).min(inner) {
                    dst[i * inner + j].write(src[i + j * step]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_merges_contiguous_axes() {
        // [2, 3, 4] + [4]: the leading axes merge, the trailing row stays.
        let (shape, s) = coalesce(&[2, 3, 4], &[&[12, 4, 1], &[0, 0, 1]]);
        assert_eq!(shape, vec![6, 4]);
        assert_eq!(s, vec![vec![4, 1], vec![0, 1]]);
        let (shape, s) = coalesce(&[2, 1, 3], &[&[3, 3, 1]]);
        assert_eq!((shape, s), (vec![6], vec![vec![1]]));
        let (shape, s) = coalesce(&[], &[&[]]);
        assert_eq!((shape, s), (vec![1], vec![vec![0]]));
    }

    #[test]
    fn row_offsets_step_like_an_odometer() {
        assert_eq!(row_offsets(&[2, 3, 5], &[1, 2, 100]), vec![0, 2, 4, 1, 3, 5]);
        assert_eq!(row_offsets(&[7], &[1]), vec![0]);
    }

    #[test]
    fn strided_copy_transposes_big_matrices() {
        let (rows, cols) = (37, 70);
        let src: Vec<u32> = (0..rows * cols).map(|i| i as u32).collect();
        // View of the transpose: shape [cols, rows], strides [1, cols].
        let t = strided_copy(&src, 0, &[cols, rows], &[1, cols]);
        for i in 0..cols {
            for j in 0..rows {
                assert_eq!(t[i * rows + j], src[j * cols + i]);
            }
        }
    }
}
