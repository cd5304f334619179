//! `Strategy::Peak`'s exact search: the least recompute under the memory rows of the schedule
//! ([`super::rows`]), a 0-1 program HiGHS solves (the byte-budget program with the rows in place
//! of its one limit). The rows hold for every plan within the peak, so the program's optimum is
//! a lower bound on the least recompute of any such plan; its saved set is planned, and where
//! the plan peaks within the limit it is the answer (within the program's stopping gap). Where it
//! peaks over, the rows made on demand that the plan breaks ([`super::lazy`]) are added — or,
//! where it breaks none, that saved set is excluded — and the program solved again (a lower bound
//! that only rises), for a few rounds.
//!
//! Before the rounds, the min-cut's plan, or where it peaks over the limit the plan the least-peak
//! search finds ([`least_peak`]: the same rows with the peak a column the program minimises), is
//! the first plan within the limit; that search also refuses a limit below every plan's peak. A
//! plan over the limit is repaired ([`super::repair`]) into one within it, an upper bound. The
//! best plan's cost less the stopping gap is the next round's cutoff: the program looks for
//! nothing costing more, so a round that finds nothing proves that plan within the gap, and one
//! that runs out of time still raises the bound. A first round that stops short of the gap with a
//! plan within the limit (a large graph's program in its time) has that plan improved one change
//! at a time before it is the answer.
//!
//! Each round's program is watched ([`super::watch`]): every choice it finds on its way is
//! planned, the cheapest within the limit is a plan like the repaired ones, and the program stops
//! once its bound is within the gap of the best plan held.

use super::lazy::Lazy;
use super::repair::{improve, repair, search_cost, with_reasons};
use super::rows::{self, Link, Row, Rows, Var};
use super::watch::Watch;
use super::STOPPING_GAP as GAP;
use crate::error::{Error, Result};
use crate::partition::{partition_with, partition_with_rows, CostModel, Extra, PGraph, Partition, Strategy, Term};
use crate::plan::{Plan, Schedulable, Schedule};
use std::time::{Duration, Instant};

/// Seconds below which no round starts: too short for HiGHS to find a plan.
const ROUND_LEAST: f64 = 0.5;
/// Seconds the repair of a round's plan may take at least, even past the search's time (without a
/// repaired plan the rounds have no plan within the limit to go on from), and the descent from
/// the best plan where the rounds end short of the gap at most.
const REPAIR_SECONDS: f64 = 3.0;
/// Seconds the repair of the min-cut's plan, where it peaks over the limit, may take at most (a
/// tenth of the search's time where less).
const FIRST_REPAIR: f64 = 2.0;
/// Rounds of the program before it gives up: each adds the rows a plan over the limit breaks,
/// or excludes its saved set.
const ROUNDS: usize = 64;
/// Rows made on demand added in one round at most.
const BURSTS: usize = 2;
/// The share of the rounds' seconds the least-peak search before them may take.
const LEAST_SHARE: f64 = 0.3;
/// The relative distance between the least peak's bounds at which its search stops.
const LEAST_GAP: f64 = 0.005;
/// Seconds the least-peak search for a limit may go on narrowing its bounds once it proves the
/// limit out of reach.
const REFINE: f64 = 0.5;
/// Seconds the least-peak search may take where a memory row alone proves the limit out of
/// reach (it stops sooner: see [`least_peak`]), at most the search's time.
const LEAST_SEARCH: f64 = 10.0;

/// What the program found.
pub(super) enum Outcome {
    /// A plan within the limit, and a proven lower bound on the recompute FLOPs of every plan
    /// within it.
    Found(Box<Found>),
    /// No plan is within the limit: a row is over it whatever is saved, no saved set meets the
    /// rows but those whose plans were found over it, or the least peak the rows allow is above
    /// it — with the search for the least peak.
    Infeasible(Box<Least>),
    /// No plan within the limit found in the rounds, nor by the search for the least peak,
    /// which did not prove the limit out of reach either.
    Unmet(Box<Least>),
}

