//! Reverse-mode autodiff: from a forward graph to a joint forward + backward graph.
//!
//! The joint graph keeps the forward nodes under their own ids and appends backward nodes after
//! them, in an order where every input precedes its user. A backward node's inputs are forward
//! values (what the backward *reads*: the partitioner decides whether each is saved or
//! recomputed) or earlier backward nodes. Gradients are ops of the same catalog, so the backward
//! runs on any backend and a recomputed forward node is just the same node computed again.

mod rules;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{Graph, Inputs, Node, NodeId, Shape};
use crate::op::{BinaryOp, Op, ReduceOp};
use crate::shape::numel;

/// A forward graph with its backward pass appended.
#[derive(Clone, Debug)]
pub struct JointGraph {
    graph: Graph,
    n_forward: usize,
    /// (parameter, its gradient node), in parameter order.
    grads: Vec<(NodeId, NodeId)>,
    /// Per node: for a backward node, the forward node whose gradient rule created it.
    grad_of: Vec<Option<NodeId>>,
}

impl JointGraph {
    /// Differentiates `forward`'s first output (the scalar loss) with respect to every parameter.
    pub fn new(forward: &Graph) -> Result<JointGraph> {
        // A copy made with the room `from_forward` reserves, so that it is allocated once.
        Self::from_forward(forward.clone_with_room(2 * forward.len()))
    }

    /// [`JointGraph::new`], taking `forward` over: its nodes become the joint graph's forward
    /// nodes where they are, not copied (a caller done with the forward graph need not hold it
    /// twice).
    pub fn from_forward(mut forward: Graph) -> Result<JointGraph> {
        forward.validate_unless_known()?;
        let loss = *forward
            .outputs()
            .first()
            .ok_or_else(|| Error::graph("the graph has no outputs (the loss comes first)"))?;
        let loss_node = forward.node(loss);
        if numel(&loss_node.shape) != 1 || !loss_node.dtype.is_float() {
            return Err(Error::Node {
                node: loss,
                op: loss_node.op.name(),
                message: format!("the loss must be one floating value, got {:?} {}", loss_node.shape, loss_node.dtype),
            });
        }
        let (seed_shape, seed_dtype) = (loss_node.shape.clone(), loss_node.dtype.grad_dtype());
        let needs_grad = needs_grad(&forward, loss);
        let n_forward = forward.len();
        let params = forward.params();
        let forward_outputs = forward.outputs().to_vec();
        // Room for the backward nodes (about two per forward node), so that the node list is not
        // moved (or, where it is a mapping of its own, remapped) as it grows.
        forward.reserve_nodes(2 * n_forward);
        let mut grad_of = Vec::with_capacity(3 * n_forward);
        grad_of.resize(n_forward, None);
        let mut bw = Backward { graph: forward, owner: None, grad_of };
        let mut grad: Vec<Option<NodeId>> = vec![None; n_forward];
        grad[loss.index()] = Some(bw.leaf(Op::Constant { value: 1.0 }, seed_shape, seed_dtype));
        for id in (0..n_forward).rev().map(NodeId::from_index) {
            let Some(g) = grad[id.index()] else { continue };
            if !needs_grad[id.index()] || bw.graph.node(id).op.info().leaf {
                continue;
            }
            bw.owner = Some(id);
            let contributions = rules::backprop(&mut bw, id, g, &needs_grad)?;
            for (input, contribution) in contributions {
                grad[input.index()] = Some(match grad[input.index()] {
                    None => contribution,
                    Some(previous) => bw.op(Op::Binary(BinaryOp::Add), &[previous, contribution])?,
                });
            }
        }
        bw.owner = None;
        let mut grads = Vec::new();
        for p in params {
            let g = match grad[p.index()] {
                Some(g) => g,
                // A parameter the loss does not depend on has a zero gradient.
                None => {
                    let n = bw.graph.node(p);
                    let (shape, dtype) = (n.shape.clone(), n.dtype.grad_dtype());
                    bw.leaf(Op::Constant { value: 0.0 }, shape, dtype)
                }
            };
            grads.push((p, g));
        }
        let mut outputs = forward_outputs;
        outputs.extend(grads.iter().map(|&(_, g)| g));
        let owners = std::mem::take(&mut bw.grad_of);
        let (mut graph, remap) = without_dead_backward_nodes(bw.graph, n_forward, &outputs);
        let mut grad_of = vec![None; graph.len()];
        for (old, owner) in owners.into_iter().enumerate() {
            if remap[old].raw() != u32::MAX {
                grad_of[remap[old].index()] = owner;
            }
        }
        let grads: Vec<(NodeId, NodeId)> = grads.into_iter().map(|(p, g)| (p, remap[g.index()])).collect();
        graph.set_outputs(outputs.iter().map(|o| remap[o.index()]).collect());
        // The forward was validated and every backward node added with its op's shape rule.
        graph.assume_valid();
        Ok(JointGraph { graph, n_forward, grads, grad_of })
    }

