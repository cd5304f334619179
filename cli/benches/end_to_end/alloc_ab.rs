//! `-- --alloc NAME=BIN ..`: the same `remat partition` runs on the 10⁶-node documents through
//! builds of the command that differ only in their global allocator (the cli crate's `alloc-*`
//! features; `scripts/alloc-ab.sh` builds them and calls this), interleaved: every round runs
//! each case through every build, in an order that rotates from round to round, so that load
//! from elsewhere on the machine falls on all of them alike. Each run's wall time and peak
//! resident memory (the child's own `ru_maxrss`, from `wait4`); medians over the rounds, the
//! spread beside them, and the ratio to the first build named.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One `remat partition` invocation the builds are compared on.
pub struct Case {
    pub label: String,
    pub path: PathBuf,
    pub strategy: &'static str,
}

/// One run's wall time (s) and peak resident memory (MB).
#[derive(Clone, Copy)]
struct Run {
    seconds: f64,
    peak_mb: f64,
}

/// `BIN partition PATH --strategy STRATEGY --json`, its output counted and dropped; its wall
/// time and its own peak resident memory.
// The child is reaped by `wait4` (`reap`), which std's `wait` cannot stand in for: it drops the
// child's resource usage.
#[allow(clippy::zombie_processes)]
fn run(bin: &Path, path: &Path, strategy: &str) -> Run {
    let mut command = Command::new(bin);
    command
        .args(["partition", path.to_str().unwrap(), "--strategy", strategy, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A child started by `vfork` (how std spawns where it can) inherits this process's peak
    // resident size as its own `ru_maxrss`, which the documents made above raised to 0.7 GB;
    // a forked one starts from this process's current size (tens of MB), which is printed.
    // SAFETY: the hook does nothing; it only makes std fork.
    unsafe { std::os::unix::process::CommandExt::pre_exec(&mut command, || Ok(())) };
    let start = Instant::now();
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    std::io::copy(&mut child.stdout.take().unwrap(), &mut std::io::sink()).unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let (status, usage) = reap(child.id());
    let seconds = start.elapsed().as_secs_f64();
    assert!(status == 0, "{} on {}: exit status {status}: {stderr}", bin.display(), path.display());
    // Linux reports `ru_maxrss` in KiB.
    Run { seconds, peak_mb: usage.ru_maxrss as f64 * 1024.0 / 1e6 }
}

/// Waits for child `pid`: its wait status and its own resource usage.
fn reap(pid: u32) -> (i32, libc::rusage) {
    let mut status = 0;
    // SAFETY: `wait4` fills the zeroed struct and the status it is given; `pid` is our child,
    // not yet waited for (std's `Child` is dropped without waiting).
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let got = libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage);
        assert_eq!(got, pid as libc::pid_t, "wait4: {}", std::io::Error::last_os_error());
        (status, usage)
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Runs every case through every build, `rounds` times, and prints the table.
pub fn compare(builds: &[(String, PathBuf)], cases: &[Case], rounds: usize) {
    let mut runs = vec![vec![Vec::new(); builds.len()]; cases.len()];
    for round in 0..rounds {
        for (c, case) in cases.iter().enumerate() {
            for k in 0..builds.len() {
                let b = (k + round) % builds.len();
                runs[c][b].push(run(&builds[b].1, &case.path, case.strategy));
            }
        }
        eprintln!("alloc A/B: round {} of {rounds} done", round + 1);
    }
    println!("\nthis bench's own resident size (each child's peak starts from it): {}", resident_now());
    println!("allocators, `remat partition --json` end to end, median of {rounds} interleaved rounds (min–max):");
    println!(
        "{:<44} {:<13} {:>8} {:>15} {:>7} {:>9} {:>15} {:>7}",
        "document, strategy", "allocator", "time s", "(min–max)", "ratio", "peak MB", "(min–max)", "ratio"
    );
    for (c, case) in cases.iter().enumerate() {
        let base = summary(&runs[c][0]);
        for (b, (name, _)) in builds.iter().enumerate() {
            let s = summary(&runs[c][b]);
            println!(
                "{:<44} {name:<13} {:>8.2} {:>15} {:>7.2} {:>9.0} {:>15} {:>7.2}",
                format!("{}, {}", case.label, case.strategy),
                s.time.0,
                format!("({:.2}–{:.2})", s.time.1, s.time.2),
                s.time.0 / base.time.0,
                s.peak.0,
                format!("({:.0}–{:.0})", s.peak.1, s.peak.2),
                s.peak.0 / base.peak.0,
            );
        }
    }
}

/// This process's resident size now (`VmRSS`).
fn resident_now() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find(|l| l.starts_with("VmRSS:")).map_or("?".into(), |l| l["VmRSS:".len()..].trim().to_string())
}

/// Median, least and most of a build's time and peak over the rounds.
struct Summary {
    time: (f64, f64, f64),
    peak: (f64, f64, f64),
}

fn summary(runs: &[Run]) -> Summary {
    let spread = |f: fn(&Run) -> f64| {
        let xs: Vec<f64> = runs.iter().map(f).collect();
        let (lo, hi) = xs.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        (median(xs), lo, hi)
    };
    Summary { time: spread(|r| r.seconds), peak: spread(|r| r.peak_mb) }
}

/// The builds named on the command line after `--alloc`: `NAME=BIN` each.
pub fn builds_from_args() -> Option<Vec<(String, PathBuf)>> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--alloc")?;
    let builds: Vec<_> = args[at + 1..]
        .iter()
        .take_while(|a| !a.starts_with("--"))
        .map(|a| {
            let (name, bin) = a.split_once('=').unwrap_or_else(|| panic!("--alloc takes NAME=BIN, not {a}"));
            (name.to_string(), PathBuf::from(bin))
        })
        .collect();
    assert!(!builds.is_empty(), "--alloc takes NAME=BIN ..: the builds to compare");
    Some(builds)
}
