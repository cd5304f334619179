//! Every rule in every strategy, on random joint graphs that combine every flag, every policy,
//! nested regions, region budgets, `grad_of` and sizes near the integer limits: each partition
//! either passes the independent checker (`partition::check`) or is one of the errors a user can
//! cause (a conflict naming both annotations, an infeasible budget, an overflow), and a conflict
//! is the same error in every strategy.

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use remat_core::{check, partition, Flags, PGraph, PNode, PRegion};
use remat_core::{Budget, Error, Limit, NodeId, Policy, RegionId, Strategy};

const STRATEGIES: [Strategy; 13] = [
    Strategy::Respect,
    Strategy::MinCut,
    Strategy::Budget(Budget::Fraction(0.0)),
    Strategy::Budget(Budget::Fraction(0.3)),
    Strategy::Budget(Budget::Fraction(1.0)),
    Strategy::Budget(Budget::Bytes(0)),
    Strategy::Budget(Budget::Bytes(100)),
    Strategy::Budget(Budget::Bytes(1 << 20)),
    Strategy::Budget(Budget::Bytes(u64::MAX)),
    Strategy::BudgetOffload(Budget::Fraction(0.0)),
    Strategy::BudgetOffload(Budget::Fraction(0.5)),
    Strategy::BudgetOffload(Budget::Bytes(0)),
    Strategy::BudgetOffload(Budget::Bytes(100)),
];

/// Sizes, from empty to near the limits (the huge ones make totals overflow, which must be an
/// error naming a node, never a wrap).
const BYTES: [u64; 8] = [0, 1, 4, 64, 1000, 1 << 40, 1 << 62, u64::MAX / 3];

#[derive(Clone, Debug)]
struct NodeSpec {
    kind: u8,
    inputs: [usize; 3],
    bytes: u8,
    flops: u8,
    flags: u8,
    policy: u8,
    region: u8,
    grad_of: Option<usize>,
}

fn node_spec() -> impl proptest::strategy::Strategy<Value = NodeSpec> {
    (
        0u8..16,
        [0usize..64, 0usize..64, 0usize..64],
        0u8..8,
        0u8..4,
        0u8..32,
        0u8..7,
        0u8..6,
        proptest::option::of(0usize..64),
    )
        .prop_map(|(kind, inputs, bytes, flops, flags, policy, region, grad_of)| NodeSpec {
            kind,
            inputs,
            bytes,
            flops,
            flags,
            policy,
            region,
            grad_of,
        })
}

/// Up to four regions, each nested in an earlier one or top level, some with budgets.
fn regions_spec() -> impl proptest::strategy::Strategy<Value = Vec<(u8, Option<u8>)>> {
    proptest::collection::vec((0u8..5, proptest::option::weighted(0.3, 0u8..=10)), 0..5)
}

const POLICIES: [Option<Policy>; 7] = [
    None,
    Some(Policy::MustSave),
    Some(Policy::PreferSave),
    Some(Policy::MustRecompute),
    Some(Policy::PreferRecompute),
    Some(Policy::MustOffload),
    Some(Policy::PreferOffload),
];

