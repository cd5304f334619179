//! `remat`: partition graph documents (`remat.graph`, `remat.joint`) and explain the result.
//!
//! ```text
//! remat partition FILE [--strategy respect|mincut|budget=B|budget+offload=B|peak=BYTES] [--offload]
//!                      [--search-seconds S] [--json]
//! remat dot FILE [--strategy ..] [--offload] [--search-seconds S] [--out F]
//! remat pareto FILE --out frontier.svg
//! remat pareto FILE --peak [--against POINTS.json] [--steps N] [--timeout S] [--search-seconds S] --out frontier.svg
//! remat evaluate FILE --save ID,ID,... [--json]
//! ```
//!
//! A bad file or argument exits with code 2 and one line on stderr naming the node or the
//! value at fault.

mod alloc;
mod peak_pareto;
mod plot;

use clap::{Args, Parser, Subcommand};
use remat::report::{fmt_bytes, one_line};
use remat::{Budget, CostModel, Problem, SearchTime, Strategy};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Partition remat graph documents and explain what is saved for the backward pass and why.
#[derive(Parser)]
#[command(name = "remat", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Partition a graph and print each saved value and recomputed op with the reason.
    Partition {
        /// A `remat.graph` (differentiated first) or `remat.joint` document.
        file: PathBuf,
        #[command(flatten)]
        planning: Planning,
        /// Print the partition as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write the partitioned graph as Graphviz DOT (saved values filled, regions as clusters).
    Dot {
        /// A `remat.graph` or `remat.joint` document.
        file: PathBuf,
        #[command(flatten)]
        planning: Planning,
        /// Write to this file instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Score a given decision: keep the listed values (and what is held anyway), recompute the
    /// rest; print its saved bytes, recompute FLOPs and every rule it breaks.
    Evaluate {
        /// A `remat.graph` or `remat.joint` document.
        file: PathBuf,
        /// The values to keep, by document id, comma-separated (`addmm,view_4,12`); a view
        /// stands for its base. Empty keeps only what is held anyway.
        #[arg(long, value_delimiter = ',', num_args = 0..)]
        save: Vec<String>,
        /// Print the evaluation as JSON (the partition report, with `broken` and `unneeded`).
        #[arg(long)]
        json: bool,
    },
    /// Sweep budget fractions 0.0..=1.0 and plot saved bytes against recompute FLOPs (SVG); with
    /// `--peak`, planned peak against recompute FLOPs (docs/peak.md).
    Pareto {
        /// A `remat.graph` or `remat.joint` document.
        file: PathBuf,
        /// The SVG file to write.
        #[arg(long)]
        out: PathBuf,
        /// Plot planned peak against recompute: remat's `peak=` answer at `--steps` peaks from
        /// `--from` to `--to`, and at each `--against` point's peak. Each answer is a child
        /// `remat partition FILE --strategy peak=L --json`, stopped after `--timeout`.
        #[arg(long)]
        peak: bool,
        /// Another system's decisions to draw and tabulate beside remat's (with `--peak`): a
        /// `remat.points` file, `{"format": "remat.points", "version": 1, "system": "PyTorch",
        /// "points": [{"label": "budget=0.5", "budget": 0.5, "save": ["addmm", ..]}, ..]}`. Each
        /// saved set is scored by `remat evaluate` (remat's schedule of that decision); a point
        /// whose smaller budget peaks above a larger budget's is marked not monotone.
        #[arg(long, requires = "peak")]
        against: Option<PathBuf>,
        /// The `--peak` sweep's lowest peak (bytes, or `600KiB`, `2MiB`): by default the least
        /// peak of the budget sweep's plans and `--against`'s points (a plan the budgets never
        /// find may peak lower; `remat partition FILE --strategy peak=0` prints a lower bound).
        #[arg(long, requires = "peak", value_parser = parse_bytes)]
        from: Option<u64>,
        /// The `--peak` sweep's highest peak; by default the largest of those plans' peaks.
        #[arg(long, requires = "peak", value_parser = parse_bytes)]
        to: Option<u64>,
        /// How many evenly spaced peaks the `--peak` sweep asks for.
        #[arg(long, default_value_t = 8, requires = "peak", value_parser = clap::value_parser!(u16).range(2..))]
        steps: u16,
        /// Seconds each `peak=` solve may take; one past it is a row `timed out`.
        #[arg(long, default_value_t = 300.0, requires = "peak")]
        timeout: f64,
        /// Seconds each `peak=` solve's exact search may look (as `remat partition
        /// --search-seconds`; default 20).
        #[arg(long, value_name = "SECONDS", requires = "peak", value_parser = str::parse::<SearchTime>)]
        search_seconds: Option<SearchTime>,
    },
}

/// How `partition` and `dot` plan: `--strategy` and `--offload`.
#[derive(Args)]
struct Planning {
    /// `respect`, `mincut`, `budget=B` — B in bytes when an integer (`4096`, `64KiB`,
    /// `2MiB`, `1GiB`, `1TiB`), a fraction when it has a decimal point (`0.5`, `1.0`) —,
    /// `budget+offload=B`, `peak=BYTES`: the plan's predicted peak at most that (a
    /// `remat.joint` is planned in its node order, forward nodes first) — or
    /// `peak+offload=BYTES`: the device's predicted peak at most that, the host taking what is
    /// offloaded.
    #[arg(long, default_value = "respect", value_parser = str::parse::<Strategy>)]
    strategy: Strategy,
    /// Let a budget or a peak choose offload (host memory) besides save and recompute:
    /// `budget=B` becomes `budget+offload=B`, `peak=B` `peak+offload=B`. Tags asking for
    /// offload are honoured either way.
    #[arg(long)]
    offload: bool,
    /// Seconds `peak=`'s exact search may take (`20`, `2.5`, `90s`; default 20, from 1 to a
    /// week) before it answers with its best plan and the gap it proved: more narrows the gap
    /// near the least peak. Refused beside another strategy, which takes no time limit.
    #[arg(long, value_name = "SECONDS", value_parser = str::parse::<SearchTime>)]
    search_seconds: Option<SearchTime>,
}

impl Planning {
    /// `--offload` turns a budget into `budget+offload` and a peak into `peak+offload`; without
    /// it the strategy is as written (`budget+offload=B` included).
    fn strategy(&self) -> Strategy {
        if self.offload {
            self.strategy.with_offload(true)
        } else {
            self.strategy
        }
    }

    /// The document `file` as a problem, searching for `--search-seconds` where given; that
    /// flag beside a strategy that does not search by time is refused before the file is read.
    fn load(&self, file: &Path) -> Result<Problem<'static>, Failure> {
        let Some(time) = self.search_seconds else { return load(file) };
        let time = time.for_strategy(self.strategy()).map_err(|e| Failure(2, format!("--search-seconds {e}")))?;
        Ok(load(file)?.with_search_time(time))
    }
}

