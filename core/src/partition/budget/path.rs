//! The eviction path: from keeping every candidate to keeping none, cheapest recompute (or
//! transfer) per byte first, evicting only values that count against a limit still exceeded;
//! its first point within every limit is the plan, weighed against the min-cut's choice.

use super::bound::Bound;
use super::problem::{Found, Infeasible, Placement, Problem};
use crate::graph::NodeId;

impl Problem<'_> {
    /// [`Problem::solve_heuristic`] and, where there is a global limit, the lower bound started
    /// (its network and first cut, which read no limit): at once where there is a second CPU.
    /// The bound takes longest, so the min-cut and the path follow each other beside it; with
    /// no bound, the min-cut is cut beside the path.
    pub(super) fn path_and_bound(&self) -> (Found, Option<Bound>) {
        if self.has_global() {
            let (bound, path) = crate::concurrent::join(|| Bound::start(self), || self.solve_heuristic());
            (path, Some(bound))
        } else {
            let (path, _) = crate::concurrent::join(|| self.solve_path(), || self.hint());
            (self.or_hint(path), None)
        }
    }

    /// The eviction path, or the min-cut's choice where it fits and costs less.
    pub(super) fn solve_heuristic(&self) -> Found {
        self.or_hint(self.solve_path())
    }

    /// `path`, or the min-cut's choice where that fits and costs less (or the path found
    /// nothing).
    pub(super) fn or_hint(&self, path: Found) -> Found {
        let Some(hint) = self.hint() else { return path };
        // Monotone: the hint's bytes are fixed, and the path's first point within a smaller limit
        // is the same point or a later one, which costs no less.
        let offloaded = self.off.fixed.clone();
        let hint_fits = self.fits(&hint.bytes);
        match path {
            Ok(path) if hint_fits => {
                let mut scratch = vec![false; self.g.len()];
                let mut path_bytes = vec![0; self.limits.len()];
                let (flops, exposed) = self.eval_into(&path.at_hand, &path.offloaded, &mut scratch, &mut path_bytes);
                if self.cost(hint.flops, hint.exposed).lt(&self.cost(flops, exposed), 0, 0) {
                    Ok(Placement { at_hand: hint.at_hand.clone(), offloaded })
                } else {
                    Ok(path)
                }
            }
            Ok(found) => Ok(found),
            Err(_) if hint_fits => Ok(Placement { at_hand: hint.at_hand.clone(), offloaded }),
            Err(mut e) => {
                self.note(&hint.bytes, &mut e);
                Err(e)
            }
        }
    }

    /// The eviction path, evaluated incrementally: evicting a value can only add to what the
    /// backward reaches, so each node is reached once over the whole path.
    pub(super) fn solve_path(&self) -> Found {
        let offload_first = self.offload_first();
        let order = self.eviction_order(&offload_first);
        let mut at_hand = self.base.clone();
        for &c in order {
            at_hand[c.index()] = true;
        }
        let mut walk = Walk {
            plan: Placement { at_hand, offloaded: self.off.fixed.clone() },
            reached: vec![false; self.g.len()],
            bytes: vec![0; self.limits.len()],
            stack: Vec::new(),
        };
        self.eval_into(&walk.plan.at_hand, &walk.plan.offloaded, &mut walk.reached, &mut walk.bytes);
        let mut least = Infeasible { least: vec![u64::MAX; self.limits.len()], least_global_within_regions: None };
        self.note(&walk.bytes, &mut least);
        for &v in order {
            if self.fits(&walk.bytes) {
                return Ok(walk.plan);
            }
            let helps = self.limits_of(v.index()).iter().any(|&k| walk.bytes[k as usize] > self.limits[k as usize]);
            if !helps || walk.plan.offloaded[v.index()] {
                continue;
            }
            if offload_first(v) {
                walk.offload(self, v);
            } else {
                walk.recompute(self, v);
            }
            self.note(&walk.bytes, &mut least);
        }
        if self.fits(&walk.bytes) {
            Ok(walk.plan)
        } else {
            Err(least)
        }
    }

    /// Whether the path evicts a value by offloading it: each value is evicted the cheaper way,
    /// offloaded when allowed and its exposed time is below its recompute time (a forced value
    /// the solver may offload, always).
    fn offload_first(&self) -> impl Fn(NodeId) -> bool + '_ {
        let mut forced_optional = vec![false; self.g.len()];
        for &o in &self.optional {
            forced_optional[o.index()] = true;
        }
        move |i: NodeId| {
            self.off.optional[i.index()]
                && (forced_optional[i.index()] || self.off.exposed[i.index()] <= self.recompute_s(i))
        }
    }

    /// Seconds to recompute `i` alone.
    fn recompute_s(&self, i: NodeId) -> f64 {
        self.facts.flops(i.index()) as f64 * self.off.s_per_flop
    }

    /// The order the path evicts candidates and optional offloads in, sorted on first use:
    /// cheapest eviction per byte first (outside `BudgetOffload`, FLOPs alone rank recomputes);
    /// later nodes first among equals (a total order: no two entries are the same node).
    fn eviction_order(&self, offload_first: &impl Fn(NodeId) -> bool) -> &[NodeId] {
        let (off, facts) = (self.off, &self.facts);
        self.eviction_order.get_or_init(|| {
            // The keys are computed once, not per comparison.
            let cost = |i: NodeId| {
                let c = if !off.choose {
                    facts.flops(i.index()) as f64
                } else if offload_first(i) {
                    off.exposed[i.index()]
                } else {
                    self.recompute_s(i)
                };
                c / facts.bytes(i.index()).max(1) as f64
            };
            let mut keyed: Vec<(f64, NodeId)> =
                self.candidates.iter().chain(&self.optional).map(|&i| (cost(i), i)).collect();
            keyed.sort_unstable_by(|(ka, a), (kb, b)| ka.total_cmp(kb).then(b.cmp(a)));
            keyed.into_iter().map(|(_, i)| i).collect()
        })
    }
}

