//! Maximum flow by Dinic's algorithm over compressed (CSR) adjacency arrays.
//!
//! Partition-shaped networks (a chain of split nodes per forward value, infinite dependency
//! edges) have short augmenting paths, where Dinic's blocking flows finish in a few phases.
//! Edges are stored in pairs (`e`, `e ^ 1`): forward and residual, so that an edge's tail is its
//! twin's head and no tail is stored.
//!
//! Capacities are a [`Capacity`]: `u128` holds any network (finite edges carry `u64`, so any sum
//! of them, at most 2^32 edges, stays below 2^96, far under its infinity), and `u64` holds every
//! network whose finite capacities sum below 2^63 — in half the memory (docs/performance.md,
//! "Partition"). Either way an infinite edge never saturates and no sum overflows.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{AddAssign, SubAssign};

/// The capacity of an edge no cut may cross, in the default `u128` network: above any sum of
/// finite capacities.
pub const INFINITE: u128 = u128::MAX / 2;

/// The integer type of a [`FlowNetwork`]'s capacities and flows: `u128`, or `u64` where the
/// network's finite capacities sum below 2^63 ([`Capacity::INFINITE`] for `u64`). Under that
/// rule every residual capacity is below `2 · INFINITE`, so no addition overflows and an infinite
/// edge, which loses at most the finite total to flows, never saturates.
pub trait Capacity: Copy + Ord + Default + Debug + AddAssign + SubAssign + Send + Sync + 'static {
    /// The capacity of an edge no cut may cross; finite capacities must sum below it.
    const INFINITE: Self;
    /// A finite capacity.
    fn of(bytes: u64) -> Self;
    /// As `u128`, for totals.
    fn wide(self) -> u128;
    /// `self + other`, or the type's largest value past it.
    fn saturating_add(self, other: Self) -> Self;
    /// Whether a network whose finite capacities sum to `finite` may use this type.
    fn holds(finite: u128) -> bool {
        finite < Self::INFINITE.wide()
    }
}

impl Capacity for u64 {
    const INFINITE: u64 = 1 << 63;
    fn of(bytes: u64) -> u64 {
        bytes
    }
    fn wide(self) -> u128 {
        self as u128
    }
    fn saturating_add(self, other: u64) -> u64 {
        u64::saturating_add(self, other)
    }
}

impl Capacity for u128 {
    const INFINITE: u128 = INFINITE;
    fn of(bytes: u64) -> u128 {
        bytes as u128
    }
    fn wide(self) -> u128 {
        self
    }
    fn saturating_add(self, other: u128) -> u128 {
        u128::saturating_add(self, other)
    }
}

/// A flow network under construction, then solved; capacities are `C` (`u128` unless the caller
/// knows its finite capacities sum below 2^63: [`Capacity`]).
#[derive(Clone, Debug, Default)]
pub struct FlowNetwork<C: Capacity = u128> {
    nodes: usize,
    // Indexed by edge id, pairs (2k, 2k + 1): each edge's head and residual capacity.
    to: Vec<u32>,
    cap: Vec<C>,
    // CSR adjacency built by `max_flow`: edges of node v are adj[start[v]..start[v + 1]].
    start: Vec<u32>,
    adj: Vec<u32>,
    // The sum of the finite capacities as added, set and raised (checked against the rule in
    // debug builds).
    #[cfg(debug_assertions)]
    finite: u128,
}

impl<C: Capacity> FlowNetwork<C> {
    /// A network of `nodes` nodes and no edges.
    #[cfg(test)]
    pub fn new(nodes: usize) -> Self {
        FlowNetwork { nodes, ..Default::default() }
    }

    /// A network of `nodes` nodes and no edges, with room for `edges` edges (the vectors of a
    /// large network would otherwise be copied as they grow).
    pub fn with_capacity(nodes: usize, edges: usize) -> Self {
        let pairs = 2 * edges;
        FlowNetwork { nodes, to: Vec::with_capacity(pairs), cap: Vec::with_capacity(pairs), ..Default::default() }
    }

