//! remat-core: ops, tracing into a tagged graph, autodiff, planning and the CPU backend.
//!
//! Data flows one way: **trace → tagged forward graph → autodiff (joint graph) → partition →
//! plan → backend executes → report.** Backends know nothing of tags; the partitioner knows
//! nothing of kernels.
//!
//! Every module is private: each public item has one path, at this root.
//!
//! Environment variables read: `REMAT_NUM_THREADS` (a [`CpuBackend`]'s default thread count),
//! `REMAT_KEEP_FREED_MEMORY` (`1` keeps freed memory for the next step, as
//! [`keep_freed_memory`] does; unset, glibc's malloc is left alone) and `REMAT_WARNINGS` (`off` silences the warnings remat writes to standard error).

#![warn(missing_docs)]

mod autodiff;
mod backend;
pub mod compare;
mod concurrent;
mod cpu_features;
mod decode;
mod dtype;
mod error;
mod exec;
mod graph;
mod host;
mod id;
mod json;
mod json_writer;
mod model;
mod op;
mod optim;
mod partition;
mod peak;
mod pipeline;
mod plan;
mod policy;
mod recording;
mod region;
mod report;
mod rng;
mod shape;
mod state;
mod tensor;
mod tensor_ops;
mod text;
mod trace;
mod train;
mod update;
mod warning;

// Tracing a model.
pub use dtype::DType;
pub use op::{AttnLayout, Init};
pub use tensor::Tensor;
pub use trace::Trace;
// Policies and regions.
pub use policy::{Policy, PolicySource};
pub use region::{enter_region, enter_region_with, in_region, PolicyTable, RegionGuard, RegionPolicy, RegionSpec};
pub use remat_catalog::PolicyError;
// Graphs and ops.
pub use autodiff::JointGraph;
pub use graph::{Graph, Inputs, Label, Node, Region, Shape, SrcLoc, Tag};
pub use id::{NodeId, RegionId};
pub use op::{
    ArgReduceOp, Arity, AttnDims, BinaryOp, CompareOp, Domain, GradReads, LogicOp, Member, Meta, Op, OpInfo, OpKind,
    OtherKind, ReduceOp, UnaryGradOp, UnaryOp, CATALOG,
};
// Partitioning.
pub use partition::{
    check, counts_bytes, evaluate, exposed_times, partition, partition_with, value_bytes, Action, Budget, CostModel,
    Decision, DocId, Evaluation, Flags, OffloadReason, PGraph, PNode, PRegion, Partition, Reason, StorageType,
    Strategy,
};
/// Test hooks (the `test-hooks` feature, which only this crate's own tests turn on).
#[cfg(feature = "test-hooks")]
pub use partition::{partition_by_heuristic, partition_by_program};
pub use peak::{partition_for_peak, peak_lower_bound, PeakBound, SearchTime, STOPPING_GAP as PEAK_STOPPING_GAP};
// The pipeline: a document or graph to its partition, plan and report.
pub use pipeline::{Evaluated, Partitioned, Problem};
// Plans.
pub use plan::{node_flops, Plan, Step, TransferWindow};
// Graph documents.
pub use json::{
    read as read_document, read_graph, read_joint, write_graph, write_joint, Document, GRAPH_FORMAT, JOINT_FORMAT,
    VERSION as FORMAT_VERSION,
};
// Reports.
pub use report::{dot, fmt_bytes, reason_code, Report};
pub use text::one_line;
// Running and training.
pub use backend::cpu::{keep_freed_memory, release_freed_memory, CpuBackend, CpuBuffer, CpuHostBuffer};
pub use backend::{Backend, KernelCall, MemoryStats, TransferStats};
pub use exec::{run, run_inference, RunOutput};
pub use host::{HostData, HostTensor, HostValuesMut};
pub use model::{Feeds, Inference, InferenceOutput, Model, Params, StepOutput};
pub use optim::{AdamW, Optimizer, Sgd};
pub use state::{load_state, save_state, Progress};
pub use train::{GradientReducer, Gradients, TrainOptions, TrainState, TrainStepOutput};
pub use update::{clip_factor, host_sum_squares, host_update, Coefficients, RuleKind, UpdateCall, UpdateRule};
// Generation.
pub use decode::{DecodeStep, Decoder, DecoderBuilder, Generation, Sampling};
// For backends: shapes' strides and the random streams every device draws alike.
pub use rng::{drop_threshold, normal_f64, stream_seed, uniform_u32};
pub use shape::{broadcast_strides, coalesce, fmt_shape, matrix_offsets, odometer, reduced, strides};
// Errors.
pub use error::{CollectiveKind, Error, Limit, Result};
