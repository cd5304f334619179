//! A plan the exact program chose that peaks a little over the limit, brought within it one
//! change at a time: the program's rows are a relaxation, so its plan may overshoot by a few
//! bytes where the optimum lies within them. Each change saves a value recomputed at the plan's
//! peak, or recomputes one saved and live there, or (where the search may offload) offloads one
//! saved and live there — whichever takes the most bytes off the peak per unit of cost added —
//! until the plan fits. The plan found is an upper bound on the least cost, the program's a lower
//! one: together they give the answer's gap without more rounds.

use crate::error::Result;
use crate::graph::NodeId;
use crate::partition::{check, evaluate, exposed_times, offloading, Choice, CostModel, PGraph, Partition, Reason};
use crate::plan::{Plan, Schedulable, Schedule, Step};
use crate::policy::Policy;
use std::time::Instant;

/// How good a change is: 0 within the limit (then its cost added), 1 over it (then cost added
/// per byte taken off the peak); less is better.
type Score = (u8, f64);

/// Changes tried before the repair gives up.
const CHANGES: usize = 24;

/// How the repair scores: whether it may offload, the cost model, each value's exposed seconds
/// if offloaded.
struct Scoring<'m> {
    offload: bool,
    model: &'m CostModel,
    exposed: Vec<f64>,
}

impl Scoring<'_> {
    /// The search's cost: recompute FLOPs, or with offloads, recompute plus exposed seconds.
    fn cost(&self, p: &Partition) -> f64 {
        if self.offload {
            p.cost(self.model)
        } else {
            p.recompute_flops as f64
        }
    }
}

/// A plan within `limit` made from `partition` (whose plan is `plan`) by the changes above, with
/// its partition; `None` where none was found by `deadline` or in [`CHANGES`] changes. With
/// `offload`, a change may offload a value, and cost is recompute plus exposed transfer seconds.
#[allow(clippy::too_many_arguments)]
pub(super) fn repair<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    partition: &Partition,
    plan: &Plan,
    limit: u64,
    offload: bool,
    model: &CostModel,
    deadline: Instant,
) -> Result<Option<(Partition, Plan)>> {
    let exposed = if offload { exposed_times(pg, model) } else { Vec::new() };
    let scoring = Scoring { offload, model, exposed };
    let forward =
        |per_node: &[bool]| -> Vec<bool> { (0..pg.len()).map(|i| per_node[i] && !pg.nodes[i].backward).collect() };
    let mut choice = Choice { at_hand: forward(&partition.saved), offloaded: forward(&partition.offloaded) };
    let mut peak = plan.predicted_peak() as u64;
    let mut cost = scoring.cost(partition);
    let mut current = plan.clone();
    for _ in 0..CHANGES {
        if Instant::now() >= deadline {
            return Ok(None);
        }
        // The best change: within the limit at the least cost, else the most bytes off the peak
        // per unit of cost added (bytes past the overshoot count for nothing).
        let mut best: Option<(Score, Choice, Partition, Plan)> = None;
        for changed in changes(&choice, &live_at_peak(&current, pg), pg, offload) {
            let Some((p, planned)) = scored(schedule, pg, &changed, &scoring)? else { continue };
            let (new_peak, added) = (planned.predicted_peak() as u64, scoring.cost(&p) - cost);
            // Any plan within the limit before one over it; among them, the least cost.
            let score = if new_peak <= limit {
                (0, added)
            } else if new_peak < peak {
                (1, added.max(f64::MIN_POSITIVE) / (peak - new_peak).min(peak - limit) as f64)
            } else {
                continue;
            };
            if best.as_ref().is_none_or(|b| score.0 < b.0 .0 || (score.0 == b.0 .0 && score.1 < b.0 .1)) {
                best = Some((score, changed, p, planned));
            }
        }
        let Some((_, changed, p, planned)) = best else { return Ok(None) };
        choice = changed;
        peak = planned.predicted_peak() as u64;
        cost = scoring.cost(&p);
        if peak <= limit {
            return Ok(Some((with_reasons(p, partition), planned)));
        }
        current = planned;
    }
    Ok(None)
}

/// The decisions one change away from `choice` at the values `live`: each saved or recomputed
/// instead, and where `offload`, each saved on the device offloaded. A must_save value stays
/// saved: the checker lets a must_save constant be made again (the same bits), but the user
/// asked for it kept.
fn changes(choice: &Choice, live: &[NodeId], pg: &PGraph, offload: bool) -> Vec<Choice> {
    let mut out = Vec::new();
    for &id in live {
        let (i, node) = (id.index(), pg.node(id));
        if node.backward || node.flags.resident || node.policy == Some(Policy::MustSave) {
            continue;
        }
        let mut flipped = choice.clone();
        flipped.at_hand[i] = !flipped.at_hand[i];
        flipped.offloaded[i] = false;
        out.push(flipped);
        if offload && choice.at_hand[i] && !choice.offloaded[i] {
            let mut off = choice.clone();
            off.offloaded[i] = true;
            out.push(off);
        }
    }
    out
}

/// The partition that makes `choice` and its plan, where it keeps every rule.
fn scored<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    choice: &Choice,
    scoring: &Scoring<'_>,
) -> Result<Option<(Partition, Plan)>> {
    let ids: Vec<NodeId> = (0..pg.len()).filter(|&i| choice.at_hand[i]).map(NodeId::from_index).collect();
    let evaluation = evaluate(pg, &ids)?;
    if !evaluation.broken.is_empty() {
        return Ok(None);
    }
    let mut partition = evaluation.partition;
    if choice.offloaded.iter().any(|&o| o) {
        partition = offloading(pg, partition, &choice.offloaded, &scoring.exposed);
        if check(pg, &partition).is_err() {
            return Ok(None);
        }
    }
    let plan = schedule.plan(&partition, scoring.model)?;
    Ok(Some((partition, plan)))
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
