//! A lower bound on the predicted peak of every plan of a joint graph, found in one pass over
//! it: what no choice of saved, offloaded and recomputed values can take off the device. A limit
//! below it is refused at once, without the search (which, on a long chain, plans hundreds of
//! budgets before it can say that none fits).
//!
//! Every plan, whatever it saves ([`crate::Plan::with_offload`]):
//! - holds the inputs and parameters for the whole step;
//! - computes, in the forward, every forward node the forward outputs depend on, and in the
//!   backward every backward node the gradients depend on, each in id order;
//! - has every value a node reads on the device when it computes that node (saved, recomputed
//!   or fetched), beside the node's own new value (a reshape may take over its input's buffer,
//!   so its own bytes are not counted);
//! - never frees the forward outputs and the gradients once computed.
//!
//! So at each such node's step the device holds at least: inputs and parameters, the outputs
//! and gradients computed so far, the node's other inputs, and the node's value. The largest of
//! these is the bound.

use crate::error::Result;
use crate::graph::NodeId;
use crate::plan::Schedulable;
use crate::text::fmt_bytes;

/// The bound and what it is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeakBound {
    /// No plan's predicted peak is below this many bytes.
    pub bytes: u64,
    /// Bytes of the inputs and parameters.
    pub resident: u64,
    /// The node at whose step the bound is reached, when more than the inputs and parameters
    /// are held there.
    pub at: Option<NodeId>,
}

impl PeakBound {
    /// Why `asked` (`peak=` or `peak+offload=`, whose limit is below the bound) cannot be met,
    /// for a message: the bound and what it holds.
    pub fn explain(&self, asked: crate::Strategy, graph: &(impl Schedulable + ?Sized)) -> String {
        let limit = asked.peak().unwrap_or(0);
        let held = match self.at {
            None => "the inputs and parameters alone".to_string(),
            Some(at) => {
                // The graph names its nodes in its own way (`node 3 (tanh)`, `%3 (tanh)`).
                let node = graph.node_error(at, String::new()).to_string();
                format!(
                    "{} bytes of inputs and parameters, and {} bytes more while computing {}",
                    self.resident,
                    self.bytes - self.resident,
                    node.trim_end_matches([' ', ':'])
                )
            }
        };
        format!(
            "{asked} ({}) cannot be met: no plan peaks below {} bytes ({}): {held} (a lower bound, known \
             without searching; the least peak a plan reaches may be higher)",
            fmt_bytes(limit),
            self.bytes,
            fmt_bytes(self.bytes)
        )
    }
}

/// The bound for `graph` ([`PeakBound`]), in time linear in its nodes and edges.
pub fn peak_lower_bound(graph: &(impl Schedulable + ?Sized)) -> Result<PeakBound> {
    let n_fwd = graph.forward_len()?;
    let count = graph.node_count();
    let bytes = |i: NodeId| graph.bytes(i) as u64;
    let ids = |range: std::ops::Range<usize>| range.map(NodeId::from_index);
    let resident: u64 = ids(0..n_fwd).filter(|&i| graph.is_resident(i)).map(bytes).sum();
    let computed = computed_by_every_plan(graph, n_fwd);
    let mut kept = vec![false; count];
    for &o in graph.forward_outputs().iter().filter(|o| o.index() < n_fwd) {
        kept[o.index()] = computed[o.index()];
    }
    for &g in graph.gradients().iter().filter(|g| g.index() >= n_fwd) {
        kept[g.index()] = true;
    }
    let aliases = |i: NodeId| graph.is_reshape(i) && graph.inputs(i).len() == 1;
    // A reshape that takes over a smaller buffer is counted by the plan at that buffer's size
    // until it is freed: the plan's count may fall short of the bytes by this much.
    let shortfall: u64 = ids(0..count)
        .filter(|&i| computed[i.index()] && aliases(i))
        .map(|i| bytes(i).saturating_sub(bytes(graph.inputs(i)[0])))
        .sum();
    let mut best = PeakBound { bytes: resident, resident, at: None };
    let mut kept_so_far = 0u64;
    // The node whose inputs were last counted, per node: an input read twice counts once.
    let mut counted_for = vec![usize::MAX; count];
    for id in ids(0..count).filter(|i| computed[i.index()]) {
        let mut held = resident.saturating_add(kept_so_far);
        for &input in graph.inputs(id) {
            let k = input.index();
            if !graph.is_resident(input) && !kept[k] && counted_for[k] != id.index() {
                counted_for[k] = id.index();
                held = held.saturating_add(bytes(input));
            }
        }
        if !aliases(id) {
            held = held.saturating_add(bytes(id));
        }
        let held = held.saturating_sub(shortfall);
        if held > best.bytes {
            best = PeakBound { bytes: held, resident, at: Some(id) };
        }
        if kept[id.index()] {
            kept_so_far = kept_so_far.saturating_add(bytes(id));
        }
    }
    Ok(best)
}

/// The nodes every plan computes: the forward nodes the forward outputs (released ones too) depend on (inputs and
/// parameters aside), and the backward nodes the gradients depend on.
fn computed_by_every_plan(graph: &(impl Schedulable + ?Sized), n_fwd: usize) -> Vec<bool> {
    let count = graph.node_count();
    let mut computed = vec![false; count];
    for &o in graph.forward_outputs().iter().chain(graph.released_outputs()).filter(|o| o.index() < n_fwd) {
        computed[o.index()] = true;
    }
    for &g in graph.gradients().iter().filter(|g| g.index() >= n_fwd) {
        computed[g.index()] = true;
    }
    // Backward nodes read forward ones, which the backward may recompute rather than the
    // forward compute: the forward's own dependencies are followed only from its outputs.
    for i in (n_fwd..count).rev() {
        if computed[i] {
            for &input in graph.inputs(NodeId::from_index(i)).iter().filter(|x| x.index() >= n_fwd) {
                computed[input.index()] = true;
            }
        }
    }
    for i in (0..n_fwd).rev() {
        if computed[i] {
            for &input in graph.inputs(NodeId::from_index(i)) {
                computed[input.index()] = true;
            }
        }
    }
    for i in (0..n_fwd).filter(|&i| graph.is_resident(NodeId::from_index(i))) {
        computed[i] = false;
    }
    computed
}
