//! The offload forms of the DSL end to end: `offload(..)`, `offload_names(..)`, the
//! `must_offload` / `prefer_offload` lists and default of `rules(..)`, and `#[offload] let` tag
//! exactly the values they name; a model built with them offloads those values (and only where
//! they can leave the device), its gradients are bitwise those of saving, and both measured peaks
//! equal the plan's.

use remat::prelude::*;
use remat::{Graph, HostTensor, PolicySource};

fn body(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    let h = x.matmul(w1).name("h");
    let a = h.gelu().name("a");
    a.matmul(w2).name("o").tanh()
}

#[checkpoint(policy = save_all)]
fn saved(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    body(x, w1, w2)
}

#[checkpoint(policy = offload(matmul))]
fn offload_matmuls(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    body(x, w1, w2)
}

#[checkpoint(policy = offload_names("a"))]
fn offload_a(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    body(x, w1, w2)
}

#[checkpoint(policy = rules(must_save = [matmul], default = prefer_offload))]
fn save_matmuls_offload_rest(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    body(x, w1, w2)
}

#[checkpoint(policy = save_all)]
fn statement(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    let h = x.matmul(w1).name("h");
    #[offload]
    let a = h.gelu().name("a");
    a.matmul(w2).name("o").tanh()
}

type Body = fn(&Tensor, &Tensor, &Tensor) -> Tensor;

fn traced(f: Body) -> Graph {
    let trace = Trace::new();
    let x = trace.input("x", &[8, 16], DType::F32);
    let w1 = trace.param("w1", &[16, 32], DType::F32);
    let w2 = trace.param("w2", &[32, 8], DType::F32);
    let loss = f(&x, &w1, &w2).sum_all();
    trace.finish(&loss).unwrap()
}

fn policy_of(graph: &Graph, name: &str) -> (Policy, PolicySource) {
    let node = graph.nodes().iter().find(|n| n.name() == Some(name)).unwrap();
    let tag = node.tag.unwrap();
    (tag.policy, tag.source)
}

/// The names of the values the model offloads.
fn offloaded(model: &Model) -> Vec<String> {
    let p = model.partition().unwrap();
    let graph = model.joint().graph();
    let mut names: Vec<String> = (0..p.offloaded.len())
        .filter(|&i| p.offloaded[i])
        .filter_map(|i| graph.nodes()[i].name().map(str::to_string))
        .collect();
    names.sort();
    names
}

#[test]
fn each_offload_form_tags_the_values_it_names() {
    use Policy::{MustOffload, MustSave, PreferOffload, PreferRecompute, PreferSave};
    use PolicySource::{Default, Name, OpKind, Statement};
    let g = traced(offload_matmuls);
    assert_eq!(policy_of(&g, "h"), (MustOffload, OpKind));
    assert_eq!(policy_of(&g, "a"), (PreferRecompute, Default));
    let g = traced(offload_a);
    assert_eq!(policy_of(&g, "a"), (MustOffload, Name));
    assert_eq!(policy_of(&g, "h"), (PreferRecompute, Default));
    let g = traced(save_matmuls_offload_rest);
    assert_eq!(policy_of(&g, "h"), (MustSave, OpKind));
    assert_eq!(policy_of(&g, "a"), (PreferOffload, Default));
    let g = traced(statement);
    assert_eq!(policy_of(&g, "a"), (MustOffload, Statement));
    assert_eq!(policy_of(&g, "h"), (PreferSave, Default));
    // The same forms read at run time are the same tables.
    assert_eq!(policy!(offload(matmul)), "offload(matmul)".parse::<RegionPolicy>().unwrap());
    assert_eq!(
        policy!(rules(must_save = [matmul], default = prefer_offload)),
        RegionPolicy::parse("rules(must_save = [matmul], default = prefer_offload)").unwrap()
    );
}

