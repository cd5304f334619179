//! Offload end to end on the CPU backend: a GPT whose sub-blocks are regions with offload
//! policies trains with gradients bitwise identical to saving everything, the measured device
//! and host peaks equal the plan's predictions, offloaded values leave device memory, and the
//! errors and fallbacks name the node.

use remat_core::Report;
use remat_core::{enter_region, PolicyTable, RegionSpec};
use remat_core::{partition, PGraph};
use remat_core::{
    Budget, CpuBackend, DType, Error, Graph, JointGraph, Model, OpKind, Plan, Policy, Step, Strategy, Tensor,
    TransferWindow,
};
use remat_zoo::{self as zoo, BlockParams, GptConfig, Part};

static SAVE_ALL: RegionSpec = RegionSpec::new("part", PolicyTable::SAVE_ALL);
static SAVE_MATMULS: RegionSpec =
    RegionSpec::new("part", PolicyTable { must_save: &[OpKind::Matmul], ..PolicyTable::RECOMPUTE_ALL });
static SAVE_MATMULS_OFFLOAD_REST: RegionSpec = RegionSpec::new(
    "part",
    PolicyTable { must_save: &[OpKind::Matmul], ..PolicyTable::uniform(Policy::PreferOffload) },
);
static OFFLOAD_ALL: RegionSpec = RegionSpec::new("part", PolicyTable::uniform(Policy::MustOffload));

fn cfg() -> GptConfig {
    GptConfig { batch: 2, seq: 8, d_model: 16, heads: 2, layers: 2, vocab: 32, dropout: 0.1, dtype: DType::F32 }
}

fn gpt(spec: &'static RegionSpec) -> Graph {
    let run = |part: Part, x: &Tensor, p: &BlockParams, heads: usize| {
        let _region = enter_region(spec);
        match part {
            Part::Attention => zoo::attention(x, p, heads),
            Part::FeedForward => zoo::feed_forward(x, p),
        }
    };
    zoo::gpt_with(&cfg(), &run).unwrap()
}

#[test]
fn offload_keeps_gradients_bitwise_and_peaks_exact() {
    let feeds = zoo::synthetic_tokens(&cfg(), 0).unwrap();
    let reference = Model::with_strategy(gpt(&SAVE_ALL), Strategy::Respect).unwrap();
    let params = reference.init_params(3).unwrap();
    let want = reference.step_seeded(&mut CpuBackend::new(), &params, &feeds, 7).unwrap();
    assert_eq!(want.measured_host_peak, 0);
    let cases = [
        (&SAVE_MATMULS_OFFLOAD_REST, Strategy::Respect),
        (&OFFLOAD_ALL, Strategy::Respect),
        (&OFFLOAD_ALL, Strategy::MinCut),
        (&SAVE_MATMULS, Strategy::BudgetOffload(Budget::Fraction(0.0))),
        (&SAVE_MATMULS, Strategy::BudgetOffload(Budget::Fraction(0.5))),
        (&SAVE_ALL, Strategy::BudgetOffload(Budget::Fraction(0.0))),
    ];
    for (spec, strategy) in cases {
        let model = Model::with_strategy(gpt(spec), strategy).unwrap();
        let out = model.step_seeded(&mut CpuBackend::new(), &params, &feeds, 7).unwrap();
        let what = format!("{:?} {strategy}", spec.policy.default);
        assert_eq!(out.measured_peak, out.predicted_peak, "{what}: device peak");
        assert_eq!(out.measured_host_peak, out.predicted_host_peak, "{what}: host peak");
        assert_eq!(out.grads, want.grads, "{what}: gradients bitwise identical to saving");
        assert_eq!(out.loss.to_bits(), want.loss.to_bits(), "{what}");
        let p = model.partition().unwrap();
        let plan = model.plan();
        let offloaded: Vec<_> = (0..p.offloaded.len()).filter(|&i| p.offloaded[i]).collect();
        assert_eq!(plan.offloaded().iter().map(|i| i.index()).collect::<Vec<_>>(), offloaded, "{what}");
        if spec.policy.default.is_offload() {
            assert!(!offloaded.is_empty() && p.host_bytes > 0, "{what}: offloads");
            assert!(out.measured_host_peak > 0);
            assert!(out.measured_peak < want.measured_peak, "{what}: device peak falls");
        }
        // Every offloaded value is copied out in the forward and fetched once in the backward,
        // before its first backward use.
        for &v in plan.offloaded() {
            assert_eq!(plan.forward().iter().filter(|s| **s == Step::Offload(v)).count(), 1);
            assert_eq!(plan.backward().iter().filter(|s| **s == Step::Fetch(v)).count(), 1);
        }
        for TransferWindow { value: v, offload: out, fetch, first_use: first } in plan.transfer_windows(model.joint()) {
            assert_eq!(plan.forward()[out], Step::Offload(v));
            assert_eq!(plan.backward()[fetch], Step::Fetch(v));
            assert!(fetch < first, "{what}: {v} fetched at {fetch}, first used at {first}");
        }
    }
}

