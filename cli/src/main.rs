//! `remat`: partition graph documents (`remat.graph`, `remat.joint`) and explain the result.
//!
//! ```text
//! remat partition FILE [--strategy respect|mincut|budget=B|budget+offload=B|peak=BYTES] [--offload] [--json]
//! remat dot FILE [--strategy ..] [--offload] [--out F]
//! remat pareto FILE --out frontier.svg
//! remat evaluate FILE --save ID,ID,... [--json]
//! ```
//!
//! A bad file or argument exits with code 2 and one line on stderr naming the node or the
//! value at fault.

mod plot;

use clap::{Args, Parser, Subcommand};
use remat::json::{self, Document};
use remat::partition::{partition, PGraph};
use remat::report::{fmt_bytes, Report};
use remat::{Budget, JointGraph, Partition, Plan, Strategy};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Large blocks given back to the system when freed, so that what one stage of a 10⁶-node
/// document freed does not count in the next one's peak (see `remat::LargeBlockAlloc`; not on
/// huge pages, which cost seconds on virtual machines whose host takes free memory back).
#[global_allocator]
static ALLOCATOR: remat::LargeBlockAlloc = remat::LargeBlockAlloc;

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
    /// Sweep budget fractions 0.0..=1.0 and plot saved bytes against recompute FLOPs (SVG).
    Pareto {
        /// A `remat.graph` or `remat.joint` document.
        file: PathBuf,
        /// The SVG file to write.
        #[arg(long)]
        out: PathBuf,
    },
}

/// What a command works on: the joint graph to partition, and whether it can be planned (read
/// from a `remat.graph`: the partition graph of a traced joint graph plans as that graph does, so
/// the joint graph itself is not kept).
struct Loaded {
    pg: PGraph,
    /// For a `remat.graph`, which can be planned: how many of the nodes are forward nodes (they
    /// come first), as the joint graph said.
    forward: Option<usize>,
}

impl Loaded {
    fn partition(&self, strategy: Strategy) -> remat::Result<Partition> {
        match strategy {
            // A peak is searched over plans: a remat.graph has them.
            Strategy::Peak(limit) if self.forward.is_some() => {
                remat::partition::partition_for_peak(&self.pg, &self.pg, limit, &Default::default()).map(|(p, _)| p)
            }
            _ => partition(&self.pg, strategy),
        }
    }

    /// The plan, for `remat.graph` files.
    fn plan(&self, p: &Partition) -> remat::Result<Option<Plan>> {
        let Some(n) = self.forward else { return Ok(None) };
        Plan::with_offload(&self.pg, &p.saved[..n], &p.offloaded[..n], &Default::default()).map(Some)
    }
}

/// How `partition` and `dot` plan: `--strategy` and `--offload`.
#[derive(Args)]
struct Planning {
    /// `respect`, `mincut`, `budget=B` — B in bytes when an integer (`4096`, `64KiB`,
    /// `2MiB`, `1GiB`, `1TiB`), a fraction when it has a decimal point (`0.5`, `1.0`) — or, for
    /// a `remat.graph`, `peak=BYTES`: the plan's predicted peak at most that.
    #[arg(long, default_value = "respect", value_parser = str::parse::<Strategy>)]
    strategy: Strategy,
    /// Let a budget choose offload (host memory) besides save and recompute: `budget=B`
    /// becomes `budget+offload=B`. Tags asking for offload are honoured either way. Not with
    /// `peak=`.
    #[arg(long)]
    offload: bool,
}

impl Planning {
    /// `--offload` turns a budget into `budget+offload`; without it the strategy is as written
    /// (`budget+offload=B` included). A peak with `--offload` is refused rather than planned
    /// without offload as if the flag were not there.
    fn strategy(&self) -> Result<Strategy, Failure> {
        match (self.offload, self.strategy) {
            (true, Strategy::Peak(limit)) => Err(Failure(
                2,
                format!(
                    "--offload with --strategy peak={limit}: the peak search chooses between saving and \
                     recomputing only (it walks the byte-budget plans without offload); for device bytes that \
                     offload may lower, use --strategy budget+offload=B"
                ),
            )),
            (true, s) => Ok(s.with_offload(true)),
            (false, s) => Ok(s),
        }
    }
}

/// The failure for an error about document `file`: exit code 2, the file named.
fn doc_error(file: &Path) -> impl Fn(remat::Error) -> Failure + '_ {
    move |e| Failure(2, format!("{}: {e}", file.display()))
}

/// A failure: exit code and one line.
struct Failure(u8, String);

