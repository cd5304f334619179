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
//! then bytes; problems up to [`PROGRAM_NODES`] values by the exact 0-1 program. Larger ones
//! follow an eviction path fixed in advance — from keeping every candidate to keeping none,
//! cheapest recompute per byte first, evicting only values that count against a limit still
//! exceeded — and take its first point within every limit; under a global budget they also weigh
//! the min-cut's plan and the lower bound's first Lagrangian cut, repaired to fit
//! ([`repair`]), and take the cheapest. Each of those is the first point within the limits
//! along a path that does not depend on them, so the saved bytes never rise when the global
//! limit shrinks.

mod bound;
use bound::Bound;
mod facts;
use facts::Facts;
#[cfg(feature = "exact")]
mod milp;
mod repair;

use super::classify::{closure_from, counts_bytes, Class};
use super::offload::{can_leave, CostModel};
use super::{Budget, PGraph, Reason};
use crate::error::{Error, Result};
use crate::graph::{NodeId, RegionId};
use crate::policy::Policy;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

/// What the search knows of offloading.
pub(super) struct Offload {
    /// Offloaded whenever kept (by tag).
    fixed: Vec<bool>,
    /// Offloaded whenever kept by tag when the solver does not choose (every offload tag that
    /// can be met): `fixed` of the same problem without choice.
    tagged: Vec<bool>,
    /// May be offloaded at the solver's choice (`BudgetOffload` only).
    optional: Vec<bool>,
    /// Exposed seconds if offloaded.
    exposed: Vec<f64>,
    /// Seconds per FLOP.
    s_per_flop: f64,
    /// Whether the solver chooses offloads (`BudgetOffload`).
    choose: bool,
}

impl Offload {
    /// Exposed seconds per value if offloaded.
    pub(super) fn exposed(&self) -> &[f64] {
        &self.exposed
    }

    pub fn new(
        g: &PGraph,
        class: &[Class],
        wish: &[Option<Policy>],
        exposed: Vec<f64>,
        model: &CostModel,
        choose: bool,
    ) -> Offload {
        let tagged: Vec<bool> = g.ids().map(|i| wish[i.index()].is_some()).collect();
        let fixed: Vec<bool> = g
            .ids()
            .map(|i| match wish[i.index()] {
                Some(Policy::MustOffload) => true,
                Some(_) => !choose,
                None => false,
            })
            .collect();
        // Bases of must_save views stay on the device (found only where the solver chooses
        // offloads: a sweep over every node).
        let mut must_save_base = vec![false; g.len()];
        if choose {
            let output = g.output_mask();
            for v in g.ids() {
                let n = g.node(v);
                if !n.backward && n.flags.view && n.policy == Some(Policy::MustSave) {
                    must_save_base[g.view_base(v, &output).index()] = true;
                }
            }
        }
        let optional = g
            .ids()
            .map(|i| {
                let n = g.node(i);
                let allowed = match class[i.index()] {
                    Class::Soft(_) => true,
                    Class::Forced(r) => {
                        r.is_boundary()
                            || matches!(
                                r,
                                Reason::NotRecomputable
                                    | Reason::RandomSource
                                    | Reason::RngState(_)
                                    | Reason::ViewBase(_)
                            )
                    }
                    Class::Forbidden(_) => false,
                };
                choose
                    && allowed
                    && !fixed[i.index()]
                    && !n.backward
                    && !n.flags.view
                    && n.policy != Some(Policy::MustSave)
                    && can_leave(g, i)
                    && !must_save_base[i.index()]
            })
            .collect();
        Offload { fixed, tagged, optional, exposed, s_per_flop: 1.0 / model.flops_per_s, choose }
    }

    /// The same problem with the solver's offload choice off: tagged offloads only.
    fn without_choice(&self) -> Offload {
        Offload {
            fixed: self.tagged.clone(),
            tagged: self.tagged.clone(),
            optional: vec![false; self.optional.len()],
            exposed: self.exposed.clone(),
            s_per_flop: self.s_per_flop,
            choose: false,
        }
    }
}

/// Every combination is tried for up to this many candidates...
const EXACT_CANDIDATES: usize = 12;
/// ...when `3^candidates × relevant nodes` stays below this (a few milliseconds); larger
/// problems go to the exact 0-1 program.
const EXACT_WORK: u64 = 1 << 22;
/// The 0-1 program is solved for up to this many values the backward may reach; past it, the
/// eviction path, with the bound it proves.
const PROGRAM_NODES: usize = 200_000;
/// Seconds the 0-1 program may run; past them its best plan stands, with its proven bound.
#[cfg_attr(not(feature = "exact"), allow(dead_code))]
const PROGRAM_SECONDS: f64 = 60.0;

