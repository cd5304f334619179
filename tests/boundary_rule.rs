//! The region boundary rule, "whoever reads it keeps it" (DESIGN.md §4), on traced models, in
//! every strategy: each case is planned and checked by the independent rule checker, and the
//! values it must keep — and must not keep — are named.

use remat::partition::{check, PGraph};
use remat::prelude::*;
use remat::{Action, Budget, Reason, Strategy};

const STRATEGIES: [Strategy; 5] = [
    Strategy::Respect,
    Strategy::MinCut,
    Strategy::Budget(Budget::Fraction(0.0)),
    Strategy::Budget(Budget::Fraction(0.5)),
    Strategy::Budget(Budget::Fraction(1.0)),
];

/// Every strategy's model, each partition checked against the rules.
fn models(trace: Trace, loss: &Tensor) -> Vec<Model> {
    let graph = trace.finish(loss).unwrap();
    STRATEGIES
        .iter()
        .map(|&s| {
            let model = Model::with_strategy(graph.clone(), s).unwrap();
            let pg = PGraph::from_joint(model.joint());
            check(&pg, model.partition().unwrap()).unwrap_or_else(|e| panic!("{s}: {e}"));
            model
        })
        .collect()
}

/// Op names of the saved values (inputs and parameters left out).
fn saved(model: &Model) -> Vec<&'static str> {
    let g = model.joint().graph();
    let p = model.partition().unwrap();
    (0..model.joint().n_forward())
        .filter(|&i| p.saved[i] && !g.nodes()[i].op.info().leaf)
        .map(|i| g.nodes()[i].op.name())
        .collect()
}

fn reason_of(model: &Model, t: &Tensor) -> Reason {
    let id = t.id().unwrap();
    model.partition().unwrap().decisions.iter().find(|d| d.node == id).map(|d| d.reason).expect("a decision")
}

#[checkpoint]
fn f(x: &Tensor) -> Tensor {
    x.sin().cos()
}

#[checkpoint]
fn g(x: &Tensor) -> Tensor {
    x.tanh().sin()
}

#[test]
fn consecutive_regions_save_the_tensor_between_them() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 4], DType::F32);
    let h = f(&x);
    let loss = g(&h).sum_all();
    for model in models(trace, &loss) {
        let p = model.partition().unwrap();
        // Kept whenever the backward needs it: g replays from it unless a budget keeps g's tanh.
        // (A budget may keep g's tanh instead: as many bytes, fewer FLOPs.)
        if matches!(p.strategy, Strategy::Respect | Strategy::MinCut) {
            assert!(saved(&model).contains(&"cos"), "{}: {:?}", p.strategy, saved(&model));
            assert!(matches!(reason_of(&model, &h), Reason::ReadByRegion(_)));
        }
        let sin_in_f = model.joint().graph().nodes().iter().position(|n| n.op.name() == "sin").unwrap();
        assert!(!p.saved[sin_in_f], "{}: f's own ops are recomputed", p.strategy);
    }
}

#[checkpoint]
fn gate(x: &Tensor, y: &Tensor) -> Tensor {
    x.matmul(y).sigmoid()
}

#[test]
fn a_region_read_only_by_code_whose_gradient_reads_nothing_saves_nothing() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 4], DType::F32);
    let y = trace.param("y", &[4, 4], DType::F32);
    let loss = gate(&x, &y).sum_all();
    let models = models(trace, &loss);
    for model in &models[..2] {
        assert_eq!(saved(model), Vec::<&str>::new(), "{}", model.partition().unwrap().strategy);
        assert_eq!(model.partition().unwrap().saved_bytes, 0);
    }
}

#[test]
fn untagged_code_keeps_what_its_gradient_reads() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 4], DType::F32);
    let h = f(&x);
    let loss = h.sin().sum_all();
    for model in models(trace, &loss) {
        assert!(matches!(reason_of(&model, &h), Reason::ReadByGradient(_)), "{:?}", reason_of(&model, &h));
        let why = reason_of(&model, &h).describe(&PGraph::from_joint(model.joint()));
        assert!(why.starts_with("read by the gradient of %") && why.ends_with("(untagged)"), "{why}");
    }
}

#[checkpoint]
fn parent(x: &Tensor) -> Tensor {
    let c = f(x);
    c.exp()
}

#[test]
fn a_child_regions_output_read_by_its_parent_is_saved() {
    let trace = Trace::new();
    let x = trace.param("x", &[4, 4], DType::F32);
    let loss = parent(&x).sum_all();
    for model in models(trace, &loss) {
        let g = model.joint().graph();
        let cos = g.nodes().iter().position(|n| n.op.name() == "cos").unwrap();
        let p = model.partition().unwrap();
        if !matches!(p.strategy, Strategy::Respect | Strategy::MinCut) {
            continue; // a budget may keep the parent's exp instead: as many bytes, fewer FLOPs
        }
        let d = p.decisions.iter().find(|d| d.node.index() == cos).unwrap();
        assert_eq!(d.action, Action::Save, "{}", p.strategy);
        assert!(matches!(d.reason, Reason::ReadByRegion(_)), "{:?}", d.reason);
    }
}

