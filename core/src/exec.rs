//! The executor: runs a plan's programs on a backend and measures the memory it used.

use crate::autodiff::JointGraph;
use crate::backend::{Backend, KernelCall, TransferStats};
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};
use crate::host::HostTensor;
use crate::op::{Meta, Op};
use crate::plan::{Plan, Step};
use crate::shape::fmt_shape;

/// What one run of a plan returns.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// The kept values (forward outputs, then gradients), in [`Plan::kept`] order.
    pub kept: Vec<HostTensor>,
    /// The most bytes the backend held at once during the run (resident values included),
    /// measured by the backend's own counters.
    pub measured_peak: usize,
    /// The most bytes of host memory (offloaded copies) the backend held at once.
    pub measured_host_peak: usize,
    /// Bytes the run copied to the device and back, by the backend's own counters.
    pub transfers: TransferStats,
}

/// Runs `plan` over `joint` on `backend`. `resident` gives the value of every input and
/// parameter, in [`Plan::resident`] order; `run_seed` seeds random ops for this run.
pub fn run<B: Backend>(
    backend: &mut B,
    joint: &JointGraph,
    plan: &Plan,
    resident: &[&HostTensor],
    run_seed: u64,
) -> Result<RunOutput> {
    // An out-of-memory error says what the plan needed.
    run_steps_with(backend, joint, plan, resident, run_seed, Mode::Train, None)
        .map_err(|e| e.with_predicted_peak(plan.predicted_peak() as u64))
}

/// Called with a kept value's index in [`Plan::kept`] and a copy of it as soon as its node is
/// computed (a gradient is final then: no later step changes it), so a data-parallel step can
/// start reducing it while the backward goes on.
pub type OnFinal<'f> = &'f mut dyn FnMut(usize, HostTensor) -> Result<()>;

/// [`run`], calling `on_final` for each kept value from index `from` on (the gradients, past the
/// forward outputs) the moment it is final; the returned [`RunOutput`] still holds every kept
/// value.
pub fn run_streaming<B: Backend>(
    backend: &mut B,
    joint: &JointGraph,
    plan: &Plan,
    resident: &[&HostTensor],
    run_seed: u64,
    from: usize,
    on_final: OnFinal<'_>,
) -> Result<RunOutput> {
    let mut downloaded = |backend: &mut B, k: usize, buffer: &B::Buffer| on_final(k, backend.download(buffer)?);
    let mut notify = Notify::new(plan, joint.graph().len(), from, &mut downloaded);
    run_steps_with(backend, joint, plan, resident, run_seed, Mode::Train, Some(&mut notify))
        .map_err(|e| e.with_predicted_peak(plan.predicted_peak() as u64))
}

/// For each of `nodes` nodes, the first index in [`Plan::kept`] (from `from` on) that holds its
/// value, if any: which steps finish a kept value.
pub(crate) fn first_kept(plan: &Plan, nodes: usize, from: usize) -> Vec<Option<usize>> {
    let mut first = vec![None; nodes];
    for (k, &id) in plan.kept().iter().enumerate().skip(from) {
        first[id.index()].get_or_insert(k);
    }
    first
}

/// Called with the backend, a kept value's index in [`Plan::kept`] and its buffer, as soon as
/// it is final ([`OnFinal`], on the device).
pub(crate) type OnFinalBuffer<'f, B> = &'f mut dyn FnMut(&mut B, usize, &<B as Backend>::Buffer) -> Result<()>;

/// Which nodes' values are reported final (`watch[node]`: the kept index), and to whom.
pub(crate) struct Notify<'f, B: Backend> {
    watch: Vec<Option<usize>>,
    on_final: OnFinalBuffer<'f, B>,
}

