//! Maximum flow by Dinic's algorithm over compressed (CSR) adjacency arrays.
//!
//! Partition-shaped networks (a chain of split nodes per forward value, infinite dependency
//! edges) have short augmenting paths, where Dinic's blocking flows finish in a few phases.
//! Edges are stored in pairs (`e`, `e ^ 1`): forward and residual.
//!
//! Capacities are `u128`: finite edges carry `u64` bytes, so any sum of them (at most 2^32
//! edges) stays below 2^96, far under [`INFINITE`]; an infinite edge therefore never saturates
//! and no total can overflow.

use std::collections::VecDeque;

/// The capacity of an edge no cut may cross: above any sum of finite capacities.
pub const INFINITE: u128 = u128::MAX / 2;

/// A flow network under construction, then solved.
#[derive(Clone, Debug, Default)]
pub struct FlowNetwork {
    nodes: usize,
    // Edge list while building; `to`/`cap` are indexed by edge id, pairs (2k, 2k + 1).
    from: Vec<u32>,
    to: Vec<u32>,
    cap: Vec<u128>,
    // CSR adjacency built by `max_flow`: edges of node v are adj[start[v]..start[v + 1]].
    start: Vec<u32>,
    adj: Vec<u32>,
}

impl FlowNetwork {
    /// A network of `nodes` nodes and no edges.
    pub fn new(nodes: usize) -> Self {
        FlowNetwork { nodes, ..Default::default() }
    }

    /// A network of `nodes` nodes and no edges, with room for `edges` edges (the vectors of a
    /// 10⁶-node network would otherwise be copied as they grow).
    pub fn with_capacity(nodes: usize, edges: usize) -> Self {
        let pairs = 2 * edges;
        FlowNetwork {
            nodes,
            from: Vec::with_capacity(pairs),
            to: Vec::with_capacity(pairs),
            cap: Vec::with_capacity(pairs),
            ..Default::default()
        }
    }

    /// Adds an edge `from → to` of capacity `cap` (and its residual twin); returns the edge's
    /// id, for [`FlowNetwork::set_capacity`].
    pub fn add_edge(&mut self, from: u32, to: u32, cap: u64) -> u32 {
        self.push(from, to, cap as u128)
    }

    /// Adds an edge `from → to` that no cut may cross.
    pub fn add_infinite_edge(&mut self, from: u32, to: u32) {
        self.push(from, to, INFINITE);
    }

    fn push(&mut self, from: u32, to: u32, cap: u128) -> u32 {
        debug_assert!((from as usize) < self.nodes && (to as usize) < self.nodes);
        debug_assert!(self.start.is_empty(), "edges are added before the first max_flow");
        self.from.extend([from, to]);
        self.to.extend([to, from]);
        self.cap.extend([cap, 0]);
        self.cap.len() as u32 - 2
    }

    /// The residual capacity of every edge and twin, by edge id — as added before any
    /// [`FlowNetwork::max_flow`], with its flow after one: what [`FlowNetwork::restore`] takes
    /// to solve again from that state.
    pub fn capacities(&self) -> &[u128] {
        &self.cap
    }

    /// Puts back capacities [`FlowNetwork::capacities`] returned, undoing every flow pushed
    /// since: the network can then be solved again, with other capacities set or raised first.
    pub fn restore(&mut self, capacities: &[u128]) {
        self.cap.copy_from_slice(capacities);
    }

    /// Sets the capacity of edge `edge` (an id [`FlowNetwork::add_edge`] returned), with no
    /// flow on it.
    pub fn set_capacity(&mut self, edge: u32, cap: u64) {
        self.cap[edge as usize] = cap as u128;
        self.cap[edge as usize ^ 1] = 0;
    }

    /// Takes every flow back: each edge gets its capacity as added (or last set or raised), each
    /// twin none. (An edge's residual capacity plus its twin's is always that capacity.)
    pub fn clear_flow(&mut self) {
        for pair in self.cap.chunks_exact_mut(2) {
            pair[0] += pair[1];
            pair[1] = 0;
        }
    }

    /// Raises the capacity of edge `edge` by `by`, keeping the flow on it: a flow stays a flow
    /// when capacities only grow, so the next [`FlowNetwork::max_flow`] pushes only what the
    /// larger capacities add.
    pub fn raise_capacity(&mut self, edge: u32, by: u64) {
        self.cap[edge as usize] += by as u128;
    }

