//! A mixture-of-experts byte-level language model trained with activation checkpointing: each
//! block's MLP is 8 experts, each token routed to its top 2 by **index dispatch** — expert ids
//! from `topk`, positions within each expert from a stable `argsort`, `bincount` and
//! `cumsum`, tokens copied into the experts' buffers by `index_add` and back by
//! `index_select` — with a capacity factor (assignments past an expert's capacity are dropped,
//! GShard's priority: every first choice before any second) and the Switch Transformer's
//! load-balancing loss. No one-hot products: `--routing one-hot` builds the same routing as
//! one-hot dispatch and combine tensors (GShard's einsums), for comparison.
//!
//! Routing is never recomputed (docs/policies.md, "Routing"): under every policy the top-k
//! expert ids are kept for the backward, so a recompute cannot send a token elsewhere than its
//! saved activations say; positions, slots and the capacity cut are integer functions of them,
//! exact to recompute. Generation decodes drop-free (one token per
//! step never fills an expert), and the full-window forward it is checked against runs
//! drop-free too (`--eval-capacity none`, the default).
//!
//! ```sh
//! cargo run --release --example moe -- --text /usr/share/common-licenses/GPL-3
//! cargo run --release --example moe                        # built-in synthetic corpus
//! cargo run --release --example moe -- --policy save-matmuls --routing one-hot
//! ```

use clap::{Parser, ValueEnum};
use remat::compare::{compare, Row, Table};
use remat::prelude::*;
use remat::{AttnLayout, Budget, Graph, Strategy};
use std::time::Instant;

#[path = "common/corpus.rs"]
mod corpus;
use corpus::Corpus;

/// The stream of remat's generator this example's batches draw their offsets from.
const BATCH_STREAM: u64 = 5;

const VOCAB: usize = 256;
const EPS: f64 = 1e-5;
/// Experts per token.
const TOP: usize = 2;
/// Weight of the load-balancing loss (the Switch Transformer's α).
const BALANCE: f64 = 0.01;

/// Sizes of the model and its batches.
#[derive(Clone, Copy, Debug)]
struct Config {
    batch: usize,
    seq: usize,
    d_model: usize,
    heads: usize,
    layers: usize,
    experts: usize,
    /// Hidden width of each expert.
    hidden: usize,
}

/// How many assignments each expert takes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Capacity {
    /// `ceil(factor · tokens · TOP / experts)`: the rest are dropped.
    Factor(f64),
    /// As many as there are tokens: nothing is ever dropped.
    DropFree,
}

impl Capacity {
    fn slots(self, tokens: usize, experts: usize) -> usize {
        match self {
            Capacity::Factor(f) => ((f * (tokens * TOP) as f64 / experts as f64).ceil() as usize).clamp(1, tokens),
            Capacity::DropFree => tokens,
        }
    }
}

/// How tokens reach the experts.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Routing {
    /// i64 positions: `index_add` into the experts' buffers, `index_select` back.
    Index,
    /// One-hot dispatch and combine tensors `[tokens, experts · capacity]` and matrix products.
    OneHot,
}

/// The parameters of one block.
struct Block {
    attn_norm: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    moe_norm: Tensor,
    router: Tensor,
    w_in: Tensor,
    w_out: Tensor,
}

impl Block {
    fn declare(trace: &Trace, layer: usize, cfg: &Config) -> Block {
        let p = |name: &str, shape: &[usize], init: Init| {
            trace.param_with(&format!("l{layer}.{name}"), shape, DType::F32, init)
        };
        let (d, e, h) = (cfg.d_model, cfg.experts, cfg.hidden);
        Block {
            attn_norm: p("attn_norm", &[d], Init::Ones),
            wq: p("wq", &[d, d], Init::Auto),
            wk: p("wk", &[d, d], Init::Auto),
            wv: p("wv", &[d, d], Init::Auto),
            wo: p("wo", &[d, d], Init::Normal(0.5 / (d as f64).sqrt())),
            moe_norm: p("moe_norm", &[d], Init::Ones),
            router: p("router", &[d, e], Init::Normal(0.02)),
            w_in: p("w_in", &[e, d, h], Init::Auto),
            w_out: p("w_out", &[e, h, d], Init::Normal(0.5 / (h as f64).sqrt())),
        }
    }
}

