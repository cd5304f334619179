//! Byte budgets: the fewest recompute FLOPs with saved bytes within limits — the global budget
//! of `Strategy::Budget` and the regions' own budgets (`#[checkpoint(budget = f)]`), solved in
//! one search so that the global limit bounds the total, region budgets included.
//!
//! Candidates are the values whose fate is soft (Prefer tags and untagged values) — every soft
//! value for a global budget, those inside budgeted regions otherwise; forced values are always
//! kept when needed and count against the limits, forbidden ones never are. A region's limit is
//! its fraction of its save-everything bytes (the bytes of every value of its own the backward
//! may need, which no choice exceeds, so a budget of 1.0 never constrains; boundary values, which
//! no budget trades, left out of both sides).
//!
//! Small problems (up to 20 candidates, bounded work) are solved exactly, minimising FLOPs and
//! then bytes; problems up to [`PROGRAM_NODES`](search::PROGRAM_NODES) values by the exact 0-1
//! program. Larger ones follow an eviction path fixed in advance — from keeping every candidate
//! to keeping none, cheapest recompute per byte first, evicting only values that count against
//! a limit still exceeded — and take its first point within every limit; under a global budget
//! they also weigh the min-cut's plan and the lower bound's first Lagrangian cut, repaired to
//! fit ([`repair`]), and take the cheapest. Each of those is the first point within the limits
//! along a path that does not depend on them, so the saved bytes never rise when the global
//! limit shrinks.
//!
//! One job per file: this one holds the entry points ([`solve`], [`refine`]) and what they
//! return; [`offload`] what the search knows of offloading; [`problem`] the problem, its limits
//! and the evaluation of a plan; [`search`] which search decides and the choice among plans;
//! [`enumerate`], `milp`, [`path`] the three searches; [`bound`] the lower bound that grades the
//! path and [`repair`] its first cut made to fit; [`facts`] the node facts they read.

mod bound;
mod enumerate;
mod facts;
#[cfg(feature = "exact")]
mod milp;
mod offload;
mod path;
mod problem;
mod repair;
mod search;
#[cfg(feature = "exact")]
mod watch;

use bound::Bound;
pub(super) use offload::Offload;
use problem::{Problem, Solved};
use search::Graded;
#[cfg(feature = "test-hooks")]
pub(super) use search::{with_search, Search};

use super::classify::Class;
use super::{Budget, PGraph, Reason};
use crate::concurrent::{Scope, Task};
use crate::error::{Error, Result};
use crate::graph::RegionId;
use std::sync::Arc;

/// Rows a caller adds to the exact 0-1 program ([`Strategy::Peak`](super::Strategy::Peak)'s
/// search) over the program's own quantities and `aux` binary columns of its own, and choices
/// the program may not make again. A problem with them is solved by the program alone (the
/// other searches do not read them), within `seconds`.
#[derive(Clone, Default)]
#[cfg_attr(not(feature = "exact"), allow(dead_code))]
pub(crate) struct Extra<'w> {
    /// `(terms, limit)`: `Σ coefficient · term ≤ limit`.
    pub(crate) rows: Vec<(Vec<(Term, f64)>, f64)>,
    /// Binary columns the rows name ([`Term::Aux`]) besides the program's own.
    pub(crate) aux: usize,
    /// Choices no plan makes again (for every candidate, the same at hand and offloaded).
    pub(crate) excluded: Vec<Choice>,
    /// Seconds the program may run.
    pub(crate) seconds: f64,
    /// The relative gap to the proven bound at which the solver may stop (0: optimal).
    pub(crate) gap: f64,
    /// A cost ([`super::Partition::cost`]'s units) the program need not pass: a choice costing
    /// more is not looked for, and where none costs as little the program is infeasible.
    pub(crate) cutoff: Option<f64>,
    /// Whether, at the least cost found, a second program then looks for the fewest device
    /// bytes (the byte budget's tie-break, as long again as the first). The peak search goes
    /// without it: its rows, not the bytes saved, say whether a plan fits, and the second
    /// program took 5 s of an 8 s round at 7 MB on the 12-layer Llama.
    pub(crate) fewest_bytes: bool,
    /// Whether the program minimises [`Term::Peak`], a continuous column of its own that the
    /// rows bound from below, instead of the cost: the least peak the rows allow, for a
    /// refusal to name ([`Strategy::Peak`](super::Strategy::Peak)'s least feasible peak).
    pub(crate) least_peak: bool,
    /// Told of each choice the program finds on its way (each improving solution, through
    /// HiGHS's callback), and asked for the cost of the best plan it holds: the program stops
    /// once its proven bound is within `gap` of that cost. Not for the least-peak program.
    pub(crate) watch: Option<&'w (dyn Watcher + Sync)>,
}

