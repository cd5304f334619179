//! The documents that once crashed remat or broke a rule (`tests/fixtures/adversarial/`, see its
//! README), through the `remat` binary as a user runs it: each gives what the README says — one
//! escaped line and exit 2 for a bad document, a partition within the rules for a good one —
//! and none panics, dies on a signal or echoes more than a short, escaped line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The strategies every document is tried under.
const STRATEGIES: [&str; 8] = [
    "respect",
    "mincut",
    "budget=0",
    "budget=0.0",
    "budget=1000",
    "budget=1.0",
    "budget+offload=1000",
    "budget+offload=0.5",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/adversarial").join(name)
}

fn remat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_remat")).args(args).output().expect("run remat")
}

fn partition(path: &Path, strategy: &str) -> Output {
    remat(&["partition", path.to_str().unwrap(), "--strategy", strategy, "--json"])
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

/// Exit 0 or 2 and nothing else; on 2, one line on stderr, short, with no control character.
fn well_behaved(o: &Output, what: &str) {
    match o.status.code() {
        Some(0) => {}
        Some(2) => {
            let err = stderr(o);
            let line = err.strip_suffix('\n').unwrap_or(&err);
            assert!(!line.contains('\n'), "{what}: more than one line: {err}");
            assert!(!line.chars().any(char::is_control), "{what}: a raw control character: {line:?}");
            assert!(line.chars().count() <= 800, "{what}: {} characters", line.chars().count());
        }
        other => panic!("{what}: exit {other:?} (signal or panic): {}", stderr(o)),
    }
}

/// Every fixture under every strategy: exit 0 or 2 with one clean line, never a crash.
#[test]
fn no_fixture_crashes_under_any_strategy() {
    let dir = fixture("");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        seen += 1;
        for strategy in STRATEGIES {
            let o = partition(&path, strategy);
            well_behaved(&o, &format!("{} {strategy}", path.display()));
            let dot = remat(&["dot", path.to_str().unwrap(), "--strategy", strategy]);
            well_behaved(&dot, &format!("dot {} {strategy}", path.display()));
        }
    }
    assert!(seen >= 16, "{seen} fixtures");
}

/// Bad documents: exit 2, and the line names what is wrong.
#[test]
fn bad_documents_are_one_line_naming_the_problem() {
    let cases = [
        ("panic_self_input.joint.json", "node 0 (a): input 0 is the node itself (a cycle"),
        ("panic_self_input.graph.json", "node 1 (exp): input 1 is the node itself (a cycle"),
        ("panic_self_grad_of.joint.json", "node \"g\" (b): field \"grad_of\": names the node itself"),
        (
            "accepted_slice_start_overflow.graph.json",
            "node 1 (slice): a range of 2 from 18446744073709551615 exceeds dim 4 (its end is past 2^64)",
        ),
        ("err_raw_control_chars_op.graph.json", r#"unknown op "ex\rp\u{1b}[2J""#),
        ("err_raw_control_chars_loc_op.graph.json", r#"`loc` must be file:line:column, got "a\r\tb""#),
        (
            "silent_must_offload_on_view_of_input.joint.json",
            "must_offload (an explicit tag) cannot be met: its base \"x\" (input) is an input or a parameter",
        ),
    ];
    for (file, expected) in cases {
        for strategy in STRATEGIES {
            let o = partition(&fixture(file), strategy);
            assert_eq!(o.status.code(), Some(2), "{file} {strategy}: {}", stderr(&o));
            well_behaved(&o, file);
            assert!(stderr(&o).contains(expected), "{file} {strategy}: expected `{expected}` in {}", stderr(&o));
        }
    }
}

/// A megabyte of `loc` or of op name is echoed as a short, quoted cut of itself.
#[test]
fn megabyte_names_are_shortened() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let long = "q".repeat(1 << 20);
    let docs = [
        (
            "big_loc.graph.json",
            format!(
                r#"{{"format": "remat.graph", "version": 1, "nodes": [
                {{"id": 0, "op": "input", "shape": [4], "dtype": "f32", "name": "x"}},
                {{"id": 1, "op": "tanh", "inputs": [0], "loc": "{long}"}},
                {{"id": 2, "op": "sum", "inputs": [1], "attrs": {{"axes": [0]}}}}], "outputs": [2]}}"#
            ),
            "`loc` must be file:line:column, got \"qqq",
        ),
        (
            "big_op.graph.json",
            format!(
                r#"{{"format": "remat.graph", "version": 1, "nodes": [
                {{"id": 0, "op": "input", "shape": [4], "dtype": "f32", "name": "x"}},
                {{"id": 1, "op": "{long}", "inputs": [0]}}], "outputs": [1]}}"#
            ),
            "unknown op \"qqq",
        ),
    ];
    for (name, text, expected) in docs {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let o = partition(&path, "respect");
        assert_eq!(o.status.code(), Some(2), "{name}");
        well_behaved(&o, name);
        let err = stderr(&o);
        assert!(err.contains(expected) && err.contains('…'), "{name}: {err}");
        assert!(err.len() < 400, "{name}: {} bytes", err.len());
    }
}

