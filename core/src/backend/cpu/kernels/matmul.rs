//! Batched matrix products through `matrixmultiply`.
//!
//! Threading is remat's own (`matrixmultiply` is built without its `threading` feature): one
//! large product is split into blocks of rows of the output, and a batch of small products
//! (which `matrixmultiply` would run on one thread) into runs of products, over the backend's
//! threads. Block and run sizes come from the shapes alone, never from the thread count.
//! Broadcast batch operands are never copied: their batch stride is 0.

use super::split;
use super::{finish, node_err, Float, KernelCall};
use crate::dtype::DType;
use crate::error::Result;
use crate::host::HostTensor;
use crate::shape::{matrix_offsets, numel};
use std::mem::MaybeUninit;

/// Below this many multiply-adds per product (`matrixmultiply`'s own threading threshold is of
/// the same order), a batch is parallelised across products rather than within them.
const SMALL_PRODUCT: usize = 1 << 16;

/// Multiply-adds a task (a block of rows, or a run of small products) gets at least: about 4 µs
/// of work at the kernel's speed. (With 1 Mi, the GPT step's 256 × 64 × 64 products stayed on
/// one thread; split in two they take 13 µs instead of 19.)
const PAR_WORK: usize = 1 << 18;

/// Blocks a product is cut into, when its rows allow: enough that a thread sharing its core
/// with another process takes fewer of them while the others take the rest.
const BLOCKS: usize = 8;

/// Rows of a block at most: measured on the development machine (1024×256×768 f32, 2 threads),
/// 128-row blocks reach 242 GFLOP/s, 256-row blocks 257 and 512-row blocks 283 (1 thread: 152).
const BLOCK_ROWS: usize = 512;

/// Rows of a block at least: each block packs `b` again, and shorter blocks run the kernel far
/// below its peak.
const MIN_BLOCK_ROWS: usize = 32;

/// Which operands a product reads transposed (last two axes swapped). Reading through strides
/// is free in `matrixmultiply`, and its packing makes the result bit-identical to multiplying a
/// materialised transpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Trans {
    pub a: bool,
    pub b: bool,
}

impl Trans {
    pub const NONE: Trans = Trans { a: false, b: false };
}

