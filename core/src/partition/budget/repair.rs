//! The bound's first cut, made to fit: a third plan beside the eviction path and the min-cut.
//!
//! The Lagrangian cut at the bound's first multiplier keeps every rule but the limits, and is
//! often far cheaper than the path's plan while keeping a little more than the limit
//! (docs/performance.md, "Partition").
//! Its repair evicts values one at a time, each time the value whose eviction adds the least
//! recompute per device byte it frees (its own FLOPs and those of the values it then needs
//! recomputed, against its bytes less those of the kept values it then needs), until every limit
//! is met. The order depends on the plan and the costs alone, never on the limits, so the repair
//! is the first point within them along one fixed path — which is what keeps saved bytes from
//! rising as the limits shrink when the search takes the cheapest of its plans
//! ([`Problem::cheaper`]).

use super::problem::{Found, Infeasible, Placement, Problem};
use crate::graph::NodeId;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The most nodes one eviction's price may look at: a value whose eviction would need more
/// recomputed is not evicted by the repair (the path and the min-cut still cover such plans).
const CASCADE: usize = 256;

/// An eviction's price: recompute FLOPs added per device byte freed, then the later node first
/// (as the path breaks ties).
#[derive(Clone, Copy, PartialEq)]
struct Price {
    per_byte: f64,
    node: NodeId,
    /// Whether the values at hand that the recompute needs and the backward does not yet reach
    /// are recomputed too (rather than kept, at their bytes).
    deep: bool,
}

impl Eq for Price {}

impl Ord for Price {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.per_byte.total_cmp(&other.per_byte).then(other.node.cmp(&self.node)).then(self.deep.cmp(&other.deep))
    }
}

