use super::*;
use crate::op::OpKind;
use crate::policy::{Policy, PolicySource};

static MLP: RegionSpec = RegionSpec {
    name: "mlp",
    module: "tests",
    file: "region.rs",
    line: 1,
    policy: PolicyTable {
        must_save: &[OpKind::Matmul],
        prefer_save: &[],
        must_recompute: &[OpKind::Gelu],
        prefer_recompute: &[],
        must_offload: &[OpKind::Softmax],
        prefer_offload: &[OpKind::Add],
        save_names: &["attn"],
        offload_names: &["ctx"],
        default: Policy::PreferRecompute,
    },
    budget: None,
};

#[test]
fn resolution_order() {
    let p = &MLP.policy;
    assert_eq!(p.resolve(OpKind::Matmul, None), (Policy::MustSave, PolicySource::OpKind));
    assert_eq!(p.resolve(OpKind::Gelu, Some("attn")), (Policy::MustSave, PolicySource::Name));
    assert_eq!(p.resolve(OpKind::Gelu, None), (Policy::MustRecompute, PolicySource::OpKind));
    assert_eq!(p.resolve(OpKind::Gelu, Some("ctx")), (Policy::MustOffload, PolicySource::Name));
    assert_eq!(p.resolve(OpKind::Softmax, None), (Policy::MustOffload, PolicySource::OpKind));
    assert_eq!(p.resolve(OpKind::Add, None), (Policy::PreferOffload, PolicySource::OpKind));
    assert_eq!(p.resolve(OpKind::Mul, None), (Policy::PreferRecompute, PolicySource::Default));
}

#[test]
fn runtime_policies_round_trip_and_share_tables() {
    for text in [
        "recompute_all",
        "save_all",
        "save(matmul, gelu)",
        "recompute(gelu)",
        "save_names(\"attn\")",
        "offload(matmul, gelu)",
        "offload_names(\"ctx\")",
        "rules(must_save = [matmul], must_recompute = [softmax], default = prefer_save)",
        "rules(must_save = [matmul], prefer_offload = [gelu], default = prefer_offload)",
        "save_all, budget = 0.25",
    ] {
        let p = RegionPolicy::parse(text).unwrap();
        assert_eq!(p.to_string(), text);
        assert_eq!(RegionPolicy::parse(&p.to_string()).unwrap(), p);
    }
    let a = RegionPolicy::parse("save(matmul)").unwrap();
    let b: RegionPolicy = "policy = save(matmul)".parse().unwrap();
    assert!(std::ptr::eq(a.table(), b.table()));
    assert_eq!(a.table().resolve(OpKind::Matmul, None), (Policy::MustSave, PolicySource::OpKind));
}

#[test]
fn a_runtime_policy_tags_like_the_spec_it_replaces() {
    static SITE: RegionSpec = RegionSpec::new("site", PolicyTable::RECOMPUTE_ALL);
    let p = RegionPolicy::parse("save(matmul), budget = 0.5").unwrap();
    let guard = enter_region_with(&SITE, p);
    let open = active_regions();
    let spec = open.last().unwrap().spec;
    assert_eq!((spec.name, spec.line, spec.budget), ("site", SITE.line, Some(0.5)));
    assert_eq!(spec.policy.must_save, &[OpKind::Matmul]);
    drop(guard);
    let again = enter_region_with(&SITE, p);
    assert!(std::ptr::eq(active_regions().last().unwrap().spec, spec));
    drop(again);
    let plain = enter_region_with(&SITE, RegionPolicy::RECOMPUTE_ALL);
    assert!(std::ptr::eq(active_regions().last().unwrap().spec, &SITE));
    drop(plain);
}

#[test]
fn guards_nest_and_unwind() {
    assert!(!in_region());
    let outer = enter_region(&MLP);
    let inner = enter_region(&MLP);
    let open = active_regions();
    assert_eq!(open.len(), 2);
    assert_ne!(open[0].instance, open[1].instance);
    drop(inner);
    assert_eq!(active_regions().len(), 1);
    drop(outer);
    assert!(!in_region());
}

/// Traces `depth` nested instances of `MLP`, one op recorded in each (as a recursive
/// `#[checkpoint]` function does) and one more in each on the way out; returns the graph and
/// the open instances the recording looked at.
fn trace_nested(depth: usize) -> (crate::Graph, usize) {
    use crate::{DType, Trace};
    crate::recording::LOOKED_AT.with(|c| c.set(0));
    let trace = Trace::new();
    let mut h = trace.input("x", &[2], DType::F32);
    let mut guards = Vec::with_capacity(depth);
    for _ in 0..depth {
        guards.push(enter_region(&MLP));
        h = h.tanh();
    }
    while let Some(guard) = guards.pop() {
        h = h.exp();
        drop(guard);
    }
    let graph = trace.finish(&h.sum_all()).unwrap();
    (graph, crate::recording::LOOKED_AT.with(|c| c.get()))
}

/// Nesting is linear: the recording looks at each open instance a bounded number of times,
/// not once per op per enclosing level (10 000 levels once took 1.5 s, quadratic).
#[test]
fn nesting_costs_work_linear_in_the_depth() {
    let mut looked = Vec::new();
    for depth in [1_000, 2_000, 4_000] {
        let (graph, n) = trace_nested(depth);
        // Each level is its own region, the child of the one before, and its ops carry it.
        assert_eq!(graph.regions().len(), depth);
        let parents: Vec<Option<usize>> = graph.regions().iter().map(|r| r.parent.map(|p| p.index())).collect();
        assert_eq!(parents, (0..depth).map(|i| i.checked_sub(1)).collect::<Vec<_>>());
        let tanh_tags: Vec<usize> = graph
            .nodes()
            .iter()
            .filter(|n| n.op.name() == "tanh")
            .map(|n| n.tag.expect("tagged").region.index())
            .collect();
        assert_eq!(tanh_tags, (0..depth).collect::<Vec<_>>());
        // 2 · depth ops in regions: one look each, plus one per instance when it registers.
        assert!(n <= 3 * depth, "depth {depth}: {n} instances looked at");
        looked.push(n);
    }
    // Doubling the depth doubles the work (a quadratic step would quadruple it).
    for (k, factor) in [(1, 2.0), (2, 4.0)] {
        let ratio = looked[k] as f64 / looked[0] as f64;
        assert!((ratio - factor).abs() < 0.01, "{looked:?}");
    }
}

/// An error deep in nested instances names each level's instance number, counted per function.
#[test]
fn an_error_in_nested_instances_names_each_level() {
    use crate::{DType, Trace};
    static BLOCK: RegionSpec = RegionSpec::new("block", PolicyTable::RECOMPUTE_ALL);
    let trace = Trace::new();
    let x = trace.input("x", &[2], DType::F32);
    let first = enter_region(&BLOCK);
    let _ = x.tanh();
    drop(first);
    let outer = enter_region(&BLOCK);
    let _ = x.tanh();
    let inner = enter_region(&MLP);
    let _ = x.matmul(&x.reshape(&[1, 2]));
    drop(inner);
    drop(outer);
    let err = trace.finish(&x.sum_all()).unwrap_err().to_string();
    assert!(err.contains("in region mlp #0 in block #1:"), "{err}");
}
