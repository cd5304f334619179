//! `Strategy::Peak`: a peak-memory budget for a model. The plan's predicted peak — which the CPU
//! backend's measured peak equals — is a property of the schedule, not of the saved set alone.
//! With the `exact` feature (the default) a 0-1 program over the schedule's memory rows finds
//! the least recompute within the limit ([`exact`]), and a limit no plan meets is refused with
//! the least peak a plan reaches, which a second program over the same rows searches for.
//! Without it, the search walks the exact byte-budget plans: the more a plan may save, the less
//! it recomputes; the walk takes the largest byte budget whose plan peaks within the limit. A
//! limit below what every plan holds ([`peak_lower_bound`]) is refused before either search.

mod bound;
#[cfg(feature = "exact")]
mod exact;
#[cfg(feature = "exact")]
mod lazy;
#[cfg(feature = "exact")]
mod repair;
#[cfg(feature = "exact")]
mod rows;

pub use bound::{peak_lower_bound, PeakBound};

use crate::error::{Error, Limit, Result};
#[cfg(not(feature = "exact"))]
use crate::partition::{partition_with, Budget};
use crate::partition::{CostModel, PGraph, Partition, Strategy};
use crate::plan::{Plan, Schedulable, Schedule};
use crate::text::fmt_bytes;

/// Plans of the family walked through one by one, from the least recompute down, before the
/// search falls back to a sweep and a bisection.
#[cfg(not(feature = "exact"))]
const WALK: usize = 400;
/// How long a refusal may search for the least peak a plan reaches.
#[cfg(feature = "exact")]
const LEAST_SEARCH: std::time::Duration = std::time::Duration::from_secs(10);
/// Budgets swept (as fractions `k / SWEEP`) by the fallback.
#[cfg(not(feature = "exact"))]
const SWEEP: usize = 20;

/// A partition and its plan.
#[cfg(not(feature = "exact"))]
struct Candidate {
    partition: Partition,
    plan: Plan,
}

#[cfg(not(feature = "exact"))]
impl Candidate {
    fn peak(&self) -> u64 {
        self.plan.predicted_peak() as u64
    }
}

/// The plan of least recompute whose predicted peak is at most `limit` bytes, for `pg` (the
/// partition graph of `joint`, which plans it: a [`crate::JointGraph`], or `pg` itself, which
/// plans as its joint graph does); an error giving the least peak a plan reaches (or the bounds
/// the search proved on it) when none fits, or, without searching, the lower bound on every
/// plan's peak ([`peak_lower_bound`]) when `limit` is below it. The partition's strategy reads
/// `peak=limit`.
///
/// With the `exact` feature the exact 0-1 search answers, with its optimality gap. Without it,
/// the exact plans of the byte budgets, a family ordered by the bytes they may save (a larger
/// budget recomputes no more), are walked down from the least recompute, plan by plan (a plan's
/// own saved bytes less one is the next budget), so the first plan that fits is the
/// least-recompute plan of the family within the limit, and when none fits the smallest peak of
/// the whole family is known. Peaks are not monotone in the budget, which is why every plan is
/// visited. Past 400 plans the walk falls back to a sweep and a bisection, the best plan it
/// visits.
pub fn partition_for_peak(
    joint: &(impl Schedulable + ?Sized),
    pg: &PGraph,
    limit: u64,
    model: &CostModel,
) -> Result<(Partition, Plan)> {
    search(&Schedule::InOrder(joint), pg, Strategy::Peak(limit), model)
}

/// The refusal of `asked`'s limit where it is below [`peak_lower_bound`] of `graph`.
fn below_bound(graph: &(impl Schedulable + ?Sized), asked: &Asked) -> Result<Option<Error>> {
    let (bound, limit) = (peak_lower_bound(graph)?, asked.limit);
    Ok((limit < bound.bytes).then(|| {
        let message = bound.explain(asked.strategy, graph);
        Error::Infeasible { what: Limit::Peak, asked: limit, least: None, message }
    }))
}

