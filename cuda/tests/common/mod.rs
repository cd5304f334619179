//! What the GPU test files share: the backend on GPU 0, or a printed skip.

#[path = "../../../benches/common/require.rs"]
pub mod require;

use remat_cuda::CudaBackend;

/// The CUDA backend on GPU 0, or `None` after printing why the test is skipped (an error where
/// `REMAT_REQUIRE` names `cuda`).
pub fn gpu() -> Option<CudaBackend> {
    match CudaBackend::new(0) {
        Ok(g) => Some(g),
        Err(e) => {
            require::skip("cuda", format!("the GPU is unusable: {e}"));
            None
        }
    }
}
