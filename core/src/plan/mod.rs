//! Plans: the forward and backward programs for a chosen set of saved values.
//!
//! Given which forward values are kept for the backward pass, the planner lays out two linear
//! programs. The forward computes what the outputs and the saved values need. The backward
//! computes the gradient nodes in order; when one reads a forward value that is not at hand, the
//! value is recomputed from what is (saved values, inputs, parameters) just before that first
//! use. Every buffer is freed right after its last use. The planner then predicts the peak by
//! walking the programs with each value's bytes — the executor must measure the same number.
//!
//! **Two memories.** An offloaded value is copied to host memory right after the forward
//! computes it ([`Step::Offload`], asynchronous on a device with copy engines); its device copy is
//! freed after its last forward use (once the transfer is done); the backward fetches it back
//! ([`Step::Fetch`], which frees the host copy) early enough that the compute before its first
//! backward use covers the host-to-device transfer at the [`CostModel`]'s rates, as far as the
//! device peak of fetching just in time allows — never earlier than the start of the backward.
//! The plan predicts both peaks: device and host.

mod fetch;
mod free;
mod schedule;
mod source;

pub(crate) use schedule::{Reorder, Schedule};
pub use source::Schedulable;

use crate::autodiff::JointGraph;
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};
use crate::partition::CostModel;
use fetch::with_fetches;
use free::{free_after_last_read, with_frees};

/// One instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Compute a node (forward in the forward program, backward in the backward program).
    Compute(NodeId),
    /// Compute a forward node again inside the backward program.
    Recompute(NodeId),
    /// Free a value after its last use.
    Free(NodeId),
    /// Start copying a value to host memory (forward program, right after it is computed).
    Offload(NodeId),
    /// Copy an offloaded value back into a new device buffer and free its host copy (backward
    /// program, ahead of its first use).
    Fetch(NodeId),
    /// Compute a reshape by taking over its input's buffer, whose last use this is
    /// ([`crate::Backend::reshape_owned`]): no copy and no new memory, and no `Free` of the input
    /// follows (its buffer now holds this value).
    Alias(NodeId),
}

impl Step {
    /// The node the step computes, frees or moves.
    pub fn node(self) -> NodeId {
        let mut step = self;
        *step.node_mut()
    }

    fn node_mut(&mut self) -> &mut NodeId {
        match self {
            Step::Compute(id)
            | Step::Recompute(id)
            | Step::Free(id)
            | Step::Offload(id)
            | Step::Fetch(id)
            | Step::Alias(id) => id,
        }
    }
}

/// What a sequence entry does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Compute,
    Recompute,
    Fetch,
}

/// A forward program and a backward program over one joint graph.
#[derive(Clone, Debug)]
pub struct Plan {
    forward: Vec<Step>,
    backward: Vec<Step>,
    saved: Vec<NodeId>,
    offloaded: Vec<NodeId>,
    recomputed: Vec<NodeId>,
    resident: Vec<NodeId>,
    kept: Vec<NodeId>,
    resident_bytes: usize,
    saved_bytes: usize,
    host_bytes: usize,
    predicted_peak: usize,
    predicted_host_peak: usize,
}

/// An offloaded value's transfer window in a [`Plan`] ([`Plan::transfer_windows`]): the step
/// of its `Offload` in the forward program, and those of its `Fetch` and of its first use in the
/// backward program. `fetch <= first_use` (`first_use == fetch` where no backward step reads it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferWindow {
    /// The offloaded value.
    pub value: NodeId,
    /// Index of its `Step::Offload` in the forward program.
    pub offload: usize,
    /// Index of its `Step::Fetch` in the backward program.
    pub fetch: usize,
    /// Index of the first backward step at or after the fetch that reads it.
    pub first_use: usize,
}

impl Plan {
    /// Plans `joint` keeping the forward values with `saved[id] == true` for the backward.
    ///
    /// Inputs, parameters and the forward outputs are always at hand; every other value the
    /// backward reads is recomputed.
    pub fn new(joint: &JointGraph, saved: &[bool]) -> Result<Plan> {
        Self::with_offload(joint, saved, &vec![false; saved.len()], &CostModel::default())
    }

