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

/// Changes tried before the repair gives up.
const CHANGES: usize = 24;
/// Values a change of the repair's path may be made at, at most.
const CANDIDATES: usize = 96;

/// How the repair scores: whether it may offload, the cost model, each value's exposed seconds
/// if offloaded.
pub(super) struct Scoring<'m> {
    offload: bool,
    model: &'m CostModel,
    exposed: Vec<f64>,
}

/// What `partition` keeps at hand and offloads of the forward values.
pub(super) fn choice_of(partition: &Partition, pg: &PGraph) -> Choice {
    let forward = |per_node: &[bool]| (0..pg.len()).map(|i| per_node[i] && !pg.nodes[i].backward).collect();
    Choice { at_hand: forward(&partition.saved), offloaded: forward(&partition.offloaded) }
}

impl<'m> Scoring<'m> {
    pub(super) fn new(pg: &PGraph, offload: bool, model: &'m CostModel) -> Scoring<'m> {
        // Every search needs them: a plain `peak=` plan offloads what is tagged `must_offload`.
        let exposed = exposed_times(pg, model);
        Scoring { offload, model, exposed }
    }
}

impl Scoring<'_> {
    /// The search's cost: recompute FLOPs, or with offloads, recompute plus exposed seconds.
    pub(super) fn cost(&self, p: &Partition) -> f64 {
        search_cost(p, self.offload, self.model)
    }
}

/// What the search minimises of `p`, whatever strategy made it (the min-cut's plan, a repair's,
/// the program's): recompute FLOPs, or where it may offload, recompute plus exposed transfer
/// seconds under `model` — the answer's [`Partition::cost`] once it names `peak+offload=`. (The
/// min-cut's plan costed by its own strategy is in FLOPs, and where it recomputes nothing but
/// offloads what is tagged, 0: a cutoff below the least cost, and an answer with a gap of 1.)
pub(super) fn search_cost(p: &Partition, offload: bool, model: &CostModel) -> f64 {
    if offload {
        model.compute_s(p.recompute_flops) + p.exposed_transfer_s
    } else {
        p.recompute_flops as f64
    }
}

/// A plan within `limit` made from `partition` (whose plan is `plan`) by the changes above, with
/// its partition; `None` where none was found by `deadline` or in [`CHANGES`] changes. With
/// `offload`, a change may offload a value, and cost is recompute plus exposed transfer seconds.
///
/// The path goes on past the first change that fits while a change still over the limit costs
/// less than the cheapest fit seen (a cheap step now may allow a cheap fit later), and the plan
/// found is then improved by [`descend`].
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
    let scoring = Scoring::new(pg, offload, model);
    let mut choice = choice_of(partition, pg);
    let mut peak = plan.predicted_peak() as u64;
    let mut current = plan.clone();
    let readers = forward_readers(pg);
    let mut cost = scoring.cost(partition);
    // The cheapest plan within the limit seen.
    let mut fitted: Option<Scored> = None;
    for _ in 0..CHANGES {
        if Instant::now() >= deadline {
            break;
        }
        // The change over the limit that takes the most bytes off the peak per unit of cost added
        // (bytes past the overshoot count for nothing).
        let mut over: Option<(f64, Scored)> = None;
        let mut at_peak = with_recomputing_readers(live_at_peak(&current, pg), &current, &readers, pg);
        // On a large graph every change is a plan of thousands of steps: the largest values
        // first, the rest left out.
        at_peak.sort_by_key(|&id| std::cmp::Reverse(pg.node(id).bytes));
        at_peak.truncate(CANDIDATES);
        for changed in changes(&choice, &at_peak, pg, offload) {
            let Some(next) = Scored::of(schedule, pg, changed, &scoring)? else { continue };
            let new_peak = next.peak();
            if new_peak <= limit {
                if fitted.as_ref().is_none_or(|f| next.cost < f.cost) {
                    fitted = Some(next);
                }
            } else if new_peak < peak {
                let added = next.cost - cost;
                let score = added.max(f64::MIN_POSITIVE) / (peak - new_peak).min(peak - limit) as f64;
                if over.as_ref().is_none_or(|(best, _)| score < *best) {
                    over = Some((score, next));
                }
            }
        }
        match over {
            Some((_, next)) if fitted.as_ref().is_none_or(|f| next.cost < f.cost) => {
                (peak, cost) = (next.peak(), next.cost);
                (choice, current) = (next.choice, next.plan);
            }
            _ => break,
        }
    }
    let Some(fitted) = fitted else { return Ok(None) };
    let Scored { partition: p, plan: planned, .. } = descend(schedule, pg, fitted, limit, &scoring, deadline)?;
    Ok(Some((with_reasons(p, partition), planned)))
}

