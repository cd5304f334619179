//! What the budget search reads of each value it may reach — FLOPs, bytes, inputs — in arrays
//! of its own: the search sweeps the values a dozen times (evaluations, the eviction path, the
//! bound's network and cuts, the repair), and a sweep that loads each 136-byte partition node
//! reads some six times the memory of one over these (docs/performance.md, "Partition").

use crate::graph::NodeId;
use crate::partition::PGraph;

/// FLOPs, bytes and inputs of nodes `0..len` of a partition graph.
///
/// Invariant: `len` is past every node the search may reach (the relevant ones, whose closure
/// under inputs stays among them), so no lookup falls outside the arrays.
pub(super) struct Facts {
    flops: Vec<u64>,
    bytes: Vec<u64>,
    /// Node `i`'s inputs are `inputs[start[i]..start[i + 1]]`.
    start: Vec<usize>,
    inputs: Vec<NodeId>,
}

impl Facts {
    /// An empty table, filled node by node with [`Facts::push`].
    pub(super) fn with_capacity(len: usize) -> Facts {
        let mut start = Vec::with_capacity(len + 1);
        start.push(0);
        Facts { flops: Vec::with_capacity(len), bytes: Vec::with_capacity(len), start, inputs: Vec::new() }
    }

    /// Appends the next node of `g` (node `self.len()`).
    pub(super) fn push(&mut self, g: &PGraph, i: NodeId) {
        debug_assert_eq!(i.index(), self.flops.len(), "nodes are pushed in order");
        let n = g.node(i);
        self.flops.push(n.flops);
        self.bytes.push(n.bytes);
        self.inputs.extend_from_slice(&n.inputs);
        self.start.push(self.inputs.len());
    }

    /// FLOPs to recompute node `i` once.
    pub(super) fn flops(&self, i: usize) -> u64 {
        self.flops[i]
    }

    /// Bytes of node `i`'s value.
    pub(super) fn bytes(&self, i: usize) -> u64 {
        self.bytes[i]
    }

    /// The nodes `i` reads.
    pub(super) fn inputs(&self, i: usize) -> &[NodeId] {
        &self.inputs[self.start[i]..self.start[i + 1]]
    }
}
