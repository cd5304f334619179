//! The partitioner's reference cases (issue #4, point 5), each partitioned, planned and
//! executed on the CPU: gradients bitwise identical across strategies, measured peak equal to
//! the plan's.

use remat::partition::PGraph;
use remat::prelude::*;
use remat::{Action, Budget, Graph, Op, Policy, Reason, Step, Strategy, UnaryOp};
use remat_zoo::{self as zoo, MlpConfig};

const STRATEGIES: [Strategy; 5] = [
    Strategy::Respect,
    Strategy::MinCut,
    Strategy::Budget(Budget::Fraction(0.0)),
    Strategy::Budget(Budget::Fraction(0.5)),
    Strategy::Budget(Budget::Fraction(1.0)),
];

/// Runs every strategy; asserts equal gradients (bit for bit) and measured == predicted peak.
fn run_all(graph: &Graph, feeds: &Feeds) -> Vec<Model> {
    let models: Vec<Model> = STRATEGIES.iter().map(|&s| Model::with_strategy(graph.clone(), s).unwrap()).collect();
    let params = models[0].init_params(42).unwrap();
    let mut reference: Option<StepOutput> = None;
    for (model, strategy) in models.iter().zip(STRATEGIES) {
        let out = model.step_seeded(&mut CpuBackend::new(), &params, feeds, 9).unwrap();
        assert_eq!(out.measured_peak, out.predicted_peak, "{strategy}");
        let partition = model.partition().unwrap();
        remat::partition::check(&PGraph::from_joint(model.joint()), partition).unwrap();
        let mut planned: Vec<remat::NodeId> = model.plan().recomputed().to_vec();
        planned.sort();
        assert_eq!(planned, partition.recomputed, "{strategy}: the plan recomputes what the partition says");
        match &reference {
            None => reference = Some(out),
            Some(r) => {
                assert_eq!(out.loss.to_bits(), r.loss.to_bits(), "{strategy}");
                assert_eq!(out.grads, r.grads, "{strategy}: gradients differ from Respect's");
            }
        }
    }
    models
}

use remat::StepOutput;

/// Forward op names of the nodes a partition saves, inputs and parameters left out.
fn saved_ops(model: &Model) -> Vec<&'static str> {
    let g = model.joint().graph();
    let p = model.partition().unwrap();
    (0..model.joint().n_forward())
        .filter(|&i| p.saved[i] && !g.nodes()[i].op.info().leaf)
        .map(|i| g.nodes()[i].op.name())
        .collect()
}

/// How many ops of `kind` the backward program computes (gradients and recomputes).
/// Matrix products in the backward: recomputed `matmul`s and the gradients' `matmul_t`s.
fn backward_gemms(model: &Model) -> usize {
    backward_count(model, "matmul") + backward_count(model, "matmul_t")
}

fn backward_count(model: &Model, kind: &str) -> usize {
    let g = model.joint().graph();
    model
        .plan()
        .backward()
        .iter()
        .filter(|s| match s {
            Step::Compute(id) | Step::Recompute(id) | Step::Alias(id) => g.node(*id).op.name() == kind,
            Step::Free(_) | Step::Offload(_) | Step::Fetch(_) => false,
        })
        .count()
}

// a. float8 linear + relu + residual.

/// fp8 quantisation of `t` with a per-tensor scale: the values and the inverse scale.
fn to_fp8(t: &Tensor) -> (Tensor, Tensor) {
    let amax = t.abs().amax(&[0, 1], false);
    let scale = amax.reciprocal() * 448.0;
    let q = (t * &scale).clamp(-448.0, 448.0).cast(DType::F8E4M3);
    (q, scale.reciprocal())
}

#[checkpoint(policy = save(scaled_matmul))]
fn fp8_linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    let (xq, x_inv) = to_fp8(x);
    let (wq, w_inv) = to_fp8(w);
    let y = Tensor::scaled_matmul(&xq, &wq, &x_inv, &w_inv);
    &(&y + b).relu() + x
}

fn fp8_graph() -> (Graph, Feeds) {
    let trace = Trace::new();
    let x = trace.input("x", &[8, 16], DType::F32);
    let w = trace.param("w", &[16, 16], DType::F32);
    let b = trace.param("b", &[16], DType::F32);
    let loss = fp8_linear(&x, &w, &b).square().mean_all();
    let xs: Vec<f32> = (0..128).map(|i| ((i * 37 % 17) as f32 - 8.0) / 4.0).collect();
    (trace.finish(&loss).unwrap(), Feeds::new().with("x", HostTensor::f32([8, 16], xs).unwrap()))
}

