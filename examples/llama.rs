//! A Llama-style byte-level language model trained with activation checkpointing on a text file:
//! RMSNorm, rotary position embeddings, fused causal attention, a SwiGLU MLP and tied input/output
//! embeddings, every block op one catalog op. Prints train and held-out loss, a per-policy table
//! (saved bytes, peaks, recompute, step time, measured in the same run) and a generated sample.
//!
//! ```sh
//! cargo run --release --example llama -- --text /usr/share/common-licenses/GPL-3
//! cargo run --release --example llama                     # built-in synthetic corpus
//! cargo run --release --example llama -- --policy full --steps 500 --seq 128
//! ```

use clap::Parser;
use remat::prelude::*;
use remat::{AttnLayout, Budget, Graph, Strategy};
use std::time::Instant;

#[path = "common/corpus.rs"]
mod corpus;
use corpus::Corpus;

/// The stream of remat's generator this example's batches draw their offsets from.
const BATCH_STREAM: u64 = 3;

#[path = "common/data_parallel.rs"]
mod data_parallel;
use remat::compare::{compare, Row, Table};

/// Sizes of the model and its batches.
#[derive(Clone, Copy, Debug)]
struct Config {
    batch: usize,
    seq: usize,
    d_model: usize,
    heads: usize,
    layers: usize,
    /// SwiGLU hidden width.
    hidden: usize,
}

const VOCAB: usize = 256;
const EPS: f64 = 1e-5;

/// The parameters of one block.
struct Block {
    attn_norm: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    mlp_norm: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
}

impl Block {
    fn declare(trace: &Trace, layer: usize, cfg: &Config) -> Block {
        let p = |name: &str, shape: &[usize], init: Init| {
            trace.param_with(&format!("l{layer}.{name}"), shape, DType::F32, init)
        };
        let (d, h) = (cfg.d_model, cfg.hidden);
        Block {
            attn_norm: p("attn_norm", &[d], Init::Ones),
            wq: p("wq", &[d, d], Init::Auto),
            wk: p("wk", &[d, d], Init::Auto),
            wv: p("wv", &[d, d], Init::Auto),
            wo: p("wo", &[d, d], Init::Normal(0.5 / (d as f64).sqrt())),
            mlp_norm: p("mlp_norm", &[d], Init::Ones),
            w_gate: p("w_gate", &[d, h], Init::Auto),
            w_up: p("w_up", &[d, h], Init::Auto),
            w_down: p("w_down", &[h, d], Init::Normal(0.5 / (h as f64).sqrt())),
        }
    }
}

/// Rotary tables: `cos`, `sin` `[seq, 1, head_dim / 2]` (broadcast over the heads), angle
/// `pos · θ^(−2i/head_dim)`.
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    fn new(trace: &Trace, seq: usize, head_dim: usize) -> Rope {
        let half = head_dim / 2;
        let angle = |i: usize| {
            let (pos, k) = ((i / half) as f64, (i % half) as f64);
            pos * 10_000f64.powf(-2.0 * k / head_dim as f64)
        };
        let table = |f: fn(f64) -> f64| {
            let v: Vec<f32> = (0..seq * half).map(|i| f(angle(i)) as f32).collect();
            HostTensor::f32([seq, 1, half], v).expect("seq * half values")
        };
        // Host data made into resident constants: computed once, never fed, never recomputed.
        Rope {
            cos: trace.constant_from("rope.cos", table(f64::cos)),
            sin: trace.constant_from("rope.sin", table(f64::sin)),
        }
    }

    /// Rotates `x` `[b, t, heads, head_dim]`: the two halves of each head (slices, views) turned
    /// by the position's angles, `[x1·cos − x2·sin, x2·cos + x1·sin]`.
    fn apply(&self, x: &Tensor) -> Tensor {
        let half = x.shape()[3] / 2;
        let (x1, x2) = (x.slice(3, 0, half), x.slice(3, half, half));
        let r1 = &(&x1 * &self.cos) - &(&x2 * &self.sin);
        let r2 = &(&x2 * &self.cos) + &(&x1 * &self.sin);
        r1.concat(&[&r2], 3)
    }
}