/// Builds a joint graph: `fwd` forward specs (the first two are an input and a parameter),
/// then `bwd` backward specs. Every graph is valid as a document would be (the reader refuses
/// the contradictions the partitioner need not handle: see `contradictory_documents_are_refused`).
fn build(fwd: &[NodeSpec], bwd: &[NodeSpec], regions: &[(u8, Option<u8>)], huge: bool) -> PGraph {
    let mut g = PGraph::default();
    for (r, &(parent, budget)) in regions.iter().enumerate() {
        let parent = (parent as usize) < r;
        g.regions.push(PRegion {
            key: r as u64,
            parent: parent.then(|| RegionId::new(regions[r].0 as u32)),
            name: format!("r{r}"),
            budget: budget.map(|b| b as f64 / 10.0),
        });
    }
    let size = |s: &NodeSpec| if huge { BYTES[s.bytes as usize] } else { BYTES[s.bytes as usize % 5] };
    for (k, s) in fwd.iter().enumerate() {
        let mut n = PNode::new(k as u64, "op", &[], false, size(s));
        n.flops = [0, 1, 10, 1000][s.flops as usize];
        let resident = k < 2 || s.kind == 0;
        if k > 0 && !resident && s.kind != 1 {
            let arity = 1 + (s.kind as usize % 3);
            n.inputs = s.inputs[..arity].iter().map(|&i| NodeId::new((i % k) as u32)).collect();
            n.inputs.dedup();
        }
        n.flags = Flags {
            view: !resident && !n.inputs.is_empty() && s.flags & 1 != 0,
            random: s.flags & 2 != 0,
            compute_intensive: s.flags & 4 != 0,
            not_recomputable: false,
            resident,
            tangent: false,
            rng_state: false,
            mutated: false,
        };
        n.flags.not_recomputable = !resident && !n.flags.view && s.flags & 8 != 0 && s.flags & 16 != 0;
        if !resident && !regions.is_empty() && (s.region as usize) < regions.len() {
            n.region = Some(RegionId::new(s.region as u32));
        }
        n.policy = if resident { None } else { POLICIES[s.policy as usize] };
        if n.flags.view && n.flags.not_recomputable {
            n.flags.not_recomputable = false;
        }
        n.op = if n.flags.view {
            "view".into()
        } else if n.inputs.is_empty() && !resident {
            "full".into()
        } else {
            "op".into()
        };
        g.nodes.push(n);
    }
    let n_fwd = g.nodes.len();
    for (k, s) in bwd.iter().enumerate() {
        let id = n_fwd + k;
        let mut n = PNode::new(id as u64, "grad", &[], true, size(s) % (1 << 20));
        n.inputs = s.inputs.iter().map(|&i| NodeId::new((i % id) as u32)).collect();
        n.inputs.sort();
        n.inputs.dedup();
        n.grad_of = s.grad_of.map(|u| NodeId::new((u % n_fwd) as u32));
        g.nodes.push(n);
    }
    // The last forward value that is not a view is an output, and so is about one node in
    // eight besides (views among them: the caller holds a view as any output, must_recompute
    // or not).
    let last = (0..n_fwd).rev().find(|&i| !g.nodes[i].flags.view).unwrap_or(0);
    let extra = (2..n_fwd).filter(|&k| fwd[k].kind >= 14 && k != last);
    for out in std::iter::once(last).chain(extra) {
        g.forward_outputs.push(NodeId::from_index(out));
    }
    g
}

/// The same graph with every region budget 1.0 (regions without one stay without).
fn with_region_budgets_of_one(g: &PGraph) -> PGraph {
    let mut g = g.clone();
    for r in &mut g.regions {
        if r.budget.is_some() {
            r.budget = Some(1.0);
        }
    }
    g
}

/// Outcomes that must agree across strategies: adding offload never makes a budget infeasible,
/// and a byte budget that fits never stops fitting when it grows.
fn cross_strategy(g: &PGraph) -> Result<(), TestCaseError> {
    for bytes in [0, 100, 1 << 20] {
        let plain = partition(g, Strategy::Budget(Budget::Bytes(bytes)));
        let offload = partition(g, Strategy::BudgetOffload(Budget::Bytes(bytes)));
        if plain.is_ok() {
            prop_assert!(
                offload.is_ok(),
                "budget={} fits but budget+offload={} fails: {:?}",
                bytes,
                bytes,
                offload.err()
            );
        }
    }
    let mut last: Option<u64> = None;
    for bytes in [0u64, 16, 100, 1000, 1 << 20, u64::MAX] {
        match partition(g, Strategy::Budget(Budget::Bytes(bytes))) {
            Ok(p) => {
                if let Some(smaller) = last {
                    prop_assert!(p.saved_bytes >= smaller || p.saved_bytes <= bytes, "budget={}", bytes);
                }
                last = Some(p.saved_bytes);
            }
            Err(e) => prop_assert!(last.is_none(), "budget={} fails after a smaller one fit: {}", bytes, e),
        }
    }
    Ok(())
}

/// `default` cases, or `PROPTEST_CASES` when set.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Errors a random graph may legitimately produce.
fn expected(e: &Error) -> bool {
    match e {
        Error::Conflict(_) | Error::Infeasible { what: Limit::Budget | Limit::RegionBudget(_), .. } => true,
        Error::Graph { message } => message.contains("add up past 2^64"),
        _ => false,
    }
}

fn run_all(g: &PGraph) -> Result<usize, TestCaseError> {
    let mut conflict: Option<String> = None;
    let mut checked = 0;
    for (k, strategy) in STRATEGIES.into_iter().enumerate() {
        match partition(g, strategy) {
            Ok(p) => {
                if let Err(e) = check(g, &p) {
                    return Err(TestCaseError::fail(format!("{strategy}: {e}\n{g:#?}")));
                }
                prop_assert!(conflict.is_none(), "{}: passed though respect reports {:?}", strategy, conflict);
                checked += 1;
            }
            Err(e) => {
                prop_assert!(expected(&e), "{}: unexpected error {}", strategy, e);
                if let Error::Conflict(m) = &e {
                    if k == 0 {
                        conflict = Some(m.clone());
                    }
                    prop_assert_eq!(Some(m), conflict.as_ref(), "{}: the same conflict in every strategy", strategy);
                }
            }
        }
    }
    Ok(checked)
}

