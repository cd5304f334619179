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

use super::problem::Problem;
use crate::partition::maxflow::{Capacity, FlowNetwork};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Integer units per FLOP in the network's capacities.
const SCALE: f64 = 1024.0;
/// The most cuts one bound takes, and the time it may spend on them.
const CUTS: usize = 6;
const TIME: Duration = Duration::from_secs(1);
/// The cuts a bound takes before it stops for a plan already found: on the graphs measured, the
/// best multiplier was among the first two (the first straddles or steps by four), and each cut
/// costs as much as the min-cut itself.
const CUTS_BEFORE_STOPPING: usize = 2;

/// A proven lower bound on the least cost of a problem within its global limit, under way: the
/// network and its first cut, which needs no limit (its plan is one the search chooses from).
pub(super) struct Bound {
    net: Box<dyn Cuts + Send>,
    start: Instant,
    /// The first multiplier, its cut's value (the least `cost + λ·device bytes`) and that
    /// cut's device bytes.
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
            .map(|c| p.facts.flops(c.index()) as f64 / p.facts.bytes(c.index()).max(1) as f64)
            .collect();
        ratios.sort_by(f64::total_cmp);
        let lambda = ratios.get(ratios.len() / 2).copied().filter(|r| *r > 0.0).unwrap_or(1.0);
        let mut net = networks(p, lambda);
        let value = net.cut(p, lambda);
        let bytes = net.sides(p);
        let first_plan = net.plan(p);
        Bound { net, start, first: (lambda, value, bytes), first_plan }
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
    ///
    /// Each cut at λ bounds the least cost by its value less `λ · limit`; which side of the cut
    /// each value lies on (a sweep over the network, a third of a cut's time) is found only
    /// where another cut follows, to step λ towards the limit.
    pub(super) fn finish(mut self, p: &Problem<'_>, plan_found: &AtomicBool) -> f64 {
        let limit = p.limits[0] as f64;
        let (mut lo, mut hi): (Option<f64>, Option<f64>) = (None, None);
        let (mut lambda, value, mut bytes) = self.first;
        let mut best = value - lambda * limit;
        for k in 2..=CUTS {
            if bytes > limit {
                lo = Some(lambda);
                // Every later multiplier is greater (the search steps up from this one or
                // bisects above it), and a greater multiplier only raises capacities, so the next
                // cut starts from this cut's flow.
                self.net.keep_flow();
            } else {
                hi = Some(lambda);
            }
            lambda = match (lo, hi) {
                (Some(l), Some(h)) => (l * h).sqrt(),
                (Some(l), None) => l * 4.0,
                (None, Some(h)) => h / 4.0,
                (None, None) => lambda,
            };
            best = best.max(self.net.cut(p, lambda) - lambda * limit);
            // Past the first cuts, another only when it should end within the time (each takes
            // about as long as those did) and the plan is not ready.
            let late = k >= CUTS_BEFORE_STOPPING;
            if k == CUTS
                || late && self.start.elapsed().mul_f64((k + 1) as f64 / k as f64) > TIME
                || late && plan_found.load(Ordering::Acquire)
            {
                break;
            }
            bytes = self.net.sides(p);
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

/// What a [`Bound`] asks of its network, whatever its capacity type.
trait Cuts {
    /// The least `cost + λ·device bytes` (FLOPs) over plans that keep every rule but the
    /// limits; from the flow [`Cuts::keep_flow`] kept where its multiplier is at most λ
    /// (capacities only grow from it), else from no flow.
    fn cut(&mut self, p: &Problem<'_>, lambda: f64) -> f64;
    /// After a [`Cuts::cut`]: finds which side of it each value lies on, and returns the device
    /// bytes of its plan.
    fn sides(&mut self, p: &Problem<'_>) -> f64;
    /// Keeps the last cut's flow, for the next cut to start from if its multiplier is not
    /// smaller. Only the next: the flow is the network's own, not a copy (copying the
    /// capacities took longer than the cut it saves).
    fn keep_flow(&mut self);
    /// The plan of the last cut whose [`Cuts::sides`] were found: what is at hand (the
    /// candidates as cut, the rest as the problem's base).
    fn plan(&self, p: &Problem<'_>) -> Vec<bool>;
}

/// `p`'s network, first cut at `lambda`: with `u64` capacities where every capacity the cuts
/// can set sums below 2^63 (nearly always; half the memory), else `u128`. The
/// cuts [`Bound::finish`] takes step the multiplier by four at most [`CUTS`] times, so a
/// `u64` network prices values at no multiplier above `lambda · 4^CUTS` — were a cut to ask for
/// more, its capacities would be lower than asked, which only lowers the bound.
fn networks(p: &Problem<'_>, lambda: f64) -> Box<dyn Cuts + Send> {
    let most = lambda * 4f64.powi(CUTS as i32);
    let candidate = candidates(p);
    let mut finite: u128 = 0;
    for &i in &p.order {
        let (recompute_possible, at_hand_possible) = choices(p, &candidate, i);
        if recompute_possible {
            finite += cap(p.facts.flops(i) as f64) as u128;
        }
        if at_hand_possible {
            finite += cap(keep_cost(p, i, most)) as u128;
        }
    }
    if u64::holds(finite) {
        Box::new(Network::<u64>::new(p, most))
    } else {
        Box::new(Network::<u128>::new(p, f64::INFINITY))
    }
}

/// The network of a [`Bound`], built once: a multiplier changes only the capacities of the
/// edges that price a value at hand, so each cut takes every flow back and sets those — or, from
/// a smaller multiplier's flow, raises them.
struct Network<C: Capacity> {
    net: FlowNetwork<C>,
    /// Each value that may be at hand, with the edge that prices it.
    priced: Vec<(usize, u32)>,
    v_in: Vec<u32>,
    v_out: Vec<u32>,
    /// The greatest multiplier a value is priced at (infinite for `u128`).
    most: f64,
    /// The multiplier of the last cut, and that cut's flow.
    lambda: f64,
    flow: C,
    /// The sink side of the last cut [`Cuts::sides`] was asked for, per network node.
    sink: Vec<bool>,
    /// Whether the next cut may start from the last cut's flow ([`Cuts::keep_flow`]).
    warm: bool,
}

/// Per value, whether it is one of `p`'s candidates.
fn candidates(p: &Problem<'_>) -> Vec<bool> {
    let mut candidate = vec![false; p.g.len()];
    for &c in &p.candidates {
        candidate[c.index()] = true;
    }
    candidate
}

/// Whether value `i` may be recomputed, and whether it may be at hand.
fn choices(p: &Problem<'_>, candidate: &[bool], i: usize) -> (bool, bool) {
    // A tied value may be either (which of its views are reached decides): the bound relaxes it,
    // as it relaxes a candidate's keep where its views are reached.
    let free = candidate[i] || !p.views_keeping(i).is_empty();
    (free || !p.base[i], free || p.base[i])
}

/// What keeping value `i` costs at multiplier λ: its device bytes times λ, or its exposed
/// transfer where offloaded. (Never less at a greater multiplier.)
fn keep_cost(p: &Problem<'_>, i: usize, lambda: f64) -> f64 {
    let bytes = if p.limits_of(i).is_empty() { 0.0 } else { lambda * p.facts.bytes(i) as f64 };
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

impl<C: Capacity> Network<C> {
    fn new(p: &Problem<'_>, most: f64) -> Self {
        let n = p.g.len();
        let candidate = candidates(p);
        let (mut v_in, mut v_out) = (vec![u32::MAX; n], vec![u32::MAX; n]);
        for (k, &i) in p.order.iter().enumerate() {
            v_out[i] = 2 + 2 * k as u32;
            v_in[i] = 3 + 2 * k as u32;
        }
        // Per value: its recompute edge (or the source's), one per input, its pricing edge, and
        // the sink's where the backward reads it.
        let edges = p.order.iter().map(|&i| 3 + p.facts.inputs(i).len()).sum();
        let mut net = FlowNetwork::<C>::with_capacity(2 + 2 * p.order.len(), edges);
        let mut priced = Vec::new();
        for &i in &p.order {
            let (recompute_possible, at_hand_possible) = choices(p, &candidate, i);
            if recompute_possible {
                net.add_edge(SOURCE, v_in[i], cap(p.facts.flops(i) as f64));
                for &x in p.facts.inputs(i) {
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
        Network { net, priced, v_in, v_out, most, lambda: 0.0, flow: C::default(), sink: Vec::new(), warm: false }
    }

    /// The capacity that prices value `i` at multiplier λ (at most at [`Network::most`]).
    fn price(&self, p: &Problem<'_>, i: usize, lambda: f64) -> u64 {
        cap(keep_cost(p, i, lambda.min(self.most)))
    }
}

impl<C: Capacity> Cuts for Network<C> {
    fn cut(&mut self, p: &Problem<'_>, lambda: f64) -> f64 {
        let pushed = if std::mem::take(&mut self.warm) && self.lambda <= lambda {
            for k in 0..self.priced.len() {
                let (i, edge) = self.priced[k];
                let raise = self.price(p, i, lambda).saturating_sub(self.price(p, i, self.lambda));
                self.net.raise_capacity(edge, raise);
            }
            self.flow
        } else {
            self.net.clear_flow();
            for k in 0..self.priced.len() {
                let (i, edge) = self.priced[k];
                self.net.set_capacity(edge, self.price(p, i, lambda));
            }
            C::default()
        };
        self.lambda = lambda;
        self.flow = pushed.saturating_add(self.net.max_flow(SOURCE, SINK));
        self.flow.wide() as f64 / SCALE
    }

    fn sides(&mut self, p: &Problem<'_>) -> f64 {
        let lambda = self.lambda;
        // The plan of the cut: reached values whose `in` stays on the source side are at hand.
        self.sink = self.net.sink_side(SINK);
        let mut bytes = 0.0;
        for &i in &p.order {
            let reached = self.sink[self.v_out[i] as usize];
            let recomputed = self.sink[self.v_in[i] as usize];
            let offloaded =
                p.off.fixed[i] || (p.off.optional[i] && keep_cost(p, i, lambda) < lambda * p.facts.bytes(i) as f64);
            if reached && !recomputed && !offloaded && !p.limits_of(i).is_empty() {
                bytes += p.facts.bytes(i) as f64;
            }
        }
        bytes
    }

    fn keep_flow(&mut self) {
        self.warm = true;
    }

    fn plan(&self, p: &Problem<'_>) -> Vec<bool> {
        let mut plan = p.base.clone();
        for &c in &p.candidates {
            plan[c.index()] = !self.sink[self.v_in[c.index()] as usize];
        }
        plan
    }
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