fn to_fp8(t: &Tensor) -> (Tensor, Tensor) {
    let amax = t.abs().amax(&[0, 1], false);
    let scale = amax.reciprocal() * 448.0;
    let q = (t * &scale).clamp(-448.0, 448.0).cast(DType::F8E4M3);
    (q, scale.reciprocal())
}

#[checkpoint(policy = save(scaled_matmul))]
fn fp8_linear(x: &Tensor, w: &Tensor) -> Tensor {
    let (xq, x_inv) = to_fp8(x);
    let (wq, w_inv) = to_fp8(w);
    Tensor::scaled_matmul(&xq, &wq, &x_inv, &w_inv).relu()
}

#[test]
fn a_float8_linear_saves_its_matmul_never_a_cast_a_scale_or_an_amax() {
    let trace = Trace::new();
    let x = trace.param("x", &[8, 16], DType::F32);
    let w = trace.param("w", &[16, 16], DType::F32);
    let loss = (&fp8_linear(&x, &w) + &x).square().mean_all();
    for model in models(trace, &loss) {
        let s = saved(&model);
        let strategy = model.partition().unwrap().strategy;
        for op in ["cast", "amax", "abs", "reciprocal", "mul", "clamp"] {
            let traded = model.partition().unwrap().decisions.iter().any(|d| d.overrode.is_some());
            assert!(!s.contains(&op) || (traded && matches!(strategy, Strategy::Budget(_))), "{strategy}: {s:?}");
        }
        if matches!(strategy, Strategy::Respect | Strategy::MinCut) {
            assert!(s.iter().all(|op| ["scaled_matmul", "relu", "add"].contains(op)), "{strategy}: {s:?}");
        }
    }
}

#[checkpoint(policy = rules(default = must_recompute))]
fn f_must(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).tanh()
}

#[checkpoint(policy = rules(default = must_recompute))]
fn g_must(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).sin()
}

/// The seeds' own case (PyTorch PR #129295): every op of two consecutive regions tagged
/// must_recompute. A producer's tag never cancels its reader's keep: the tensor between the
/// regions is kept (g reads it), the report says so, the model trains, and its gradients equal
/// every other policy's bit for bit.
#[test]
fn consecutive_must_recompute_regions_keep_the_tensor_between_them() {
    let build = |must: bool| {
        let trace = Trace::new();
        let x = trace.input("x", &[4, 8], DType::F32);
        let (w1, w2) = (trace.param("w1", &[8, 8], DType::F32), trace.param("w2", &[8, 8], DType::F32));
        let h = if must { f_must(&x, &w1) } else { x.matmul(&w1).tanh() };
        let y = if must { g_must(&h, &w2) } else { h.matmul(&w2).sin() };
        (trace, y.square().mean_all(), h)
    };
    let feeds =
        Feeds::new().with("x", HostTensor::f32([4, 8], (0..32).map(|i| (i as f32 * 0.37).sin()).collect()).unwrap());
    let (reference, ref_loss, _) = build(false);
    let reference = Model::new(reference.finish(&ref_loss).unwrap()).unwrap();
    let params = reference.init_params(3).unwrap();
    let expected = reference.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
    let (trace, loss, h) = build(true);
    for model in models(trace, &loss) {
        let p = model.partition().unwrap();
        let d = p.decisions.iter().find(|d| d.node == h.id().unwrap()).expect("h is needed");
        assert_eq!(d.action, Action::Save, "{}", p.strategy);
        assert!(matches!(d.reason, Reason::ReadByRegion(_)) && d.overrode == Some(Policy::MustRecompute));
        let report = model.report(None).unwrap();
        assert!(report.contains("must_recompute applies inside `f_must#0`"), "{report}");
        let mut params = model.init_params(3).unwrap();
        let out = model.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
        let bits = |g: &[HostTensor]| {
            g.iter().map(|t| t.to_f32_vec().iter().map(|v| v.to_bits()).collect()).collect::<Vec<Vec<u32>>>()
        };
        assert_eq!(bits(&out.grads), bits(&expected.grads), "{}", p.strategy);
        assert_eq!(out.loss.to_bits(), expected.loss.to_bits());
        let mut opt = AdamW::new(1e-2);
        for _ in 0..3 {
            let out = model.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
            opt.step(&mut params, &out.grads).unwrap();
        }
    }
}