proptest! {
    // PROPTEST_CASES raises the count for a long run (CI runs the default).
    #![proptest_config(ProptestConfig::with_cases(cases(3000)))]

    #[test]
    fn every_rule_holds_in_every_strategy(
        fwd in proptest::collection::vec(node_spec(), 2..18),
        bwd in proptest::collection::vec(node_spec(), 1..8),
        regions in regions_spec(),
    ) {
        let g = build(&fwd, &bwd, &regions, false);
        run_all(&g)?;
        cross_strategy(&g)?;
    }

    /// The heuristic of very large graphs keeps the rules, costs no less than the exact optimum,
    /// and the bound behind its gap never exceeds it.
    #[test]
    fn the_heuristics_bound_is_below_the_optimum(
        fwd in proptest::collection::vec(node_spec(), 2..14),
        bwd in proptest::collection::vec(node_spec(), 1..6),
        regions in proptest::collection::vec((0u8..5).prop_map(|p| (p, None)), 0..3),
    ) {
        let g = build(&fwd, &bwd, &regions, false);
        let model = remat_core::CostModel::default();
        // Byte budgets: a fraction's limit is itself found by the search.
        for strategy in STRATEGIES.into_iter().filter(|s| matches!(s.budget(), Some(Budget::Bytes(_)))) {
            let (Ok(exact), Ok(h)) = (
                remat_core::partition_with(&g, strategy, &model),
                remat_core::partition_by_heuristic(&g, strategy, &model),
            ) else { continue };
            check(&g, &h).map_err(|err| TestCaseError::fail(format!("{strategy}: {err}")))?;
            let offload = matches!(strategy, Strategy::BudgetOffload(_));
            let cost = |q: &remat_core::Partition| {
                if offload { q.recompute_flops as f64 / model.flops_per_s + q.exposed_transfer_s } else { q.recompute_flops as f64 }
            };
            let (opt, heur) = (cost(&exact), cost(&h));
            prop_assert!(heur + 1e-9 * opt.max(1e-12) >= opt, "{}: heuristic {} below the optimum {}", strategy, heur, opt);
            let gap = h.optimality_gap.expect("a budget reports its gap");
            let bound = heur * (1.0 - gap);
            prop_assert!(bound <= opt * (1.0 + 1e-9) + 1e-12, "{}: bound {} above the optimum {}", strategy, bound, opt);
        }
    }

    /// A region budget of 1.0 never constrains: whatever partitions without region budgets
    /// partitions with them.
    #[test]
    fn a_region_budget_of_one_never_constrains(
        fwd in proptest::collection::vec(node_spec(), 2..18),
        bwd in proptest::collection::vec(node_spec(), 1..8),
        regions in regions_spec(),
    ) {
        let g = build(&fwd, &bwd, &regions, false);
        let mut unbudgeted = g.clone();
        unbudgeted.regions.iter_mut().for_each(|r| r.budget = None);
        let one = with_region_budgets_of_one(&g);
        for strategy in STRATEGIES {
            if partition(&unbudgeted, strategy).is_ok() {
                let p = partition(&one, strategy);
                prop_assert!(p.is_ok(), "{}: fits without region budgets, not with budgets of 1.0: {:?}", strategy, p.err());
            }
        }
    }

    #[test]
    fn sizes_near_the_limits_never_wrap(
        fwd in proptest::collection::vec(node_spec(), 2..12),
        bwd in proptest::collection::vec(node_spec(), 1..6),
        regions in regions_spec(),
    ) {
        let g = build(&fwd, &bwd, &regions, true);
        let total: u128 = g.nodes.iter().map(|n| n.bytes as u128).sum();
        let result = partition(&g, Strategy::Respect);
        if total > u64::MAX as u128 {
            let e = result.expect_err("bytes past 2^64 must be an error");
            prop_assert!(e.to_string().contains("past 2^64"), "{}", e);
        } else {
            run_all(&g)?;
        }
    }
}