#[test]
fn a_float8_linear_saves_only_the_matmul_output() {
    let (graph, feeds) = fp8_graph();
    let models = run_all(&graph, &feeds);
    for model in &models[..2] {
        let strategy = model.partition().unwrap().strategy;
        // The region's output feeds `square` outside it, which reads it: a boundary value.
        assert_eq!(saved_ops(model), ["scaled_matmul", "add"], "{strategy}");
        let g = model.joint().graph();
        let p = model.partition().unwrap();
        let leaves: Vec<&str> = (0..model.joint().n_forward())
            .filter(|&i| p.saved[i] && g.nodes()[i].op.info().leaf)
            .map(|i| g.nodes()[i].name().unwrap_or(""))
            .collect();
        assert_eq!(leaves, ["x", "w", "b"], "{strategy}: resident inputs and parameters");
    }
    // No fp8 cast, no scale, no amax is saved; the boundary value is saved as a boundary.
    let respect = &models[0];
    let p = respect.partition().unwrap();
    let g = respect.joint().graph();
    for d in &p.decisions {
        let op = g.nodes()[d.node.index()].op.name();
        if matches!(op, "cast" | "amax" | "reciprocal" | "clamp") {
            assert_eq!(d.action, Action::Recompute, "{op} is recomputed");
        }
        if op == "add" && d.action == Action::Save {
            assert!(matches!(d.reason, Reason::ReadByRegion(_) | Reason::ReadByGradient(_)), "{:?}", d.reason);
        }
    }
    // A generous budget may save more, and says which Prefer tag it overrode.
    let generous = Model::with_strategy(graph, Strategy::Budget(Budget::Bytes(1 << 30))).unwrap();
    let gp = generous.partition().unwrap();
    assert!(gp.recompute_flops < p.recompute_flops);
    let overridden: Vec<_> = gp.decisions.iter().filter(|d| d.overrode == Some(Policy::PreferRecompute)).collect();
    assert!(!overridden.is_empty());
    assert!(overridden.iter().all(|d| d.action == Action::Save && d.reason == Reason::Budget));
}

// b. Two back-to-back regions g(f(x)).

#[checkpoint(policy = recompute_all)]
fn chain(x: &Tensor) -> Tensor {
    let mut t = x.cos();
    for _ in 0..3 {
        t = t.matmul(&t);
    }
    t.cos()
}

#[test]
fn b_consecutive_regions_save_the_tensor_between_them() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 4], DType::F32);
    let f_out = chain(&(&x * 0.1));
    let loss = chain(&f_out).sum_all();
    let graph = trace.finish(&loss).unwrap();
    let models = run_all(&graph, &Feeds::new());
    let respect = &models[0];
    let p = respect.partition().unwrap();
    let f_id = f_out.id().unwrap();
    assert!(p.saved[f_id.index()], "f's output is saved");
    let d = p.decisions.iter().find(|d| d.node == f_id).unwrap();
    assert!(matches!(d.reason, Reason::ReadByRegion(_) | Reason::ReadByGradient(_)), "{:?}", d.reason);
    // 3 recomputed matmuls and 6 gradient matmuls per region; only each region's first cos.
    assert_eq!(backward_gemms(respect), 18);
    assert_eq!(backward_count(respect, "cos"), 2);
    assert_eq!(saved_ops(respect), ["mul", "cos"], "x*0.1 (untagged, read by f's cos) and f's output");
}

// c. One region cos(sin(mm(mm(x, x), x))) under two policies.

#[checkpoint(policy = rules(must_recompute = [matmul], default = prefer_recompute))]
fn c_recompute(x: &Tensor) -> Tensor {
    x.matmul(x).matmul(x).sin().cos()
}

#[checkpoint(policy = save(matmul))]
fn c_save(x: &Tensor) -> Tensor {
    x.matmul(x).matmul(x).sin().cos()
}

#[test]
fn c_matmul_policies_decide_the_backward_matmul_count() {
    for (f, expected) in [(c_recompute as fn(&Tensor) -> Tensor, 6), (c_save, 4)] {
        let trace = Trace::new();
        let x = trace.param("x", &[4, 4], DType::F32);
        let graph = trace.finish(&f(&(&x * 0.3)).sum_all()).unwrap();
        let models = run_all(&graph, &Feeds::new());
        assert_eq!(backward_gemms(&models[0]), expected);
        assert_eq!(backward_gemms(&models[1]), expected, "min-cut honours the tags too");
    }
}