/// A plan within the limit and the lower bound proven on the way.
pub(super) struct Found {
    pub(super) partition: Partition,
    pub(super) plan: Plan,
    /// The cost no plan within the limit goes below ([`Partition::cost`]'s units).
    pub(super) lower: f64,
}

/// The exact search of `pg` planned in `schedule`, under `limit` bytes on the device; with
/// `offload`, the program chooses offloads too, and its cost is recompute plus exposed transfer
/// seconds (the rows count an offloaded value off the device between the passes). The rounds
/// take `seconds` together, the least-peak search before them a share of it.
pub(super) fn solve<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    limit: u64,
    offload: bool,
    model: &CostModel,
    seconds: f64,
) -> Result<Outcome> {
    let asked = Asked { limit, offload, model, seconds };
    match schedule {
        Schedule::InOrder(g) => solve_rows(&rows::Schedule::of(*g)?, schedule, pg, &asked),
        Schedule::ForwardFirst(f) => solve_rows(&rows::Schedule::of(f)?, schedule, pg, &asked),
    }
}

/// What the search was asked: the device limit, whether it may offload, the cost model, the
/// seconds its rounds may take.
struct Asked<'m> {
    limit: u64,
    offload: bool,
    model: &'m CostModel,
    seconds: f64,
}

fn solve_rows<G: Schedulable + ?Sized, S: Schedulable + ?Sized>(
    rows: &rows::Schedule<'_, G>,
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    asked: &Asked<'_>,
) -> Result<Outcome> {
    let Asked { limit, offload, model, seconds } = *asked;
    let cost = |p: &Partition| search_cost(p, offload, model);
    let watch = Watch::new(schedule, pg, limit, offload, model);
    let mut extra = Extra { gap: GAP, watch: Some(&watch), ..Extra::default() };
    if !add(&mut extra, rows.rows(), schedule, pg, Room::Bytes(limit)) {
        // A row over the limit whatever is saved: refused, with the least peak.
        let least = least_peak(
            rows,
            schedule,
            pg,
            offload,
            model,
            LEAST_SEARCH.min(seconds),
            min_cut(schedule, pg, model)?,
            limit,
        )?;
        return Ok(Outcome::Infeasible(Box::new(least)));
    }
    let start = Instant::now();
    // A first plan within the limit, whose cost less the gap is the first round's cutoff: the
    // min-cut's (a low peak, found in milliseconds); below its peak, the min-cut's repaired (a
    // limit a little below it is met at little more recompute, where the least-peak search's
    // plan, the least peak at any recompute, would be the fallback: on the 12-layer GPT 768 B
    // below the min-cut's peak, 11 773 952 FLOPs in 20 s against 3 438 592); where the repair
    // finds none, the least-peak search's, which runs until it finds one — and refuses a limit
    // below every plan's peak in the rounds that prove it, where rounds of the cost would go on
    // for the whole time and prove nothing.
    let mincut = min_cut(schedule, pg, model)?;
    // The best plan within the limit known; `least`, the least-peak search where none is.
    let first_repair = Instant::now() + Duration::from_secs_f64(FIRST_REPAIR.min(seconds * 0.1));
    let (mut best, least) = if mincut.1.predicted_peak() as u64 <= limit {
        (Some(mincut), None)
    } else if let Some(repaired) = repair(schedule, pg, &mincut.0, &mincut.1, limit, offload, model, first_repair)? {
        (Some(repaired), None)
    } else {
        let least = least_peak(rows, schedule, pg, offload, model, seconds * LEAST_SHARE, mincut, limit)?;
        if least.lower > limit {
            return Ok(Outcome::Infeasible(Box::new(least)));
        }
        if least.upper() <= limit {
            (Some(least.best), None)
        } else {
            (None, Some(Box::new(least)))
        }
    };
    extra.cutoff = best.as_ref().map(|b| cost(&b.0) * (1.0 - GAP));
    let mut lower = 0f64;
    // The rows made on demand so far.
    let mut made = Vec::new();
    for _ in 0..ROUNDS {
        let left = seconds - start.elapsed().as_secs_f64();
        if left <= ROUND_LEAST {
            break;
        }
        // Each round may take all the time left: a round stops as soon as its program is solved
        // to the gap, and one that runs out of time still hands on its bound and its best
        // choice. (Half the time left for the rounds after the first, as before the eighth
        // session, gave the same answers at 20 s with gaps up to 0.6 points larger at three
        // limits, and in 8 s cost the Llama's 5.75 MB its second round: 6.74 % against 0.85 %.)
        extra.seconds = left;
        watch.holding(best.as_ref().map(|b| cost(&b.0)));
        // The cutoff the program runs under: the watch may lower `extra.cutoff` below its answer
        // (where the answer is itself the plan the watch found).
        let cutoff = extra.cutoff;
        let searched = partition_with_rows(pg, &extra, model, offload);
        // A plan within the limit the program passed on its way, with the reasons the search
        // gives its own decisions.
        if let Some(mut found) = watch.take() {
            match (&searched, &best) {
                (Ok(s), _) => found.0 = with_reasons(found.0, &s.partition),
                (Err(_), Some(b)) => found.0 = with_reasons(found.0, &b.0),
                (Err(_), None) => {}
            }
            if best.as_ref().is_none_or(|b| cost(&found.0) < cost(&b.0)) {
                best = Some(found);
                extra.cutoff = best.as_ref().map(|b| cost(&b.0) * (1.0 - GAP));
            }
        }
        let searched = match searched {
            Ok(searched) => searched,
            // Below the cutoff, nothing: the best plan is within the stopping gap.
            Err(Error::Infeasible { .. }) if extra.cutoff.is_some() => {
                let (partition, plan) = best.ok_or_else(|| Error::internal("a cutoff without a plan"))?;
                let lower = lower.max(extra.cutoff.unwrap_or(0.0));
                return Ok(Outcome::Found(Box::new(Found { partition, plan, lower })));
            }
            // Every saved set left breaks a row, and those excluded were planned over the limit.
            Err(Error::Infeasible { .. }) => return out_of_rows(best, least, lower),
            Err(e) => return Err(e),
        };
        // The rows only grow, so every answer of the program costs at least the bound proven
        // before, and at most the cutoff: one that does not was not the program's (it found
        // nothing in its time, and the eviction path or the plan that recomputes all it may
        // answered for it). The best plan stands, with the bound proven so far.
        let answer = cost(&searched.partition);
        if cutoff.is_some_and(|c| answer > c) || answer < lower * (1.0 - 1e-6) {
            if cutoff.is_some() {
                // Its bound holds: the program stopped below the cutoff with it, or (no bound) it
                // answered its own optimum just above the cutoff (HiGHS's tolerance on the
                // offload program's continuous objective), a bound as good.
                lower = lower.max(searched.bound.unwrap_or(answer));
            }
            break;
        }
        lower = lower.max(searched.bound.unwrap_or(answer));
        let plan = schedule.plan(&searched.partition, model)?;
        if plan.predicted_peak() as u64 <= limit {
            let better = |b: &(Partition, Plan)| cost(&b.0) < cost(&searched.partition);
            let (mut partition, mut plan) = best.filter(better).unwrap_or((searched.partition, plan));
            if cost(&partition) * (1.0 - GAP) > lower {
                // Stopped short of the gap (a large program in its time): improved one change
                // at a time.
                let deadline = Instant::now() + Duration::from_secs_f64(REPAIR_SECONDS);
                (partition, plan) = improve(schedule, pg, partition, plan, limit, offload, model, deadline)?;
            }
            return Ok(Outcome::Found(Box::new(Found { partition, plan, lower })));
        }
        // The plan repaired: where it is within the stopping gap of the bound, it is the answer;
        // else it is kept for when the rounds run out.
        let deadline =
            (start + Duration::from_secs_f64(seconds)).max(Instant::now() + Duration::from_secs_f64(REPAIR_SECONDS));
        if let Some(repaired) = repair(schedule, pg, &searched.partition, &plan, limit, offload, model, deadline)? {
            if best.as_ref().is_none_or(|b| cost(&repaired.0) < cost(&b.0)) {
                best = Some(repaired);
            }
        }
        if let Some((partition, plan)) = best.take_if(|b| cost(&b.0) * (1.0 - GAP) <= lower) {
            return Ok(Outcome::Found(Box::new(Found { partition, plan, lower })));
        }
        // The program need look for nothing the best plan is within the gap of.
        extra.cutoff = best.as_ref().map(|b| cost(&b.0) * (1.0 - GAP));
        // The rows made on demand that the plan breaks; where it breaks none of them, its choice
        // is excluded.
        let saved = rows.saved_by(schedule, &searched.partition);
        let broken: Vec<Lazy> =
            rows.broken(&saved, limit).into_iter().filter(|b| !made.contains(b)).take(BURSTS).collect();
        if broken.is_empty() {
            let kept =
                searched.choice.ok_or_else(|| Error::internal("a search with rows recorded no choice to exclude"))?;
            extra.excluded.push(kept);
        }
        for &which in &broken {
            made.push(which);
            let row = rows.lazy_row(which, &saved, extra.aux);
            if !add(&mut extra, row, schedule, pg, Room::Bytes(limit)) {
                return out_of_rows(best, least, lower);
            }
        }
    }
    match (best, least) {
        (Some((partition, plan)), _) => {
            // The rounds ended short of the gap: the best plan — the min-cut's, the least-peak
            // search's or one the watch kept, which no descent has improved — one change at a
            // time (0.25 s from the 12-layer GPT's min-cut plan at 5.3 MB: 4 199 875 FLOPs to
            // 2 914 304, where PyTorch's budget 0.7 recomputes 4 104 386 at that peak).
            let deadline = Instant::now() + Duration::from_secs_f64(REPAIR_SECONDS);
            let (partition, plan) = improve(schedule, pg, partition, plan, limit, offload, model, deadline)?;
            Ok(Outcome::Found(Box::new(Found { partition, plan, lower })))
        }
        // No plan within the limit is known only where the least-peak search ran.
        (None, Some(least)) => Ok(Outcome::Unmet(least)),
        (None, None) => Err(Error::internal("the peak search's rounds lost the plan they started from")),
    }
}

