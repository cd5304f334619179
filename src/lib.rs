//! remat: precise, explainable activation checkpointing for Rust.
//!
//! Annotate model functions with `#[checkpoint(policy = ...)]`, trace the model into a tagged
//! graph, and remat derives the backward pass, decides which forward values to save and which to
//! recompute — honouring every tag — and runs forward + backward on the CPU (or a GPU),
//! measuring the memory it really used.
//!
//! This crate re-exports [`remat_core`] (ops, tracing, autodiff, planning, the CPU backend),
//! the `#[checkpoint]` attribute, and the CUDA backend.

#![warn(missing_docs)]

pub use remat_core::*;

/// The CUDA backend.
pub use remat_cuda as cuda;

/// What model code needs: `use remat::prelude::*;`.
pub mod prelude {
    pub use remat_core::{AdamW, Backend, CpuBackend, DType, Feeds, HostTensor, Init, Model, Optimizer, Params, Sgd};
    pub use remat_core::{Policy, Tensor, Trace};
}

/// Items the `#[checkpoint]` expansion refers to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use remat_core::region::{enter_region, PolicyTable, RegionGuard, RegionSpec};
    pub use remat_core::{OpKind, Policy, Tensor};
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
