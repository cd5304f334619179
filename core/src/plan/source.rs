//! What the planner reads of a joint graph, and the two graphs that hold it: a traced
//! [`JointGraph`] and a partition graph ([`PGraph`]).
//!
//! A partition graph made from a joint graph ([`PGraph::from_joint`]) holds everything a plan
//! reads — inputs, bytes, FLOPs, which nodes are inputs and parameters, which are reshapes, the
//! forward/backward split and the outputs — and plans exactly as that joint graph does. A caller
//! that has partitioned may then drop the joint graph and plan from the partition graph alone:
//! the `remat` command does for `remat.graph` documents, where the two graphs together were most
//! of its memory (docs/performance.md, "Partition graph").

use crate::autodiff::JointGraph;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::op::OpKind;
use crate::partition::PGraph;

/// A joint graph as the planner reads it ([`crate::Plan::with_offload`]): nodes in topological
/// order, the forward nodes first (ids `0..forward_len`), then the backward nodes.
///
/// `Sync`: the exact peak search plans the choices its program finds while the program runs
/// (from HiGHS's callback), beside threads of the partition that share the program's problem.
pub trait Schedulable: Sync {
    /// How many nodes are forward nodes (ids `0..n`), or why this graph cannot be planned (the
    /// checks a graph needs before the planner reads it: every other method may assume they
    /// passed).
    fn forward_len(&self) -> Result<usize>;
    /// How many nodes there are, forward and backward.
    fn node_count(&self) -> usize;
    /// The nodes `id` reads, each with a smaller id.
    fn inputs(&self, id: NodeId) -> &[NodeId];
    /// Bytes of `id`'s value.
    fn bytes(&self, id: NodeId) -> usize;
    /// FLOPs to compute `id` once.
    fn flops(&self, id: NodeId) -> u64;
    /// Whether forward node `id` is an input or a parameter: on the device for the whole step,
    /// never computed.
    fn is_resident(&self, id: NodeId) -> bool;
    /// Whether `id` is a reshape, which may take over its input's buffer where it is that
    /// buffer's last reader.
    fn is_reshape(&self, id: NodeId) -> bool;
    /// The forward graph's outputs (the caller holds them).
    fn forward_outputs(&self) -> &[NodeId];
    /// The forward outputs the caller may free once the forward returns
    /// ([`PGraph::released_outputs`]): computed by the forward and held to its end, then kept
    /// only where the plan saves them. None unless the graph says so.
    fn released_outputs(&self) -> &[NodeId] {
        &[]
    }
    /// The gradient nodes (the backward's outputs).
    fn gradients(&self) -> &[NodeId];
    /// An error about node `id`, naming it as the graph's own errors do.
    fn node_error(&self, id: NodeId, message: String) -> Error;
}

impl Schedulable for JointGraph {
    fn forward_len(&self) -> Result<usize> {
        Ok(self.n_forward())
    }

    fn node_count(&self) -> usize {
        self.graph().len()
    }

    fn inputs(&self, id: NodeId) -> &[NodeId] {
        &self.graph().node(id).inputs
    }

    fn bytes(&self, id: NodeId) -> usize {
        self.graph().node(id).bytes()
    }

    fn flops(&self, id: NodeId) -> u64 {
        self.graph().node_flops(id)
    }

    fn is_resident(&self, id: NodeId) -> bool {
        self.graph().node(id).op.is_resident()
    }

    fn is_reshape(&self, id: NodeId) -> bool {
        self.graph().node(id).op.kind() == OpKind::Reshape
    }

    fn forward_outputs(&self) -> &[NodeId] {
        JointGraph::forward_outputs(self)
    }

    fn gradients(&self) -> &[NodeId] {
        &self.graph().outputs()[JointGraph::forward_outputs(self).len()..]
    }

    fn node_error(&self, id: NodeId, message: String) -> Error {
        Error::Node { node: id, op: self.graph().node(id).op.name(), message }
    }
}

/// A partition graph plans as the joint graph it was made from ([`PGraph::from_joint`]): a
/// reshape is a node of op `reshape`, an input or parameter a forward node flagged `resident`.
/// One read from a `remat.joint` document plans by the same rules, once its forward nodes come
/// first.
impl Schedulable for PGraph {
    /// The partition graph's own invariants ([`PGraph::validate`]), then: the forward nodes
    /// first, and their bytes within the address space.
    fn forward_len(&self) -> Result<usize> {
        let backward = plannable(self)?;
        let forward_len = backward.iter().position(|&b| b).unwrap_or(self.len());
        if let Some(k) = backward[forward_len..].iter().position(|&b| !b) {
            return Err(Error::graph(format!(
                "{}: a forward node after a backward one; a plan needs every forward node first",
                self.describe(NodeId::from_index(forward_len + k))
            )));
        }
        Ok(forward_len)
    }