/// A plan of the search: what is at hand, what is offloaded, and a proven lower bound on its cost
/// when it is not proven optimal (`None`: optimal).
type Solved = (Vec<bool>, Vec<bool>, Option<f64>);

/// A plan of the search with its [`Grade`].
type Graded<'s> = (Vec<bool>, Vec<bool>, Grade<'s>);

/// A graded plan with its bound proven.
fn proved((at_hand, offloaded, grade): Graded<'_>) -> Solved {
    (at_hand, offloaded, grade.wait())
}

/// A plan one of the searches found (what is at hand, what is offloaded), or why none fits.
type Found = std::result::Result<(Vec<bool>, Vec<bool>), Infeasible>;

/// What is at hand, the reason for each value the search decided, what is offloaded, and a
/// proven lower bound on the search's cost ([`Grade`]).
pub(super) type Solution<'s> = (Vec<bool>, Vec<Option<Reason>>, Vec<bool>, Grade<'s>);

/// A proven lower bound on a plan's cost: known, or still being proven on a thread of the
/// partition's scope while the partition is finished (its last cut takes longer than the plan
/// it grades: a tenth of a second at 10⁶ nodes).
pub(super) enum Grade<'s> {
    /// `None` where the plan is proven optimal.
    Known(Option<f64>),
    Proving(ScopedJoinHandle<'s, f64>),
}

impl Grade<'_> {
    /// The bound, once proven (`None`: the plan is optimal). A panic in the proof is the
    /// caller's.
    pub(super) fn wait(self) -> Option<f64> {
        match self {
            Grade::Known(bound) => bound,
            Grade::Proving(proof) => Some(proof.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))),
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
) -> Result<Solution<'s>> {
    refine(scope, g, class, reads, base, vec![None; g.len()], respect, global, off)
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
) -> Result<Solution<'s>> {
    let budgeted: Vec<RegionId> =
        (0..g.regions.len() as u32).map(RegionId::new).filter(|&r| g.regions[r.index()].budget.is_some()).collect();
    if global.is_none() && budgeted.is_empty() {
        return Ok((base, chosen, off.fixed.clone(), Grade::Known(None)));
    }
    let mut problem = Problem::new(g, class, reads, base, global.is_some(), &budgeted, off);
    problem.hint_min_cut(class);
    let mut early_bound = None;
    if let Some(b) = global {
        let limit = match b {
            Budget::Bytes(b) => b,
            Budget::Fraction(f) => {
                if !(0.0..=1.0).contains(&f) {
                    return Err(Error::Invalid(format!("a budget fraction must be in [0, 1], got {f}")));
                }
                // 0.0 is the fewest bytes any choice within the region budgets keeps.
                problem.limits[0] = 0;
                // Only the fewest bytes matter here: no bound is computed to grade the plan. (On
                // large graphs the min-cut the path is compared with, and the bound's network and
                // first cut, are made beside the path, for the final solve: neither reads the
                // limits.)
                let (fewest, bound) = problem.fewest_bytes();
                early_bound = bound;
                // The two ends are counted at once (each a sweep over every node).
                let (lo, hi) = crate::par::join(
                    || match fewest {
                        Ok((at_hand, offloaded, _)) => Ok(problem.global_bytes(&at_hand, &offloaded)),
                        Err(e) => e.least_global_within_regions.ok_or(e),
                    },
                    || problem.global_bytes(respect, &off.fixed),
                );
                let lo = lo.map_err(|e| problem.error(g, e))?;
                let hi = hi.max(lo);
                lo + ((hi - lo) as f64 * f).floor() as u64
            }
        };
        problem.limits[0] = limit;
    }
    let problem = Arc::new(problem);
    let (at_hand, offloaded, bound) = if off.choose {
        // Offloading is a choice, never a constraint: the plain budget's answer (tagged offloads
        // only) is one of this problem's choices, so it stands where the search finds none or
        // a costlier one.
        let solved = problem.solve_graded(true, early_bound, None).map(proved);
        let plain_off = off.without_choice();
        let mut plain = Problem::new(g, class, reads, problem.base.clone(), global.is_some(), &budgeted, &plain_off);
        plain.hint_min_cut(class);
        plain.limits.clone_from(&problem.limits);
        problem
            .better(solved, plain.solve().ok())
            .map(|(at_hand, offloaded, bound)| (at_hand, offloaded, Grade::Known(bound)))
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
    Ok((at_hand, chosen, offloaded, bound))
}