impl PartialOrd for Price {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The repair's state: what is at hand, what the backward reaches, and the bytes per limit.
struct State<'p, 'a> {
    p: &'p Problem<'a>,
    /// Per node, whether the search decides it.
    candidate: Vec<bool>,
    at_hand: Vec<bool>,
    offloaded: Vec<bool>,
    reached: Vec<bool>,
    bytes: Vec<u64>,
    /// Scratch for pricing: the nodes a price walk has visited, by stamp.
    seen: Vec<u32>,
    stamp: u32,
    stack: Vec<NodeId>,
}

impl State<'_, '_> {
    /// The price of evicting `v` now, the cheaper of keeping or recomputing the values at hand
    /// its recompute newly needs, or `None` where neither frees a device byte within
    /// [`CASCADE`] nodes.
    fn price(&mut self, v: NodeId) -> Option<Price> {
        let kept = self.price_as(v, false);
        let deep = self.price_as(v, true);
        match (kept, deep) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a value an eviction's recompute newly needs is recomputed rather than kept: one
    /// not at hand always; a candidate at hand whose bytes count, only by a `deep` eviction.
    fn recomputed_when_needed(&self, u: NodeId, deep: bool) -> bool {
        recomputed_when_needed(self.p, &self.candidate, &self.offloaded, (&self.at_hand, &self.reached), u, deep)
    }

    fn price_as(&mut self, v: NodeId, deep: bool) -> Option<Price> {
        let facts = &self.p.facts;
        if self.stamp == u32::MAX {
            // Stamps start over rather than wrap onto marks still in `seen`.
            self.seen.fill(0);
            self.stamp = 0;
        }
        self.stamp += 1;
        let (mut flops, mut added) = (facts.flops(v.index()) as f64, 0u64);
        self.stack.clear();
        self.stack.extend_from_slice(facts.inputs(v.index()));
        let mut walked = 0;
        while let Some(u) = self.stack.pop() {
            if self.reached[u.index()] || self.seen[u.index()] == self.stamp {
                continue;
            }
            self.seen[u.index()] = self.stamp;
            walked += 1;
            if walked > CASCADE {
                return None;
            }
            if self.recomputed_when_needed(u, deep) {
                flops += facts.flops(u.index()) as f64;
                self.stack.extend_from_slice(facts.inputs(u.index()));
            } else if !self.offloaded[u.index()] && self.counts_globally(u) {
                added += facts.bytes(u.index());
            }
        }
        let freed = facts.bytes(v.index()).checked_sub(added).filter(|&b| b > 0)?;
        Some(Price { per_byte: flops / freed as f64, node: v, deep })
    }

    /// Whether `v`'s bytes count against the global limit (the first).
    fn counts_globally(&self, v: NodeId) -> bool {
        counts_globally(self.p, v)
    }

    /// Evicts `v` (at hand and reached) as `price` priced it: its bytes leave, and what
    /// recomputing it needs is reached; values at hand it reaches anew go to `newly_kept`.
    fn evict(&mut self, price: Price, newly_kept: &mut Vec<NodeId>) {
        let facts = &self.p.facts;
        let v = price.node;
        self.at_hand[v.index()] = false;
        for &k in self.p.limits_of(v.index()) {
            self.bytes[k as usize] -= facts.bytes(v.index());
        }
        self.stack.clear();
        self.stack.extend_from_slice(facts.inputs(v.index()));
        let (p, candidate, offloaded, deep) = (self.p, &self.candidate, &self.offloaded, price.deep);
        let retied = p.reach(
            &mut self.at_hand,
            offloaded,
            &mut self.reached,
            &mut self.bytes,
            &mut self.stack,
            |at_hand, reached, u| recomputed_when_needed(p, candidate, offloaded, (at_hand, reached), u, deep),
            |u| newly_kept.push(u),
        );
        if retied {
            self.p.eval_into(&self.at_hand, &self.offloaded, &mut self.reached, &mut self.bytes);
            // Candidates the fresh reach holds may be new to the queue (those queued before are
            // priced again when they come up).
            newly_kept.clear();
            newly_kept.extend((0..self.at_hand.len()).map(NodeId::from_index).filter(|&u| self.candidate[u.index()]));
        }
    }

    /// Whether evicting `v` could free device bytes: a candidate at hand, on the device,
    /// reached, and not kept by a reached view.
    fn evictable(&self, v: NodeId) -> bool {
        self.at_hand[v.index()]
            && !self.offloaded[v.index()]
            && self.reached[v.index()]
            && self.counts_globally(v)
            && !self.p.held_by_view(&self.reached, v.index())
    }
}

/// [`State::recomputed_when_needed`] over the parts of the state it reads, for the walk of an
/// eviction, which holds the rest of the state mutably.
fn recomputed_when_needed(
    p: &Problem<'_>,
    candidate: &[bool],
    offloaded: &[bool],
    (at_hand, reached): (&[bool], &[bool]),
    u: NodeId,
    deep: bool,
) -> bool {
    !p.holds(at_hand, reached, u.index())
        || deep && !offloaded[u.index()] && counts_globally(p, u) && candidate[u.index()]
}

/// Whether value `v`'s bytes count against the global limit.
fn counts_globally(p: &Problem<'_>, v: NodeId) -> bool {
    p.limits_of(v.index()).first() == Some(&0)
}

impl Problem<'_> {
    /// `at_hand` (a plan that keeps every rule but the limits) evicted value by value, cheapest
    /// recompute per freed byte first, to the first point within every limit (see the module
    /// docs). Plain budgets only: offloads stay as tagged.
    pub(super) fn repair(&self, at_hand: Vec<bool>) -> Found {
        let n = self.g.len();
        let mut candidate = vec![false; n];
        for &c in &self.candidates {
            candidate[c.index()] = true;
        }
        let mut state = State {
            p: self,
            candidate,
            at_hand,
            offloaded: self.off.fixed.clone(),
            reached: vec![false; n],
            bytes: vec![0; self.limits.len()],
            seen: vec![0; n],
            stamp: 0,
            stack: Vec::new(),
        };
        self.eval_into(&state.at_hand, &state.offloaded, &mut state.reached, &mut state.bytes);
        let mut least = Infeasible { least: vec![u64::MAX; self.limits.len()], least_global_within_regions: None };
        let mut queue: BinaryHeap<Reverse<Price>> = BinaryHeap::new();
        for &c in &self.candidates {
            if state.evictable(c) {
                queue.extend(state.price(c).map(Reverse));
            }
        }
        let mut newly_kept = Vec::new();
        loop {
            self.note(&state.bytes, &mut least);
            if self.fits(&state.bytes) {
                return Ok(Placement { at_hand: state.at_hand, offloaded: state.offloaded });
            }
            // The cheapest eviction, its price brought up to date: taken when it still comes
            // first, else queued again at its present price.
            let Some(Reverse(queued)) = queue.pop() else { return Err(least) };
            let v = queued.node;
            if !state.evictable(v) {
                continue;
            }
            let Some(now) = state.price(v) else { continue };
            if queue.peek().is_some_and(|Reverse(next)| *next < now) {
                queue.push(Reverse(now));
                continue;
            }
            state.evict(now, &mut newly_kept);
            // Values the eviction brought back into the backward's reach can now be evicted.
            for u in newly_kept.drain(..) {
                if state.candidate[u.index()] && state.evictable(u) {
                    queue.extend(state.price(u).map(Reverse));
                }
            }
        }
    }
}