impl<'f, B: Backend> Notify<'f, B> {
    /// Reports each kept value from index `from` on (the gradients, past the forward outputs)
    /// to `on_final` as soon as it is final.
    pub(crate) fn new(plan: &Plan, nodes: usize, from: usize, on_final: OnFinalBuffer<'f, B>) -> Notify<'f, B> {
        Notify { watch: first_kept(plan, nodes, from), on_final }
    }

    fn computed(&mut self, backend: &mut B, id: NodeId, buffer: &B::Buffer) -> Result<()> {
        if let Some(k) = self.watch[id.index()].take() {
            (self.on_final)(backend, k, buffer)?;
        }
        Ok(())
    }

    /// Kept values the steps never computed (a resident value kept as it is): final at the end.
    fn rest(&mut self, backend: &mut B, slots: &[Option<Slot<'_, B>>]) -> Result<()> {
        let pending: Vec<(usize, usize)> =
            self.watch.iter().enumerate().filter_map(|(node, k)| k.map(|k| (k, node))).collect();
        for (k, node) in pending {
            if let Some(slot) = &slots[node] {
                self.watch[node] = None;
                (self.on_final)(backend, k, slot.buffer())?;
            }
        }
        Ok(())
    }
}

/// Runs a forward-only `plan` ([`Plan::forward_only`]) in evaluation mode: dropout passes its
/// input through unchanged.
pub fn run_inference<B: Backend>(
    backend: &mut B,
    joint: &JointGraph,
    plan: &Plan,
    resident: &[&HostTensor],
) -> Result<RunOutput> {
    run_steps_with(backend, joint, plan, resident, 0, Mode::Eval, None)
        .map_err(|e| e.with_predicted_peak(plan.predicted_peak() as u64))
}

/// Training (random ops draw) or evaluation (dropout is the identity).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Train,
    Eval,
}

/// A resident value handed to [`run_program`].
pub(crate) enum Resident<'a, B: Backend> {
    /// Host data, uploaded when the run starts (counted in the run's peak).
    Host(&'a HostTensor),
    /// A device buffer the run takes over: freed after its last use like any value (a decoder's
    /// cache, replaced by the step's new one).
    Owned(B::Buffer),
    /// A device buffer the caller keeps (a decoder's parameters, an encoder's output).
    Borrowed(&'a B::Buffer),
}

/// A live value: a buffer the run owns, or one it borrows from the caller.
pub(crate) enum Slot<'a, B: Backend> {
    Owned(B::Buffer),
    Borrowed(&'a B::Buffer),
}

impl<'a, B: Backend> Slot<'a, B> {
    pub(crate) fn buffer(&self) -> &B::Buffer {
        match self {
            Slot::Owned(b) => b,
            Slot::Borrowed(b) => b,
        }
    }
}

/// What [`run_program`] leaves: every slot still live (the kept values among them) and the
/// device and host peaks above the bytes live when it started.
pub(crate) struct Finished<'a, B: Backend> {
    pub slots: Vec<Option<Slot<'a, B>>>,
    pub measured_peak: usize,
    pub measured_host_peak: usize,
}

fn run_steps_with<B: Backend>(
    backend: &mut B,
    joint: &JointGraph,
    plan: &Plan,
    resident: &[&HostTensor],
    run_seed: u64,
    mode: Mode,
    notify: Option<&mut Notify<'_, B>>,
) -> Result<RunOutput> {
    let graph = joint.graph();
    for (&id, &value) in plan.resident().iter().zip(resident) {
        check_feed(graph, id, value)?;
    }
    let before = backend.transfers();
    let resident = resident.iter().map(|&v| Resident::Host(v)).collect();
    let Finished { mut slots, measured_peak, measured_host_peak } =
        run_program_with(backend, graph, plan, resident, run_seed, mode, notify)?;
    // Each kept buffer moves to the host at its last mention (copied at earlier ones): on the CPU
    // that is no copy at all.
    let mut last = vec![usize::MAX; graph.len()];
    for (k, &id) in plan.kept().iter().enumerate() {
        last[id.index()] = k;
    }
    let mut kept = Vec::with_capacity(plan.kept().len());
    for (k, &id) in plan.kept().iter().enumerate() {
        let slot = &mut slots[id.index()];
        match slot.take().ok_or_else(|| missing(graph, id))? {
            Slot::Owned(buffer) if last[id.index()] == k => kept.push(backend.move_to_host(buffer)?),
            live => {
                kept.push(backend.download(live.buffer())?);
                *slot = Some(live);
            }
        }
    }
    Ok(RunOutput { kept, measured_peak, measured_host_peak, transfers: backend.transfers().since(before) })
}

/// Runs `plan`'s programs over `graph` from the resident values (in [`Plan::resident`] order),
/// measuring the device and host peaks above what was live when it started.
pub(crate) fn run_program<'a, B: Backend>(
    backend: &mut B,
    graph: &Graph,
    plan: &Plan,
    resident: Vec<Resident<'a, B>>,
    run_seed: u64,
    mode: Mode,
) -> Result<Finished<'a, B>> {
    run_program_with(backend, graph, plan, resident, run_seed, mode, None)
}

