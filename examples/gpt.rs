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
use remat::{Budget, Graph, Strategy};
use remat_zoo::{self as zoo, BlockParams, GptConfig, Part};
use std::time::Instant;

#[path = "common/data_parallel.rs"]
mod data_parallel;
#[path = "../cli/src/plot.rs"]
mod plot;
use remat::compare::{compare, Row, Table};

// The model's sub-blocks are `zoo::attention` (its context named "attn_ctx") and
// `zoo::feed_forward` (its pre-activation named "ffn_pre"); `zoo::block` joins them with layer
// norms, dropout and residuals.
use zoo::{attention, feed_forward};

// ---- The regions: each takes its policy as an argument, chosen when the program runs ----

/// A whole block as one region (classic checkpointing when `policy` is `recompute_all`).
#[checkpoint(policy = arg(policy))]
fn block_region(policy: &RegionPolicy, x: &Tensor, p: &BlockParams, cfg: &GptConfig, layer: usize) -> Tensor {
    zoo::block(x, p, cfg, layer, &plain_parts)
}

fn plain_parts(part: Part, x: &Tensor, p: &BlockParams, heads: usize) -> Tensor {
    match part {
        Part::Attention => attention(x, p, heads),
        Part::FeedForward => feed_forward(x, p),
    }
}

/// The attention sub-block as a region.
#[checkpoint(policy = arg(policy))]
fn attention_region(policy: &RegionPolicy, x: &Tensor, p: &BlockParams, heads: usize) -> Tensor {
    attention(x, p, heads)
}

/// The MLP sub-block as a region.
#[checkpoint(policy = arg(policy))]
fn feed_forward_region(policy: &RegionPolicy, x: &Tensor, p: &BlockParams) -> Tensor {
    feed_forward(x, p)
}

// ---- Command line ----

/// Which checkpointing policy the model's regions use.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PolicyChoice {
    /// No regions: every value the backward reads is saved.
    None,
    /// Each whole block one `recompute_all` region: only block inputs are kept.
    Full,
    /// `save(matmul)` on the attention and MLP sub-blocks.
    SaveMatmuls,
    /// `save_names("attn_ctx")` on attention and `save_names("ffn_pre")` on the MLP.
    Names,
    /// Full-recompute block regions, partitioned under a byte budget (Prefer tags become soft).
    Budget(Budget),
    /// Any policy form, given on the command line, on the attention and MLP sub-blocks.
    Parts(RegionPolicy),
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
            PolicyChoice::Parts(p) => write!(f, "{p}"),
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
            // Anything else is a policy form, read with the grammar of `#[checkpoint]`.
            _ if text.contains('(') || text.contains('_') => {
                text.parse::<RegionPolicy>().map(PolicyChoice::Parts).map_err(|e| e.to_string())
            }
            _ => Err(format!(
                "unknown policy `{text}`; expected none, full, save-matmuls, names, save-matmuls+offload, \
                 budget=FRACTION, budget=BYTES, budget+offload=.. or a policy form such as `save(matmul, softmax)`"
            )),
        },
    }
}

/// The policies of the attention and MLP regions, or of the block regions, for `choice`.
enum Regions {
    None,
    Blocks(RegionPolicy),
    Parts(RegionPolicy, RegionPolicy),
}