/// A budget problem: which candidates to keep, the rest of `base` fixed, within every limit.
struct Problem<'a> {
    g: &'a PGraph,
    base: Vec<bool>,
    candidates: Vec<NodeId>,
    /// Kept values the solver may offload that are not candidates (forced ones).
    optional: Vec<NodeId>,
    off: &'a Offload,
    /// Limits: the global one first when there is one, then one per budgeted region.
    limits: Vec<u64>,
    /// What each limit is: `None` for the global one.
    scopes: Vec<Option<RegionId>>,
    /// Per node, the limits its bytes count against (CSR: `counts[start[i]..start[i + 1]]`;
    /// none past the last node the backward may reach, which the search never asks about).
    start: Vec<u32>,
    counts: Vec<u32>,
    /// Per node, the innermost budgeted region it lies in.
    innermost_budget: Vec<Option<RegionId>>,
    /// Forward nodes the backward could reach under any choice, users before inputs.
    order: Vec<usize>,
    /// FLOPs, bytes and inputs of every node in `order` (and of those between them).
    facts: Facts,
    /// What the backward reads ([`PGraph::backward_reads`]).
    reads: &'a [bool],
    /// The classes to take the min-cut's choice from, where the path compares against it.
    hint_class: Option<&'a [Class]>,
    /// The min-cut's choice over the candidates (the rest as `base`) and its evaluation,
    /// computed on first use, beside the bound's first cut or the path (about a third of a
    /// second on a 10⁶-node graph).
    hint: std::sync::OnceLock<Hint>,
    /// The order the eviction path evicts candidates and optional offloads in, which does not
    /// depend on the limits: sorted on first use, for every path after.
    eviction_order: std::sync::OnceLock<Vec<NodeId>>,
}

/// The min-cut's choice ([`Problem::hint_min_cut`]), evaluated with the tagged offloads (which
/// no limit changes: one evaluation serves every solve of the problem).
struct Hint {
    at_hand: Vec<bool>,
    flops: u64,
    exposed: f64,
    /// Device bytes counted against each limit.
    bytes: Vec<u64>,
}

/// Why no choice fits: per limit, the fewest bytes any choice tried needed, and the fewest
/// global bytes among choices that met every region limit.
struct Infeasible {
    least: Vec<u64>,
    least_global_within_regions: Option<u64>,
}

impl<'a> Problem<'a> {
    fn new(
        g: &'a PGraph,
        class: &[Class],
        reads: &'a [bool],
        mut base: Vec<bool>,
        global: bool,
        budgeted: &[RegionId],
        off: &'a Offload,
    ) -> Self {
        let forced: Vec<bool> = class.iter().map(|c| c.is_forced()).collect();
        let relevant = closure_from(g, reads.to_vec(), &forced);
        let mut innermost_budget = vec![None; g.len()];
        // Without a budgeted region no node lies in one: no sweep over every node.
        if !budgeted.is_empty() {
            for i in g.ids() {
                let mut r = g.node(i).region;
                while let Some(region) = r {
                    if g.regions[region.index()].budget.is_some() {
                        innermost_budget[i.index()] = Some(region);
                        break;
                    }
                    r = g.regions[region.index()].parent;
                }
            }
        }
        let candidates: Vec<NodeId> = g
            .ids()
            .filter(|&i| relevant[i.index()] && matches!(class[i.index()], Class::Soft(_)))
            .filter(|&i| global || innermost_budget[i.index()].is_some())
            .collect();
        let optional: Vec<NodeId> = g
            .ids()
            .filter(|&i| relevant[i.index()] && off.optional[i.index()] && class[i.index()].is_forced())
            .collect();
        if global {
            base = forced;
        }
        let mut scopes: Vec<Option<RegionId>> = if global { vec![None] } else { vec![] };
        scopes.extend(budgeted.iter().map(|&r| Some(r)));
        let (mut start, mut counts) = (Vec::with_capacity(g.len() + 1), Vec::new());
        start.push(0u32);
        // Both tables cover the nodes up to the last one the backward may reach, the only ones
        // the search reads: the nodes past it (the backward's, at least) are not loaded.
        let reach = relevant.iter().rposition(|&r| r).map_or(0, |last| last + 1);
        let mut facts = Facts::with_capacity(reach);
        for i in g.ids().take(reach) {
            facts.push(g, i);
            if counts_bytes(g, i) && !g.node(i).backward {
                let boundary = matches!(class[i.index()], Class::Forced(r) if r.is_boundary());
                for (k, scope) in scopes.iter().enumerate() {
                    let counts_here = match scope {
                        None => true,
                        Some(r) => !boundary && g.node(i).region.is_some_and(|nr| g.within(nr, *r)),
                    };
                    if counts_here {
                        counts.push(k as u32);
                    }
                }
            }
            start.push(counts.len() as u32);
        }
        start.resize(g.len() + 1, counts.len() as u32);
        // A region's limit: its fraction of the bytes of its own values the backward may need
        // (those it reaches with only forced values at hand), which no choice exceeds: a budget
        // of 1.0 never constrains.
        let mut limits = vec![u64::MAX; scopes.len()];
        for (k, scope) in scopes.iter().enumerate() {
            if let Some(r) = scope {
                let fraction = g.regions[r.index()].budget.unwrap_or(1.0);
                let everything: u64 = g
                    .ids()
                    .filter(|&i| relevant[i.index()] && !g.node(i).flags.view)
                    .filter(|&i| counts[start[i.index()] as usize..start[i.index() + 1] as usize].contains(&(k as u32)))
                    .map(|i| g.node(i).bytes)
                    .sum();
                // 1.0 exactly: past 2^53 bytes the float product could round below `everything`.
                limits[k] = if fraction >= 1.0 { u64::MAX } else { (everything as f64 * fraction).floor() as u64 };
            }
        }
        let order = (0..g.len()).rev().filter(|&i| relevant[i]).collect();
        Problem {
            g,
            base,
            candidates,
            optional,
            off,
            limits,
            scopes,
            start,
            counts,
            innermost_budget,
            order,
            facts,
            reads,
            hint_class: None,
            hint: std::sync::OnceLock::new(),
            eviction_order: std::sync::OnceLock::new(),
        }
    }

