//! Which search decides a budget problem, and the choice among the plans they find: every
//! combination ([`super::enumerate`]), the exact 0-1 program (`milp`), or the eviction path
//! ([`super::path`]) graded by a lower bound ([`super::bound`]) and weighed against the
//! min-cut's plan and the bound's repaired cut.

use super::bound::Bound;
#[cfg(feature = "exact")]
use super::milp;
use super::problem::{Found, Infeasible, Placement, Problem, Solved};
use super::Grade;
use crate::concurrent::Scope;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Every combination is tried for up to this many candidates...
const EXACT_CANDIDATES: usize = 12;
/// ...when `3^candidates × relevant nodes` stays below this (a few milliseconds); larger
/// problems go to the exact 0-1 program.
const EXACT_WORK: u64 = 1 << 22;
/// The 0-1 program is solved for up to this many values the backward may reach; past it, the
/// eviction path, with the bound it proves.
pub(super) const PROGRAM_NODES: usize = 200_000;
/// Seconds the 0-1 program may run; past them its best plan stands, with its proven bound.
#[cfg_attr(not(feature = "exact"), allow(dead_code))]
const PROGRAM_SECONDS: f64 = 60.0;

/// A plan of the search with its [`Grade`]: the lower bound on its cost, known or still being
/// proven on a thread of the partition's scope.
pub(super) struct Graded<'s> {
    pub(super) plan: Placement,
    pub(super) grade: Grade<'s>,
}

// Here, not beside `Solved`: the problem is what every search reads, and names no search.
impl Solved {
    /// The plan with its bound, already known, as the partition takes it.
    pub(super) fn known<'s>(self) -> Graded<'s> {
        Graded { plan: self.plan, grade: Grade::Known(self.bound) }
    }
}

impl Graded<'_> {
    /// A plan proven optimal.
    fn optimal(plan: Placement) -> Self {
        Graded { plan, grade: Grade::Known(None) }
    }

    /// The plan with its bound proven (waiting for the proof where it is still running).
    pub(super) fn proved(self) -> Solved {
        Solved { plan: self.plan, bound: self.grade.wait() }
    }
}

impl<'a> Problem<'a> {
    /// The cheaper of `found` and `other` under this problem's cost (then fewer device bytes),
    /// `other` only where it fits this problem's limits.
    /// (The bound of the one kept: the plain answer's bound holds for its own, smaller problem
    /// only, so the pair proves nothing below the better cost when the search's bound is gone.)
    pub(super) fn better(
        &self,
        found: std::result::Result<Solved, Infeasible>,
        other: Option<Solved>,
    ) -> std::result::Result<Solved, Infeasible> {
        let mut scratch = vec![false; self.g.len()];
        let mut bytes = vec![0; self.limits.len()];
        let Some(other) = other else { return found };
        let (flops, exposed) = self.eval_into(&other.plan.at_hand, &other.plan.offloaded, &mut scratch, &mut bytes);
        if !self.fits(&bytes) {
            return found;
        }
        let other_key = (self.cost(flops, exposed), bytes.first().copied().unwrap_or(0));
        let Ok(found) = found else { return Ok(Solved { plan: other.plan, bound: Some(0.0) }) };
        let (flops, exposed) = self.eval_into(&found.plan.at_hand, &found.plan.offloaded, &mut scratch, &mut bytes);
        let found_key = (self.cost(flops, exposed), bytes.first().copied().unwrap_or(0));
        if other_key.0.lt(&found_key.0, other_key.1, found_key.1) {
            // The search's own bound still bounds this problem's optimum.
            Ok(Solved { plan: other.plan, bound: found.bound })
        } else {
            Ok(found)
        }
    }

    /// The plan of least cost within every limit: every combination for a few candidates, the
    /// exact 0-1 program up to [`PROGRAM_NODES`], the eviction path past it (or where the
    /// program fails); with a proven lower bound on the cost where the plan is not proven
    /// optimal.
    pub(super) fn solve(&self) -> std::result::Result<Solved, Infeasible> {
        self.solve_graded(true, None, None).map(Graded::proved)
    }

    /// The plan of fewest bytes any choice keeps within the region limits (the global limit is
    /// 0), without a bound to grade it; and, where the eviction path decides, the lower bound
    /// already started (its network and first cut read no limit), for the solve that follows.
    pub(super) fn fewest_bytes(&self) -> (std::result::Result<Solved, Infeasible>, Option<Bound>) {
        if self.method() != Method::Path {
            return (self.solve_graded(false, None, None).map(Graded::proved), None);
        }
        let (path, bound) = self.path_and_bound();
        (path.map(|plan| Solved { plan, bound: None }), bound)
    }

