//! Fetches of offloaded values in the backward: just before first use, then as early as the
//! compute they hide behind needs and the device peak allows.

use super::free::with_frees;
use super::{Kind, Schedulable, Step};
use crate::graph::NodeId;
use crate::partition::CostModel;

/// Inserts a fetch of each offloaded value into the backward part of `seq`: first just before
/// its first backward use, then — value by value, in order of first use — earlier, one step at a
/// time, while the compute it would hide behind is shorter than the host-to-device transfer and
/// the device peak of the just-in-time plan is not exceeded (never before the backward starts).
/// Returns the sequence and the offloaded values it fetches; an offloaded value the backward
/// never reads stays on the device.
pub(super) fn with_fetches(
    graph: &(impl Schedulable + ?Sized),
    seq: Vec<(NodeId, Kind)>,
    n_forward_steps: usize,
    saved_ids: &[NodeId],
    offloaded: &[bool],
    never_free: &[bool],
    model: &CostModel,
) -> (Vec<(NodeId, Kind)>, Vec<NodeId>) {
    if !saved_ids.iter().any(|v| offloaded[v.index()]) {
        // Nothing to fetch: the sequence as it is (the passes below would copy it and free it
        // twice over for nothing: docs/performance.md, "Plan").
        return (seq, Vec::new());
    }
    let mut first_use = vec![usize::MAX; graph.node_count()];
    for (pos, &(id, _)) in seq.iter().enumerate().skip(n_forward_steps) {
        for &input in graph.inputs(id) {
            first_use[input.index()] = first_use[input.index()].min(pos);
        }
    }
    let mut fetch_at: Vec<(usize, NodeId)> = saved_ids
        .iter()
        .filter(|v| offloaded[v.index()] && first_use[v.index()] != usize::MAX)
        .map(|&v| (first_use[v.index()], v))
        .collect();
    fetch_at.sort();
    let ids = {
        let mut ids: Vec<NodeId> = fetch_at.iter().map(|&(_, v)| v).collect();
        ids.sort();
        ids
    };
    let mut is_offloaded = vec![false; graph.node_count()];
    for &v in &ids {
        is_offloaded[v.index()] = true;
    }
    // The just-in-time plan's device bytes live at each base entry (after it computes).
    let jit = insert_fetches(&seq, &fetch_at);
    let (forward, backward) = with_frees(graph, &jit, n_forward_steps, never_free, &is_offloaded);
    let mut live_at = Vec::with_capacity(seq.len());
    let mut live = 0usize;
    for step in forward.iter().chain(&backward) {
        match *step {
            Step::Compute(id) | Step::Recompute(id) => {
                live += graph.bytes(id);
                live_at.push(live);
            }
            Step::Alias(_) => live_at.push(live),
            Step::Fetch(id) => live += graph.bytes(id),
            Step::Free(id) => live -= graph.bytes(id),
            Step::Offload(_) => {}
        }
    }
    let peak = live_at.iter().copied().max().unwrap_or(0);
    for (at, v) in fetch_at.iter_mut() {
        let bytes = graph.bytes(*v);
        let transfer = model.h2d_s(bytes as u64);
        let mut hidden = 0.0;
        while *at > n_forward_steps && hidden < transfer && live_at[*at - 1] + bytes <= peak {
            *at -= 1;
            live_at[*at] += bytes;
            hidden += model.compute_s(graph.flops(seq[*at].0));
        }
    }
    fetch_at.sort();
    (insert_fetches(&seq, &fetch_at), ids)
}

/// `seq` with a fetch of `v` before base entry `at` for each `(at, v)` (sorted).
fn insert_fetches(seq: &[(NodeId, Kind)], fetch_at: &[(usize, NodeId)]) -> Vec<(NodeId, Kind)> {
    let mut out = Vec::with_capacity(seq.len() + fetch_at.len());
    let mut next = fetch_at.iter().peekable();
    for (pos, &entry) in seq.iter().enumerate() {
        while let Some(&&(at, v)) = next.peek() {
            if at != pos {
                break;
            }
            out.push((v, Kind::Fetch));
            next.next();
        }
        out.push(entry);
    }
    out
}