fn regions(choice: PolicyChoice) -> Regions {
    const SAVE_MATMULS: RegionPolicy = policy!(save(matmul));
    match choice {
        PolicyChoice::None => Regions::None,
        PolicyChoice::Full | PolicyChoice::Budget(_) | PolicyChoice::BudgetOffload(_) => {
            Regions::Blocks(policy!(recompute_all))
        }
        PolicyChoice::SaveMatmulsOffload => {
            const SAVE_MATMULS_OFFLOAD_REST: RegionPolicy =
                policy!(rules(must_save = [matmul], default = prefer_offload));
            Regions::Parts(SAVE_MATMULS_OFFLOAD_REST, SAVE_MATMULS_OFFLOAD_REST)
        }
        PolicyChoice::SaveMatmuls => Regions::Parts(SAVE_MATMULS, SAVE_MATMULS),
        PolicyChoice::Names => Regions::Parts(policy!(save_names("attn_ctx")), policy!(save_names("ffn_pre"))),
        PolicyChoice::Parts(p) => Regions::Parts(p, p),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Device {
    Cpu,
    Cuda,
}

/// What the model computes in.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Precision {
    /// f32 weights, activations and AdamW moments.
    F32,
    /// bf16 weights and activations (computed in f32 inside each kernel), f32 master weights
    /// and moments for the update.
    Bf16,
    /// As bf16, in f16.
    F16,
}

/// Train a small GPT with activation checkpointing and compare policies.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Checkpointing policy: none, full, save-matmuls, names, budget=FRACTION, budget=BYTES, or
    /// any policy form for the attention and MLP regions (`'save(matmul, softmax)'`,
    /// `'save_names("ffn_pre"), budget = 0.5'`).
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
    /// What the model computes in (bf16 and f16 update f32 master weights).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
    /// Draw the memory/compute frontier with each policy marked to this SVG file.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// After training, generate this many tokens with the key/value cache (0: none).
    #[arg(long, default_value_t = 48)]
    generate: usize,
    /// Sampling temperature for --generate (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Draw only among the K most likely tokens (with --temperature).
    #[arg(long)]
    top_k: Option<usize>,
    /// Seed of the draws (the same seed gives the same text).
    #[arg(long, default_value_t = 0)]
    sample_seed: u64,
    /// Print where the time of a step goes, per op kind (CPU), and exit after training.
    #[arg(long)]
    profile: bool,
    /// With --profile: per op kind and shapes (output <- inputs) instead of per op kind.
    #[arg(long, requires = "profile")]
    profile_shapes: bool,
    /// A short run for CI: few steps, small comparison.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    dp: data_parallel::DpArgs,
    /// Steps timed per policy in the comparison (the median is reported).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..))]
    timed_steps: u32,
}

fn config(args: &Args) -> Result<GptConfig, String> {
    if !args.d_model.is_multiple_of(args.heads) {
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
        dtype: match args.precision {
            Precision::F32 => DType::F32,
            Precision::Bf16 => DType::BF16,
            Precision::F16 => DType::F16,
        },
    })
}

/// What a training run leaves: the state on the device, the loss of every step, and the
/// transfers of the last.
struct Trained<B: Backend> {
    state: TrainState<B>,
    losses: Vec<f64>,
    transfers: Option<remat::backend::TransferStats>,
}

/// Trains `model` for `steps` on `device` with AdamW, the parameters, moments and gradients
/// staying in the backend's buffers (a step uploads the batch and downloads the loss); f32
/// master weights where the model computes in a narrower dtype.
fn train<B: Backend>(
    model: &Model,
    cfg: &GptConfig,
    args: &Args,
    steps: u64,
    device: &mut B,
) -> Result<Trained<B>, remat::Error> {
    let options = TrainOptions::from(&AdamW::new(3e-3)).master_weights(DType::F32);
    let mut state = TrainState::new(device, model, &model.init_params(args.seed)?, options)?;
    let bar = ProgressBar::new(steps);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("a valid template"));
    let (mut losses, mut transfers) = (Vec::with_capacity(steps as usize), None);
    for step in 0..steps {
        let feeds = zoo::synthetic_tokens(cfg, step)?;
        let start = Instant::now();
        let out = state.step(device, model, &feeds, args.seed.wrapping_add(step))?;
        losses.push(out.loss);
        transfers = Some(out.transfers);
        bar.set_message(format!("loss {:.4}  step {:.1} ms", out.loss, start.elapsed().as_secs_f64() * 1e3));
        bar.inc(1);
    }
    bar.finish();
    Ok(Trained { state, losses, transfers })
}

/// The model traced with `policy`'s regions, and the strategy to partition it with.
fn build(cfg: &GptConfig, policy: PolicyChoice, strategy: Strategy) -> Result<Model, remat::Error> {
    let graph: Graph = match regions(policy) {
        Regions::None => zoo::gpt(cfg)?,
        Regions::Blocks(p) => zoo::gpt_blocks(cfg, &|x, bp, layer| block_region(&p, x, bp, cfg, layer))?,
        Regions::Parts(a, f) => zoo::gpt_with(cfg, &|part, x, bp, heads| match part {
            Part::Attention => attention_region(&a, x, bp, heads),
            Part::FeedForward => feed_forward_region(&f, x, bp),
        })?,
    };
    let strategy = match policy {
        PolicyChoice::Budget(b) => Strategy::Budget(b),
        PolicyChoice::BudgetOffload(b) => Strategy::BudgetOffload(b),
        _ => strategy,
    };
    Model::with_strategy(graph, strategy)
}