/// `partition` (whose plan `plan` is within `limit`) improved by [`descend`] until `deadline`.
#[allow(clippy::too_many_arguments)]
pub(super) fn improve<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    partition: Partition,
    plan: Plan,
    limit: u64,
    offload: bool,
    model: &CostModel,
    deadline: Instant,
) -> Result<(Partition, Plan)> {
    let scoring = Scoring::new(pg, offload, model);
    let choice = choice_of(&partition, pg);
    let cost = scoring.cost(&partition);
    let from = Scored { choice, partition: partition.clone(), plan, cost };
    let Scored { partition: p, plan, cost: improved, .. } = descend(schedule, pg, from, limit, &scoring, deadline)?;
    Ok(if improved < cost { (with_reasons(p, &partition), plan) } else { (partition, plan) })
}

/// A choice, its partition and plan, and its cost.
struct Scored {
    choice: Choice,
    partition: Partition,
    plan: Plan,
    cost: f64,
}

impl Scored {
    /// The partition that makes `choice` and its plan, where it keeps every rule.
    fn of<S: Schedulable + ?Sized>(
        schedule: &Schedule<'_, S>,
        pg: &PGraph,
        choice: Choice,
        scoring: &Scoring<'_>,
    ) -> Result<Option<Scored>> {
        let Some((partition, plan)) = scored(schedule, pg, &choice, scoring)? else { return Ok(None) };
        let cost = scoring.cost(&partition);
        Ok(Some(Scored { choice, partition, plan, cost }))
    }

    fn peak(&self) -> u64 {
        self.plan.predicted_peak() as u64
    }
}

