//! Matrix products through cuBLAS: `cublasGemmStridedBatchedEx` on row-major operands.
//!
//! cuBLAS is column-major: a row-major `C[m,n] = A[m,k]·B[k,n]` is the column-major
//! `Cᵀ[n,m] = Bᵀ·Aᵀ`, so the call passes B first and swaps m and n. f32 multiplies in f32 (no
//! TF32), f64 in f64, bf16/f16 with f32 accumulation and one rounding of the result. Broadcast
//! batch dimensions: the batch axes are coalesced over the three stride sets; the innermost run
//! is one strided-batched call (stride 0 for a broadcast operand) and any outer axes loop here.
//!
//! `scaled_matmul` runs on fp8 tensor cores through cuBLASLt: [`crate::fp8`].

use crate::device::Device;
use crate::ops::{coalesce, odometer, View};
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use remat_core::{broadcast_strides, strides};
use remat_core::{DType, Result};
use std::ffi::c_void;

pub(crate) fn to_i32(dev: &Device, v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| dev.err(format!("matmul {what} = {v} exceeds cuBLAS's 32-bit sizes")))
}

/// `out = op(a) · op(b)` with broadcast batch dims, `op` transposing the operands flagged
/// (`ta`, `tb`: cuBLAS reads them transposed); all three of one float dtype.
pub(crate) fn matmul(dev: &Device, a: View<'_>, b: View<'_>, out: View<'_>, ta: bool, tb: bool) -> Result<()> {
    let r = out.shape.len();
    let (m, n) = (out.shape[r - 2], out.shape[r - 1]);
    let k = a.shape[a.shape.len() - if ta { 2 } else { 1 }];
    if out.numel() == 0 {
        return Ok(());
    }
    if k == 0 {
        return crate::ops::elementwise::zero(dev, out);
    }
    let (dt, compute) = match out.dtype {
        DType::F32 => (cudaDataType::CUDA_R_32F, cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::F64 => (cudaDataType::CUDA_R_64F, cublasComputeType_t::CUBLAS_COMPUTE_64F),
        DType::BF16 => (cudaDataType::CUDA_R_16BF, cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::F16 => (cudaDataType::CUDA_R_16F, cublasComputeType_t::CUBLAS_COMPUTE_32F),
        other => return Err(dev.err(format!("matmul of {other} is not supported"))),
    };
    let (mi, ni, ki) = (to_i32(dev, m, "m")?, to_i32(dev, n, "n")?, to_i32(dev, k, "k")?);
    // Column-major, the call computes Cᵀ = op(B)ᵀ·op(A)ᵀ: a row-major operand is its own
    // transpose there, so a flagged one is read with CUBLAS_OP_T and its stored row length.
    let op = |t: bool| if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N };
    let (op_a, lda) = (op(ta), if ta { mi } else { ki });
    let (op_b, ldb) = (op(tb), if tb { ki } else { ni });
    let batch = &out.shape[..r - 2];
    let mat = |shape: &[usize], size: usize| -> Vec<usize> {
        broadcast_strides(&shape[..shape.len() - 2], batch).iter().map(|s| s * size).collect()
    };
    let (sa, sb) = (mat(a.shape, m * k), mat(b.shape, k * n));
    let sc: Vec<usize> = strides(batch).iter().map(|s| s * m * n).collect();
    let (shape, s) = coalesce(batch, &[&sa, &sb, &sc]);
    let last = shape.len() - 1;
    let count = to_i32(dev, shape[last], "batch")?;
    let (inner_a, inner_b, inner_c) = (s[0][last], s[1][last], s[2][last]);
    let esz = out.dtype.size() as u64;
    let (alpha32, beta32, alpha64, beta64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
    let (alpha, beta): (*const c_void, *const c_void) = if out.dtype == DType::F64 {
        (&alpha64 as *const f64 as _, &beta64 as *const f64 as _)
    } else {
        (&alpha32 as *const f32 as _, &beta32 as *const f32 as _)
    };
    let outer = &shape[..last];
    for idx in odometer(outer) {
        let off = |st: &Vec<usize>| idx.iter().zip(st).map(|(i, s)| i * s).sum::<usize>() as u64 * esz;
        let (pa, pb, pc) = (a.ptr + off(&s[0]), b.ptr + off(&s[1]), out.ptr + off(&s[2]));
        // SAFETY: pointers address row-major operands of the shapes checked by the shape rule;
        // the strides stay inside them (batch offsets come from their own shapes); alpha/beta
        // point to host scalars of the compute type; the handle runs on the device's stream.
        unsafe {
            cudarc::cublas::result::gemm_strided_batched_ex(
                dev.blas,
                op_b,
                op_a,
                ni,
                mi,
                ki,
                alpha,
                pb as *const c_void,
                dt,
                ldb,
                inner_b as i64,
                pa as *const c_void,
                dt,
                lda,
                inner_a as i64,
                beta,
                pc as *mut c_void,
                dt,
                ni,
                inner_c as i64,
                count,
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| dev.fail(format!("cuBLAS GEMM ({m}x{k} · {k}x{n}, batch {count}, {})", out.dtype), e))?;
    }
    Ok(())
}

/// `matmul_t` with `fold`: `a [.., m]ᵀ · b [.., n]` over every leading axis, one GEMM of
/// `[rows, m]ᵀ · [rows, n]` on the same memory.
pub(crate) fn folded(dev: &Device, a: View<'_>, b: View<'_>, out: View<'_>) -> Result<()> {
    let (lead, m) = a.shape.split_at(a.shape.len() - 1);
    let rows: usize = lead.iter().product();
    let (a2, b2) = ([rows, m[0]], [rows, b.shape[b.shape.len() - 1]]);
    let a = View { shape: &a2, ..a };
    let b = View { shape: &b2, ..b };
    matmul(dev, a, b, out, true, false)
}
