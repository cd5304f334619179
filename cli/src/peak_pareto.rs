//! `remat pareto FILE --peak [--against POINTS]`: peak against recompute. remat's `peak=`
//! answers at a sweep of peaks, and another system's decisions (a `remat.points` file) scored
//! by `remat evaluate` under the same schedule, so that both sides are measured alike.
//!
//! Each `peak=` solve runs as a child `remat partition FILE --strategy peak=L --json`, killed at
//! `--timeout`: the exact search can take minutes on some graphs, and a solve cut short must be
//! a row that says so, not a hung command.

use crate::{plot, Failure};
use remat::report::fmt_bytes;
use remat::{Budget, CostModel, Problem, SearchTime, Strategy};
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One decision of the other system, from the points file, scored by `evaluate`.
pub struct Against {
    label: String,
    budget: Option<f64>,
    peak: u64,
    flops: u64,
    broken: usize,
}

/// remat's answer to one `peak=` limit.
enum Answer {
    Plan {
        peak: u64,
        flops: u64,
        gap: Option<f64>,
    },
    /// No plan within the limit (the command's one line, which says the least peak).
    NoPlan(String),
    TimedOut,
}

struct Solve {
    limit: u64,
    answer: Answer,
    seconds: f64,
}

/// Reads a `remat.points` file: `{"format": "remat.points", "version": 1, "system": "..",
/// "points": [{"label": "budget=0.5", "budget": 0.5, "save": ["addmm", ..]}, ..]}`; other fields
/// are ignored (peak_sweep.py writes its scores beside them). Each point is scored here.
pub fn read_against(problem: &Problem<'_>, path: &Path) -> Result<(String, Vec<Against>), Failure> {
    let bad = |why: String| Failure(2, format!("{}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    match doc.get("format").and_then(Value::as_str) {
        Some("remat.points") => {}
        other => return Err(bad(format!("expected \"format\": \"remat.points\", found {other:?}"))),
    }
    let system = doc.get("system").and_then(Value::as_str).unwrap_or("other").to_string();
    let points = doc.get("points").and_then(Value::as_array).ok_or_else(|| bad("no \"points\" array".into()))?;
    let mut scored = Vec::new();
    for (k, p) in points.iter().enumerate() {
        let label = p.get("label").and_then(Value::as_str).map_or_else(|| format!("point {k}"), str::to_string);
        let at = |why: String| bad(format!("point {k} ({label}): {why}"));
        let save = p.get("save").and_then(Value::as_array).ok_or_else(|| at("no \"save\" array of ids".into()))?;
        let ids: Vec<&str> = save
            .iter()
            .map(|v| v.as_str().ok_or_else(|| at(format!("`save` holds {v}, not an id"))))
            .collect::<Result<_, _>>()?;
        let budget = match p.get("budget") {
            None | Some(Value::Null) => None,
            Some(b) => Some(b.as_f64().ok_or_else(|| at(format!("`budget` is {b}, not a number")))?),
        };
        let e = problem.evaluate(ids).map_err(|e| at(e.to_string()))?;
        let partition = &e.evaluation().partition;
        scored.push(Against {
            label,
            budget,
            peak: e.plan().predicted_peak() as u64,
            flops: partition.recompute_flops,
            broken: e.evaluation().broken.len(),
        });
    }
    Ok((system, scored))
}

/// Where the `peak=` sweep runs: `steps` limits from `from` to `to` (by default the least and
/// largest planned peak of the byte-budget sweep and the other system's points).
pub struct Sweep {
    pub from: Option<u64>,
    pub to: Option<u64>,
    pub steps: usize,
    /// How long one `peak=` solve may take.
    pub timeout: Duration,
    /// How long each solve's exact search may look, where not the default.
    pub search: Option<SearchTime>,
}

/// The limits to ask `peak=` for: the sweep's, and each of the other system's points' own peak.
fn limits(problem: &Problem<'_>, file: &Path, against: &[Against], sweep: &Sweep) -> Result<Vec<u64>, Failure> {
    let mut peaks: Vec<u64> = against.iter().map(|a| a.peak).collect();
    for k in 0..=10 {
        let strategy = Strategy::Budget(Budget::Fraction(k as f64 / 10.0));
        let solved = problem.partition(strategy, &CostModel::default()).map_err(crate::doc_error(file))?;
        peaks.push(solved.plan().predicted_peak() as u64);
    }
    let lo = sweep.from.unwrap_or(*peaks.iter().min().unwrap());
    let hi = sweep.to.unwrap_or(*peaks.iter().max().unwrap());
    if hi < lo {
        return Err(Failure(2, format!("--from {lo} is above --to {hi}")));
    }
    let mut limits: Vec<u64> = against.iter().map(|a| a.peak).collect();
    let (span, last) = ((hi - lo) as f64, (sweep.steps.max(2) - 1) as f64);
    limits.extend((0..sweep.steps).map(|k| lo + (span * k as f64 / last).round() as u64));
    limits.sort_unstable();
    limits.dedup();
    Ok(limits)
}

/// `remat partition FILE --strategy peak=LIMIT --json` (with `--search-seconds`, where the sweep
/// has one) in a child, killed at the sweep's timeout.
fn solve(file: &Path, limit: u64, sweep: &Sweep) -> Result<Solve, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure(1, format!("finding the remat command: {e}")))?;
    let (start, timeout) = (Instant::now(), sweep.timeout);
    let search = sweep.search.map(|t| vec!["--search-seconds".to_string(), t.seconds().to_string()]);
    let mut child = Command::new(exe)
        .args(["partition".as_ref(), file.as_os_str(), "--strategy".as_ref(), format!("peak={limit}").as_ref()])
        .args(search.unwrap_or_default())
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failure(1, format!("starting remat partition: {e}")))?;
    // Read on threads: a report larger than the pipe's buffer would otherwise block the child.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| Failure(1, format!("waiting for remat partition: {e}")))? {
            // A solve seen to have ended only after the deadline ran past it all the same (a busy
            // machine may look first long after the start: the row must not depend on that).
            break (start.elapsed() < timeout).then_some(status);
        }
        if start.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let seconds = start.elapsed().as_secs_f64();
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    let answer = match status {
        None => Answer::TimedOut,
        Some(s) if s.code() == Some(2) => Answer::NoPlan(err.trim().trim_start_matches("error: ").to_string()),
        Some(s) if !s.success() => {
            return Err(Failure(1, format!("remat partition --strategy peak={limit}: {s}: {}", err.trim())))
        }
        Some(_) => {
            let r: Value = serde_json::from_str(&out).map_err(|e| Failure(1, format!("peak={limit}'s report: {e}")))?;
            let num = |k: &str| r.get(k).and_then(Value::as_u64);
            match (num("planned_peak"), num("recompute_flops")) {
                (Some(peak), Some(flops)) => {
                    Answer::Plan { peak, flops, gap: r.get("optimality_gap").and_then(Value::as_f64) }
                }
                _ => return Err(Failure(1, format!("peak={limit}'s report lacks planned_peak or recompute_flops"))),
            }
        }
    };
    Ok(Solve { limit, answer, seconds })
}

