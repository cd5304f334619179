//! Data-parallel training for remat.
//!
//! - [`Collective`]: the operations data parallelism needs (all-reduce, broadcast, all-gather,
//!   reduce-scatter, barrier; rank and world size), with two engines: [`Local`] (one process,
//!   every operation the identity) and [`Engine`], a communication library driven by a thread of
//!   its own through a [`Transport`]: with the `mpi` feature, [`Mpi::init`] (Open MPI, for CPU
//!   processes started by `mpirun -np N`); `remat-cuda`'s `nccl` feature adds NCCL. Reductions
//!   sum in rank order, so every rank gets the same bits and a run is deterministic for a given
//!   world size.
//! - [`DataParallel`]: parameters broadcast from rank 0 (refused, naming the parameter, when
//!   ranks built different models); each rank runs forward and backward on its shard of the
//!   batch ([`DataParallel::shard`]); each gradient goes into a bucket the moment the backward
//!   finishes it ([`remat_core::Model::step_streaming`]) and a full bucket is reduced while the
//!   backward goes on. [`StepComm`] reports the bytes moved and how much of the reduction was
//!   hidden behind the backward.
//! - [`ShardedAdamW`]: ZeRO-1, AdamW's moments split over the ranks.
//!
//! Ranks agree or stop together: [`DataParallel::agree`] compares every rank's settings
//! ([`RankConfig`]: world size, batch, steps, optimizer and its step, resumed state, buckets)
//! before the first step, and an [`Engine`] compares every collective's operation and length
//! before running it, so that ranks never exchange buffers of different lengths: a difference is
//! an error on every rank naming it. A rank whose program ends (or fails:
//! [`exit_with_error`]) tells the others, which stop at their next collective. A collective
//! that does not finish within `REMAT_DIST_TIMEOUT` seconds (120 by default) is an error naming
//! it on the rank that waited: a rank that dies ends the job instead of hanging it.

mod agreement;
mod collective;
mod data_parallel;
mod engine;
mod guard;
#[cfg(feature = "mpi")]
mod mpi_engine;
mod resident;
mod zero;

pub use agreement::{agree, first_difference, state_digest, Disagreement, Field, RankConfig, FIELDS};
pub use agreement::{OPTIMIZER_ADAMW, OPTIMIZER_ZERO1};
pub use collective::{exit_now, exit_with_error, parse_timeout, sum_in_rank_order, timeout_from_env};
pub use collective::{Collective, Local, Pending, Span};
pub use collective::{DEFAULT_TIMEOUT, MAX_TIMEOUT_SECONDS, MIN_TIMEOUT_SECONDS, TIMEOUT_VAR};
pub use data_parallel::{CommPlan, DataParallel, DpStep, StepComm, DEFAULT_BUCKET_BYTES};
pub use engine::{Engine, Transport};
#[cfg(feature = "mpi")]
pub use mpi_engine::Mpi;
pub use resident::DpTrainStep;
pub use zero::ShardedAdamW;
