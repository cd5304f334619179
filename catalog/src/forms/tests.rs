use super::*;
use crate::{OpKind, Policy};

fn message(text: &str) -> String {
    let err = parse(text).unwrap_err();
    err.problems().iter().map(|p| format!("{}@{:?}", p.message, p.span)).collect::<Vec<_>>().join(" | ")
}

#[test]
fn every_form_parses() {
    assert_eq!(parse("recompute_all").unwrap(), Spec::default());
    assert_eq!(parse(" save_all ").unwrap().policy.default, Policy::PreferSave);
    let s = parse("save(matmul, gelu)").unwrap().policy;
    assert_eq!(s.lists[0], vec![OpKind::Matmul, OpKind::Gelu]);
    let r = parse("recompute(gelu)").unwrap().policy;
    assert_eq!((r.lists[2].clone(), r.default), (vec![OpKind::Gelu], Policy::PreferSave));
    assert_eq!(parse(r#"save_names("attn", "ffn")"#).unwrap().policy.save_names, vec!["attn", "ffn"]);
    let rules = parse("rules(must_save = [matmul], must_recompute = [softmax,], default = prefer_save)").unwrap();
    assert_eq!(rules.policy.lists[0], vec![OpKind::Matmul]);
    assert_eq!(rules.policy.lists[2], vec![OpKind::Softmax]);
    assert_eq!(rules.policy.default, Policy::PreferSave);
    assert_eq!(parse("policy = save_all, budget = 0.25").unwrap().budget, Some(0.25));
    assert_eq!(parse("save_all, budget = 1").unwrap().budget, Some(1.0));
}

#[test]
fn mistakes_get_the_macro_messages_with_their_place() {
    assert_eq!(message("save(matmull)"), "unknown op kind `matmull`; did you mean `matmul`?@5..12");
    assert_eq!(message("sav_all"), "unknown policy `sav_all`; did you mean `save_all`?@0..7");
    assert!(message("save(reshape)").starts_with("`reshape` is a view op"));
    assert!(message("save()").starts_with("`save()` lists no op kind"));
    assert!(message("save_all, budget = 2").contains("got 2.0@19..20"));
    assert!(message("save_all, budget = -0.5").contains("got -0.5@19..23"));
    assert!(message("save_names(attn)").contains("write `\"attn\"`"));
    assert!(message("rules(must_save = [matmul], prefer_save = [matmul])").contains("is in both"));
    assert!(message("save_all, budgt = 0.5").contains("unknown key `budgt` in a policy; did you mean `budget`?"));
    assert!(message("").starts_with("no policy given"));
    assert!(message("save(matmul").starts_with("expected `,` or `)`"));
    assert!(message("save(matmul) gelu").starts_with("expected `,` or the end"));
    assert!(message("save(%)").starts_with("unexpected `%`"));
    assert!(message(r#"save_names("attn)"#).starts_with("unterminated string"));
    // Several problems at once.
    assert_eq!(parse("save(matmull, reshape), budget = 3").unwrap_err().problems().len(), 3);
}

#[test]
fn the_policy_words_follow_the_policy_order() {
    let names: Vec<&str> = POLICY_ORDER.iter().map(|p| p.name()).collect();
    assert_eq!(names, kw::POLICIES);
    for (i, p) in POLICY_ORDER.iter().enumerate() {
        assert_eq!(list_index(*p), i);
    }
}

#[test]
fn offload_forms_parse() {
    let o = parse("offload(matmul, gelu)").unwrap().policy;
    assert_eq!(o.lists[list_index(Policy::MustOffload)], vec![OpKind::Matmul, OpKind::Gelu]);
    assert_eq!(o.default, Policy::PreferRecompute);
    assert!(o.lists.iter().enumerate().all(|(i, l)| i == list_index(Policy::MustOffload) || l.is_empty()));
    let n = parse(r#"offload_names("attn")"#).unwrap().policy;
    assert_eq!((n.offload_names, n.save_names), (vec!["attn".to_string()], vec![]));
    let r = parse(
        "rules(must_save = [matmul], must_offload = [gelu], prefer_offload = [softmax], default = prefer_offload)",
    )
    .unwrap()
    .policy;
    assert_eq!(r.lists[list_index(Policy::MustOffload)], vec![OpKind::Gelu]);
    assert_eq!(r.lists[list_index(Policy::PreferOffload)], vec![OpKind::Softmax]);
    assert_eq!(r.default, Policy::PreferOffload);
}

#[test]
fn rules_messages_list_every_key() {
    assert_eq!(
        message("rules(matmul)"),
        "expected `must_save = [..]`, `prefer_save = [..]`, `must_recompute = [..]`, `prefer_recompute = [..]`, \
         `must_offload = [..]`, `prefer_offload = [..]` or `default = ..`@6..12"
    );
    assert_eq!(
        message("rules(frobnicate = [matmul])"),
        "unknown key `frobnicate` in `rules(..)`; expected `must_save`, `prefer_save`, `must_recompute`, \
         `prefer_recompute`, `must_offload`, `prefer_offload` or `default`@6..16"
    );
}

#[test]
fn offload_mistakes() {
    assert!(message("offload(reshape)").starts_with("`reshape` is a view op: views are never offloaded"));
    assert!(message("rules(prefer_offload = [transpose])").contains("never offloaded"));
    let both = message("rules(must_save = [matmul], prefer_offload = [matmul])");
    assert!(both.contains("`matmul` is in both `must_save` and `prefer_offload`"), "{both}");
    assert!(message("offload()").starts_with("`offload()` lists no op kind"));
    assert!(message("offload_names()").starts_with("`offload_names()` lists no name"));
    assert!(message("offload_names(attn)").contains("`offload_names` takes string literals"));
    assert!(message(r#"offload_names("a", "a")"#).contains("listed twice in `offload_names(..)`"));
    assert!(message("ofload(matmul)").contains("did you mean `offload`?"));
    assert!(message("rules(must_ofload = [matmul])").contains("did you mean `must_offload`?"));
    assert!(message("rules(default = keep)").contains("`prefer_recompute`, `must_offload` or `prefer_offload`"));
}

#[test]
fn nesting_is_bounded_without_exhausting_the_stack() {
    for open in ["[", "save(", "a = "] {
        let text = open.repeat(100_000);
        assert!(message(&text).contains("nested more than 64 levels deep"), "{open}");
    }
    assert!(parse(&format!("save({}matmul{})", "[".repeat(10), "]".repeat(10))).is_err());
    assert_eq!(check_budget(0.5).unwrap(), 0.5);
    let err = check_budget(2.0).unwrap_err().to_string();
    assert!(err.contains("`budget` must be in [0, 1]") && err.contains("got 2.0"), "{err}");
    assert!(check_budget(f64::NAN).is_err());
}

#[test]
fn the_error_underlines_the_problem() {
    let text = parse("save(matmull)").unwrap_err().to_string();
    assert!(text.contains("\n    save(matmull)\n         ^^^^^^^ unknown op kind"), "{text}");
}