/// The failure for an error about document `file`: exit code 2, the file named.
fn doc_error(file: &Path) -> impl Fn(remat::Error) -> Failure + '_ {
    move |e| Failure(2, format!("{}: {e}", file.display()))
}

/// A failure: exit code and one line.
struct Failure(u8, String);

/// The problem of the document at `path`: a `remat.graph` differentiated, or a `remat.joint`.
fn load(path: &Path) -> Result<Problem<'static>, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| Failure(2, format!("{}: {e}", path.display())))?;
    let document = remat::json::read(&text).map_err(doc_error(path))?;
    // The text (the largest documents' biggest buffer) is not held while the graph is differentiated and partitioned.
    drop(text);
    Problem::from_document(document).map_err(doc_error(path))
}

/// Writes a report to standard output. A reader that stops early (`| head`) is no failure:
/// the rest is not wanted, and the command ends quietly.
fn to_stdout(write: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match write(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.map_err(|e| Failure(1, format!("writing the report to standard output: {e}"))),
    }
}

fn write_out(out: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(out, text).map_err(|e| Failure(1, format!("{}: {e}", out.display())))
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Partition { file, planning, json } => {
            let problem = planning.load(&file)?;
            let (strategy, cost) = (planning.strategy(), CostModel::default());
            let solved = if json {
                // Written as it is laid out (a large graph's report is tens of MB), beside planning.
                let (solved, written) =
                    problem.partition_json(strategy, &cost, &mut std::io::stdout()).map_err(doc_error(&file))?;
                to_stdout(|out| written.and_then(|()| out.flush()))?;
                solved
            } else {
                let solved = problem.partition(strategy, &cost).map_err(doc_error(&file))?;
                to_stdout(|out| out.write_all(solved.report().text().as_bytes()))?;
                solved
            };
            // A large graph takes a tenth of a second to free; the process is ending.
            std::mem::forget(solved);
            std::mem::forget(problem);
        }
        Command::Dot { file, planning, out } => {
            let problem = planning.load(&file)?;
            let p = problem.partition_only(planning.strategy(), &CostModel::default()).map_err(doc_error(&file))?;
            let dot = remat::report::Report::new(problem.graph(), &p).dot();
            match out {
                Some(out) => write_out(&out, &dot)?,
                None => to_stdout(|out| out.write_all(dot.as_bytes()))?,
            }
        }
        Command::Evaluate { file, save, json } => {
            let problem = load(&file)?;
            let scored = problem.evaluate(save.iter().map(String::as_str)).map_err(doc_error(&file))?;
            let text = if json { scored.json() } else { scored.text() };
            to_stdout(|out| out.write_all(text.as_bytes()))?;
        }
        Command::Pareto { file, out, peak: true, against, from, to, steps, timeout, search_seconds } => {
            let problem = load(&file)?;
            if !(timeout > 0.0 && timeout.is_finite()) {
                return Err(Failure(2, format!("--timeout {timeout}: expected a positive number of seconds")));
            }
            let timeout = std::time::Duration::from_secs_f64(timeout);
            let sweep = peak_pareto::Sweep { from, to, steps: steps.into(), timeout, search: search_seconds };
            let table = peak_pareto::run(&problem, &file, against.as_deref(), &sweep, &out)?;
            to_stdout(|stdout| writeln!(stdout, "{table}wrote {}", out.display()))?;
        }
        Command::Pareto { file, out, .. } => {
            let problem = load(&file)?;
            let mut points = Vec::new();
            let sweep = (0..=20).map(|k| Strategy::Budget(Budget::Fraction(k as f64 / 20.0)));
            for strategy in [Strategy::Respect, Strategy::MinCut].into_iter().chain(sweep) {
                let p = problem.partition_only(strategy, &CostModel::default()).map_err(doc_error(&file))?;
                points.push(Point {
                    strategy,
                    bytes: p.saved_bytes,
                    flops: p.recompute_flops,
                    recomputed: p.recomputed.len(),
                });
            }
            let table = pareto_table(&points);
            to_stdout(|out| out.write_all(table.as_bytes()))?;
            let at = |p: &Point| plot::Point { bytes: p.bytes, flops: p.flops };
            let sweep: Vec<plot::Point> =
                points.iter().filter(|p| matches!(p.strategy, Strategy::Budget(_))).map(at).collect();
            let marks: Vec<(String, plot::Point)> = points
                .iter()
                .filter(|p| !matches!(p.strategy, Strategy::Budget(_)))
                .map(|p| (p.strategy.to_string(), at(p)))
                .collect();
            plot::frontier(&out, "saved bytes vs recompute FLOPs (budget sweep 0.0..=1.0)", &sweep, &marks)
                .map_err(|e| Failure(1, format!("{}: {e}", out.display())))?;
            to_stdout(|stdout| writeln!(stdout, "wrote {}", out.display()))?;
        }
    }
    Ok(())
}