    fn node_count(&self) -> usize {
        self.len()
    }

    fn inputs(&self, id: NodeId) -> &[NodeId] {
        &self.node(id).inputs
    }

    fn bytes(&self, id: NodeId) -> usize {
        self.node(id).bytes as usize
    }

    fn flops(&self, id: NodeId) -> u64 {
        self.node(id).flops
    }

    fn is_resident(&self, id: NodeId) -> bool {
        self.node(id).flags.resident
    }

    fn is_reshape(&self, id: NodeId) -> bool {
        self.node(id).op == OpKind::Reshape.name()
    }

    fn forward_outputs(&self) -> &[NodeId] {
        &self.forward_outputs
    }

    fn released_outputs(&self) -> &[NodeId] {
        &self.released_outputs
    }

    fn gradients(&self) -> &[NodeId] {
        &self.backward_outputs
    }

    fn node_error(&self, id: NodeId, message: String) -> Error {
        Error::graph(format!("{}: {message}", self.describe(id)))
    }
}

/// `graph`'s validation ([`PGraph::validate`]), and its bytes within the address space: what a
/// plan of it needs in whatever order its nodes are planned. Returns each node's phase (whether
/// it is a backward node), from the validation's own sweep: the caller reads that table rather
/// than the nodes again (a pass over all of their memory).
pub(super) fn plannable(graph: &PGraph) -> Result<Vec<bool>> {
    let valid = graph.validated()?;
    // `validated` bounds the sum by u64; a 32-bit address space is smaller.
    let total = valid.bytes;
    if usize::try_from(total).is_err() {
        return Err(Error::graph(format!("the graph's {total} bytes do not fit this machine's address space")));
    }
    Ok(valid.backward)
}

/// What the planner reads on every one of its passes — each node's inputs, bytes, and whether
/// it is resident or a reshape — copied out of `graph`'s nodes into arrays of their own, the
/// rest read through. Planning walks the nodes half a dozen times, mostly by id at random:
/// from nodes of a hundred bytes and more, each read would miss the cache; from these arrays
/// (about 20 bytes a node) most hit it (docs/performance.md, "Plan").
///
/// Invariant: `inputs[starts[i]..starts[i + 1]]` are node `i`'s inputs, `bytes[i]` its bytes
/// and `flags[i]` its [`RESIDENT`] and [`RESHAPE`] bits, each equal to what `graph` says.
pub(super) struct Compact<'g, S: ?Sized> {
    graph: &'g S,
    starts: Vec<usize>,
    inputs: Vec<NodeId>,
    bytes: Vec<usize>,
    flags: Vec<u8>,
}

const RESIDENT: u8 = 1;
const RESHAPE: u8 = 2;

impl<'g, S: Schedulable + ?Sized> Compact<'g, S> {
    /// The arrays of `graph`, which has passed [`Schedulable::forward_len`]'s checks.
    pub(super) fn of(graph: &'g S) -> Self {
        let n = graph.node_count();
        let mut starts = Vec::with_capacity(n + 1);
        let mut inputs = Vec::with_capacity(2 * n);
        let mut bytes = Vec::with_capacity(n);
        let mut flags = Vec::with_capacity(n);
        starts.push(0);
        for id in (0..n).map(NodeId::from_index) {
            inputs.extend_from_slice(graph.inputs(id));
            starts.push(inputs.len());
            bytes.push(graph.bytes(id));
            let resident = if graph.is_resident(id) { RESIDENT } else { 0 };
            flags.push(resident | if graph.is_reshape(id) { RESHAPE } else { 0 });
        }
        Compact { graph, starts, inputs, bytes, flags }
    }
}

impl<S: Schedulable + ?Sized> Schedulable for Compact<'_, S> {
    fn forward_len(&self) -> Result<usize> {
        self.graph.forward_len()
    }

    fn node_count(&self) -> usize {
        self.bytes.len()
    }

    fn inputs(&self, id: NodeId) -> &[NodeId] {
        &self.inputs[self.starts[id.index()]..self.starts[id.index() + 1]]
    }

    fn bytes(&self, id: NodeId) -> usize {
        self.bytes[id.index()]
    }

    fn flops(&self, id: NodeId) -> u64 {
        self.graph.flops(id)
    }

    fn is_resident(&self, id: NodeId) -> bool {
        self.flags[id.index()] & RESIDENT != 0
    }

    fn is_reshape(&self, id: NodeId) -> bool {
        self.flags[id.index()] & RESHAPE != 0
    }

    fn forward_outputs(&self) -> &[NodeId] {
        self.graph.forward_outputs()
    }

    fn released_outputs(&self) -> &[NodeId] {
        self.graph.released_outputs()
    }

    fn gradients(&self) -> &[NodeId] {
        self.graph.gradients()
    }

    fn node_error(&self, id: NodeId, message: String) -> Error {
        self.graph.node_error(id, message)
    }
}
