//! The `remat` binary: each subcommand on the documented examples, and each kind of bad file
//! (exit code 2, one line on stderr naming the node).

use std::path::PathBuf;
use std::process::{Command, Output};

fn remat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_remat")).args(args).output().expect("run remat")
}

fn example(name: &str) -> String {
    format!("{}/../docs/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch file under cargo's per-test temporary directory.
fn scratch(name: &str, contents: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{name}"));
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn partition_prints_the_table() {
    let o = remat(&["partition", &example("two_regions.graph.json")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for needle in [
        "partition (respect)",
        "saved for the backward",
        "read by region `g#1`, which recomputes from it",
        "recomputed in the backward",
        "prefer_recompute tag",
        "peak memory: planned",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from\n{text}");
    }
}

#[test]
fn partition_json_and_strategies() {
    for (strategy, shown) in [
        ("respect", "respect"),
        ("mincut", "mincut"),
        ("budget=4096", "budget=4096"),
        ("budget=64KiB", "budget=65536"),
        ("budget=1MiB", "budget=1048576"),
        ("budget=1GiB", "budget=1073741824"),
        ("budget=0.5", "budget=0.5"),
        ("budget=1.0", "budget=1.0"),
        ("budget=0.0", "budget=0.0"),
    ] {
        for file in ["two_regions.graph.json", "small.joint.json"] {
            let o = remat(&["partition", &example(file), "--strategy", strategy, "--json"]);
            assert!(o.status.success(), "{file} {strategy}: {}", stderr(&o));
            let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert_eq!(v["strategy"], shown);
            assert!(v["saved"].is_array() && v["recomputed"].is_array() && v["decisions"].is_array());
            assert!(v["saved_bytes"].is_u64() && v["recompute_flops"].is_u64());
        }
    }
}

#[test]
fn an_impossible_budget_is_an_error() {
    let o = remat(&["partition", &example("two_regions.graph.json"), "--strategy", "budget=64"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot be met"), "{}", stderr(&o));
}

#[test]
fn dot_to_stdout_and_file() {
    let o = remat(&["dot", &example("two_regions.graph.json")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let dot = stdout(&o);
    assert!(dot.starts_with("digraph remat {") && dot.contains("subgraph cluster_r1 {"));
    assert!(dot.contains("n4 -> n5;"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-small.dot");
    let o = remat(&["dot", &example("small.joint.json"), "--strategy", "mincut", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    let dot = std::fs::read_to_string(&out).unwrap();
    assert!(dot.contains("label=\"strategy mincut\"") && dot.contains("cluster_r0"));
}

#[test]
fn pareto_plots_and_tabulates() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-frontier.svg");
    let _ = std::fs::remove_file(&out);
    let o = remat(&["pareto", &example("small.joint.json"), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    for needle in ["respect", "mincut", "budget=0.0", "budget=0.05", "budget=0.5", "budget=1.0", "frontier"] {
        assert!(table.contains(needle), "`{needle}` missing from\n{table}");
    }
    assert_eq!(table.lines().filter(|l| l.starts_with("budget=")).count(), 21);
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.contains("<svg") && svg.contains("recompute FLOPs") && svg.contains("saved bytes"));
}

/// `x: [2, 3]`, `w: [3, 4]`, `v: [4, 5]` and the given nodes.
fn graph_doc(nodes: &[&str], outputs: &str) -> String {
    let mut all = vec![
        r#"{"id": 0, "op": "input", "shape": [2, 3], "dtype": "f32"}"#,
        r#"{"id": 1, "op": "param", "shape": [3, 4], "dtype": "f32"}"#,
        r#"{"id": 2, "op": "param", "shape": [4, 5], "dtype": "f32"}"#,
    ];
    all.extend_from_slice(nodes);
    format!(r#"{{"format": "remat.graph", "version": 1, "nodes": [{}], "outputs": {outputs}}}"#, all.join(", "))
}

/// Runs `partition` on a bad file: exit 2, one line on stderr containing every needle.
fn assert_bad(name: &str, contents: &str, needles: &[&str]) {
    let path = scratch(name, contents);
    for command in ["partition", "dot"] {
        let o = remat(&[command, path.to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: one line, got {err:?}");
        assert!(err.starts_with(&format!("error: {}: ", path.display())), "{name}: {err}");
        for needle in needles {
            assert!(err.contains(needle), "{name}: `{needle}` missing from {err}");
        }
        assert!(stdout(&o).is_empty());
    }
}

#[test]
fn bad_files_exit_2_naming_the_node() {
    let sum = r#"{"id": 4, "op": "sum", "inputs": [3], "attrs": {"axes": [0, 1]}}"#;
    assert_bad("invalid.json", "{\"format\": \"remat.graph\",", &["invalid JSON", "line"]);
    assert_bad(
        "shape.json",
        &graph_doc(&[r#"{"id": 3, "op": "matmul", "inputs": [0, 2]}"#, sum], "[4]"),
        &["node 3 (matmul): inner dimensions differ: [2, 3] · [4, 5] (3 vs 4)"],
    );
    assert_bad(
        "unknown-op.json",
        &graph_doc(&[r#"{"id": 3, "op": "matmull", "inputs": [0, 1]}"#, sum], "[4]"),
        &["node 3 (matmull): unknown op \"matmull\" (did you mean `matmul`?)"],
    );
    assert_bad(
        "unknown-field.json",
        &graph_doc(&[r#"{"id": 3, "op": "matmul", "inputs": [0, 1], "polcy": "must_save"}"#, sum], "[4]"),
        &["node 3 (matmul): unknown field \"polcy\" (did you mean \"policy\"?"],
    );
    assert_bad(
        "cycle.json",
        &graph_doc(&[r#"{"id": 3, "op": "relu", "inputs": [4]}"#, r#"{"id": 4, "op": "relu", "inputs": [3]}"#], "[4]"),
        &["node 3 (relu): input 4 is defined later in the list", "cycle"],
    );
    assert_bad(
        "dangling.json",
        &graph_doc(&[r#"{"id": 3, "op": "matmul", "inputs": [0, 7]}"#, sum], "[4]"),
        &["node 3 (matmul): input 7 is not a node of the document (a dangling input)"],
    );
    assert_bad(
        "joint-unknown-flag.json",
        r#"{"format": "remat.joint", "version": 1, "nodes": [
            {"id": 0, "op": "input", "phase": "forward", "bytes": 8},
            {"id": 1, "op": "sin", "inputs": [0], "phase": "forward", "bytes": 8, "flags": ["recomputable"]}
        ], "forward_outputs": [1]}"#,
        &["node 1 (sin): field \"flags\": unknown flag \"recomputable\""],
    );
    // x·w is must_recompute in region 0, but a must_save transpose of it keeps it (a view is kept
    // through its base): no plan honours both.
    let conflict = format!(
        r#"{{"format": "remat.graph", "version": 1, "regions": [{{"id": 0, "name": "f"}}],
        "nodes": [{}, {}, {}, {}], "outputs": [5]}}"#,
        r#"{"id": 0, "op": "input", "shape": [2, 3], "dtype": "f32"}, {"id": 1, "op": "param", "shape": [3, 4], "dtype": "f32"}"#,
        r#"{"id": 2, "op": "matmul", "inputs": [0, 1], "region": 0, "policy": "must_recompute"}"#,
        r#"{"id": 3, "op": "transpose", "inputs": [2], "attrs": {"perm": [1, 0]}, "region": 0, "policy": "must_save"}"#,
        r#"{"id": 4, "op": "sin", "inputs": [3]}, {"id": 5, "op": "sum", "inputs": [4], "attrs": {"axes": [0, 1]}}"#,
    );
    assert_bad(
        "conflict.json",
        &conflict,
        &["conflicting constraints", "%2 (matmul in f#0)", "must_recompute", "must_save"],
    );
}

#[test]
fn a_missing_file_exits_2() {
    let o = remat(&["partition", "/nonexistent/remat/graph.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).starts_with("error: /nonexistent/remat/graph.json: "));
}

#[test]
fn bad_flags_are_usage_errors() {
    let file = example("two_regions.graph.json");
    for args in [vec!["partition", &file, "--frobnicate"], vec!["pareto", &file], vec!["explain", &file]] {
        let o = remat(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains("Usage: remat") || err.contains("try '--help'"), "{args:?}: {err}");
    }
}

/// A bad value of a flag is one line, like every other error, naming the flag and the value.
#[test]
fn bad_flag_values_are_one_line() {
    let file = example("two_regions.graph.json");
    for (strategy, expected) in [
        ("fastest", "--strategy: unknown strategy `fastest`"),
        ("budget=lots", "--strategy: `budget=lots`: `lots` is not a number of bytes"),
        ("budget=1.5", "--strategy: `budget=1.5`: a fraction budget must be in [0, 1], got 1.5"),
    ] {
        let o = remat(&["partition", &file, "--strategy", strategy]);
        assert_eq!(o.status.code(), Some(2), "{strategy}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{strategy}: {err}");
        assert!(err.starts_with(&format!("error: {expected}")), "{strategy}: {err}");
    }
}

#[test]
fn pytorchs_exported_graphs_partition_as_they_are() {
    let dir = format!("{}/../tests/fixtures/torch", env!("CARGO_MANIFEST_DIR"));
    let fp8 = format!("{dir}/seed_fp8_scaled_mm-inductor__sac_save_mm.json");
    let quantisation = |id: &str| ["convert_element_type", "amax", "mul"].iter().any(|p| id.starts_with(p));
    for strategy in ["respect", "mincut", "budget=0.0", "budget=131072"] {
        let o = remat(&["partition", &fp8, "--strategy", strategy, "--json"]);
        assert!(o.status.success(), "{strategy}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        for d in v["decisions"].as_array().unwrap().iter().filter(|d| d["action"] == "save") {
            let id = d["id"].as_str().unwrap();
            // Tags bind `respect` and `mincut`; a budget may keep one only by overriding it, saying so.
            let traded = strategy.starts_with("budget") && d["overrode"] == "prefer_recompute";
            assert!(!quantisation(id) || traded, "{strategy}: {id} saved: {d}");
        }
    }
    let o = remat(&["partition", &fp8, "--strategy", "mincut"]);
    let text = stdout(&o);
    assert!(text.contains("primals_1") && text.contains("aten.le.Scalar"), "{text}");
    let o = remat(&["dot", &fp8, "--strategy", "mincut"]);
    assert!(o.status.success() && stdout(&o).contains("_scaled_mm"));
}

#[test]
fn a_byte_order_mark_is_read() {
    let text = std::fs::read_to_string(example("small.joint.json")).unwrap();
    let path = scratch("bom.json", &format!("\u{feff}{text}"));
    let o = remat(&["partition", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn offload_turns_a_budget_into_a_three_way_choice() {
    let file = example("two_regions.graph.json");
    let plain = remat(&["partition", &file, "--strategy", "budget=0.0", "--json"]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    assert!(stdout(&plain).contains("\"strategy\": \"budget=0.0\""), "{}", stdout(&plain));
    let o = remat(&["partition", &file, "--strategy", "budget=0.0", "--offload", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(json["strategy"], "budget+offload=0.0");
    for key in
        ["offloaded", "host_bytes", "bytes_to_host", "bytes_to_device", "exposed_transfer_s", "planned_host_peak"]
    {
        assert!(json.get(key).is_some(), "`{key}` missing from {json}");
    }
    let same = remat(&["partition", &file, "--strategy", "budget+offload=0.0", "--json"]);
    assert_eq!(stdout(&same), stdout(&o), "the flag and the strategy form agree");
    let text = stdout(&remat(&["partition", &file, "--strategy", "budget+offload=0.0"]));
    assert!(text.contains("offload:") && text.contains("exposed transfer"), "{text}");
}

#[test]
fn evaluate_scores_a_given_decision() {
    let dir = format!("{}/../tests/fixtures/torch", env!("CARGO_MANIFEST_DIR"));
    let fp8 = format!("{dir}/seed_fp8_scaled_mm-inductor__budget_0.5.json");
    // PyTorch's own decision at its activation memory budget of 0.5.
    let o = remat(&["evaluate", &fp8, "--save", "mul,mul_1,convert_element_type,le", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["broken"], serde_json::json!([]), "{v}");
    assert!(v["saved_bytes"].as_u64().unwrap() > 0 && v["recompute_flops"].as_u64().unwrap() > 0);
    // Keeping nothing breaks the rules nowhere here but recomputes more; a must-kept value left
    // out is named with the rule it breaks.
    let text = stdout(&remat(&["evaluate", &fp8, "--save", ""]));
    assert!(text.contains("rules: the decision keeps every rule"), "{text}");
    let chain = format!("{dir}/chain-inductor__full.json");
    let text = stdout(&remat(&["evaluate", &chain]));
    assert!(text.contains("rules broken") && text.contains("boundary value, needed, but not kept"), "{text}");
    let o = remat(&["evaluate", &fp8, "--save", "nonexistent"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no node has the id \"nonexistent\""), "{}", stderr(&o));
}

#[path = "../../benches/common/residual_mlp_graph.rs"]
mod residual_mlp_graph;

/// A reader that stops early (`remat partition .. | head`) ends the command quietly — the text
/// and JSON reports, DOT and evaluations alike (each far larger than a pipe's buffer, so the write
/// fails part way).
#[test]
fn a_reader_that_stops_early_is_no_failure() {
    use std::io::Read;
    use std::process::Stdio;
    let doc = scratch("long.graph.json", &residual_mlp_graph::residual_mlp_graph(4000));
    let doc = doc.to_str().unwrap();
    for args in [
        vec!["partition", doc, "--strategy", "mincut"],
        vec!["partition", doc, "--strategy", "mincut", "--json"],
        vec!["dot", doc],
        vec!["evaluate", doc, "--save", "3,7"],
        vec!["evaluate", doc, "--save", "3,7", "--json"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_remat"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run remat");
        let mut head = [0u8; 100];
        child.stdout.take().unwrap().read_exact(&mut head).unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{args:?}: {:?} {}", o.status, stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}");
    }
}

#[path = "../../benches/common/deep_mlp_joint.rs"]
mod deep_mlp_joint;
#[path = "../../benches/common/require.rs"]
mod require;
#[path = "../../benches/common/torch_python.rs"]
mod torch_python;

/// The script `cargo bench --bench end_to_end` runs to time PyTorch's partition step in the same
/// run as remat's (`python/bench/deep_mlp_partition.py`), on a 2-layer model: it exports the
/// joint graph PyTorch partitioned, which has the nodes of the benchmark's own document of that
/// depth, times PyTorch's partition step on it, and `remat partition` reads and partitions it
/// (the script fails where remat does). Skipped without PyTorch, unless `REMAT_REQUIRE` names `torch`.
#[test]
fn the_benchmarks_pytorch_script_times_both_partitioners_on_one_graph() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = match torch_python::torch_python(&root, "torch") {
        Ok(p) => p,
        Err(why) => return require::skip("torch", format!("{why} (set REMAT_TORCH_PYTHON, or run .ci/run's set-up)")),
    };
    let bench_doc = scratch("deep_mlp_2.joint.json", &deep_mlp_joint::deep_mlp_joint(2));
    let o = Command::new(python)
        .arg(root.join("python/bench/deep_mlp_partition.py"))
        .args(["--remat", env!("CARGO_BIN_EXE_remat"), "--layers", "2", "--runs", "1", "--doc"])
        .arg(&bench_doc)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let result: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let ours: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&bench_doc).unwrap()).unwrap();
    assert_eq!(result["layers"], 2, "{text}");
    assert_eq!(result["nodes"].as_u64(), Some(ours["nodes"].as_array().unwrap().len() as u64), "{text}");
    for times in ["torch_partition_s", "remat_end_to_end_s", "remat_end_to_end_doc_s"] {
        let times = result[times].as_array().unwrap_or_else(|| panic!("no {times} in {text}"));
        assert!(times.len() == 1 && times[0].as_f64().is_some_and(|s| s > 0.0), "{text}");
    }
}

#[test]
fn peak_plans_a_joint_document_and_every_strategy_reports_its_peak() {
    let doc = example("small.joint.json");
    // The least-recompute plan's own peak: the loosest limit that binds.
    let loose = remat(&["partition", &doc, "--strategy", "peak=1GiB", "--json"]);
    assert!(loose.status.success(), "{}", stderr(&loose));
    let loose: serde_json::Value = serde_json::from_slice(&loose.stdout).unwrap();
    let limit = loose["planned_peak"].as_u64().expect("a planned peak");
    let o = remat(&["partition", &doc, "--strategy", &format!("peak={limit}"), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["planned_peak"].as_u64().unwrap() <= limit);
    // Every strategy's plan on a joint document has its peak.
    let mincut: serde_json::Value =
        serde_json::from_slice(&remat(&["partition", &doc, "--strategy", "mincut", "--json"]).stdout).unwrap();
    assert!(mincut["planned_peak"].as_u64().is_some_and(|p| p > 0), "{mincut}");
    // A PyTorch export interleaves forward and backward nodes: planned with its forward nodes
    // first, as PyTorch runs it.
    let torch = format!("{}/../tests/fixtures/torch/chain-inductor__full.json", env!("CARGO_MANIFEST_DIR"));
    let free: serde_json::Value =
        serde_json::from_slice(&remat(&["partition", &torch, "--strategy", "budget=1.0", "--json"]).stdout).unwrap();
    let limit = free["planned_peak"].as_u64().expect("a planned peak");
    let o = remat(&["partition", &torch, "--strategy", &format!("peak={limit}"), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["planned_peak"].as_u64().unwrap() <= limit, "{v}");
    let o = remat(&["partition", &torch, "--strategy", "peak=1KiB"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("cannot be met"), "{e}");
}

/// `--search-seconds` reaches `peak=`'s search (the same answer as without it where the search
/// ends within the time, as on the small examples), and a bad one is refused before the file is
/// read: a value that is no number of seconds or out of range, or a strategy that takes no time.
#[test]
fn search_seconds_is_for_peak_searches_and_checked() {
    for file in ["two_regions.graph.json", "small.joint.json"] {
        for strategy in ["peak=2KiB", "peak+offload=2KiB"] {
            let usual = remat(&["partition", &example(file), "--strategy", strategy, "--json"]);
            let quick =
                remat(&["partition", &example(file), "--strategy", strategy, "--search-seconds", "1.5", "--json"]);
            assert_eq!(stdout(&quick), stdout(&usual), "{file} {strategy}: {}", stderr(&quick));
            assert_eq!(quick.status.code(), usual.status.code(), "{file} {strategy}");
        }
    }
    let missing = "/nonexistent/remat.joint.json";
    for (args, expected) in [
        (vec!["--strategy", "peak=2KiB", "--search-seconds", "0"], "0 s is out of range"),
        (vec!["--strategy", "peak=2KiB", "--search-seconds", "ten"], "`ten`: expected seconds"),
        (vec!["--strategy", "peak=2KiB", "--search-seconds", "nan"], "NaN is not a number of seconds"),
        (vec!["--strategy", "budget=0.5", "--search-seconds", "5"], "`budget=0.5` takes none"),
        (vec!["--strategy", "mincut", "--search-seconds", "5s"], "`mincut` takes none"),
        (vec!["--search-seconds", "5"], "`respect` takes none"),
    ] {
        for command in ["partition", "dot"] {
            let mut all = vec![command, missing];
            all.extend(&args);
            let o = remat(&all);
            assert_eq!(o.status.code(), Some(2), "{all:?}");
            let err = stderr(&o);
            assert!(err.contains(expected) && err.contains("--search-seconds"), "{all:?}: {err}");
            assert!(!err.contains("nonexistent"), "{all:?}: the flag is checked before the file: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{all:?}: {err}");
        }
    }
}
