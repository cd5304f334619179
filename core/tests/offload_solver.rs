//! The three-way budget solver (`BudgetOffload`) against brute force: on small random graphs,
//! every assignment of save / offload / recompute to every forward value is tried, the ones the
//! independent checker (`partition::check`) accepts within the device budget are costed
//! (recompute seconds plus exposed transfer seconds, the model's own estimate), and the solver's
//! plan must cost exactly the least. Also: smaller budgets never give faster plans, and allowing
//! offload never gives a slower plan than the two-way budget.

use proptest::prelude::*;
use remat_core::{check, exposed_times, partition_with, CostModel, PGraph, PNode};
use remat_core::{Budget, Error, Limit, NodeId, Partition, Policy, Strategy};

/// A model where transfers and compute are comparable on these tiny graphs.
const MODEL: CostModel = CostModel { d2h_bytes_per_s: 4.0, h2d_bytes_per_s: 8.0, flops_per_s: 1.0 };

const POLICIES: [Option<Policy>; 6] = [
    None,
    Some(Policy::PreferSave),
    Some(Policy::PreferRecompute),
    Some(Policy::MustSave),
    Some(Policy::MustOffload),
    Some(Policy::PreferOffload),
];

/// `specs`: per forward node after the input (inputs, bytes, flops, policy); two backward nodes
/// read random forward values.
fn build(specs: &[(usize, usize, u8, u8, u8)], reads: &[usize]) -> PGraph {
    let mut g = PGraph::default();
    let mut x = PNode::new(0, "input", &[], false, 4);
    x.flags.resident = true;
    g.nodes.push(x);
    for (k, &(a, b, bytes, flops, policy)) in specs.iter().enumerate() {
        let id = k + 1;
        let mut ins = vec![a % id, b % id];
        ins.dedup();
        let ins: Vec<u32> = ins.into_iter().map(|i| i as u32).collect();
        let mut n = PNode::new(id as u64, "op", &ins, false, [1, 2, 4, 8][bytes as usize % 4]);
        n.flops = [0, 1, 3, 10][flops as usize % 4];
        n.policy = POLICIES[policy as usize % POLICIES.len()];
        g.nodes.push(n);
    }
    let n_fwd = g.nodes.len();
    let out = NodeId::new((n_fwd - 1) as u32);
    if g.nodes[out.index()].policy == Some(Policy::MustOffload) {
        g.nodes[out.index()].policy = None;
    }
    g.forward_outputs.push(out);
    for (k, chunk) in reads.chunks(2).enumerate() {
        let mut ins: Vec<u32> = chunk.iter().map(|&r| (r % n_fwd) as u32).collect();
        ins.sort();
        ins.dedup();
        g.nodes.push(PNode::new((n_fwd + k) as u64, "grad", &ins, true, 4));
    }
    g
}

/// Recompute seconds plus exposed transfer seconds of a partition.
fn cost(g: &PGraph, p: &Partition, exposed: &[f64]) -> f64 {
    let recompute: u64 = p.recomputed.iter().map(|&i| g.node(i).flops).sum();
    let transfer: f64 = (0..g.len()).filter(|&i| p.offloaded[i]).map(|i| exposed[i]).sum();
    recompute as f64 / MODEL.flops_per_s + transfer
}

#[path = "../../benches/common/brute_force.rs"]
mod brute_force;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_solver_is_exact_and_monotone(
        specs in proptest::collection::vec((0usize..8, 0usize..8, 0u8..4, 0u8..4, 0u8..12), 2..7),
        reads in proptest::collection::vec(0usize..8, 2..5),
    ) {
        let g = build(&specs, &reads);
        let exposed = exposed_times(&g, &MODEL);
        let mut previous: Option<f64> = None;
        for limit in [64u64, 16, 8, 4, 2, 1, 0] {
            let strategy = Strategy::BudgetOffload(Budget::Bytes(limit));
            let oracle = brute_force::least_cost(&g, strategy, &MODEL);
            match partition_with(&g, strategy, &MODEL) {
                Ok(p) => {
                    check(&g, &p).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let c = cost(&g, &p, &exposed);
                    let best = oracle.expect("the solver found a plan the brute force missed");
                    prop_assert!((c - best).abs() <= 1e-9 * best.max(1.0), "budget {}: solver {} vs brute force {}", limit, c, best);
                    prop_assert!((p.exposed_transfer_s - (c - p.recompute_flops as f64 / MODEL.flops_per_s)).abs() < 1e-9);
                    if let Some(prev) = previous {
                        prop_assert!(c + 1e-12 >= prev, "a smaller budget gave a faster plan: {} < {}", c, prev);
                    }
                    previous = Some(c);
                    // Offload allowed never costs more than the two-way budget's plan.
                    if let Ok(q) = partition_with(&g, Strategy::Budget(Budget::Bytes(limit)), &MODEL) {
                        prop_assert!(c <= cost(&g, &q, &exposed) + 1e-9);
                    }
                }
                Err(e) => {
                    prop_assert!(oracle.is_none(), "budget {}: solver failed ({}) but brute force found {:?}", limit, e, oracle);
                    let infeasible = matches!(e, Error::Infeasible { what: Limit::Budget, asked, .. } if asked == limit);
                    prop_assert!(infeasible, "budget {}: {:?}", limit, e);
                    previous = Some(f64::INFINITY);
                }
            }
        }
    }
}

#[test]
fn offload_wins_when_the_transfer_hides_under_compute() {
    // x -> a (cheap to store, expensive to recompute) -> long forward compute -> y; the backward
    // reads a after a long gradient: its transfer hides entirely.
    let mut g = PGraph::default();
    let mut x = PNode::new(0, "input", &[], false, 4);
    x.flags.resident = true;
    g.nodes.push(x);
    let mut a = PNode::new(1, "matmul", &[0], false, 8);
    a.flops = 100;
    g.nodes.push(a);
    let mut b = PNode::new(2, "work", &[1], false, 4);
    b.flops = 100;
    g.nodes.push(b);
    g.forward_outputs.push(NodeId::new(2));
    let mut gb = PNode::new(3, "grad", &[2], true, 4);
    gb.flops = 100;
    g.nodes.push(gb);
    g.nodes.push(PNode::new(4, "grad", &[1, 3], true, 4));
    let p = partition_with(&g, Strategy::BudgetOffload(Budget::Bytes(0)), &MODEL).unwrap();
    assert!(p.offloaded[1], "{p:#?}");
    assert_eq!((p.saved_bytes, p.host_bytes, p.exposed_transfer_s), (0, 8, 0.0));
    let q = partition_with(&g, Strategy::Budget(Budget::Bytes(0)), &MODEL).unwrap();
    assert_eq!(q.recomputed, vec![NodeId::new(1)], "without offload it is recomputed");
}
