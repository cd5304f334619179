//! A proven lower bound on a budget problem's least cost, for the plans the exact program is not
//! run on (very large graphs): the global byte limit is relaxed with a multiplier λ, and the
//! least `cost + λ·(device bytes − limit)` over plans that keep every other rule is a minimum
//! cut — so every λ gives a bound, and a few λ give a good one.
//!
//! The network, per value `i` the backward may reach: `out_i` on the sink side means reached,
//! `in_i` on the sink side recomputed. A recompute costs `f_i` (edge source → `in_i`), a value
//! at hand its device bytes times λ, or its exposed transfer where it may be offloaded, whichever
//! is less (edge `in_i → out_i`; source → `out_i` for values kept whenever reached). A recomputed
//! value reaches its inputs (`out_x → in_j`, infinite) and the backward's reads are reached
//! (`out_i → sink`, infinite). Region limits are dropped, which only lowers the bound. Costs are
//! in FLOPs (exposed seconds as the FLOPs they compute) and scaled to integers; capacities that
//! would overflow are cut to the largest integer, which also only lowers the bound.

use super::Problem;
use crate::partition::maxflow::FlowNetwork;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Integer units per FLOP in the network's capacities.
const SCALE: f64 = 1024.0;
/// The most cuts one bound takes, and the time it may spend on them.
const CUTS: usize = 6;
const TIME: Duration = Duration::from_secs(1);
/// The cuts a bound takes before it stops for a plan already found: on the graphs measured, the
/// best multiplier was among the first two (the first straddles or steps by four), and each cut
/// of a 10⁶-node graph takes about a quarter of a second.
const CUTS_BEFORE_STOPPING: usize = 2;

/// A proven lower bound on the least cost of a problem within its global limit, under way: the
/// network and its first cut, which needs no limit — a caller still computing the limit (a
/// budget fraction's) can take it beside that work.
pub(super) struct Bound {
    net: Network,
    start: Instant,
    /// The first multiplier and its cut's cost and device bytes.
    first: (f64, f64, f64),
    /// The first cut's plan: what is at hand (the candidates as cut, the rest as the problem's
    /// base).
    first_plan: Vec<bool>,
}

impl Bound {
    /// Builds `p`'s network and cuts it at the first multiplier: the median recompute-per-byte of
    /// the candidates (1 where that is 0). `p`'s global limit is not read.
    pub(super) fn start(p: &Problem<'_>) -> Bound {
        let start = Instant::now();
        let mut ratios: Vec<f64> = p
            .candidates
            .iter()
            .map(|c| p.g.nodes[c.index()].flops as f64 / p.g.nodes[c.index()].bytes.max(1) as f64)
            .collect();
        ratios.sort_by(f64::total_cmp);
        let lambda = ratios.get(ratios.len() / 2).copied().filter(|r| *r > 0.0).unwrap_or(1.0);
        let mut net = Network::new(p);
        let (cost, bytes) = net.cut(p, lambda, None);
        let mut first_plan = p.base.clone();
        for &c in &p.candidates {
            first_plan[c.index()] = !net.sink[net.v_in[c.index()] as usize];
        }
        Bound { net, start, first: (lambda, cost, bytes), first_plan }
    }

    /// The plan of the first cut, which keeps every rule but the limits, and depends on `p`'s
    /// candidates and costs alone (not on its limits); taken out, as the rest of the bound does
    /// not need it.
    pub(super) fn take_first_plan(&mut self) -> Vec<bool> {
        std::mem::take(&mut self.first_plan)
    }