/// RMSNorm with a gain.
fn norm(x: &Tensor, gain: &Tensor) -> Tensor {
    &x.rms_norm(EPS) * gain
}

/// Attention over q, k, v `[b, t, heads, dh]` with a scale: fused causal attention in training,
/// the key/value cache when decoding.
type Attend<'a> = dyn Fn(&Tensor, &Tensor, &Tensor, f64) -> Tensor + 'a;

/// Causal attention, fused (`sdpa`).
fn fused(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Tensor {
    Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, q, k, v, true, scale)
}

/// Self-attention with rotary embeddings, the heads token-major (`[b, t, heads, dh]`): the head
/// split and merge are reshapes, with no transpose.
fn attention(x: &Tensor, p: &Block, rope: &Rope, heads: usize, attend: &Attend<'_>) -> Tensor {
    let s = x.shape();
    let (b, t, d) = (s[0], s[1], s[2]);
    let dh = d / heads;
    let split = |w: &Tensor| x.matmul(w).reshape(&[b, t, heads, dh]);
    let (q, k, v) = (rope.apply(&split(&p.wq)), rope.apply(&split(&p.wk)), split(&p.wv));
    let ctx = attend(&q, &k, &v, 1.0 / (dh as f64).sqrt());
    ctx.reshape(&[b, t, d]).matmul(&p.wo)
}

/// The SwiGLU MLP: `(silu(x·w_gate) * (x·w_up)) · w_down`.
fn mlp(x: &Tensor, p: &Block) -> Tensor {
    (&x.matmul(&p.w_gate).silu() * &x.matmul(&p.w_up)).matmul(&p.w_down)
}

/// One pre-norm block.
fn block(x: &Tensor, p: &Block, rope: &Rope, heads: usize, attend: &Attend<'_>) -> Tensor {
    let x = x + &attention(&norm(x, &p.attn_norm), p, rope, heads, attend);
    &x + &mlp(&norm(&x, &p.mlp_norm), p)
}

/// A block as a checkpointed region whose policy is chosen at run time (`none`: no region).
#[checkpoint(policy = arg(policy))]
fn checkpointed_block(policy: &RegionPolicy, x: &Tensor, p: &Block, rope: &Rope, heads: usize) -> Tensor {
    block(x, p, rope, heads, &fused)
}

/// Which checkpointing policy the blocks use.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PolicyChoice {
    /// No regions: every value the backward reads is saved.
    None,
    /// `#[checkpoint]` on each block: only block inputs are kept.
    Full,
    /// `save(matmul)`.
    SaveMatmuls,
    /// `save(sdpa)`: keep the fused attention (as PyTorch users keep SDPA), recompute the rest.
    SaveAttention,
    /// `save(matmul, sdpa)`.
    SaveMatmulsAttention,
    /// Full-recompute blocks partitioned under a byte budget.
    Budget(Budget),
}

impl PolicyChoice {
    /// The blocks' region policy.
    fn region_policy(self) -> RegionPolicy {
        match self {
            PolicyChoice::None => RegionPolicy::NONE,
            PolicyChoice::Full | PolicyChoice::Budget(_) => RegionPolicy::RECOMPUTE_ALL,
            PolicyChoice::SaveMatmuls => policy!(save(matmul)),
            PolicyChoice::SaveAttention => policy!(save(sdpa)),
            PolicyChoice::SaveMatmulsAttention => policy!(save(matmul, sdpa)),
        }
    }
}