proptest! {
    // Each case solves a dozen 0-1 programs: fewer cases than the rules above.
    #![proptest_config(ProptestConfig::with_cases(cases(400)))]

    /// The exact 0-1 program (HiGHS) agrees with trying every combination: on graphs small
    /// enough for both, every budget gets the same least cost from each, within the rules.
    #[test]
    fn the_budget_program_matches_every_combination(
        fwd in proptest::collection::vec(node_spec(), 2..14),
        bwd in proptest::collection::vec(node_spec(), 1..6),
        regions in regions_spec(),
    ) {
        let g = build(&fwd, &bwd, &regions, false);
        let model = remat_core::CostModel::default();
        for strategy in STRATEGIES.into_iter().filter(|s| s.budget().is_some()) {
            let every = remat_core::partition_with(&g, strategy, &model);
            let program = remat_core::partition_by_program(&g, strategy, &model);
            match (every, program) {
                (Ok(e), Ok(p)) => {
                    check(&g, &p).map_err(|err| TestCaseError::fail(format!("{strategy}: {err}")))?;
                    let cost = |q: &remat_core::Partition| {
                        q.recompute_flops as f64 / model.flops_per_s + if matches!(strategy, Strategy::BudgetOffload(_)) { q.exposed_transfer_s } else { 0.0 }
                    };
                    prop_assert!((cost(&e) - cost(&p)).abs() <= 1e-9 * cost(&e).max(1e-12), "{}: every combination {} vs program {}", strategy, cost(&e), cost(&p));
                    prop_assert_eq!(p.optimality_gap, Some(0.0));
                }
                (Err(e), Err(p)) => prop_assert_eq!(e.to_string(), p.to_string(), "{}", strategy),
                (e, p) => prop_assert!(false, "{}: every combination {:?}, program {:?}", strategy, e.map(|x| x.saved_bytes), p.map(|x| x.saved_bytes)),
            }
        }
    }

}

#[test]
fn contradictory_documents_are_refused() {
    let doc = |node: &str| {
        format!(
            r#"{{"format": "remat.joint", "version": 1, "nodes": [
                {{"id": "x", "op": "input", "phase": "forward", "bytes": 4}}, {node}], "forward_outputs": ["y"]}}"#
        )
    };
    let cases = [
        (
            r#"{"id": "y", "op": "param", "phase": "forward", "bytes": 4, "region": 0, "policy": "must_recompute"}"#,
            "must_recompute on a resident value",
        ),
        (
            r#"{"id": "y", "op": "t", "inputs": ["x"], "phase": "forward", "bytes": 4, "flags": ["view", "not_recomputable"]}"#,
            "contradict each other",
        ),
        (
            r#"{"id": "y", "op": "t", "inputs": ["x"], "phase": "forward", "bytes": 4, "flags": ["view", "resident"]}"#,
            "contradict each other",
        ),
    ];
    for (node, expected) in cases {
        let e = remat_core::read_joint(&doc(node)).unwrap_err().to_string();
        assert!(e.starts_with("node \"y\""), "{e}");
        assert!(e.contains(expected), "expected `{expected}` in `{e}`");
    }
    // must_recompute on a forward output is no contradiction: the caller holds it.
    let output = r#"{"id": "y", "op": "sin", "inputs": ["x"], "phase": "forward", "bytes": 4, "region": 0, "policy": "must_recompute"}"#;
    let g = remat_core::read_joint(&doc(output)).unwrap();
    for strategy in STRATEGIES {
        check(&g, &partition(&g, strategy).unwrap()).unwrap();
    }
}

#[test]
fn conflicts_are_errors_naming_both_annotations_in_every_strategy() {
    // Only where no plan honours both: a must_save view of a must_recompute base, a
    // must_recompute value that cannot be recomputed.
    let doc = |a: &str, b_region: u32| {
        format!(
            r#"{{"format": "remat.joint", "version": 1, "nodes": [
        {{"id": "x", "op": "input", "phase": "forward", "bytes": 4}},
        {a},
        {{"id": "b", "op": "cos", "inputs": ["a"], "phase": "forward", "bytes": 4, "region": {b_region}, "policy": "prefer_recompute"}},
        {{"id": "v", "op": "view", "inputs": ["a"], "phase": "forward", "bytes": 4, "flags": ["view"], "region": 0, "policy": "must_save"}},
        {{"id": "g", "op": "grad", "inputs": ["b", "v"], "phase": "backward", "bytes": 4}}
    ], "forward_outputs": ["b"]}}"#
        )
    };
    let a = r#"{"id": "a", "op": "sin", "inputs": ["x"], "phase": "forward", "bytes": 4, "region": 0, "policy": "must_recompute"}"#;
    let unrecomputable = r#"{"id": "a", "op": "sin", "inputs": ["x"], "phase": "forward", "bytes": 4, "flags": ["not_recomputable"], "region": 0, "policy": "must_recompute"}"#;
    for (text, clash) in [
        (doc(a, 0), "it is the base of \"v\" (view in r0#0), which is must_save (an explicit tag)"),
        (doc(unrecomputable, 0), "it is flagged not_recomputable"),
    ] {
        let g = remat_core::read_joint(&text).unwrap();
        let mut first = None;
        for strategy in STRATEGIES {
            let e = partition(&g, strategy).unwrap_err().to_string();
            assert!(e.starts_with("conflicting constraints: \"a\" (sin in r0#0)"), "{strategy}: {e}");
            assert!(e.contains("must_recompute (an explicit tag)") && e.contains(clash), "{e}");
            assert_eq!(first.get_or_insert(e.clone()), &e, "{strategy}");
        }
    }
    // Read by region 1 from outside region 0, `a` is kept by its reader: the must_save view of it
    // is kept with it, and no plan breaks either tag.
    let g = remat_core::read_joint(&doc(a, 1)).unwrap();
    for strategy in STRATEGIES.into_iter().filter(|s| !matches!(s.budget(), Some(Budget::Bytes(b)) if b < 4)) {
        let p = partition(&g, strategy).unwrap();
        check(&g, &p).unwrap();
        let d = p.decisions.iter().find(|d| g.node(d.node).id.label() == "a").unwrap();
        assert_eq!((d.action, d.overrode), (remat_core::Action::Save, Some(Policy::MustRecompute)), "{strategy}");
    }
}

