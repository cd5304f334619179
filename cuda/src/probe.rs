//! Finding the CUDA libraries and a device without panicking, once per process.
//!
//! cudarc loads `libcuda`, `libnvrtc`, `libcublas` and `libcublasLt` lazily and panics when one
//! is missing, so every entry point asks here first: each library is dlopen-ed once (`is_culib_present`) and
//! the answers are cached. `DriverError`s are only formatted once the driver library is known to
//! be present (their `Debug` loads it).

use std::sync::OnceLock;

/// Where to look, for error messages.
const HINT: &str = "put the CUDA library folder on LD_LIBRARY_PATH (e.g. /usr/local/cuda/lib64, or a pip \
                    package's nvidia/*/lib)";

fn cached(
    cell: &'static OnceLock<Result<(), String>>,
    probe: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    cell.get_or_init(probe).clone()
}

/// The driver library (`libcuda.so`): present and initialised.
pub fn driver() -> Result<(), String> {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    cached(&CELL, || {
        // SAFETY: only dlopens candidate library names; no symbol is called.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(format!("the CUDA driver library libcuda.so was not found (no NVIDIA driver?); {HINT}"));
        }
        cudarc::driver::result::init().map_err(|e| format!("cuInit failed: {e:?}"))
    })
}

/// `Ok` when `present` (one of cudarc's `is_culib_present`, which only dlopens candidate names)
/// finds the library, else "`what` was not found" with where to look and `extra` advice.
fn library(
    cell: &'static OnceLock<Result<(), String>>,
    present: unsafe fn() -> bool,
    what: &str,
    extra: &str,
) -> Result<(), String> {
    // SAFETY: `present` only dlopens candidate library names; no symbol is called.
    cached(cell, || if unsafe { present() } { Ok(()) } else { Err(format!("{what} was not found; {HINT}{extra}")) })
}

/// NVRTC (`libnvrtc.so.13`), needed to compile kernels; no device required.
pub fn nvrtc() -> Result<(), String> {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    let advice = "; `pip install nvidia-cuda-nvrtc==13.0.*` ships it";
    library(&CELL, cudarc::nvrtc::sys::is_culib_present, "NVRTC (libnvrtc.so.13)", advice)
}

/// cuBLAS (`libcublas.so.13`), needed for matrix products.
pub fn cublas() -> Result<(), String> {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    library(&CELL, cudarc::cublas::sys::is_culib_present, "cuBLAS (libcublas.so.13)", "")
}

/// cuBLASLt (`libcublasLt.so.13`), needed only for fp8 products (`scaled_matmul`).
pub fn cublaslt() -> Result<(), String> {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    library(
        &CELL,
        cudarc::cublaslt::sys::is_culib_present,
        "cuBLASLt (libcublasLt.so.13), which scaled_matmul needs,",
        "",
    )
}

/// Number of CUDA devices (0 when the driver has none).
pub fn device_count() -> Result<usize, String> {
    static CELL: OnceLock<Result<usize, String>> = OnceLock::new();
    CELL.get_or_init(|| {
        driver()?;
        let n = cudarc::driver::result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e:?}"))?;
        Ok(n.max(0) as usize)
    })
    .clone()
}

/// Everything [`crate::CudaBackend::new`] needs for device `ordinal`, or what is missing.
pub fn usable(ordinal: usize) -> Result<(), String> {
    driver()?;
    let n = device_count()?;
    if n == 0 {
        return Err("the CUDA driver reports no device".into());
    }
    if ordinal >= n {
        return Err(format!("device {ordinal} requested, the driver reports {n} device(s)"));
    }
    nvrtc()?;
    cublas()?;
    Ok(())
}

/// Why the GPU cannot be used here (`None` when device 0 is usable): what GPU tests print when
/// they skip.
pub fn unavailable_reason() -> Option<String> {
    usable(0).err()
}