    /// How [`Problem::solve`] finds its plan (whatever the limits).
    fn method(&self) -> Method {
        let vars = self.variables();
        let combos = vars.iter().try_fold(1u64, |acc, (_, o)| acc.checked_mul(o.len() as u64));
        let enumerate = self.candidates.len() <= EXACT_CANDIDATES
            && combos.is_some_and(|c| c.saturating_mul(self.order.len() as u64) <= EXACT_WORK);
        match search_asked() {
            _ if self.extra.is_some() => Method::Program,
            Search::Auto if enumerate => Method::Enumerate,
            Search::Auto if self.order.len() <= PROGRAM_NODES => Method::Program,
            Search::Program => Method::Program,
            _ => Method::Path,
        }
    }

    /// [`Problem::solve`]; without `grade`, the eviction path's plan comes with no lower bound
    /// (where only its bytes matter). `started`: the bound of [`Problem::fewest_bytes`], where
    /// one was started. `prove_in`: a scope, and this problem, for the bound's last cuts to be
    /// taken in after the plan is found, while the caller goes on ([`Grade::Proving`]); without
    /// it, the bound is proven before this returns.
    pub(super) fn solve_graded<'s>(
        &self,
        grade: bool,
        started: Option<Bound>,
        prove_in: Option<(&'s Scope<'s, 'a>, Arc<Problem<'a>>)>,
    ) -> std::result::Result<Graded<'s>, Infeasible> {
        match self.method() {
            Method::Enumerate => return self.solve_exact(&self.variables()).map(Graded::optimal),
            Method::Program => {
                if let Some(answer) = self.solve_program() {
                    return answer.map(Solved::known);
                }
            }
            Method::Path => {}
        }
        // The bound only grades the plan: it is computed beside the eviction path, on a second
        // thread where there is one (each takes about as long).
        if !grade {
            return self.solve_heuristic().map(Graded::optimal);
        }
        self.path_graded(started, prove_in)
    }

    /// The eviction path's plan (or the min-cut's, or the bound's repaired first cut, whichever
    /// costs least) graded by the lower bound; `started` and `prove_in` as for
    /// [`Problem::solve_graded`].
    fn path_graded<'s>(
        &self,
        started: Option<Bound>,
        prove_in: Option<(&'s Scope<'s, 'a>, Arc<Problem<'a>>)>,
    ) -> std::result::Result<Graded<'s>, Infeasible> {
        // The bound's first cut needs no limit, and its plan (within every rule but the limits)
        // is the third the plan is chosen from on plain budgets: the cut is taken beside the path
        // and the min-cut, then the bound goes on beside that plan's repair. Where the cut was
        // taken already (by `fewest_bytes`), the path for these limits is found beside the
        // bound's next cut too.
        let (path, mut started) = match started {
            Some(started) => (None, Some(started)),
            None => {
                let (path, started) = self.path_and_bound();
                (Some(path), started)
            }
        };
        let cut_plan = started.as_mut().filter(|_| !self.off.choose).map(Bound::take_first_plan);
        let plan_found = Arc::new(AtomicBool::new(false));
        let plan = || {
            let path = path.unwrap_or_else(|| self.solve_heuristic());
            let plan = match cut_plan {
                Some(cut_plan) => self.cheaper(path, self.repair(cut_plan)),
                None => path,
            };
            plan_found.store(true, Ordering::Release);
            plan
        };
        match (started, prove_in) {
            // The bound's last cut outlasts the plan: the caller finishes the partition with the
            // plan meanwhile.
            (Some(bound), Some((scope, this))) if crate::concurrent::second_cpu() => {
                let found = Arc::clone(&plan_found);
                let proof = crate::concurrent::spawn(scope, move || bound.finish(&this, &found));
                Ok(Graded { plan: plan()?, grade: Grade::Proving(proof) })
            }
            (started, _) => {
                let bound = || started.map_or(0.0, |bound| bound.finish(self, &plan_found));
                let (plan, bound) = crate::concurrent::join(plan, bound);
                Ok(Graded { plan: plan?, grade: Grade::Known(Some(bound)) })
            }
        }
    }

    /// The cheaper of two of the search's plans (`first` on equal cost, or where `second`
    /// failed). Each is the first point within the limits along a path of plans that does not
    /// depend on them, so the choice keeps saved bytes from rising as the limits shrink: where
    /// `first` won, a smaller limit it still meets gives it again, and it costs less than any
    /// later point of the other path.
    pub(super) fn cheaper(&self, first: Found, second: Found) -> Found {
        let (first, second) = match (first, second) {
            (Ok(first), Ok(second)) => (first, second),
            (Err(_), Ok(second)) => return Ok(second),
            (first, _) => return first,
        };
        let mut scratch = vec![false; self.g.len()];
        let mut bytes = vec![0; self.limits.len()];
        let (flops, exposed) = self.eval_into(&first.at_hand, &first.offloaded, &mut scratch, &mut bytes);
        let first_cost = self.cost(flops, exposed);
        let (flops, exposed) = self.eval_into(&second.at_hand, &second.offloaded, &mut scratch, &mut bytes);
        if self.cost(flops, exposed).lt(&first_cost, 0, 0) {
            Ok(second)
        } else {
            Ok(first)
        }
    }

    /// The exact 0-1 program's answer, or `None` where it failed (the eviction path decides).
    #[cfg(feature = "exact")]
    fn solve_program(&self) -> Option<std::result::Result<Solved, Infeasible>> {
        let program = milp::Program::new(self);
        match program.solve(self, self.extra.map_or(PROGRAM_SECONDS, |e| e.seconds)) {
            Ok(solved) => Some(Ok(solved)),
            Err(milp::Unsolved::Infeasible) => Some(Err(self.infeasible(&program))),
            // The caller's cutoff stands for a plan it holds: what it gets is the bound, beside
            // the plan that recomputes all it may (costing more than the cutoff, the caller's
            // plan's cost less its gap, so the caller tells it from the program's answers).
            Err(milp::Unsolved::NoneBelowCutoff(bound)) => {
                let plan = Placement { at_hand: self.base.clone(), offloaded: self.off.fixed.clone() };
                Some(Ok(Solved { plan, bound: Some(bound.unwrap_or(0.0)) }))
            }
            Err(milp::Unsolved::Failed(why)) => {
                log::warn!("the exact budget program failed ({why}): the eviction path decides");
                None
            }
        }
    }

    /// Built without the `exact` feature: the eviction path decides.
    #[cfg(not(feature = "exact"))]
    fn solve_program(&self) -> Option<std::result::Result<Solved, Infeasible>> {
        None
    }

    /// Why no plan fits, from the program: per limit the fewest bytes any plan keeps under it
    /// alone, and the fewest global bytes within the region limits.
    #[cfg(feature = "exact")]
    fn infeasible(&self, program: &milp::Program) -> Infeasible {
        if self.extra.is_some() {
            // The caller's rows make the refusal its own: no limit of this problem's is the
            // one that fails.
            return Infeasible { least: vec![u64::MAX; self.limits.len()], least_global_within_regions: None };
        }
        let least = (0..self.limits.len())
            .map(|k| program.least_bytes(self, k, false, PROGRAM_SECONDS).unwrap_or(u64::MAX))
            .collect();
        let least_global_within_regions =
            if self.has_global() { program.least_bytes(self, 0, true, PROGRAM_SECONDS) } else { None };
        Infeasible { least, least_global_within_regions }
    }
}

