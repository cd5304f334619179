//! `scaled_matmul` on fp8 tensor cores through cuBLASLt (compute capability 8.9 and newer).
//!
//! cuBLASLt's fp8 kernels accept one layout, "TN": both operands stored K-major. The row-major
//! product `C[m,n] = A[m,k]·B[k,n]` is the column-major `Cᵀ = Bᵀ·Aᵀ`, so cuBLASLt's first
//! operand is `Bᵀ` (`[n,k]` row-major, read transposed) and its second is `A` as it is; `B` is
//! therefore transposed into scratch before each product. fp8 kernels also need every
//! dimension and leading dimension to be a multiple of 16 elements: unaligned operands are
//! copied zero-padded (zeros along k add nothing; the padded rows and columns of the result
//! are dropped when it is copied out). Aligned shapes, the usual case, touch no extra copies
//! besides `Bᵀ`.
//!
//! The result is `scale_a · scale_b · (A·B)`: the scales stay on the device and cuBLASLt reads
//! them (`A_SCALE_POINTER` / `B_SCALE_POINTER`); products accumulate in f32 with fast
//! accumulation off. cuBLASLt has no `e5m2 × e5m2` kernel, and GPUs before Ada/Hopper have no
//! fp8 tensor cores: both are errors that say so.

use crate::device::{Device, CUBLAS_WORKSPACE};
use crate::gemm::to_i32;
use crate::kernels::{Arg, LAYOUT};
use crate::ops::{elementwise::zero, Scratch, View};
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys as lt_sys;
use cudarc::cublaslt::sys::{
    cublasComputeType_t, cublasLtMatmulDescAttributes_t as DescAttr, cublasLtMatmulPreferenceAttributes_t as PrefAttr,
    cudaDataType,
};
use remat_core::matrix_offsets;
use remat_core::{DType, Result};
use std::ffi::c_void;

/// Element multiple fp8 GEMM dimensions are padded to.
const ALIGN: usize = 16;

/// Oldest compute capability with fp8 tensor cores (Ada, sm_89).
const MIN_FP8_CC: u32 = 89;

/// `out = (a · b) · scale_a · scale_b` for fp8 `a`, `b` and f32 scalars, f32 `out`.
pub(crate) fn scaled_matmul(
    dev: &Device,
    a: View<'_>,
    b: View<'_>,
    scale_a: View<'_>,
    scale_b: View<'_>,
    out: View<'_>,
) -> Result<()> {
    check_supported(dev, a.dtype, b.dtype, out.dtype)?;
    let r = out.shape.len();
    let (m, n, k) = (out.shape[r - 2], out.shape[r - 1], a.shape[a.shape.len() - 1]);
    if out.numel() == 0 {
        return Ok(());
    }
    if k == 0 {
        return zero(dev, out);
    }
    let (mp, np, kp) = (m.next_multiple_of(ALIGN), n.next_multiple_of(ALIGN), k.next_multiple_of(ALIGN));
    let handle = dev.cublaslt()?;
    // cuBLASLt's A is Bᵀ (scaled by scale_b), its B is A (scaled by scale_a).
    let gemm = LtGemm::new(dev, handle, Shape { m: np, n: mp, k: kp }, b.dtype, a.dtype, scale_b.ptr, scale_a.ptr)?;
    let bt = Scratch::new(dev, np * kp)?;
    let a_pad = if (mp, kp) != (m, k) { Some(Scratch::new(dev, mp * kp)?) } else { None };
    let d_pad = if (mp, np) != (m, n) { Some(Scratch::new(dev, mp * np * 4)?) } else { None };
    let batch = &out.shape[..r - 2];
    let (offs_a, offs_b) = (matrix_offsets(a.shape, batch), matrix_offsets(b.shape, batch));
    let mut bt_of = None;
    for (i, (oa, ob)) in offs_a.into_iter().zip(offs_b).enumerate() {
        let oc = i * m * n;
        // Bᵀ: row j of bt is column j of this batch's b (once for a b broadcast over the batch).
        if bt_of != Some(ob) {
            pad_copy(dev, 1, b.ptr + ob as u64, bt.ptr, [n, k], [1, n], [np, kp])?;
            bt_of = Some(ob);
        }
        let a_ptr = match &a_pad {
            Some(s) => {
                pad_copy(dev, 1, a.ptr + oa as u64, s.ptr, [m, k], [k, 1], [mp, kp])?;
                s.ptr
            }
            None => a.ptr + oa as u64,
        };
        let c_ptr = out.ptr + (oc * 4) as u64;
        match &d_pad {
            Some(d) => {
                gemm.run(dev, bt.ptr, a_ptr, d.ptr)?;
                pad_copy(dev, 4, d.ptr, c_ptr, [m, n], [np, 1], [m, n])?;
            }
            None => gemm.run(dev, bt.ptr, a_ptr, c_ptr)?,
        }
    }
    Ok(())
}