fn main() {
    // Steps free and allocate the same tensor sizes: with glibc's malloc keeping freed memory,
    // a steady step faults in (almost) no fresh pages (docs/performance.md).
    remat::keep_freed_memory();
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = config(args)?;
    let steps = if args.quick { args.steps.min(20) } else { args.steps };
    if args.dp.data_parallel {
        return train_data_parallel(args, &cfg, steps);
    }
    match args.device {
        Device::Cpu => train_and_compare(args, &cfg, steps, &mut || Ok(CpuBackend::new())),
        #[cfg(feature = "cuda")]
        Device::Cuda => train_and_compare(args, &cfg, steps, &mut || remat::cuda::CudaBackend::new(0)),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda => Err("--device cuda: remat was built without its `cuda` feature".into()),
    }
}

fn train_data_parallel(args: &Args, cfg: &GptConfig, steps: u64) -> Result<(), Box<dyn std::error::Error>> {
    let opts = args.dp.options(steps, args.seed, cfg.batch, 3e-3);
    let build_shard = |batch| build(&GptConfig { batch, ..cfg.clone() }, args.policy, args.strategy);
    data_parallel::train("gpt", &build_shard, &|step| zoo::synthetic_tokens(cfg, step), &opts)
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
    let Trained { state, losses, transfers } = train(&model, cfg, args, steps, &mut device)?;
    let loss = |at: Option<&f64>| at.copied().unwrap_or(f64::NAN);
    println!("loss: {:.4} at the start, {:.4} at the end ({})", loss(losses.first()), loss(losses.last()), cfg.dtype);
    if let Some(t) = transfers {
        // By the backend's counters: the batch (tokens and targets) in, the loss out.
        println!("transfers per step: {} B to the device, {} B back", t.to_device_bytes, t.to_host_bytes);
    }
    let params = state.params(&mut device)?;
    if args.profile {
        return profile(&model, &params, cfg, args.profile_shapes);
    }
    if args.generate > 0 {
        generate(&state, &mut device, cfg, args)?;
    }

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
    let timed_steps = if args.quick { 2 } else { u64::from(args.timed_steps) };
    let feeds = zoo::synthetic_tokens(cfg, 0)?;
    let rows = compare(choices, |&p| build(cfg, p, args.strategy), backend, &params, &feeds, timed_steps)?;
    print!("{}", TABLE.render(&rows));
    if let Some(path) = &args.plot {
        plot(path, &rows)?;
        println!("frontier written to {}", path.display());
    }
    Ok(())
}

/// A CPU backend that times every kernel, by op kind (and, with `shapes`, by its output and
/// input shapes).
struct Timed {
    inner: CpuBackend,
    shapes: bool,
    times: std::collections::HashMap<String, (f64, usize)>,
}

impl Timed {
    /// The row a kernel's time is summed under.
    fn key(&self, call: &remat::backend::KernelCall<'_>, inputs: Vec<&[usize]>) -> String {
        if self.shapes {
            format!("{} {:?} <- {inputs:?}", call.op.name(), call.out_shape)
        } else {
            call.op.name().to_string()
        }
    }
}

