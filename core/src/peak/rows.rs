//! The memory rows of the exact peak search: at the steps of the schedule every plan takes, the
//! bytes live there bounded below by what is live whatever is saved plus what is live if saved.
//!
//! Every row holds for every saved set: a plan that meets a peak meets every row, so the least
//! recompute under the rows is a proven lower bound on the least recompute of any plan within
//! the peak, and a saved set within the rows whose plan peaks within the limit is optimal.
//!
//! What the planner does ([`crate::Plan`]) that the rows read:
//! - the forward computes, in order, at least the ancestors of the forward outputs; each
//!   value is live from its step to its last read (for ever, for an output), and a saved one
//!   on into the backward;
//! - the backward computes its nodes in order; a forward value it reads is at hand from before
//!   its first reader to after its last — saved, or recomputed once and held — whatever is
//!   saved; a saved value is live from the forward until its first reader at least;
//! - a reshape may take over its input's buffer, so a reshape's own bytes are not counted at
//!   its step.
//!
//! What the rows leave out (values recomputed for another's recompute, saved values read only
//! by recomputes, forward values computed only because a saved value needs them) only makes
//! them looser, never wrong.

use crate::error::Result;
use crate::graph::NodeId;
use crate::plan::Schedulable;

/// One step's row: `held + Σ bytes(v) · saved(v) over saved ≤ peak`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    /// Bytes live at the step whatever is saved (inputs and parameters included).
    pub(crate) held: u64,
    /// Values live at the step when saved, in the schedule's ids.
    pub(crate) saved: Vec<NodeId>,
}

/// The rows of `graph`'s schedule, those another row implies left out: the forward's rows only
/// grow their saved terms from step to step and the backward's only shrink theirs, so a row
/// whose held bytes a row with more terms reaches is implied by it.
pub(crate) fn memory_rows(graph: &(impl Schedulable + ?Sized)) -> Result<Vec<Row>> {
    let n_fwd = graph.forward_len()?;
    let n = graph.node_count();
    let bytes = |i: usize| graph.bytes(NodeId::from_index(i)) as u64;
    let resident = |i: usize| graph.is_resident(NodeId::from_index(i));
    let mut output = vec![false; n];
    for o in graph.forward_outputs() {
        output[o.index()] = true;
    }
    let resident_bytes: u64 = (0..n_fwd).filter(|&i| resident(i)).map(bytes).sum();
    // A forward value the rows may count as saved: computed, not held anyway.
    let decided = |i: usize| i < n_fwd && !resident(i) && !output[i];
    let step_bytes = |i: usize| if graph.is_reshape(NodeId::from_index(i)) { 0 } else { bytes(i) };

    let mut rows = forward_rows(graph, n_fwd, &output, resident_bytes, &decided, &step_bytes);
    rows.extend(backward_rows(graph, n_fwd, &output, resident_bytes, &decided, &step_bytes));
    Ok(rows)
}

