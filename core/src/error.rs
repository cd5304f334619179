//! The one error type of remat-core.

use crate::id::NodeId;
use crate::text::fmt_bytes;

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let message = self.to_string();
        f.write_str(&message)?;
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            let text = c.to_string();
            if !message.contains(&text) {
                write!(f, "\n  caused by: {text}")?;
            }
            cause = c.source();
        }
        Ok(())
    }
}

/// Everything that can go wrong in remat-core. Messages name the op, the node, the shapes and,
/// for traced ops, the caller's source line; each is one line. Match on the variant to act
/// (docs/errors.md says what a caller does with each); read the message to tell a person.
///
/// `Debug` prints what `Display` prints, then each underlying cause the message does not
/// already quote (`caused by: ...`), so `fn main() -> remat::Result<()>` reads well when `?`
/// returns an error.
#[derive(thiserror::Error)]
pub enum Error {
    /// An op was recorded with inputs it cannot take (shape, dtype, arity, attributes).
    #[error("{op} at {location}: {message}{}", if *.more > 0 { format!(" (and {} more error(s) after it)", .more) } else { String::new() })]
    Trace {
        /// The op's DSL name.
        op: &'static str,
        /// What is wrong, with the shapes involved.
        message: String,
        /// `file:line:column` of the user's call, then the region instance it was recorded in
        /// (`src/model.rs:40:17 in region decoder_block #1`), if any.
        location: String,
        /// How many further errors were recorded after this one.
        more: usize,
    },
    /// A node of a graph is invalid or cannot be executed as asked.
    #[error("node {node} ({op}): {message}")]
    Node {
        /// The node.
        node: NodeId,
        /// Its op's name.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A value fed to a run (input or parameter) does not fit its declaration.
    #[error("{what} `{name}`: {message}")]
    Feed {
        /// `input` or `param`.
        what: &'static str,
        /// The declared name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// Annotations that cannot all hold (a must_recompute value the rules must save).
    #[error("conflicting constraints: {0}")]
    Conflict(String),
    /// A budget or peak no plan can meet. Ask for `least` (when known) or more; recomputing
    /// cannot go below it.
    #[error("{message}")]
    Infeasible {
        /// What the limit bounds: saved bytes (a global or a region's budget) or the peak.
        what: Limit,
        /// The limit asked for, in bytes.
        asked: u64,
        /// The least limit known to be met, in bytes; `None` when only a lower bound is known
        /// (the message gives it).
        least: Option<u64>,
        /// The whole message, naming the limit and what holds the bytes.
        message: String,
    },
    /// A bad argument or setting: a strategy string, an optimizer hyper-parameter, an
    /// environment variable's value, a shape that does not fit its data, a name no value has.
    #[error("{message}")]
    Config {
        /// The setting or argument at fault (`strategy`, `lr`, `REMAT_DIST_TIMEOUT`, `shape`, ...).
        setting: String,
        /// What is wrong with it, and what it must be.
        message: String,
    },
    /// A graph handed to the library (built by hand, a partition graph, a partition given to
    /// `partition::check`) breaks one of its invariants: a node reading a later one, a forward
    /// node after a backward one, a region whose parent comes after it, bytes past 2^64, ...
    /// A partition graph's node-level errors are this variant too (its ops are not the catalog's).
    #[error("{message}")]
    Graph {
        /// What is wrong, naming the node or region.
        message: String,
    },
    /// A collective of a distributed job failed: it timed out, a peer left, the ranks disagree,
    /// or the communicator could not start.
    #[error("{message}")]
    Collective {
        /// What went wrong, for a caller to act on.
        kind: CollectiveKind,
        /// The whole message, naming the rank and the collective.
        message: String,
        /// The communication library's own error (NCCL, a thread spawn), where one caused it.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A decoder used out of order or with bad settings: a step before `encode`, a prompt longer
    /// than the caches, a sampling temperature below 0, ...
    #[error("{message}")]
    Decoder {
        /// What is wrong, and what to call instead.
        message: String,
    },
    /// An optimizer or training state that does not belong to these parameters or this run:
    /// other shapes, another parameter count, ranks at different step counts.
    #[error("{message}")]
    OptimizerState {
        /// What differs.
        message: String,
    },
    /// An invariant the library itself broke (a planner or gradient-rule bug): not the
    /// caller's doing, and worth a report.
    #[error("{message} (a bug in remat: please report it)")]
    Internal {
        /// What broke.
        message: String,
        /// The error the broken step returned, where there was one.
        #[source]
        source: Option<Box<Error>>,
    },
    /// A file could not be read or written (training states).
    #[error("{path}: {what}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What was being done ("cannot read", "cannot replace", ...).
        what: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A training state is not a valid safetensors file, or could not be encoded as one.
    #[error("{path}: {what} ({source})")]
    SafeTensors {
        /// The file.
        path: String,
        /// What was wrong ("not a safetensors file", "corrupt or truncated", "cannot encode").
        what: &'static str,
        /// safetensors' own error.
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// A JSON document (`remat.graph`, `remat.joint`) is malformed or describes an invalid graph.
    #[error("{}{message}", json_location(.node.as_deref(), .op.as_deref()))]
    Json {
        /// The node the problem is in, when it is in one: its document id as messages write it
        /// (`12`, or `"addmm_1"` quoted).
        node: Option<String>,
        /// That node's op, when known.
        op: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// A backend failed (device missing, kernel error).
    #[error("{backend} backend: {message}")]
    Backend {
        /// The backend's name.
        backend: String,
        /// What happened.
        message: String,
        /// The driver's or library's own error, where one caused it (cudarc's `DriverError`,
        /// cuBLAS status, ...).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// Host memory for a tensor could not be had: a shape more than this machine can hold
    /// (allocations are reserved first, so this is an error rather than an abort).
    #[error(
        "cannot allocate {} of host memory for {what}",
        bytes.map_or_else(|| "more than 2^64 bytes".to_string(), exact_bytes)
    )]
    HostMemory {
        /// What was being allocated (a parameter, a kernel's output, a tensor of a shape).
        what: String,
        /// The bytes asked for, when they fit in 64 bits.
        bytes: Option<u64>,
    },
    /// A backend could not allocate a buffer, even after returning its cached memory.
    #[error(
        "{backend} backend: out of memory{}: {} requested with {} free of {} ({} held by live buffers){}",
        node.map_or(String::new(), |(n, op)| format!(" at node {n} ({op})")),
        exact_bytes(*.requested), exact_bytes(*.free), fmt_bytes(*.total), fmt_bytes(*.live),
        predicted_peak.map_or(String::new(), |p| format!(
            "; the plan's predicted peak is {}: recomputing more (recompute policies, Strategy::MinCut, a \
             smaller Strategy::Budget) lowers it",
            exact_bytes(p)
        ))
    )]
    OutOfMemory {
        /// The backend's name.
        backend: String,
        /// The node whose output was being allocated, when known.
        node: Option<(NodeId, &'static str)>,
        /// Bytes asked for.
        requested: u64,
        /// Bytes the device reported free.
        free: u64,
        /// Bytes of device memory in all.
        total: u64,
        /// Bytes held by the backend's live buffers at the time.
        live: u64,
        /// The plan's predicted peak (inputs and parameters included), added by the executor.
        predicted_peak: Option<u64>,
    },
}

/// What an [`Error::Infeasible`] limit bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The bytes saved for the backward (`Strategy::Budget`, `Strategy::BudgetOffload`).
    Budget,
    /// The bytes a region's own `budget = ..` lets it save, with the region's label.
    RegionBudget(String),
    /// The plan's predicted peak (`Strategy::Peak`).
    Peak,
}

/// What went wrong in an [`Error::Collective`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectiveKind {
    /// The communicator (an MPI or NCCL start, the engine's thread) could not start.
    Start,
    /// A collective did not finish within `REMAT_DIST_TIMEOUT`: a rank died or runs elsewhere.
    Timeout,
    /// A rank left the job (its program ended or failed) while the others still call
    /// collectives; its own message says why.
    PeerFailed {
        /// The rank that left.
        rank: usize,
    },
    /// The ranks called different collectives, or ran different steps, buckets or settings.
    Mismatch,
    /// The communication library reported a failure in a collective (NCCL, a device copy).
    Transport,
    /// The communicator stopped after an earlier failure: nothing more is exchanged.
    Stopped,
}

impl Error {
    /// An [`Error::Config`] for `setting`.
    pub fn config(setting: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config { setting: setting.into(), message: message.into() }
    }

