//! `#[save]` and `#[recompute]` on `let` statements inside checkpointed functions.

use remat::prelude::*;
use remat::{DType, Graph, PolicySource};
use Policy::{MustRecompute, MustSave, PreferRecompute, PreferSave};
use PolicySource::{Default, Name, OpKind, Statement};

fn setup() -> (Trace, Tensor, Tensor) {
    let trace = Trace::new();
    let x = trace.input("x", &[4, 3], DType::F32);
    let w = trace.param("w", &[3, 3], DType::F32);
    (trace, x, w)
}

/// `(op, policy, source)` of every node recorded in a region.
fn tags(graph: &Graph) -> Vec<(&'static str, Policy, PolicySource)> {
    graph.nodes().iter().filter_map(|n| n.tag.map(|t| (n.op.name(), t.policy, t.source))).collect()
}

#[checkpoint]
fn basic(x: &Tensor, w: &Tensor) -> Tensor {
    #[save]
    let h = x.matmul(w).gelu();
    #[recompute]
    let e: Tensor = h.exp();
    e.tanh()
}

#[test]
fn statement_overrides_the_region_policy() {
    let (trace, x, w) = setup();
    basic(&x, &w);
    assert_eq!(
        tags(&trace.snapshot()),
        [
            ("matmul", PreferRecompute, Default),
            ("gelu", MustSave, Statement),
            ("exp", MustRecompute, Statement),
            ("tanh", PreferRecompute, Default),
        ]
    );
    assert_eq!(trace.error(), None);
}

#[checkpoint(policy = save_names("attn", "kept"))]
fn with_names(x: &Tensor, w: &Tensor) -> Tensor {
    #[recompute]
    let a = x.matmul(w).name("attn");
    #[save]
    let b = a.exp();
    let b = b.name("renamed");
    let c = b.sin().name("kept");
    c.cos()
}

#[test]
fn statements_win_over_names() {
    let (trace, x, w) = setup();
    with_names(&x, &w);
    let graph = trace.snapshot();
    assert_eq!(
        tags(&graph),
        [
            ("matmul", MustRecompute, Statement),
            ("exp", MustSave, Statement),
            ("sin", MustSave, Name),
            ("cos", PreferRecompute, Default),
        ]
    );
    assert_eq!(graph.nodes()[3].name(), Some("renamed"));
}

#[checkpoint(policy = save(matmul))]
fn patterns(x: &Tensor, w: &Tensor) -> Tensor {
    #[recompute]
    let (m, s) = (x.matmul(w), x.sin());
    #[save]
    let [a, b] = [m.exp(), s.cos()];
    #[save]
    let v = vec![a.abs(), b.neg()];
    #[save]
    let r = &v[0].sqrt();
    #[save]
    let mut acc = r.square();
    #[recompute]
    let o = Some(acc.relu());
    acc = o.into_iter().fold(acc, |a, r| a + r);
    acc
}

#[test]
fn tuples_arrays_vecs_references_and_mut_bindings() {
    let (trace, x, w) = setup();
    patterns(&x, &w);
    assert_eq!(
        tags(&trace.snapshot()),
        [
            ("matmul", MustRecompute, Statement),
            ("sin", MustRecompute, Statement),
            ("exp", MustSave, Statement),
            ("cos", MustSave, Statement),
            ("abs", MustSave, Statement),
            ("neg", MustSave, Statement),
            ("sqrt", MustSave, Statement),
            ("square", MustSave, Statement),
            ("relu", MustRecompute, Statement),
            ("add", PreferRecompute, Default),
        ]
    );
    assert_eq!(trace.error(), None);
}

#[checkpoint(policy = save_all)]
fn nested(x: &Tensor, flag: bool) -> Tensor {
    let mut h = if flag {
        #[recompute]
        let a = x.exp();
        a
    } else {
        #[recompute]
        let b = x.sin();
        b
    };
    for _ in 0..2 {
        #[recompute]
        let step = h.tanh();
        h = step;
    }
    h = match h.rank() {
        2 => {
            #[recompute]
            let m = h.abs();
            m
        }
        _ => h,
    };
    let f = |t: &Tensor| {
        #[recompute]
        let c = t.cos();
        c
    };
    {
        #[recompute]
        let inner = f(&h).neg();
        h = inner;
    }
    h.relu()
}

#[test]
fn nested_blocks_if_loops_match_and_closures() {
    let (trace, x, _) = setup();
    nested(&x, true);
    nested(&x, false);
    let graph = trace.snapshot();
    let region_tags = tags(&graph);
    let first = &region_tags[..7];
    assert_eq!(
        first,
        [
            ("exp", MustRecompute, Statement),
            ("tanh", MustRecompute, Statement),
            ("tanh", MustRecompute, Statement),
            ("abs", MustRecompute, Statement),
            ("cos", MustRecompute, Statement),
            ("neg", MustRecompute, Statement),
            ("relu", PreferSave, Default),
        ]
    );
    assert_eq!(region_tags[7], ("sin", MustRecompute, Statement));
}