/// Attention over q, k, v `[b, t, heads, dh]` with a scale: fused causal attention in training,
/// the key/value cache when decoding.
type Attend<'a> = dyn Fn(&Tensor, &Tensor, &Tensor, f64) -> Tensor + 'a;

fn fused(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Tensor {
    Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, q, k, v, true, scale)
}

fn attention(x: &Tensor, p: &Block, heads: usize, attend: &Attend<'_>) -> Tensor {
    let s = x.shape();
    let (b, t, d) = (s[0], s[1], s[2]);
    let split = |w: &Tensor| x.matmul(w).reshape(&[b, t, heads, d / heads]);
    let ctx = attend(&split(&p.wq), &split(&p.wk), &split(&p.wv), 1.0 / ((d / heads) as f64).sqrt());
    ctx.reshape(&[b, t, d]).matmul(&p.wo)
}

/// The two columns of `[n, TOP]` one after the other, `[TOP · n]`: every token's first choice
/// before any second (GShard's priority when an expert fills up).
fn choice_major(x: &Tensor) -> Tensor {
    let n = x.shape()[0];
    let cols: Vec<Tensor> = (0..TOP).map(|c| x.slice(1, c, 1).reshape(&[n])).collect();
    cols[0].concat(&cols[1..].iter().collect::<Vec<_>>(), 0)
}

/// The mixture of experts on `x` `[b, t, d]`: the output and the load-balancing loss.
fn moe(x: &Tensor, p: &Block, cfg: &Config, capacity: Capacity, routing: Routing) -> (Tensor, Tensor) {
    let s = x.shape();
    let (n, d, e) = (s[0] * s[1], s[2], cfg.experts);
    let (a, c) = (TOP * n, capacity.slots(s[0] * s[1], e));
    let x = x.reshape(&[n, d]);
    let probs = x.matmul(&p.router).softmax();
    let (top_w, top_ids) = probs.topk(TOP, 1);
    let weights = choice_major(&(&top_w / &top_w.sum(&[1], true)));
    // Assignment `i` (of `a`) sends token `i mod n` to expert `ids[i]`.
    let ids = choice_major(&top_ids.name("route.top_ids")).name("route.ids");
    let token = (&ids.arange_like(0.0, 1.0, a, DType::I64) % n as f64).name("route.token");
    // Its position among the expert's assignments: its rank in a stable sort by expert, less the
    // assignments to the experts before.
    let order = ids.argsort(0, false);
    let load = ids.bincount(e);
    let starts = &load.cumsum(0) - &load;
    let rank = ids.scalar_like(0.0).expand(&[a]).scatter_add(0, &order, &ids.arange_like(0.0, 1.0, a, DType::I64));
    let position = &rank - &starts.index_select(0, &ids);
    let keep = position.lt(&position.scalar_like(c as f64)).name("route.keep");
    let kept_weights = keep.where_(&weights, &weights.scalar_like(0.0)).reshape(&[a, 1]);
    let expert =
        |buffer: &Tensor| buffer.reshape(&[e, c, d]).matmul(&p.w_in).silu().matmul(&p.w_out).reshape(&[e * c, d]);
    let y = match routing {
        Routing::Index => {
            // Dropped assignments go to a last, spare row, which no expert reads.
            let slot =
                keep.where_(&(&(&ids * c as f64) + &position), &ids.scalar_like((e * c) as f64)).name("route.slot");
            let buffer = x.scalar_like(0.0).expand(&[e * c + 1, d]).index_add(0, &slot, &x.index_select(0, &token));
            let out = expert(&buffer.slice(0, 0, e * c)).concat(&[&x.scalar_like(0.0).expand(&[1, d])], 0);
            let mixed = &out.index_select(0, &slot) * &kept_weights;
            x.scalar_like(0.0).expand(&[n, d]).index_add(0, &token, &mixed)
        }
        Routing::OneHot => {
            // `dispatch[i, e·c + k]` is 1 where assignment i is expert e's k-th; summed over
            // the choices, `[n, e·c]` per token.
            let hot_expert = ids.one_hot(e, DType::F32).reshape(&[a, e, 1]);
            let spot = keep.where_(&position, &position.scalar_like(c as f64));
            let hot_spot = spot.one_hot(c + 1, DType::F32).slice(1, 0, c).reshape(&[a, 1, c]);
            let dispatch = (&hot_expert * &hot_spot).reshape(&[TOP, n, e * c]);
            let combine = (&dispatch * &kept_weights.reshape(&[TOP, n, 1])).sum(&[0], false).name("route.combine");
            let dispatch = dispatch.sum(&[0], false).name("route.dispatch");
            combine.matmul(&expert(&dispatch.t().matmul(&x)))
        }
    };
    // Switch Transformer: E · Σ_e (share of assignments to e) · (mean router probability of e).
    let share = &load.cast(DType::F32) / a as f64;
    let balance = &(&share * &probs.mean(&[0], false)).sum_all() * e as f64;
    (y.reshape(&s), balance)
}

