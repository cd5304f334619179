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