    /// Plans `graph` (a [`JointGraph`], or its partition graph, which plans alike) keeping the
    /// values with `saved[id]`, those with `offloaded[id]` too in host memory between the passes;
    /// `model` times the prefetches. Offloading an input, a parameter or a forward output is an
    /// error naming it; an offloaded value the backward never reads is kept on the device (there
    /// is nothing to fetch it for).
    pub fn with_offload(
        graph: &(impl Schedulable + ?Sized),
        saved: &[bool],
        offloaded: &[bool],
        model: &CostModel,
    ) -> Result<Plan> {
        let n_fwd = graph.forward_len()?;
        if saved.len() != n_fwd || offloaded.len() != n_fwd {
            return Err(Error::config(
                "saved",
                format!(
                    "saved and offloaded sets cover {} and {} nodes, the forward has {n_fwd}",
                    saved.len(),
                    offloaded.len()
                ),
            ));
        }
        model.validate()?;
        // Every pass below reads inputs and bytes by id: from arrays, not from the nodes.
        let compact = source::Compact::of(graph);
        let graph = &compact;
        for i in (0..n_fwd).filter(|&i| offloaded[i]) {
            let id = NodeId::from_index(i);
            let why = if !saved[i] {
                Some("it is not saved")
            } else if graph.is_resident(id) {
                Some("it is an input or a parameter, which stays on the device")
            } else if graph.forward_outputs().contains(&id) {
                Some("it is a forward output, which the caller holds on the device")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(graph.node_error(id, format!("cannot be offloaded: {why}")));
            }
        }
        let resident: Vec<NodeId> = (0..n_fwd as u32).map(NodeId::new).filter(|&i| graph.is_resident(i)).collect();
        let kept: Vec<NodeId> = graph.forward_outputs().iter().chain(graph.gradients()).copied().collect();
        let mut at_hand = vec![false; graph.node_count()];
        for &i in resident.iter().chain(graph.forward_outputs()) {
            at_hand[i.index()] = true;
        }

        // Forward: ancestors of the outputs (released ones too) and of the saved values.
        let roots: Vec<NodeId> = graph
            .forward_outputs()
            .iter()
            .chain(graph.released_outputs())
            .copied()
            .chain((0..n_fwd as u32).map(NodeId::new).filter(|i| saved[i.index()]))
            .collect();
        let live_fwd = ancestors(graph, &roots, n_fwd);
        let mut seq: Vec<(NodeId, Kind)> = (0..n_fwd as u32)
            .map(NodeId::new)
            .filter(|&i| live_fwd[i.index()] && !graph.is_resident(i))
            .map(|i| (i, Kind::Compute))
            .collect();
        let n_forward_steps = seq.len();
        let saved_ids: Vec<NodeId> = (0..n_fwd as u32)
            .map(NodeId::new)
            .filter(|&i| saved[i.index()] && live_fwd[i.index()] && !graph.is_resident(i))
            .collect();
        for &i in &saved_ids {
            at_hand[i.index()] = true;
        }

        // Backward: gradient nodes in order, recomputing what they read just before first use.
        let live_bwd = ancestors(graph, graph.gradients(), graph.node_count());
        let mut recomputed = Vec::new();
        for id in (n_fwd..graph.node_count()).map(NodeId::from_index).filter(|i| live_bwd[i.index()]) {
            for &input in graph.inputs(id) {
                if !at_hand[input.index()] {
                    recompute(graph, input, &mut at_hand, &mut seq, &mut recomputed);
                }
            }
            seq.push((id, Kind::Compute));
            at_hand[id.index()] = true;
        }

        let never_free = at_hand_never_freed(graph.node_count(), &resident, &kept);
        let (seq, offloaded_ids) = with_fetches(graph, seq, n_forward_steps, &saved_ids, offloaded, &never_free, model);
        let mut is_offloaded = vec![false; graph.node_count()];
        for &i in &offloaded_ids {
            is_offloaded[i.index()] = true;
        }
        let (forward, backward) = with_frees(graph, &seq, n_forward_steps, &never_free, &is_offloaded);
        let resident_bytes = resident.iter().map(|&i| graph.bytes(i)).sum();
        let saved_bytes = saved_ids.iter().filter(|&&i| !is_offloaded[i.index()]).map(|&i| graph.bytes(i)).sum();
        let host_bytes = offloaded_ids.iter().map(|&i| graph.bytes(i)).sum();
        let mut plan = Plan {
            forward,
            backward,
            saved: saved_ids,
            offloaded: offloaded_ids,
            recomputed,
            resident,
            kept,
            resident_bytes,
            saved_bytes,
            host_bytes,
            predicted_peak: 0,
            predicted_host_peak: 0,
        };
        (plan.predicted_peak, plan.predicted_host_peak) = plan.simulate_peaks(graph);
        Ok(plan)
    }