    /// With a global budget and no offload choice, the min-cut's choice is one candidate point:
    /// the path is a heuristic on large problems, and the cut keeps the fewest bytes by
    /// construction.
    fn hint_min_cut(&mut self, class: &'a [Class]) {
        if self.has_global() && !self.off.choose {
            self.hint_class = Some(class);
        }
    }

    /// The min-cut's choice ([`Problem::hint_min_cut`]), cut and evaluated on first use.
    fn hint(&self) -> Option<&Hint> {
        let class = self.hint_class?;
        Some(self.hint.get_or_init(|| {
            let (mut cut, _) = super::mincut::cut(self.g, class, self.reads);
            let mut at_hand = self.base.clone();
            for &c in &self.candidates {
                at_hand[c.index()] = cut[c.index()];
            }
            let mut bytes = vec![0; self.limits.len()];
            // The cut's own table serves as scratch: it is read no more.
            let (flops, exposed) = self.eval_into(&at_hand, &self.off.fixed, &mut cut, &mut bytes);
            Hint { at_hand, flops, exposed, bytes }
        }))
    }

    /// The cheaper of `found` and `other` under this problem's cost (then fewer device bytes),
    /// `other` only where it fits this problem's limits.
    /// (The bound of the one kept: the plain answer's bound holds for its own, smaller problem
    /// only, so the pair proves nothing below the better cost when the search's bound is gone.)
    fn better(
        &self,
        found: std::result::Result<Solved, Infeasible>,
        other: Option<Solved>,
    ) -> std::result::Result<Solved, Infeasible> {
        let mut scratch = vec![false; self.g.len()];
        let mut bytes = vec![0; self.limits.len()];
        let Some(other) = other else { return found };
        let (flops, exposed) = self.eval_into(&other.0, &other.1, &mut scratch, &mut bytes);
        if !self.fits(&bytes) {
            return found;
        }
        let other_key = (self.cost(flops, exposed), bytes.first().copied().unwrap_or(0));
        let Ok(found) = found else { return Ok((other.0, other.1, Some(0.0))) };
        let (flops, exposed) = self.eval_into(&found.0, &found.1, &mut scratch, &mut bytes);
        let found_key = (self.cost(flops, exposed), bytes.first().copied().unwrap_or(0));
        if other_key.0.lt(&found_key.0, other_key.1, found_key.1) {
            // The search's own bound still bounds this problem's optimum.
            Ok((other.0, other.1, found.2))
        } else {
            Ok(found)
        }
    }

    fn limits_of(&self, i: usize) -> &[u32] {
        &self.counts[self.start[i] as usize..self.start[i + 1] as usize]
    }