#[test]
fn models_built_with_the_forms_offload_what_they_name_with_the_gradients_of_saving() {
    let xs = HostTensor::f32([8, 16], (0..128).map(|i| ((i * 37) % 11) as f32 * 0.1 - 0.5).collect()).unwrap();
    let feeds = Feeds::new().with("x", xs);
    let reference = Model::new(traced(saved)).unwrap();
    let params = reference.init_params(5).unwrap();
    let want = reference.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
    assert!(offloaded(&reference).is_empty());
    // What each form keeps in host memory: the backward reads `h` (gelu's input), `a` (the
    // second matmul's input) and `o` (tanh's input); the two matmul outputs are `h` and `o`.
    let cases: [(Body, &[&str]); 4] =
        [(offload_matmuls, &["h", "o"]), (offload_a, &["a"]), (save_matmuls_offload_rest, &["a"]), (statement, &["a"])];
    for (f, names) in cases {
        let model = Model::new(traced(f)).unwrap();
        let got = model.step(&mut CpuBackend::new(), &params, &feeds).unwrap();
        let what = format!("offloading {names:?}");
        assert_eq!(offloaded(&model), names.iter().map(|n| n.to_string()).collect::<Vec<_>>(), "{what}");
        assert_eq!(got.loss.to_bits(), want.loss.to_bits(), "{what}");
        assert_eq!(got.grads, want.grads, "{what}: gradients bitwise those of saving");
        assert_eq!(got.measured_peak, got.predicted_peak, "{what}: device peak");
        assert_eq!(got.measured_host_peak, got.predicted_host_peak, "{what}: host peak");
        assert!(got.measured_host_peak >= 8 * 32 * 4, "{what}: the offloaded copy lives in host memory");
    }
}

#[checkpoint(policy = offload_names("ctx_akt"))]
fn misspelled(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    x.matmul(w1).name("ctx_act").gelu().matmul(w2)
}

#[test]
fn an_offload_name_no_value_carries_is_reported() {
    let warnings = traced(misspelled).unknown_save_names();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0];
    assert!(w.contains(r#"`offload_names("ctx_akt")` matches no value of the region, so it offloads nothing"#), "{w}");
    assert!(w.contains(r#"did you mean "ctx_act"?"#), "{w}");
}

#[checkpoint(policy = rules(default = must_offload))]
fn everything_offloaded(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    #[offload]
    let out = body(x, w1, w2);
    out
}

#[test]
fn a_must_offload_on_a_value_that_cannot_leave_the_device_is_an_error_naming_it() {
    // `out` is the region's output and the loss reads it: fine. Make it a forward output the
    // caller holds, and the statement's must_offload cannot be met.
    let trace = Trace::new();
    let x = trace.input("x", &[8, 16], DType::F32);
    let w1 = trace.param("w1", &[16, 32], DType::F32);
    let w2 = trace.param("w2", &[32, 8], DType::F32);
    let out = everything_offloaded(&x, &w1, &w2).name("out");
    let loss = out.sum_all();
    let err = Model::new(trace.finish_with(&loss, &[&out]).unwrap()).unwrap_err().to_string();
    assert!(err.contains("must_offload") && err.contains("\"out\"") && err.contains("forward output"), "{err}");
}

#[checkpoint(policy = rules(prefer_offload = [tanh]))]
fn offload_tanh(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).tanh()
}

#[test]
fn prefer_offload_fallbacks_are_one_line_per_region_function_and_op() {
    // Both layers' tanh outputs are forward outputs the caller holds: they cannot leave the
    // device, so their prefer_offload falls back; one line says so for both.
    let trace = Trace::new();
    let x = trace.input("x", &[4, 4], DType::F32);
    let w = trace.param("w", &[4, 4], DType::F32);
    let a = offload_tanh(&x, &w);
    let b = offload_tanh(&a, &w);
    let loss = b.sum_all();
    let model = Model::new(trace.finish_with(&loss, &[&a, &b]).unwrap()).unwrap();
    let lines: Vec<String> = model.warnings().into_iter().filter(|w| w.contains("fall back")).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert!(line.starts_with("in region `offload_tanh`: 2 values are prefer_offload (tanh) and fall back"), "{line}");
    assert!(line.contains("forward output"), "{line}");
}
