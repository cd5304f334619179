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
mod time;
#[cfg(not(feature = "exact"))]
mod walk;
#[cfg(feature = "exact")]
mod watch;

pub use bound::{peak_lower_bound, PeakBound};
pub use time::SearchTime;

/// The relative gap to its bound at which the exact search stops: a plan this close to the least
/// recompute of the rows is as good as the rows can tell. An answer with a larger gap is one the
/// search's time ran out on (the report says more time may narrow it).
pub const STOPPING_GAP: f64 = 0.01;

/// The 2-layer Llama's joint document of docs/peak (520 nodes), which the exact search's unit
/// tests plan.
#[cfg(all(test, feature = "exact"))]
fn llama_document() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/peak/llama.joint.json");
    std::fs::read_to_string(path).expect("the Llama document")
}

use crate::error::{Error, Limit, Result};
use crate::partition::{CostModel, PGraph, Partition, Strategy};
use crate::plan::{Plan, Schedulable, Schedule};
#[cfg(feature = "exact")]
use crate::text::fmt_bytes;

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
    search(&Schedule::InOrder(joint), pg, Strategy::Peak(limit), model, SearchTime::DEFAULT)
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
/// `peak+offload=`), the exact search taking `time` (the walk without the `exact` feature takes
/// none).
pub(crate) fn search<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    strategy: Strategy,
    model: &CostModel,
    #[cfg_attr(not(feature = "exact"), allow(unused_variables))] time: SearchTime,
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
    return match exact::solve(schedule, pg, limit, asked.offload(), model, time.seconds())? {
        exact::Outcome::Found(found) => {
            let exact::Found { mut partition, plan, lower } = *found;
            partition.strategy = strategy;
            partition.optimality_gap = Some(gap(partition.cost(model), lower));
            Ok((partition, plan))
        }
        exact::Outcome::Infeasible(least) => Err(refuse(&asked, &least, true)),
        exact::Outcome::Unmet(least) => Err(refuse(&asked, &least, false)),
    };
    #[cfg(not(feature = "exact"))]
    walk::walk(schedule, pg, &asked, model)
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

/// The refusal of a limit no plan was found within, with what the search for the least peak a
/// plan reaches found (`least`, [`exact::Least`]). `proven`: whether the search proved the limit
/// out of reach; where it did not, it found no plan within it in its time.
#[cfg(feature = "exact")]
fn refuse(asked: &Asked, least: &exact::Least, proven: bool) -> Error {
    let limit = asked.limit;
    let (resident, lowest) = (least.best.1.resident_bytes(), least.upper());
    let lower = least.lower.max(if proven { limit.saturating_add(1) } else { 0 }).min(lowest);
    let why = if lower > limit && lower == lowest {
        format!("cannot be met: the least predicted peak of any plan is {lowest} bytes ({})", fmt_bytes(lowest))
    } else if lower > limit {
        format!(
            "cannot be met: no plan peaks below {lower} bytes; the lowest predicted peak found is {lowest} bytes ({})",
            fmt_bytes(lowest)
        )
    } else if lower > 0 {
        format!(
            "was not met: the search found no plan within it (none peaks below {lower} bytes, proven; the lowest \
             predicted peak found is {lowest} bytes, {})",
            fmt_bytes(lowest)
        )
    } else {
        // The least-peak search ran out of its share of the time before it proved anything.
        format!(
            "was not met: the search found no plan within it in its time (nothing proven of the least peak; the \
             lowest predicted peak found is {lowest} bytes, {}; more search time may find one or prove there is none)",
            fmt_bytes(lowest)
        )
    };
    Error::Infeasible {
        what: Limit::Peak,
        asked: limit,
        least: Some(lowest),
        message: format!(
            "{} ({}) {why}, with {resident} bytes of inputs and parameters",
            asked.strategy,
            fmt_bytes(limit)
        ),
    }
}
