//! The peak search without the `exact` feature: the exact byte-budget plans, walked down from
//! the least recompute (see [`super::partition_for_peak`]).

use super::Asked;
use crate::error::{Error, Limit, Result};
use crate::partition::{partition_with, Budget, CostModel, PGraph, Partition, Strategy};
use crate::plan::{Plan, Schedulable, Schedule};
use crate::text::fmt_bytes;

/// Plans of the family walked through one by one, from the least recompute down, before the
/// search falls back to a sweep and a bisection.
const WALK: usize = 400;

/// Budgets swept (as fractions `k / SWEEP`) past the walk.
const SWEEP: usize = 20;

/// A partition and its plan.
struct Candidate {
    partition: Partition,
    plan: Plan,
}

impl Candidate {
    fn peak(&self) -> u64 {
        self.plan.predicted_peak() as u64
    }
}

/// Plans of a few strategies, each with its partition.
fn candidate<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    strategy: Strategy,
    model: &CostModel,
) -> Result<Candidate> {
    let partition = partition_with(pg, strategy, model)?;
    let plan = schedule.plan(&partition, model)?;
    Ok(Candidate { partition, plan })
}

/// The plan of least recompute within `limit` among the exact byte-budget plans (see
/// [`partition_for_peak`]'s walk), walking [`WALK`] plans before a sweep of `SWEEP + 1` budgets.
pub(super) fn walk<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    asked: &Asked,
    model: &CostModel,
) -> Result<(Partition, Plan)> {
    let (walk_len, sweep) = (WALK, SWEEP);
    let limit = asked.limit;
    let plan = |strategy: Strategy| candidate(schedule, pg, asked.with_offload(strategy), model);
    let finish = |c: Candidate| {
        let mut partition = c.partition;
        partition.strategy = asked.strategy;
        Ok((partition, c.plan))
    };
    // Walk the family down from the least recompute: each plan's own saved bytes less one is
    // the next smaller budget, so every distinct plan is met once, recompute never falling; the
    // first plan that fits is the least-recompute plan of the family that fits.
    let mut budget = u64::MAX;
    let mut lowest: Option<Candidate> = None;
    let mut exhausted = false;
    for _ in 0..walk_len {
        let c = match plan(Strategy::Budget(Budget::Bytes(budget))) {
            Ok(c) => c,
            // Below the fewest bytes any plan keeps: the family ends here. Anything else (a
            // conflict, which no budget lifts, or a failure) is the search's error.
            Err(Error::Infeasible { .. }) if lowest.is_some() => {
                exhausted = true;
                break;
            }
            Err(e) => return Err(e),
        };
        if c.peak() <= limit {
            return finish(c);
        }
        let next = c.partition.saved_bytes.checked_sub(1);
        if lowest.as_ref().is_none_or(|l| c.peak() < l.peak()) {
            lowest = Some(c);
        }
        match next {
            Some(b) => budget = b,
            None => {
                exhausted = true;
                break;
            }
        }
    }
    let unreachable = |lowest: &Candidate| Error::Infeasible {
        what: Limit::Peak,
        asked: limit,
        least: Some(lowest.peak()),
        message: format!(
            "{} ({}) cannot be met: the smallest predicted peak reached is {} bytes ({}, under {}), of which \
             inputs and parameters are {} bytes",
            asked.strategy,
            fmt_bytes(limit),
            lowest.peak(),
            fmt_bytes(lowest.peak()),
            lowest.partition.strategy,
            lowest.plan.resident_bytes()
        ),
    };
    if exhausted {
        // Every plan of the family was met: the smallest peak among them is the least reachable.
        let mincut = plan(Strategy::MinCut)?;
        let lowest = lowest.expect("at least one plan");
        return if mincut.peak() <= limit {
            finish(mincut)
        } else {
            Err(unreachable(if mincut.peak() < lowest.peak() { &mincut } else { &lowest }))
        };
    }
    // A long family: a sweep of it (and the min-cut, the other guess at a low peak), then a
    // bisection upwards from the best plan that fits.
    let top = plan(Strategy::Budget(Budget::Bytes(budget)))?;
    let mut swept = vec![plan(Strategy::MinCut)?];
    for k in 0..=sweep {
        swept.push(plan(Strategy::Budget(Budget::Fraction(k as f64 / sweep as f64)))?);
    }
    swept.extend(lowest);
    let lowest = swept.iter().min_by_key(|c| c.peak()).expect("the sweep is not empty");
    if lowest.peak() > limit {
        return Err(unreachable(lowest));
    }
    let fits = |c: &Candidate| c.peak() <= limit;
    let mut best = swept
        .into_iter()
        .filter(fits)
        .min_by(|a, b| a.partition.cost(model).total_cmp(&b.partition.cost(model)).then(a.peak().cmp(&b.peak())))
        .expect("the lowest peak fits");
    let (mut lo, mut hi) = (best.partition.saved_bytes, top.partition.saved_bytes.max(best.partition.saved_bytes));
    while hi > lo + 1 {
        let mid = lo + (hi - lo) / 2;
        let c = plan(Strategy::Budget(Budget::Bytes(mid)))?;
        if fits(&c) {
            lo = mid;
            if c.partition.cost(model) <= best.partition.cost(model) {
                best = c;
            }
        } else {
            // Every budget from this plan's own bytes to `mid` gives this plan.
            hi = c.partition.saved_bytes.max(lo + 1);
        }
    }
    finish(best)
}