    /// An [`Error::Graph`].
    pub fn graph(message: impl Into<String>) -> Error {
        Error::Graph { message: message.into() }
    }

    /// An [`Error::Decoder`].
    pub fn decoder(message: impl Into<String>) -> Error {
        Error::Decoder { message: message.into() }
    }

    /// An [`Error::OptimizerState`].
    pub fn optimizer_state(message: impl Into<String>) -> Error {
        Error::OptimizerState { message: message.into() }
    }

    /// An [`Error::Internal`] without a source.
    pub fn internal(message: impl Into<String>) -> Error {
        Error::Internal { message: message.into(), source: None }
    }

    /// An [`Error::Collective`] without a source.
    pub fn collective(kind: CollectiveKind, message: impl Into<String>) -> Error {
        Error::Collective { kind, message: message.into(), source: None }
    }

    /// An out-of-memory error that does not name its node yet, naming `node` (`op`); any other
    /// error unchanged.
    pub fn at_node(self, node: NodeId, op: &'static str) -> Error {
        match self {
            Error::OutOfMemory { backend, node: None, requested, free, total, live, predicted_peak } => {
                let node = Some((node, op));
                Error::OutOfMemory { backend, node, requested, free, total, live, predicted_peak }
            }
            other => other,
        }
    }

    /// An out-of-memory error without a predicted peak, given `peak`; any other error unchanged.
    pub fn with_predicted_peak(self, peak: u64) -> Error {
        match self {
            Error::OutOfMemory { backend, node, requested, free, total, live, predicted_peak: None } => {
                Error::OutOfMemory { backend, node, requested, free, total, live, predicted_peak: Some(peak) }
            }
            other => other,
        }
    }
}

/// `4095 bytes (4.0 KiB)`: exact, since a request and the free bytes may differ by one.
fn exact_bytes(n: u64) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else {
        format!("{n} bytes ({})", fmt_bytes(n))
    }
}

/// `node 3 (matmul): `, `node "t_3" (aten.t.default): `, `node 3: ` or nothing.
fn json_location(node: Option<&str>, op: Option<&str>) -> String {
    match (node, op) {
        (Some(n), Some(op)) => format!("node {n} ({op}): "),
        (Some(n), None) => format!("node {n}: "),
        (None, _) => String::new(),
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
