//! The budget problem: the candidates, the limits and what counts against each, and the
//! evaluation of a plan against them — what every search ([`super::search`]) reads.

use super::facts::Facts;
use super::Offload;
use crate::error::{Error, Limit};
use crate::graph::{NodeId, RegionId};
use crate::partition::classify::{closure_from, counts_bytes, view_pairs, Class};
use crate::partition::PGraph;

/// Where a plan keeps each value: at hand (saved on the device, or offloaded to the host) or
/// recomputed. Both tables hold one entry per node of the graph; `offloaded[i]` matters only
/// where `at_hand[i]` (an offloaded value is kept, in host memory), and every tagged offload
/// (`Offload::fixed`) is offloaded.
pub(super) struct Placement {
    /// Per node, whether it is at hand when the backward needs it.
    pub(super) at_hand: Vec<bool>,
    /// Per node, whether it is kept in host memory rather than on the device.
    pub(super) offloaded: Vec<bool>,
}

/// A plan one of the searches found, or why none fits.
pub(super) type Found = std::result::Result<Placement, Infeasible>;

/// A plan of the search within every limit, with a proven lower bound on its cost (the
/// problem's [`Cost`], in FLOPs or seconds) where it is not proven optimal (`None`: optimal).
/// The bound never exceeds the cost of the problem's optimum.
pub(super) struct Solved {
    pub(super) plan: Placement,
    pub(super) bound: Option<f64>,
}

/// A budget problem: which candidates to keep, the rest of `base` fixed, within every limit.
/// `limits` and `scopes` have one entry each per limit, the global one first where there is
/// one; the per-node tables cover every node of `g`.
pub(super) struct Problem<'a> {
    /// The partition graph.
    pub(super) g: &'a PGraph,
    /// Per node, whether it is at hand where the search does not decide it.
    pub(super) base: Vec<bool>,
    /// The values the search decides (soft ones the backward may reach), in node order.
    pub(super) candidates: Vec<NodeId>,
    /// Kept values the solver may offload that are not candidates (forced ones, and tied ones
    /// where a view keeps them).
    pub(super) optional: Vec<NodeId>,
    /// What the search knows of offloading.
    pub(super) off: &'a Offload,
    /// Limits: the global one first when there is one, then one per budgeted region.
    pub(super) limits: Vec<u64>,
    /// What each limit is: `None` for the global one.
    pub(super) scopes: Vec<Option<RegionId>>,
    /// Per node, the limits its bytes count against (CSR: `counts[start[i]..start[i + 1]]`;
    /// none past the last node the backward may reach, which the search never asks about).
    pub(super) start: Vec<u32>,
    pub(super) counts: Vec<u32>,
    /// Per node, the innermost budgeted region it lies in.
    pub(super) innermost_budget: Vec<Option<RegionId>>,
    /// Forward nodes the backward could reach under any choice, users before inputs.
    pub(super) order: Vec<usize>,
    /// FLOPs, bytes and inputs of every node in `order` (and of those between them).
    pub(super) facts: Facts,
    /// What the backward reads ([`PGraph::backward_reads`]).
    pub(super) reads: &'a [bool],
    /// The classes to take the min-cut's choice from, where the path compares against it.
    pub(super) hint_class: Option<&'a [Class]>,
    /// The min-cut's choice over the candidates (the rest as `base`) and its evaluation,
    /// computed on first use, beside the bound's first cut or the path.
    pub(super) hint: std::sync::OnceLock<Hint>,
    /// The order the eviction path evicts candidates and optional offloads in, which does not
    /// depend on the limits: sorted on first use, for every path after.
    pub(super) eviction_order: std::sync::OnceLock<Vec<NodeId>>,
    /// A caller's own rows for the exact program, which alone then decides.
    pub(super) extra: Option<&'a super::Extra<'a>>,
    /// The pairs `(base, view)` of bases kept wherever a view kept through them is reached
    /// ([`view_pairs`]), sorted: a tied base ([`Class::Tied`], no candidate) is at hand exactly
    /// there; a candidate base there and wherever the search chooses it.
    pub(super) pairs: Vec<(NodeId, NodeId)>,
    /// The same pairs as `(view, base)`, sorted.
    pub(super) pairs_by_view: Vec<(NodeId, NodeId)>,
}

/// The min-cut's choice ([`Problem::hint_min_cut`]), evaluated with the tagged offloads (which
/// no limit changes: one evaluation serves every solve of the problem).
pub(super) struct Hint {
    /// Per node, whether the min-cut keeps it at hand (candidates; `base` elsewhere).
    pub(super) at_hand: Vec<bool>,
    /// Recompute FLOPs of the choice.
    pub(super) flops: u64,
    /// Exposed transfer seconds of the tagged offloads.
    pub(super) exposed: f64,
    /// Device bytes counted against each limit.
    pub(super) bytes: Vec<u64>,
}