// d. Dropout inside a recompute_all region.

#[checkpoint]
fn noisy(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).dropout(0.5, 17).sin()
}

#[test]
fn d_dropout_is_recomputed_with_the_same_mask() {
    let trace = Trace::new();
    let x = trace.input("x", &[6, 8], DType::F32);
    let w = trace.param("w", &[8, 8], DType::F32);
    let graph = trace.finish(&noisy(&x, &w).square().sum_all()).unwrap();
    let feeds = Feeds::new().with("x", HostTensor::f32([6, 8], (0..48).map(|i| (i as f32).sin()).collect()).unwrap());
    let models = run_all(&graph, &feeds);
    assert!(backward_count(&models[0], "dropout") >= 2, "recomputed in the backward, and its gradient");
    let save_everything = Model::with_saved(graph, |j| vec![true; j.n_forward()]).unwrap();
    let params = models[0].init_params(42).unwrap();
    let a = save_everything.step_seeded(&mut CpuBackend::new(), &params, &feeds, 9).unwrap();
    let b = models[0].step_seeded(&mut CpuBackend::new(), &params, &feeds, 9).unwrap();
    assert_eq!(a.grads, b.grads, "bit for bit");
}

// e. A 4-layer MLP under a budget sweep.

#[test]
fn e_budget_sweep_is_monotone() {
    let cfg = MlpConfig { batch: 16, widths: vec![8, 16, 16, 16, 4] };
    let graph = zoo::mlp(&cfg).unwrap();
    let pg = PGraph::from_joint(&remat::JointGraph::new(&graph).unwrap());
    let mut previous: Option<(u64, u64)> = None;
    for step in (0..=10).rev() {
        let f = step as f64 / 10.0;
        let p = remat::partition::partition(&pg, Strategy::Budget(Budget::Fraction(f))).unwrap();
        if let Some((bytes, flops)) = previous {
            assert!(p.saved_bytes <= bytes, "budget {f}: saved bytes rose as the budget shrank");
            assert!(p.recompute_flops >= flops, "budget {f}: recompute FLOPs fell as the budget shrank");
        }
        previous = Some((p.saved_bytes, p.recompute_flops));
    }
    let none = remat::partition::partition(&pg, Strategy::Budget(Budget::Fraction(0.0))).unwrap();
    let all = remat::partition::partition(&pg, Strategy::Budget(Budget::Fraction(1.0))).unwrap();
    assert!(none.saved_bytes < all.saved_bytes && none.recompute_flops > all.recompute_flops);
    run_all(&graph, &zoo::mlp_feeds(&cfg, 0).unwrap());
}

#[test]
fn an_infeasible_budget_states_the_smallest_feasible_one() {
    let (graph, _) = fp8_graph();
    let err = Model::with_strategy(graph, Strategy::Budget(Budget::Bytes(10))).unwrap_err();
    // What every plan keeps: the region's boundary output and its scaled matmul's (the fp8
    // region's rules), two [8, 16] f32 values.
    let least = Some(2 * 8 * 16 * 4);
    assert!(
        matches!(err, remat::Error::Infeasible { what: remat::Limit::Budget, asked: 10, least: l, .. } if l == least),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(err.contains("a budget of 10 bytes cannot be met: the smallest feasible budget is 1024 bytes"), "{err}");
}

// Region budgets.

#[checkpoint(policy = save_all, budget = 0.5)]
fn half_kept(x: &Tensor) -> Tensor {
    x.sin().exp().tanh().sigmoid().cos()
}

#[test]
fn a_region_budget_holds_whatever_the_global_strategy() {
    let trace = Trace::new();
    let x = trace.param("x", &[16, 16], DType::F32);
    let graph = trace.finish(&half_kept(&(&x * 0.5)).sum_all()).unwrap();
    let models = run_all(&graph, &Feeds::new());
    for model in &models {
        let p = model.partition().unwrap();
        let g = model.joint().graph();
        let inside_saved: u64 = p
            .decisions
            .iter()
            .filter(|d| d.action == Action::Save && g.nodes()[d.node.index()].tag.is_some())
            .filter(|d| !matches!(d.reason, Reason::ReadByRegion(_) | Reason::ReadByGradient(_)))
            .map(|d| g.nodes()[d.node.index()].bytes() as u64)
            .sum();
        // save-everything: sin, exp, tanh, sigmoid outputs (1 KiB each) are read by the backward.
        assert!(inside_saved <= 2048, "{}: {inside_saved} bytes kept inside the region", p.strategy);
        assert!(p.decisions.iter().any(|d| matches!(d.reason, Reason::RegionBudget(_))));
    }
}

#[checkpoint(policy = recompute(matmul))]
fn returns_a_matmul(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w)
}