    /// The best lower bound a few multipliers give on the least cost of `p` within its global
    /// limit, in `p`'s cost units (FLOPs, or seconds under `BudgetOffload`): from the first cut,
    /// λ is stepped by factors of four until the cuts' bytes straddle the limit, then bisected in
    /// log space. Once `plan_found` is set (the plan it grades is ready), it stops after
    /// [`CUTS_BEFORE_STOPPING`] cuts rather than keep the caller waiting.
    pub(super) fn finish(mut self, p: &Problem<'_>, plan_found: &AtomicBool) -> f64 {
        let limit = p.limits[0] as f64;
        // The flow of the greatest multiplier whose cut kept more than the limit: every later
        // multiplier is greater (the search steps up from it or bisects above it), and a greater
        // multiplier only raises capacities, so each later cut starts from that flow.
        let mut warm: Option<Warm> = None;
        let (mut lo, mut hi): (Option<f64>, Option<f64>) = (None, None);
        let mut best = 0.0f64;
        let (mut lambda, mut cost, mut bytes) = self.first;
        for k in 1..=CUTS {
            best = best.max(cost + lambda * (bytes - limit));
            if bytes > limit {
                lo = Some(lambda);
                warm = Some(self.net.warm(lambda, warm.take()));
            } else {
                hi = Some(lambda);
            }
            lambda = match (lo, hi) {
                (Some(l), Some(h)) => (l * h).sqrt(),
                (Some(l), None) => l * 4.0,
                (None, Some(h)) => h / 4.0,
                (None, None) => lambda,
            };
            // Past the first cuts, another only when it should end within the time (each takes
            // about as long as those did) and the plan is not ready.
            let late = k >= CUTS_BEFORE_STOPPING;
            if k == CUTS
                || late && self.start.elapsed().mul_f64((k + 1) as f64 / k as f64) > TIME
                || late && plan_found.load(Ordering::Acquire)
            {
                break;
            }
            (cost, bytes) = self.net.cut(p, lambda, warm.as_ref().filter(|w| w.lambda <= lambda));
        }
        let bound = best.max(0.0);
        if p.off.choose {
            bound * p.off.s_per_flop
        } else {
            bound
        }
    }
}

/// Index of the source and sink in the network.
const SOURCE: u32 = 0;
const SINK: u32 = 1;

/// The network of a [`Bound`], built once: a multiplier changes only the capacities of the
/// edges that price a value at hand, so each cut takes every flow back and sets those — or, from
/// a smaller multiplier's flow, raises them.
struct Network {
    net: FlowNetwork,
    /// Each value that may be at hand, with the edge that prices it.
    priced: Vec<(usize, u32)>,
    v_in: Vec<u32>,
    v_out: Vec<u32>,
    /// The value of the last cut's flow.
    flow: u128,
    /// The last cut's sink side, per network node.
    sink: Vec<bool>,
}

impl Network {
    fn new(p: &Problem<'_>) -> Self {
        let n = p.g.len();
        let mut candidate = vec![false; n];
        for &c in &p.candidates {
            candidate[c.index()] = true;
        }
        let (mut v_in, mut v_out) = (vec![u32::MAX; n], vec![u32::MAX; n]);
        let mut count = 2u32;
        for &i in &p.order {
            v_out[i] = count;
            v_in[i] = count + 1;
            count += 2;
        }
        // Per value: its recompute edge (or the source's), one per input, its pricing edge, and
        // the sink's where the backward reads it.
        let edges = p.order.iter().map(|&i| 3 + p.g.nodes[i].inputs.len()).sum();
        let mut net = FlowNetwork::with_capacity(count as usize, edges);
        let mut priced = Vec::new();
        for &i in &p.order {
            let node = &p.g.nodes[i];
            let at_hand_possible = candidate[i] || p.base[i];
            let recompute_possible = candidate[i] || !p.base[i];
            if recompute_possible {
                net.add_edge(SOURCE, v_in[i], cap(node.flops as f64));
                for &x in &node.inputs {
                    if v_out[x.index()] != u32::MAX {
                        net.add_infinite_edge(v_out[x.index()], v_in[i]);
                    }
                }
            } else {
                net.add_infinite_edge(SOURCE, v_in[i]);
            }
            if at_hand_possible {
                priced.push((i, net.add_edge(v_in[i], v_out[i], 0)));
            } else {
                net.add_infinite_edge(v_in[i], v_out[i]);
            }
            if p.reads[i] {
                net.add_infinite_edge(v_out[i], SINK);
            }
        }
        Network { net, priced, v_in, v_out, flow: 0, sink: Vec::new() }
    }

