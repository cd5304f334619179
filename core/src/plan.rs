//! Plans: the forward and backward programs for a chosen set of saved values.
//!
//! Given which forward values are kept for the backward pass, the planner lays out two linear
//! programs. The forward computes what the outputs and the saved values need. The backward
//! computes the gradient nodes in order; when one reads a forward value that is not at hand, the
//! value is recomputed from what is (saved values, inputs, parameters) just before that first
//! use. Every buffer is freed right after its last use. The planner then predicts the peak by
//! walking the programs with each value's bytes — the executor must measure the same number.

use crate::autodiff::JointGraph;
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};

/// One instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Compute a node (forward in the forward program, backward in the backward program).
    Compute(NodeId),
    /// Compute a forward node again inside the backward program.
    Recompute(NodeId),
    /// Free a value after its last use.
    Free(NodeId),
}

/// A forward program and a backward program over one joint graph.
#[derive(Clone, Debug)]
pub struct Plan {
    forward: Vec<Step>,
    backward: Vec<Step>,
    saved: Vec<NodeId>,
    recomputed: Vec<NodeId>,
    resident: Vec<NodeId>,
    kept: Vec<NodeId>,
    resident_bytes: usize,
    saved_bytes: usize,
    predicted_peak: usize,
}

impl Plan {
    /// Plans `joint` keeping the forward values with `saved[id] == true` for the backward.
    ///
    /// Inputs, parameters and the forward outputs are always at hand; every other value the
    /// backward reads is recomputed.
    pub fn new(joint: &JointGraph, saved: &[bool]) -> Result<Plan> {
        let graph = joint.graph();
        let n_fwd = joint.n_forward();
        if saved.len() != n_fwd {
            return Err(Error::Invalid(format!("saved set covers {} nodes, the forward has {n_fwd}", saved.len())));
        }
        let resident: Vec<NodeId> = (0..n_fwd as u32).map(NodeId).filter(|&i| is_resident(graph, i)).collect();
        let kept: Vec<NodeId> = graph.outputs().to_vec();
        let mut at_hand = vec![false; graph.len()];
        for &i in resident.iter().chain(joint.forward_outputs()) {
            at_hand[i.index()] = true;
        }

        // Forward: ancestors of the outputs and of the saved values.
        let roots: Vec<NodeId> = joint
            .forward_outputs()
            .iter()
            .copied()
            .chain((0..n_fwd as u32).map(NodeId).filter(|i| saved[i.index()]))
            .collect();
        let live_fwd = ancestors(graph, &roots, n_fwd);
        let mut seq: Vec<(NodeId, bool)> = (0..n_fwd as u32)
            .map(NodeId)
            .filter(|&i| live_fwd[i.index()] && !is_resident(graph, i))
            .map(|i| (i, false))
            .collect();
        let n_forward_steps = seq.len();
        let saved_ids: Vec<NodeId> = (0..n_fwd as u32)
            .map(NodeId)
            .filter(|&i| saved[i.index()] && live_fwd[i.index()] && !is_resident(graph, i))
            .collect();
        for &i in &saved_ids {
            at_hand[i.index()] = true;
        }

        // Backward: gradient nodes in order, recomputing what they read just before first use.
        let grad_roots: Vec<NodeId> = joint.grads().iter().map(|&(_, g)| g).collect();
        let live_bwd = ancestors(graph, &grad_roots, graph.len());
        let mut recomputed = Vec::new();
        for id in (n_fwd..graph.len()).map(|i| NodeId(i as u32)).filter(|i| live_bwd[i.index()]) {
            for &input in &graph.node(id).inputs {
                if !at_hand[input.index()] {
                    recompute(graph, input, &mut at_hand, &mut seq, &mut recomputed);
                }
            }
            seq.push((id, false));
            at_hand[id.index()] = true;
        }

        let (forward, backward) =
            with_frees(graph, &seq, n_forward_steps, &at_hand_never_freed(graph, &resident, &kept));
        let resident_bytes = resident.iter().map(|&i| graph.node(i).bytes()).sum();
        let saved_bytes = saved_ids.iter().map(|&i| graph.node(i).bytes()).sum();
        let mut plan = Plan {
            forward,
            backward,
            saved: saved_ids,
            recomputed,
            resident,
            kept,
            resident_bytes,
            saved_bytes,
            predicted_peak: 0,
        };
        plan.predicted_peak = plan.simulate_peak(graph);
        Ok(plan)
    }

    /// A forward-only plan computing the forward nodes `outputs` (for inference): the
    /// ancestors of `outputs` in order, each freed after its last use; no backward program,
    /// nothing saved. Only the inputs and parameters `outputs` depend on are resident.
    pub fn forward_only(joint: &JointGraph, outputs: &[NodeId]) -> Result<Plan> {
        let graph = joint.graph();
        let n_fwd = joint.n_forward();
        if let Some(bad) = outputs.iter().find(|o| o.index() >= n_fwd) {
            return Err(Error::Invalid(format!(
                "{bad} is not a forward value; a forward-only plan computes forward values"
            )));
        }
        let live = ancestors(graph, outputs, n_fwd);
        let resident: Vec<NodeId> =
            (0..n_fwd as u32).map(NodeId).filter(|&i| live[i.index()] && is_resident(graph, i)).collect();
        let seq: Vec<(NodeId, bool)> = (0..n_fwd as u32)
            .map(NodeId)
            .filter(|&i| live[i.index()] && !is_resident(graph, i))
            .map(|i| (i, false))
            .collect();
        let kept = outputs.to_vec();
        let (forward, backward) = with_frees(graph, &seq, seq.len(), &at_hand_never_freed(graph, &resident, &kept));
        let resident_bytes = resident.iter().map(|&i| graph.node(i).bytes()).sum();
        let mut plan = Plan {
            forward,
            backward,
            saved: Vec::new(),
            recomputed: Vec::new(),
            resident,
            kept,
            resident_bytes,
            saved_bytes: 0,
            predicted_peak: 0,
        };
        plan.predicted_peak = plan.simulate_peak(graph);
        Ok(plan)
    }