impl std::fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyChoice::None => f.write_str("none"),
            PolicyChoice::Full => f.write_str("full"),
            PolicyChoice::SaveMatmuls => f.write_str("save-matmuls"),
            PolicyChoice::SaveAttention => f.write_str("save-sdpa"),
            PolicyChoice::SaveMatmulsAttention => f.write_str("save-mm+sdpa"),
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
        "save-sdpa" => Ok(PolicyChoice::SaveAttention),
        "save-mm+sdpa" => Ok(PolicyChoice::SaveMatmulsAttention),
        _ => match text.strip_prefix("budget=") {
            Some(b) => b.parse().map(PolicyChoice::Budget),
            None => Err(format!(
                "unknown policy `{text}`; expected none, full, save-matmuls, save-sdpa, save-mm+sdpa or budget=FRACTION"
            )),
        },
    }
}

/// The model for batches of `batch` sequences; with `logits`, the logits are a further output.
fn trace_model(cfg: &Config, policy: PolicyChoice, logits_out: bool) -> Result<Graph, remat::Error> {
    let trace = Trace::new().strict();
    let (b, t, d) = (cfg.batch, cfg.seq, cfg.d_model);
    let tokens = trace.input("tokens", &[b, t], DType::I64);
    let targets = trace.input("targets", &[b, t], DType::I64);
    let embed = trace.param_with("embed", &[VOCAB, d], DType::F32, Init::Normal(0.02));
    let rope = Rope::new(&trace, t, d / cfg.heads);
    let mut x = embed.embedding(&tokens);
    for layer in 0..cfg.layers {
        let p = Block::declare(&trace, layer, cfg);
        x = checkpointed_block(&policy.region_policy(), &x, &p, &rope, cfg.heads);
    }
    let logits = output(&trace, &x, &embed);
    let loss = logits.cross_entropy(&targets);
    if logits_out {
        trace.finish_with(&loss, &[&logits])
    } else {
        trace.finish(&loss)
    }
}

/// The final norm and the output projection: tied embeddings, the table transposed (a view).
fn output(trace: &Trace, x: &Tensor, embed: &Tensor) -> Tensor {
    let final_norm = trace.param_with("final_norm", &[x.shape()[2]], DType::F32, Init::Ones);
    norm(x, &final_norm).matmul(&embed.t())
}

/// One decoding step of the model: the same parameters, the rotary tables' row at the step's
/// position, each block's attention through its key/value cache (`l<layer>`).
fn decode_step(cfg: &Config, step: &DecodeStep) -> Tensor {
    let (trace, d) = (step.trace(), cfg.d_model);
    let embed = trace.param_with("embed", &[VOCAB, d], DType::F32, Init::Normal(0.02));
    let tables = Rope::new(trace, step.max_len(), d / cfg.heads);
    let at = |table: &Tensor| table.index_select(0, step.position());
    let rope = Rope { cos: at(&tables.cos), sin: at(&tables.sin) };
    let mut x = embed.embedding(step.tokens());
    for layer in 0..cfg.layers {
        let p = Block::declare(trace, layer, cfg);
        let cached = |q: &Tensor, k: &Tensor, v: &Tensor, scale: f64| step.attend(&format!("l{layer}"), q, k, v, scale);
        x = block(&x, &p, &rope, cfg.heads, &cached);
    }
    output(trace, &x, &embed)
}

fn build(cfg: &Config, policy: PolicyChoice, strategy: Strategy) -> Result<Model, remat::Error> {
    let graph = trace_model(cfg, policy, false)?;
    let strategy = match policy {
        PolicyChoice::Budget(b) => Strategy::Budget(b),
        _ => strategy,
    };
    Model::with_strategy(graph, strategy)
}

// ---- Data ----

/// A built-in corpus so the example needs nothing: sentences from a small grammar, drawn by a
/// fixed pseudo-random sequence (about 40 KB of text).
fn synthetic_corpus() -> Vec<u8> {
    const SUBJECTS: [&str; 8] =
        ["the cat", "a dog", "the old man", "my sister", "the river", "a small bird", "the teacher", "our neighbour"];
    const VERBS: [&str; 8] = ["sees", "follows", "remembers", "paints", "carries", "finds", "watches", "likes"];
    const OBJECTS: [&str; 8] =
        ["the moon", "a red box", "the garden", "an apple", "the letter", "a quiet song", "the bridge", "the sea"];
    const ENDS: [&str; 4] = [".", " today.", " again.", " at night."];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut text = String::new();
    while text.len() < 40_000 {
        let s = SUBJECTS[next(8)];
        text += &s[..1].to_uppercase();
        text += &s[1..];
        text += " ";
        text += VERBS[next(8)];
        text += " ";
        text += OBJECTS[next(8)];
        text += ENDS[next(4)];
        text += if next(5) == 0 { "\n" } else { " " };
    }
    text.into_bytes()
}

