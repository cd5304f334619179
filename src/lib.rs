//! remat: precise, explainable activation checkpointing for Rust.
//!
//! Annotate model functions with `#[checkpoint(policy = ...)]`, trace the model into a tagged
//! graph, and remat derives the backward pass, decides which forward values to save and which to
//! recompute — honouring every tag — and runs forward + backward on the CPU (or a GPU),
//! measuring the memory it really used.
//!
//! The root holds what a model author uses — tracing ([`Trace`], [`Tensor`]), policies
//! ([`checkpoint`], [`policy!`], [`RegionPolicy`]), planning ([`Model`], [`Strategy`],
//! [`Partition`], [`Plan`]), running and training ([`CpuBackend`], [`Params`], [`AdamW`]) — each
//! by one path; `use remat::prelude::*` brings the common ones. Each module is the one path to
//! what it holds: [`json`] (graph documents), [`compare`] (policies side by side), [`partition`] (partitioning a joint graph directly,
//! scoring a decision), [`region`] (regions entered by hand), [`report`] (text, JSON and DOT
//! reports), [`backend`] (for backend authors), [`dist`] (data parallelism) and, with the `cuda`
//! feature (on by default), `cuda`. Ready-made models (an MLP, a GPT) for trying remat are in the
//! `remat-zoo` crate of the repository.
//!
//! Environment variables read: `REMAT_NUM_THREADS` (a [`CpuBackend`]'s default thread count),
//! `REMAT_KEEP_FREED_MEMORY` (`1` keeps freed memory for the next step, as
//! [`keep_freed_memory`] does; unset, glibc's malloc is left alone) and `REMAT_WARNINGS` (`off` silences the warnings remat writes to
//! standard error).

#![warn(missing_docs)]

// Tracing a model.
pub use remat_core::{AttnLayout, DType, Init, Tensor, Trace};
// Policies.
pub use remat_core::{Policy, PolicyError, PolicySource, RegionPolicy};
// Graphs and ops.
pub use remat_core::{ArgReduceOp, BinaryOp, CompareOp, LogicOp, Op, OpKind, ReduceOp, UnaryGradOp, UnaryOp};
pub use remat_core::{Graph, JointGraph, Node, NodeId, Region, RegionId, SrcLoc, Tag};
// Planning.
pub use remat_core::{
    Action, Budget, CostModel, Decision, Model, OffloadReason, Partition, Plan, Reason, SearchTime, Step, Strategy,
    TransferWindow, PEAK_STOPPING_GAP,
};
// A graph document or a traced graph to its partition, plan and report, in one pipeline.
pub use remat_core::{Evaluated, Partitioned, Problem};
// Running and training.
pub use remat_core::{keep_freed_memory, release_freed_memory};
pub use remat_core::{load_state, save_state, AdamW, Optimizer, Progress, Sgd};
pub use remat_core::{
    CpuBackend, Feeds, HostData, HostTensor, HostValuesMut, Inference, InferenceOutput, Params, StepOutput,
};
pub use remat_core::{GradientReducer, Gradients, TrainOptions, TrainState, TrainStepOutput, UpdateRule};
// Generation.
pub use remat_core::{DecodeStep, Decoder, DecoderBuilder, Generation, Sampling};
// Errors.
pub use remat_core::{CollectiveKind, Error, Limit, Result};

/// Data-parallel training: collectives over Open MPI (feature `mpi`, on by default) or one
/// process, gradients reduced in buckets during the backward, ZeRO-1 (`docs/distributed.md`).
pub mod dist {
    pub use remat_dist::*;
}

/// Comparing checkpointing policies on one model in one run, and the table of them (what every
/// example ends with).
pub mod compare {
    pub use remat_core::compare::{compare, Row, Table};
}

/// Graph documents as JSON: `remat.graph` (a forward graph remat differentiates) and
/// `remat.joint` (an already-joint graph, e.g. exported from PyTorch). See `docs/graph-json.md`.
pub mod json {
    pub use remat_core::{read_document as read, read_graph, read_joint, write_graph, write_joint, Document};
    pub use remat_core::{FORMAT_VERSION as VERSION, GRAPH_FORMAT, JOINT_FORMAT};
}