/// The outcome where the rows proved no saved set left within the limit: infeasible, unless a
/// plan within it is known (which meets every row, so this is for safety's sake: the rows made
/// on demand hold for every plan). Where none is, the least-peak search ran (`least`).
fn out_of_rows(best: Option<(Partition, Plan)>, least: Option<Box<Least>>, lower: f64) -> Result<Outcome> {
    match (best, least) {
        (Some((partition, plan)), _) => {
            debug_assert!(false, "the rows excluded a plan within the limit");
            Ok(Outcome::Found(Box::new(Found { partition, plan, lower })))
        }
        (None, Some(least)) => Ok(Outcome::Infeasible(least)),
        (None, None) => Err(Error::internal("the peak search's rounds lost the plan they started from")),
    }
}

/// The least predicted peak of any plan, as far as the rows tell it in the time given.
pub(super) struct Least {
    /// No plan peaks below this many bytes.
    pub(super) lower: u64,
    /// The plan of lowest peak found, with its partition (the min-cut's, where the search found
    /// none lower).
    pub(super) best: (Partition, Plan),
}

impl Least {
    /// The predicted peak of the best plan.
    pub(super) fn upper(&self) -> u64 {
        self.best.1.predicted_peak() as u64
    }
}

/// The min-cut's partition of `pg`, and its plan.
fn min_cut<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    model: &CostModel,
) -> Result<(Partition, Plan)> {
    let partition = partition_with(pg, Strategy::MinCut, model)?;
    let plan = schedule.plan(&partition, model)?;
    Ok((partition, plan))
}

