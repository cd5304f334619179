//! remat: precise, explainable activation checkpointing.
pub use remat_core as core;