/// The eviction path's point: the plan so far, what the backward reaches under it, and the
/// device bytes counted against each limit (always those of `plan` over `reached`).
struct Walk {
    plan: Placement,
    /// Per node, whether the backward reaches it under `plan` (only grows along the path).
    reached: Vec<bool>,
    /// Device bytes counted against each limit.
    bytes: Vec<u64>,
    /// Scratch: the nodes still to reach after a recompute.
    stack: Vec<NodeId>,
}

impl Walk {
    /// Moves `v` (kept) to host memory: its bytes leave the device.
    fn offload(&mut self, p: &Problem<'_>, v: NodeId) {
        self.plan.offloaded[v.index()] = true;
        if self.reached[v.index()] && p.holds(&self.plan.at_hand, &self.reached, v.index()) {
            for &k in p.limits_of(v.index()) {
                self.bytes[k as usize] -= p.facts.bytes(v.index());
            }
        }
    }

    /// Recomputes `v` instead of keeping it: its bytes leave the device and its inputs are
    /// reached, with whatever they reach in turn.
    fn recompute(&mut self, p: &Problem<'_>, v: NodeId) {
        let (at_hand, offloaded, reached) = (&mut self.plan.at_hand, &self.plan.offloaded, &mut self.reached);
        at_hand[v.index()] = false;
        // A base a reached view keeps stays (its bytes too).
        if reached[v.index()] && !p.held_by_view(reached, v.index()) {
            for &k in p.limits_of(v.index()) {
                self.bytes[k as usize] -= p.facts.bytes(v.index());
            }
            self.stack.extend_from_slice(p.facts.inputs(v.index()));
        }
        let retied = p.reach(at_hand, offloaded, reached, &mut self.bytes, &mut self.stack, |_, _, _| false, |_| {});
        if retied {
            p.eval_into(at_hand, offloaded, reached, &mut self.bytes);
        }
    }
}