// By hand: the watcher is a trait object (shown as whether there is one).
impl std::fmt::Debug for Extra<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extra")
            .field("rows", &self.rows)
            .field("aux", &self.aux)
            .field("excluded", &self.excluded)
            .field("seconds", &self.seconds)
            .field("gap", &self.gap)
            .field("cutoff", &self.cutoff)
            .field("fewest_bytes", &self.fewest_bytes)
            .field("least_peak", &self.least_peak)
            .field("watch", &self.watch.is_some())
            .finish()
    }
}

/// What watches the exact program's search (see [`Extra::watch`]).
#[cfg_attr(not(feature = "exact"), allow(dead_code))]
pub(crate) trait Watcher {
    /// A choice the program found: returns the cost ([`super::Partition::cost`]'s units) of the
    /// best plan the watcher holds, this one included where it is one.
    fn found(&self, choice: &Choice) -> Option<f64>;
    /// The cost of the best plan the watcher holds.
    fn best(&self) -> Option<f64>;
}

/// A decision per node: what is at hand and what of it is offloaded (a search's, before views
/// are settled on their bases, or the peak repair's).
#[derive(Clone, Debug, Default)]
#[cfg_attr(not(feature = "exact"), allow(dead_code))]
pub(crate) struct Choice {
    /// Kept at hand when the backward needs it (saved or offloaded).
    pub(crate) at_hand: Vec<bool>,
    /// Kept in host memory.
    pub(crate) offloaded: Vec<bool>,
}

/// A 0/1 quantity an [`Extra`] row names.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(not(feature = "exact"), allow(dead_code))]
pub(crate) enum Term {
    /// The value is at hand when the backward needs it (saved or offloaded).
    Saved(crate::graph::NodeId),
    /// The value is kept on the device (saved and not offloaded).
    OnDevice(crate::graph::NodeId),
    /// The caller's own column.
    Aux(usize),
    /// The peak the program minimises, where [`Extra::least_peak`] asks for it (no quantity
    /// otherwise).
    Peak,
}

/// What the budget search decided, for the partition to finish.
///
/// `at_hand`, `chosen` and `offloaded` hold one entry per node of the graph; a value offloaded
/// is also at hand (kept, in host memory), and every tagged offload (`Offload::fixed`) is
/// offloaded.
pub(super) struct Solution<'s> {
    /// Per node, whether it is at hand when the backward needs it (saved or offloaded).
    pub(super) at_hand: Vec<bool>,
    /// Per node, why it was decided: the search's reason for each candidate, the strategy's
    /// (`refine`'s `chosen`) elsewhere.
    pub(super) chosen: Vec<Option<Reason>>,
    /// Per node, whether it is kept in host memory rather than on the device.
    pub(super) offloaded: Vec<bool>,
    /// A proven lower bound on the search's cost ([`Grade`]).
    pub(super) grade: Grade<'s>,
}

/// A proven lower bound on a plan's cost: known, or still being proven on a thread of the
/// partition's scope while the partition is finished (its last cut takes longer than the plan
/// it grades).
pub(super) enum Grade<'s> {
    /// `None` where the plan is proven optimal.
    Known(Option<f64>),
    Proving(Task<'s, f64>),
}

impl Grade<'_> {
    /// The bound, once proven (`None`: the plan is optimal). A panic in the proof is the
    /// caller's.
    pub(super) fn wait(self) -> Option<f64> {
        match self {
            Grade::Known(bound) => bound,
            Grade::Proving(proof) => Some(proof.wait()),
        }
    }
}

/// Solves the budgets over `base` (the strategy's choice; with a global budget, only the forced
/// values matter). Returns what is at hand and the reason for each value the search decided;
/// a bound still being proven is proven on a thread of `scope`.
#[allow(clippy::too_many_arguments)]
pub(super) fn solve<'s, 'e>(
    scope: &'s Scope<'s, 'e>,
    g: &'e PGraph,
    class: &'e [Class],
    reads: &'e [bool],
    base: Vec<bool>,
    respect: &[bool],
    global: Option<Budget>,
    off: &'e Offload,
    extra: Option<&'e Extra<'e>>,
) -> Result<Solution<'s>> {
    refine(scope, g, class, reads, base, vec![None; g.len()], respect, global, off, extra)
}