#[test]
fn global_budgets_bound_the_total_region_budgets_included() {
    // Two regions each holding a 100-byte value the backward reads; region 1 allows all of its.
    let text = r#"{"format": "remat.joint", "version": 1,
      "regions": [{"id": 0, "name": "f", "budget": 1.0}, {"id": 1, "name": "g", "budget": 1.0}],
      "nodes": [
        {"id": "x", "op": "input", "phase": "forward", "bytes": 4},
        {"id": "a", "op": "sin", "inputs": ["x"], "phase": "forward", "bytes": 100, "flops": 50, "region": 0, "policy": "prefer_save"},
        {"id": "b", "op": "sin", "inputs": ["x"], "phase": "forward", "bytes": 100, "flops": 50, "region": 1, "policy": "must_save"},
        {"id": "y", "op": "add", "inputs": ["a", "b"], "phase": "forward", "bytes": 4},
        {"id": "g", "op": "grad", "inputs": ["a", "b"], "phase": "backward", "bytes": 4}
    ], "forward_outputs": ["y"]}"#;
    let g = remat_core::read_joint(text).unwrap();
    let p = partition(&g, Strategy::Budget(Budget::Bytes(150))).unwrap();
    check(&g, &p).unwrap();
    assert_eq!(p.saved_bytes, 100, "the global budget bounds the total");
    // b alone (must_save, 100 bytes) is what both regions' budgets and the rules leave.
    let e = partition(&g, Strategy::Budget(Budget::Bytes(50))).unwrap_err();
    assert!(matches!(e, Error::Infeasible { what: Limit::Budget, asked: 50, least: Some(100), .. }), "{e:?}");
    assert!(e.to_string().contains("the smallest feasible global budget is 100 bytes"), "{e}");
}

/// Twenty regions of `budget = 0.5` in one graph: under every strategy each keeps at most half
/// of its own bytes (a limit worked out here, not read from the library), and each value names
/// its own region's budget as the reason.
#[test]
fn twenty_region_budgets_each_hold_and_decide_their_own_values() {
    let mut nodes = vec![r#"{"id": "x", "op": "input", "phase": "forward", "bytes": 4}"#.to_string()];
    let mut regions = Vec::new();
    let mut reads = Vec::new();
    for r in 0..20 {
        regions.push(format!(r#"{{"id": {r}, "name": "f{r}", "budget": 0.5}}"#));
        let mut prev = "x".to_string();
        for k in 0..6 {
            let id = format!("n{r}_{k}");
            nodes.push(format!(
                r#"{{"id": "{id}", "op": "sin", "inputs": ["{prev}"], "phase": "forward", "bytes": {}, "flops": {}, "region": {r}, "policy": "prefer_save"}}"#,
                10 + k,
                5 * k + 1
            ));
            reads.push(format!("\"{id}\""));
            prev = id;
        }
    }
    nodes.push(format!(
        r#"{{"id": "g", "op": "grad", "inputs": [{}], "phase": "backward", "bytes": 4}}"#,
        reads.join(", ")
    ));
    let text = format!(
        r#"{{"format": "remat.joint", "version": 1, "regions": [{}], "nodes": [{}], "forward_outputs": ["x"]}}"#,
        regions.join(", "),
        nodes.join(",\n")
    );
    let g = remat_core::read_joint(&text).unwrap();
    // Each region's limit, from the bytes written above: half of its six values' 10 + .. + 15.
    let limit = (10..16).sum::<u64>() / 2;
    let start = std::time::Instant::now();
    for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.5))] {
        let p = partition(&g, strategy).unwrap();
        check(&g, &p).unwrap();
        let mut kept = [0u64; 20];
        for i in 0..g.len() {
            let node = g.node(NodeId::new(i as u32));
            if let (Some(r), true) = (node.region, p.saved[i] && !p.offloaded[i]) {
                kept[r.index()] += node.bytes;
            }
        }
        for (r, &bytes) in kept.iter().enumerate() {
            assert!(bytes <= limit, "{strategy}: region f{r} keeps {bytes} bytes, over its limit of {limit}");
        }
        // Every one of the 120 values is decided by its own region's budget.
        let mut by_budget = 0;
        for d in &p.decisions {
            if let remat_core::Reason::RegionBudget(r) = d.reason {
                assert_eq!(g.node(d.node).region, Some(r), "{strategy}");
                by_budget += 1;
            }
        }
        assert_eq!(by_budget, 120, "{strategy}: values decided by their region's budget");
    }
    println!("20 region budgets, 3 strategies: {:?}", start.elapsed());
}