    /// Adds an edge `from → to` of capacity `cap` (and its residual twin); returns the edge's
    /// id, for [`FlowNetwork::set_capacity`].
    pub fn add_edge(&mut self, from: u32, to: u32, cap: u64) -> u32 {
        self.count_finite(0, cap);
        self.push(from, to, C::of(cap))
    }

    /// Adds an edge `from → to` that no cut may cross.
    pub fn add_infinite_edge(&mut self, from: u32, to: u32) {
        self.push(from, to, C::INFINITE);
    }

    fn push(&mut self, from: u32, to: u32, cap: C) -> u32 {
        debug_assert!((from as usize) < self.nodes && (to as usize) < self.nodes);
        debug_assert!(self.start.is_empty(), "edges are added before the first max_flow");
        self.to.extend([to, from]);
        self.cap.extend([cap, C::default()]);
        self.cap.len() as u32 - 2
    }

    /// In debug builds, the finite total with `old` replaced by `new`, checked against the rule
    /// of `C` ([`Capacity`]).
    #[allow(unused_variables)]
    fn count_finite(&mut self, old: u64, new: u64) {
        #[cfg(debug_assertions)]
        {
            self.finite = self.finite - old as u128 + new as u128;
            debug_assert!(C::holds(self.finite), "finite capacities sum past this capacity type's infinity");
        }
    }

    /// The residual capacity of every edge and twin, by edge id — as added before any
    /// [`FlowNetwork::max_flow`], with its flow after one: what [`FlowNetwork::restore`] takes
    /// to solve again from that state.
    #[cfg(test)]
    pub fn capacities(&self) -> &[C] {
        &self.cap
    }

    /// Puts back capacities [`FlowNetwork::capacities`] returned, undoing every flow pushed
    /// since: the network can then be solved again, with other capacities set or raised first.
    #[cfg(test)]
    pub fn restore(&mut self, capacities: &[C]) {
        self.cap.copy_from_slice(capacities);
        #[cfg(debug_assertions)]
        {
            // An infinite edge's pair sums to infinity exactly (a finite one never gets there).
            self.finite =
                self.cap.chunks_exact(2).map(|p| p[0].wide() + p[1].wide()).filter(|&c| c != C::INFINITE.wide()).sum();
        }
    }

    /// Sets the capacity of edge `edge` (an id [`FlowNetwork::add_edge`] returned), with no
    /// flow on it.
    pub fn set_capacity(&mut self, edge: u32, cap: u64) {
        let e = edge as usize;
        let mut old = self.cap[e];
        old += self.cap[e ^ 1];
        self.count_finite(old.wide() as u64, cap);
        self.cap[e] = C::of(cap);
        self.cap[e ^ 1] = C::default();
    }

    /// Takes every flow back: each edge gets its capacity as added (or last set or raised), each
    /// twin none. (An edge's residual capacity plus its twin's is always that capacity.)
    pub fn clear_flow(&mut self) {
        for pair in self.cap.chunks_exact_mut(2) {
            let flow = pair[1];
            pair[0] += flow;
            pair[1] = C::default();
        }
    }

    /// Raises the capacity of edge `edge` by `by`, keeping the flow on it: a flow stays a flow
    /// when capacities only grow, so the next [`FlowNetwork::max_flow`] pushes only what the
    /// larger capacities add.
    pub fn raise_capacity(&mut self, edge: u32, by: u64) {
        self.count_finite(0, by);
        self.cap[edge as usize] += C::of(by);
    }

