//! `Budget`: the fewest recompute FLOPs with saved bytes within a limit.
//!
//! Candidates are the values whose fate is soft (Prefer tags and untagged values); forced
//! values are always kept and count against the limit, forbidden ones never are. Small problems
//! (up to 20 candidates, on graphs of up to ~1000 relevant nodes) are solved exactly, minimising
//! FLOPs and then bytes. Larger ones follow an eviction path fixed in advance — from saving
//! every candidate to saving none, cheapest recompute per byte first — and take its first point
//! within the limit. Either way the saved
//! bytes never rise when the limit shrinks: an exact optimum that still fits stays optimal,
//! and on the path a smaller limit can only stop later, at fewer bytes than the earlier stop.

use super::{closure, counts_bytes, Budget, Class, PGraph, Reason};
use crate::error::{Error, Result};

/// Exact search for up to this many candidates...
const EXACT_CANDIDATES: usize = 20;
/// ...when `2^candidates × relevant nodes` stays below this (about a second).
const EXACT_WORK: u64 = 1 << 30;

/// The global budget solve.
pub(super) fn solve_global(
    g: &PGraph,
    class: &[Class],
    respect_hand: &[bool],
    budget: Budget,
) -> Result<(Vec<bool>, Vec<Option<Reason>>)> {
    let counted: Vec<bool> = class.iter().map(|&c| counts_bytes(c)).collect();
    let problem = Problem::new(g, class, (0..g.len()).collect(), counted);
    let limit = match budget {
        Budget::Bytes(b) => b,
        Budget::Fraction(f) => {
            if !(0.0..=1.0).contains(&f) {
                return Err(Error::Invalid(format!("a budget fraction must be in [0, 1], got {f}")));
            }
            let lo = problem.eval(&problem.base).0;
            let hi = problem.eval(respect_hand).0.max(lo);
            lo + ((hi - lo) as f64 * f).floor() as u64
        }
    };
    let at_hand = problem.solve(limit).map_err(|min| {
        Error::Invalid(format!(
            "a budget of {limit} bytes cannot be met: the smallest feasible budget is {min} bytes \
             (must_save values, region boundaries and other forced saves)"
        ))
    })?;
    let chosen = (0..g.len()).map(|i| problem.is_candidate[i].then_some(Reason::Budget)).collect();
    Ok((at_hand, chosen))
}

/// Re-solves every region that has its own budget, inside the region, with everything outside
/// it fixed as decided. Parents are solved before children.
pub(super) fn solve_regions(
    g: &PGraph,
    class: &[Class],
    at_hand: &mut Vec<bool>,
    chosen: &mut [Option<Reason>],
) -> Result<()> {
    let reads = g.backward_reads();
    for (r, region) in g.regions.iter().enumerate() {
        let Some(fraction) = region.budget else { continue };
        let r = r as u32;
        let inside: Vec<bool> =
            g.nodes.iter().map(|n| !n.backward && n.region.is_some_and(|nr| within(g, nr, r))).collect();
        // Boundary values aside: they are saved whatever the budget says.
        let counted: Vec<bool> = (0..g.len())
            .map(|i| inside[i] && counts_bytes(class[i]) && !matches!(class[i], Class::Forced(Reason::Boundary(_))))
            .collect();
        let save_everything: u64 = (0..g.len()).filter(|&i| counted[i] && reads[i]).map(|i| g.nodes[i].bytes).sum();
        let limit = (save_everything as f64 * fraction).floor() as u64;
        let mut problem = Problem::new(g, class, (0..g.len()).filter(|&i| inside[i]).collect(), counted);
        for i in (0..g.len()).filter(|&i| !inside[i]) {
            problem.base[i] = at_hand[i];
        }
        let solution = problem.solve(limit).map_err(|min| {
            Error::Invalid(format!(
                "region {}: budget = {fraction} allows {limit} of its {save_everything} save-everything bytes, \
                 but its must_save values alone need {min}",
                g.region_label(r)
            ))
        })?;
        *at_hand = solution;
        for i in (0..g.len()).filter(|&i| problem.is_candidate[i]) {
            chosen[i] = Some(Reason::RegionBudget(r));
        }
    }
    Ok(())
}

fn within(g: &PGraph, mut inner: u32, outer: u32) -> bool {
    loop {
        if inner == outer {
            return true;
        }
        match g.regions.get(inner as usize).and_then(|r| r.parent) {
            Some(p) => inner = p,
            None => return false,
        }
    }
}

/// A budget problem: which candidates to keep, the rest of `base` fixed.
struct Problem<'a> {
    g: &'a PGraph,
    base: Vec<bool>,
    counted: Vec<bool>,
    candidates: Vec<usize>,
    is_candidate: Vec<bool>,
    /// Forward nodes the backward could reach under any choice, users before inputs: the only
    /// nodes an evaluation needs to visit.
    order: Vec<usize>,
    reads: Vec<bool>,
}