/// One partition of a sweep.
struct Point {
    strategy: Strategy,
    bytes: u64,
    flops: u64,
    recomputed: usize,
}

/// The points, with whether each is on the frontier (no other point is at least as good in both
/// and better in one).
fn pareto_table(points: &[Point]) -> String {
    let mut out = format!(
        "{:<14} {:>12} {:>12} {:>16} {:>10}  frontier\n",
        "strategy", "saved_bytes", "", "recompute_flops", "recomputed"
    );
    for p in points {
        let dominated =
            points.iter().any(|q| q.bytes <= p.bytes && q.flops <= p.flops && (q.bytes < p.bytes || q.flops < p.flops));
        out += &format!(
            "{:<14} {:>12} {:>12} {:>16} {:>10}  {}\n",
            p.strategy.to_string(),
            p.bytes,
            format!("({})", fmt_bytes(p.bytes)),
            p.flops,
            p.recomputed,
            if dominated { "" } else { "yes" }
        );
    }
    out
}

/// A byte count as `peak=` reads one (`4096`, `64KiB`, `2MiB`).
fn parse_bytes(text: &str) -> Result<u64, String> {
    match format!("peak={text}").parse::<Strategy>() {
        Ok(Strategy::Peak(bytes)) => Ok(bytes),
        Ok(_) => Err(format!("{text}: expected bytes (4096, 64KiB, 2MiB)")),
        Err(e) => Err(e.to_string()),
    }
}

/// A bad argument value as one line, like every other error (clap's own report of one is three:
/// the error, a blank line and where to look); help, version and usage errors as clap writes them.
fn argument_error(e: clap::Error) -> Failure {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(e.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue) {
        e.exit();
    }
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.split(' ').next().unwrap_or(arg).to_string(),
        _ => "an argument".to_string(),
    };
    let why = match std::error::Error::source(&e) {
        Some(source) => source.to_string(),
        None => e.to_string().lines().next().unwrap_or("").trim_start_matches("error: ").to_string(),
    };
    Failure(2, format!("{arg}: {why}"))
}

fn main() -> ExitCode {
    match Cli::try_parse().map_err(argument_error).and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, message)) => {
            // One line whatever the document held: newlines joined, control characters and line
            // separators escaped, an echo no message shortened cut to a reasonable length.
            eprintln!("error: {}", one_line(&message.replace('\n', " ")));
            ExitCode::from(code)
        }
    }
}