/// Which search decides a budget: the sizes do (`Auto`), or a test asks for one.
/// (Only the `test-hooks` feature asks: without it every search is `Auto`.)
#[derive(Clone, Copy, PartialEq)]
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
pub(in crate::partition) enum Search {
    Auto,
    Program,
    Heuristic,
}

thread_local! {
    /// Set by [`with_search`]: the search every budget on this thread goes through.
    static SEARCH: std::cell::Cell<Search> = const { std::cell::Cell::new(Search::Auto) };
}

fn search_asked() -> Search {
    SEARCH.with(|f| f.get())
}

/// Runs `f` with every budget search on this thread done by `search`, whatever the sizes — so
/// that tests can hold the program against the enumeration of every combination, and the
/// heuristic's bound against the program's optimum.
#[cfg(feature = "test-hooks")]
pub(in crate::partition) fn with_search<T>(search: Search, f: impl FnOnce() -> T) -> T {
    SEARCH.with(|flag| {
        let before = flag.replace(search);
        let out = f();
        flag.set(before);
        out
    })
}

/// How a budget problem is solved: every combination, the exact 0-1 program, or the eviction
/// path graded by a lower bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// Every combination ([`Problem::solve_exact`]).
    Enumerate,
    /// The exact 0-1 program (`milp`), the path where it fails.
    Program,
    /// The eviction path ([`Problem::solve_path`]), graded by the lower bound.
    Path,
}