fn load(path: &Path) -> Result<Loaded, Failure> {
    let bad = |e: &dyn std::fmt::Display| Failure(2, format!("{}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(&e))?;
    let document = json::read(&text).map_err(|e| bad(&e))?;
    drop(text);
    match document {
        Document::Graph(g, ids) => {
            // The joint graph takes the forward graph's nodes over rather than copy them.
            let joint = JointGraph::from_forward(g).map_err(|e| bad(&e))?;
            let pg = PGraph::from_joint_with_ids(&joint, &ids);
            let forward = joint.n_forward();
            // Nor is the joint graph held beside the partition graph, which plans alike: a third
            // of the peak at 10⁶ nodes. It is freed on a thread of its own, beside partitioning
            // (a tenth of a second at 10⁶ nodes).
            std::thread::spawn(move || drop(joint));
            Ok(Loaded { pg, forward: Some(forward) })
        }
        Document::Joint(pg) => Ok(Loaded { pg, forward: None }),
    }
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
            let loaded = load(&file)?;
            let bad = doc_error(&file);
            let p = loaded.partition(planning.strategy()?).map_err(&bad)?;
            // The JSON report up to the peaks the plan gives is written first, then the plan is
            // made. Planning a partition just made fails only on a bug; the report would then end
            // there, with the error.
            let head = json.then(|| to_stdout(|out| Report::new(&loaded.pg, &p).json_draft().write_head(out)));
            let plan = loaded.plan(&p);
            let plan = plan.map_err(bad)?;
            head.transpose()?;
            let windows = plan.as_ref().map_or_else(Vec::new, |plan| plan.transfer_windows(&loaded.pg));
            let mut report = Report::new(&loaded.pg, &p).with_transfer_windows(&windows);
            if let Some(plan) = &plan {
                report = report
                    .with_planned_peak(plan.predicted_peak() as u64)
                    .with_host_peaks(plan.predicted_host_peak() as u64, None);
            }
            // The JSON is written as it is laid out: the report of a 10⁶-node graph is 70 MB.
            to_stdout(|out| if json { report.write_json_tail(out) } else { out.write_all(report.text().as_bytes()) })?;
            // A graph of 10⁶ nodes takes a tenth of a second to free; the process is ending.
            std::mem::forget((windows, plan, p, loaded));
        }
        Command::Dot { file, planning, out } => {
            let loaded = load(&file)?;
            let p = loaded.partition(planning.strategy()?).map_err(doc_error(&file))?;
            let dot = Report::new(&loaded.pg, &p).dot();
            match out {
                Some(out) => write_out(&out, &dot)?,
                None => to_stdout(|out| out.write_all(dot.as_bytes()))?,
            }
        }
        Command::Evaluate { file, save, json } => {
            let loaded = load(&file)?;
            let bad = doc_error(&file);
            let ids = loaded.pg.find_ids(save.iter().map(String::as_str).filter(|s| !s.is_empty())).map_err(&bad)?;
            let e = remat::partition::evaluate(&loaded.pg, &ids).map_err(bad)?;
            let given = distinct(&ids);
            if json {
                let report = Report::new(&loaded.pg, &e.partition).with_heading("evaluate", "given");
                let mut v: serde_json::Value = serde_json::from_str(&report.json()).expect("reports are JSON");
                v["given"] = given.iter().map(|&i| loaded.pg.node(i).id.to_json()).collect();
                v["broken"] = serde_json::json!(e.broken);
                v["unneeded"] = e.unneeded.iter().map(|&i| loaded.pg.node(i).id.to_json()).collect();
                let text = serde_json::to_string_pretty(&v).expect("JSON values serialize");
                to_stdout(|out| writeln!(out, "{text}"))?;
            } else {
                let label = given_label(&loaded.pg, &given);
                let mut text = Report::new(&loaded.pg, &e.partition).with_heading("evaluate", &label).text();
                let unneeded: Vec<String> = e.unneeded.iter().map(|&i| loaded.pg.node(i).id.label()).collect();
                if !unneeded.is_empty() {
                    text += &format!("\nkept for nothing (the backward never reaches them): {}\n", unneeded.join(", "));
                }
                if e.broken.is_empty() {
                    text += "\nrules: the decision keeps every rule\n";
                } else {
                    text += &format!("\nrules broken ({}):\n", e.broken.len());
                    for line in &e.broken {
                        text += &format!("  - {line}\n");
                    }
                }
                to_stdout(|out| out.write_all(text.as_bytes()))?;
            }
        }
        Command::Pareto { file, out } => {
            let loaded = load(&file)?;
            let mut points = Vec::new();
            let sweep = (0..=20).map(|k| Strategy::Budget(Budget::Fraction(k as f64 / 20.0)));
            for strategy in [Strategy::Respect, Strategy::MinCut].into_iter().chain(sweep) {
                let p = loaded.partition(strategy).map_err(doc_error(&file))?;
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

/// `ids` without repeats, in the order first given.
fn distinct(ids: &[remat::NodeId]) -> Vec<remat::NodeId> {
    let mut seen = std::collections::HashSet::new();
    ids.iter().copied().filter(|&i| seen.insert(i)).collect()
}

/// What `evaluate` scored, for its first line: `the given decision: keep %2, %5`.
fn given_label(pg: &PGraph, given: &[remat::NodeId]) -> String {
    if given.is_empty() {
        return "the given decision: keep only what is held anyway".to_string();
    }
    let labels: Vec<String> = given.iter().map(|&i| pg.node(i).id.label()).collect();
    let shown: Vec<&str> = labels.iter().take(8).map(String::as_str).collect();
    let more = match labels.len() - shown.len() {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    format!("the given decision: keep {}{more}", shown.join(", "))
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
            eprintln!("error: {}", remat_core::text::one_line(&message.replace('\n', " ")));
            ExitCode::from(code)
        }
    }
}