/// Runs the sweep, prints both tables and draws the chart to `out`.
pub fn run(
    problem: &Problem<'_>,
    file: &Path,
    against: Option<&Path>,
    sweep: &Sweep,
    out: &Path,
) -> Result<String, Failure> {
    let (system, points) = match against {
        Some(path) => read_against(problem, path)?,
        None => (String::new(), Vec::new()),
    };
    let solves: Vec<Solve> =
        limits(problem, file, &points, sweep)?.into_iter().map(|l| solve(file, l, sweep)).collect::<Result<_, _>>()?;
    let mut text = format!(
        "remat peak= answers\n{:>12} {:>12} {:>12} {:>16} {:>8} {:>8}\n",
        "limit", "planned_peak", "", "recompute_flops", "gap", "seconds"
    );
    for s in &solves {
        let (limit, seconds) = (s.limit, s.seconds);
        text += &match &s.answer {
            Answer::Plan { peak, flops, gap } => format!(
                "{limit:>12} {peak:>12} {:>12} {flops:>16} {:>8} {seconds:>8.2}\n",
                format!("({})", fmt_bytes(*peak)),
                gap_text(*gap)
            ),
            // The child's line names the document; the table already does.
            Answer::NoPlan(why) => {
                let why = why.strip_prefix(&format!("{}: ", file.display())).unwrap_or(why);
                format!("{limit:>12} no plan ({seconds:.2} s): {why}\n")
            }
            Answer::TimedOut => format!("{limit:>12} timed out after {seconds:.1} s\n"),
        };
    }
    if !points.is_empty() {
        text += &against_table(&system, &points, &solves);
    }
    let line: Vec<plot::Point> = solves
        .iter()
        .filter_map(|s| match s.answer {
            Answer::Plan { peak, flops, .. } => Some(plot::Point { bytes: peak, flops }),
            _ => None,
        })
        .collect();
    // Budgets that make one decision land on one spot: one mark, their labels joined, so that
    // the labels do not print over each other.
    let mut marks: Vec<(String, plot::Point)> = Vec::new();
    for p in &points {
        let at = plot::Point { bytes: p.peak, flops: p.flops };
        match marks.iter_mut().find(|(_, q)| *q == at) {
            Some((label, _)) => *label += &format!(", {}", p.label),
            None => marks.push((p.label.clone(), at)),
        }
    }
    let title = if points.is_empty() { "remat peak=".to_string() } else { format!("remat peak= vs {system}") };
    plot::frontier_with(out, &title, "planned peak", &line, &marks)
        .map_err(|e| Failure(1, format!("{}: {e}", out.display())))?;
    Ok(text)
}