    /// Device bytes counted against every limit, recompute FLOPs and exposed transfer seconds,
    /// with `at_hand` and `offloaded`; `reached` is scratch (any contents): the closure of an
    /// evaluation never leaves the relevant nodes.
    fn eval_into(&self, at_hand: &[bool], offloaded: &[bool], reached: &mut [bool], bytes: &mut [u64]) -> (u64, f64) {
        for &i in &self.order {
            reached[i] = self.reads[i];
        }
        bytes.fill(0);
        let mut flops = 0u64;
        let mut exposed = 0f64;
        for &i in &self.order {
            if !reached[i] {
                continue;
            }
            if at_hand[i] && offloaded[i] {
                exposed += self.off.exposed[i];
            } else if at_hand[i] {
                for &k in self.limits_of(i) {
                    bytes[k as usize] += self.facts.bytes(i);
                }
            } else {
                flops += self.facts.flops(i);
                for &x in self.facts.inputs(i) {
                    reached[x.index()] = true;
                }
            }
        }
        (flops, exposed)
    }

    /// Device-saved bytes with `at_hand` and `offloaded` (the global limit's count, or all
    /// counted bytes).
    fn global_bytes(&self, at_hand: &[bool], offloaded: &[bool]) -> u64 {
        let reached = closure_from(self.g, self.reads.to_vec(), at_hand);
        self.g
            .ids()
            .filter(|&i| {
                reached[i.index()]
                    && at_hand[i.index()]
                    && !offloaded[i.index()]
                    && counts_bytes(self.g, i)
                    && !self.g.node(i).backward
            })
            .map(|i| self.g.node(i).bytes)
            .sum()
    }

    fn has_global(&self) -> bool {
        self.scopes.first() == Some(&None)
    }

    /// The options of each decision variable: candidates first (recompute, save, and offload
    /// when allowed), then the optional offloads (save, offload).
    fn variables(&self) -> Vec<(NodeId, &'static [Choice])> {
        const TWO: &[Choice] = &[Choice::Recompute, Choice::Save];
        const THREE: &[Choice] = &[Choice::Recompute, Choice::Save, Choice::Offload];
        const KEEP: &[Choice] = &[Choice::Save, Choice::Offload];
        let mut vars: Vec<(NodeId, &'static [Choice])> =
            self.candidates.iter().map(|&c| (c, if self.off.optional[c.index()] { THREE } else { TWO })).collect();
        vars.extend(self.optional.iter().map(|&o| (o, KEEP)));
        vars
    }

    /// The plan of least cost within every limit: every combination for a few candidates, the
    /// exact 0-1 program up to [`PROGRAM_NODES`], the eviction path past it (or where the
    /// program fails); with a proven lower bound on the cost where the plan is not proven
    /// optimal.
    fn solve(&self) -> std::result::Result<Solved, Infeasible> {
        self.solve_graded(true, None, None).map(proved)
    }

    /// The plan of fewest bytes any choice keeps within the region limits (the global limit is
    /// 0), without a bound to grade it; and, where the eviction path decides, the lower bound
    /// already started (its network and first cut read no limit), for the solve that follows.
    fn fewest_bytes(&self) -> (std::result::Result<Solved, Infeasible>, Option<Bound>) {
        if self.method() != Method::Path {
            return (self.solve_graded(false, None, None).map(proved), None);
        }
        let (path, bound) = self.path_and_bound();
        (path.map(|(a, o)| (a, o, None)), bound)
    }

    /// How [`Problem::solve`] finds its plan (whatever the limits).
    fn method(&self) -> Method {
        let vars = self.variables();
        let combos = vars.iter().try_fold(1u64, |acc, (_, o)| acc.checked_mul(o.len() as u64));
        let enumerate = self.candidates.len() <= EXACT_CANDIDATES
            && combos.is_some_and(|c| c.saturating_mul(self.order.len() as u64) <= EXACT_WORK);
        match search() {
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
    fn solve_graded<'s>(
        &self,
        grade: bool,
        started: Option<Bound>,
        prove_in: Option<(&'s Scope<'s, 'a>, Arc<Problem<'a>>)>,
    ) -> std::result::Result<Graded<'s>, Infeasible> {
        match self.method() {
            Method::Enumerate => return self.solve_exact(&self.variables()).map(|(a, o)| (a, o, Grade::Known(None))),
            Method::Program => {
                if let Some(answer) = self.solve_program() {
                    return answer.map(|(a, o, bound)| (a, o, Grade::Known(bound)));
                }
            }
            Method::Path => {}
        }
        // The bound only grades the plan: it is computed beside the eviction path, on a second
        // thread where there is one (each is about a second on a 10⁶-node graph).
        if !grade {
            return self.solve_heuristic().map(|(a, o)| (a, o, Grade::Known(None)));
        }
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
            (Some(bound), Some((scope, this))) if crate::par::second_cpu() => {
                let found = Arc::clone(&plan_found);
                let proof = scope.spawn(move || bound.finish(&this, &found));
                let (at_hand, offloaded) = plan()?;
                Ok((at_hand, offloaded, Grade::Proving(proof)))
            }
            (started, _) => {
                let bound = || started.map_or(0.0, |bound| bound.finish(self, &plan_found));
                let (plan, bound) = crate::par::join(plan, bound);
                let (at_hand, offloaded) = plan?;
                Ok((at_hand, offloaded, Grade::Known(Some(bound))))
            }
        }
    }