#[checkpoint(policy = save(exp))]
fn saves_an_input(x: &Tensor) -> Tensor {
    #[save]
    let y = x.clone();
    y.exp()
}

#[test]
fn a_statement_about_a_value_from_outside_the_region_is_a_trace_error() {
    let (trace, x, _) = setup();
    let y = saves_an_input(&x);
    assert_eq!(y.tag().map(|t| (t.policy, t.source)), Some((MustSave, OpKind)));
    let error = trace.error().expect("an error is recorded");
    assert!(
        error.contains("`must_save` applies to a value computed in this region or a region it calls; `x`, an input or a parameter, is held anyway"),
        "{error}"
    );
    // It names the line of the `#[save]`.
    let source = include_str!("macro_statements.rs");
    let line = source.lines().position(|l| l.contains("let y = x.clone();")).unwrap();
    assert!(error.contains(&format!("macro_statements.rs:{line}:")), "{error}");
}

#[checkpoint(policy = arg(policy))]
fn any_policy(policy: &RegionPolicy, x: &Tensor, w: &Tensor) -> Tensor {
    #[save]
    let h = x.matmul(w).gelu();
    #[recompute]
    let e = h.exp();
    e.tanh()
}

/// One function with statement attributes serves every policy, `none` included (issue 50): under
/// `none` it opens no region and its values are left untagged, with no error.
#[test]
fn statements_work_under_every_policy_none_included() {
    for text in ["recompute_all", "save(matmul)", "save_all", "none"] {
        let policy: RegionPolicy = text.parse().unwrap();
        let (trace, x, w) = setup();
        any_policy(&policy, &x, &w);
        assert_eq!(trace.error(), None, "{text}");
        let tags = tags(&trace.snapshot());
        if policy.is_none() {
            assert!(tags.is_empty(), "{text}: {tags:?}");
        } else {
            assert_eq!(tags[1], ("gelu", MustSave, Statement), "{text}");
            assert_eq!(tags[2], ("exp", MustRecompute, Statement), "{text}");
        }
    }
}

#[checkpoint(policy = recompute_all)]
fn inner(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).sin()
}

#[checkpoint(policy = arg(policy))]
fn outer(policy: &RegionPolicy, x: &Tensor, w: &Tensor) -> Tensor {
    #[save]
    let (a, b) = (inner(x, w), inner(x, w).cos());
    #[recompute]
    let c = inner(&a, w);
    (&b + &c).exp()
}

/// A statement about a nested region's output: the value keeps its region and takes the
/// statement's policy, under the outer function's policy and under `none`.
#[test]
fn statements_apply_to_a_nested_regions_output() {
    for text in ["save_all", "none"] {
        let (trace, x, w) = setup();
        outer(&text.parse().unwrap(), &x, &w);
        assert_eq!(trace.error(), None, "{text}");
        let graph = trace.snapshot();
        let tagged = |op: &str| -> Vec<(Policy, PolicySource, String)> {
            graph
                .nodes()
                .iter()
                .filter(|n| n.op.name() == op)
                .filter_map(|n| n.tag.map(|t| (t.policy, t.source, graph.region(t.region).name.clone())))
                .collect()
        };
        let sins = tagged("sin");
        assert_eq!(sins.len(), 3, "{text}");
        assert_eq!((sins[0].0, sins[0].1, sins[0].2.as_str()), (MustSave, Statement, "inner"), "{text}");
        assert_eq!((sins[1].0, sins[1].1), (PreferRecompute, Default), "{text}: inner(x, w).cos()'s sin is not bound");
        assert_eq!((sins[2].0, sins[2].1, sins[2].2.as_str()), (MustRecompute, Statement, "inner"), "{text}");
        let cos = tagged("cos");
        if text == "none" {
            assert!(cos.is_empty(), "{text}: the cos is outer's own op, untagged under none");
        } else {
            assert_eq!((cos[0].0, cos[0].1, cos[0].2.as_str()), (MustSave, Statement, "outer"), "{text}");
        }
    }
}

#[checkpoint]
fn many(x: &Tensor) -> Tensor {
    #[save]
    let t = (
        x.sin(),
        x.cos(),
        x.exp(),
        x.tanh(),
        x.abs(),
        x.neg(),
        x.relu(),
        x.sigmoid(),
        x.square(),
        x.gelu(),
        x.silu(),
        x.sqrt(),
    );
    #[recompute]
    let nested = ((x.sin(), x.cos()), (x.exp(), (x.tanh(),)));
    &(&t.0 + &t.11) + &(nested.1).1 .0
}

/// Tuples of up to 12 tensors, and nested tuples for more.
#[test]
fn statements_take_tuples_of_twelve_and_nested_tuples() {
    let (trace, x, _) = setup();
    many(&x);
    assert_eq!(trace.error(), None);
    let tags = tags(&trace.snapshot());
    assert!(tags[..12].iter().all(|&(_, p, s)| (p, s) == (MustSave, Statement)), "{tags:?}");
    assert!(tags[12..16].iter().all(|&(_, p, s)| (p, s) == (MustRecompute, Statement)), "{tags:?}");
}
