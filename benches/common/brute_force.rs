//! The budget searches' oracle: every recompute / save / offload assignment of a small graph's
//! forward values, those the independent checker (`partition::check`) accepts costed — written
//! without the partitioner, which the tests hold to it.
//!
//! A file included by path where needed: `#[path = ".../benches/common/brute_force.rs"] mod
//! brute_force;` (`core/tests/partition_rules.rs` and `core/tests/offload_solver.rs`).

use remat_core::{
    check, exposed_times, Action, CostModel, Decision, NodeId, PGraph, Partition, Policy, Reason, Strategy,
};

/// A plan's cost as `strategy` weighs it: recompute seconds, plus the exposed transfer seconds of
/// its offloads where the strategy chooses offloads (elsewhere tagged offloads are no choice).
pub fn plan_cost(p: &Partition, strategy: Strategy, model: &CostModel) -> f64 {
    let transfer = if strategy.chooses_offload() { p.exposed_transfer_s } else { 0.0 };
    p.recompute_flops as f64 / model.flops_per_s + transfer
}

/// The least [`plan_cost`] under `model` of any assignment — recompute, save or offload — of the
/// forward values that [`check`] accepts under `strategy` (a byte budget), and that honours a
/// factory's own tag — the rules' own answer, found without the partitioner; `None` where no
/// assignment keeps every rule. (The checker lets a factory pass as free to replay, as it is for the views it bases, and
/// lets a must_recompute one pass as kept where a region reads it; the partitioner saves a
/// must_save factory and recomputes a must_recompute one.)
pub fn least_cost(g: &PGraph, strategy: Strategy, model: &CostModel) -> Option<f64> {
    let forward: Vec<usize> = (0..g.len()).filter(|&i| !g.nodes[i].backward).collect();
    let may_offload = strategy.chooses_offload()
        || g.nodes.iter().any(|n| matches!(n.policy, Some(Policy::MustOffload | Policy::PreferOffload)));
    let ways: u64 = if may_offload { 3 } else { 2 };
    let combos = ways.checked_pow(forward.len() as u32).filter(|&c| c <= 1 << 20);
    let combos = combos.unwrap_or_else(|| panic!("{} forward values: too many to try every assignment", forward.len()));
    let exposed = exposed_times(g, model);
    let held = |i: usize| g.nodes[i].flags.resident || g.forward_outputs.contains(&NodeId::from_index(i));
    let factory = |i: usize| g.nodes[i].inputs.is_empty() && !g.nodes[i].flags.random && !held(i);
    let mut best: Option<f64> = None;
    let mut action = vec![Action::Recompute; g.len()];
    for mut code in 0..combos {
        for &i in &forward {
            action[i] = [Action::Recompute, Action::Save, Action::Offload][(code % ways) as usize];
            code /= ways;
        }
        // What the backward needs: what it reads, and the inputs of whatever needed is not kept.
        let mut needed = vec![false; g.len()];
        for n in g.nodes.iter().filter(|n| n.backward) {
            for &x in &n.inputs {
                needed[x.index()] |= !g.nodes[x.index()].backward;
            }
        }
        for &i in forward.iter().rev() {
            if needed[i] && action[i] == Action::Recompute {
                for &x in &g.nodes[i].inputs {
                    needed[x.index()] = true;
                }
            }
        }
        let tag_broken = |i: usize| match g.nodes[i].policy {
            Some(Policy::MustSave) => !g.nodes[i].flags.view && factory(i) && action[i] != Action::Save,
            Some(Policy::MustRecompute) => factory(i) && action[i] != Action::Recompute,
            _ => false,
        };
        // One representative per plan: values nobody needs are left unkept.
        if forward.iter().any(|&i| if needed[i] { tag_broken(i) } else { action[i] != Action::Recompute }) {
            continue;
        }
        let mut p = Partition {
            strategy,
            saved: vec![false; g.len()],
            offloaded: vec![false; g.len()],
            recomputed: Vec::new(),
            decisions: Vec::new(),
            warnings: Vec::new(),
            saved_bytes: 0,
            host_bytes: 0,
            exposed_transfer_s: 0.0,
            held_bytes: 0,
            recompute_flops: 0,
            optimality_gap: None,
        };
        for &i in forward.iter().filter(|&&i| needed[i]) {
            let (id, bytes) = (NodeId::from_index(i), g.nodes[i].bytes);
            match action[i] {
                Action::Recompute => {
                    p.recomputed.push(id);
                    p.recompute_flops += g.nodes[i].flops;
                }
                Action::Save if held(i) => p.held_bytes += bytes,
                Action::Save => p.saved_bytes += bytes,
                Action::Offload => {
                    p.offloaded[i] = true;
                    p.host_bytes += bytes;
                    p.exposed_transfer_s += exposed[i];
                }
            }
            p.saved[i] = action[i] != Action::Recompute;
            p.decisions.push(Decision {
                node: id,
                action: action[i],
                reason: Reason::Budget,
                overrode: None,
                offload: None,
            });
        }
        if check(g, &p).is_ok() {
            let cost = plan_cost(&p, strategy, model);
            best = Some(best.map_or(cost, |b| b.min(cost)));
        }
    }
    best
}
