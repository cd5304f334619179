//! remat-core: ops, tracing into a tagged graph, autodiff, planning and the CPU backend.
//!
//! Data flows one way: **trace → tagged forward graph → autodiff (joint graph) → partition →
//! plan → backend executes → report.** Backends know nothing of tags; the partitioner knows
//! nothing of kernels.

#![warn(missing_docs)]

pub mod backend;
mod dtype;
mod error;
mod graph;
mod host;
pub mod op;
pub mod region;
pub mod rng;
pub mod shape;

pub use backend::cpu::{CpuBackend, CpuBuffer};
pub use backend::{Backend, KernelCall, MemoryStats};
pub use dtype::DType;
pub use error::{Error, Result};
pub use graph::{Graph, Node, NodeId, Policy, PolicySource, Region, RegionId, SrcLoc, Tag};
pub use host::{HostData, HostTensor};
pub use op::{Op, OpKind};
pub use region::{enter_region, PolicyTable, RegionGuard, RegionSpec};