/// Partitioning a joint graph directly (what [`Model`] does for traced models): the graph the
/// partitioner sees, the strategies' entry points, the independent rule checker, and scoring a
/// given decision.
pub mod partition {
    pub use remat_core::{check, counts_bytes, evaluate, partition, partition_for_peak, partition_with, Evaluation};
    pub use remat_core::{value_bytes, DocId, Flags, PGraph, PNode, PRegion, StorageType};
}

/// Regions by hand, without the macro: what `#[checkpoint]` expands into (a `'static`
/// [`RegionSpec`](region::RegionSpec) entered for the duration of a call).
pub mod region {
    pub use remat_core::{enter_region, enter_region_with, in_region, PolicyTable, RegionGuard, RegionSpec};
}

/// Reports of a partition: a text table with a reason per value, JSON, Graphviz DOT.
pub mod report {
    pub use remat_core::{dot, fmt_bytes, one_line, reason_code, Report};
}

/// For backend authors: the trait a device implements, what a kernel call carries, and the
/// executor that drives a backend through a plan.
pub mod backend {
    pub use remat_core::{clip_factor, host_sum_squares, host_update, Coefficients, RuleKind, UpdateCall};
    pub use remat_core::{
        run, run_inference, Backend, CpuBuffer, CpuHostBuffer, KernelCall, MemoryStats, RunOutput, TransferStats,
    };
    pub use remat_core::{Arity, AttnDims, Domain, GradReads, Member, Meta, OpInfo, OtherKind, CATALOG};
}

/// Makes a function a checkpointed region; see the attribute's own documentation below for the
/// forms and the compile errors.
///
/// Every form, on a small model (tracing records ops; nothing is executed):
///
/// ```rust
/// use remat::prelude::*;
/// use remat::PolicySource;
///
/// // Classic checkpointing: every op prefer_recompute (same as `policy = recompute_all`).
/// #[checkpoint]
/// fn plain(x: &Tensor) -> Tensor {
///     x.exp()
/// }
///
/// // Every op prefer_save: the region is tagged for boundaries and reports.
/// #[checkpoint(policy = save_all)]
/// fn tagged(x: &Tensor) -> Tensor {
///     x.exp()
/// }
///
/// // Matmuls must be saved, everything else is recomputed; keep at most half the bytes.
/// #[checkpoint(policy = save(matmul), budget = 0.5)]
/// fn ffn(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
///     let h = x.matmul(w1).gelu();
///     h.matmul(w2)
/// }
///
/// // GELUs must be recomputed, everything else is saved.
/// #[checkpoint(policy = recompute(gelu))]
/// fn cheap(x: &Tensor, w: &Tensor) -> Tensor {
///     x.matmul(w).gelu()
/// }
///
/// // Values named "attn" must be saved.
/// #[checkpoint(policy = save_names("attn"))]
/// fn attention(q: &Tensor, k: &Tensor) -> Tensor {
///     q.matmul(&k.t()).softmax().name("attn")
/// }
///
/// // Full control; every key optional.
/// #[checkpoint(policy = rules(must_save = [matmul], must_recompute = [softmax], default = prefer_save))]
/// fn custom(x: &Tensor, w: &Tensor) -> Tensor {
///     x.matmul(w).softmax().exp()
/// }
///
/// // Matmul outputs wait in host memory between the forward and the backward.
/// #[checkpoint(policy = offload(matmul))]
/// fn offloaded(x: &Tensor, w: &Tensor) -> Tensor {
///     x.matmul(w).gelu()
/// }
///
/// // Values named "ctx" are offloaded; save matmuls and let the rest go to host memory when kept.
/// #[checkpoint(policy = offload_names("ctx"))]
/// fn named_offload(q: &Tensor, k: &Tensor) -> Tensor {
///     q.matmul(&k.t()).softmax().name("ctx")
/// }
/// #[checkpoint(policy = rules(must_save = [matmul], default = prefer_offload))]
/// fn save_matmuls_offload_rest(x: &Tensor, w: &Tensor) -> Tensor {
///     x.matmul(w).gelu()
/// }
///
/// // Statement attributes override the policy of the value their `let` binds.
/// #[checkpoint(policy = save(matmul))]
/// fn statements(x: &Tensor, w: &Tensor) -> Tensor {
///     #[recompute]
///     let h = x.matmul(w);
///     #[save]
///     let g = h.gelu();
///     #[offload]
///     let e = g.exp();
///     e.sin()
/// }
///
/// // Methods too.
/// struct Layer {
///     w: Tensor,
/// }
///
/// impl Layer {
///     #[checkpoint(policy = save(matmul))]
///     fn forward(&self, x: &Tensor) -> Tensor {
///         x.matmul(&self.w).relu()
///     }
/// }
///
/// let trace = Trace::new();
/// let x = trace.input("x", &[4, 3], DType::F32);
/// let w = trace.param("w", &[3, 3], DType::F32);
/// let y = ffn(&x, &w, &w);
/// let tag = y.tag().unwrap();
/// assert_eq!((tag.policy, tag.source), (Policy::MustSave, PolicySource::OpKind));
/// assert_eq!(trace.snapshot().region(tag.region).budget, Some(0.5));
/// assert_eq!(cheap(&x, &w).tag().unwrap().policy, Policy::MustRecompute);
/// assert_eq!(attention(&x, &x).tag().unwrap().policy, Policy::MustSave);
/// assert_eq!(custom(&x, &w).tag().unwrap().policy, Policy::PreferSave);
/// assert_eq!(plain(&x).tag().unwrap().policy, Policy::PreferRecompute);
/// assert_eq!(tagged(&x).tag().unwrap().policy, Policy::PreferSave);
/// assert_eq!(statements(&x, &w).tag().unwrap().policy, Policy::PreferRecompute);
/// assert_eq!(offloaded(&x, &w).tag().unwrap().policy, Policy::PreferRecompute);
/// assert_eq!(named_offload(&x, &x).tag().unwrap().policy, Policy::MustOffload);
/// assert_eq!(save_matmuls_offload_rest(&x, &w).tag().unwrap().policy, Policy::PreferOffload);
/// let layer = Layer { w };
/// assert_eq!(layer.forward(&x).tag().unwrap().policy, Policy::PreferRecompute);
/// // Two calls, two region instances; ops outside regions are untagged.
/// assert_ne!(plain(&x).tag().unwrap().region, plain(&x).tag().unwrap().region);
/// assert_eq!(x.exp().tag(), None);
/// ```
pub use remat_macros::checkpoint;

