//! Every policy form of `#[checkpoint]`: the exact tag of every node it records.

use remat::prelude::*;
use remat::{DType, Graph, PolicySource, RegionId, Tag};
use Policy::{MustRecompute, MustSave, PreferRecompute, PreferSave};
use PolicySource::{Default, Name, OpKind};

/// `(op, tag)` of every node.
fn tags(graph: &Graph) -> Vec<(&'static str, Option<(Policy, PolicySource)>)> {
    graph.nodes().iter().map(|n| (n.op.name(), n.tag.map(|t| (t.policy, t.source)))).collect()
}

/// A trace with `x: [4, 3]` and `w: [3, 3]`.
fn setup() -> (Trace, Tensor, Tensor) {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[3, 3], DType::F32);
    (trace, x, w)
}

/// matmul, gelu, transpose (a view), exp.
macro_rules! body {
    ($x:ident, $w:ident) => {
        $x.matmul($w).gelu().t().exp()
    };
}

#[checkpoint]
fn bare(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

#[checkpoint(policy = recompute_all)]
fn recompute_all(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

#[checkpoint(policy = save_all)]
fn save_all(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

#[checkpoint(policy = save(matmul, exp))]
fn save_some(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

#[checkpoint(policy = recompute(gelu))]
fn recompute_some(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

#[checkpoint(policy = rules(must_save = [matmul], prefer_save = [exp], must_recompute = [gelu], default = must_recompute))]
fn rules_all(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

#[checkpoint(policy = rules(prefer_recompute = [matmul], default = prefer_save))]
fn rules_prefer(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

#[checkpoint(policy = rules())]
fn rules_empty(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

fn traced(f: fn(&Tensor, &Tensor) -> Tensor) -> Graph {
    let (trace, x, w) = setup();
    let y = f(&x, &w);
    assert!(y.tag().is_some(), "the output is tagged");
    trace.snapshot()
}

/// The leaves, then the region's four ops with these tags.
fn expect(f: fn(&Tensor, &Tensor) -> Tensor, ops: [(Policy, PolicySource); 4]) {
    let graph = traced(f);
    let mut want = vec![("input", None), ("param", None)];
    want.extend(["matmul", "gelu", "transpose", "exp"].into_iter().zip(ops.map(Some)));
    assert_eq!(tags(&graph), want);
    assert_eq!(graph.regions().len(), 1);
    for node in &graph.nodes()[2..] {
        assert_eq!(node.tag.unwrap().region, RegionId::new(0));
    }
}

#[test]
fn bare_attribute_is_recompute_all() {
    let all = [(PreferRecompute, Default); 4];
    expect(bare, all);
    expect(recompute_all, all);
}

#[test]
fn save_all_prefers_saving_everything() {
    expect(save_all, [(PreferSave, Default); 4]);
}

#[test]
fn save_lists_must_save_and_recomputes_the_rest() {
    expect(save_some, [(MustSave, OpKind), (PreferRecompute, Default), (PreferRecompute, Default), (MustSave, OpKind)]);
}

#[test]
fn recompute_lists_must_recompute_and_saves_the_rest() {
    expect(
        recompute_some,
        [(PreferSave, Default), (MustRecompute, OpKind), (PreferSave, Default), (PreferSave, Default)],
    );
}

#[test]
fn rules_give_each_list_its_policy() {
    expect(rules_all, [(MustSave, OpKind), (MustRecompute, OpKind), (MustRecompute, Default), (PreferSave, OpKind)]);
    expect(
        rules_prefer,
        [(PreferRecompute, OpKind), (PreferSave, Default), (PreferSave, Default), (PreferSave, Default)],
    );
    expect(rules_empty, [(PreferRecompute, Default); 4]);
}

#[checkpoint(policy = save_names("attn", "h"))]
fn named(x: &Tensor, w: &Tensor) -> Tensor {
    let h = x.matmul(w).name("h");
    let a = h.gelu();
    a.exp().name("attn").t()
}

#[test]
fn save_names_saves_named_values() {
    let graph = traced(named);
    assert_eq!(
        tags(&graph)[2..],
        [
            ("matmul", Some((MustSave, Name))),
            ("gelu", Some((PreferRecompute, Default))),
            ("exp", Some((MustSave, Name))),
            ("transpose", Some((PreferRecompute, Default))),
        ]
    );
    assert_eq!(graph.nodes()[2].name(), Some("h"));
    assert_eq!(graph.nodes()[4].name(), Some("attn"));
}

#[checkpoint(policy = save(matmul), budget = 0.25)]
fn budgeted(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

#[checkpoint(budget = 1)]
fn budget_only(x: &Tensor, w: &Tensor) -> Tensor {
    body!(x, w)
}

#[test]
fn budget_reaches_the_spec_and_the_region() {
    let graph = traced(budgeted);
    let region = graph.region(RegionId::new(0));
    assert_eq!(region.budget, Some(0.25));
    let spec = region.spec.unwrap();
    assert_eq!(spec.budget, Some(0.25));
    assert_eq!(spec.policy.must_save, &[remat::OpKind::Matmul]);
    assert_eq!(traced(budget_only).region(RegionId::new(0)).budget, Some(1.0));
    assert_eq!(traced(bare).region(RegionId::new(0)).budget, None);
}

#[test]
fn spec_records_name_and_location() {
    let graph = traced(save_some);
    let region = graph.region(RegionId::new(0));
    assert_eq!(region.name, "save_some");
    assert_eq!(region.parent, None);
    let spec = region.spec.unwrap();
    assert_eq!((spec.name, spec.module, spec.file), ("save_some", module_path!(), file!()));
    // The line of `fn save_some`.
    let source = include_str!("macro_policies.rs");
    let line = source.lines().position(|l| l.starts_with("fn save_some")).unwrap() as u32 + 1;
    assert_eq!(spec.line, line);
    assert_eq!(
        spec.policy,
        remat::region::PolicyTable {
            must_save: &[remat::OpKind::Matmul, remat::OpKind::Exp],
            prefer_save: &[],
            must_recompute: &[],
            prefer_recompute: &[],
            must_offload: &[],
            prefer_offload: &[],
            save_names: &[],
            offload_names: &[],
            default: PreferRecompute,
        }
    );
}

#[test]
fn tag_is_the_public_view() {
    let (_trace, x, w) = setup();
    let y = save_some(&x, &w);
    assert_eq!(y.tag(), Some(Tag { region: RegionId::new(0), policy: MustSave, source: OpKind }));
}