#[test]
fn must_recompute_on_a_value_read_after_the_region_is_kept_and_reported() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 4], DType::F32);
    let w = trace.param("w", &[4, 4], DType::F32);
    // `square` outside the region reads the region's output in the backward: the reader keeps
    // it (DESIGN.md §4), whatever the producer's region asked of its own op.
    let out = returns_a_matmul(&x, &w);
    let graph = trace.finish(&out.square().sum_all()).unwrap();
    for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.0))] {
        let model = Model::with_strategy(graph.clone(), strategy).unwrap();
        let p = model.partition().unwrap();
        let d = p.decisions.iter().find(|d| Some(d.node) == out.id()).expect("a decision on the matmul");
        assert_eq!(d.action, Action::Save, "{strategy}");
        assert_eq!(d.overrode, Some(Policy::MustRecompute), "{strategy}");
        let report = model.report(None).unwrap();
        assert!(report.contains("must_recompute applies inside `returns_a_matmul#0`"), "{report}");
    }
}

#[test]
fn an_unneeded_must_save_is_reported_not_saved() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 4], DType::F32);
    // The matmul output is must_save but only `+` (which reads nothing) consumes it.
    let graph = trace.finish(&(&c_save_plus(&x) + &x).sum_all()).unwrap();
    let model = Model::new(graph).unwrap();
    let p = model.partition().unwrap();
    assert_eq!(
        p.warnings,
        ["in region `c_save_plus#0`: 1 value is must_save (matmul) but the backward never needs it: not saved"]
    );
}

/// The value is asked for by itself (a statement attribute): not keeping it is worth a warning.
#[checkpoint]
fn c_save_plus(x: &Tensor) -> Tensor {
    #[save]
    let m = x.matmul(x);
    &m + &m
}

/// A kind-wide rule covers every matmul, also those whose output the backward does not read
/// (a projection feeding a residual add, as in every pre-norm block): no warning.
#[test]
fn a_kind_wide_rule_gives_no_unneeded_warning() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 4], DType::F32);
    let graph = trace.finish(&(&c_save_matmul_plus(&x) + &x).sum_all()).unwrap();
    let model = Model::new(graph).unwrap();
    assert_eq!(model.partition().unwrap().warnings, Vec::<String>::new());
    assert_eq!(model.warnings(), Vec::<String>::new());
}

#[checkpoint(policy = save(matmul))]
fn c_save_matmul_plus(x: &Tensor) -> Tensor {
    let m = x.matmul(x);
    &m + &m
}

#[test]
fn a_view_asked_to_be_saved_saves_its_base() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 6], DType::F32);
    let graph = trace.finish(&named_view(&x).square().sum_all()).unwrap();
    let model = Model::new(graph).unwrap();
    let p = model.partition().unwrap();
    let g = model.joint().graph();
    let base = p.decisions.iter().find(|d| g.nodes()[d.node.index()].op == Op::Unary(UnaryOp::Sin)).unwrap();
    assert_eq!(base.action, Action::Save);
    assert!(matches!(base.reason, Reason::ViewBase(_)), "{:?}", base.reason);
    let view = p.decisions.iter().find(|d| g.nodes()[d.node.index()].op.name() == "reshape").unwrap();
    assert_eq!((view.action, view.reason), (Action::Recompute, Reason::View));
}

#[checkpoint(policy = save_names("flat"))]
fn named_view(x: &Tensor) -> Tensor {
    x.sin().reshape(&[24]).name("flat")
}

#[test]
fn unneeded_must_save_warnings_group_instances_of_one_function() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 4], DType::F32);
    let mut h = x.clone();
    for _ in 0..3 {
        h = &c_save_plus(&h) + &x;
    }
    let model = Model::new(trace.finish(&h.sum_all()).unwrap()).unwrap();
    assert_eq!(
        model.partition().unwrap().warnings,
        ["in region `c_save_plus` (3 instances): 3 values are must_save (matmul) but the backward never needs them: not saved"]
    );
}