    /// A forward-only plan computing the forward nodes `outputs` (for inference): the
    /// ancestors of `outputs` in order, each freed after its last use; no backward program,
    /// nothing saved. Only the inputs and parameters `outputs` depend on are resident.
    pub fn forward_only(joint: &JointGraph, outputs: &[NodeId]) -> Result<Plan> {
        Self::forward_only_consuming(joint, outputs, &[])
    }

    /// [`Plan::forward_only`] where the resident values `consumed` are freed after their last
    /// use like computed ones: the caller hands their buffers over (a decoder's caches, each
    /// replaced by the step's updated copy, so the two are not held at once).
    pub fn forward_only_consuming(joint: &JointGraph, outputs: &[NodeId], consumed: &[NodeId]) -> Result<Plan> {
        let graph = joint.graph();
        let n_fwd = joint.n_forward();
        if let Some(bad) = outputs.iter().find(|o| o.index() >= n_fwd) {
            return Err(Error::config(
                "outputs",
                format!("{bad} is not a forward value; a forward-only plan computes forward values"),
            ));
        }
        let live = ancestors(joint, outputs, n_fwd);
        let resident: Vec<NodeId> =
            (0..n_fwd as u32).map(NodeId::new).filter(|&i| live[i.index()] && joint.is_resident(i)).collect();
        let seq: Vec<(NodeId, Kind)> = (0..n_fwd as u32)
            .map(NodeId::new)
            .filter(|&i| live[i.index()] && !joint.is_resident(i))
            .map(|i| (i, Kind::Compute))
            .collect();
        let kept = outputs.to_vec();
        let never_free = at_hand_never_freed(graph.len(), &resident, &kept);
        let (mut forward, backward) = with_frees(joint, &seq, seq.len(), &never_free, &vec![false; graph.len()]);
        for &id in consumed {
            if !resident.contains(&id) || kept.contains(&id) {
                return Err(Error::config("consumed", format!(
                    "{} cannot be handed over to the run: only an input the outputs read, and not an output itself, can",
                    graph.describe(id)
                )));
            }
            free_after_last_read(joint, &mut forward, id);
        }
        let resident_bytes = resident.iter().map(|&i| graph.node(i).bytes()).sum();
        let mut plan = Plan {
            forward,
            backward,
            saved: Vec::new(),
            offloaded: Vec::new(),
            recomputed: Vec::new(),
            resident,
            kept,
            resident_bytes,
            saved_bytes: 0,
            host_bytes: 0,
            predicted_peak: 0,
            predicted_host_peak: 0,
        };
        (plan.predicted_peak, plan.predicted_host_peak) = plan.simulate_peaks(joint);
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
    /// parameters, resident anyway, are not listed; offloaded values are).
    pub fn saved(&self) -> &[NodeId] {
        &self.saved
    }

    /// Saved values kept in host memory between the passes, in id order.
    pub fn offloaded(&self) -> &[NodeId] {
        &self.offloaded
    }

    /// Bytes of the offloaded values: host memory, and the bytes moved each way.
    pub fn host_bytes(&self) -> usize {
        self.host_bytes
    }

    /// The most bytes of host memory held at once (offloaded copies).
    pub fn predicted_host_peak(&self) -> usize {
        self.predicted_host_peak
    }

    /// For each offloaded value, its [`TransferWindow`]: where it leaves the device in the
    /// forward program, and where it is fetched and first used in the backward program.
    /// `graph` is the graph the plan was made for (or its partition graph, or the joint graph
    /// of that).
    pub fn transfer_windows(&self, graph: &(impl Schedulable + ?Sized)) -> Vec<TransferWindow> {
        self.offloaded
            .iter()
            .map(|&v| {
                let out = self.forward.iter().position(|s| *s == Step::Offload(v)).unwrap_or(0);
                let fetch = self.backward.iter().position(|s| *s == Step::Fetch(v)).unwrap_or(0);
                let reads = |s: &Step| match *s {
                    Step::Compute(id) | Step::Recompute(id) | Step::Alias(id) => graph.inputs(id).contains(&v),
                    _ => false,
                };
                let first = self.backward.iter().skip(fetch).position(reads).map_or(fetch, |k| fetch + k);
                TransferWindow { value: v, offload: out, fetch, first_use: first }
            })
            .collect()
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

    /// Bytes of the values saved on the device (offloaded ones excluded).
    pub fn saved_bytes(&self) -> usize {
        self.saved_bytes
    }

    /// The most device bytes live at once while the programs run, resident values included.
    pub fn predicted_peak(&self) -> usize {
        self.predicted_peak
    }

    /// FLOPs spent recomputing; `graph` as for [`Plan::transfer_windows`].
    pub fn recompute_flops(&self, graph: &(impl Schedulable + ?Sized)) -> u64 {
        self.recomputed.iter().map(|&i| graph.flops(i)).sum()
    }

    /// The plan with node `k` renamed `to_old[k]`: a plan made over a graph's nodes in another
    /// order ([`Schedule`]) named by the graph's own ids. The lists in id order stay so.
    fn renumber(&mut self, to_old: &[NodeId]) {
        for id in self.forward.iter_mut().chain(&mut self.backward).map(Step::node_mut) {
            *id = to_old[id.index()];
        }
        for list in [&mut self.saved, &mut self.offloaded, &mut self.recomputed, &mut self.resident, &mut self.kept] {
            list.iter_mut().for_each(|id| *id = to_old[id.index()]);
        }
        for list in [&mut self.saved, &mut self.offloaded, &mut self.resident] {
            list.sort_unstable();
        }
    }

    /// Device and host peaks, walking the programs.
    fn simulate_peaks(&self, graph: &(impl Schedulable + ?Sized)) -> (usize, usize) {
        let mut live = self.resident_bytes;
        let mut peak = live;
        let (mut host, mut host_peak) = (0usize, 0usize);
        for step in self.steps() {
            match *step {
                Step::Compute(id) | Step::Recompute(id) => {
                    live += graph.bytes(id);
                    peak = peak.max(live);
                }
                Step::Free(id) => live -= graph.bytes(id),
                // The input's buffer becomes this value's: the same bytes, still live.
                Step::Alias(_) => {}
                Step::Offload(id) => {
                    host += graph.bytes(id);
                    host_peak = host_peak.max(host);
                }
                Step::Fetch(id) => {
                    live += graph.bytes(id);
                    peak = peak.max(live);
                    host -= graph.bytes(id);
                }
            }
        }
        (peak, host_peak)
    }
}

/// FLOPs of computing node `id` once.
pub fn node_flops(graph: &Graph, id: NodeId) -> u64 {
    graph.node_flops(id)
}

fn at_hand_never_freed(nodes: usize, resident: &[NodeId], kept: &[NodeId]) -> Vec<bool> {
    crate::id::marked(nodes, resident.iter().chain(kept))
}

/// Marks the ancestors of `roots` (roots included) among nodes `0..limit`.
pub(crate) fn ancestors(graph: &(impl Schedulable + ?Sized), roots: &[NodeId], limit: usize) -> Vec<bool> {
    let mut mark = vec![false; limit];
    for &r in roots {
        if r.index() < limit {
            mark[r.index()] = true;
        }
    }
    for i in (0..limit).rev() {
        if mark[i] {
            for &input in graph.inputs(NodeId::from_index(i)) {
                mark[input.index()] = true;
            }
        }
    }
    mark
}

/// Appends recomputes of `value` and of whatever it needs that is not at hand, inputs first.
fn recompute(
    graph: &(impl Schedulable + ?Sized),
    value: NodeId,
    at_hand: &mut [bool],
    seq: &mut Vec<(NodeId, Kind)>,
    recomputed: &mut Vec<NodeId>,
) {
    // Iterative post-order: deep chains must not overflow the stack.
    let mut stack = vec![(value, false)];
    while let Some((id, inputs_done)) = stack.pop() {
        if at_hand[id.index()] {
            continue;
        }
        if inputs_done {
            seq.push((id, Kind::Recompute));
            recomputed.push(id);
            at_hand[id.index()] = true;
            continue;
        }
        stack.push((id, true));
        for &input in graph.inputs(id).iter().rev() {
            if !at_hand[input.index()] {
                stack.push((input, false));
            }
        }
    }
}