/// Rows at the forward steps every plan takes (the ancestors of the outputs).
fn forward_rows(
    graph: &(impl Schedulable + ?Sized),
    n_fwd: usize,
    output: &[bool],
    resident_bytes: u64,
    decided: &impl Fn(usize) -> bool,
    step_bytes: &impl Fn(usize) -> u64,
) -> Vec<Row> {
    let bytes = |i: usize| graph.bytes(NodeId::from_index(i)) as u64;
    let always = crate::plan::ancestors(graph, graph.forward_outputs(), n_fwd);
    // Each value's last read among the steps every plan takes.
    let mut last = vec![None; n_fwd];
    for k in (0..n_fwd).filter(|&k| always[k] && !graph.is_resident(NodeId::from_index(k))) {
        for x in graph.inputs(NodeId::from_index(k)) {
            last[x.index()] = Some(k);
        }
    }
    // held[k]: the row's constant at step k; a value read past k is live (an output for ever).
    let steps: Vec<usize> = (0..n_fwd).filter(|&k| always[k] && !graph.is_resident(NodeId::from_index(k))).collect();
    let mut live_until = vec![0i64; n_fwd + 2];
    for &v in &steps {
        let end = if output[v] { n_fwd } else { last[v].map_or(v, |l| l.max(v)) };
        if end > v {
            live_until[v + 1] += bytes(v) as i64;
            live_until[end + 1] -= bytes(v) as i64;
        }
    }
    let mut carried = 0i64;
    let mut held = vec![0u64; n_fwd];
    for k in 0..n_fwd {
        carried += live_until[k];
        held[k] = resident_bytes + carried as u64 + step_bytes(k);
    }
    // Keep a step's row where no later step's row (with more saved terms) holds as much.
    let mut rows = Vec::new();
    let mut later_max = None;
    for &k in steps.iter().rev() {
        if later_max.is_some_and(|m| m >= held[k]) {
            continue;
        }
        later_max = Some(held[k]);
        let saved = (0..k)
            .filter(|&v| decided(v) && !(always[v] && last[v].is_some_and(|l| l >= k)))
            .map(NodeId::from_index)
            .collect();
        rows.push(Row { held: held[k], saved });
    }
    rows
}

/// Rows at the backward's steps: each node the gradients need.
fn backward_rows(
    graph: &(impl Schedulable + ?Sized),
    n_fwd: usize,
    output: &[bool],
    resident_bytes: u64,
    decided: &impl Fn(usize) -> bool,
    step_bytes: &impl Fn(usize) -> u64,
) -> Vec<Row> {
    let n = graph.node_count();
    let bytes = |i: usize| graph.bytes(NodeId::from_index(i)) as u64;
    let live = crate::plan::ancestors(graph, graph.gradients(), n);
    let steps: Vec<usize> = (n_fwd..n).filter(|&b| live[b]).collect();
    let mut kept = vec![false; n];
    for g in graph.gradients() {
        kept[g.index()] = true;
    }
    // First and last backward step reading each value.
    let (mut first, mut last) = (vec![usize::MAX; n], vec![0usize; n]);
    for &b in &steps {
        for x in graph.inputs(NodeId::from_index(b)) {
            first[x.index()] = first[x.index()].min(b);
            last[x.index()] = last[x.index()].max(b);
        }
    }
    // held[b]: outputs, the gradients so far, backward values read at or past b, forward
    // values between their first and last reader.
    let outputs: u64 = (0..n_fwd).filter(|&i| output[i] && !graph.is_resident(NodeId::from_index(i))).map(bytes).sum();
    let mut change = vec![0i64; n + 2];
    for &v in &steps {
        let end = if kept[v] { n } else { last[v].max(v) };
        if end > v {
            change[v + 1] += bytes(v) as i64;
            change[end + 1] -= bytes(v) as i64;
        }
    }
    for v in (0..n_fwd).filter(|&v| decided(v) && first[v] != usize::MAX) {
        change[first[v]] += bytes(v) as i64;
        change[last[v] + 1] -= bytes(v) as i64;
    }
    let mut carried = 0i64;
    let mut held = vec![0u64; n];
    for b in 0..n {
        carried += change[b];
        held[b] = resident_bytes + outputs + carried as u64 + if b >= n_fwd { step_bytes(b) } else { 0 };
    }
    // Keep a step's row where no earlier step's row (with more saved terms) holds as much.
    let mut rows = Vec::new();
    let mut earlier_max = None;
    for &b in &steps {
        if earlier_max.is_some_and(|m| m >= held[b]) {
            continue;
        }
        earlier_max = Some(held[b]);
        let saved = (0..n_fwd)
            .filter(|&v| decided(v) && first[v] != usize::MAX && first[v] > b)
            .map(NodeId::from_index)
            .collect();
        rows.push(Row { held: held[b], saved });
    }
    rows
}