/// `out[b] = alpha · op(a[b]) · op(b[b])` for every batch index, with operand batch offsets from
/// strides; `op` transposes the operands flagged in `t`.
fn batched<T: Float>(
    a: &[T],
    b: &[T],
    a_shape: &[usize],
    b_shape: &[usize],
    out_shape: &[usize],
    alpha: T,
    t: Trans,
) -> Vec<T> {
    let r = out_shape.len();
    let (m, n) = (out_shape[r - 2], out_shape[r - 1]);
    let k = a_shape[a_shape.len() - if t.a { 2 } else { 1 }];
    // (row, column) steps of op(a) (m × k) and op(b) (k × n) over their row-major storage.
    let (rsa, csa) = if t.a { (1, m as isize) } else { (k as isize, 1) };
    let (rsb, csb) = if t.b { (1, k as isize) } else { (n as isize, 1) };
    let batch = &out_shape[..r - 2];
    let batches = numel(batch);
    let total = batches * m * n;
    if total == 0 {
        return Vec::new();
    }
    // The products write every element (β = 0: `matrixmultiply` does not read C, and a k = 0
    // product writes zeros), so the output starts uninitialised rather than memset.
    let (oa, ob) = (matrix_offsets(a_shape, batch), matrix_offsets(b_shape, batch));
    // A batch of products sharing one `b` (a weight broadcast over `[batch, seq]`) whose `a`
    // matrices lie back to back is one product of `batches·m` rows: row blocks of a few hundred
    // rows run near the kernel's peak, blocks of a hundred well below it. Each element is summed
    // in the same order either way (the kernel's k blocking does not depend on m).
    let shared_b = ob.iter().all(|&o| o == ob[0]);
    let stacked_a = oa.iter().enumerate().all(|(q, &o)| o == oa[0] + q * m * k);
    if batches > 1 && !t.a && shared_b && stacked_a {
        let rows = batches * m;
        let b_mat = &b_shape[b_shape.len() - 2..];
        return batched(&a[oa[0]..], &b[ob[0]..], &[rows, k], b_mat, &[rows, n], alpha, t);
    }
    let mut out: Vec<T> = Vec::with_capacity(total);
    // Rows `r0..r0 + c.len() / n` of product `q` into `c`.
    let rows = |q: usize, r0: usize, c: &mut [MaybeUninit<T>]| {
        let (pa, pb) = (&a[oa[q]..], &b[ob[q]..]);
        debug_assert!(pa.len() >= m * k && pb.len() >= k * n);
        if m == 1 {
            // Whether a product takes this path depends on its shape alone, never on how
            // threads split it: the bits do not depend on the thread count.
            return row_product(&pa[..k], &pb[..k * n], n, alpha, t.b, c);
        }
        let rows = c.len() / n;
        // SAFETY: `pa` holds the m×k elements of op(a) at steps (rsa, csa) and `pb` the k×n of
        // op(b) at (rsb, csb): the offsets come from the operands' own shapes, and the shape
        // rule guarantees their inner dims; rows r0..r0 + rows of op(a) start r0·rsa further
        // and lie inside it. `c` is an exclusive rows×n row-major buffer.
        unsafe {
            let pa = pa.as_ptr().offset(r0 as isize * rsa);
            T::gemm(rows, k, n, alpha, pa, rsa, csa, pb.as_ptr(), rsb, csb, c.as_mut_ptr().cast(), n as isize, 1)
        };
    };
    let spare = &mut out.spare_capacity_mut()[..total];
    // Every output element is summed in the same order however the rows are split, and the
    // split comes from the shapes alone.
    let work = m * n * k;
    if work >= SMALL_PRODUCT {
        // On one thread a product is one call (blocks would each pack `b` again).
        let per = if split::serial() { m.max(1) } else { block_rows(m, n * k) };
        let mut tasks = Vec::new();
        for (q, c) in spare.chunks_exact_mut(m * n).enumerate() {
            for (b, part) in c.chunks_mut(per * n).enumerate() {
                tasks.push((q, b * per, part));
            }
        }
        split::par_tasks(tasks, |(q, r0, part)| rows(q, r0, part));
    } else {
        // Runs of whole products, each run at least `PAR_WORK` multiply-adds.
        let per = (PAR_WORK / work.max(1)).max(1);
        let tasks: Vec<_> = spare.chunks_mut(per * m * n).enumerate().map(|(t, c)| (t * per, c)).collect();
        split::par_tasks(tasks, |(first, chunk)| {
            for (j, c) in chunk.chunks_exact_mut(m * n).enumerate() {
                rows(first + j, 0, c);
            }
        });
    }
    // SAFETY: every product wrote all its rows into the `total` reserved elements.
    unsafe { out.set_len(total) };
    out
}

/// Rows per block of an `m`-row product whose rows cost `row_work` multiply-adds each: up to
/// [`BLOCKS`] blocks, each of at least [`PAR_WORK`] multiply-adds and [`MIN_BLOCK_ROWS`] rows,
/// and at most [`BLOCK_ROWS`] rows.
fn block_rows(m: usize, row_work: usize) -> usize {
    let least = PAR_WORK.div_ceil(row_work.max(1)).max(MIN_BLOCK_ROWS);
    m.div_ceil(BLOCKS).clamp(least.min(BLOCK_ROWS), BLOCK_ROWS).min(m.max(1))
}

/// `c = alpha · a · op(b)` for one row `a` (`1 × k`, contiguous whichever way it is stored):
/// packing `b` for the blocked kernel would cost more than the product (a decoding step's
/// products are such rows). `b` is `k × n`, or `n × k` read transposed.
fn row_product<T: Float>(a: &[T], b: &[T], n: usize, alpha: T, b_transposed: bool, c: &mut [MaybeUninit<T>]) {
    let k = a.len();
    if b_transposed {
        for (j, out) in c.iter_mut().enumerate().take(n) {
            let sum = a.iter().zip(&b[j * k..(j + 1) * k]).fold(T::ZERO, |s, (&x, &y)| s + x * y);
            out.write(alpha * sum);
        }
        return;
    }
    let mut sums = vec![T::ZERO; n];
    for (&x, row) in a.iter().zip(b.chunks_exact(n.max(1))) {
        sums.iter_mut().zip(row).for_each(|(s, &y)| *s += x * y);
    }
    for (out, s) in c.iter_mut().zip(sums) {
        out.write(alpha * s);
    }
}