/// The view base: not kept when the backward never needs the view, so the smallest budget fits.
#[test]
fn a_view_base_is_kept_only_for_a_view_the_backward_needs() {
    let simple = fixture("wrong_view_base_saved_for_unneeded_boundary_view.joint.json");
    for strategy in ["respect", "mincut", "budget=0"] {
        let o = partition(&simple, strategy);
        assert!(o.status.success(), "{strategy}: {}", stderr(&o));
        let v = json(&o);
        assert_eq!(v["saved"], serde_json::json!([]), "{strategy}: {v}");
        assert_eq!(v["recomputed"], serde_json::json!(["h"]), "{strategy}");
    }
    let found = fixture("prop_r2_55117_710_unneeded_view_base.joint.json");
    for strategy in ["respect", "mincut", "budget=0.0"] {
        let o = partition(&found, strategy);
        assert!(o.status.success(), "{strategy}: {}", stderr(&o));
        let v = json(&o);
        let bases = v["decisions"].as_array().unwrap().iter().filter(|d| d["reason"] == "view_base").count();
        assert_eq!(bases, 0, "{strategy}: {v}");
    }
}

/// A region budget of 1.0 never constrains, and adding offload never makes a budget infeasible.
#[test]
fn strategies_agree_where_the_rules_say_they_must() {
    for file in ["wrong_mincut_region_budget_1_refused.joint.json", "prop2_77003_1992_mincut_region_budget.joint.json"]
    {
        for strategy in ["respect", "mincut", "budget=1.0", "budget+offload=1.0"] {
            let o = partition(&fixture(file), strategy);
            assert!(o.status.success(), "{file} {strategy}: {}", stderr(&o));
        }
    }
    for file in [
        "wrong_budget_offload_infeasible_where_budget_fits.joint.json",
        "prop2_77003_1560_budget_offload_infeasible.joint.json",
    ] {
        for budget in ["1000", "0.0", "0.5"] {
            let plain = partition(&fixture(file), &format!("budget={budget}"));
            let offload = partition(&fixture(file), &format!("budget+offload={budget}"));
            if plain.status.success() {
                assert!(offload.status.success(), "{file} budget+offload={budget}: {}", stderr(&offload));
                if budget == "1000" {
                    let bytes = json(&offload)["saved_bytes"].as_u64().unwrap();
                    assert!(bytes <= 1000, "{file} budget+offload=1000 saved {bytes} bytes");
                }
            }
        }
    }
}

/// A view that is a forward output is held, not a saved view (the debug build's checker runs).
#[test]
fn a_view_that_is_an_output_is_held() {
    let o = partition(&fixture("debug_check_panics_view_forward_output.joint.json"), "respect");
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["held"], serde_json::json!(["v"]), "{v}");
    assert_eq!(v["saved"], serde_json::json!([]), "{v}");
}

/// Integer id `1` prints `%1`; string id `"%1"` prints quoted — in the table and in DOT.
#[test]
fn ids_that_look_alike_print_apart() {
    let path = fixture("report_ids_print_alike.joint.json");
    let text = String::from_utf8(remat(&["partition", path.to_str().unwrap()]).stdout).unwrap();
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(" B ")).collect();
    assert!(rows.iter().any(|r| r.trim_start().starts_with("%1 ")), "{text}");
    assert!(rows.iter().any(|r| r.trim_start().starts_with("\"%1\" ")), "{text}");
    assert!(rows.iter().any(|r| r.trim_start().starts_with("\"1\" ")), "{text}");
    let dot = String::from_utf8(remat(&["dot", path.to_str().unwrap()]).stdout).unwrap();
    assert!(dot.contains("label=\"%1 a") && dot.contains(r#"label="\"%1\" c"#), "{dot}");
}

/// A node in a region without a policy of its own is reported in its region.
#[test]
fn a_region_node_without_a_policy_names_its_region() {
    let path = fixture("report_region_node_said_outside_any_region.joint.json");
    let text = String::from_utf8(remat(&["partition", path.to_str().unwrap()]).stdout).unwrap();
    assert!(text.contains("in region `blk#0` without a policy: saved when needed"), "{text}");
    assert!(!text.contains("outside any region"), "{text}");
}