/// [`partition_for_peak`] over a [`Schedule`] of `pg`, for `strategy` (`peak=` or
/// `peak+offload=`).
pub(crate) fn search<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    strategy: Strategy,
    model: &CostModel,
) -> Result<(Partition, Plan)> {
    let Some(limit) = strategy.peak() else {
        return Err(Error::internal(format!("the peak search asked for {strategy}")));
    };
    let asked = Asked { limit, strategy };
    // Found over the graph in its planning order, whose errors name the graph's own nodes.
    let below = match schedule {
        Schedule::InOrder(g) => below_bound(*g, &asked)?,
        Schedule::ForwardFirst(f) => below_bound(f, &asked)?,
    };
    if let Some(refusal) = below {
        return Err(refusal);
    }
    #[cfg(feature = "exact")]
    return match exact::solve(schedule, pg, limit, asked.offload(), model)? {
        exact::Outcome::Found(found) => {
            let exact::Found { mut partition, plan, lower } = *found;
            partition.strategy = strategy;
            partition.optimality_gap = Some(gap(partition.cost(model), lower));
            Ok((partition, plan))
        }
        exact::Outcome::Infeasible(least) => Err(refuse(schedule, pg, &asked, model, least.map(|l| *l), true)?),
        exact::Outcome::Unmet(least) => Err(refuse(schedule, pg, &asked, model, Some(*least), false)?),
    };
    #[cfg(not(feature = "exact"))]
    walk(schedule, pg, &asked, model)
}

/// What the search was asked: `peak=` or `peak+offload=`, and its device limit.
struct Asked {
    limit: u64,
    /// The strategy the answer names.
    strategy: Strategy,
}

impl Asked {
    /// Whether the search may offload (`peak+offload=`).
    fn offload(&self) -> bool {
        self.strategy.chooses_offload()
    }

    /// `strategy` with the offload choice as asked.
    #[cfg(not(feature = "exact"))]
    fn with_offload(&self, strategy: Strategy) -> Strategy {
        strategy.with_offload(self.offload())
    }
}

/// `(cost − lower) / cost`, 0 for a cost of 0.
#[cfg(feature = "exact")]
fn gap(cost: f64, lower: f64) -> f64 {
    if cost <= 0.0 {
        0.0
    } else {
        ((cost - lower) / cost).clamp(0.0, 1.0)
    }
}

/// Plans of a few strategies, each with its partition.
#[cfg(not(feature = "exact"))]
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

/// The refusal of a limit no plan was found within, with the least peak a plan reaches: the
/// exact program's least peak ([`exact::least_peak`], from the min-cut's plan) — `least`, where
/// the search that gave up on the limit found it, else searched for as long as
/// [`LEAST_SEARCH`]. `proven`: whether the program proved the limit out of reach; where it did
/// not, the search found no plan within it in its time.
#[cfg(feature = "exact")]
fn refuse<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    asked: &Asked,
    model: &CostModel,
    least: Option<exact::Least>,
    proven: bool,
) -> Result<Error> {
    let limit = asked.limit;
    let least = match least {
        Some(least) => least,
        None => exact::least_peak(schedule, pg, asked.offload(), model, LEAST_SEARCH.as_secs_f64())?,
    };
    let resident = least.best.as_ref().map_or(0, |(_, plan)| plan.resident_bytes());
    let lowest = least.upper().unwrap_or(u64::MAX);
    let lower = least.lower.max(if proven { limit + 1 } else { 0 }).min(lowest);
    let why = if lower > limit && lower == lowest {
        format!("cannot be met: the least predicted peak of any plan is {lowest} bytes ({})", fmt_bytes(lowest))
    } else if lower > limit {
        format!(
            "cannot be met: no plan peaks below {lower} bytes; the lowest predicted peak found is {lowest} bytes ({})",
            fmt_bytes(lowest)
        )
    } else {
        format!(
            "was not met: the search found no plan within it (none peaks below {lower} bytes, proven; the lowest \
             predicted peak found is {lowest} bytes, {})",
            fmt_bytes(lowest)
        )
    };
    Ok(Error::Infeasible {
        what: Limit::Peak,
        asked: limit,
        least: Some(lowest),
        message: format!(
            "{} ({}) {why}, with {resident} bytes of inputs and parameters",
            asked.strategy,
            fmt_bytes(limit)
        ),
    })
}

/// The plan of least recompute within `limit` among the exact byte-budget plans (see
/// [`partition_for_peak`]'s walk), walking [`WALK`] plans before a sweep of `SWEEP + 1` budgets.
#[cfg(not(feature = "exact"))]
fn walk<S: Schedulable + ?Sized>(
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