/// One pre-norm block: attention, then the mixture of experts; and its balancing loss.
fn block(x: &Tensor, p: &Block, cfg: &Config, run: &Run, attend: &Attend<'_>) -> (Tensor, Tensor) {
    let x = x + &attention(&norm(x, &p.attn_norm), p, cfg.heads, attend);
    let (y, balance) = moe(&norm(&x, &p.moe_norm), p, cfg, run.capacity, run.routing);
    (&x + &y, balance)
}

fn norm(x: &Tensor, gain: &Tensor) -> Tensor {
    &x.rms_norm(EPS) * gain
}

/// A block as a checkpointed region whose policy is chosen at run time (`none`: no region).
#[checkpoint(policy = arg(policy))]
fn checkpointed_block(policy: &RegionPolicy, x: &Tensor, p: &Block, cfg: &Config, run: &Run) -> (Tensor, Tensor) {
    block(x, p, cfg, run, &fused)
}

/// What a traced model computes besides its sizes.
#[derive(Clone, Copy, Debug)]
struct Run {
    policy: PolicyChoice,
    capacity: Capacity,
    routing: Routing,
}

/// Which checkpointing policy the blocks use.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PolicyChoice {
    /// No regions: every value the backward reads is saved.
    None,
    /// `#[checkpoint]` on each block: only block inputs (and routing) are kept.
    Full,
    /// `save(matmul)`: the projections and the experts' products kept.
    SaveMatmuls,
    /// Full-recompute blocks under a byte budget.
    Budget(Budget),
}

impl PolicyChoice {
    fn region_policy(self) -> RegionPolicy {
        match self {
            PolicyChoice::None => RegionPolicy::NONE,
            PolicyChoice::Full | PolicyChoice::Budget(_) => RegionPolicy::RECOMPUTE_ALL,
            PolicyChoice::SaveMatmuls => policy!(save(matmul)),
        }
    }
}

impl std::fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyChoice::None => f.write_str("none"),
            PolicyChoice::Full => f.write_str("full"),
            PolicyChoice::SaveMatmuls => f.write_str("save-matmuls"),
            PolicyChoice::Budget(Budget::Fraction(x)) => write!(f, "budget={x}"),
            PolicyChoice::Budget(Budget::Bytes(b)) => write!(f, "budget={b}B"),
        }
    }
}

fn parse_policy(text: &str) -> Result<PolicyChoice, String> {
    match text {
        "none" => Ok(PolicyChoice::None),
        "full" => Ok(PolicyChoice::Full),
        "save-matmuls" => Ok(PolicyChoice::SaveMatmuls),
        _ => match text.strip_prefix("budget=") {
            Some(b) => b.parse().map(PolicyChoice::Budget),
            None => Err(format!("unknown policy `{text}`; expected none, full, save-matmuls or budget=FRACTION")),
        },
    }
}

