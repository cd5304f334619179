//! `Strategy::Peak`'s exact search: the least recompute under the memory rows of the schedule
//! ([`super::rows`]), a 0-1 program HiGHS solves (the byte-budget program with the rows in place
//! of its one limit). The rows hold for every plan within the peak, so the program's optimum is
//! a lower bound on the least recompute of any such plan; its saved set is planned, and where
//! the plan peaks within the limit it is the optimum. Where it peaks over (a step the rows bound
//! loosely: values recomputed for another's recompute), that saved set is excluded and the
//! program solved again — a lower bound that only rises — for a few rounds.

use super::rows::{memory_rows, Row, Var};
use crate::error::{Error, Result};
use crate::partition::{partition_with_rows, CostModel, Extra, PGraph, Partition, Term};
use crate::plan::{Plan, Schedulable, Schedule};
use std::time::Instant;

/// Seconds the rounds may take together.
const SECONDS: f64 = 20.0;
/// Saved sets whose plans peak over the limit excluded before the program gives up.
const ROUNDS: usize = 64;

/// What the program found.
pub(super) enum Outcome {
    /// A plan within the limit, and a proven lower bound on the recompute FLOPs of every plan
    /// within it.
    Found(Box<Found>),
    /// No plan is within the limit: no saved set meets the rows but those whose plans were
    /// found over it.
    Infeasible,
    /// No plan within the limit found in the rounds: the lower bound proven on the way.
    Bound(f64),
}

/// A plan within the limit and the lower bound proven on the way.
pub(super) struct Found {
    pub(super) partition: Partition,
    pub(super) plan: Plan,
    /// Recompute FLOPs no plan within the limit goes below.
    pub(super) lower: f64,
}

/// The exact search of `pg` planned in `schedule`, under `limit` bytes.
pub(super) fn solve<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    limit: u64,
    model: &CostModel,
) -> Result<Outcome> {
    let rows = match schedule {
        Schedule::InOrder(g) => memory_rows(*g)?,
        Schedule::ForwardFirst(f) => memory_rows(f)?,
    };
    // A partition never keeps a view (its base stands for it): where the program's choice has
    // one at hand, the plan does not, so its saved bit counts for nothing.
    let term = |var: Var, on_device: bool| match var {
        Var::Saved(v) => {
            let id = schedule.graph_id(v);
            (!pg.node(id).flags.view).then_some(if on_device { Term::OnDevice(id) } else { Term::Saved(id) })
        }
        Var::Aux(a) => Some(Term::Aux(a)),
    };
    let mut extra = Extra { aux: rows.aux, ..Extra::default() };
    for Row { held, terms } in rows.rows {
        let Some(room) = limit.checked_sub(held) else { return Ok(Outcome::Infeasible) };
        let terms = terms.into_iter().filter_map(|(var, b)| Some((term(var, true)?, b as f64))).collect();
        extra.rows.push((terms, room as f64));
    }
    for (a, var) in rows.links {
        // var − a ≤ 0
        if let Some(t) = term(var, false) {
            extra.rows.push((vec![(t, 1.0), (Term::Aux(a), -1.0)], 0.0));
        }
    }
    let start = Instant::now();
    let mut lower = 0f64;
    for _ in 0..ROUNDS {
        extra.seconds = SECONDS - start.elapsed().as_secs_f64();
        if extra.seconds <= 0.0 {
            break;
        }
        let searched = match partition_with_rows(pg, &extra, model) {
            Ok(searched) => searched,
            // Every saved set left breaks a row, and those excluded were planned over the limit.
            Err(Error::Infeasible { .. }) => return Ok(Outcome::Infeasible),
            Err(e) => return Err(e),
        };
        let cost = searched.partition.recompute_flops as f64;
        lower = lower.max(searched.bound.unwrap_or(cost));
        let plan = schedule.plan(&searched.partition, model)?;
        if plan.predicted_peak() as u64 <= limit {
            return Ok(Outcome::Found(Box::new(Found { partition: searched.partition, plan, lower })));
        }
        let kept =
            searched.at_hand.ok_or_else(|| Error::internal("a search with rows recorded no choice to exclude"))?;
        extra.excluded.push(kept);
    }
    Ok(Outcome::Bound(lower))
}
