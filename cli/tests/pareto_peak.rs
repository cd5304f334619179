//! `remat pareto --peak --against`: its rows agree with `remat evaluate` and `remat partition
//! --strategy peak=` run on their own, the non-monotone mark follows the evaluated peaks, and a
//! bad points file is one line with exit code 2.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn remat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_remat")).args(args).output().expect("run remat")
}

/// Three `tanh(x @ w)` layers (64 × 64, f32), forward and backward, ids as PyTorch names them.
fn doc() -> String {
    format!("{}/tests/fixtures/mlp3_peak.joint.json", env!("CARGO_MANIFEST_DIR"))
}

fn scratch(name: &str, contents: &str) -> String {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pareto-peak-{name}"));
    std::fs::write(&path, contents).unwrap();
    path.to_str().unwrap().to_string()
}

fn json(args: &[&str]) -> Value {
    let o = remat(args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The whitespace-separated fields of the line that starts with `first` (a remat row's are limit,
/// peak, its size in two fields `(688.0 KiB)`, recompute, gap, seconds).
fn row(table: &str, first: &str) -> Vec<String> {
    let line = table.lines().find(|l| l.split_whitespace().next() == Some(first));
    line.unwrap_or_else(|| panic!("no row `{first}` in\n{table}")).split_whitespace().map(str::to_string).collect()
}

/// Saving every forward value at budget 0.2, only the middle layer's output at 0.5 and nothing at
/// 0.8: a smaller budget is marked where `evaluate` says its set's plan peaks higher.
const POINTS: &str = r#"{"format": "remat.points", "version": 1, "system": "other",
 "points": [
  {"label": "all", "budget": 0.2, "save": ["mm1", "tanh1", "mm2", "tanh2", "mm3", "tanh3"]},
  {"label": "none", "budget": 0.8, "save": []},
  {"label": "middle", "budget": 0.5, "save": ["tanh2"], "ignored": {"extra": 1}}
 ]}"#;

#[test]
fn peak_frontier_agrees_with_evaluate_and_partition() {
    let svg = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pareto-peak.svg");
    let _ = std::fs::remove_file(&svg);
    let points = scratch("points.json", POINTS);
    let o = remat(&["pareto", &doc(), "--peak", "--against", &points, "--steps", "4", "--out", svg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut peaks = std::collections::HashMap::new();
    for (label, save) in [("all", "mm1,tanh1,mm2,tanh2,mm3,tanh3"), ("none", ""), ("middle", "tanh2")] {
        let scored = json(&["evaluate", &doc(), &format!("--save={save}"), "--json"]);
        let (peak, flops) = (scored["planned_peak"].as_u64().unwrap(), scored["recompute_flops"].as_u64().unwrap());
        let r = row(&table, label);
        assert_eq!((r[2].parse::<u64>().unwrap(), r[3].parse::<u64>().unwrap()), (peak, flops), "{label}: {table}");
        // remat's answer at that peak is the one `partition --strategy peak=` gives alone.
        let answer = json(&["partition", &doc(), "--strategy", &format!("peak={peak}"), "--json"]);
        assert_eq!(r[5], answer["recompute_flops"].to_string(), "{label}: {table}");
        assert!(answer["planned_peak"].as_u64().unwrap() <= peak);
        let limit_row = row(&table, &peak.to_string());
        assert_eq!(limit_row[4], answer["recompute_flops"].to_string(), "{table}");
        // The given set is a plan within its own peak: an exact answer never recomputes more.
        if answer["optimality_gap"].as_f64().unwrap_or(0.0) == 0.0 {
            assert!(answer["recompute_flops"].as_u64().unwrap() <= flops, "{label}: {table}");
        }
        peaks.insert(label, peak);
    }
    let bumps = |label: &str| table.lines().any(|l| l.starts_with(label) && l.contains("not monotone"));
    // `all` (0.2) is below both other budgets; `middle` (0.5) below `none` (0.8).
    assert_eq!(bumps("all"), peaks["all"] > peaks["none"] || peaks["all"] > peaks["middle"], "{table}");
    assert_eq!(bumps("middle"), peaks["middle"] > peaks["none"], "{table}");
    assert!(!bumps("none"), "the largest budget has no larger one: {table}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains("<svg") && drawn.contains("planned peak") && drawn.lines().any(|l| l == "middle"),
        "{drawn}"
    );
}

/// From below the least peak a plan reaches (the fixture's lower bound is 592 KiB) to save-all's.
#[test]
fn without_against_the_sweep_alone_is_drawn() {
    let svg = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pareto-peak-alone.svg");
    // Each child searches for as long as `--search-seconds` says (the answers end within it here).
    let (svg_path, time) = (svg.to_str().unwrap(), ["--search-seconds", "5"]);
    let o =
        remat(&["pareto", &doc(), "--peak", "--from", "500KiB", "--steps", "6", time[0], time[1], "--out", svg_path]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    // Every answered limit is met.
    let rows: Vec<Vec<String>> = table
        .lines()
        .skip(2)
        .take_while(|l| !l.starts_with("wrote"))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), 6, "{table}");
    assert_eq!(rows[0][0], "512000", "{table}");
    let mut last_flops = u64::MAX;
    for r in &rows {
        // Each row is what `partition --strategy peak=` answers alone.
        let alone = remat(&["partition", &doc(), "--strategy", &format!("peak={}", r[0]), "--json"]);
        if r[1] == "no" {
            assert_eq!(alone.status.code(), Some(2), "{table}");
            continue;
        }
        let alone: Value = serde_json::from_slice(&alone.stdout).unwrap();
        assert_eq!(
            (r[1].as_str(), r[4].as_str()),
            (&*alone["planned_peak"].to_string(), &*alone["recompute_flops"].to_string()),
            "{table}"
        );
        assert!(r[1].parse::<u64>().unwrap() <= r[0].parse::<u64>().unwrap(), "{table}");
        // A larger limit never costs more recompute (the exact search, gap 0 here).
        let flops = r[4].parse::<u64>().unwrap();
        assert!(flops <= last_flops, "{table}");
        last_flops = flops;
    }
    assert!(rows.iter().any(|r| r[1] == "no") && rows.iter().any(|r| r[1] != "no"), "{table}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("planned peak"));
}

/// A bad points file or flag: exit code 2 and one line naming the fault.
#[test]
fn bad_points_are_one_line_errors() {
    let missing = format!("{}/no-such-points.json", env!("CARGO_TARGET_TMPDIR"));
    let cases = [
        (missing.clone(), "no-such-points.json"),
        (scratch("bad.json", "{\"format\": \"remat.points\", \"points\": [}"), "not JSON"),
        (scratch("format.json", "{\"format\": \"remat.joint\", \"points\": []}"), "remat.points"),
        (scratch("nosave.json", "{\"format\": \"remat.points\", \"points\": [{\"label\": \"p\"}]}"), "no \"save\""),
        (
            scratch(
                "unknown.json",
                "{\"format\": \"remat.points\", \"points\": [{\"label\": \"b1\", \"save\": [\"mm9\"]}]}",
            ),
            "mm9",
        ),
        (
            scratch("budget.json", "{\"format\": \"remat.points\", \"points\": [{\"budget\": \"x\", \"save\": []}]}"),
            "budget",
        ),
    ];
    let out = format!("{}/pareto-peak-bad.svg", env!("CARGO_TARGET_TMPDIR"));
    for (file, needle) in &cases {
        let o = remat(&["pareto", &doc(), "--peak", "--against", file, "--out", &out]);
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(2), "{file}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(needle) && e.contains(file.as_str()), "{needle}: {e}");
    }
    let unknown = &cases[4].0;
    let o = remat(&["pareto", &doc(), "--peak", "--against", unknown, "--out", &out]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("b1"), "the point is named");
    // --against without --peak is a usage error.
    let o = remat(&["pareto", &doc(), "--against", unknown, "--out", &out]);
    assert_eq!(o.status.code(), Some(2));
    let o = remat(&["pareto", &doc(), "--peak", "--timeout", "0", "--out", &out]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--timeout"));
    let o = remat(&["pareto", &doc(), "--peak", "--search-seconds", "0.1", "--out", &out]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--search-seconds"));
}

/// A solve past `--timeout` is a row that says so; the command still draws what it has.
#[test]
fn a_solve_past_the_timeout_is_a_row() {
    let svg = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pareto-peak-timeout.svg");
    // No child process starts, reads the document and plans within a microsecond.
    let o = remat(&[
        "pareto",
        &doc(),
        "--peak",
        "--from",
        "500KiB",
        "--steps",
        "2",
        "--timeout",
        "0.000001",
        "--out",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(table.lines().filter(|l| l.contains("timed out after")).count(), 2, "{table}");
    assert!(svg.exists());
}