fn parse_capacity(text: &str) -> Result<Capacity, String> {
    if text == "none" {
        return Ok(Capacity::DropFree);
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(Capacity::Factor(f)),
        _ => Err(format!("capacity `{text}`: expected a positive factor (1.25) or `none` (drop-free)")),
    }
}

/// The model; with `logits_out`, the logits are a further output.
fn trace_model(cfg: &Config, run: Run, logits_out: bool) -> Result<Graph, remat::Error> {
    let trace = Trace::new().strict();
    let (b, t) = (cfg.batch, cfg.seq);
    let tokens = trace.input("tokens", &[b, t], DType::I64);
    let targets = trace.input("targets", &[b, t], DType::I64);
    let (embed, positions) = embeddings(&trace, cfg);
    let mut x = &embed.embedding(&tokens) + &positions.slice(0, 0, t);
    let mut balance = Vec::new();
    for layer in 0..cfg.layers {
        let p = Block::declare(&trace, layer, cfg);
        let (y, aux) = checkpointed_block(&run.policy.region_policy(), &x, &p, cfg, &run);
        x = y;
        balance.push(aux);
    }
    let logits = output(&trace, &x, &embed);
    let balance = balance[1..].iter().fold(balance[0].clone(), |sum, b| &sum + b);
    let loss = &logits.cross_entropy(&targets).name("cross_entropy") + &(&balance * BALANCE);
    if logits_out {
        trace.finish_with(&loss, &[&logits])
    } else {
        trace.finish(&loss)
    }
}

fn embeddings(trace: &Trace, cfg: &Config) -> (Tensor, Tensor) {
    let embed = trace.param_with("embed", &[VOCAB, cfg.d_model], DType::F32, Init::Normal(0.02));
    let positions = trace.param_with("positions", &[cfg.seq, cfg.d_model], DType::F32, Init::Normal(0.02));
    (embed, positions)
}

/// The final norm and the output projection (tied embeddings).
fn output(trace: &Trace, x: &Tensor, embed: &Tensor) -> Tensor {
    let final_norm = trace.param_with("final_norm", &[x.shape()[2]], DType::F32, Init::Ones);
    norm(x, &final_norm).matmul(&embed.t())
}

/// One decoding step: the same parameters, the position table's row at the step, attention
/// through each block's key/value cache, and drop-free routing of the one token.
fn decode_step(cfg: &Config, routing: Routing, step: &DecodeStep) -> Tensor {
    let trace = step.trace();
    let (embed, positions) = embeddings(trace, cfg);
    let mut x = &embed.embedding(step.tokens()) + &positions.index_select(0, step.position());
    let run = Run { policy: PolicyChoice::None, capacity: Capacity::DropFree, routing };
    for layer in 0..cfg.layers {
        let p = Block::declare(trace, layer, cfg);
        let cached = |q: &Tensor, k: &Tensor, v: &Tensor, scale: f64| step.attend(&format!("l{layer}"), q, k, v, scale);
        x = block(&x, &p, cfg, &run, &cached).0;
    }
    output(trace, &x, &embed)
}

fn build(cfg: &Config, run: Run, strategy: Strategy) -> Result<Model, remat::Error> {
    let strategy = match run.policy {
        PolicyChoice::Budget(b) => Strategy::Budget(b),
        _ => strategy,
    };
    Model::with_strategy(trace_model(cfg, run, false)?, strategy)
}

/// Bytes of the routing values (`route.*`: expert ids, positions, the capacity cut, and the
/// one-hot dispatch and combine tensors where there are some): those the plan keeps for the
/// backward, and all of them (what the forward computes).
fn routing_bytes(model: &Model) -> (usize, usize) {
    let (g, partition) = (model.joint().graph(), model.partition().expect("with_strategy partitions"));
    let routing = || g.ids().filter(|&i| g.node(i).name().is_some_and(|n| n.starts_with("route.")));
    let bytes = |ids: &mut dyn Iterator<Item = remat::NodeId>| ids.map(|i| g.node(i).bytes()).sum();
    (bytes(&mut routing().filter(|i| partition.saved[i.index()])), bytes(&mut routing()))
}

// ---- Data ----

