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

/// Exit 0 or 2 and nothing else; on 2, one line on stderr, short, with no control character or
/// line separator.
fn well_behaved(o: &Output, what: &str) {
    match o.status.code() {
        Some(0) => {}
        Some(2) => {
            let err = stderr(o);
            let line = err.strip_suffix('\n').unwrap_or(&err);
            assert!(!line.contains('\n'), "{what}: more than one line: {err}");
            // Python's str.splitlines breaks lines at these too (U+0085 is a control character).
            let breaks = |c: char| c.is_control() || c == '\u{2028}' || c == '\u{2029}';
            assert!(!line.chars().any(breaks), "{what}: a raw control character or line separator: {line:?}");
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

// Round 3 (issue 45, `cli/tests/fixtures/`: the round's reproducers `cli_*.sh`, as tests).

fn fixture_r3(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn example(name: &str) -> String {
    format!("{}/../docs/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The number after `prefix` in `text`.
fn number_after(text: &str, prefix: &str) -> u64 {
    let at = text.find(prefix).unwrap_or_else(|| panic!("`{prefix}` not in {text}")) + prefix.len();
    text[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

/// Bytes of the inputs and parameters of a `remat.graph` document, from its shapes and dtypes.
fn resident_bytes(doc: &serde_json::Value) -> u64 {
    let size = |dtype: &str| match dtype {
        "f32" | "i32" => 4,
        "f16" | "bf16" => 2,
        other => panic!("dtype {other}"),
    };
    doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["op"] == "input" || n["op"] == "param")
        .map(|n| {
            n["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).product::<u64>()
                * size(n["dtype"].as_str().unwrap())
        })
        .sum()
}

/// `cli_peak_infeasible_slow.sh`: `peak=0` on the 100- and 200-layer chains (2.4 s and 13.2 s
/// before, the search walking hundreds of plans) is refused from the lower bound, without the
/// search — the message says so, which only the bound's refusal does. The bound holds the
/// inputs and parameters, and every limit below it is refused the same way.
#[test]
fn a_peak_below_every_plan_is_refused_without_searching() {
    for n in [100, 200] {
        let path = fixture_r3(&format!("peak_infeasible_slow_chain{n}.graph.json"));
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let o = partition(&path, "peak=0");
        assert_eq!(o.status.code(), Some(2), "chain{n}: {}", stderr(&o));
        well_behaved(&o, "peak=0");
        let err = stderr(&o);
        assert!(err.contains("peak=0 (0 B) cannot be met: no plan peaks below"), "chain{n}: {err}");
        assert!(err.contains("a lower bound, known without searching"), "chain{n}: {err}");
        assert!(
            !err.contains("predicted peak of any plan") && !err.contains("lowest predicted peak found"),
            "chain{n}: the search ran: {err}"
        );
        let bound = number_after(&err, "no plan peaks below ");
        let resident = resident_bytes(&doc);
        assert_eq!(resident, 4 * 8 * 4 + 8 * 8 * 4, "the chain's x and w");
        assert!(bound > resident, "chain{n}: a matmul holds its input and output beside x and w: {bound}");
        assert_eq!(number_after(&err, "): "), resident, "chain{n}: {err}");
        let below = partition(&path, &format!("peak={}", bound - 1));
        assert_eq!(below.status.code(), Some(2));
        assert!(stderr(&below).contains(&format!("no plan peaks below {bound} bytes")), "{}", stderr(&below));
    }
}

/// On a small graph the bound is checked against the plans themselves: at the bound, the search
/// runs and either finds a plan (whose peak is at most the limit and so exactly the bound) or
/// reports a smallest reachable peak at or above it; below the bound, the refusal.
#[test]
fn the_peak_bound_is_below_every_plan_the_search_finds() {
    let file = example("two_regions.graph.json");
    let o = remat(&["partition", &file, "--strategy", "peak=0"]);
    let bound = number_after(&stderr(&o), "no plan peaks below ");
    let at = remat(&["partition", &file, "--strategy", &format!("peak={bound}"), "--json"]);
    match at.status.code() {
        Some(0) => assert_eq!(json(&at)["planned_peak"].as_u64(), Some(bound)),
        _ => {
            let err = stderr(&at);
            let least = if err.contains("the least predicted peak of any plan is ") {
                number_after(&err, "the least predicted peak of any plan is ")
            } else {
                number_after(&err, "the lowest predicted peak found is ")
            };
            assert!(least >= bound, "{err}");
        }
    }
    // The least-recompute plan peaks at or above the bound, and is met by a limit at its peak.
    let free = remat(&["partition", &file, "--json"]);
    let peak = json(&free)["planned_peak"].as_u64().unwrap();
    assert!(peak >= bound, "respect peaks at {peak}, below the bound {bound}");
    let at_peak = remat(&["partition", &file, "--strategy", &format!("peak={peak}"), "--json"]);
    assert!(at_peak.status.success(), "{}", stderr(&at_peak));
    assert!(json(&at_peak)["planned_peak"].as_u64().unwrap() <= peak);
}

/// `cli_peak_parse_says_not_a_fraction.sh`: each bad `peak=` (and `budget=`) value is told what
/// is wrong with it, in one line; `1TiB` is a unit remat reads.
#[test]
fn each_bad_peak_value_is_described_as_what_it_is() {
    let file = example("two_regions.graph.json");
    let cases = [
        ("peak=abc", "`peak=abc`: `abc` is not a number of bytes"),
        ("peak=-1", "`peak=-1`: `-1` is negative"),
        ("peak=18446744073709551616", "is more bytes than 64 bits hold"),
        ("peak=0x10", "`peak=0x10`: `0x10` is hexadecimal; bytes are written in decimal (16)"),
        ("peak=", "`peak=`: no value"),
        ("peak=0.5", "`peak=0.5`: a peak is bytes"),
        ("peak=1GB", "GB is not a unit remat reads"),
        ("peak=1.5GiB", "a decimal number of GiB"),
        ("budget=-1", "`budget=-1`: `-1` is negative"),
        ("budget=abc", "`budget=abc`: `abc` is not a number of bytes"),
        ("budget=0x10", "hexadecimal"),
        ("budget=2.0", "a fraction budget must be in [0, 1], got 2"),
        ("budget+offload=99999999999999999999", "more bytes than 64 bits hold"),
    ];
    for (strategy, expected) in cases {
        let o = remat(&["partition", &file, "--strategy", strategy]);
        assert_eq!(o.status.code(), Some(2), "{strategy}");
        well_behaved(&o, strategy);
        let err = stderr(&o);
        assert!(err.contains(expected), "{strategy}: expected `{expected}` in {err}");
        assert!(!err.contains("not a fraction") || strategy == "peak=0.5", "{strategy}: {err}");
    }
    let o = remat(&["partition", &file, "--strategy", "peak=1TiB", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["strategy"], "peak=1099511627776");
}

/// `--offload` with `peak=` was once silently ignored, then refused; it now asks the peak
/// search to choose offloads, as `peak+offload=` does, and says so in the strategy it reports.
#[test]
fn offload_with_a_peak_is_the_peak_with_offload() {
    let file = example("two_regions.graph.json");
    let flag = remat(&["partition", &file, "--strategy", "peak=1MiB", "--offload", "--json"]);
    assert!(flag.status.success(), "{}", stderr(&flag));
    assert_eq!(json(&flag)["strategy"], "peak+offload=1048576");
    let spelled = remat(&["partition", &file, "--strategy", "peak+offload=1MiB", "--json"]);
    assert_eq!(json(&spelled)["strategy"], "peak+offload=1048576");
    assert!(remat(&["partition", &file, "--strategy", "peak=1MiB"]).status.success());
    let flag = remat(&["partition", &file, "--strategy", "budget=0.0", "--offload", "--json"]);
    assert_eq!(json(&flag)["strategy"], "budget+offload=0.0");
}

/// `cli_evaluate_header_mislabelled.sh`: the evaluation names the decision it scored (not
/// `budget+offload=18446744073709551615`), lists a value given twice once, and says which rule a
/// recomputed value breaks.
#[test]
fn evaluate_names_the_decision_it_scored() {
    let file = example("small.joint.json");
    let text = String::from_utf8(remat(&["evaluate", &file, "--save", "2"]).stdout).unwrap();
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("evaluate (the given decision: keep %2): "), "{first}");
    assert!(!text.contains("18446744073709551615"), "{text}");
    let o = remat(&["evaluate", &file, "--save", "2,2", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["strategy"], "given");
    assert_eq!(v["given"], serde_json::json!([2]));
    let text = String::from_utf8(remat(&["evaluate", &file, "--save", "5,5,3,3"]).stdout).unwrap();
    assert!(text.starts_with("evaluate (the given decision: keep %5, %3): "), "{text}");
    let kept_for_nothing = text.lines().find(|l| l.starts_with("kept for nothing")).unwrap_or("");
    assert_eq!(kept_for_nothing.matches("%5").count(), kept_for_nothing.contains("%5") as usize, "{text}");
    assert_eq!(kept_for_nothing.matches("%3").count(), kept_for_nothing.contains("%3") as usize, "{text}");
    // %4 is flagged random and not_recomputable in the document, and is not a forward output.
    let rule = text.lines().find(|l| l.contains("%4") && l.contains("recomputed, but")).unwrap_or("");
    assert!(rule.ends_with("recomputed, but it is flagged not_recomputable"), "{text}");
}

/// `cli_lone_surrogate.sh`: a `"name"` holding the escape of a lone surrogate (as Python's
/// `json.dumps` writes one) is named as that escape in that field, in both formats and in the
/// other string fields, not "expected a node object, got null".
#[test]
fn a_lone_surrogate_escape_names_its_field() {
    let o = partition(&fixture_r3("err_lone_surrogate_name_min.joint.json"), "respect");
    assert_eq!(o.status.code(), Some(2));
    well_behaved(&o, "lone surrogate");
    let err = stderr(&o);
    assert!(err.contains(r#"node 0 (input): field "name": invalid escape \ud800: a lone surrogate"#), "{err}");
    assert!(!err.contains("expected a node object"), "{err}");
    let graph_head = r#"{"format": "remat.graph", "version": 1, "#;
    let joint_head = r#"{"format": "remat.joint", "version": 1, "#;
    let docs = [
        (
            format!(
                r#"{graph_head}"nodes": [{{"id": 0, "op": "input", "shape": [4], "dtype": "f32", "name": "x\udc00"}},
                {{"id": 1, "op": "tanh", "inputs": [0]}}], "outputs": [1]}}"#
            ),
            r#"node 0 (input): field "name": invalid escape \udc00: a lone surrogate (a low surrogate"#,
        ),
        (
            format!(
                r#"{graph_head}"nodes": [{{"id": 0, "op": "input", "shape": [4], "dtype": "f32", "name": "x"}},
                {{"id": 1, "op": "tanh", "inputs": [0], "loc": "a.py:1:1\ud83d"}}], "outputs": [1]}}"#
            ),
            r#"node 1 (tanh): field "loc": invalid escape \ud83d"#,
        ),
        (
            format!(
                r#"{joint_head}"nodes": [{{"id": "a\ud800", "op": "input", "phase": "forward", "bytes": 4}}], "forward_outputs": []}}"#
            ),
            r#"(input): field "id": invalid escape \ud800"#,
        ),
        (
            format!(
                r#"{joint_head}"regions": [{{"id": 0, "name": "blk\ud800"}}], "nodes": [{{"id": 0, "op": "input", "phase": "forward", "bytes": 4}}], "forward_outputs": [0]}}"#
            ),
            r#"field `regions[0].name`: invalid escape \ud800"#,
        ),
        (
            r#"{"format": "remat.joint\ud800", "version": 1, "nodes": []}"#.to_string(),
            r#"field `format`: invalid escape \ud800"#,
        ),
        (
            r#"{"format": "remat.joint", "version": 1, "nodes\udc00": []}"#.to_string(),
            r#"invalid JSON: invalid escape \udc00: a lone surrogate (a low surrogate without the high one before it), which no Unicode string can hold (line 1, column"#,
        ),
    ];
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for (k, (text, expected)) in docs.iter().enumerate() {
        let path = dir.join(format!("lone-surrogate-{k}.json"));
        std::fs::write(&path, text).unwrap();
        let o = partition(&path, "respect");
        assert_eq!(o.status.code(), Some(2), "{k}: {}", stderr(&o));
        well_behaved(&o, expected);
        assert!(stderr(&o).contains(expected), "{k}: expected `{expected}` in {}", stderr(&o));
    }
}

/// Error lines escape what Python's `str.splitlines` breaks a line at beyond the control
/// characters' own escapes: U+0085, U+2028 and U+2029 (an op name echoed in the error).
#[test]
fn error_lines_escape_line_and_paragraph_separators() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let text = r#"{"format": "remat.graph", "version": 1, "nodes": [
        {"id": 0, "op": "input", "shape": [4], "dtype": "f32", "name": "x"},
        {"id": 1, "op": "ta\u2028n\u2029h\u0085", "inputs": [0]}], "outputs": [1]}"#;
    let path = dir.join("separators.graph.json");
    std::fs::write(&path, text).unwrap();
    let o = partition(&path, "respect");
    assert_eq!(o.status.code(), Some(2));
    well_behaved(&o, "separators");
    let err = stderr(&o);
    let line = err.strip_suffix('\n').unwrap_or(&err);
    for c in ['\u{85}', '\u{2028}', '\u{2029}'] {
        assert!(!line.contains(c), "raw U+{:04X} in {line:?}", c as u32);
    }
    assert!(line.contains(r"ta\u{2028}n\u{2029}h\u{85}"), "{line}");
}