impl<'a> Problem<'a> {
    /// Candidates are the soft values among `scope` the backward could need.
    fn new(g: &'a PGraph, class: &[Class], scope: Vec<usize>, counted: Vec<bool>) -> Self {
        let base: Vec<bool> = class.iter().map(|c| matches!(c, Class::Forced(_))).collect();
        let relevant = closure(g, &base).reached;
        let candidates: Vec<usize> =
            scope.into_iter().filter(|&i| relevant[i] && matches!(class[i], Class::Soft(_))).collect();
        let mut is_candidate = vec![false; g.len()];
        for &c in &candidates {
            is_candidate[c] = true;
        }
        let order = (0..g.len()).rev().filter(|&i| relevant[i]).collect();
        Problem { g, base, counted, candidates, is_candidate, order, reads: g.backward_reads() }
    }

    /// (counted saved bytes, recompute FLOPs) with `at_hand`.
    fn eval(&self, at_hand: &[bool]) -> (u64, u64) {
        self.eval_into(at_hand, &mut vec![false; self.g.len()])
    }

    /// [`Problem::eval`] reusing `reached` as scratch (any contents), visiting relevant nodes only:
    /// the closure of an evaluation never leaves them.
    fn eval_into(&self, at_hand: &[bool], reached: &mut [bool]) -> (u64, u64) {
        for &i in &self.order {
            reached[i] = self.reads[i];
        }
        let (mut bytes, mut flops) = (0, 0);
        for &i in &self.order {
            if !reached[i] {
                continue;
            }
            let n = &self.g.nodes[i];
            if at_hand[i] {
                bytes += if self.counted[i] { n.bytes } else { 0 };
            } else {
                flops += n.flops;
                for &x in &n.inputs {
                    reached[x as usize] = true;
                }
            }
        }
        (bytes, flops)
    }

    /// The kept set within `limit` bytes, or the smallest feasible bytes.
    fn solve(&self, limit: u64) -> std::result::Result<Vec<bool>, u64> {
        let c = self.candidates.len();
        let exact = c <= EXACT_CANDIDATES && (1u64 << c).saturating_mul(self.order.len() as u64) <= EXACT_WORK;
        if exact {
            self.solve_exact(limit)
        } else {
            self.solve_path(limit)
        }
    }

    /// Every subset of candidates: least FLOPs, then least bytes, then the first in
    /// enumeration order — deterministic, so equal problems give equal answers.
    fn solve_exact(&self, limit: u64) -> std::result::Result<Vec<bool>, u64> {
        let mut at_hand = self.base.clone();
        let mut best: Option<((u64, u64), u64)> = None;
        let mut min_bytes = u64::MAX;
        let mut scratch = vec![false; self.g.len()];
        for mask in 0u64..(1 << self.candidates.len()) {
            for (k, &c) in self.candidates.iter().enumerate() {
                at_hand[c] = mask & (1 << k) != 0;
            }
            let (bytes, flops) = self.eval_into(&at_hand, &mut scratch);
            min_bytes = min_bytes.min(bytes);
            if bytes <= limit && best.is_none_or(|(key, _)| (flops, bytes) < key) {
                best = Some(((flops, bytes), mask));
            }
        }
        let (_, mask) = best.ok_or(min_bytes)?;
        for (k, &c) in self.candidates.iter().enumerate() {
            at_hand[c] = mask & (1 << k) != 0;
        }
        Ok(at_hand)
    }

    /// The eviction path, evaluated incrementally: evicting a value can only add to what the
    /// backward reaches, so each node is reached once over the whole path.
    fn solve_path(&self, limit: u64) -> std::result::Result<Vec<bool>, u64> {
        let g = self.g;
        let mut order = self.candidates.clone();
        // Cheapest recompute per byte first; later nodes first among equals.
        order.sort_by(|&a, &b| {
            let cost = |i: usize| g.nodes[i].flops as f64 / g.nodes[i].bytes.max(1) as f64;
            cost(a).total_cmp(&cost(b)).then(b.cmp(&a))
        });
        let mut at_hand = self.base.clone();
        for &c in &order {
            at_hand[c] = true;
        }
        let mut reached = closure(g, &at_hand).reached;
        let (mut bytes, _) = self.eval(&at_hand);
        if bytes <= limit {
            return Ok(at_hand);
        }
        let mut min_bytes = bytes;
        let mut stack = Vec::new();
        for &v in &order {
            at_hand[v] = false;
            if reached[v] {
                bytes -= if self.counted[v] { g.nodes[v].bytes } else { 0 };
                stack.extend(g.nodes[v].inputs.iter().map(|&u| u as usize));
            }
            while let Some(u) = stack.pop() {
                if reached[u] {
                    continue;
                }
                reached[u] = true;
                if at_hand[u] {
                    bytes += if self.counted[u] { g.nodes[u].bytes } else { 0 };
                } else {
                    stack.extend(g.nodes[u].inputs.iter().map(|&x| x as usize));
                }
            }
            min_bytes = min_bytes.min(bytes);
            if bytes <= limit {
                return Ok(at_hand);
            }
        }
        Err(min_bytes)
    }
}