    fn build_adjacency(&mut self) {
        let mut count = vec![0u32; self.nodes + 1];
        for &f in &self.from {
            count[f as usize + 1] += 1;
        }
        for v in 0..self.nodes {
            count[v + 1] += count[v];
        }
        self.start = count.clone();
        self.adj = vec![0; self.from.len()];
        for (e, &f) in self.from.iter().enumerate() {
            self.adj[count[f as usize] as usize] = e as u32;
            count[f as usize] += 1;
        }
    }

    /// Pushes the maximum flow from `s` to `t` on top of any flow already there; returns what it
    /// pushed (at least `INFINITE` when only a cut through an infinite edge separates them). No
    /// edge may be added after it.
    pub fn max_flow(&mut self, s: u32, t: u32) -> u128 {
        if self.start.is_empty() {
            self.build_adjacency();
            // The edge list has served: a twin's head is its edge's tail.
            self.from = Vec::new();
        }
        let mut total: u128 = 0;
        let mut level = vec![u32::MAX; self.nodes];
        let mut cursor = vec![0u32; self.nodes];
        while self.levels(s, t, &mut level) {
            cursor.copy_from_slice(&self.start[..self.nodes]);
            loop {
                let pushed = self.augment(s, t, &level, &mut cursor);
                if pushed == 0 {
                    break;
                }
                total = total.saturating_add(pushed);
                if total >= INFINITE {
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
                if self.cap[e as usize] > 0 && level[w as usize] == u32::MAX {
                    level[w as usize] = level[v as usize] + 1;
                    queue.push_back(w);
                }
            }
        }
        level[t as usize] != u32::MAX
    }

    /// One augmenting path along increasing levels (iterative DFS with per-node cursors, so
    /// dead ends are never revisited within a phase); returns the flow pushed.
    fn augment(&mut self, s: u32, t: u32, level: &[u32], cursor: &mut [u32]) -> u128 {
        let mut path: Vec<u32> = Vec::new(); // edges from s
        let mut v = s;
        loop {
            if v == t {
                let pushed = path.iter().map(|&e| self.cap[e as usize]).min().unwrap_or(0);
                for &e in &path {
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
                if self.cap[e as usize] > 0 && level[w as usize] == level[v as usize] + 1 {
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
                    None => return 0,
                }
            }
        }
    }

    /// After [`FlowNetwork::max_flow`]: the source side of the minimum cut closest to the sink
    /// (`true` = source side), i.e. every node that cannot reach `t` in the residual graph.
    /// Among minimum cuts it puts the fewest nodes on the sink side.
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
                if self.cap[(e ^ 1) as usize] > 0 && !reaches_t[v as usize] {
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
        let mut net = FlowNetwork::new(6);
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
        let mut net = FlowNetwork::new(4);
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
        let mut net = FlowNetwork::new(4);
        net.add_edge(0, 1, 1 << 63);
        net.add_edge(0, 2, 1 << 63);
        net.add_edge(0, 3, u64::MAX);
        net.add_infinite_edge(1, 3);
        net.add_infinite_edge(2, 3);
        assert_eq!(net.max_flow(0, 3), (1u128 << 64) + u64::MAX as u128);
    }

    #[test]
    fn matches_brute_force_cuts_on_small_random_networks() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for _ in 0..200 {
            let n = 2 + (next() % 6) as usize;
            let mut edges = Vec::new();
            for _ in 0..(next() % 12) {
                let (a, b) = (next() % n as u32, next() % n as u32);
                if a != b {
                    edges.push((a, b, (next() % 10) as u64));
                }
            }
            let mut net = FlowNetwork::new(n);
            for &(a, b, c) in &edges {
                net.add_edge(a, b, c);
            }
            let flow = net.max_flow(0, n as u32 - 1);
            // Brute force: the cheapest s-t cut over all node subsets containing s but not t.
            let mut best = u128::MAX;
            for mask in 0u32..(1 << n) {
                if mask & 1 == 0 || mask & (1 << (n - 1)) != 0 {
                    continue;
                }
                let cut = edges
                    .iter()
                    .filter(|&&(a, b, _)| mask & (1 << a) != 0 && mask & (1 << b) == 0)
                    .map(|e| e.2 as u128)
                    .sum();
                best = best.min(cut);
            }
            assert_eq!(flow, best, "{edges:?}");
            let side = net.source_side_near_sink(n as u32 - 1);
            let cut: u128 =
                edges.iter().filter(|&&(a, b, _)| side[a as usize] && !side[b as usize]).map(|e| e.2 as u128).sum();
            assert_eq!(cut, best, "the reported side is a minimum cut");
        }
    }
}
