//! Frees: each value released right after its last use, in the forward and the backward.

use super::{Kind, Schedulable, Step};
use crate::graph::NodeId;

/// Inserts a [`Step::Free`] of `value` right after the last step of `program` that reads it.
pub(super) fn free_after_last_read(graph: &(impl Schedulable + ?Sized), program: &mut Vec<Step>, value: NodeId) {
    let reads = |s: &Step| match *s {
        Step::Compute(id) | Step::Recompute(id) | Step::Alias(id) => graph.inputs(id).contains(&value),
        _ => false,
    };
    if let Some(last) = program.iter().rposition(reads) {
        program.insert(last + 1, Step::Free(value));
    }
}

/// Turns a compute sequence into the two programs with a free after each value's last use (for
/// a released output, no earlier than the forward's last step).
/// A node computed twice (forward, then recomputed or fetched) is two values, each freed on its
/// own; an offloaded value is copied out right after it is computed.
pub(super) fn with_frees(
    graph: &(impl Schedulable + ?Sized),
    seq: &[(NodeId, Kind)],
    n_forward_steps: usize,
    never_free: &[bool],
    offloaded: &[bool],
) -> (Vec<Step>, Vec<Step>) {
    const NONE: usize = usize::MAX;
    let mut current = vec![NONE; graph.node_count()]; // node → index in `defs` of its live value
    let mut last_use: Vec<usize> = Vec::with_capacity(seq.len()); // per definition
    for (pos, &(id, kind)) in seq.iter().enumerate() {
        // A fetch reads the host copy, not the value's inputs.
        let inputs: &[NodeId] = if kind == Kind::Fetch { &[] } else { graph.inputs(id) };
        for &input in inputs {
            let def = current[input.index()];
            if def != NONE {
                last_use[def] = pos;
            }
        }
        current[id.index()] = pos;
        last_use.push(pos);
    }
    // A released output is returned by the forward: held to its end, whoever reads it.
    let released = graph.released_outputs();
    if !released.is_empty() && n_forward_steps > 0 {
        let is_released = crate::id::marked(graph.node_count(), released);
        for (pos, &(id, _)) in seq[..n_forward_steps].iter().enumerate() {
            if is_released[id.index()] {
                last_use[pos] = last_use[pos].max(n_forward_steps - 1);
            }
        }
    }
    // What each step frees, grouped by step (CSR: `frees[start[pos]..start[pos + 1]]`, in
    // sequence order): one list per step would be a small allocation per step.
    // Counted per step, summed so that `start[pos]` is where the step's group ends, then filled
    // from the back, each group's end moving down to its start (no second array of cursors).
    let mut start = vec![0usize; seq.len() + 1];
    for (pos, &(id, _)) in seq.iter().enumerate() {
        if !never_free[id.index()] {
            start[last_use[pos]] += 1;
        }
    }
    for pos in 1..=seq.len() {
        start[pos] += start[pos - 1];
    }
    let mut frees = vec![NodeId::new(0); start[seq.len()]];
    for (pos, &(id, _)) in seq.iter().enumerate().rev() {
        if !never_free[id.index()] {
            let end = &mut start[last_use[pos]];
            *end -= 1;
            frees[*end] = id;
        }
    }
    let steps_after = |from: usize| 2 * from + frees.len() / 2;
    let mut forward = Vec::with_capacity(steps_after(n_forward_steps));
    let mut backward = Vec::with_capacity(steps_after(seq.len() - n_forward_steps));
    for (pos, &(id, kind)) in seq.iter().enumerate() {
        let in_forward = pos < n_forward_steps;
        let program = if in_forward { &mut forward } else { &mut backward };
        let freed = &frees[start[pos]..start[pos + 1]];
        let mut taken_over = None;
        program.push(match kind {
            Kind::Compute => match aliased_input(graph, id, freed) {
                Some(input) => {
                    taken_over = Some(input);
                    Step::Alias(id)
                }
                None => Step::Compute(id),
            },
            Kind::Recompute => Step::Recompute(id),
            Kind::Fetch => Step::Fetch(id),
        });
        if in_forward && offloaded[id.index()] {
            program.push(Step::Offload(id));
        }
        program.extend(freed.iter().filter(|&&f| Some(f) != taken_over).map(|&f| Step::Free(f)));
    }
    (forward, backward)
}

/// The input a computed reshape `id` can take over: its only input, when that is freed right
/// after this step (`frees`: what the step frees), so no one else reads the buffer. Recomputes
/// copy (their steps stay `Recompute`, as reports count them).
fn aliased_input(graph: &(impl Schedulable + ?Sized), id: NodeId, frees: &[NodeId]) -> Option<NodeId> {
    match graph.inputs(id) {
        &[input] if graph.is_reshape(id) && input != id && frees.contains(&input) => Some(input),
        _ => None,
    }
}