/// `from` improved one change at a time while a change lowers its cost within `limit`: each value
/// the plan recomputes kept instead, the most recompute first, every change that fits and costs
/// less taken, in passes over the values recomputed at each pass's start until a pass changes
/// nothing or `deadline` passes. (Going back to the first value after each change took 8 s to
/// descend from the 12-layer GPT's min-cut plan at 5.3 MB: the values before it, over the
/// limit, planned again each time.)
fn descend<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    mut from: Scored,
    limit: u64,
    scoring: &Scoring<'_>,
    deadline: Instant,
) -> Result<Scored> {
    loop {
        let mut recomputed: Vec<NodeId> = from
            .plan
            .recomputed()
            .iter()
            .copied()
            .filter(|&id| {
                let node = pg.node(id);
                !node.backward && !node.flags.resident && !from.choice.at_hand[id.index()]
            })
            .collect();
        recomputed.sort_by_key(|&id| std::cmp::Reverse(pg.node(id).flops));
        let mut changed_any = false;
        for id in recomputed {
            if Instant::now() >= deadline {
                return Ok(from);
            }
            // A change taken before may have made this value one the plan no longer recomputes.
            if from.choice.at_hand[id.index()] || !from.plan.recomputed().contains(&id) {
                continue;
            }
            let mut changed = from.choice.clone();
            changed.at_hand[id.index()] = true;
            let Some(next) = Scored::of(schedule, pg, changed, scoring)? else { continue };
            if next.peak() <= limit && next.cost < from.cost {
                from = next;
                changed_any = true;
            }
        }
        if !changed_any {
            return Ok(from);
        }
    }
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
pub(super) fn scored<S: Schedulable + ?Sized>(
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

/// Per forward value, the forward nodes that read it.
fn forward_readers(pg: &PGraph) -> Vec<Vec<NodeId>> {
    let mut readers = vec![Vec::new(); pg.len()];
    for (i, node) in pg.nodes.iter().enumerate().filter(|(_, n)| !n.backward) {
        for &x in &node.inputs {
            readers[x.index()].push(NodeId::from_index(i));
        }
    }
    readers
}

/// `live` and the values whose recomputes hold its recomputed values there: a value the plan
/// recomputes for another's recompute is held from that recompute to its own last reader, so
/// keeping the other instead may take it off the peak although the other is not live there.
fn with_recomputing_readers(mut live: Vec<NodeId>, plan: &Plan, readers: &[Vec<NodeId>], pg: &PGraph) -> Vec<NodeId> {
    let mut recomputed = vec![false; pg.len()];
    for &id in plan.recomputed() {
        recomputed[id.index()] = true;
    }
    let mut listed = vec![false; pg.len()];
    for &id in &live {
        listed[id.index()] = true;
    }
    for k in 0..live.len() {
        let x = live[k];
        if !recomputed[x.index()] {
            continue;
        }
        for &w in &readers[x.index()] {
            if recomputed[w.index()] && !listed[w.index()] {
                listed[w.index()] = true;
                live.push(w);
            }
        }
    }
    live
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
pub(super) fn with_reasons(mut repaired: Partition, from: &Partition) -> Partition {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::{evaluate, partition_with, Strategy};
    use crate::pipeline::Problem;
    use std::time::Duration;

    /// The descent from a plan within the limit ends where no single value its plan recomputes,
    /// kept instead, fits the limit for less — each such saved set completed by `evaluate` and
    /// planned afresh, not scored by the descent — and never costs more than where it began. From
    /// the min-cut's plan of the 2-layer Llama of docs/peak, at its own peak and 5, 10 and 20 %
    /// above it.
    #[test]
    fn the_descent_ends_where_no_value_kept_instead_fits_for_less() {
        let text = crate::peak::llama_document();
        let problem = Problem::read(&text).expect("a joint document");
        let (pg, schedule, model) = (problem.graph(), problem.schedule(), CostModel::CPU);
        let mincut = partition_with(pg, Strategy::MinCut, &model).expect("the min-cut's plan");
        let plan = schedule.plan(&mincut, &model).expect("a plan");
        let peak = plan.predicted_peak() as u64;
        let mut improved = 0;
        for limit in [peak, peak + peak / 20, peak + peak / 10, peak + peak / 5] {
            let deadline = Instant::now() + Duration::from_secs(120);
            let (p, planned) =
                improve(&schedule, pg, mincut.clone(), plan.clone(), limit, false, &model, deadline).expect("improved");
            assert!(planned.predicted_peak() as u64 <= limit, "peak={limit}");
            assert!(p.recompute_flops <= mincut.recompute_flops, "peak={limit}: above the min-cut's");
            improved += usize::from(p.recompute_flops < mincut.recompute_flops);
            let saved: Vec<NodeId> =
                (0..pg.len()).filter(|&i| p.saved[i] && !pg.nodes[i].backward).map(NodeId::from_index).collect();
            for &v in planned.recomputed().iter().filter(|&&v| !pg.node(v).backward) {
                let evaluation = evaluate(pg, &[saved.as_slice(), &[v]].concat()).expect("an evaluation");
                if !evaluation.broken.is_empty() {
                    continue;
                }
                let other = schedule.plan(&evaluation.partition, &model).expect("a plan");
                let (other_peak, other_flops) = (other.predicted_peak() as u64, evaluation.partition.recompute_flops);
                assert!(
                    other_peak > limit || other_flops >= p.recompute_flops,
                    "peak={limit}: keeping {v:?} too fits ({other_peak} B) for {other_flops} FLOPs against {}",
                    p.recompute_flops
                );
            }
        }
        assert!(improved >= 2, "the descent improved the min-cut's plan at {improved} of 4 limits");
    }
}