// ---- Command line ----

/// Train a Llama-style byte-level language model with activation checkpointing.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// A text file to train on (bytes); without it, a built-in synthetic corpus.
    #[arg(long)]
    text: Option<std::path::PathBuf>,
    /// Checkpointing policy: none, full, save-matmuls, save-sdpa, save-mm+sdpa or budget=FRACTION.
    #[arg(long, default_value = "save-sdpa", value_parser = parse_policy)]
    policy: PolicyChoice,
    /// Partition strategy: respect, mincut, or budget=B.
    #[arg(long, default_value = "respect", value_parser = str::parse::<Strategy>)]
    strategy: Strategy,
    /// Transformer blocks.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    layers: u32,
    /// Model width (a multiple of --heads; head dims must be even for the rotary halves).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(2..))]
    d_model: u32,
    /// Attention heads.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    heads: u32,
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
    #[command(flatten)]
    dp: data_parallel::DpArgs,
}

fn config(args: &Args) -> Result<Config, String> {
    if !args.d_model.is_multiple_of(args.heads) || !(args.d_model / args.heads).is_multiple_of(2) {
        return Err(format!(
            "--d-model {} must be a multiple of --heads {} with an even head dim (rotary halves)",
            args.d_model, args.heads
        ));
    }
    let d = args.d_model as usize;
    let cfg = Config {
        batch: args.batch as usize,
        seq: args.seq as usize,
        d_model: d,
        heads: args.heads as usize,
        layers: args.layers as usize,
        // ~8/3 d rounded to a multiple of 8, as Llama sizes its SwiGLU.
        hidden: (8 * d / 3).div_ceil(8) * 8,
    };
    if args.quick {
        return Ok(Config { batch: 4, seq: 16, d_model: 16, heads: 2, layers: 2, hidden: 48 });
    }
    Ok(cfg)
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Mean loss over `batches` held-out batches.
fn held_out_loss(
    model: &Model,
    params: &Params,
    corpus: &Corpus,
    cfg: &Config,
    batches: u64,
) -> Result<f64, remat::Error> {
    let mut cpu = CpuBackend::new();
    let mut total = 0.0;
    for i in 0..batches {
        total += model
            .step(
                &mut cpu,
                params,
                &Corpus::batch(&corpus.held_out, (cfg.batch, cfg.seq), BATCH_STREAM, 1_000_000 + i)?,
            )?
            .loss;
    }
    Ok(total / batches as f64)
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = config(args)?;
    let corpus = Corpus::read(args.text.as_deref(), synthetic_corpus, cfg.seq)?;
    let steps = if args.quick { args.steps.min(6) } else { args.steps };
    if args.dp.data_parallel {
        let opts = args.dp.options(steps, args.seed, cfg.batch, args.lr);
        let build_shard = |batch| build(&Config { batch, ..cfg }, args.policy, args.strategy);
        return data_parallel::train(
            "llama",
            &build_shard,
            &|step| Corpus::batch(&corpus.train, (cfg.batch, cfg.seq), BATCH_STREAM, step),
            &opts,
        );
    }
    println!(
        "llama: {} layers, d_model {}, {} heads, SwiGLU {}, seq {}, batch {} — policy {}; text: {} ({} train / {} held-out bytes)",
        cfg.layers,
        cfg.d_model,
        cfg.heads,
        cfg.hidden,
        cfg.seq,
        cfg.batch,
        args.policy,
        corpus.source,
        corpus.train.len(),
        corpus.held_out.len()
    );
    let model = build(&cfg, args.policy, args.strategy)?;
    let partition = model.partition().expect("with_strategy partitions");
    println!(
        "plan: {} saved values ({} KiB of activations), {} ops recomputed ({:.1} MFLOP)",
        partition.saved.iter().filter(|&&s| s).count(),
        partition.saved_bytes / 1024,
        partition.recomputed.len(),
        partition.recompute_flops as f64 / 1e6
    );

    let mut cpu = CpuBackend::new();
    // Weights and AdamW's moments stay in the backend's buffers; the moments in f64, as the host
    // optimizer kept them when docs/ops.md's figures were measured, so they stay reproducible.
    let options = TrainOptions::from(&AdamW::new(args.lr)).state_dtype(DType::F64);
    let mut state = TrainState::new(&mut cpu, &model, &model.init_params(args.seed)?, options)?;
    let params = state.params(&mut cpu)?;
    let eval_batches = if args.quick { 1 } else { 8 };
    println!(
        "held-out loss before training: {:.4} (uniform bytes: {:.4})",
        held_out_loss(&model, &params, &corpus, &cfg, eval_batches)?,
        (VOCAB as f64).ln()
    );
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
            let mean = recent.iter().sum::<f64>() / recent.len() as f64;
            println!(
                "step {:>5}: train loss {:.4} (mean of the last {}), {:.1} ms/step",
                step + 1,
                mean,
                recent.len(),
                start.elapsed().as_secs_f64() * 1e3 / (step + 1) as f64
            );
            recent.clear();
        }
    }
    let params = state.params(&mut cpu)?;
    let held = held_out_loss(&model, &params, &corpus, &cfg, eval_batches)?;
    println!("held-out loss after training: {held:.4} ({:.3} bits per byte)", held / std::f64::consts::LN_2);

    let rows = compare_policies(&cfg, args, &params, &corpus)?;
    print!("{}", TABLE.render(&rows));

    let n = if args.quick { 8 } else { args.generate };
    let prompt = corpus.held_out[..cfg.seq / 2].to_vec();
    let sample = generate(&cfg, &params, &prompt, n)?;
    println!("\nsample (prompt from the held-out text, then {n} generated bytes, greedy):");
    println!("{}|{}", String::from_utf8_lossy(&prompt), String::from_utf8_lossy(&sample));
    Ok(())
}

