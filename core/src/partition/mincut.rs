//! `MinCut`: a minimum cut over the forward part of the joint graph, weighted by bytes.
//!
//! Each forward value whose fate is open becomes an edge `in → out` costing its bytes to cut
//! (cutting it = saving it). Dependencies are edges `u.out → v.in` no cut may cross, and values
//! the backward reads feed the sink the same way. The constraints are structural, not large
//! capacities: a value that must be kept (forced, or an untagged GEMM) has its `in` merged into
//! the source, so only its bytes (zero for residents and outputs) can be cut; a value that must
//! not be saved (forbidden, or PreferRecompute, which min-cut never saves) is one node without an
//! edge to cut. Every source edge is finite, so no capacity sum can overflow. The sink side of
//! the cut is what the backward recomputes; among minimum cuts the one nearest the sink is taken,
//! which recomputes the fewest nodes and so the fewest FLOPs.

use super::classify::{closure_from, counts_bytes, Class};
use super::maxflow::{Capacity, FlowNetwork};
use super::{PGraph, PNode, Reason};
use crate::graph::NodeId;
use crate::policy::Policy;

/// How a relevant node enters the network.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// Kept if needed: `in` is the source, `out` costs its bytes.
    Kept,
    /// Never saved: a single node.
    Unsaved,
    /// Open: `in → out` costs its bytes.
    Open,
}

/// Which forward values are at hand, and the reason for each value the cut decided.
/// `reads` is [`PGraph::backward_reads`].
pub(super) fn solve(g: &PGraph, class: &[Class], reads: &[bool]) -> (Vec<bool>, Vec<Option<Reason>>) {
    let (at_hand, relevant) = cut(g, class, reads);
    let mut chosen = vec![None; g.len()];
    for i in (0..g.len()).filter(|&i| relevant[i]) {
        if let Class::Soft(soft) = class[i] {
            let node = &g.nodes[i];
            chosen[i] = Some(match (role(node, &class[i]), node.policy) {
                _ if soft == Reason::Factory => Reason::Factory,
                (_, Some(Policy::PreferRecompute)) => Reason::PreferRecompute,
                (Role::Kept, _) => Reason::ComputeIntensive,
                _ => Reason::MinCut,
            });
        }
    }
    (at_hand, chosen)
}

/// How a value enters the network.
fn role(node: &PNode, class: &Class) -> Role {
    match class {
        // A tied base stays at hand here; settling the views releases it where none is reached.
        Class::Forced(_) | Class::Tied(_) => Role::Kept,
        Class::Forbidden(_) | Class::Soft(Reason::PreferRecompute | Reason::Factory) => Role::Unsaved,
        Class::Soft(_) if node.flags.compute_intensive && node.policy.is_none() => Role::Kept,
        Class::Soft(_) => Role::Open,
    }
}

/// [`solve`]'s choice alone: which forward values are at hand; and which values the backward
/// may reach (those with only forced values at hand), the only ones the cut decides.
pub(super) fn cut(g: &PGraph, class: &[Class], reads: &[bool]) -> (Vec<bool>, Vec<bool>) {
    let n = g.len();
    let forced: Vec<bool> = class.iter().map(|c| matches!(c, Class::Forced(_) | Class::Tied(_))).collect();
    let relevant = closure_from(g, reads.to_vec(), &forced);
    let role: Vec<Role> = g.nodes.iter().zip(class).map(|(node, class)| role(node, class)).collect();
    // Network nodes: 0 source, 1 sink, then per relevant node an `out` and (if open) an `in`.
    let mut v_in = vec![u32::MAX; n];
    let mut v_out = vec![u32::MAX; n];
    let mut count = 2u32;
    for i in (0..n).filter(|&i| relevant[i]) {
        v_out[i] = count;
        count += 1;
        v_in[i] = match role[i] {
            Role::Kept => SOURCE,
            Role::Unsaved => v_out[i],
            Role::Open => {
                count += 1;
                count - 1
            }
        };
    }
    let network =
        Network { g, reads, relevant: &relevant, role: &role, v_in: &v_in, v_out: &v_out, nodes: count as usize };
    // Half the memory where the finite capacities allow (nearly always: they are the bytes of
    // one graph's values).
    let finite: u128 =
        (0..n).filter(|&i| relevant[i] && role[i] != Role::Unsaved).map(|i| g.nodes[i].bytes as u128).sum();
    let sink_side = if u64::holds(finite) { network.sink_side::<u64>() } else { network.sink_side::<u128>() };
    let at_hand = (0..n)
        .map(|i| relevant[i] && role[i] != Role::Unsaved && (v_in[i] == SOURCE || !sink_side[v_in[i] as usize]))
        .collect();
    (at_hand, relevant)
}

/// Index of the source and sink in the network.
const SOURCE: u32 = 0;
const SINK: u32 = 1;

/// The network's layout: which nodes enter it, as what, and their network nodes.
struct Network<'a> {
    g: &'a PGraph,
    reads: &'a [bool],
    relevant: &'a [bool],
    role: &'a [Role],
    v_in: &'a [u32],
    v_out: &'a [u32],
    /// Network nodes.
    nodes: usize,
}

impl Network<'_> {
    /// Builds the network with capacities `C`, cuts it, and returns the sink side of the
    /// minimum cut nearest the sink, per network node.
    fn sink_side<C: Capacity>(&self) -> Vec<bool> {
        let (g, relevant, role, v_in, v_out) = (self.g, self.relevant, self.role, self.v_in, self.v_out);
        let n = g.len();
        // Per value: its own edge, one per input, and the sink's where the backward reads it.
        let edges = (0..n).filter(|&i| relevant[i]).map(|i| 2 + g.nodes[i].inputs.len()).sum();
        let mut net = FlowNetwork::<C>::with_capacity(self.nodes, edges);
        for i in (0..n).filter(|&i| relevant[i]) {
            let node = &g.nodes[i];
            match role[i] {
                Role::Kept => {
                    let cost = if counts_bytes(g, NodeId::from_index(i)) { node.bytes } else { 0 };
                    net.add_edge(SOURCE, v_out[i], cost);
                }
                Role::Open => {
                    net.add_edge(v_in[i], v_out[i], node.bytes);
                }
                Role::Unsaved => {}
            }
            if v_in[i] != SOURCE {
                for &u in &node.inputs {
                    if relevant[u.index()] {
                        net.add_infinite_edge(v_out[u.index()], v_in[i]);
                    }
                }
            }
            if self.reads[i] {
                net.add_infinite_edge(v_out[i], SINK);
            }
        }
        net.max_flow(SOURCE, SINK);
        net.sink_side(SINK)
    }
}
