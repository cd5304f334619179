//! remat-core: ops, tracing into a tagged graph, autodiff, planning and the CPU backend.
//!
//! Data flows one way: **trace → tagged forward graph → autodiff (joint graph) → partition →
//! plan → backend executes → report.** Backends know nothing of tags; the partitioner knows
//! nothing of kernels.

#![warn(missing_docs)]

pub mod autodiff;
pub mod backend;
mod concurrent;
mod cpu_features;
pub mod decode;
mod dtype;
mod error;
mod exec;
mod graph;
mod host;
mod id;
pub mod json;
mod large_blocks;
mod model;
pub mod op;
mod optim;
pub mod partition;
pub mod peak;
pub mod plan;
mod policy;
mod recording;
pub mod region;
pub mod report;
pub mod rng;
pub mod shape;
mod state;
mod tensor;
mod tensor_ops;
pub mod text;
mod trace;
mod warning;
pub mod zoo;

pub use autodiff::JointGraph;
pub use backend::cpu::{
    keeps_freed_memory, release_freed_memory, CpuBackend, CpuBuffer, CpuHostBuffer, KEEP_FREED_MEMORY_VAR, THREADS_VAR,
};
pub use backend::{Backend, KernelCall, MemoryStats};
pub use decode::{DecodeStep, Decoder, DecoderBuilder, Generation, Sampling};
pub use dtype::DType;
pub use error::{Error, Result};
pub use exec::{run, run_inference, RunOutput};
pub use graph::{Graph, Inputs, Label, Node, Region, Shape, SrcLoc, Tag};
pub use host::{HostData, HostTensor, HostValuesMut};
pub use id::{NodeId, RegionId};
pub use large_blocks::{HugePageAlloc, LargeBlockAlloc};
pub use model::{Feeds, Inference, InferenceOutput, Model, Params, StepOutput};
pub use op::{
    AttnDims, AttnLayout, BinaryOp, CompareOp, Domain, GradReads, Init, Member, Op, OpKind, OtherKind, ReduceOp,
    UnaryGradOp, UnaryOp,
};
pub use optim::{AdamW, Optimizer, Sgd};
pub use partition::{Action, Budget, CostModel, Decision, OffloadReason, Partition, Reason, Strategy};
pub use plan::{Plan, Schedulable, Step, TransferWindow};
pub use policy::{Policy, PolicySource};
pub use region::{enter_region, enter_region_with, PolicyTable, RegionGuard, RegionPolicy, RegionSpec};
pub use remat_catalog::PolicyError;
pub use state::{load_state, save_state, Progress};
pub use tensor::Tensor;
pub use trace::Trace;
pub use warning::WARNINGS_VAR;