/// Each policy's partition and a few timed steps at the trained parameters.
fn compare_policies(
    cfg: &Config,
    args: &Args,
    params: &Params,
    corpus: &Corpus,
) -> Result<Vec<Row>, Box<dyn std::error::Error>> {
    let choices = [
        PolicyChoice::None,
        PolicyChoice::Full,
        PolicyChoice::SaveMatmuls,
        PolicyChoice::SaveAttention,
        PolicyChoice::SaveMatmulsAttention,
        PolicyChoice::Budget(Budget::Fraction(0.5)),
    ];
    let timed_steps = if args.quick { 1 } else { 5 };
    let feeds = Corpus::batch(&corpus.train, (cfg.batch, cfg.seq), BATCH_STREAM, 0)?;
    // The model has no random ops: the seeds the timed steps get change nothing.
    let model = |&p: &PolicyChoice| build(cfg, p, args.strategy);
    Ok(compare(choices, model, &mut || Ok(CpuBackend::new()), params, &feeds, timed_steps)?)
}

/// The comparison table (no offloading policies here, so no host-memory column).
const TABLE: Table = Table {
    policy_width: 14,
    host_peak: false,
    legend: &[
        "(peaks in KiB; act. peak = measured peak less inputs, parameters and resident constants;",
        " ratios against `none`, measured in this run; step time is the median of the timed steps)",
    ],
};