    /// The cheaper of two of the search's plans (`first` on equal cost, or where `second`
    /// failed). Each is the first point within the limits along a path of plans that does not
    /// depend on them, so the choice keeps saved bytes from rising as the limits shrink: where
    /// `first` won, a smaller limit it still meets gives it again, and it costs less than any
    /// later point of the other path.
    fn cheaper(&self, first: Found, second: Found) -> Found {
        let (first, second) = match (first, second) {
            (Ok(first), Ok(second)) => (first, second),
            (Err(_), Ok(second)) => return Ok(second),
            (first, _) => return first,
        };
        let mut scratch = vec![false; self.g.len()];
        let mut bytes = vec![0; self.limits.len()];
        let (flops, exposed) = self.eval_into(&first.0, &first.1, &mut scratch, &mut bytes);
        let first_cost = self.cost(flops, exposed);
        let (flops, exposed) = self.eval_into(&second.0, &second.1, &mut scratch, &mut bytes);
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
        match program.solve(self, PROGRAM_SECONDS) {
            Ok(found) => Some(Ok((found.at_hand, found.offloaded, found.bound))),
            Err(milp::Unsolved::Infeasible) => Some(Err(self.infeasible(&program))),
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
        let least = (0..self.limits.len())
            .map(|k| program.least_bytes(self, k, false, PROGRAM_SECONDS).unwrap_or(u64::MAX))
            .collect();
        let least_global_within_regions =
            if self.has_global() { program.least_bytes(self, 0, true, PROGRAM_SECONDS) } else { None };
        Infeasible { least, least_global_within_regions }
    }

    /// [`Problem::solve_heuristic`] and, where there is a global limit, the lower bound started
    /// (its network and first cut, which read no limit): at once where there is a second CPU.
    /// The bound takes longest, so the min-cut and the path follow each other beside it; with
    /// no bound, the min-cut is cut beside the path (each takes a fraction of a second on a
    /// 10⁶-node graph).
    fn path_and_bound(&self) -> (Found, Option<Bound>) {
        if self.has_global() {
            let (bound, path) = crate::par::join(|| Bound::start(self), || self.solve_heuristic());
            (path, Some(bound))
        } else {
            let (path, _) = crate::par::join(|| self.solve_path(), || self.hint());
            (self.or_hint(path), None)
        }
    }

    /// The eviction path, or the min-cut's choice where it fits and costs less.
    fn solve_heuristic(&self) -> Found {
        self.or_hint(self.solve_path())
    }

    /// `path`, or the min-cut's choice where that fits and costs less (or the path found
    /// nothing).
    fn or_hint(&self, path: Found) -> Found {
        let Some(hint) = self.hint() else { return path };
        // Monotone: the hint's bytes are fixed, and the path's first point within a smaller limit
        // is the same point or a later one, which costs no less.
        let offloaded = self.off.fixed.clone();
        let hint_fits = self.fits(&hint.bytes);
        match path {
            Ok((at_hand, off)) if hint_fits => {
                let mut scratch = vec![false; self.g.len()];
                let mut path_bytes = vec![0; self.limits.len()];
                let (flops, exposed) = self.eval_into(&at_hand, &off, &mut scratch, &mut path_bytes);
                if self.cost(hint.flops, hint.exposed).lt(&self.cost(flops, exposed), 0, 0) {
                    Ok((hint.at_hand.clone(), offloaded))
                } else {
                    Ok((at_hand, off))
                }
            }
            Ok(found) => Ok(found),
            Err(_) if hint_fits => Ok((hint.at_hand.clone(), offloaded)),
            Err(mut e) => {
                self.note(&hint.bytes, &mut e);
                Err(e)
            }
        }
    }

    /// The cost of an evaluation: FLOPs outside `BudgetOffload`; recompute plus exposed seconds in it.
    fn cost(&self, flops: u64, exposed: f64) -> Cost {
        if self.off.choose {
            Cost::Time(flops as f64 * self.off.s_per_flop + exposed)
        } else {
            Cost::Flops(flops)
        }
    }

    /// Tracks the least bytes seen per limit, and the least global bytes within region limits.
    fn note(&self, bytes: &[u64], least: &mut Infeasible) {
        for (l, &b) in least.least.iter_mut().zip(bytes) {
            *l = (*l).min(b);
        }
        let regions_ok = bytes.iter().zip(&self.limits).skip(self.has_global() as usize).all(|(b, l)| b <= l);
        if regions_ok && self.has_global() {
            let g = least.least_global_within_regions.map_or(bytes[0], |m| m.min(bytes[0]));
            least.least_global_within_regions = Some(g);
        }
    }

    fn fits(&self, bytes: &[u64]) -> bool {
        bytes.iter().zip(&self.limits).all(|(b, l)| b <= l)
    }

    /// Every combination of choices: least cost, then least device bytes, then the first in
    /// enumeration order — deterministic, so equal problems give equal answers.
    fn solve_exact(&self, vars: &[(NodeId, &[Choice])]) -> Found {
        let mut at_hand = self.base.clone();
        let mut offloaded = self.off.fixed.clone();
        let mut best: Option<((Cost, u64), Vec<u8>)> = None;
        let mut least = Infeasible { least: vec![u64::MAX; self.limits.len()], least_global_within_regions: None };
        let mut scratch = vec![false; self.g.len()];
        let mut bytes = vec![0; self.limits.len()];
        let mut digits = vec![0u8; vars.len()];
        let fixed = &self.off.fixed;
        let apply = |digits: &[u8], at_hand: &mut [bool], offloaded: &mut [bool]| {
            for (&(v, options), &d) in vars.iter().zip(digits) {
                let choice = options[d as usize];
                at_hand[v.index()] = choice != Choice::Recompute;
                offloaded[v.index()] = choice == Choice::Offload || fixed[v.index()];
            }
        };
        loop {
            apply(&digits, &mut at_hand, &mut offloaded);
            let (flops, exposed) = self.eval_into(&at_hand, &offloaded, &mut scratch, &mut bytes);
            self.note(&bytes, &mut least);
            let total: u64 = bytes.first().copied().unwrap_or(0);
            let key = (self.cost(flops, exposed), total);
            if self.fits(&bytes) && best.as_ref().is_none_or(|(b, _)| key.0.lt(&b.0, key.1, b.1)) {
                best = Some((key, digits.clone()));
            }
            // Mixed-radix increment, least significant first (the first candidate).
            let mut k = 0;
            loop {
                if k == vars.len() {
                    let (_, digits) = best.ok_or(least)?;
                    apply(&digits, &mut at_hand, &mut offloaded);
                    return Ok((at_hand, offloaded));
                }
                digits[k] += 1;
                if (digits[k] as usize) < vars[k].1.len() {
                    break;
                }
                digits[k] = 0;
                k += 1;
            }
        }
    }

    /// The eviction path, evaluated incrementally: evicting a value can only add to what the
    /// backward reaches, so each node is reached once over the whole path.
    fn solve_path(&self) -> Found {
        let g = self.g;
        let off = self.off;
        // Each value is evicted the cheaper way: offloaded when allowed and its exposed time is
        // below its recompute time (outside `BudgetOffload`, FLOPs alone rank recomputes).
        let facts = &self.facts;
        let recompute_s = |i: NodeId| facts.flops(i.index()) as f64 * off.s_per_flop;
        let mut forced_optional = vec![false; g.len()];
        for &o in &self.optional {
            forced_optional[o.index()] = true;
        }
        let offload_first = |i: NodeId| {
            off.optional[i.index()] && (forced_optional[i.index()] || off.exposed[i.index()] <= recompute_s(i))
        };
        let order = self.eviction_order.get_or_init(|| {
            // Cheapest eviction per byte first; later nodes first among equals (a total order:
            // no two entries are the same node). The keys are computed once, not per comparison.
            let cost = |i: NodeId| {
                let c = if !off.choose {
                    facts.flops(i.index()) as f64
                } else if offload_first(i) {
                    off.exposed[i.index()]
                } else {
                    recompute_s(i)
                };
                c / facts.bytes(i.index()).max(1) as f64
            };
            let mut keyed: Vec<(f64, NodeId)> =
                self.candidates.iter().chain(&self.optional).map(|&i| (cost(i), i)).collect();
            keyed.sort_unstable_by(|(ka, a), (kb, b)| ka.total_cmp(kb).then(b.cmp(a)));
            keyed.into_iter().map(|(_, i)| i).collect()
        });
        let mut at_hand = self.base.clone();
        let mut offloaded = off.fixed.clone();
        for &c in order {
            at_hand[c.index()] = true;
        }
        let mut reached = vec![false; g.len()];
        let mut bytes = vec![0; self.limits.len()];
        self.eval_into(&at_hand, &offloaded, &mut reached, &mut bytes);
        let mut least = Infeasible { least: vec![u64::MAX; self.limits.len()], least_global_within_regions: None };
        self.note(&bytes, &mut least);
        let mut stack = Vec::new();
        for &v in order {
            if self.fits(&bytes) {
                return Ok((at_hand, offloaded));
            }
            let helps = self.limits_of(v.index()).iter().any(|&k| bytes[k as usize] > self.limits[k as usize]);
            if !helps || offloaded[v.index()] {
                continue;
            }
            if offload_first(v) {
                offloaded[v.index()] = true;
                if reached[v.index()] {
                    for &k in self.limits_of(v.index()) {
                        bytes[k as usize] -= facts.bytes(v.index());
                    }
                }
                self.note(&bytes, &mut least);
                continue;
            }
            at_hand[v.index()] = false;
            if reached[v.index()] {
                for &k in self.limits_of(v.index()) {
                    bytes[k as usize] -= facts.bytes(v.index());
                }
                stack.extend_from_slice(facts.inputs(v.index()));
            }
            while let Some(u) = stack.pop() {
                if reached[u.index()] {
                    continue;
                }
                reached[u.index()] = true;
                if at_hand[u.index()] && offloaded[u.index()] {
                    // In host memory: no device bytes.
                } else if at_hand[u.index()] {
                    for &k in self.limits_of(u.index()) {
                        bytes[k as usize] += facts.bytes(u.index());
                    }
                } else {
                    stack.extend_from_slice(facts.inputs(u.index()));
                }
            }
            self.note(&bytes, &mut least);
        }
        if self.fits(&bytes) {
            Ok((at_hand, offloaded))
        } else {
            Err(least)
        }
    }

    /// The error for an infeasible problem: a region limit that cannot be met, or the global
    /// one with the smallest feasible global budget.
    fn error(&self, g: &PGraph, e: Infeasible) -> Error {
        for (k, scope) in self.scopes.iter().enumerate() {
            if let Some(r) = scope {
                if e.least[k] > self.limits[k] {
                    let fraction = g.regions[r.index()].budget.unwrap_or(1.0);
                    return Error::Invalid(format!(
                        "region {}: budget = {fraction} allows {} bytes of its own values, but its must_save values \
                         alone need {}",
                        g.region_label(*r),
                        self.limits[k],
                        e.least[k]
                    ));
                }
            }
        }
        let limit = self.limits[0];
        match (e.least_global_within_regions, self.scopes.len() > 1) {
            (Some(min), true) => Error::Invalid(format!(
                "a budget of {limit} bytes cannot be met together with the region budgets: the smallest feasible \
                 global budget is {min} bytes"
            )),
            _ => Error::Invalid(format!(
                "a budget of {limit} bytes cannot be met: the smallest feasible budget is {} bytes (must_save \
                 values, region boundaries and other forced saves)",
                e.least_global_within_regions.unwrap_or(e.least[0])
            )),
        }
    }
}

/// Which search decides a budget: the sizes do (`Auto`), or a test asks for one.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Search {
    Auto,
    Program,
    Heuristic,
}

