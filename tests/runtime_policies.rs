//! Policies chosen at run time (`policy!`, `RegionPolicy::parse`, `#[checkpoint(policy =
//! arg(p))]`), forward-only inference, and the trace-time report of `save_names` that match
//! nothing.

use remat::prelude::*;
use remat::{Graph, HostTensor, PolicySource};

/// `(op, policy, source)` of every node.
fn tags(graph: &Graph) -> Vec<(&'static str, Option<(Policy, PolicySource)>)> {
    graph.nodes().iter().map(|n| (n.op.name(), n.tag.map(|t| (t.policy, t.source)))).collect()
}

fn body(x: &Tensor, w: &Tensor) -> Tensor {
    let h = x.matmul(w).name("h").gelu();
    h.matmul(w).softmax().exp()
}

#[checkpoint(policy = arg(policy))]
fn dynamic(policy: &RegionPolicy, x: &Tensor, w: &Tensor) -> Tensor {
    body(x, w)
}

#[checkpoint(policy = save(matmul))]
fn static_save(x: &Tensor, w: &Tensor) -> Tensor {
    body(x, w)
}

#[checkpoint(policy = recompute(gelu), budget = 0.5)]
fn static_recompute(x: &Tensor, w: &Tensor) -> Tensor {
    body(x, w)
}

#[checkpoint(policy = save_names("h"))]
fn static_names(x: &Tensor, w: &Tensor) -> Tensor {
    body(x, w)
}

#[checkpoint(policy = rules(must_save = [softmax], must_recompute = [exp], default = prefer_save))]
fn static_rules(x: &Tensor, w: &Tensor) -> Tensor {
    body(x, w)
}

#[checkpoint(policy = arg(policy), budget = 0.25)]
fn dynamic_with_budget(x: &Tensor, policy: RegionPolicy, w: &Tensor) -> Tensor {
    body(x, w)
}

fn traced(f: impl Fn(&Tensor, &Tensor) -> Tensor) -> Graph {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[3, 3], DType::F32);
    let loss = f(&x, &w).sum_all();
    trace.finish(&loss).unwrap()
}

