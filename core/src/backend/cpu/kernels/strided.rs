//! Strided iteration shared by the layout, broadcast and reduction kernels.
//!
//! A strided view is a shape plus, per axis, the step in elements through some buffer. Before
//! iterating, `shape::coalesce` merges axes that step contiguously in every view and drops size-1
//! axes, so `[B, T, D] + [D]` becomes a `[B·T, D]` loop whose inner rows are plain slices.

pub(super) use crate::shape::coalesce;

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

/// Side of the tiles [`strided_copy`] transposes through, to keep both sides in cache.
const TILE: usize = 32;

/// Copies the view of `src` starting at `base` with `shape` and `strides` into a new contiguous
/// buffer. A view whose two inner axes are swapped (a matrix transpose) goes tile by tile.
pub(super) fn strided_copy<E: Copy>(src: &[E], base: usize, shape: &[usize], strides: &[usize]) -> Vec<E> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let (shape, strides) = coalesce(shape, &[strides]);
    let strides = &strides[0];
    let r = shape.len();
    let (inner, step) = (shape[r - 1], strides[r - 1]);
    if r >= 2 && step != 1 && strides[r - 2] == 1 {
        // Transpose: out[i][j] = src[i + j·step] for an `rows × inner` block per batch.
        let rows = shape[r - 2];
        for batch in row_offsets(&shape[..r - 1], &strides[..r - 1]) {
            let start = out.len();
            out.resize(start + rows * inner, src[base + batch]);
            let dst = &mut out[start..];
            for i0 in (0..rows).step_by(TILE) {
                for j0 in (0..inner).step_by(TILE) {
                    for i in i0..(i0 + TILE).min(rows) {
                        for j in j0..(j0 + TILE).min(inner) {
                            dst[i * inner + j] = src[base + batch + i + j * step];
                        }
                    }
                }
            }
        }
        return out;
    }
    for row in row_offsets(&shape, strides) {
        let at = base + row;
        match step {
            1 => out.extend_from_slice(&src[at..at + inner]),
            0 => out.extend(std::iter::repeat_n(src[at], inner)),
            s => out.extend((0..inner).map(|j| src[at + j * s])),
        }
    }
    out
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