/// The generator is not vacuous: most random graphs partition, and every outcome occurs.
#[test]
fn random_graphs_exercise_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let spec =
        (proptest::collection::vec(node_spec(), 2..18), proptest::collection::vec(node_spec(), 1..8), regions_spec());
    let (mut ok, mut conflicts, mut budgets, mut recomputed, mut region_budgets) = (0, 0, 0, 0, 0);
    let (mut offloaded, mut chosen_offloads) = (0, 0);
    let total = 1500;
    for _ in 0..total {
        let (fwd, bwd, regions) = spec.new_tree(&mut runner).unwrap().current();
        let g = build(&fwd, &bwd, &regions, false);
        region_budgets += g.regions.iter().any(|r| r.budget.is_some()) as usize;
        for strategy in STRATEGIES {
            match partition(&g, strategy) {
                Ok(p) => {
                    check(&g, &p).unwrap();
                    ok += 1;
                    recomputed += (!p.recomputed.is_empty()) as usize;
                    offloaded += p.offloaded.contains(&true) as usize;
                    chosen_offloads +=
                        p.decisions.iter().any(|d| d.offload == Some(remat_core::OffloadReason::Solver)) as usize;
                }
                Err(Error::Conflict(_)) => conflicts += 1,
                Err(_) => budgets += 1,
            }
        }
    }
    let runs = total * STRATEGIES.len();
    println!("{runs} partitions: {ok} checked ({recomputed} recomputing), {conflicts} conflicts, {budgets} infeasible budgets; {region_budgets} graphs with region budgets");
    assert!(ok * 2 > runs, "most partitions succeed");
    assert!(recomputed * 4 > ok, "recomputation is common");
    println!("{offloaded} partitions offload, {chosen_offloads} with offloads the solver chose");
    assert!(conflicts > 0 && budgets > 0 && region_budgets > 100);
    assert!(offloaded * 10 > ok && chosen_offloads > 100, "offloads are common");
}

#[cfg(feature = "exact")]
#[path = "../../benches/common/residual_mlp_graph.rs"]
mod residual_mlp_graph;

/// The partition graph of a residual MLP of `layers` layers `h + tanh(h · w)` (the shape of
/// the benchmark's 10⁶-node `remat.graph`, at a size the exact program solves).
#[cfg(feature = "exact")]
fn residual_mlp(layers: usize) -> PGraph {
    let graph = remat_core::read_graph(&residual_mlp_graph::residual_mlp_graph(layers)).unwrap();
    PGraph::from_joint(&remat_core::JointGraph::new(&graph).unwrap())
}

/// On a residual MLP with half the bytes it could save, the search of very large graphs comes within 1 % of the
/// exact optimum: its eviction path alone recomputes five times as much there (the bound's
/// Lagrangian cut keeps a few bytes too many, and its repair fits it).
#[cfg(feature = "exact")]
#[test]
fn the_repaired_cut_brings_the_heuristic_near_the_optimum_on_a_residual_mlp() {
    let g = residual_mlp(200);
    let model = remat_core::CostModel::default();
    let everything = partition(&g, Strategy::Respect).unwrap().saved_bytes;
    let strategy = Strategy::Budget(Budget::Bytes(everything / 2));
    let exact = remat_core::partition_with(&g, strategy, &model).unwrap();
    let heuristic = remat_core::partition_by_heuristic(&g, strategy, &model).unwrap();
    check(&g, &heuristic).unwrap();
    assert!(exact.recompute_flops > 0, "the budget binds");
    assert!(heuristic.saved_bytes <= everything / 2);
    assert!(
        heuristic.recompute_flops as f64 <= 1.01 * exact.recompute_flops as f64,
        "heuristic {} FLOPs against the optimum's {} ({} B against {} B)",
        heuristic.recompute_flops,
        exact.recompute_flops,
        heuristic.saved_bytes,
        exact.saved_bytes
    );
    // Its gap is measured against a bound no higher than the optimum.
    let bound = heuristic.recompute_flops as f64 * (1.0 - heuristic.optimality_gap.unwrap());
    assert!(bound <= exact.recompute_flops as f64 * (1.0 + 1e-9), "bound {bound} above the optimum");
}

