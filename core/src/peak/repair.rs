//! A plan the exact program chose that peaks a little over the limit, brought within it one
//! change at a time: the program's rows are a relaxation, so its plan may overshoot by a few
//! bytes where the optimum lies within them. Each change saves a value recomputed at the plan's
//! peak, or recomputes one saved and live there — whichever takes the most bytes off the peak
//! per FLOP added — until the plan fits. The plan found is an upper bound on the least recompute,
//! the program's a lower one: together they give the answer's gap without more rounds.

use crate::error::Result;
use crate::graph::NodeId;
use crate::partition::{evaluate, CostModel, PGraph, Partition, Reason};
use crate::plan::{Plan, Schedulable, Schedule, Step};
use std::time::Instant;

/// How good a change is: 0 within the limit (then its FLOPs added), 1 over it (then FLOPs added
/// per byte taken off the peak); less is better.
type Score = (u8, f64);

/// Changes tried before the repair gives up.
const CHANGES: usize = 24;

/// A plan within `limit` made from `partition` (whose plan is `plan`) by the changes above, with
/// its partition; `None` where none was found by `deadline` or in [`CHANGES`] changes.
pub(super) fn repair<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    partition: &Partition,
    plan: &Plan,
    limit: u64,
    model: &CostModel,
    deadline: Instant,
) -> Result<Option<(Partition, Plan)>> {
    let mut saved: Vec<bool> = (0..pg.len()).map(|i| partition.saved[i] && !pg.nodes[i].backward).collect();
    let mut peak = plan.predicted_peak() as u64;
    let mut flops = partition.recompute_flops;
    let mut current = plan.clone();
    for _ in 0..CHANGES {
        if Instant::now() >= deadline {
            return Ok(None);
        }
        // The best change: within the limit at the fewest FLOPs, else the most bytes off the
        // peak per FLOP added (bytes past the overshoot count for nothing).
        let mut best: Option<(Score, Vec<bool>, Partition, Plan)> = None;
        for id in live_at_peak(&current, pg) {
            // A must_save value stays saved: the checker lets a must_save constant be made again
            // (the same bits), but the user asked for it kept.
            let node = pg.node(id);
            if node.backward || node.flags.resident || node.policy == Some(crate::policy::Policy::MustSave) {
                continue;
            }
            let mut changed = saved.clone();
            changed[id.index()] = !changed[id.index()];
            let Some((p, planned)) = scored(schedule, pg, &changed, model)? else { continue };
            let (new_peak, added) = (planned.predicted_peak() as u64, p.recompute_flops as f64 - flops as f64);
            // Any plan within the limit before one over it; among them, the fewest FLOPs.
            let score = if new_peak <= limit {
                (0, added)
            } else if new_peak < peak {
                (1, added.max(1.0) / (peak - new_peak).min(peak - limit) as f64)
            } else {
                continue;
            };
            if best.as_ref().is_none_or(|b| score.0 < b.0 .0 || (score.0 == b.0 .0 && score.1 < b.0 .1)) {
                best = Some((score, changed, p, planned));
            }
        }
        let Some((_, changed, p, planned)) = best else { return Ok(None) };
        saved = changed;
        peak = planned.predicted_peak() as u64;
        flops = p.recompute_flops;
        if peak <= limit {
            return Ok(Some((with_reasons(p, partition), planned)));
        }
        current = planned;
    }
    Ok(None)
}

/// The partition that keeps `saved` and its plan, where it keeps every rule.
fn scored<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    saved: &[bool],
    model: &CostModel,
) -> Result<Option<(Partition, Plan)>> {
    let ids: Vec<NodeId> = (0..pg.len()).filter(|&i| saved[i]).map(NodeId::from_index).collect();
    let evaluation = evaluate(pg, &ids)?;
    if !evaluation.broken.is_empty() {
        return Ok(None);
    }
    let plan = schedule.plan(&evaluation.partition, model)?;
    Ok(Some((evaluation.partition, plan)))
}

/// The forward values live on the device at the plan's first peak step.
fn live_at_peak(plan: &Plan, pg: &PGraph) -> Vec<NodeId> {
    let peak = plan.predicted_peak() as u64;
    let mut live = vec![false; pg.len()];
    let mut bytes = plan.resident_bytes() as u64;
    for step in plan.steps() {
        match *step {
            Step::Compute(id) | Step::Recompute(id) | Step::Fetch(id) => {
                live[id.index()] = true;
                bytes += pg.node(id).bytes;
                if bytes >= peak {
                    break;
                }
            }
            Step::Free(id) => {
                live[id.index()] = false;
                bytes = bytes.saturating_sub(pg.node(id).bytes);
            }
            Step::Alias(id) => live[id.index()] = true,
            Step::Offload(_) => {}
        }
    }
    (0..pg.len()).filter(|&i| live[i] && !pg.nodes[i].backward).map(NodeId::from_index).collect()
}

/// `repaired`'s decisions with `from`'s reasons where it decided the same, the search's own
/// where the repair changed it.
fn with_reasons(mut repaired: Partition, from: &Partition) -> Partition {
    for d in &mut repaired.decisions {
        d.reason = match from.decisions.iter().find(|o| o.node == d.node && o.action == d.action) {
            Some(o) => o.reason,
            None => Reason::Budget,
        };
    }
    repaired.strategy = from.strategy;
    repaired.warnings.clone_from(&from.warnings);
    repaired
}