#[test]
fn the_budget_with_offload_never_loses_to_the_budget_without() {
    let pg = PGraph::from_joint(&JointGraph::new(&gpt(&SAVE_MATMULS)).unwrap());
    for f in [0.0, 0.25, 0.5] {
        let without = partition(&pg, Strategy::Budget(Budget::Fraction(f)));
        let with = partition(&pg, Strategy::BudgetOffload(Budget::Fraction(f))).unwrap();
        let text = Report::new(&pg, &with).text();
        assert!(text.contains("offloaded to host memory"), "{text}");
        if let Ok(without) = without {
            assert!(with.saved_bytes <= without.saved_bytes.max(with.saved_bytes));
            let time = |p: &remat_core::Partition| p.recompute_flops as f64 / 50e9 + p.exposed_transfer_s;
            assert!(time(&with) <= time(&without) + 1e-12, "{f}");
        }
    }
}

#[test]
fn must_offload_on_what_cannot_leave_is_an_error_and_prefer_falls_back() {
    let text = |policy: &str| {
        format!(
            r#"{{"format": "remat.joint", "version": 1, "nodes": [
            {{"id": "x", "op": "input", "phase": "forward", "bytes": 4}},
            {{"id": "a", "op": "sin", "inputs": ["x"], "phase": "forward", "bytes": 4, "policy": "prefer_offload"}},
            {{"id": "y", "op": "cos", "inputs": ["a"], "phase": "forward", "bytes": 4, "policy": "{policy}"}},
            {{"id": "g", "op": "grad", "inputs": ["a", "y"], "phase": "backward", "bytes": 4}}
        ], "forward_outputs": ["y"]}}"#
        )
    };
    let g = remat_core::read_joint(&text("must_offload")).unwrap();
    let e = partition(&g, Strategy::Respect).unwrap_err();
    assert!(matches!(e, Error::Conflict(_)), "{e}");
    assert!(e.to_string().contains("\"y\"") && e.to_string().contains("forward output"), "{e}");
    let g = remat_core::read_joint(&text("prefer_offload")).unwrap();
    let p = partition(&g, Strategy::Respect).unwrap();
    assert!(p.warnings.iter().any(|w| w.contains("\"y\"") && w.contains("falls back")), "{:?}", p.warnings);
    assert!(p.offloaded[1] && !p.offloaded[2]);
    let json = Report::new(&g, &p).json();
    assert!(json.contains("\"action\": \"offload\""), "{json}");
}

#[test]
fn plans_refuse_to_offload_residents_naming_the_node() {
    let joint = JointGraph::new(&gpt(&SAVE_ALL)).unwrap();
    let n = joint.n_forward();
    let mut saved = vec![true; n];
    saved[0] = true;
    let mut offloaded = vec![false; n];
    offloaded[0] = true;
    let e = Plan::with_offload(&joint, &saved, &offloaded, &Default::default()).unwrap_err().to_string();
    assert!(e.contains("cannot be offloaded"), "{e}");
}