/// `[..., m, k] · [..., k, n]` with broadcast batch dims, in the compute type (bf16/f16/f32
/// operands multiply in f32, f64 in f64; the result is rounded once to the output dtype).
/// `matmul_t` reads operands transposed as `t` says.
pub(super) fn matmul<T: Float>(call: &KernelCall<'_>, a: &HostTensor, b: &HostTensor, t: Trans) -> Result<HostTensor> {
    let (av, bv) = (T::read(a.data()), T::read(b.data()));
    finish(call, batched(&av, &bv, a.shape(), b.shape(), call.out_shape, T::ONE, t))
}

/// `matmul_t` with `fold`: `a [.., m]ᵀ · b [.., n]` over every leading axis, as one product of
/// `[rows, m]ᵀ · [rows, n]`.
pub(super) fn folded<T: Float>(call: &KernelCall<'_>, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
    let (av, bv) = (T::read(a.data()), T::read(b.data()));
    let (lead, m) = a.shape().split_at(a.shape().len() - 1);
    let (rows, m, n) = (numel(lead), m[0], b.shape()[b.shape().len() - 1]);
    let t = Trans { a: true, b: false };
    finish(call, batched(&av, &bv, &[rows, m], &[rows, n], call.out_shape, T::ONE, t))
}

/// `(a · b) · scale_a · scale_b` for fp8 `a`, `b` widened to f32, f32 result.
pub(super) fn scaled_matmul(
    call: &KernelCall<'_>,
    a: &HostTensor,
    b: &HostTensor,
    scale_a: &HostTensor,
    scale_b: &HostTensor,
) -> Result<HostTensor> {
    let scale = |t: &HostTensor| t.scalar().map_err(|e| node_err(call, format!("scale: {e}")));
    let alpha = (scale(scale_a)? as f32) * (scale(scale_b)? as f32);
    if call.out_dtype != DType::F32 {
        return Err(node_err(call, format!("scaled_matmul produces f32, the call asks for {}", call.out_dtype)));
    }
    let (av, bv) = (f32::read(a.data()), f32::read(b.data()));
    finish(call, batched(&av, &bv, a.shape(), b.shape(), call.out_shape, alpha, Trans::NONE))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::dtype::{self, DType};
    use crate::host::{HostData, HostTensor};
    use crate::op::Op;

    /// Triple loop over `a[batch_a.., m, k]` and `b[batch_b.., k, n]` where the batch dims are
    /// `[2, 3]` in the output and each operand has them or 1s (broadcast).
    fn naive(a: &[f64], a_b: [usize; 2], b: &[f64], b_b: [usize; 2], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = Vec::new();
        for i in 0..2 {
            for j in 0..3 {
                let ai = (i % a_b[0]) * a_b[1] + j % a_b[1];
                let bi = (i % b_b[0]) * b_b[1] + j % b_b[1];
                for r in 0..m {
                    for c in 0..n {
                        out.push((0..k).map(|p| a[ai * m * k + r * k + p] * b[bi * k * n + p * n + c]).sum());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn batched_matmul_with_broadcast_batches() {
        let (m, k, n) = (3, 5, 4);
        let a = values(2 * 3 * m * k, 1);
        let b = values(3 * k * n, 2);
        let y = run(&Op::Matmul, &[&t64(&[2, 3, m, k], &a), &t64(&[1, 3, k, n], &b)]).unwrap();
        assert_eq!(y.shape(), &[2, 3, m, n]);
        assert_close(&y.to_f64_vec(), &naive(&a, [2, 3], &b, [1, 3], m, k, n), 1e-12);
        // b without batch dims, a with a broadcast middle axis.
        let a2 = values(2 * m * k, 3);
        let b2 = values(k * n, 4);
        let y2 = run(
            &Op::Matmul,
            &[&t64(&[2, 1, m, k], &a2), &t64(&[3, k, n], &[b2.clone(), b2.clone(), b2.clone()].concat())],
        )
        .unwrap();
        assert_close(
            &y2.to_f64_vec(),
            &naive(&a2, [2, 1], &[b2.clone(), b2.clone(), b2].concat(), [1, 3], m, k, n),
            1e-12,
        );
    }

    #[test]
    fn large_matmul_in_f32_matches_f64() {
        let (m, k, n) = (70, 130, 90);
        let a = values(m * k, 5);
        let b = values(k * n, 6);
        let a32: Vec<f32> = a.iter().map(|&v| v as f32).collect();
        let b32: Vec<f32> = b.iter().map(|&v| v as f32).collect();
        let y = run(&Op::Matmul, &[&t32(&[m, k], &a32), &t32(&[k, n], &b32)]).unwrap();
        let want: Vec<f64> = (0..m * n).map(|i| (0..k).map(|p| a[(i / n) * k + p] * b[p * n + i % n]).sum()).collect();
        assert_close(&y.to_f64_vec(), &want, 1e-4);
    }

    #[test]
    fn many_small_products_in_parallel() {
        let (batch, m, k, n) = (17, 2, 3, 2);
        let a = values(batch * m * k, 7);
        let b = values(batch * k * n, 8);
        let y = run(&Op::Matmul, &[&t64(&[batch, m, k], &a), &t64(&[batch, k, n], &b)]).unwrap().to_f64_vec();
        for q in 0..batch {
            for r in 0..m {
                for c in 0..n {
                    let want: f64 = (0..k).map(|p| a[q * m * k + r * k + p] * b[q * k * n + p * n + c]).sum();
                    assert!((y[q * m * n + r * n + c] - want).abs() < 1e-12);
                }
            }
        }
    }

    #[test]
    fn bf16_matmul_rounds_the_result() {
        let a = HostTensor::from_f32(vec![1, 2], &[1.0, 1.0], DType::BF16).unwrap();
        let b = HostTensor::from_f32(vec![2, 1], &[1.0, 0.00390625], DType::BF16).unwrap();
        let y = run(&Op::Matmul, &[&a, &b]).unwrap();
        assert_eq!(y.dtype(), DType::BF16);
        // 1 + 2^-8 ties to 1.0 in bf16.
        assert_eq!(y.to_f32_vec(), [1.0]);
    }

    #[test]
    fn scaled_matmul_of_fp8() {
        let e = |v: &[f32]| HostData::F8E4M3(v.iter().map(|&x| dtype::f32_to_e4m3(x)).collect());
        let a = HostTensor::new(vec![2, 2], e(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        let b = HostTensor::new(vec![2, 1], e(&[0.5, 1.5])).unwrap();
        let (sa, sb) = (t32(&[], &[2.0]), t32(&[1], &[0.25]));
        let y = run(&Op::ScaledMatmul, &[&a, &b, &sa, &sb]).unwrap();
        assert_eq!(y.dtype(), DType::F32);
        assert_eq!(y.to_f32_vec(), [3.5 * 0.5, 7.5 * 0.5]);
    }

    /// One-row products (a decoding step's) skip the blocked kernel: they match the f64 triple
    /// loop, broadcast like any product, and read either operand transposed to the same bits.
    #[test]
    fn one_row_products() {
        let (k, n) = (37, 23);
        let (a, b) = (values(2 * 3 * k, 5), values(3 * k * n, 6));
        let y = run(&Op::Matmul, &[&t64(&[2, 3, 1, k], &a), &t64(&[1, 3, k, n], &b)]).unwrap();
        assert_close(&y.to_f64_vec(), &naive(&a, [2, 3], &b, [1, 3], 1, k, n), 1e-12);
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let (a1, b1) = (t32(&[1, k], &f32s(&a[..k])), t32(&[k, n], &f32s(&b[..k * n])));
        let want = run(&Op::Matmul, &[&a1, &b1]).unwrap().to_f32_vec();
        let bt = run(&Op::Transpose { perm: vec![1, 0] }, &[&b1]).unwrap();
        let at = run(&Op::Reshape { shape: vec![k, 1] }, &[&a1]).unwrap();
        for (ta, tb, x, y) in [(false, true, &a1, &bt), (true, false, &at, &b1), (true, true, &at, &bt)] {
            let got = run(&Op::MatmulT { ta, tb, fold: false }, &[x, y]).unwrap().to_f32_vec();
            assert!(got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits()), "ta={ta} tb={tb}");
        }
        // An empty inner dimension is zeros.
        let z = run(&Op::Matmul, &[&t32(&[1, 0], &[]), &t32(&[0, 3], &[])]).unwrap();
        assert_eq!(z.to_f32_vec(), [0.0; 3]);
    }

    /// `matmul_t` equals `matmul` of materialised transposes bit for bit (f32, where rounding
    /// would show a different summation), and a fold equals the reshaped 2-D product.
    #[test]
    fn transposed_operands_match_materialised_transposes_bitwise() {
        let f = |shape: &[usize], seed| {
            let v: Vec<f32> = values(shape.iter().product(), seed).iter().map(|&x| x as f32).collect();
            t32(shape, &v)
        };
        let swap = |x: &HostTensor| {
            let r = x.shape().len();
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(r - 2, r - 1);
            run(&Op::Transpose { perm }, &[x]).unwrap()
        };
        let (a, b) = (f(&[2, 3, 33, 70], 1), f(&[1, 3, 70, 17], 2));
        let (at, bt) = (swap(&a), swap(&b));
        let want = run(&Op::Matmul, &[&a, &b]).unwrap().to_f32_vec();
        for (ta, tb, x, y) in [(true, false, &at, &b), (false, true, &a, &bt), (true, true, &at, &bt)] {
            let got = run(&Op::MatmulT { ta, tb, fold: false }, &[x, y]).unwrap();
            assert_eq!(got.shape(), &[2, 3, 33, 17]);
            let same = got.to_f32_vec().iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
            assert!(same, "ta={ta} tb={tb}");
        }
        let (x, g) = (f(&[4, 50, 33], 3), f(&[4, 50, 20], 4));
        let folded = run(&Op::MatmulT { ta: true, tb: false, fold: true }, &[&x, &g]).unwrap();
        let x2 = run(&Op::Reshape { shape: vec![200, 33] }, &[&x]).unwrap();
        let g2 = run(&Op::Reshape { shape: vec![200, 20] }, &[&g]).unwrap();
        let want = run(&Op::Matmul, &[&swap(&x2), &g2]).unwrap();
        assert_eq!(folded.shape(), &[33, 20]);
        assert_eq!(folded.to_f32_vec(), want.to_f32_vec());
    }

    /// However a product or a batch is split across threads, every element is summed in the
    /// same order: the results are bit-identical on every thread count.
    #[test]
    fn threads_do_not_change_a_bit() {
        let f = |n: usize, seed| -> Vec<f32> { values(n, seed).iter().map(|&x| x as f32).collect() };
        let t = super::Trans { a: true, b: false };
        for (a_shape, b_shape, out, tr) in [
            (vec![300, 200], vec![200, 170], vec![300, 170], super::Trans::NONE),
            (vec![200, 300], vec![200, 170], vec![300, 170], t),
            (vec![64, 20, 16], vec![64, 16, 20], vec![64, 20, 20], super::Trans::NONE),
            (vec![8, 32, 64], vec![64, 256], vec![8, 32, 256], super::Trans::NONE),
        ] {
            let (a, b) = (f(a_shape.iter().product(), 1), f(b_shape.iter().product(), 2));
            let product = || super::batched(&a, &b, &a_shape, &b_shape, &out, 1.0f32, tr);
            let one = on_threads(1, product);
            for threads in [2, 3, 7] {
                let many = on_threads(threads, product);
                assert!(one.iter().zip(&many).all(|(x, y)| x.to_bits() == y.to_bits()), "{threads} threads, {out:?}");
            }
        }
    }

    /// Blocks come from the shapes: several per product where the rows allow, none below the
    /// floor of rows or work, none above the ceiling.
    #[test]
    fn blocks_follow_the_shapes() {
        assert_eq!(super::block_rows(256, 64 * 64), 64); // 4 blocks of 256 Ki multiply-adds
        assert_eq!(super::block_rows(256, 256 * 1024), 32); // 8 blocks, the row floor
        assert_eq!(super::block_rows(8192, 256), 512); // the ceiling
        assert_eq!(super::block_rows(10, 1), 10); // one block: fewer rows than the floor
    }

    #[test]
    fn zero_sized_products() {
        let y = run(&Op::Matmul, &[&t32(&[2, 0], &[]), &t32(&[0, 3], &[])]).unwrap();
        assert_eq!(y.to_f32_vec(), [0.0; 6]);
        let y = run(&Op::Matmul, &[&t32(&[0, 2], &[]), &t32(&[2, 3], &[0.; 6])]).unwrap();
        assert_eq!(y.shape(), &[0, 3]);
    }
}