impl Backend for Timed {
    type Buffer = <CpuBackend as Backend>::Buffer;
    type Host = <CpuBackend as Backend>::Host;
    fn offload(&mut self, buffer: &Self::Buffer) -> Result<Self::Host, remat::Error> {
        self.inner.offload(buffer)
    }
    fn fetch(&mut self, host: Self::Host) -> Result<Self::Buffer, remat::Error> {
        self.inner.fetch(host)
    }
    fn host_memory(&self) -> remat::backend::MemoryStats {
        self.inner.host_memory()
    }
    fn transfers(&self) -> remat::backend::TransferStats {
        self.inner.transfers()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
    fn upload(&mut self, tensor: &remat::HostTensor) -> Result<Self::Buffer, remat::Error> {
        let start = Instant::now();
        let b = self.inner.upload(tensor);
        let e = self.times.entry("(upload)".into()).or_default();
        e.0 += start.elapsed().as_secs_f64();
        e.1 += 1;
        b
    }
    fn download(&mut self, buffer: &Self::Buffer) -> Result<remat::HostTensor, remat::Error> {
        let start = Instant::now();
        let t = self.inner.download(buffer);
        let e = self.times.entry("(download)".into()).or_default();
        e.0 += start.elapsed().as_secs_f64();
        e.1 += 1;
        t
    }
    fn reshape_owned(
        &mut self,
        call: &remat::backend::KernelCall<'_>,
        input: Self::Buffer,
    ) -> Result<Self::Buffer, remat::Error> {
        let start = Instant::now();
        let key = self.key(call, vec![input.tensor().shape()]);
        let out = self.inner.reshape_owned(call, input);
        let e = self.times.entry(key).or_default();
        e.0 += start.elapsed().as_secs_f64();
        e.1 += 1;
        out
    }
    fn move_to_host(&mut self, buffer: Self::Buffer) -> Result<remat::HostTensor, remat::Error> {
        let start = Instant::now();
        let t = self.inner.move_to_host(buffer);
        let e = self.times.entry("(download)".into()).or_default();
        e.0 += start.elapsed().as_secs_f64();
        e.1 += 1;
        t
    }
    fn execute(
        &mut self,
        call: &remat::backend::KernelCall<'_>,
        inputs: &[&Self::Buffer],
    ) -> Result<Self::Buffer, remat::Error> {
        let start = Instant::now();
        let out = self.inner.execute(call, inputs);
        let key = self.key(call, inputs.iter().map(|b| b.tensor().shape()).collect());
        let e = self.times.entry(key).or_default();
        e.0 += start.elapsed().as_secs_f64();
        e.1 += 1;
        out
    }
    fn memory(&self) -> remat::backend::MemoryStats {
        self.inner.memory()
    }
    fn reset_peak(&mut self) {
        self.inner.reset_peak()
    }
}

/// `--profile`: the time of a step per op kind (or per op kind and shapes), summed over a few
/// steps.
fn profile(model: &Model, params: &Params, cfg: &GptConfig, shapes: bool) -> Result<(), Box<dyn std::error::Error>> {
    let mut timed = Timed { inner: CpuBackend::new(), shapes, times: Default::default() };
    let feeds = zoo::synthetic_tokens(cfg, 0)?;
    let steps = 5;
    let start = Instant::now();
    for i in 0..steps {
        model.step_seeded(&mut timed, params, &feeds, i)?;
    }
    let total = start.elapsed().as_secs_f64() / steps as f64;
    let mut rows: Vec<_> = timed.times.into_iter().collect();
    rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    println!("\nwhere a step's {:.2} ms go (mean of {steps} steps):", total * 1e3);
    let mut kernels = 0.0;
    let width = if shapes { 60 } else { 22 };
    for (op, (secs, count)) in &rows {
        let ms = secs / steps as f64 * 1e3;
        kernels += ms;
        println!(
            "  {op:<width$} {ms:>9.3} ms {:>5.1}%  ({} calls)",
            100.0 * ms / (total * 1e3),
            count / steps as usize
        );
    }
    println!("  {:<width$} {:>9.3} ms (executor, planning, allocation)", "(outside kernels)", total * 1e3 - kernels);
    Ok(())
}

/// The synthetic language's 32 tokens as characters.
const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz.,;:!?";

/// Generation with the key/value cache ([`remat::Decoder`], the step traced by
/// `zoo::gpt_step`): the prompt is the first half of a held-out sequence. The learned position
/// table has `seq` rows, so when the caches are full the last half-window of text becomes the
/// prompt of a fresh pass (`generate_sliding`).
fn generate<B: Backend>(
    state: &TrainState<B>,
    device: &mut B,
    cfg: &GptConfig,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    let n = args.generate;
    let one = GptConfig { batch: 1, ..*cfg };
    // The decoder reads the trained parameters where they are: no copy.
    let mut decoder =
        DecoderBuilder::new(1, cfg.seq).build_from_state(device, state, |step| zoo::gpt_step(&one, step))?;
    let sampling = match args.temperature {
        t if t > 0.0 => Sampling::temperature(t, args.sample_seed),
        _ => Sampling::greedy(),
    };
    let sampling = args.top_k.map_or(sampling, |k| sampling.top_k(k));
    let prompt = prompt(cfg)?;
    let prompt_len = prompt.len();
    let start = Instant::now();
    let out = decoder.generate_sliding(std::slice::from_ref(&prompt), n, &sampling, (cfg.seq / 2).max(1))?;
    let (peak, steps) = (out.measured_peak, out.steps);
    let text = [prompt, out.tokens[0].clone()].concat();
    let seconds = start.elapsed().as_secs_f64();
    let show = |toks: &[i64]| toks.iter().map(|&k| ALPHABET[k as usize % 32] as char).collect::<String>();
    let (a, c) = rule_of(&text[..prompt_len], cfg.vocab as i64);
    let v = cfg.vocab as i64;
    let follows = text.windows(2).skip(prompt_len - 1).filter(|w| w[1] == (a * w[0] + c) % v).count();
    println!(
        "generated with the KV cache ({}, {steps} steps, {:.0} tokens/s, peak {:.1} KiB held on the device): {}|{}",
        if sampling.temperature > 0.0 { "sampled" } else { "greedy" },
        n as f64 / seconds,
        peak as f64 / 1024.0,
        show(&text[..prompt_len]),
        show(&text[prompt_len..])
    );
    println!("  {follows}/{n} generated tokens follow the prompt's rule next = ({a}·prev + {c}) mod {v}");
    Ok(())
}

/// The first half of row 0 of a held-out batch.
fn prompt(cfg: &GptConfig) -> Result<Vec<i64>, remat::Error> {
    let feeds = zoo::synthetic_tokens(&GptConfig { batch: 1, ..*cfg }, 1 << 40)?;
    let tokens = match feeds.get("tokens").map(|t| t.data()) {
        Some(remat::HostData::I64(tokens)) => tokens,
        _ => return Err(remat::Error::internal("synthetic_tokens gave no i64 `tokens`")),
    };
    Ok(tokens[..(cfg.seq / 2).max(1)].to_vec())
}

/// Which of the synthetic language's rules (a, c) the prompt follows most often.
fn rule_of(prompt: &[i64], v: i64) -> (i64, i64) {
    let score = |&(a, c): &(i64, i64)| prompt.windows(2).filter(|w| w[1] == (a * w[0] + c) % v).count();
    [(1, 1), (1, 3), (3, 1)].into_iter().max_by_key(score).unwrap_or((1, 1))
}

/// The comparison table, with a column for the offloading policies' host memory.
const TABLE: Table = Table {
    policy_width: 16,
    host_peak: true,
    legend: &[
        "(peaks in KiB; act. peak = measured device peak less inputs and parameters; host peak = offloaded",
        " copies held at once; ratios against `none`,",
        " measured in this run; step time is the median of the timed steps)",
    ],
};

fn plot(path: &std::path::Path, rows: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
    let at = |r: &Row| plot::Point { bytes: r.saved_bytes, flops: r.recompute_flops };
    let line: Vec<_> = rows.iter().map(at).collect();
    let marks: Vec<_> = rows.iter().map(|r| (r.policy.clone(), at(r))).collect();
    plot::frontier(path, "gpt: saved activations vs recompute, per policy", &line, &marks)
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
            parse_policy("rules(must_save = [softmax], default = prefer_save)").unwrap(),
        ];
        for policy in policies {
            let model = build(&cfg, policy, Strategy::Respect).unwrap();
            let graph = model.forward_graph();
            assert!(!graph.regions().is_empty(), "{policy}");
            assert_eq!(graph.untagged_inside_regions(), vec![], "{policy}");
        }
    }

    /// In f32 and in bf16: every policy's strategies give the same gradients, bit for bit.
    #[test]
    fn strategies_give_bitwise_identical_gradients_and_exact_peaks() {
        for dtype in [DType::F32, DType::BF16] {
            let cfg = GptConfig { batch: 2, seq: 4, d_model: 8, heads: 2, layers: 2, vocab: 32, dropout: 0.1, dtype };
            same_gradients_every_strategy(&cfg);
        }
    }

    fn same_gradients_every_strategy(cfg: &GptConfig) {
        let feeds = zoo::synthetic_tokens(cfg, 0).unwrap();
        for policy in
            [PolicyChoice::Full, PolicyChoice::SaveMatmuls, PolicyChoice::Names, PolicyChoice::SaveMatmulsOffload]
        {
            let mut reference = None;
            for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.5))] {
                let model = build(cfg, policy, strategy).unwrap();
                let out = model.step_seeded(&mut CpuBackend::new(), &model.init_params(1).unwrap(), &feeds, 5).unwrap();
                assert_eq!(out.measured_peak, out.predicted_peak, "{} {policy} {strategy}", cfg.dtype);
                assert_eq!(out.measured_host_peak, out.predicted_host_peak, "{policy} {strategy}");
                let grads = out.grads;
                match &reference {
                    None => reference = Some(grads),
                    Some(r) => assert_eq!(r, &grads, "{} {policy}: {strategy} changed the gradients", cfg.dtype),
                }
            }
        }
    }

    /// The default run (300 steps) in bf16 with f32 master weights learns what f32 learns: the
    /// mean loss of the last 50 steps within 2 % of f32's, both far below the start.
    #[test]
    fn bf16_with_f32_masters_tracks_f32() {
        let mean_tail = |precision: &str| {
            let args = Args::parse_from(["gpt", "--precision", precision, "--generate", "0"]);
            let cfg = config(&args).unwrap();
            let model = build(&cfg, args.policy, args.strategy).unwrap();
            let losses = train(&model, &cfg, &args, args.steps, &mut CpuBackend::new()).unwrap().losses;
            assert_eq!(losses.len(), 300);
            (losses[250..].iter().sum::<f64>() / 50.0, losses[0])
        };
        let ((f32_tail, f32_start), (bf16_tail, _)) = (mean_tail("f32"), mean_tail("bf16"));
        assert!(f32_tail < 0.5 * f32_start, "f32 did not learn: {f32_start} -> {f32_tail}");
        let gap = (bf16_tail - f32_tail).abs() / f32_tail;
        println!("mean loss of steps 251-300: f32 {f32_tail:.4}, bf16 {bf16_tail:.4} ({:.2} % apart)", gap * 100.0);
        assert!(gap <= 0.02, "bf16 {bf16_tail} vs f32 {f32_tail}");
    }

    /// A training step on the resident state moves the batch in and the loss out, nothing else,
    /// by the backend's counters; its measured peak (parameters, AdamW's moments and the update
    /// counted) is the predicted one.
    #[test]
    fn a_training_step_moves_the_batch_and_the_loss() {
        let cfg =
            GptConfig { batch: 2, seq: 4, d_model: 8, heads: 2, layers: 2, vocab: 32, dropout: 0.1, dtype: DType::F32 };
        let model = build(&cfg, PolicyChoice::SaveMatmuls, Strategy::Respect).unwrap();
        let mut cpu = CpuBackend::new();
        let options = TrainOptions::from(&AdamW::new(3e-3));
        let mut state = TrainState::new(&mut cpu, &model, &model.init_params(1).unwrap(), options).unwrap();
        for step in 0..3 {
            let feeds = zoo::synthetic_tokens(&cfg, step).unwrap();
            let batch: usize = feeds.names().map(|n| feeds.get(n).unwrap().bytes()).sum();
            let out = state.step(&mut cpu, &model, &feeds, step).unwrap();
            assert_eq!((out.transfers.to_device_bytes, out.transfers.to_host_bytes), (batch as u64, 4));
            assert_eq!(out.measured_peak, out.predicted_peak);
        }
    }

    #[cfg(feature = "cuda")]
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
        // The data-parallel options need --data-parallel.
        assert!(err(&["gpt", "--zero"]).contains("--data-parallel"));
        assert!(err(&["gpt", "--data-parallel", "--bucket-kib", "0"]).contains("--bucket-kib"));
        let args = Args::parse_from(["gpt", "--d-model", "30", "--heads", "4"]);
        assert!(run(&args).unwrap_err().to_string().contains("--d-model 30 is not a multiple of --heads 4"));
        assert_eq!("64KiB".parse::<Budget>(), Ok(Budget::Bytes(65536)));
        assert_eq!(parse_policy("budget=0.25"), Ok(PolicyChoice::Budget(Budget::Fraction(0.25))));
        // Any policy form, with the messages `#[checkpoint]` gives at compile time.
        assert_eq!(parse_policy("save(matmul, softmax)").unwrap().to_string(), "save(matmul, softmax)");
        assert!(
            err(&["gpt", "--policy", "save(matmull)"]).contains("unknown op kind `matmull`; did you mean `matmul`?")
        );
    }

    #[test]
    fn a_policy_form_from_the_command_line_equals_the_named_choice() {
        let cfg =
            GptConfig { batch: 2, seq: 4, d_model: 8, heads: 2, layers: 1, vocab: 32, dropout: 0.1, dtype: DType::F32 };
        let named = build(&cfg, PolicyChoice::SaveMatmuls, Strategy::Respect).unwrap();
        let form = build(&cfg, parse_policy("save(matmul)").unwrap(), Strategy::Respect).unwrap();
        assert_eq!(named.partition().unwrap().saved, form.partition().unwrap().saved);
        assert_eq!(named.plan().predicted_peak(), form.plan().predicted_peak());
    }
}