/// The GPU has fp8 tensor cores and cuBLASLt a kernel for these operand dtypes.
fn check_supported(dev: &Device, a: DType, b: DType, out: DType) -> Result<()> {
    if dev.cc < MIN_FP8_CC {
        return Err(dev.err(format!(
            "scaled_matmul needs fp8 tensor cores (compute capability 8.9 or newer, Ada or Hopper); {} is sm_{}",
            dev.name, dev.cc
        )));
    }
    if a == DType::F8E5M2 && b == DType::F8E5M2 {
        return Err(dev
            .err("cuBLASLt has no f8e5m2 × f8e5m2 product: quantise one operand (usually the activations) to f8e4m3"));
    }
    if out != DType::F32 {
        return Err(dev.err(format!("scaled_matmul produces f32, the call asks for {out}")));
    }
    Ok(())
}

/// `dst[i][j] = src[i·steps[0] + j·steps[1]]` for `i < shape[0]`, `j < shape[1]`, and zero for
/// the rest of the `padded` destination, elements of `esz` bytes:
/// `pad_copy_N(const E* x, E* y, u64 rows, u64 cols, u64 row_step, u64 col_step, u64 rows_p, u64 cols_p)`.
fn pad_copy(
    dev: &Device,
    esz: usize,
    src: u64,
    dst: u64,
    shape: [usize; 2],
    steps: [usize; 2],
    padded: [usize; 2],
) -> Result<()> {
    let args = [
        Arg::U64(src),
        Arg::U64(dst),
        Arg::U64(shape[0] as u64),
        Arg::U64(shape[1] as u64),
        Arg::U64(steps[0] as u64),
        Arg::U64(steps[1] as u64),
        Arg::U64(padded[0] as u64),
        Arg::U64(padded[1] as u64),
    ];
    let name = format!("pad_copy_{}", crate::kernels::elem_suffix(esz));
    dev.launch_1d(&LAYOUT, &name, padded[0] * padded[1], &args)
}

/// Column-major GEMM dimensions as cuBLASLt sees them: `D[m,n] = op(A)[m,k] · B[k,n]`.
#[derive(Clone, Copy, Debug)]
struct Shape {
    m: usize,
    n: usize,
    k: usize,
}

/// One fp8 product's cuBLASLt descriptors and chosen algorithm, destroyed on drop.
struct LtGemm {
    handle: lt_sys::cublasLtHandle_t,
    desc: lt_sys::cublasLtMatmulDesc_t,
    layouts: Vec<lt_sys::cublasLtMatrixLayout_t>,
    /// Set once the heuristic has answered (always, for a value `new` returned).
    algo: Option<lt_sys::cublasLtMatmulAlgo_t>,
    shape: Shape,
}

fn fp8_type(d: DType) -> cudaDataType {
    if d == DType::F8E5M2 {
        cudaDataType::CUDA_R_8F_E5M2
    } else {
        cudaDataType::CUDA_R_8F_E4M3
    }
}