    fn build_adjacency(&mut self) {
        // Edge e's tail is its twin's head.
        let tail = |e: usize| self.to[e ^ 1] as usize;
        let mut count = vec![0u32; self.nodes + 1];
        for e in 0..self.to.len() {
            count[tail(e) + 1] += 1;
        }
        for v in 0..self.nodes {
            count[v + 1] += count[v];
        }
        let mut adj = vec![0; self.to.len()];
        for e in 0..self.to.len() {
            let slot = &mut count[tail(e)];
            adj[*slot as usize] = e as u32;
            *slot += 1;
        }
        // Each node's counter ended at the next node's start.
        count.rotate_right(1);
        count[0] = 0;
        self.start = count;
        self.adj = adj;
    }

    /// Pushes the maximum flow from `s` to `t` on top of any flow already there; returns what it
    /// pushed (at least [`Capacity::INFINITE`] when only a cut through an infinite edge
    /// separates them). No edge may be added after it.
    pub fn max_flow(&mut self, s: u32, t: u32) -> C {
        if self.start.is_empty() {
            self.build_adjacency();
        }
        let mut total = C::default();
        let mut level = vec![u32::MAX; self.nodes];
        let mut cursor = vec![0u32; self.nodes];
        let mut path = Vec::new();
        while self.levels(s, t, &mut level) {
            cursor.copy_from_slice(&self.start[..self.nodes]);
            loop {
                let pushed = self.augment(s, t, &level, &mut cursor, &mut path);
                if pushed == C::default() {
                    break;
                }
                total = total.saturating_add(pushed);
                if total >= C::INFINITE {
                    return total;
                }
            }
        }
        total
    }

    /// BFS levels from `s` in the residual graph; whether `t` is reachable.
    fn levels(&self, s: u32, t: u32, level: &mut [u32]) -> bool {
        level.fill(u32::MAX);
        level[s as usize] = 0;
        let mut queue = VecDeque::from([s]);
        while let Some(v) = queue.pop_front() {
            for &e in &self.adj[self.start[v as usize] as usize..self.start[v as usize + 1] as usize] {
                let w = self.to[e as usize];
                if self.cap[e as usize] > C::default() && level[w as usize] == u32::MAX {
                    level[w as usize] = level[v as usize] + 1;
                    if w == t {
                        // Every node one level below `t` is labelled by now, and a node at
                        // `t`'s level or past it leads no augmenting path of this phase
                        // anywhere: the rest stay unlabelled.
                        return true;
                    }
                    queue.push_back(w);
                }
            }
        }
        false
    }

    /// One augmenting path along increasing levels (iterative DFS with per-node cursors, so
    /// dead ends are never revisited within a phase); returns the flow pushed. `path` is room
    /// for the path's edges from `s`, kept between calls.
    fn augment(&mut self, s: u32, t: u32, level: &[u32], cursor: &mut [u32], path: &mut Vec<u32>) -> C {
        path.clear();
        let mut v = s;
        loop {
            if v == t {
                let pushed = path.iter().map(|&e| self.cap[e as usize]).min().unwrap_or_default();
                for &e in path.iter() {
                    self.cap[e as usize] -= pushed;
                    self.cap[(e ^ 1) as usize] += pushed;
                }
                return pushed;
            }
            let end = self.start[v as usize + 1];
            let mut advanced = false;
            while cursor[v as usize] < end {
                let e = self.adj[cursor[v as usize] as usize];
                let w = self.to[e as usize];
                if self.cap[e as usize] > C::default() && level[w as usize] == level[v as usize] + 1 {
                    path.push(e);
                    v = w;
                    advanced = true;
                    break;
                }
                cursor[v as usize] += 1;
            }
            if !advanced {
                // Dead end: retreat and skip the edge that led here.
                match path.pop() {
                    Some(e) => {
                        v = self.to[(e ^ 1) as usize];
                        cursor[v as usize] += 1;
                    }
                    None => return C::default(),
                }
            }
        }
    }