/// A built-in corpus so the example needs nothing: sentences from a small grammar (about 40 KB).
fn synthetic_corpus() -> Vec<u8> {
    const SUBJECTS: [&str; 6] = ["the cat", "a dog", "the old man", "my sister", "the river", "a small bird"];
    const VERBS: [&str; 6] = ["sees", "follows", "remembers", "paints", "carries", "finds"];
    const OBJECTS: [&str; 6] = ["the moon", "a red box", "the garden", "an apple", "the letter", "the sea"];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut text = String::new();
    while text.len() < 40_000 {
        text += &format!("{} {} {}. ", SUBJECTS[next(6)], VERBS[next(6)], OBJECTS[next(6)]);
    }
    text.into_bytes()
}

// ---- Command line ----

/// Train a mixture-of-experts byte-level language model with activation checkpointing.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// A text file to train on (bytes); without it, a built-in synthetic corpus.
    #[arg(long)]
    text: Option<std::path::PathBuf>,
    /// Checkpointing policy: none, full, save-matmuls or budget=FRACTION.
    #[arg(long, default_value = "full", value_parser = parse_policy)]
    policy: PolicyChoice,
    /// Partition strategy: respect, mincut, or budget=B.
    #[arg(long, default_value = "respect", value_parser = str::parse::<Strategy>)]
    strategy: Strategy,
    /// How tokens reach the experts.
    #[arg(long, value_enum, default_value_t = Routing::Index)]
    routing: Routing,
    /// Training capacity factor: each expert takes ceil(factor · tokens · 2 / experts)
    /// assignments, or `none` for drop-free.
    #[arg(long, default_value = "1.25", value_parser = parse_capacity)]
    capacity: Capacity,
    /// Transformer blocks.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    layers: u32,
    /// Model width (a multiple of --heads).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    d_model: u32,
    /// Attention heads.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    heads: u32,
    /// Experts per block (each token goes to 2).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..))]
    experts: u32,
    /// Bytes per sequence.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(2..))]
    seq: u32,
    /// Sequences per batch.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,
    /// Training steps.
    #[arg(long, default_value_t = 600)]
    steps: u64,
    /// Learning rate (AdamW).
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Seed for parameters.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Bytes to generate after training.
    #[arg(long, default_value_t = 160)]
    generate: usize,
    /// A short run for CI: a tiny model, few steps.
    #[arg(long)]
    quick: bool,
}

