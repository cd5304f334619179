//! Trains a small GPT with activation checkpointing, then compares what each policy saved and
//! what it cost, measured in the same run.
//!
//! ```sh
//! cargo run --release --example gpt                       # CPU, default size, save-matmuls
//! cargo run --release --example gpt -- --policy full --strategy mincut --steps 100
//! cargo run --release --example gpt -- --policy budget=0.5 --plot frontier.svg
//! ```
//!
//! Attention and the MLP are `#[checkpoint]` functions; `--policy` picks which set of them the
//! model calls.

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use remat::prelude::*;
use remat::zoo::{self, BlockParams, GptConfig, Part};
use remat::{Budget, Graph, Strategy};
use std::time::Instant;

// The model's sub-blocks are `zoo::attention` (its context named "attn_ctx") and
// `zoo::feed_forward` (its pre-activation named "ffn_pre"); `zoo::block` joins them with layer
// norms, dropout and residuals.
use zoo::{attention, feed_forward};

// ---- One region wrapper per policy: the attribute is all that differs ----

/// Classic checkpointing: a whole block is one region; only its input is kept.
#[checkpoint]
fn block_full(x: &Tensor, p: &BlockParams, cfg: &GptConfig, layer: usize) -> Tensor {
    zoo::block(x, p, cfg, layer, &plain_parts)
}

fn plain_parts(part: Part, x: &Tensor, p: &BlockParams, heads: usize) -> Tensor {
    match part {
        Part::Attention => attention(x, p, heads),
        Part::FeedForward => feed_forward(x, p),
    }
}

#[checkpoint(policy = save(matmul))]
fn attention_save_matmuls(x: &Tensor, p: &BlockParams, heads: usize) -> Tensor {
    attention(x, p, heads)
}

#[checkpoint(policy = save_names("attn_ctx"))]
fn attention_names(x: &Tensor, p: &BlockParams, heads: usize) -> Tensor {
    attention(x, p, heads)
}

#[checkpoint(policy = save(matmul))]
fn feed_forward_save_matmuls(x: &Tensor, p: &BlockParams) -> Tensor {
    feed_forward(x, p)
}

#[checkpoint(policy = save_names("ffn_pre"))]
fn feed_forward_names(x: &Tensor, p: &BlockParams) -> Tensor {
    feed_forward(x, p)
}

/// Save matmuls, offload everything else the region keeps to host memory. Written with the
/// runtime region API: the `#[checkpoint(policy = offload(..))]` DSL form is not built yet.
static SAVE_MATMULS_OFFLOAD_REST: remat::region::RegionSpec = remat::region::RegionSpec::new(
    "part_offload",
    remat::region::PolicyTable {
        must_save: &[remat::OpKind::Matmul],
        ..remat::region::PolicyTable::uniform(Policy::PreferOffload)
    },
);

fn part_offload(part: Part, x: &Tensor, p: &BlockParams, heads: usize) -> Tensor {
    let _region = remat::region::enter_region(&SAVE_MATMULS_OFFLOAD_REST);
    plain_parts(part, x, p, heads)
}

// ---- Command line ----

/// Which checkpointing policy the model's sub-blocks use.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PolicyChoice {
    /// No regions: every value the backward reads is saved.
    None,
    /// `#[checkpoint]` (recompute_all) on each whole block: only block inputs are kept.
    Full,
    /// `#[checkpoint(policy = save(matmul))]`.
    SaveMatmuls,
    /// `#[checkpoint(policy = save_names(..))]` on the attention context and MLP pre-activation.
    Names,
    /// Full-recompute block regions, partitioned under a byte budget (Prefer tags become soft).
    Budget(Budget),
    /// Matmuls saved, the rest of what the regions keep offloaded to host memory.
    SaveMatmulsOffload,
    /// As `Budget`, the solver choosing save, offload or recompute under a device budget.
    BudgetOffload(Budget),
}

impl std::fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyChoice::None => f.write_str("none"),
            PolicyChoice::Full => f.write_str("full"),
            PolicyChoice::SaveMatmuls => f.write_str("save-matmuls"),
            PolicyChoice::Names => f.write_str("names"),
            PolicyChoice::Budget(Budget::Fraction(x)) => write!(f, "budget={x}"),
            PolicyChoice::Budget(Budget::Bytes(b)) => write!(f, "budget={b}B"),
            PolicyChoice::SaveMatmulsOffload => f.write_str("save-mm+offload"),
            PolicyChoice::BudgetOffload(Budget::Fraction(x)) => write!(f, "budget+offl={x}"),
            PolicyChoice::BudgetOffload(Budget::Bytes(b)) => write!(f, "budget+offl={b}B"),
        }
    }
}