/// [`run_program`], telling `notify` of each watched value as soon as it is computed.
pub(crate) fn run_program_with<'a, B: Backend>(
    backend: &mut B,
    graph: &Graph,
    plan: &Plan,
    resident: Vec<Resident<'a, B>>,
    run_seed: u64,
    mode: Mode,
    mut notify: Option<&mut Notify<'_, B>>,
) -> Result<Finished<'a, B>> {
    if resident.len() != plan.resident().len() {
        return Err(Error::internal(format!(
            "{} resident values given, the plan needs {}",
            resident.len(),
            plan.resident().len()
        )));
    }
    let baseline = backend.memory().live_bytes;
    let host_baseline = backend.host_memory().live_bytes;
    backend.reset_peak();
    let mut slots: Vec<Option<Slot<'a, B>>> = (0..graph.len()).map(|_| None).collect();
    let mut host: Vec<Option<B::Host>> = (0..graph.len()).map(|_| None).collect();
    for (&id, value) in plan.resident().iter().zip(resident) {
        slots[id.index()] = Some(match value {
            Resident::Host(value) => Slot::Owned(backend.upload(value)?),
            Resident::Owned(buffer) => Slot::Owned(buffer),
            Resident::Borrowed(buffer) => Slot::Borrowed(buffer),
        });
    }
    for step in plan.steps() {
        match *step {
            Step::Compute(id) | Step::Recompute(id) => {
                let buffer = compute(backend, graph, &slots, id, run_seed, mode)?;
                if let Some(n) = notify.as_deref_mut() {
                    n.computed(backend, id, &buffer)?;
                }
                slots[id.index()] = Some(Slot::Owned(buffer));
            }
            Step::Alias(id) => {
                let input = graph.node(id).inputs[0];
                let buffer = match slots[input.index()].take() {
                    Some(Slot::Owned(buffer)) => reshape_owned(backend, graph, buffer, id)?,
                    // A value the caller keeps (or none: `compute` says so): the reshape is a copy.
                    other => {
                        slots[input.index()] = other;
                        compute(backend, graph, &slots, id, run_seed, mode)?
                    }
                };
                if let Some(n) = notify.as_deref_mut() {
                    n.computed(backend, id, &buffer)?;
                }
                slots[id.index()] = Some(Slot::Owned(buffer));
            }
            Step::Free(id) => slots[id.index()] = None,
            Step::Offload(id) => {
                let buffer = slots[id.index()].as_ref().ok_or_else(|| missing(graph, id))?.buffer();
                host[id.index()] = Some(backend.offload(buffer).map_err(|e| e.at_node(id, graph.node(id).op.name()))?);
            }
            Step::Fetch(id) => {
                let copy = host[id.index()].take().ok_or_else(|| missing(graph, id))?;
                let buffer = backend.fetch(copy).map_err(|e| e.at_node(id, graph.node(id).op.name()))?;
                slots[id.index()] = Some(Slot::Owned(buffer));
            }
        }
    }
    let measured_peak = backend.memory().peak_bytes - baseline;
    let measured_host_peak = backend.host_memory().peak_bytes - host_baseline;
    if let Some(n) = notify {
        n.rest(backend, &slots)?;
    }
    Ok(Finished { slots, measured_peak, measured_host_peak })
}

fn compute<B: Backend>(
    backend: &mut B,
    graph: &Graph,
    slots: &[Option<Slot<'_, B>>],
    id: NodeId,
    run_seed: u64,
    mode: Mode,
) -> Result<B::Buffer> {
    let node = graph.node(id);
    // In evaluation, dropout keeps every element unscaled: p = 0 is an exact copy.
    let eval_op;
    let op = match (&node.op, mode) {
        (Op::Dropout { seed, key, .. }, Mode::Eval) => {
            eval_op = Op::Dropout { p: 0.0, seed: *seed, key: *key };
            &eval_op
        }
        (op, _) => op,
    };
    let mut inputs = Vec::with_capacity(node.inputs.len());
    let mut metas: Vec<Meta<'_>> = Vec::with_capacity(node.inputs.len());
    for &i in &node.inputs {
        inputs.push(slots[i.index()].as_ref().ok_or_else(|| missing(graph, i))?.buffer());
        metas.push(graph.node(i).meta());
    }
    let call = KernelCall::for_node(graph, id, &metas, run_seed).with_op(op);
    backend.execute(&call, &inputs).map_err(|e| match (e, node.loc()) {
        // Name the user's line that recorded the op, so a bad id points at its embedding call.
        (Error::Node { node, op, message }, Some(loc)) => {
            Error::Node { node, op, message: format!("{message} (recorded at {loc})") }
        }
        (e, _) => e.at_node(id, call.op.name()),
    })
}

/// [`Step::Alias`]: the reshape `id` computed by taking over `input`'s buffer.
fn reshape_owned<B: Backend>(backend: &mut B, graph: &Graph, input: B::Buffer, id: NodeId) -> Result<B::Buffer> {
    let node = graph.node(id);
    let metas = [graph.node(node.inputs[0]).meta()];
    let call = KernelCall::for_node(graph, id, &metas, 0);
    backend.reshape_owned(&call, input).map_err(|e| e.at_node(id, node.op.name()))
}

/// A value the plan should have had at hand: a planner bug, reported rather than panicking.
fn missing(graph: &Graph, id: NodeId) -> Error {
    Error::Node {
        node: id,
        op: graph.node(id).op.name(),
        message: "value not live when needed (plan is inconsistent)".into(),
    }
}

pub(crate) fn check_feed(graph: &Graph, id: NodeId, value: &HostTensor) -> Result<()> {
    check_meta(graph, id, value.shape(), value.dtype())
}

/// A value of `shape` and `dtype` for node `id` (an input or parameter): an error naming it and
/// both metas where they differ.
pub(crate) fn check_meta(graph: &Graph, id: NodeId, shape: &[usize], dtype: crate::DType) -> Result<()> {
    let node = graph.node(id);
    if shape == node.shape.as_slice() && dtype == node.dtype {
        return Ok(());
    }
    Err(Error::Feed {
        what: node.op.name(),
        name: graph.leaf_name(id),
        message: format!("declared {} {}, got {} {}", fmt_shape(&node.shape), node.dtype, fmt_shape(shape), dtype),
    })
}