/// [`solve`], keeping `chosen` for values the search does not decide.
// `class` and `reads` are the partition's own facts, passed down rather than found again.
#[allow(clippy::too_many_arguments)]
pub(super) fn refine<'s, 'e>(
    scope: &'s Scope<'s, 'e>,
    g: &'e PGraph,
    class: &'e [Class],
    reads: &'e [bool],
    base: Vec<bool>,
    mut chosen: Vec<Option<Reason>>,
    respect: &[bool],
    global: Option<Budget>,
    off: &'e Offload,
    extra: Option<&'e Extra<'e>>,
) -> Result<Solution<'s>> {
    let budgeted = budgeted_regions(g);
    if global.is_none() && budgeted.is_empty() {
        return Ok(Solution { at_hand: base, chosen, offloaded: off.fixed.clone(), grade: Grade::Known(None) });
    }
    let mut problem = Problem::new(g, class, reads, base, global.is_some(), &budgeted, off);
    problem.extra = extra;
    problem.hint_min_cut(class);
    let early_bound = match global {
        Some(b) => set_global_limit(&mut problem, b, respect)?,
        None => None,
    };
    let problem = Arc::new(problem);
    let graded = if off.choose {
        // Offloading is a choice, never a constraint: the plain budget's answer (tagged offloads
        // only) is one of this problem's choices, so it stands where the search finds none or
        // a costlier one.
        let solved = problem.solve_graded(true, early_bound, None).map(Graded::proved);
        // Nothing to compare where the search proved its plan optimal, or where it answers a
        // caller's rows (the peak search, whose plain program is as hard as `peak=` itself and
        // whose own rounds compare plans) — there even where the program found nothing: under
        // the caller's cutoff that is a proof the caller needs, which a plain plan costing more
        // than the cutoff would hide (it took the peak search's bound to 0, its gap to 1).
        let settled = extra.is_some() || solved.as_ref().is_ok_and(|s| s.bound.is_none());
        let plain = (!settled).then(|| {
            let plain_off = off.without_choice();
            let mut plain =
                Problem::new(g, class, reads, problem.base.clone(), global.is_some(), &budgeted, &plain_off);
            plain.extra = extra;
            plain.hint_min_cut(class);
            plain.limits.clone_from(&problem.limits);
            plain.solve().ok()
        });
        problem.better(solved, plain.flatten()).map(Solved::known)
    } else {
        problem.solve_graded(true, early_bound, Some((scope, Arc::clone(&problem))))
    }
    .map_err(|e| problem.error(g, e))?;
    for &c in &problem.candidates {
        chosen[c.index()] = Some(match problem.innermost_budget[c.index()] {
            Some(r) => Reason::RegionBudget(r),
            None => Reason::Budget,
        });
    }
    let Graded { plan, grade } = graded;
    Ok(Solution { at_hand: plan.at_hand, chosen, offloaded: plan.offloaded, grade })
}

/// The regions with a budget of their own.
fn budgeted_regions(g: &PGraph) -> Vec<RegionId> {
    (0..g.regions.len() as u32).map(RegionId::new).filter(|&r| g.regions[r.index()].budget.is_some()).collect()
}

/// Sets the global limit of `problem` from the budget `b`: bytes as given; a fraction of the way
/// from the fewest bytes any choice within the region budgets keeps (0.0) to what `respect`
/// keeps (1.0). Returns the lower bound started on the way, where one was, for the final solve.
fn set_global_limit(problem: &mut Problem<'_>, b: Budget, respect: &[bool]) -> Result<Option<Bound>> {
    let f = match b {
        Budget::Bytes(b) => {
            problem.limits[0] = b;
            return Ok(None);
        }
        Budget::Fraction(f) => f,
    };
    if !(0.0..=1.0).contains(&f) {
        return Err(Error::config("budget", format!("a budget fraction must be in [0, 1], got {f}")));
    }
    // 0.0 is the fewest bytes any choice within the region budgets keeps.
    problem.limits[0] = 0;
    // Only the fewest bytes matter here: no bound is computed to grade the plan. (On large
    // graphs the min-cut the path is compared with, and the bound's network and first cut, are
    // made beside the path, for the final solve: neither reads the limits.)
    let (fewest, early_bound) = problem.fewest_bytes();
    // The two ends are counted at once (each a sweep over every node).
    let (lo, hi) = crate::concurrent::join(
        || match fewest {
            Ok(solved) => Ok(problem.global_bytes(&solved.plan.at_hand, &solved.plan.offloaded)),
            Err(e) => e.least_global_within_regions.ok_or(e),
        },
        || problem.global_bytes(respect, &problem.off.fixed),
    );
    let lo = lo.map_err(|e| problem.error(problem.g, e))?;
    let hi = hi.max(lo);
    problem.limits[0] = lo + ((hi - lo) as f64 * f).floor() as u64;
    Ok(early_bound)
}