/// The least predicted peak of any plan of `pg` planned in `schedule` (with `offload`, any plan
/// that may offload), from the plan `first` (the lowest peak known), for `limit`, searched for
/// `seconds` at most: the program minimises the peak its rows count, a lower bound on every
/// plan's; its saved set is planned, an upper bound; the rows made on demand that the plan
/// breaks are added (or, where it breaks none, its saved set excluded) and the program solved
/// again. It stops at a plan within the limit, or once it proves none is and its bounds are
/// within [`LEAST_GAP`] of each other or it has run [`REFINE`] seconds: the limit's answer is
/// what the caller waits for, and bounds close to each other that straddle the limit do not give
/// it.
/// (Rounds past the proof narrow the bounds a refusal names, but each takes as long as those
/// before — 3.7 s at 2 660 nodes, 8 s at 13 788 with nothing narrowed — and one stopped short
/// finds nothing.)
#[allow(clippy::too_many_arguments)]
fn least_peak<G: Schedulable + ?Sized, S: Schedulable + ?Sized>(
    rows: &rows::Schedule<'_, G>,
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    offload: bool,
    model: &CostModel,
    seconds: f64,
    first: (Partition, Plan),
    limit: u64,
) -> Result<Least> {
    let mut extra = Extra { least_peak: true, ..Extra::default() };
    add(&mut extra, rows.rows(), schedule, pg, Room::Least);
    let start = Instant::now();
    let mut least = Least { lower: 0, best: first };
    let mut made = Vec::new();
    for _ in 0..ROUNDS {
        let left = seconds - start.elapsed().as_secs_f64();
        if left <= ROUND_LEAST {
            break;
        }
        extra.seconds = left;
        let searched = match partition_with_rows(pg, &extra, model, offload) {
            Ok(searched) => searched,
            // Every saved set the rows allow was planned and excluded: the best plan's peak is
            // the least.
            Err(Error::Infeasible { .. }) => {
                least.lower = least.upper();
                break;
            }
            Err(e) => return Err(e),
        };
        // The least the rows allow, in whole bytes (a plan's peak is one): the solver's
        // tolerance taken off first.
        let program = (searched.bound.unwrap_or(0.0) - 1e-3).ceil().max(0.0) as u64;
        let saved = rows.saved_by(schedule, &searched.partition);
        let choice = searched.choice;
        let plan = schedule.plan(&searched.partition, model)?;
        if (plan.predicted_peak() as u64) < least.upper() {
            least.best = (searched.partition, plan);
        }
        let upper = least.upper();
        // Every plan the program may still choose peaks at `program` or more; those excluded
        // before were planned, at `upper` or more.
        least.lower = least.lower.max(program.min(upper));
        // While the bounds straddle the limit, the search goes on however close they are: the
        // limit's answer is what is asked.
        let close = upper.saturating_sub(least.lower) as f64 <= upper as f64 * LEAST_GAP;
        let refused = least.lower > limit && (close || start.elapsed().as_secs_f64() > REFINE);
        if upper <= limit || refused {
            break;
        }
        let broken: Vec<Lazy> =
            rows.broken(&saved, program).into_iter().filter(|b| !made.contains(b)).take(BURSTS).collect();
        if broken.is_empty() {
            let kept = choice.ok_or_else(|| Error::internal("a search with rows recorded no choice to exclude"))?;
            extra.excluded.push(kept);
        }
        for &which in &broken {
            made.push(which);
            let row = rows.lazy_row(which, &saved, extra.aux);
            add(&mut extra, row, schedule, pg, Room::Least);
        }
    }
    Ok(least)
}