    /// After [`FlowNetwork::max_flow`]: the source side of the minimum cut closest to the sink
    /// (`true` = source side), i.e. every node that cannot reach `t` in the residual graph.
    /// Among minimum cuts it puts the fewest nodes on the sink side.
    #[cfg(test)]
    pub fn source_side_near_sink(&self, t: u32) -> Vec<bool> {
        self.sink_side(t).into_iter().map(|r| !r).collect()
    }

    /// After [`FlowNetwork::max_flow`]: the nodes that can reach `t` in the residual graph (the
    /// sink side of the minimum cut closest to the sink).
    pub fn sink_side(&self, t: u32) -> Vec<bool> {
        // Reverse residual reachability: v reaches t if some edge v → w has capacity left and
        // w reaches t. Walk the twin edges backwards from t.
        let mut reaches_t = vec![false; self.nodes];
        reaches_t[t as usize] = true;
        let mut queue = VecDeque::from([t]);
        while let Some(w) = queue.pop_front() {
            for &e in &self.adj[self.start[w as usize] as usize..self.start[w as usize + 1] as usize] {
                // e: w → v; its twin is v → w, with residual capacity cap[e ^ 1].
                let v = self.to[e as usize];
                if self.cap[(e ^ 1) as usize] > C::default() && !reaches_t[v as usize] {
                    reaches_t[v as usize] = true;
                    queue.push_back(v);
                }
            }
        }
        reaches_t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_network() {
        // CLRS figure 26.1: max flow 23.
        let mut net = FlowNetwork::<u64>::new(6);
        for (f, t, c) in
            [(0, 1, 16), (0, 2, 13), (1, 3, 12), (2, 1, 4), (2, 4, 14), (3, 2, 9), (3, 5, 20), (4, 3, 7), (4, 5, 4)]
        {
            net.add_edge(f, t, c);
        }
        assert_eq!(net.max_flow(0, 5), 23);
        let side = net.source_side_near_sink(5);
        assert!(side[0] && !side[5]);
    }

    #[test]
    fn ties_resolve_towards_the_sink() {
        // s → a → b → t with equal capacities: both edges are minimum cuts; the cut nearest the
        // sink keeps a and b on the source side.
        let mut net = FlowNetwork::<u128>::new(4);
        net.add_infinite_edge(0, 1);
        net.add_edge(1, 2, 5);
        net.add_edge(2, 3, 5);
        assert_eq!(net.max_flow(0, 3), 5);
        assert_eq!(net.source_side_near_sink(3), vec![true, true, true, false]);
    }

    /// s → a → t and s → b → t on `net` (4 nodes, no edges), a's second edge (returned) of
    /// capacity `cap`.
    fn two_paths(mut net: FlowNetwork, cap: u64) -> (FlowNetwork, u32) {
        net.add_edge(0, 1, 7);
        let priced = net.add_edge(1, 3, cap);
        net.add_edge(0, 2, 5);
        net.add_edge(2, 3, 9);
        (net, priced)
    }

    #[test]
    fn restored_and_repriced_networks_solve_as_fresh_ones() {
        // s → a → t and s → b → t, with a's second edge repriced between solves: each solve after
        // `restore` and `set_capacity` equals a network built with those capacities.
        let build = |cap| two_paths(FlowNetwork::new(4), cap);
        let (mut net, priced) = build(0);
        let built = net.capacities().to_vec();
        for cap in [3, 0, 11, 7, 1] {
            net.restore(&built);
            net.set_capacity(priced, cap);
            let (mut fresh, _) = build(cap);
            assert_eq!(net.max_flow(0, 3), fresh.max_flow(0, 3), "capacity {cap}");
            assert_eq!(net.sink_side(3), fresh.sink_side(3), "capacity {cap}");
        }
    }

    #[test]
    fn cleared_and_raised_networks_solve_as_fresh_ones() {
        // The same network as above; between solves the flow is cleared and the priced edge set
        // afresh, or the flow is kept and the edge raised: either way each solve ends where a
        // network built with that capacity does.
        let build = |cap| two_paths(FlowNetwork::with_capacity(4, 4), cap);
        let (mut net, priced) = build(0);
        let mut total = net.max_flow(0, 3);
        for (cap, keep_flow) in [(3, true), (0, false), (6, true), (11, true), (1, false), (2, true)] {
            if keep_flow {
                let raise =
                    cap - net.capacities()[priced as usize] as u64 - net.capacities()[priced as usize + 1] as u64;
                net.raise_capacity(priced, raise);
                total += net.max_flow(0, 3);
            } else {
                net.clear_flow();
                net.set_capacity(priced, cap);
                total = net.max_flow(0, 3);
            }
            let (mut fresh, _) = build(cap);
            assert_eq!(total, fresh.max_flow(0, 3), "capacity {cap}");
            assert_eq!(net.sink_side(3), fresh.sink_side(3), "capacity {cap}");
        }
    }

    #[test]
    fn huge_capacities_do_not_overflow() {
        // Two 2^63-byte values in series with a third in parallel: sums pass u64::MAX.
        let mut net = FlowNetwork::<u128>::new(4);
        net.add_edge(0, 1, 1 << 63);
        net.add_edge(0, 2, 1 << 63);
        net.add_edge(0, 3, u64::MAX);
        net.add_infinite_edge(1, 3);
        net.add_infinite_edge(2, 3);
        assert_eq!(net.max_flow(0, 3), (1u128 << 64) + u64::MAX as u128);
    }

    /// On 200 random networks of up to 7 nodes, some edges infinite and finite capacities below
    /// `most`: the flow is the cheapest cut a brute force over node subsets finds (or at least
    /// infinity where every cut crosses an infinite edge), and the reported side is such a cut.
    fn matches_brute_force<C: Capacity>(most: u64) {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 11
        };
        for _ in 0..200 {
            let n = 2 + (next() % 6) as usize;
            // (from, to, capacity; None = infinite)
            let mut edges = Vec::new();
            for _ in 0..(next() % 12) {
                let (a, b) = ((next() % n as u64) as u32, (next() % n as u64) as u32);
                if a != b {
                    edges.push((a, b, (next() % 5 != 0).then(|| next() % most)));
                }
            }
            let mut net = FlowNetwork::<C>::new(n);
            for &(a, b, c) in &edges {
                match c {
                    Some(c) => _ = net.add_edge(a, b, c),
                    None => net.add_infinite_edge(a, b),
                }
            }
            let flow = net.max_flow(0, n as u32 - 1).wide();
            let cut_of = |source_side: &dyn Fn(u32) -> bool| -> Option<u128> {
                let crossing = edges.iter().filter(|&&(a, b, _)| source_side(a) && !source_side(b));
                crossing.map(|e| e.2.map(u128::from)).sum()
            };
            // Brute force: the cheapest s-t cut over all node subsets containing s but not t.
            let best = (0u32..(1 << n))
                .filter(|mask| mask & 1 != 0 && mask & (1 << (n - 1)) == 0)
                .filter_map(|mask| cut_of(&|v| mask & (1 << v) != 0))
                .min();
            match best {
                Some(best) => {
                    assert_eq!(flow, best, "{edges:?}");
                    let side = net.source_side_near_sink(n as u32 - 1);
                    assert_eq!(cut_of(&|v| side[v as usize]), Some(best), "the reported side is a minimum cut");
                }
                None => assert!(flow >= C::INFINITE.wide(), "{edges:?}: every cut is infinite"),
            }
        }
    }

    #[test]
    fn matches_brute_force_cuts_on_small_random_networks() {
        matches_brute_force::<u128>(10);
        matches_brute_force::<u64>(10);
        // Near the rule's limit: at most 11 finite edges, each below 2^63 / 11.
        matches_brute_force::<u64>((1 << 63) / 11);
        matches_brute_force::<u128>(u64::MAX);
    }
}