    /// `forward` with no backward pass, for forward-only programs over a graph that has no
    /// loss (a decoder's step: its outputs are logits and updated caches).
    pub(crate) fn without_backward(mut forward: Graph) -> Result<JointGraph> {
        forward.validate()?;
        forward.assume_valid();
        let n = forward.len();
        Ok(JointGraph { graph: forward, n_forward: n, grads: Vec::new(), grad_of: vec![None; n] })
    }

    /// The joint graph: forward nodes first, then backward nodes.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// How many nodes are forward nodes (ids `0..n_forward`).
    pub fn n_forward(&self) -> usize {
        self.n_forward
    }

    /// Whether `id` is a forward node.
    pub fn is_forward(&self, id: NodeId) -> bool {
        id.index() < self.n_forward
    }

    /// For a backward node, the forward node whose gradient rule created it (the accumulation
    /// of several contributions belongs to the node whose rule produced the last one); `None`
    /// for forward nodes and for the loss seed and zero gradients.
    pub fn grad_of(&self, id: NodeId) -> Option<NodeId> {
        self.grad_of.get(id.index()).copied().flatten()
    }

    /// The loss node.
    pub fn loss(&self) -> NodeId {
        self.graph.outputs()[0]
    }

    /// The forward graph's own outputs (the loss first).
    pub fn forward_outputs(&self) -> &[NodeId] {
        &self.graph.outputs()[..self.graph.outputs().len() - self.grads.len()]
    }

    /// (parameter, gradient node) pairs, in parameter order.
    pub fn grads(&self) -> &[(NodeId, NodeId)] {
        &self.grads
    }

    /// For each forward node, whether some backward node reads it.
    pub fn backward_reads(&self) -> Vec<bool> {
        let mut reads = vec![false; self.n_forward];
        for node in &self.graph.nodes()[self.n_forward..] {
            for &i in &node.inputs {
                if self.is_forward(i) {
                    reads[i.index()] = true;
                }
            }
        }
        reads
    }
}

/// Drops backward nodes no gradient depends on (a rule may build a value only one operand's
/// gradient uses), so the backward reads exactly what it needs. Returns the graph and the map
/// from old ids to new.
fn without_dead_backward_nodes(graph: Graph, n_forward: usize, outputs: &[NodeId]) -> (Graph, Vec<NodeId>) {
    let mut live = vec![false; graph.len()];
    for o in outputs {
        live[o.index()] = true;
    }
    for i in (n_forward..graph.len()).rev() {
        if live[i] {
            for input in &graph.nodes()[i].inputs {
                live[input.index()] = true;
            }
        }
    }
    let mut graph = graph;
    let remap = graph.retain_nodes(|i| i < n_forward || live[i]);
    (graph, remap)
}