fn config(args: &Args) -> Result<Config, String> {
    if !args.d_model.is_multiple_of(args.heads) {
        return Err(format!("--d-model {} must be a multiple of --heads {}", args.d_model, args.heads));
    }
    if args.quick {
        return Ok(Config { batch: 2, seq: 16, d_model: 16, heads: 2, layers: 2, experts: 8, hidden: 16 });
    }
    let d = args.d_model as usize;
    Ok(Config {
        batch: args.batch as usize,
        seq: args.seq as usize,
        d_model: d,
        heads: args.heads as usize,
        layers: args.layers as usize,
        experts: args.experts as usize,
        // Fine-grained experts: each half the width of a dense MLP (2 of them run per token).
        hidden: 2 * d,
    })
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Mean cross-entropy over held-out batches, drop-free.
fn held_out_loss(
    cfg: &Config,
    routing: Routing,
    params: &Params,
    corpus: &Corpus,
    batches: u64,
) -> Result<f64, remat::Error> {
    let graph = trace_model(cfg, Run { policy: PolicyChoice::None, capacity: Capacity::DropFree, routing }, false)?;
    let model = Model::new(graph)?;
    let infer = model.inference(&["cross_entropy"])?;
    let mut cpu = CpuBackend::new();
    let mut total = 0.0;
    for i in 0..batches {
        let out = infer.run(
            &mut cpu,
            params,
            &Corpus::batch(&corpus.held_out, (cfg.batch, cfg.seq), BATCH_STREAM, 1_000_000 + i)?,
        )?;
        total += out.values[0].scalar()?;
    }
    Ok(total / batches as f64)
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = config(args)?;
    let corpus = Corpus::read(args.text.as_deref(), synthetic_corpus, cfg.seq)?;
    let steps = if args.quick { args.steps.min(6) } else { args.steps };
    let run_cfg = Run { policy: args.policy, capacity: args.capacity, routing: args.routing };
    let slots = args.capacity.slots(cfg.batch * cfg.seq, cfg.experts);
    println!(
        "moe: {} layers, d_model {}, {} heads, top-{TOP} of {} experts (hidden {}, capacity {slots} per expert of {} tokens), {:?} routing — policy {}; text: {} ({} train / {} held-out bytes)",
        cfg.layers, cfg.d_model, cfg.heads, cfg.experts, cfg.hidden, cfg.batch * cfg.seq, args.routing, args.policy, corpus.source, corpus.train.len(), corpus.held_out.len()
    );
    let model = build(&cfg, run_cfg, args.strategy)?;
    let partition = model.partition().expect("with_strategy partitions");
    println!(
        "plan: {} saved values ({} KiB of activations, {} KiB of them routing), {} ops recomputed",
        partition.saved.iter().filter(|&&s| s).count(),
        partition.saved_bytes / 1024,
        routing_bytes(&model).0 / 1024,
        partition.recomputed.len(),
    );
    let mut cpu = CpuBackend::new();
    // Weights and AdamW's moments stay in the backend's buffers; the moments in f64, as the host
    // optimizer kept them when docs/ops.md's figures were measured, so they stay reproducible.
    let options = TrainOptions::from(&AdamW::new(args.lr)).state_dtype(DType::F64);
    let mut state = TrainState::new(&mut cpu, &model, &model.init_params(args.seed)?, options)?;
    let params = state.params(&mut cpu)?;
    let eval_batches = if args.quick { 1 } else { 8 };
    let before = held_out_loss(&cfg, args.routing, &params, &corpus, eval_batches)?;
    println!("held-out loss before training: {before:.4} (uniform bytes: {:.4})", (VOCAB as f64).ln());
    let start = Instant::now();
    let report_every = (steps / 6).max(1);
    let mut recent = Vec::new();
    for step in 0..steps {
        let out = state.step(
            &mut cpu,
            &model,
            &Corpus::batch(&corpus.train, (cfg.batch, cfg.seq), BATCH_STREAM, step)?,
            0,
        )?;
        recent.push(out.loss);
        if (step + 1) % report_every == 0 || step + 1 == steps {
            println!(
                "step {:>5}: train loss {:.4} (mean of the last {}, balancing included), {:.1} ms/step",
                step + 1,
                recent.iter().sum::<f64>() / recent.len() as f64,
                recent.len(),
                start.elapsed().as_secs_f64() * 1e3 / (step + 1) as f64
            );
            recent.clear();
        }
    }
    let params = state.params(&mut cpu)?;
    let held = held_out_loss(&cfg, args.routing, &params, &corpus, eval_batches)?;
    println!("held-out loss after training: {held:.4} ({:.3} bits per byte)", held / std::f64::consts::LN_2);

    let timed_steps = if args.quick { 1 } else { 3 };
    let feeds = Corpus::batch(&corpus.train, (cfg.batch, cfg.seq), BATCH_STREAM, 0)?;
    let choices = [
        PolicyChoice::None,
        PolicyChoice::Full,
        PolicyChoice::SaveMatmuls,
        PolicyChoice::Budget(Budget::Fraction(0.5)),
    ];
    let build_for = |&policy: &PolicyChoice| build(&cfg, Run { policy, ..run_cfg }, args.strategy);
    let rows: Vec<Row> = compare(choices, build_for, &mut || Ok(CpuBackend::new()), &params, &feeds, timed_steps)?;
    print!("{}", TABLE.render(&rows));
    for routing in [Routing::Index, Routing::OneHot] {
        let m = build(&cfg, Run { routing, ..run_cfg }, args.strategy)?;
        let (kept, computed) = routing_bytes(&m);
        let kib = |b: usize| b as f64 / 1024.0;
        println!(
            "{routing:?} dispatch: routing tensors {:.1} KiB, {:.1} KiB of them kept by the plan",
            kib(computed),
            kib(kept)
        );
    }

    let n = if args.quick { 8 } else { args.generate };
    let prompt = corpus.held_out[..cfg.seq / 2].to_vec();
    let sample = generate(&cfg, args.routing, &params, &prompt, n)?;
    println!("\nsample (prompt from the held-out text, then {n} generated bytes, greedy):");
    println!("{}|{}", String::from_utf8_lossy(&prompt), String::from_utf8_lossy(&sample));
    Ok(())
}

const TABLE: Table = Table {
    policy_width: 14,
    host_peak: false,
    legend: &[
        "(peaks in KiB; act. peak = measured peak less inputs, parameters and resident constants;",
        " ratios against `none`, measured in this run; step time is the median of the timed steps)",
    ],
};

/// Greedy generation with the key/value caches, one token per step (drop-free routing).
fn generate(
    cfg: &Config,
    routing: Routing,
    trained: &Params,
    prompt: &[u8],
    n: usize,
) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut cpu = CpuBackend::new();
    let mut decoder =
        DecoderBuilder::new(1, cfg.seq).build(&mut cpu, trained, |step| decode_step(cfg, routing, step))?;
    let start = Instant::now();
    let prompt: Vec<i64> = prompt.iter().map(|&c| c as i64).collect();
    let out = decoder.generate_sliding(&[prompt], n, &Sampling::greedy(), cfg.seq / 2)?;
    println!("generated {n} bytes in {} steps: {:.0} tokens/s", out.steps, n as f64 / start.elapsed().as_secs_f64());
    Ok(out.tokens[0].iter().map(|&t| t as u8).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Config = Config { batch: 2, seq: 8, d_model: 8, heads: 2, layers: 2, experts: 8, hidden: 8 };

    #[test]
    fn quick() {
        run(&Args::parse_from(["moe", "--quick"])).unwrap();
        run(&Args::parse_from(["moe", "--quick", "--routing", "one-hot", "--policy", "save-matmuls"])).unwrap();
    }

    #[test]
    fn policies_give_bitwise_identical_gradients_and_exact_peaks() {
        let corpus = Corpus::read(None, synthetic_corpus, SMALL.seq).unwrap();
        let feeds = Corpus::batch(&corpus.train, (SMALL.batch, SMALL.seq), BATCH_STREAM, 0).unwrap();
        let mut reference: Option<Vec<HostTensor>> = None;
        let policies = [
            PolicyChoice::None,
            PolicyChoice::Full,
            PolicyChoice::SaveMatmuls,
            PolicyChoice::Budget(Budget::Fraction(0.3)),
        ];
        for policy in policies {
            for strategy in [Strategy::Respect, Strategy::MinCut] {
                let run = Run { policy, capacity: Capacity::Factor(1.0), routing: Routing::Index };
                let model = build(&SMALL, run, strategy).unwrap();
                let out = model.step(&mut CpuBackend::new(), &model.init_params(1).unwrap(), &feeds).unwrap();
                assert_eq!(out.measured_peak, out.predicted_peak, "{policy} {strategy}");
                match &reference {
                    None => reference = Some(out.grads),
                    Some(r) => assert_eq!(r, &out.grads, "{policy} {strategy} changed the gradients"),
                }
            }
        }
    }

    #[test]
    fn index_and_one_hot_routing_compute_the_same_model() {
        let corpus = Corpus::read(None, synthetic_corpus, SMALL.seq).unwrap();
        let feeds = Corpus::batch(&corpus.train, (SMALL.batch, SMALL.seq), BATCH_STREAM, 2).unwrap();
        // A tight capacity, so that assignments are dropped.
        // One block: past it, the two orders of summation (a product with a one-hot matrix sums
        // zeros too) can round a near tie of the next router the other way, and route elsewhere.
        let cfg = Config { layers: 1, ..SMALL };
        let at = |routing| {
            let run = Run { policy: PolicyChoice::Full, capacity: Capacity::Factor(0.5), routing };
            let model = build(&cfg, run, Strategy::Respect).unwrap();
            model.step(&mut CpuBackend::new(), &model.init_params(4).unwrap(), &feeds).unwrap()
        };
        let (index, hot) = (at(Routing::Index), at(Routing::OneHot));
        assert!((index.loss - hot.loss).abs() < 1e-5, "{} vs {}", index.loss, hot.loss);
        for (a, b) in index.grads.iter().zip(&hot.grads) {
            for (x, y) in a.to_f32_vec().iter().zip(b.to_f32_vec()) {
                assert!((x - y).abs() <= 1e-5 + 1e-4 * y.abs(), "{x} vs {y}");
            }
        }
    }

    #[test]
    fn routing_is_kept_and_a_tenth_of_the_one_hot_routing() {
        let cfg = Config { batch: 4, seq: 32, ..SMALL };
        for policy in [PolicyChoice::None, PolicyChoice::Full, PolicyChoice::SaveMatmuls] {
            let at = |routing| {
                build(&cfg, Run { policy, capacity: Capacity::Factor(1.25), routing }, Strategy::Respect).unwrap()
            };
            let (index, hot) = (at(Routing::Index), at(Routing::OneHot));
            let ((ib, i_all), (hb, h_all)) = (routing_bytes(&index), routing_bytes(&hot));
            assert!(i_all * 10 <= h_all, "{policy}: index routing computes {i_all} B, one-hot {h_all} B");
            // The one-hot tensors are kept where nothing is recomputed (they feed matrix
            // products); elsewhere they are recomputed from the kept ids like the rest.
            if policy == PolicyChoice::None {
                assert!(ib > 0 && ib * 10 <= hb, "{policy}: index routing keeps {ib} B, one-hot {hb} B");
            } else {
                assert_eq!(ib, hb, "{policy}");
            }
            // Under every policy the expert ids are kept, not recomputed; what integer ops form
            // from them (slots, the cut by position) is exact to recompute.
            let g = index.joint().graph();
            for &id in index.plan().recomputed() {
                assert_ne!(g.node(id).name(), Some("route.top_ids"), "{policy}: the expert ids are recomputed");
            }
        }
    }

    #[test]
    fn cached_generation_equals_the_drop_free_full_window_forward() {
        let cfg = Config { batch: 1, seq: 12, ..SMALL };
        let run = Run { policy: PolicyChoice::None, capacity: Capacity::DropFree, routing: Routing::Index };
        let model = Model::new(trace_model(&cfg, run, true).unwrap()).unwrap();
        let params = model.init_params(3).unwrap();
        let prompt = b"the ";
        let n = cfg.seq - prompt.len();
        let cached = generate(&cfg, Routing::Index, &params, prompt, n).unwrap();
        let mut text: Vec<i64> = prompt.iter().map(|&c| c as i64).collect();
        for _ in 0..n {
            let mut window = text.clone();
            window.resize(cfg.seq, 0);
            let feeds = Feeds::new()
                .with("tokens", HostTensor::i64([1, cfg.seq], window).unwrap())
                .with("targets", HostTensor::i64([1, cfg.seq], vec![0; cfg.seq]).unwrap());
            let logits = model.step(&mut CpuBackend::new(), &params, &feeds).unwrap().outputs[0].to_f32_vec();
            let last = &logits[(text.len() - 1) * VOCAB..text.len() * VOCAB];
            let best = (0..VOCAB).fold(0, |b, i| if last[i] > last[b] { i } else { b });
            text.push(best as i64);
        }
        let expected: Vec<u8> = text[prompt.len()..].iter().map(|&t| t as u8).collect();
        assert_eq!(cached, expected);
    }

    #[test]
    fn bad_flags_are_refused_by_name() {
        assert!(parse_capacity("0").unwrap_err().contains("positive factor"));
        assert!(parse_policy("save-all").unwrap_err().contains("unknown policy `save-all`"));
        let err = run(&Args::parse_from(["moe", "--d-model", "10", "--heads", "4"])).unwrap_err();
        assert!(err.to_string().contains("multiple of --heads"), "{err}");
    }
}
