//! remat-cuda: the CUDA backend of remat.
//!
//! Kernels are CUDA C sources embedded in the crate, compiled at run time by NVRTC to a cubin
//! for the device's own architecture and cached per process; matrix products go through cuBLAS,
//! fp8 products (`scaled_matmul`) through cuBLASLt on GPUs with fp8 tensor cores (sm_89+).
//! The crate builds and its tests run without CUDA: the driver, NVRTC and cuBLAS are loaded at
//! run time, and [`CudaBackend::new`] answers an error naming what is missing.
//!
//! Memory: buffers come from the device's stream-ordered pool (freed blocks stay cached) and
//! [`Backend::memory`](remat_core::Backend::memory) counts the bytes of live buffers exactly as
//! the CPU backend does, so a step's measured peak equals the plan's prediction. On top of it the
//! device holds a constant [`CUBLAS_WORKSPACE`] and short-lived scratch (see
//! [`CudaBackend::pool_peak`]).
//!
//! Offload: values go to pinned host memory and back on two copy streams, ordered against the
//! compute stream by events, without host synchronisation; the host tier is metered as on the CPU
//! (see [`CudaBackend`]).
//!
//! ```no_run
//! use remat_core::Model;
//! use remat_cuda::CudaBackend;
//! use remat_zoo as zoo;
//!
//! let cfg = zoo::MlpConfig { batch: 8, widths: vec![4, 16, 3] };
//! let model = Model::new(zoo::mlp(&cfg)?)?;
//! let params = model.init_params(0)?;
//! let mut gpu = CudaBackend::new(0)?; // Err on a machine without a usable GPU
//! let out = model.step(&mut gpu, &params, &zoo::mlp_feeds(&cfg, 0)?)?;
//! assert_eq!(out.measured_peak, out.predicted_peak);
//! # Ok::<(), remat_core::Error>(())
//! ```

#![warn(missing_docs)]

mod backend;
mod compile;
mod device;
mod fp8;
mod gemm;
mod kernels;
#[cfg(feature = "nccl")]
mod nccl;
#[cfg(feature = "nccl")]
mod nccl_grads;
#[cfg(test)]
mod nvrtc_tests;
mod ops;
mod probe;
mod transfer;

pub use backend::{CudaBackend, CudaBuffer, CudaHostBuffer};
pub use device::CUBLAS_WORKSPACE;
#[cfg(feature = "nccl")]
pub use nccl::Nccl;
#[cfg(feature = "nccl")]
pub use nccl_grads::NcclGradients;
pub use probe::unavailable_reason;