/// Greedy generation with the key/value cache ([`remat::Decoder`]): the prompt and then one
/// step per byte, each attending through the caches to everything before it. The caches hold
/// the training length; when they are full, the last half of it starts a fresh pass
/// (`generate_sliding`), so no position is one the model never trained at.
fn generate(cfg: &Config, trained: &Params, prompt: &[u8], n: usize) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(1, cfg.seq).build(&mut cpu, trained, |step| decode_step(cfg, step))?;
    let start = Instant::now();
    let prompt: Vec<i64> = prompt.iter().map(|&c| c as i64).collect();
    let out = decoder.generate_sliding(&[prompt], n, &Sampling::greedy(), cfg.seq / 2)?;
    println!(
        "generated {n} bytes in {} steps with the KV cache: {:.0} tokens/s, peak {:.1} KiB held (parameters {:.1} KiB, caches and all)",
        out.steps,
        n as f64 / start.elapsed().as_secs_f64(),
        out.measured_peak as f64 / 1024.0,
        trained.values().iter().map(HostTensor::bytes).sum::<usize>() as f64 / 1024.0
    );
    Ok(out.tokens[0].iter().map(|&t| t as u8).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick() {
        run(&Args::parse_from(["llama", "--quick"])).unwrap();
    }

    #[test]
    fn quick_on_a_text_file() {
        let path = std::env::temp_dir().join(format!("remat-llama-{}.txt", std::process::id()));
        std::fs::write(
            &path,
            "All happy families are alike; each unhappy family is unhappy in its own way. ".repeat(20),
        )
        .unwrap();
        run(&Args::parse_from(["llama", "--quick", "--text", path.to_str().unwrap()])).unwrap();
        let tiny = std::env::temp_dir().join(format!("remat-llama-tiny-{}.txt", std::process::id()));
        std::fs::write(&tiny, "too short").unwrap();
        let err = run(&Args::parse_from(["llama", "--quick", "--text", tiny.to_str().unwrap()])).unwrap_err();
        assert!(err.to_string().contains("too short"), "{err}");
    }

    #[test]
    fn policies_give_bitwise_identical_gradients_and_exact_peaks() {
        let cfg = Config { batch: 2, seq: 8, d_model: 8, heads: 2, layers: 2, hidden: 16 };
        let corpus = Corpus::read(None, synthetic_corpus, cfg.seq).unwrap();
        let feeds = Corpus::batch(&corpus.train, (cfg.batch, cfg.seq), BATCH_STREAM, 0).unwrap();
        let mut reference: Option<Vec<HostTensor>> = None;
        for policy in [PolicyChoice::None, PolicyChoice::Full, PolicyChoice::SaveAttention, PolicyChoice::SaveMatmuls] {
            for strategy in [Strategy::Respect, Strategy::MinCut] {
                let model = build(&cfg, policy, strategy).unwrap();
                assert!(model.forward_graph().untagged_inside_regions().is_empty(), "{policy}");
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
    fn cached_generation_equals_the_cache_free_model() {
        let cfg = Config { batch: 1, seq: 12, d_model: 16, heads: 2, layers: 2, hidden: 24 };
        let model = Model::new(trace_model(&cfg, PolicyChoice::None, true).unwrap()).unwrap();
        let params = model.init_params(3).unwrap();
        let prompt = b"the ";
        let n = cfg.seq - prompt.len();
        let cached = generate(&cfg, &params, prompt, n).unwrap();
        // Cache-free: the whole text so far, left-aligned in the traced window (causal attention
        // keeps the padding after it out), the argmax at its last position.
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
    fn save_sdpa_keeps_the_fused_attention() {
        let cfg = Config { batch: 2, seq: 8, d_model: 8, heads: 2, layers: 1, hidden: 16 };
        let model = build(&cfg, PolicyChoice::SaveAttention, Strategy::Respect).unwrap();
        let graph = model.forward_graph();
        let partition = model.partition().unwrap();
        let sdpa: Vec<_> = graph.ids().filter(|&i| graph.node(i).op.kind() == remat::OpKind::Sdpa).collect();
        assert_eq!(sdpa.len(), 1);
        assert!(partition.saved[sdpa[0].index()], "save(sdpa) keeps the attention output");
        assert!(!partition.recomputed.contains(&sdpa[0]));
    }
}