/// Why no choice fits: per limit, the fewest bytes any choice tried needed, and the fewest
/// global bytes among choices that met every region limit.
pub(super) struct Infeasible {
    pub(super) least: Vec<u64>,
    pub(super) least_global_within_regions: Option<u64>,
}

impl<'a> Problem<'a> {
    /// The problem over `base` (with a global limit, only the forced values of `class` are fixed)
    /// for the global limit if `global`, and for the limits of the `budgeted` regions. The
    /// global limit starts unbounded: the caller sets it.
    pub(super) fn new(
        g: &'a PGraph,
        class: &[Class],
        reads: &'a [bool],
        mut base: Vec<bool>,
        global: bool,
        budgeted: &[RegionId],
        off: &'a Offload,
    ) -> Self {
        // Tied values are not at hand here: where none of their views is reached they are
        // recomputed, and the backward reaches what they read.
        let forced: Vec<bool> = class.iter().map(|c| c.is_forced()).collect();
        let relevant = closure_from(g, reads.to_vec(), &forced);
        let innermost_budget = innermost_budgets(g, budgeted);
        let candidates: Vec<NodeId> = g
            .ids()
            .filter(|&i| relevant[i.index()] && matches!(class[i.index()], Class::Soft(_)))
            .filter(|&i| global || innermost_budget[i.index()].is_some())
            .collect();
        let optional: Vec<NodeId> = g
            .ids()
            .filter(|&i| {
                relevant[i.index()]
                    && off.optional[i.index()]
                    && matches!(class[i.index()], Class::Forced(_) | Class::Tied(_))
            })
            .collect();
        if global {
            base = forced;
        }
        let mut scopes: Vec<Option<RegionId>> = if global { vec![None] } else { vec![] };
        scopes.extend(budgeted.iter().map(|&r| Some(r)));
        let (start, counts, facts) = counted_limits(g, class, &relevant, &scopes);
        let limits = region_limits(g, &relevant, &scopes, &start, &counts);
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
            extra: None,
            pairs: Vec::new(),
            pairs_by_view: Vec::new(),
        }
        .with_pairs(view_pairs(g, class))
    }

    fn with_pairs(mut self, pairs: Vec<(NodeId, NodeId)>) -> Self {
        self.pairs_by_view = pairs.iter().map(|&(b, v)| (v, b)).collect();
        self.pairs_by_view.sort_unstable();
        self.pairs = pairs;
        self
    }

    /// Whether value `i` is at hand under the choice `at_hand`, where `reached` is final for
    /// every node above `i` (a sweep from the last node back): as chosen, or where a view kept
    /// through it is reached ([`Problem::pairs`]).
    pub(super) fn holds(&self, at_hand: &[bool], reached: &[bool], i: usize) -> bool {
        at_hand[i] || self.held_by_view(reached, i)
    }

    /// Whether a view kept through `i` is reached.
    pub(super) fn held_by_view(&self, reached: &[bool], i: usize) -> bool {
        self.views_keeping(i).iter().any(|&(_, v)| reached[v.index()])
    }

    /// The pairs `(i, view)` of [`Problem::pairs`] (none unless views are kept through `i`).
    pub(super) fn views_keeping(&self, i: usize) -> &[(NodeId, NodeId)] {
        pairs_of(&self.pairs, i)
    }

    /// Adds the device bytes of value `i` to each limit it counts against.
    pub(super) fn count(&self, bytes: &mut [u64], i: usize) {
        for &k in self.limits_of(i) {
            bytes[k as usize] += self.facts.bytes(i);
        }
    }

    /// For a walk that grows what the backward reaches node by node (the eviction path, the
    /// repair) and has just reached `u` for the first time: whether `u` is a view that now keeps
    /// a base reached before and recomputed (not chosen, and none of its views reached). What
    /// that base's replay reached may no longer be needed, which growing cannot undo: the walk
    /// evaluates its plan anew ([`Problem::eval_into`]) — rarely: views reached stay reached.
    pub(super) fn keeps_anew(&self, at_hand: &[bool], reached: &[bool], u: usize) -> bool {
        pairs_of(&self.pairs_by_view, u).iter().any(|&(_, b)| {
            let b = b.index();
            reached[b]
                && !at_hand[b]
                && self.views_keeping(b).iter().all(|&(_, v)| v.index() == u || !reached[v.index()])
        })
    }

    /// For a walk that grows what the backward reaches (the eviction path, the repair): reaches
    /// what a recompute newly needs, from the values on `stack` (the inputs of the value taken
    /// off hand). Each value not reached yet is reached; `release` may first take it off hand
    /// (the repair recomputes a value where that is cheaper than keeping it); where it is still
    /// held its device bytes are counted (none where offloaded) and `kept` is told, else its
    /// inputs are reached in turn. Returns whether a view reached keeps a base anew
    /// ([`Problem::keeps_anew`]): the walk must then evaluate its plan anew.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reach(
        &self,
        at_hand: &mut [bool],
        offloaded: &[bool],
        reached: &mut [bool],
        bytes: &mut [u64],
        stack: &mut Vec<NodeId>,
        mut release: impl FnMut(&[bool], &[bool], NodeId) -> bool,
        mut kept: impl FnMut(NodeId),
    ) -> bool {
        let mut retied = false;
        while let Some(u) = stack.pop() {
            let i = u.index();
            if reached[i] {
                continue;
            }
            retied |= self.keeps_anew(at_hand, reached, i);
            reached[i] = true;
            if at_hand[i] && release(at_hand, reached, u) {
                at_hand[i] = false;
            }
            let held = self.holds(at_hand, reached, i);
            if held && offloaded[i] {
                // In host memory: no device bytes.
            } else if held {
                self.count(bytes, i);
                kept(u);
            } else {
                stack.extend_from_slice(self.facts.inputs(i));
            }
        }
        retied
    }

    /// With a global budget and no offload choice, the min-cut's choice is one candidate point:
    /// the path is a heuristic on large problems, and the cut keeps the fewest bytes by
    /// construction.
    pub(super) fn hint_min_cut(&mut self, class: &'a [Class]) {
        if self.has_global() && !self.off.choose {
            self.hint_class = Some(class);
        }
    }

    /// The min-cut's choice ([`Problem::hint_min_cut`]), cut and evaluated on first use.
    pub(super) fn hint(&self) -> Option<&Hint> {
        let class = self.hint_class?;
        Some(self.hint.get_or_init(|| {
            let (mut cut, _) = crate::partition::mincut::cut(self.g, class, self.reads);
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
    pub(super) fn limits_of(&self, i: usize) -> &[u32] {
        &self.counts[self.start[i] as usize..self.start[i + 1] as usize]
    }

    /// Device bytes counted against every limit, recompute FLOPs and exposed transfer seconds,
    /// with `at_hand` and `offloaded`; `reached` is scratch (any contents): the closure of an
    /// evaluation never leaves the relevant nodes.
    pub(super) fn eval_into(
        &self,
        at_hand: &[bool],
        offloaded: &[bool],
        reached: &mut [bool],
        bytes: &mut [u64],
    ) -> (u64, f64) {
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
            let held = self.holds(at_hand, reached, i);
            if held && offloaded[i] {
                exposed += self.off.exposed[i];
            } else if held {
                self.count(bytes, i);
            } else {
                flops += self.facts.flops(i);
                for &x in self.facts.inputs(i) {
                    reached[x.index()] = true;
                }
            }
        }
        (flops, exposed)
    }

    /// Device bytes counted against the global limit with `at_hand` and `offloaded` (the
    /// problem has one: every counted value within the backward's reach counts against it).
    pub(super) fn global_bytes(&self, at_hand: &[bool], offloaded: &[bool]) -> u64 {
        debug_assert!(self.has_global(), "global bytes asked of a problem without a global limit");
        let mut reached = vec![false; self.g.len()];
        let mut bytes = vec![0; self.limits.len()];
        self.eval_into(at_hand, offloaded, &mut reached, &mut bytes);
        bytes[0]
    }

    pub(super) fn has_global(&self) -> bool {
        self.scopes.first() == Some(&None)
    }

    /// The options of each decision variable: candidates first (recompute, save, and offload
    /// when allowed), then the optional offloads (save, offload).
    pub(super) fn variables(&self) -> Vec<(NodeId, &'static [Choice])> {
        const TWO: &[Choice] = &[Choice::Recompute, Choice::Save];
        const THREE: &[Choice] = &[Choice::Recompute, Choice::Save, Choice::Offload];
        const KEEP: &[Choice] = &[Choice::Save, Choice::Offload];
        let mut vars: Vec<(NodeId, &'static [Choice])> =
            self.candidates.iter().map(|&c| (c, if self.off.optional[c.index()] { THREE } else { TWO })).collect();
        vars.extend(self.optional.iter().map(|&o| (o, KEEP)));
        vars
    }

    /// The cost of an evaluation: FLOPs outside `BudgetOffload`; recompute plus exposed seconds in it.
    pub(super) fn cost(&self, flops: u64, exposed: f64) -> Cost {
        if self.off.choose {
            Cost::Time(flops as f64 * self.off.s_per_flop + exposed)
        } else {
            Cost::Flops(flops)
        }
    }

    /// Tracks the least bytes seen per limit, and the least global bytes within region limits.
    pub(super) fn note(&self, bytes: &[u64], least: &mut Infeasible) {
        for (l, &b) in least.least.iter_mut().zip(bytes) {
            *l = (*l).min(b);
        }
        let regions_ok = bytes.iter().zip(&self.limits).skip(self.has_global() as usize).all(|(b, l)| b <= l);
        if regions_ok && self.has_global() {
            let g = least.least_global_within_regions.map_or(bytes[0], |m| m.min(bytes[0]));
            least.least_global_within_regions = Some(g);
        }
    }

    pub(super) fn fits(&self, bytes: &[u64]) -> bool {
        bytes.iter().zip(&self.limits).all(|(b, l)| b <= l)
    }

    /// The error for an infeasible problem: a region limit that cannot be met, or the global
    /// one with the smallest feasible global budget.
    pub(super) fn error(&self, g: &PGraph, e: Infeasible) -> Error {
        for (k, scope) in self.scopes.iter().enumerate() {
            if let Some(r) = scope {
                if e.least[k] > self.limits[k] {
                    let fraction = g.regions[r.index()].budget.unwrap_or(1.0);
                    let region = g.region_label(*r);
                    return Error::Infeasible {
                        message: format!(
                            "region {region}: budget = {fraction} allows {} bytes of its own values, but its \
                             must_save values alone need {}",
                            self.limits[k], e.least[k]
                        ),
                        what: Limit::RegionBudget(region),
                        asked: self.limits[k],
                        least: Some(e.least[k]),
                    };
                }
            }
        }
        let limit = self.limits[0];
        let least = e.least_global_within_regions.unwrap_or(e.least[0]);
        let message = if e.least_global_within_regions.is_some() && self.scopes.len() > 1 {
            format!(
                "a budget of {limit} bytes cannot be met together with the region budgets: the smallest feasible \
                 global budget is {least} bytes"
            )
        } else {
            format!(
                "a budget of {limit} bytes cannot be met: the smallest feasible budget is {least} bytes (must_save \
                 values, region boundaries, routing and other values that cannot be recomputed)"
            )
        };
        Error::Infeasible { what: Limit::Budget, asked: limit, least: Some(least), message }
    }
}

/// A decision variable's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Choice {
    /// Not at hand: recomputed where the backward needs it.
    Recompute,
    /// At hand on the device.
    Save,
    /// At hand in host memory.
    Offload,
}

/// The search's cost: FLOPs (plain budgets) or seconds (`BudgetOffload`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Cost {
    /// Recompute FLOPs.
    Flops(u64),
    /// Recompute plus exposed transfer seconds.
    Time(f64),
}

impl Cost {
    /// Whether (self, bytes) comes strictly before (other, other_bytes).
    pub(super) fn lt(&self, other: &Cost, bytes: u64, other_bytes: u64) -> bool {
        match (self, other) {
            (Cost::Flops(a), Cost::Flops(b)) => (a, bytes) < (b, other_bytes),
            (Cost::Time(a), Cost::Time(b)) => a.total_cmp(b).then(bytes.cmp(&other_bytes)).is_lt(),
            _ => false,
        }
    }
}

/// Per node, the innermost region with a budget it lies in (of `budgeted`).
fn innermost_budgets(g: &PGraph, budgeted: &[RegionId]) -> Vec<Option<RegionId>> {
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
    innermost_budget
}

/// The entries of `pairs` (sorted) whose first element is node `i`.
fn pairs_of(pairs: &[(NodeId, NodeId)], i: usize) -> &[(NodeId, NodeId)] {
    if pairs.is_empty() {
        return &[];
    }
    let start = pairs.partition_point(|&(a, _)| a.index() < i);
    let end = start + pairs[start..].partition_point(|&(a, _)| a.index() == i);
    &pairs[start..end]
}

/// Per node, the limits (indices into `scopes`) its bytes count against, as a CSR table
/// (`start`, `counts`), and the facts of the nodes up to the last one the backward may reach.
fn counted_limits(
    g: &PGraph,
    class: &[Class],
    relevant: &[bool],
    scopes: &[Option<RegionId>],
) -> (Vec<u32>, Vec<u32>, Facts) {
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
    (start, counts, facts)
}

/// The limit of each scope: a region's is its fraction of the bytes of its own values the
/// backward may need (those it reaches with only forced values at hand), which no choice
/// exceeds: a budget of 1.0 never constrains. The global one is left unbounded.
fn region_limits(
    g: &PGraph,
    relevant: &[bool],
    scopes: &[Option<RegionId>],
    start: &[u32],
    counts: &[u32],
) -> Vec<u64> {
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
    limits
}