fn gap_text(gap: Option<f64>) -> String {
    gap.map_or_else(|| "-".to_string(), |g| format!("{g:.3}"))
}

/// The other system's points: each scored, remat's answer at its peak, and whether a smaller
/// budget of that system peaks above a larger one's (its curve is not monotone there).
fn against_table(system: &str, points: &[Against], solves: &[Solve]) -> String {
    let mut text = format!(
        "\n{system}: scored by remat evaluate (remat's schedule)\n{:<16} {:>8} {:>12} {:>16} {:>6} {:>16} {:>8}\n",
        "label", "budget", "planned_peak", "recompute_flops", "broken", "remat_at_peak", "gap"
    );
    let mut bumps = 0;
    for p in points {
        let lower =
            points.iter().find(|q| matches!((p.budget, q.budget), (Some(a), Some(b)) if a < b && p.peak > q.peak));
        bumps += lower.is_some() as usize;
        let at = solves.iter().find(|s| s.limit == p.peak).map(|s| &s.answer);
        let (remat, gap) = match at {
            Some(Answer::Plan { flops, gap, .. }) => (flops.to_string(), gap_text(*gap)),
            Some(Answer::NoPlan(_)) => ("no plan".to_string(), "-".to_string()),
            _ => ("timed out".to_string(), "-".to_string()),
        };
        let budget = p.budget.map_or_else(|| "-".to_string(), |b| b.to_string());
        let mark = lower.map_or_else(String::new, |q| format!("not monotone: {} peaks lower", q.label));
        text += &format!(
            "{:<16} {budget:>8} {:>12} {:>16} {:>6} {remat:>16} {gap:>8}  {mark}\n",
            p.label, p.peak, p.flops, p.broken
        );
    }
    text += &match bumps {
        0 if points.iter().filter(|p| p.budget.is_some()).count() < 2 => String::new(),
        0 => format!("{system}'s peak never rises as its budget falls\n"),
        n => format!("{system}'s curve is not monotone: {n} budget(s) peak above a larger budget's peak\n"),
    };
    text
}
