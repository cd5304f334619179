//! What a partition is planned over. A traced joint graph or a `remat.graph` document lists
//! its forward nodes first and is planned in its own order. A `remat.joint` document as PyTorch
//! exports it interleaves them (the tangents come early, and forward nodes only the backward
//! reads — a mask, a weight's transpose — sit among the backward ones): it is planned in its
//! document order with every forward node moved ahead of every backward one, each phase keeping
//! the document's order. That is the order PyTorch runs a partitioned joint graph in (its
//! forward graph, then its backward graph), and a topological order: no forward node reads a
//! backward one ([`PGraph::validate`]).
//!
//! Either way the plan names nodes by the graph's own ids: a reordered plan is renumbered back.

use super::source::plannable;
use super::{Plan, Schedulable, TransferWindow};
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::partition::{CostModel, PGraph, Partition};

/// A graph and the order its partitions are planned in.
pub(crate) enum Schedule<'a, S: ?Sized> {
    /// The graph's own order: its forward nodes come first.
    InOrder(&'a S),
    /// A partition graph's nodes, forward ones first.
    ForwardFirst(ForwardFirst<'a>),
}

impl<S: Schedulable + ?Sized> Schedule<'_, S> {
    /// The plan of `partition` (made over this graph), in the graph's ids.
    pub(crate) fn plan(&self, partition: &Partition, model: &CostModel) -> Result<Plan> {
        match self {
            Schedule::InOrder(g) => {
                let n = g.forward_len()?;
                Plan::with_offload(*g, &partition.saved[..n], &partition.offloaded[..n], model)
            }
            Schedule::ForwardFirst(f) => {
                let pick = |per_node: &[bool]| -> Vec<bool> {
                    f.order.to_old[..f.order.forward].iter().map(|o| per_node[o.index()]).collect()
                };
                let mut plan = Plan::with_offload(f, &pick(&partition.saved), &pick(&partition.offloaded), model)?;
                plan.renumber(&f.order.to_old);
                Ok(plan)
            }
        }
    }

    /// The graph's own id of node `id` of the planning order.
    #[cfg_attr(not(feature = "exact"), allow(dead_code))]
    pub(crate) fn graph_id(&self, id: NodeId) -> NodeId {
        match self {
            Schedule::InOrder(_) => id,
            Schedule::ForwardFirst(f) => f.old(id),
        }
    }

    /// Each offloaded value's transfer window under `plan` (one of [`Schedule::plan`]'s).
    pub(crate) fn transfer_windows(&self, plan: &Plan) -> Vec<TransferWindow> {
        match self {
            Schedule::InOrder(g) => plan.transfer_windows(*g),
            Schedule::ForwardFirst(f) => plan.transfer_windows(f.graph),
        }
    }
}

/// The forward-first order of a partition graph whose phases interleave.
///
/// Invariant: `to_old` is a permutation of the graph's nodes; `to_old[..forward]` are its
/// forward nodes and `to_old[forward..]` its backward ones, each in id order; every other field
/// names nodes by their place in `to_old`: `inputs[starts[k]..starts[k + 1]]` are the inputs of
/// new node `k`, `forward_outputs`, `released_outputs` and `gradients` the graph's.
#[derive(Debug)]
pub(crate) struct Reorder {
    to_old: Vec<NodeId>,
    forward: usize,
    starts: Vec<usize>,
    inputs: Vec<NodeId>,
    forward_outputs: Vec<NodeId>,
    released_outputs: Vec<NodeId>,
    gradients: Vec<NodeId>,
}

impl Reorder {
    /// The order for `graph` where its phases interleave; `None` where its forward nodes come
    /// first already, or where it does not validate (partitioning says why).
    pub(crate) fn of(graph: &PGraph) -> Option<Reorder> {
        let backward = graph.validated().ok()?.backward;
        let first_backward = backward.iter().position(|&b| b)?;
        if backward[first_backward..].iter().all(|&b| b) {
            return None;
        }
        let backward = &backward;
        let ids = |phase: bool| (0..graph.len()).filter(move |&i| backward[i] == phase).map(NodeId::from_index);
        let to_old: Vec<NodeId> = ids(false).chain(ids(true)).collect();
        let forward = backward.iter().filter(|&&b| !b).count();
        let mut to_new = vec![NodeId::new(0); graph.len()];
        for (new, old) in to_old.iter().enumerate() {
            to_new[old.index()] = NodeId::from_index(new);
        }
        let mut starts = Vec::with_capacity(graph.len() + 1);
        let mut inputs = Vec::new();
        starts.push(0);
        for old in &to_old {
            inputs.extend(graph.node(*old).inputs.iter().map(|i| to_new[i.index()]));
            starts.push(inputs.len());
        }
        let new = |of: &[NodeId]| of.iter().map(|o| to_new[o.index()]).collect();
        let (forward_outputs, gradients) = (new(&graph.forward_outputs), new(&graph.backward_outputs));
        let released_outputs = new(&graph.released_outputs);
        let order = Reorder { to_old, forward, starts, inputs, forward_outputs, released_outputs, gradients };
        debug_assert!(order.is_topological(), "forward-first order of a valid graph");
        Some(order)
    }

    /// Every node's inputs come before it in the new order.
    fn is_topological(&self) -> bool {
        (0..self.to_old.len()).all(|k| self.inputs[self.starts[k]..self.starts[k + 1]].iter().all(|i| i.index() < k))
    }

    /// The graph seen in this order.
    pub(crate) fn view<'a>(&'a self, graph: &'a PGraph) -> ForwardFirst<'a> {
        ForwardFirst { graph, order: self }
    }
}

/// A partition graph read in its [`Reorder`]: new ids, forward nodes first.
pub(crate) struct ForwardFirst<'a> {
    graph: &'a PGraph,
    order: &'a Reorder,
}

impl ForwardFirst<'_> {
    fn old(&self, id: NodeId) -> NodeId {
        self.order.to_old[id.index()]
    }
}

impl Schedulable for ForwardFirst<'_> {
    /// The partition graph's checks but the phases' order, which this view puts right.
    fn forward_len(&self) -> Result<usize> {
        plannable(self.graph)?;
        Ok(self.order.forward)
    }

    fn node_count(&self) -> usize {
        self.order.to_old.len()
    }

    fn inputs(&self, id: NodeId) -> &[NodeId] {
        &self.order.inputs[self.order.starts[id.index()]..self.order.starts[id.index() + 1]]
    }

    fn bytes(&self, id: NodeId) -> usize {
        self.graph.bytes(self.old(id))
    }

    fn flops(&self, id: NodeId) -> u64 {
        self.graph.flops(self.old(id))
    }

    fn is_resident(&self, id: NodeId) -> bool {
        self.graph.is_resident(self.old(id))
    }

    fn is_reshape(&self, id: NodeId) -> bool {
        self.graph.is_reshape(self.old(id))
    }

    fn forward_outputs(&self) -> &[NodeId] {
        &self.order.forward_outputs
    }

    fn released_outputs(&self) -> &[NodeId] {
        &self.order.released_outputs
    }

    fn gradients(&self) -> &[NodeId] {
        &self.order.gradients
    }

    fn node_error(&self, id: NodeId, message: String) -> Error {
        self.graph.node_error(self.old(id), message)
    }
}
