//! Routing is never recomputed by default (issue 50, point 2; docs/policies.md, "Routing"): the
//! values that select data — top-k expert ids, an argmax, a sort's order, a comparison of floats
//! feeding an index — are kept by every strategy under every policy, unless a tag says
//! `must_recompute`; integer values computed from them are recomputed exactly like any value.
//! Checked on what the plans really do (the backward program's steps), with gradients bitwise
//! equal across strategies.

use remat::prelude::*;
use remat::{Budget, Graph, HostTensor, Strategy};

const STRATEGIES: [Strategy; 5] = [
    Strategy::Respect,
    Strategy::MinCut,
    Strategy::Budget(Budget::Fraction(0.0)),
    Strategy::Budget(Budget::Fraction(0.5)),
    Strategy::Budget(Budget::Fraction(1.0)),
];

const T: usize = 6;
const D: usize = 4;
const E: usize = 4;

/// A top-2 router dispatching by index: expert ids from `topk`, a capacity cut by a comparison
/// feeding the dispatch, per-expert rows picked by `index_select` (whose gradient reads the ids).
fn route(x: &Tensor, router: &Tensor, experts: &Tensor) -> Tensor {
    let (weights, ids) = x.matmul(router).softmax().topk(2, 1); // [T, 2]
    let ids = ids.name("ids");
    // Tokens whose weight is below a threshold go to expert 0: the comparison selects.
    let keep = weights.gt(&weights.scalar_like(0.2)).name("keep");
    let sent = keep.where_(&ids, &ids.scalar_like(0.0)).name("sent");
    let rows = experts.index_select(0, &sent.reshape(&[T * 2])).reshape(&[T, 2, D]);
    let mixed = (&rows * &weights.reshape(&[T, 2, 1])).sum(&[1], false);
    (x + &mixed).tanh()
}

#[checkpoint(policy = recompute_all)]
fn recompute_everything(x: &Tensor, router: &Tensor, experts: &Tensor) -> Tensor {
    route(x, router, experts)
}

#[checkpoint(policy = rules(must_recompute = [topk, gt, where], default = prefer_recompute))]
fn recompute_routing_too(x: &Tensor, router: &Tensor, experts: &Tensor) -> Tensor {
    route(x, router, experts)
}

fn traced(f: fn(&Tensor, &Tensor, &Tensor) -> Tensor) -> Graph {
    let trace = Trace::new();
    let x = trace.input("x", &[T, D], DType::F32);
    let router = trace.param("router", &[D, E], DType::F32);
    let experts = trace.param("experts", &[E, D], DType::F32);
    trace.finish(&f(&x, &router, &experts).sum_all()).unwrap()
}

/// The op names of the forward values the backward program recomputes.
fn recomputed_names(model: &Model) -> Vec<String> {
    let g = model.joint().graph();
    model.plan().recomputed().iter().map(|&id| g.node(id).name().unwrap_or(g.node(id).op.name()).to_string()).collect()
}

fn run(graph: &Graph) -> Vec<(Strategy, Model, remat::StepOutput)> {
    let feeds =
        Feeds::new().with("x", HostTensor::f32([T, D], (0..T * D).map(|i| (i as f32 * 0.37).sin()).collect()).unwrap());
    STRATEGIES
        .iter()
        .map(|&s| {
            let model = Model::with_strategy(graph.clone(), s).unwrap();
            let params = model.init_params(3).unwrap();
            let out = model.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
            assert_eq!(out.measured_peak, out.predicted_peak, "{s}");
            (s, model, out)
        })
        .collect()
}

#[test]
fn routing_is_kept_under_recompute_all_by_every_strategy() {
    let runs = run(&traced(recompute_everything));
    for (s, model, out) in &runs {
        let recomputed = recomputed_names(model);
        // The backward reads the ids (index_select's and gather's gradients) and what the cut
        // forms from them: the ids and the cut are kept; `sent`, an integer `where` of the two,
        // is exact to recompute from them.
        for routing in ["ids", "keep", "topk"] {
            assert!(!recomputed.iter().any(|r| r == routing), "{s}: {routing} recomputed ({recomputed:?})");
        }
        // Everything else is recomputed where the policy asks: the region still checkpoints.
        assert!(recomputed.iter().any(|r| r == "softmax" || r == "matmul"), "{s}: nothing recomputed: {recomputed:?}");
        assert_eq!(out.grads, runs[0].2.grads, "{s}: gradients differ from Respect's");
        let report = model.report(None).unwrap_or_default();
        assert!(report.contains("not recomputable"), "{s}: the report gives the reason:\n{report}");
    }
}

#[test]
fn a_budget_below_the_routing_is_refused_naming_the_floor() {
    let graph = traced(recompute_everything);
    let err = Model::with_strategy(graph.clone(), Strategy::Budget(Budget::Bytes(0))).unwrap_err().to_string();
    assert!(err.contains("smallest feasible budget") && err.contains("routing"), "{err}");
    // The floor it names is met, and is exactly what the least budget keeps.
    let least = Model::with_strategy(graph.clone(), Strategy::Budget(Budget::Fraction(0.0))).unwrap();
    let floor: u64 =
        err.split("smallest feasible budget is ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert_eq!(least.plan().saved_bytes() as u64, floor);
    Model::with_strategy(graph, Strategy::Budget(Budget::Bytes(floor))).unwrap();
}

#[test]
fn a_must_recompute_tag_recomputes_routing() {
    let runs = run(&traced(recompute_routing_too));
    let (_, respect, _) = &runs[0];
    let recomputed = recomputed_names(respect);
    assert!(recomputed.iter().any(|r| r == "ids"), "the tag asks for it: {recomputed:?}");
    assert!(recomputed.iter().any(|r| r == "keep"), "the tag asks for it: {recomputed:?}");
    for (s, _, out) in &runs {
        assert_eq!(out.grads, runs[0].2.grads, "{s}: gradients differ from Respect's");
    }
}

#[test]
fn masks_that_select_no_index_stay_recomputable() {
    // A comparison gating values (a ReLU-like mask into `where`) selects no index: recomputed.
    #[checkpoint(policy = recompute_all)]
    fn gate(x: &Tensor, w: &Tensor) -> Tensor {
        let h = x.matmul(w);
        let mask = h.gt(&h.scalar_like(0.0)).name("mask");
        mask.where_(&h, &h.scalar_like(0.0)).exp()
    }
    let trace = Trace::new();
    let x = trace.input("x", &[T, D], DType::F32);
    let w = trace.param("w", &[D, D], DType::F32);
    let graph = trace.finish(&gate(&x, &w).sum_all()).unwrap();
    let model = Model::new(graph).unwrap();
    let recomputed = recomputed_names(&model);
    assert!(recomputed.iter().any(|r| r == "mask"), "{recomputed:?}");
}