/// Two regions' views around a must_recompute value `b`: `g` reads `b` and `c`, and `c` reads
/// `b` and its view `b_t`; `b` reads the view `a_t` of `a`. Both views are boundary values (read
/// in region 0, made outside it). The legal plans are two: recompute `c` (1000 FLOPs), which
/// reaches `b_t` and so keeps `b` (4 B, the reader's keep); or keep `c` (4 B), which leaves `b_t`
/// unread, so `b` is recomputed (10 FLOPs) and its replay reads `a_t`, kept through `a` (50 B).
/// Keeping both `b` and `c` (8 B, no recompute) breaks `b`'s tag.
fn tied_views() -> PGraph {
    remat_core::read_joint(
        r#"{"format": "remat.joint", "version": 1, "nodes": [
        {"id": "x", "op": "input", "phase": "forward", "bytes": 4},
        {"id": "a", "op": "mm", "inputs": ["x"], "phase": "forward", "bytes": 50, "flops": 10, "region": 0, "policy": "prefer_save"},
        {"id": "a_t", "op": "t", "inputs": ["a"], "phase": "forward", "bytes": 4, "flags": ["view"]},
        {"id": "b", "op": "mm", "inputs": ["x", "a_t"], "phase": "forward", "bytes": 4, "flops": 10, "region": 0, "policy": "must_recompute"},
        {"id": "b_t", "op": "t", "inputs": ["b"], "phase": "forward", "bytes": 4, "flags": ["view"]},
        {"id": "c", "op": "mul", "inputs": ["b", "b_t"], "phase": "forward", "bytes": 4, "flops": 1000, "region": 0, "policy": "prefer_save"},
        {"id": "y", "op": "sum", "inputs": ["c"], "phase": "forward", "bytes": 4},
        {"id": "g", "op": "grad", "inputs": ["b", "c"], "phase": "backward", "bytes": 4}],
        "forward_outputs": ["y"]}"#,
    )
    .unwrap()
}

/// The index of the node whose document id is `name`.
fn node(g: &PGraph, name: &str) -> usize {
    g.nodes.iter().position(|n| n.id.label_raw() == name).unwrap()
}

/// A must_recompute value kept only because a region reads a view of it goes back to being
/// recomputed where the backward needs no such view; its replay may then read a view another
/// region keeps, whose base nothing forced while the must_recompute value was at hand. That base
/// is kept and the must_recompute tag holds, in every strategy that answers. (Found by
/// `the_heuristics_bound_is_below_the_optimum`.)
#[test]
fn a_released_must_recompute_base_keeps_the_views_its_replay_reads() {
    let g = tied_views();
    let id = |name: &str| node(&g, name);
    let mut answered = 0;
    for strategy in STRATEGIES {
        let Ok(p) = partition(&g, strategy) else { continue };
        check(&g, &p).unwrap_or_else(|e| panic!("{strategy}: {e}"));
        answered += 1;
        if p.saved[id("c")] {
            assert!(p.recomputed.contains(&NodeId::from_index(id("b"))), "{strategy}: b is not recomputed");
            assert!(p.saved[id("a")], "{strategy}: the replay of b reads a_t, but a is not kept");
        }
    }
    // Respect saves the prefer_save `c`, and so takes the path above.
    let respect = partition(&g, Strategy::Respect).unwrap();
    assert!(respect.saved[id("c")] && respect.saved[id("a")] && !respect.saved[id("b")]);
    assert!(answered >= 3, "{answered} strategies answered");
}

/// A search: `partition_with` (the exact searches where the problem is small) or the heuristic.
type Search = fn(&PGraph, Strategy, &remat_core::CostModel) -> remat_core::Result<remat_core::Partition>;