    /// The forward program.
    pub fn forward(&self) -> &[Step] {
        &self.forward
    }

    /// The backward program.
    pub fn backward(&self) -> &[Step] {
        &self.backward
    }

    /// Both programs, forward first.
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.forward.iter().chain(&self.backward)
    }

    /// Forward values computed by the forward program and kept for the backward (inputs and
    /// parameters, resident anyway, are not listed).
    pub fn saved(&self) -> &[NodeId] {
        &self.saved
    }

    /// Forward nodes the backward recomputes, each once.
    pub fn recomputed(&self) -> &[NodeId] {
        &self.recomputed
    }

    /// Inputs and parameters: uploaded before the forward, freed after the backward.
    pub fn resident(&self) -> &[NodeId] {
        &self.resident
    }

    /// Values returned to the caller (forward outputs, then gradients): never freed by the plan.
    pub fn kept(&self) -> &[NodeId] {
        &self.kept
    }

    /// Bytes of inputs and parameters.
    pub fn resident_bytes(&self) -> usize {
        self.resident_bytes
    }

    /// Bytes of the saved values.
    pub fn saved_bytes(&self) -> usize {
        self.saved_bytes
    }

    /// The most bytes live at once while the programs run, resident values included.
    pub fn predicted_peak(&self) -> usize {
        self.predicted_peak
    }

    /// FLOPs spent recomputing.
    pub fn recompute_flops(&self, graph: &Graph) -> u64 {
        self.recomputed.iter().map(|&i| node_flops(graph, i)).sum()
    }

    fn simulate_peak(&self, graph: &Graph) -> usize {
        let mut live = self.resident_bytes;
        let mut peak = live;
        for step in self.steps() {
            match *step {
                Step::Compute(id) | Step::Recompute(id) => {
                    live += graph.node(id).bytes();
                    peak = peak.max(live);
                }
                Step::Free(id) => live -= graph.node(id).bytes(),
            }
        }
        peak
    }
}

/// FLOPs of computing node `id` once.
pub fn node_flops(graph: &Graph, id: NodeId) -> u64 {
    graph.node_flops(id)
}

fn is_resident(graph: &Graph, id: NodeId) -> bool {
    graph.node(id).op.is_resident()
}

fn at_hand_never_freed(graph: &Graph, resident: &[NodeId], kept: &[NodeId]) -> Vec<bool> {
    let mut never = vec![false; graph.len()];
    for &i in resident.iter().chain(kept) {
        never[i.index()] = true;
    }
    never
}

/// Marks the ancestors of `roots` (roots included) among nodes `0..limit`.
fn ancestors(graph: &Graph, roots: &[NodeId], limit: usize) -> Vec<bool> {
    let mut mark = vec![false; limit];
    for &r in roots {
        if r.index() < limit {
            mark[r.index()] = true;
        }
    }
    for i in (0..limit).rev() {
        if mark[i] {
            for &input in &graph.node(NodeId(i as u32)).inputs {
                mark[input.index()] = true;
            }
        }
    }
    mark
}

/// Appends recomputes of `value` and of whatever it needs that is not at hand, inputs first.
fn recompute(
    graph: &Graph,
    value: NodeId,
    at_hand: &mut [bool],
    seq: &mut Vec<(NodeId, bool)>,
    recomputed: &mut Vec<NodeId>,
) {
    // Iterative post-order: deep chains must not overflow the stack.
    let mut stack = vec![(value, false)];
    while let Some((id, inputs_done)) = stack.pop() {
        if at_hand[id.index()] {
            continue;
        }
        if inputs_done {
            seq.push((id, true));
            recomputed.push(id);
            at_hand[id.index()] = true;
            continue;
        }
        stack.push((id, true));
        for &input in graph.node(id).inputs.iter().rev() {
            if !at_hand[input.index()] {
                stack.push((input, false));
            }
        }
    }
}

/// Turns a compute sequence into the two programs with a free after each value's last use.
/// A node computed twice (forward, then recomputed) is two values, each freed on its own.
fn with_frees(
    graph: &Graph,
    seq: &[(NodeId, bool)],
    n_forward_steps: usize,
    never_free: &[bool],
) -> (Vec<Step>, Vec<Step>) {
    const NONE: usize = usize::MAX;
    let mut current = vec![NONE; graph.len()]; // node → index in `defs` of its live value
    let mut last_use: Vec<usize> = Vec::with_capacity(seq.len()); // per definition
    for (pos, &(id, _)) in seq.iter().enumerate() {
        for &input in &graph.node(id).inputs {
            let def = current[input.index()];
            if def != NONE {
                last_use[def] = pos;
            }
        }
        current[id.index()] = pos;
        last_use.push(pos);
    }
    let mut frees_at: Vec<Vec<NodeId>> = vec![Vec::new(); seq.len()];
    for (pos, &(id, _)) in seq.iter().enumerate() {
        if !never_free[id.index()] {
            frees_at[last_use[pos]].push(id);
        }
    }
    let mut forward = Vec::new();
    let mut backward = Vec::new();
    for (pos, &(id, is_recompute)) in seq.iter().enumerate() {
        let program = if pos < n_forward_steps { &mut forward } else { &mut backward };
        program.push(if is_recompute { Step::Recompute(id) } else { Step::Compute(id) });
        program.extend(frees_at[pos].iter().map(|&f| Step::Free(f)));
    }
    (forward, backward)
}