#[test]
fn a_policy_chosen_at_run_time_tags_exactly_as_the_same_form_written_in_the_attribute() {
    type Static = fn(&Tensor, &Tensor) -> Tensor;
    let cases: [(&str, Static); 5] = [
        ("recompute_all", |x, w| {
            #[checkpoint]
            fn bare(x: &Tensor, w: &Tensor) -> Tensor {
                body(x, w)
            }
            bare(x, w)
        }),
        ("save(matmul)", static_save),
        ("recompute(gelu), budget = 0.5", static_recompute),
        (r#"save_names("h")"#, static_names),
        ("rules(must_save = [softmax], must_recompute = [exp], default = prefer_save)", static_rules),
    ];
    for (text, f) in cases {
        let policy: RegionPolicy = text.parse().unwrap();
        let want = traced(f);
        let got = traced(|x, w| dynamic(&policy, x, w));
        assert_eq!(tags(&got), tags(&want), "{text}");
        assert_eq!(got.regions()[0].budget, want.regions()[0].budget, "{text}");
        assert_eq!(got.regions()[0].name, "dynamic");
    }
    // `policy!` is the same value as the parsed text.
    assert_eq!(policy!(save(matmul)), "save(matmul)".parse::<RegionPolicy>().unwrap());
    // `where`, a Rust keyword, is an op name like any other (raw or not).
    assert_eq!(policy!(recompute(where, gt)), "recompute(where, gt)".parse::<RegionPolicy>().unwrap());
    assert_eq!(policy!(save(r#where)), "save(where)".parse::<RegionPolicy>().unwrap());
    assert_eq!(policy!(recompute(gelu), budget = 0.5), RegionPolicy::parse("recompute(gelu), budget = 0.5").unwrap());
}

#[test]
fn a_budget_beside_arg_overrides_the_values_budget() {
    let graph = traced(|x, w| dynamic_with_budget(x, policy!(save_all, budget = 0.9), w));
    assert_eq!(graph.regions()[0].budget, Some(0.25));
    assert!(tags(&graph).iter().all(|(_, t)| t.is_none_or(|t| t.0 == Policy::PreferSave)));
}

#[test]
fn runtime_policies_give_the_gradients_of_the_static_ones_bit_for_bit() {
    let feeds = Feeds::new().with("x", HostTensor::f32([4, 3], (0..12).map(|i| i as f32 * 0.1).collect()).unwrap());
    let run = |graph: Graph| {
        let model = Model::new(graph).unwrap();
        model.step(&mut CpuBackend::new(), &model.init_params(3).unwrap(), &feeds).unwrap()
    };
    let want = run(traced(static_save));
    let got = run(traced(|x, w| dynamic(&policy!(save(matmul)), x, w)));
    assert_eq!((got.loss, &got.grads), (want.loss, &want.grads));
    assert_eq!(got.predicted_peak, want.predicted_peak);
}

#[checkpoint(policy = save_names("ffn_akt", "ffn_act"))]
fn misspelled(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).name("ffn_act").gelu().name("ffn_out")
}

#[test]
fn a_save_name_no_value_carries_is_reported_once_per_region_function() {
    let graph = traced(|x, w| misspelled(&misspelled(x, w), w));
    let warnings = graph.unknown_save_names();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0];
    assert!(w.contains("region `misspelled`") && w.contains("runtime_policies.rs"), "{w}");
    assert!(w.contains(r#"`save_names("ffn_akt")` matches no value of the region, so it saves nothing"#), "{w}");
    assert!(w.contains(r#"did you mean "ffn_act"?"#), "{w}");
    // The model's warnings (and so its report) lead with it.
    let model = Model::new(graph).unwrap();
    assert_eq!(model.warnings()[0], *w);
    assert!(model.report(None).unwrap().contains("ffn_akt"));
    // A name that does match says nothing.
    assert!(traced(static_names).unknown_save_names().is_empty());
}

#[checkpoint(policy = save(matmul))]
fn layer(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).gelu()
}

#[test]
fn inference_runs_the_forward_alone_with_its_own_peak_and_the_training_values() {
    let trace = Trace::new();
    let x = trace.input("x", &[8, 16], DType::F32);
    let y = trace.input("y", &[8], DType::I64);
    let w1 = trace.param("w1", &[16, 32], DType::F32);
    let w2 = trace.param("w2", &[32, 4], DType::F32);
    let h = layer(&x, &w1).dropout(0.5, 7).name("h");
    let logits = h.matmul(&w2).name("logits");
    let loss = logits.cross_entropy(&y);
    let model = Model::new(trace.finish_with(&loss, &[&logits]).unwrap()).unwrap();
    let params = model.init_params(1).unwrap();
    let xs = HostTensor::f32([8, 16], (0..128).map(|i| ((i * 37) % 11) as f32 * 0.1 - 0.5).collect()).unwrap();
    let feeds = Feeds::new().with("x", xs).with("y", HostTensor::i64([8], vec![0, 1, 2, 3, 0, 1, 2, 3]).unwrap());

    let infer = model.inference(&["logits", "h"]).unwrap();
    assert!(infer.plan().backward().is_empty() && infer.plan().saved().is_empty());
    // `y` is not needed for the logits: feeding only `x` is enough.
    let only_x = Feeds::new().with("x", feeds.get("x").unwrap().clone());
    let out = infer.run(&mut CpuBackend::new(), &params, &only_x).unwrap();
    assert_eq!(out.measured_peak, out.predicted_peak);
    assert!(out.predicted_peak < model.plan().predicted_peak());
    assert_eq!(out.values[0].shape(), &[8, 4]);

    // Dropout is off: the same as a training step whose dropout keeps everything.
    let h_eval = out.values[1].to_f32_vec();
    let zero_dropout = {
        let trace = Trace::new();
        let x = trace.input("x", &[8, 16], DType::F32);
        let y = trace.input("y", &[8], DType::I64);
        let w1 = trace.param("w1", &[16, 32], DType::F32);
        let w2 = trace.param("w2", &[32, 4], DType::F32);
        let logits = layer(&x, &w1).matmul(&w2);
        let loss = logits.cross_entropy(&y);
        Model::new(trace.finish_with(&loss, &[&logits]).unwrap()).unwrap()
    };
    let step = zero_dropout.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
    assert_eq!(step.outputs[0], out.values[0], "inference logits differ from the forward of training");
    assert!(h_eval.iter().all(|v| v.is_finite()));

    // Names are checked.
    let err = model.inference(&["logit"]).unwrap_err();
    assert!(matches!(&err, remat::Error::Config { setting, .. } if setting == "names"), "{err:?}");
    let err = err.to_string();
    assert!(err.contains("no value of the model is named `logit`; did you mean `logits`?"), "{err}");
    let missing = infer.run(&mut CpuBackend::new(), &params, &Feeds::new()).unwrap_err().to_string();
    assert!(missing.contains('x'), "{missing}");
}

/// Warnings reach a program's logger through the `log` facade (and standard error where it has
/// none); a strict trace makes the same finding an error.
#[test]
fn save_name_typos_are_logged_and_refused_by_a_strict_trace() {
    static LOGGED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    struct Capture;
    impl log::Log for Capture {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, record: &log::Record<'_>) {
            if record.target() == "remat" {
                LOGGED.lock().unwrap().push(record.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    log::set_logger(&Capture).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Warn);

    traced(misspelled);
    let logged = LOGGED.lock().unwrap().clone();
    assert!(logged.iter().any(|m| m.contains(r#"save_names("ffn_akt")"#)), "{logged:?}");

    let trace = Trace::new().strict();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[3, 3], DType::F32);
    let err = trace.finish(&misspelled(&x, &w).sum_all()).unwrap_err();
    assert!(matches!(&err, remat::Error::Config { setting, .. } if setting == "strict"), "{err:?}");
    let err = err.to_string();
    assert!(err.starts_with("strict trace: region `misspelled`"), "{err}");
    assert!(err.contains(r#"did you mean "ffn_act"?"#), "{err}");
}

/// `none` opens no region: one `arg(p)` function serves every policy, no checkpointing
/// included, and its ops are tagged as if it had no `#[checkpoint]` (here, by nothing; inside
/// another region, by that one).
#[test]
fn the_none_policy_opens_no_region() {
    let none: RegionPolicy = "none".parse().unwrap();
    assert_eq!((none, none.to_string()), (RegionPolicy::NONE, "none".to_string()));
    assert_eq!(RegionPolicy::parse("policy = none").unwrap(), RegionPolicy::NONE);
    assert!(RegionPolicy::parse("none, budget = 0.5").is_err(), "no region has no budget");
    let graph = traced(|x, w| dynamic(&none, x, w));
    assert!(graph.regions().is_empty(), "{:?}", graph.regions());
    assert!(graph.nodes().iter().all(|n| n.tag.is_none()));
    // With a budget beside `arg(..)`, still no region.
    let graph = traced(|x, w| dynamic_with_budget(x, RegionPolicy::NONE, w));
    assert!(graph.regions().is_empty());
    // Inside another region, the ops belong to it.
    let graph = traced(|x, w| static_save(&dynamic(&none, x, w), w));
    assert_eq!(graph.regions().len(), 1);
}