thread_local! {
    /// Set by [`with_search`]: the search every budget on this thread goes through.
    static SEARCH: std::cell::Cell<Search> = const { std::cell::Cell::new(Search::Auto) };
}

fn search() -> Search {
    SEARCH.with(|f| f.get())
}

/// Runs `f` with every budget search on this thread done by `search`, whatever the sizes — so
/// that tests can hold the program against the enumeration of every combination, and the
/// heuristic's bound against the program's optimum.
pub(super) fn with_search<T>(search: Search, f: impl FnOnce() -> T) -> T {
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
    Enumerate,
    Program,
    Path,
}

/// A decision variable's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Recompute,
    Save,
    Offload,
}

/// The search's cost: FLOPs (plain budgets) or seconds (`BudgetOffload`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cost {
    Flops(u64),
    Time(f64),
}

impl Cost {
    /// Whether (self, bytes) comes strictly before (other, other_bytes).
    fn lt(&self, other: &Cost, bytes: u64, other_bytes: u64) -> bool {
        match (self, other) {
            (Cost::Flops(a), Cost::Flops(b)) => (a, bytes) < (b, other_bytes),
            (Cost::Time(a), Cost::Time(b)) => a.total_cmp(b).then(bytes.cmp(&other_bytes)).is_lt(),
            _ => false,
        }
    }
}