fn parse_policy(text: &str) -> Result<PolicyChoice, String> {
    match text {
        "none" => Ok(PolicyChoice::None),
        "full" => Ok(PolicyChoice::Full),
        "save-matmuls" => Ok(PolicyChoice::SaveMatmuls),
        "names" => Ok(PolicyChoice::Names),
        "save-matmuls+offload" => Ok(PolicyChoice::SaveMatmulsOffload),
        _ => match (text.strip_prefix("budget="), text.strip_prefix("budget+offload=")) {
            (Some(b), _) => b.parse().map(PolicyChoice::Budget),
            (_, Some(b)) => b.parse().map(PolicyChoice::BudgetOffload),
            _ => Err(format!(
                "unknown policy `{text}`; expected none, full, save-matmuls, names, save-matmuls+offload, \
                 budget=FRACTION, budget=BYTES or budget+offload=.."
            )),
        },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Device {
    Cpu,
    Cuda,
}

/// Train a small GPT with activation checkpointing and compare policies.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Checkpointing policy: none, full, save-matmuls, names, budget=FRACTION or budget=BYTES.
    #[arg(long, default_value = "save-matmuls", value_parser = parse_policy)]
    policy: PolicyChoice,
    /// Partition strategy: respect, mincut, or budget=B (bytes, KiB/MiB/GiB, or a fraction).
    #[arg(long, default_value = "respect", value_parser = str::parse::<Strategy>)]
    strategy: Strategy,
    /// Transformer blocks.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    layers: u32,
    /// Model width (a multiple of --heads).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    d_model: u32,
    /// Attention heads.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    heads: u32,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(2..))]
    seq: u32,
    /// Sequences per batch.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,
    /// Training steps.
    #[arg(long, default_value_t = 300)]
    steps: u64,
    /// Seed for parameters and dropout.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    device: Device,
    /// Draw the memory/compute frontier with each policy marked to this SVG file.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// A short run for CI: few steps, small comparison.
    #[arg(long)]
    quick: bool,
}

fn config(args: &Args) -> Result<GptConfig, String> {
    if args.d_model % args.heads != 0 {
        return Err(format!("--d-model {} is not a multiple of --heads {}", args.d_model, args.heads));
    }
    Ok(GptConfig {
        batch: args.batch as usize,
        seq: args.seq as usize,
        d_model: args.d_model as usize,
        heads: args.heads as usize,
        layers: args.layers as usize,
        vocab: 32,
        dropout: 0.1,
        dtype: DType::F32,
    })
}

/// The model traced with `policy`'s regions, and the strategy to partition it with.
fn build(cfg: &GptConfig, policy: PolicyChoice, strategy: Strategy) -> Result<Model, remat::Error> {
    let parts = |part: Part, x: &Tensor, p: &BlockParams, heads: usize| match (policy, part) {
        (PolicyChoice::SaveMatmuls, Part::Attention) => attention_save_matmuls(x, p, heads),
        (PolicyChoice::SaveMatmuls, Part::FeedForward) => feed_forward_save_matmuls(x, p),
        (PolicyChoice::Names, Part::Attention) => attention_names(x, p, heads),
        (PolicyChoice::Names, Part::FeedForward) => feed_forward_names(x, p),
        (PolicyChoice::SaveMatmulsOffload, _) => part_offload(part, x, p, heads),
        _ => plain_parts(part, x, p, heads),
    };
    let graph: Graph = match policy {
        PolicyChoice::Full | PolicyChoice::Budget(_) | PolicyChoice::BudgetOffload(_) => {
            zoo::gpt_blocks(cfg, &|x, p, layer| block_full(x, p, cfg, layer))?
        }
        _ => zoo::gpt_with(cfg, &parts)?,
    };
    let strategy = match policy {
        PolicyChoice::Budget(b) => Strategy::Budget(b),
        PolicyChoice::BudgetOffload(b) => Strategy::BudgetOffload(b),
        _ => strategy,
    };
    Model::with_strategy(graph, strategy)
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = config(args)?;
    let steps = if args.quick { args.steps.min(20) } else { args.steps };
    match args.device {
        Device::Cpu => train_and_compare(args, &cfg, steps, &mut || Ok(CpuBackend::new())),
        Device::Cuda => train_and_compare(args, &cfg, steps, &mut || remat::cuda::CudaBackend::new(0)),
    }
}

/// One row of the comparison table.
struct Row {
    policy: PolicyChoice,
    saved_bytes: u64,
    predicted_peak: usize,
    measured_peak: usize,
    /// Measured peak less inputs and parameters: what checkpointing acts on.
    activation_peak: usize,
    recompute_flops: u64,
    step_seconds: f64,
    /// Host bytes held at once (offloaded values), measured.
    host_peak: usize,
}

fn train_and_compare<B: Backend>(
    args: &Args,
    cfg: &GptConfig,
    steps: u64,
    backend: &mut dyn FnMut() -> Result<B, remat::Error>,
) -> Result<(), Box<dyn std::error::Error>> {
    let model = build(cfg, args.policy, args.strategy)?;
    let partition = model.partition().expect("with_strategy partitions");
    println!(
        "gpt: {} layers, d_model {}, {} heads, seq {}, batch {} — policy {}, strategy {}",
        cfg.layers, cfg.d_model, cfg.heads, cfg.seq, cfg.batch, args.policy, partition.strategy
    );
    println!(
        "plan: {} saved values ({} KiB of activations), {} ops recomputed ({:.1} MFLOP)",
        partition.saved.iter().filter(|&&s| s).count(),
        partition.saved_bytes / 1024,
        partition.recomputed.len(),
        partition.recompute_flops as f64 / 1e6
    );

    let mut device = backend()?;
    let mut params = model.init_params(args.seed);
    let mut opt = AdamW::new(3e-3);
    let bar = ProgressBar::new(steps);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("a valid template"));
    let mut first_loss = None;
    let mut last_loss = f64::NAN;
    for step in 0..steps {
        let feeds = zoo::synthetic_tokens(cfg, step)?;
        let start = Instant::now();
        let out = model.step_seeded(&mut device, &params, &feeds, args.seed.wrapping_add(step))?;
        opt.step(&mut params, &out.grads)?;
        first_loss.get_or_insert(out.loss);
        last_loss = out.loss;
        bar.set_message(format!("loss {:.4}  step {:.1} ms", out.loss, start.elapsed().as_secs_f64() * 1e3));
        bar.inc(1);
    }
    bar.finish();
    println!("loss: {:.4} at the start, {:.4} at the end", first_loss.unwrap_or(f64::NAN), last_loss);

    let choices = [
        PolicyChoice::None,
        PolicyChoice::Full,
        PolicyChoice::SaveMatmuls,
        PolicyChoice::Names,
        PolicyChoice::Budget(Budget::Fraction(0.5)),
        PolicyChoice::Budget(Budget::Fraction(0.2)),
        PolicyChoice::SaveMatmulsOffload,
        PolicyChoice::BudgetOffload(Budget::Fraction(0.2)),
    ];
    let timed_steps = if args.quick { 2 } else { 7 };
    let mut rows = Vec::new();
    for policy in choices {
        let model = build(cfg, policy, args.strategy)?;
        let feeds = zoo::synthetic_tokens(cfg, 0)?;
        let mut device = backend()?;
        let mut times = Vec::new();
        let mut last = None;
        for i in 0..timed_steps {
            let start = Instant::now();
            last = Some(model.step_seeded(&mut device, &params, &feeds, i)?);
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let out = last.expect("at least one timed step");
        let p = model.partition().expect("with_strategy partitions");
        rows.push(Row {
            policy,
            saved_bytes: p.saved_bytes,
            predicted_peak: out.predicted_peak,
            measured_peak: out.measured_peak,
            activation_peak: out.measured_peak - model.plan().resident_bytes(),
            recompute_flops: p.recompute_flops,
            step_seconds: times[times.len() / 2],
            host_peak: out.measured_host_peak,
        });
    }
    print_table(&rows);
    if let Some(path) = &args.plot {
        plot(path, &rows)?;
        println!("frontier written to {}", path.display());
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    let base = &rows[0];
    let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.2}x", a / b) } else { "-".to_string() };
    let kib = |b: f64| format!("{:.1}", b / 1024.0);
    println!(
        "\n{:<16} {:>10} {:>11} {:>11} {:>11} {:>7} {:>9} {:>10} {:>9} {:>7}",
        "policy",
        "saved KiB",
        "pred. peak",
        "meas. peak",
        "act. peak",
        "act.",
        "host peak",
        "recompute",
        "step ms",
        "time"
    );
    for r in rows {
        println!(
            "{:<16} {:>10} {:>11} {:>11} {:>11} {:>7} {:>9} {:>7.2}MFL {:>9.2} {:>7}",
            r.policy.to_string(),
            kib(r.saved_bytes as f64),
            kib(r.predicted_peak as f64),
            kib(r.measured_peak as f64),
            kib(r.activation_peak as f64),
            ratio(r.activation_peak as f64, base.activation_peak as f64),
            kib(r.host_peak as f64),
            r.recompute_flops as f64 / 1e6,
            r.step_seconds * 1e3,
            ratio(r.step_seconds, base.step_seconds),
        );
    }
    println!("(peaks in KiB; act. peak = measured device peak less inputs and parameters; host peak = offloaded");
    println!(" copies held at once; ratios against `none`,");
    println!(" measured in this run; step time is the median of the timed steps)");
}

fn plot(path: &std::path::Path, rows: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
    let at = |r: &Row| remat::plot::Point { bytes: r.saved_bytes, flops: r.recompute_flops };
    let line: Vec<_> = rows.iter().map(at).collect();
    let marks: Vec<_> = rows.iter().map(|r| (r.policy.to_string(), at(r))).collect();
    remat::plot::frontier(path, "gpt: saved activations vs recompute, per policy", &line, &marks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick() {
        let plot = std::env::temp_dir().join(format!("remat-frontier-{}.svg", std::process::id()));
        let args = Args::parse_from(["gpt", "--quick", "--plot", plot.to_str().unwrap()]);
        run(&args).unwrap();
        let svg = std::fs::read_to_string(&plot).unwrap();
        assert!(svg.contains("<svg") && svg.contains("save-matmuls"));
    }

    #[test]
    fn every_policy_tags_every_op_recorded_inside_its_regions() {
        let cfg =
            GptConfig { batch: 2, seq: 4, d_model: 8, heads: 2, layers: 2, vocab: 32, dropout: 0.1, dtype: DType::F32 };
        let policies = [
            PolicyChoice::Full,
            PolicyChoice::SaveMatmuls,
            PolicyChoice::Names,
            PolicyChoice::Budget(Budget::Fraction(0.5)),
        ];
        for policy in policies {
            let model = build(&cfg, policy, Strategy::Respect).unwrap();
            let graph = model.forward_graph();
            assert!(!graph.regions().is_empty(), "{policy}");
            assert_eq!(graph.untagged_inside_regions(), vec![], "{policy}");
        }
    }

    #[test]
    fn strategies_give_bitwise_identical_gradients_and_exact_peaks() {
        let cfg =
            GptConfig { batch: 2, seq: 4, d_model: 8, heads: 2, layers: 2, vocab: 32, dropout: 0.1, dtype: DType::F32 };
        let feeds = zoo::synthetic_tokens(&cfg, 0).unwrap();
        for policy in
            [PolicyChoice::Full, PolicyChoice::SaveMatmuls, PolicyChoice::Names, PolicyChoice::SaveMatmulsOffload]
        {
            let mut reference = None;
            for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.5))] {
                let model = build(&cfg, policy, strategy).unwrap();
                let out = model.step_seeded(&mut CpuBackend::new(), &model.init_params(1), &feeds, 5).unwrap();
                assert_eq!(out.measured_peak, out.predicted_peak, "{policy} {strategy}");
                assert_eq!(out.measured_host_peak, out.predicted_host_peak, "{policy} {strategy}");
                let grads = out.grads;
                match &reference {
                    None => reference = Some(grads),
                    Some(r) => assert_eq!(r, &grads, "{policy}: {strategy} changed the gradients"),
                }
            }
        }
    }

    #[test]
    fn a_missing_gpu_is_an_error_not_a_panic() {
        if remat::cuda::unavailable_reason().is_none() {
            return; // a GPU is present: nothing to show here
        }
        let err = run(&Args::parse_from(["gpt", "--quick", "--device", "cuda"])).unwrap_err().to_string();
        assert!(err.contains("cuda:0"), "{err}");
    }

    #[test]
    fn bad_flags_are_named() {
        let err = |argv: &[&str]| Args::try_parse_from(argv).unwrap_err().to_string();
        assert!(err(&["gpt", "--policy", "sometimes"]).contains("unknown policy `sometimes`"));
        assert!(err(&["gpt", "--strategy", "budget=1.5"]).contains("a fraction budget must be in [0, 1], got 1.5"));
        assert!(err(&["gpt", "--layers", "0"]).contains("--layers"));
        let args = Args::parse_from(["gpt", "--d-model", "30", "--heads", "4"]);
        assert!(run(&args).unwrap_err().to_string().contains("--d-model 30 is not a multiple of --heads 4"));
        assert_eq!("64KiB".parse::<Budget>(), Ok(Budget::Bytes(65536)));
        assert_eq!(parse_policy("budget=0.25"), Ok(PolicyChoice::Budget(Budget::Fraction(0.25))));
    }
}