    /// What keeping value `i` costs at multiplier λ: its device bytes times λ, or its exposed
    /// transfer where offloaded.
    fn keep_cost(p: &Problem<'_>, i: usize, lambda: f64) -> f64 {
        let bytes = if p.limits_of(i).is_empty() { 0.0 } else { lambda * p.g.nodes[i].bytes as f64 };
        let exposed = p.off.exposed[i] / p.off.s_per_flop;
        if p.off.fixed[i] {
            if p.off.choose {
                exposed
            } else {
                0.0
            }
        } else if p.off.optional[i] {
            bytes.min(exposed)
        } else {
            bytes
        }
    }

    /// The least `cost + λ·device bytes` (FLOPs) over plans that keep every rule but the
    /// limits, and that plan's device bytes; from `warm`'s flow where there is one (its
    /// multiplier is at most λ), else from no flow.
    fn cut(&mut self, p: &Problem<'_>, lambda: f64, warm: Option<&Warm>) -> (f64, f64) {
        let pushed = match warm {
            Some(w) => {
                debug_assert!(w.lambda <= lambda, "a warm start needs capacities that only grow");
                self.net.restore(&w.residual);
                for k in 0..self.priced.len() {
                    let (i, edge) = self.priced[k];
                    let raise = cap(Self::keep_cost(p, i, lambda)).saturating_sub(cap(Self::keep_cost(p, i, w.lambda)));
                    self.net.raise_capacity(edge, raise);
                }
                w.flow
            }
            None => {
                self.net.clear_flow();
                for k in 0..self.priced.len() {
                    let (i, edge) = self.priced[k];
                    self.net.set_capacity(edge, cap(Self::keep_cost(p, i, lambda)));
                }
                0
            }
        };
        self.flow = pushed.saturating_add(self.net.max_flow(SOURCE, SINK));
        let value = self.flow as f64 / SCALE;
        // The plan of that cut: reached values whose `in` stays on the source side are at hand.
        self.sink = self.net.sink_side(SINK);
        let mut bytes = 0.0;
        for &i in &p.order {
            let reached = self.sink[self.v_out[i] as usize];
            let recomputed = self.sink[self.v_in[i] as usize];
            let offloaded = p.off.fixed[i]
                || (p.off.optional[i] && Self::keep_cost(p, i, lambda) < lambda * p.g.nodes[i].bytes as f64);
            if reached && !recomputed && !offloaded && !p.limits_of(i).is_empty() {
                bytes += p.g.nodes[i].bytes as f64;
            }
        }
        (value - lambda * bytes, bytes)
    }

    /// The last cut's flow, to start cuts at greater multipliers from (reusing `old`'s memory).
    fn warm(&self, lambda: f64, old: Option<Warm>) -> Warm {
        let mut residual = old.map(|w| w.residual).unwrap_or_default();
        residual.clear();
        residual.extend_from_slice(self.net.capacities());
        Warm { lambda, residual, flow: self.flow }
    }
}

/// A maximum flow at multiplier `lambda`: the residual capacities and the flow's value.
struct Warm {
    lambda: f64,
    residual: Vec<u128>,
    flow: u128,
}

/// A cost in FLOPs as an integer capacity; capacities that would overflow are cut to the
/// largest integer, which only lowers the bound.
fn cap(x: f64) -> u64 {
    let scaled = (x * SCALE).floor();
    if scaled >= u64::MAX as f64 {
        u64::MAX
    } else {
        scaled.max(0.0) as u64
    }
}
