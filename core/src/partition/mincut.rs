//! `MinCut`: a minimum cut over the forward part of the joint graph, weighted by bytes.
//!
//! Each forward value the backward could need becomes an edge `in → out` costing its bytes to
//! cut (cutting it = saving it). Dependencies are infinite edges `u.out → v.in`; values that
//! may not be recomputed hang from the source; values the backward reads feed the sink. The
//! sink side of the cut is what the backward recomputes. Among minimum cuts the one nearest the
//! sink is taken, which recomputes the fewest nodes and so the fewest FLOPs.

use super::maxflow::{FlowNetwork, INFINITE};
use super::{closure, Class, PGraph, Reason};
use crate::policy::Policy;

/// Which forward values are at hand (computed in the forward and kept if needed), and the
/// reason for each value the cut decided.
pub(super) fn solve(g: &PGraph, class: &[Class]) -> (Vec<bool>, Vec<Option<Reason>>) {
    let n = g.len();
    // Everything the backward could need: the closure with nothing at hand but what is forced.
    let forced: Vec<bool> = class.iter().map(|c| matches!(c, Class::Forced(_))).collect();
    let relevant = closure(g, &forced).reached;
    let reads = g.backward_reads();
    let mut index = vec![u32::MAX; n];
    let mut count = 0u32;
    for i in (0..n).filter(|&i| relevant[i]) {
        index[i] = count;
        count += 1;
    }
    let (source, sink) = (2 * count, 2 * count + 1);
    let mut net = FlowNetwork::new(2 * count as usize + 2);
    let mut chosen = vec![None; n];
    for i in (0..n).filter(|&i| relevant[i]) {
        let node = &g.nodes[i];
        let (v_in, v_out) = (2 * index[i], 2 * index[i] + 1);
        let untagged_gemm = node.flags.compute_intensive && node.policy.is_none();
        let cut_cost = match class[i] {
            Class::Forced(Reason::Resident | Reason::Output) => 0,
            Class::Forbidden(_) | Class::Soft(Reason::PreferRecompute) => INFINITE,
            Class::Forced(_) | Class::Soft(_) => node.bytes,
        };
        net.add_edge(v_in, v_out, cut_cost);
        if matches!(class[i], Class::Forced(_)) || untagged_gemm {
            net.add_edge(source, v_in, INFINITE);
        }
        if reads[i] {
            net.add_edge(v_out, sink, INFINITE);
        }
        for &u in &node.inputs {
            if relevant[u as usize] {
                net.add_edge(2 * index[u as usize] + 1, v_in, INFINITE);
            }
        }
        if let Class::Soft(_) = class[i] {
            chosen[i] = Some(if untagged_gemm { Reason::ComputeIntensive } else { Reason::MinCut });
            if node.policy == Some(Policy::PreferRecompute) {
                chosen[i] = Some(Reason::PreferRecompute);
            }
        }
    }
    net.max_flow(source, sink);
    let side = net.source_side_near_sink(sink);
    let at_hand = (0..n).map(|i| relevant[i] && side[2 * index[i] as usize]).collect();
    (at_hand, chosen)
}
