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
use super::maxflow::FlowNetwork;
use super::{PGraph, Reason};
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
    let n = g.len();
    let forced: Vec<bool> = class.iter().map(|c| c.is_forced()).collect();
    let relevant = closure_from(g, reads.to_vec(), &forced);
    let role = |i: usize| {
        let node = &g.nodes[i];
        match class[i] {
            Class::Forced(_) => Role::Kept,
            Class::Forbidden(_) | Class::Soft(Reason::PreferRecompute | Reason::Factory) => Role::Unsaved,
            Class::Soft(_) if node.flags.compute_intensive && node.policy.is_none() => Role::Kept,
            Class::Soft(_) => Role::Open,
        }
    };
    // Network nodes: 0 source, 1 sink, then per relevant node an `out` and (if open) an `in`.
    const SOURCE: u32 = 0;
    const SINK: u32 = 1;
    let mut v_in = vec![u32::MAX; n];
    let mut v_out = vec![u32::MAX; n];
    let mut count = 2u32;
    for i in (0..n).filter(|&i| relevant[i]) {
        v_out[i] = count;
        count += 1;
        v_in[i] = match role(i) {
            Role::Kept => SOURCE,
            Role::Unsaved => v_out[i],
            Role::Open => {
                count += 1;
                count - 1
            }
        };
    }
    // Per value: its own edge, one per input, and the sink's where the backward reads it.
    let edges = (0..n).filter(|&i| relevant[i]).map(|i| 2 + g.nodes[i].inputs.len()).sum();
    let mut net = FlowNetwork::with_capacity(count as usize, edges);
    let mut chosen = vec![None; n];
    for i in (0..n).filter(|&i| relevant[i]) {
        let node = &g.nodes[i];
        let id = NodeId::from_index(i);
        match role(i) {
            Role::Kept => {
                let cost = if counts_bytes(g, id) { node.bytes } else { 0 };
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
        if reads[i] {
            net.add_infinite_edge(v_out[i], SINK);
        }
        if let Class::Soft(soft) = class[i] {
            chosen[i] = Some(match (role(i), node.policy) {
                _ if soft == Reason::Factory => Reason::Factory,
                (_, Some(Policy::PreferRecompute)) => Reason::PreferRecompute,
                (Role::Kept, _) => Reason::ComputeIntensive,
                _ => Reason::MinCut,
            });
        }
    }
    net.max_flow(SOURCE, SINK);
    let sink_side = net.sink_side(SINK);
    let at_hand = (0..n)
        .map(|i| relevant[i] && role(i) != Role::Unsaved && (v_in[i] == SOURCE || !sink_side[v_in[i] as usize]))
        .collect();
    (at_hand, chosen)
}