/// What the rows bound: the bytes within a limit, or the program's peak column, which it
/// minimises.
#[derive(Clone, Copy)]
enum Room {
    Bytes(u64),
    Least,
}

/// Adds `rows` (with their columns) to the program within `room`; false where a row cannot be
/// met whatever is saved.
fn add<S: Schedulable + ?Sized>(
    extra: &mut Extra,
    rows: Rows,
    schedule: &Schedule<'_, S>,
    pg: &PGraph,
    room: Room,
) -> bool {
    // A partition never keeps a view (its base stands for it): where the program's choice has
    // one at hand, the plan does not, so its saved bit counts for nothing.
    let term = |var: Var, on_device: bool| match var {
        Var::Saved(v) | Var::OnDevice(v) => {
            let id = schedule.graph_id(v);
            let on_device = on_device || matches!(var, Var::OnDevice(_));
            (!pg.node(id).flags.view).then_some(if on_device { Term::OnDevice(id) } else { Term::Saved(id) })
        }
        Var::Aux(a) => Some(Term::Aux(a)),
        Var::One => None,
    };
    extra.aux = extra.aux.max(rows.aux);
    for (terms, bound) in rows.linear {
        // A quantity that is always 0 (a view's saved bit) leaves the row.
        let terms = terms.into_iter().filter_map(|(var, c)| Some((term(var, false)?, c))).collect();
        extra.rows.push((terms, bound));
    }
    for Row { held, terms } in rows.rows {
        let mut terms: Vec<_> = terms.into_iter().filter_map(|(var, b)| Some((term(var, true)?, b as f64))).collect();
        // `held + Σ terms ≤ limit`, or `≤ peak`.
        let bound = match room {
            Room::Bytes(limit) => match limit.checked_sub(held) {
                Some(room) => room as f64,
                None => return false,
            },
            Room::Least => {
                terms.push((Term::Peak, -1.0));
                -(held as f64)
            }
        };
        extra.rows.push((terms, bound));
    }
    'links: for Link { aux, all, unless } in rows.links {
        // Σ all − aux − Σ unless ≤ |all| − 1; a quantity that is always 0 makes the link void.
        let mut terms = vec![(Term::Aux(aux), -1.0)];
        terms.extend(unless.into_iter().filter_map(|u| term(u, false)).map(|t| (t, -1.0)));
        let mut room = all.len() as f64 - 1.0;
        for var in all {
            match (var, term(var, false)) {
                (Var::One, _) => room -= 1.0,
                (_, Some(t)) => terms.push((t, 1.0)),
                (_, None) => continue 'links,
            }
        }
        extra.rows.push((terms, room));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::PNode;

    /// An input, `a = f(input)` (100 FLOPs), `b = g(a)` (50 FLOPs), and a backward node reading
    /// both: saving both recomputes nothing.
    fn chain() -> PGraph {
        let mut input = PNode::new(0, "input", &[], false, 8);
        input.flags.resident = true;
        let mut a = PNode::new(1, "tanh", &[0], false, 8);
        a.flops = 100;
        let mut b = PNode::new(2, "tanh", &[1], false, 8);
        b.flops = 50;
        PGraph { nodes: vec![input, a, b, PNode::new(3, "grad", &[1, 2], true, 8)], ..PGraph::default() }
    }

    /// The program's answer for `a` recomputed (a row saves it nowhere) under `cutoff`.
    fn with_a_recomputed(cutoff: Option<f64>) -> Result<u64> {
        let pg = chain();
        let a = crate::graph::NodeId::new(1);
        let extra = Extra { rows: vec![(vec![(Term::Saved(a), 1.0)], 0.0)], seconds: 10.0, cutoff, ..Extra::default() };
        Ok(partition_with_rows(&pg, &extra, &CostModel::default(), false)?.partition.recompute_flops)
    }

    /// The cutoff stands for a plan the peak search holds: the program answers at or below it,
    /// and is infeasible where nothing costs as little (the search then keeps its plan, within
    /// the gap).
    #[test]
    fn a_cutoff_finds_what_costs_less_and_nothing_else() {
        assert_eq!(with_a_recomputed(None).unwrap(), 100);
        assert_eq!(with_a_recomputed(Some(150.0)).unwrap(), 100);
        for cutoff in [99.0, 60.0] {
            assert!(
                matches!(with_a_recomputed(Some(cutoff)), Err(Error::Infeasible { .. })),
                "cutoff {cutoff}: {:?}",
                with_a_recomputed(Some(cutoff))
            );
        }
    }
}