/// What a must_recompute base of a boundary view costs ([`tied_views`]) is counted where the
/// search weighs plans, in the exact searches and the heuristic alike.
#[test]
fn tied_bases_count_against_the_budget_in_every_search() {
    let g = tied_views();
    let id = |name: &str| node(&g, name);
    let model = remat_core::CostModel::default();
    let searches: [(&str, Search); 2] =
        [("exact", remat_core::partition_with), ("heuristic", remat_core::partition_by_heuristic)];
    for (search, solve) in searches {
        for limit in [0u64, 3, 4, 8, 53, 54, 1000] {
            let strategy = Strategy::Budget(Budget::Bytes(limit));
            match solve(&g, strategy, &model) {
                Err(Error::Infeasible { least, .. }) => {
                    assert!(limit < 4, "{search} {strategy}: refused");
                    assert_eq!(least, Some(4), "{search} {strategy}");
                }
                Err(e) => panic!("{search} {strategy}: {e}"),
                Ok(p) => {
                    check(&g, &p).unwrap_or_else(|e| panic!("{search} {strategy}: {e}"));
                    let (bytes, flops, kept) = if limit < 54 { (4, 1000, "b") } else { (54, 10, "c") };
                    assert_eq!((p.saved_bytes, p.recompute_flops), (bytes, flops), "{search} {strategy}");
                    assert!(p.saved[id(kept)], "{search} {strategy}: {kept} not kept");
                }
            }
        }
    }
    // The same tie where every plan is over a budget of 0: recomputing `c` reaches `a_t`, which
    // keeps `a` (1 B); keeping `c` keeps 1 B as well.
    let doc = r#"{"format": "remat.joint", "version": 1, "nodes": [
        {"id": "x", "op": "input", "phase": "forward", "bytes": 4},
        {"id": "a", "op": "mm", "inputs": ["x"], "phase": "forward", "bytes": 1, "region": 0, "policy": "must_recompute"},
        {"id": "a_t", "op": "t", "inputs": ["a"], "phase": "forward", "bytes": 4, "flags": ["view"], "policy": "prefer_save"},
        {"id": "c", "op": "mul", "inputs": ["x", "a_t"], "phase": "forward", "bytes": 1, "region": 0, "policy": "prefer_save"},
        {"id": "y", "op": "sum", "inputs": ["x"], "phase": "forward", "bytes": 4},
        {"id": "g", "op": "grad", "inputs": ["x", "c"], "phase": "backward", "bytes": 4}],
        "forward_outputs": ["y"]}"#;
    let g = remat_core::read_joint(doc).unwrap();
    for (search, solve) in searches {
        let strategy = Strategy::Budget(Budget::Bytes(0));
        match solve(&g, strategy, &model) {
            Err(Error::Infeasible { least, .. }) => assert_eq!(least, Some(1), "{search} {strategy}"),
            other => panic!("{search} {strategy}: {:?}", other.map(|p| p.saved_bytes)),
        }
    }
    // Offloading, the host takes what the device cannot: the exact search offloads `c`; the
    // heuristic's path recomputes `c` (it costs no FLOPs), which keeps the tied `a`, and then
    // offloads `a`.
    let strategy = Strategy::BudgetOffload(Budget::Bytes(0));
    for (search, solve) in searches {
        let p = solve(&g, strategy, &model).unwrap_or_else(|e| panic!("{search} {strategy}: {e}"));
        check(&g, &p).unwrap_or_else(|e| panic!("{search} {strategy}: {e}"));
        assert_eq!((p.saved_bytes, p.host_bytes), (0, 1), "{search} {strategy}");
    }
}

/// What the oracle prices a plan by: transfers and compute comparable on these tiny graphs.
const ORACLE_MODEL: remat_core::CostModel =
    remat_core::CostModel { d2h_bytes_per_s: 4.0, h2d_bytes_per_s: 8.0, flops_per_s: 1.0 };

#[path = "../../benches/common/brute_force.rs"]
mod brute_force;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(300)))]

    /// Byte budgets are solved exactly under every tag and flag, offload tags and the offload
    /// strategy included: the search's cost equals the least of any assignment the checker
    /// accepts, and it answers exactly where one exists.
    #[test]
    fn byte_budgets_match_a_brute_force_over_the_rules(
        fwd in proptest::collection::vec(node_spec(), 2..10),
        bwd in proptest::collection::vec(node_spec(), 1..5),
        regions in proptest::collection::vec((0u8..5).prop_map(|p| (p, None)), 0..3),
    ) {
        let g = build(&fwd, &bwd, &regions, false);
        let budgets = [0u64, 1, 4, 8, 64, 1000, u64::MAX];
        let strategies = budgets.into_iter().flat_map(|b| [Strategy::Budget(Budget::Bytes(b)), Strategy::BudgetOffload(Budget::Bytes(b))]);
        for strategy in strategies {
            let oracle = brute_force::least_cost(&g, strategy, &ORACLE_MODEL);
            match remat_core::partition_with(&g, strategy, &ORACLE_MODEL) {
                Ok(p) => {
                    check(&g, &p).map_err(|e| TestCaseError::fail(format!("{strategy}: {e}")))?;
                    let (cost, best) = (brute_force::plan_cost(&p, strategy, &ORACLE_MODEL), oracle.unwrap_or(f64::NAN));
                    prop_assert!((cost - best).abs() <= 1e-9 * best.max(1.0), "{}: {} against the brute force's {:?}", strategy, cost, oracle);
                }
                Err(Error::Infeasible { .. }) => prop_assert_eq!(oracle, None, "{}: refused", strategy),
                // A conflict is judged on everything the backward could need, before any plan
                // (and is the same error in every strategy: `run_all`); a plan that keeps the
                // value's reader may still honour both tags.
                Err(Error::Conflict(_)) => return Ok(()),
                Err(e) => prop_assert!(false, "{}: {}", strategy, e),
            }
        }
    }
}