/// Which forward nodes need a gradient: those on a path from a parameter to the loss.
fn needs_grad(forward: &Graph, loss: NodeId) -> Vec<bool> {
    let n = forward.len();
    // Two sweeps, one from the first node and one from the last, each on its own: at once.
    let (from_param, to_loss) = crate::concurrent::join(
        || {
            let mut from_param = vec![false; n];
            for id in forward.ids() {
                let node = forward.node(id);
                let differentiable_inputs = rules::differentiable_inputs(&node.op, node.inputs.len());
                from_param[id.index()] = node.dtype.is_float()
                    && (matches!(node.op, Op::Param { .. })
                        || differentiable_inputs.into_iter().any(|k| from_param[node.inputs[k].index()]));
            }
            from_param
        },
        || {
            let mut to_loss = vec![false; n];
            to_loss[loss.index()] = true;
            for id in forward.ids().rev() {
                if to_loss[id.index()] {
                    for &i in &forward.node(id).inputs {
                        to_loss[i.index()] = true;
                    }
                }
            }
            to_loss
        },
    );
    (0..n).map(|i| from_param[i] && to_loss[i]).collect()
}

/// The joint graph under construction: appends backward nodes with inferred shapes.
pub(crate) struct Backward {
    graph: Graph,
    /// The forward node whose gradient is being built.
    owner: Option<NodeId>,
    /// Per node so far: its owner (`None` for forward nodes).
    grad_of: Vec<Option<NodeId>>,
}

impl Backward {
    /// Appends `op(inputs)`. A failure here is a bug in a gradient rule, reported as such.
    pub fn op(&mut self, op: Op, inputs: &[NodeId]) -> Result<NodeId> {
        let name = op.name();
        let id = self.graph.push_op(op, Inputs::from_slice(inputs)).map_err(|e| Error::Internal {
            message: format!("internal error in the gradient of {name}: {e}"),
            source: Some(Box::new(e)),
        })?;
        self.grad_of.push(self.owner);
        Ok(id)
    }

    /// Appends a leaf (a constant).
    pub fn leaf(&mut self, op: Op, shape: impl Into<Shape>, dtype: DType) -> NodeId {
        self.grad_of.push(self.owner);
        self.graph.push(Node { op, inputs: Inputs::new(), shape: shape.into(), dtype, tag: None, label: None })
    }

    /// A scalar constant.
    pub fn scalar(&mut self, value: f64, dtype: DType) -> NodeId {
        self.leaf(Op::Constant { value }, Shape::new(), dtype)
    }

    /// Shape of a node.
    pub fn shape(&self, id: NodeId) -> &[usize] {
        &self.graph.node(id).shape
    }

    /// Dtype of a node.
    pub fn dtype(&self, id: NodeId) -> DType {
        self.graph.node(id).dtype
    }

    /// Sums `g` down to `shape`, undoing a broadcast (leading axes and size-1 axes).
    pub fn unbroadcast(&mut self, g: NodeId, shape: &[usize]) -> Result<NodeId> {
        let gshape = Shape::from_slice(self.shape(g));
        if gshape[..] == shape[..] {
            return Ok(g);
        }
        let lead = gshape.len() - shape.len();
        let axes: Vec<usize> =
            (0..gshape.len()).filter(|&i| i < lead || (shape[i - lead] == 1 && gshape[i] != 1)).collect();
        let summed =
            if axes.is_empty() { g } else { self.op(Op::Reduce { op: ReduceOp::Sum, axes, keepdim: true }, &[g])? };
        if self.shape(summed) == shape {
            return Ok(summed);
        }
        self.op(Op::Reshape { shape: shape.to_vec() }, &[summed])
    }

    /// Casts `g` to `dtype` if it is not already.
    pub fn cast_to(&mut self, g: NodeId, dtype: DType) -> Result<NodeId> {
        if self.dtype(g) == dtype {
            Ok(g)
        } else {
            self.op(Op::Cast { dtype }, &[g])
        }
    }
}