impl LtGemm {
    /// Descriptors for `D = (scale_a·scale_b) · Aᵀ·B` with `A` stored `[k,m]` column-major
    /// (`a_type`), `B` stored `[k,n]` (`b_type`), f32 `D` `[m,n]`, and the fastest algorithm the
    /// heuristic offers within the shared workspace.
    fn new(
        dev: &Device,
        handle: lt_sys::cublasLtHandle_t,
        shape: Shape,
        a_type: DType,
        b_type: DType,
        scale_a: u64,
        scale_b: u64,
    ) -> Result<LtGemm> {
        let fail = |what: &str, e: lt::CublasError| {
            let gemm =
                format!("cuBLASLt fp8 GEMM ({}x{} · {}x{}, {a_type} × {b_type})", shape.m, shape.k, shape.k, shape.n);
            dev.fail(format!("{gemm}: {what}"), e)
        };
        for (what, v) in [("m", shape.m), ("n", shape.n), ("k", shape.k)] {
            to_i32(dev, v, what)?;
        }
        let desc = lt::create_matmul_desc(cublasComputeType_t::CUBLAS_COMPUTE_32F, cudaDataType::CUDA_R_32F)
            .map_err(|e| fail("matmul descriptor", e))?;
        // Owned from here on, so every exit destroys what was created.
        let mut gemm = LtGemm { handle, desc, layouts: Vec::new(), algo: None, shape };
        let op_t = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T as i32;
        let op_n = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N as i32;
        let fast_accum: i8 = 0;
        // SAFETY: each buffer is the attribute's documented type (int32 operations, int8 flag,
        // device pointers as void*), alive for the call, which copies it.
        unsafe {
            gemm.set(DescAttr::CUBLASLT_MATMUL_DESC_TRANSA, &op_t).map_err(|e| fail("TRANSA", e))?;
            gemm.set(DescAttr::CUBLASLT_MATMUL_DESC_TRANSB, &op_n).map_err(|e| fail("TRANSB", e))?;
            gemm.set(DescAttr::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &(scale_a as *const c_void))
                .map_err(|e| fail("A scale", e))?;
            gemm.set(DescAttr::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &(scale_b as *const c_void))
                .map_err(|e| fail("B scale", e))?;
            gemm.set(DescAttr::CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum).map_err(|e| fail("FAST_ACCUM", e))?;
        }
        let (m, n, k) = (shape.m as u64, shape.n as u64, shape.k as u64);
        for (ty, rows, cols) in [
            (fp8_type(a_type), k, m),
            (fp8_type(b_type), k, n),
            (cudaDataType::CUDA_R_32F, m, n),
            (cudaDataType::CUDA_R_32F, m, n),
        ] {
            let layout = lt::create_matrix_layout(ty, rows, cols, rows as i64).map_err(|e| fail("layout", e))?;
            gemm.layouts.push(layout);
        }
        let algo = gemm
            .choose_algo()
            .map_err(|e| fail("no algorithm (the heuristic found none for this shape within the workspace)", e))?;
        gemm.algo = Some(algo);
        Ok(gemm)
    }

    /// Sets one descriptor attribute to `value`.
    ///
    /// # Safety
    /// `T` must be the attribute's type.
    unsafe fn set<T>(&self, attr: DescAttr, value: &T) -> std::result::Result<(), lt::CublasError> {
        lt::set_matmul_desc_attribute(self.desc, attr, value as *const T as *const c_void, std::mem::size_of::<T>())
    }

    fn choose_algo(&self) -> std::result::Result<lt_sys::cublasLtMatmulAlgo_t, lt::CublasError> {
        let pref = lt::create_matmul_pref()?;
        let workspace = CUBLAS_WORKSPACE as u64;
        // SAFETY: the preference, descriptors and layouts are live; the workspace limit is a u64.
        let found = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                PrefAttr::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &workspace as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )
            .and_then(|()| {
                let l = &self.layouts;
                lt::get_matmul_algo_heuristic(self.handle, self.desc, l[0], l[1], l[2], l[3], pref)
            })
        };
        // SAFETY: created above, used no more.
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        Ok(found?.algo)
    }

    /// `d = scales · aᵀ·b` on the device's stream; `a`, `b`, `d` 16-byte aligned device pointers.
    fn run(&self, dev: &Device, a: u64, b: u64, d: u64) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let l = &self.layouts;
        let algo = self.algo.as_ref().map_or(std::ptr::null(), |a| a as *const _);
        // SAFETY: descriptors and layouts are live and describe buffers of these sizes (the
        // caller allocates them padded); alpha/beta are host f32 (the default pointer mode);
        // C is not read (beta = 0) but must be valid, so it aliases D; the workspace is the
        // device's, used only on this stream.
        unsafe {
            lt::matmul(
                self.handle,
                self.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                a as *const c_void,
                l[0],
                b as *const c_void,
                l[1],
                d as *const c_void,
                l[2],
                d as *mut c_void,
                l[3],
                algo,
                dev.workspace_ptr() as *mut c_void,
                CUBLAS_WORKSPACE,
                dev.stream.cu_stream() as lt_sys::cudaStream_t,
            )
        }
        .map_err(|e| {
            let s = self.shape;
            dev.fail(format!("cuBLASLt fp8 GEMM ({}x{} · {}x{})", s.m, s.k, s.k, s.n), e)
        })
    }
}

impl Drop for LtGemm {
    fn drop(&mut self) {
        // SAFETY: created in `new`, not used after this; cuBLASLt reads descriptors only while
        // enqueuing, so destroying them with work still queued is allowed.
        unsafe {
            for &l in &self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}