/// A region policy as a value ([`RegionPolicy`]), checked at compile time like `#[checkpoint]`;
/// pass it to a function checkpointed with `#[checkpoint(policy = arg(p))]` to choose a region's
/// policy when the program runs.
///
/// ```rust
/// use remat::prelude::*;
/// use remat::{OpKind, RegionPolicy};
///
/// // The region's policy is whatever the caller passes.
/// #[checkpoint(policy = arg(policy))]
/// fn ffn(policy: &RegionPolicy, x: &Tensor, w: &Tensor) -> Tensor {
///     x.matmul(w).gelu()
/// }
///
/// const SAVE_MATMULS: RegionPolicy = policy!(save(matmul));
/// let chosen = [SAVE_MATMULS, policy!(recompute_all), policy!(save_all, budget = 0.5)];
/// // ... or from a flag or a config file, with the same grammar and the same messages:
/// let from_flag: RegionPolicy = "recompute(gelu)".parse().unwrap();
/// assert!("save(gelo)".parse::<RegionPolicy>().unwrap_err().to_string().contains("did you mean `gelu`?"));
///
/// let trace = Trace::new();
/// let x = trace.input("x", &[4, 3], DType::F32);
/// let w = trace.param("w", &[3, 3], DType::F32);
/// let tags: Vec<Policy> = chosen.iter().chain([&from_flag]).map(|p| ffn(p, &x, &w).tag().unwrap().policy).collect();
/// assert_eq!(tags, [Policy::PreferRecompute, Policy::PreferRecompute, Policy::PreferSave, Policy::MustRecompute]);
/// let graph = trace.snapshot();
/// let matmul = graph.nodes().iter().find(|n| n.op.kind() == OpKind::Matmul).unwrap();
/// assert_eq!(matmul.tag.unwrap().policy, Policy::MustSave);
/// assert_eq!(graph.regions()[2].budget, Some(0.5));
/// ```
pub use remat_macros::policy;

/// The CUDA backend (the `cuda` feature, on by default).
#[cfg(feature = "cuda")]
pub use remat_cuda as cuda;

