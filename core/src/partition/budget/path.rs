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
    /// no bound, the min-cut is cut beside the path (each takes a fraction of a second on a
    /// 10⁶-node graph).
    pub(super) fn path_and_bound(&self) -> (Found, Option<Bound>) {
        if self.has_global() {
            let (bound, path) = crate::par::join(|| Bound::start(self), || self.solve_heuristic());
            (path, Some(bound))
        } else {
            let (path, _) = crate::par::join(|| self.solve_path(), || self.hint());
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
                return Ok(Placement { at_hand, offloaded });
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
            Ok(Placement { at_hand, offloaded })
        } else {
            Err(least)
        }
    }
}