/// What model code needs: `use remat::prelude::*;`.
pub mod prelude {
    pub use remat_core::Backend;
    pub use remat_core::{AdamW, CpuBackend, DType, Feeds, HostTensor, Init, Model, Optimizer, Params, Sgd};
    pub use remat_core::{Budget, Policy, RegionPolicy, Strategy, Tensor, Trace};
    pub use remat_core::{DecodeStep, DecoderBuilder, Sampling};
    pub use remat_core::{TrainOptions, TrainState};
    pub use remat_macros::{checkpoint, policy};
}

/// Items the `#[checkpoint]` expansion refers to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use remat_core::{enter_region, enter_region_with, PolicyTable, RegionGuard, RegionPolicy, RegionSpec};
    pub use remat_core::{OpKind, Policy, Tensor};

    /// What `#[save]` / `#[recompute]` / `#[offload]` apply their policy to: the value their
    /// `let` binds.
    #[diagnostic::on_unimplemented(
        message = "`#[save]` / `#[recompute]` / `#[offload]` apply to tensors, not to `{Self}`",
        label = "the value this statement binds is a `{Self}`",
        note = "the statement must bind a `Tensor`, or a reference, tuple (up to 12; nest tuples for more), array, slice, `Vec` or `Option` of them"
    )]
    pub trait StatementPolicy {
        /// Gives every tensor in `self` the policy (see [`Tensor::set_policy`]).
        fn statement_policy(&self, policy: Policy);
    }

    impl StatementPolicy for Tensor {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            self.set_policy(policy);
        }
    }

    impl<T: StatementPolicy + ?Sized> StatementPolicy for &T {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            (**self).statement_policy(policy);
        }
    }

    impl<T: StatementPolicy> StatementPolicy for [T] {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            for value in self {
                value.statement_policy(policy);
            }
        }
    }

    impl<T: StatementPolicy, const N: usize> StatementPolicy for [T; N] {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            self.as_slice().statement_policy(policy);
        }
    }

    impl<T: StatementPolicy> StatementPolicy for Vec<T> {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            self.as_slice().statement_policy(policy);
        }
    }

    impl<T: StatementPolicy> StatementPolicy for Option<T> {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            if let Some(value) = self {
                value.statement_policy(policy);
            }
        }
    }

    macro_rules! tuples {
        ($( ($($t:ident $i:tt),+) )*) => {$(
            impl<$($t: StatementPolicy),+> StatementPolicy for ($($t,)+) {
                #[track_caller]
                fn statement_policy(&self, policy: Policy) {
                    $( self.$i.statement_policy(policy); )+
                }
            }
        )*};
    }

    tuples! {
        (A 0)
        (A 0, B 1)
        (A 0, B 1, C 2)
        (A 0, B 1, C 2, D 3)
        (A 0, B 1, C 2, D 3, E 4)
        (A 0, B 1, C 2, D 3, E 4, F 5)
        (A 0, B 1, C 2, D 3, E 4, F 5, G 6)
        (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7)
        (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8)
        (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9)
        (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10)
        (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11)
    }
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/policies.md")]
struct PoliciesMd;

#[cfg(doctest)]
#[doc = include_str!("../docs/strategies.md")]
struct StrategiesMd;

#[cfg(doctest)]
#[doc = include_str!("../docs/offload.md")]
struct OffloadMd;

#[cfg(doctest)]
#[doc = include_str!("../docs/reports.md")]
struct ReportsMd;

#[cfg(doctest)]
#[doc = include_str!("../docs/cli.md")]
struct CliMd;

#[cfg(doctest)]
#[doc = include_str!("../docs/ops.md")]
struct OpsMd;

#[cfg(doctest)]
#[doc = include_str!("../docs/performance.md")]
struct PerformanceMd;

#[cfg(doctest)]
#[doc = include_str!("../docs/gpu.md")]
struct GpuMd;

#[cfg(doctest)]
#[doc = include_str!("../docs/generation.md")]
struct GenerationMd;

#[cfg(doctest)]
#[doc = include_str!("../docs/torch.md")]
struct TorchMd;

#[cfg(all(doctest, feature = "mpi"))]
#[doc = include_str!("../docs/distributed.md")]
struct DistributedMd;
