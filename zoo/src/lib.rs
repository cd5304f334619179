//! Small reference models and synthetic data, shared by tests, benchmarks and examples of
//! several crates (kept out of remat-core, which they only use).
//!
//! They are written with plain tracing calls (no `#[checkpoint]`: remat-core's own tests, below
//! the `remat` crate, trace them too), and take an optional hook that wraps each sub-block so
//! callers can open regions around them.

#![warn(missing_docs)]

use remat_core::{
    normal_f64, uniform_u32, AttnLayout, DType, DecodeStep, Feeds, Graph, HostData, HostTensor, Init, Result, Tensor,
    Trace,
};

/// A multi-layer perceptron classifier: `relu(x·w + b)` per hidden layer, cross-entropy loss.
#[derive(Clone, Debug)]
pub struct MlpConfig {
    /// Rows per batch.
    pub batch: usize,
    /// Layer widths, input first, classes last (`[16, 32, 4]` is one hidden layer).
    pub widths: Vec<usize>,
}

/// Traces the MLP of `cfg`. Inputs: `x` `[batch, widths[0]]` f32, `y` `[batch]` i64.
pub fn mlp(cfg: &MlpConfig) -> Result<Graph> {
    let trace = Trace::new().strict();
    let x = trace.input("x", &[cfg.batch, cfg.widths[0]], DType::F32);
    let y = trace.input("y", &[cfg.batch], DType::I64);
    let mut h = x;
    let layers = cfg.widths.len() - 1;
    for (i, pair) in cfg.widths.windows(2).enumerate() {
        let w = trace.param(&format!("w{i}"), &[pair[0], pair[1]], DType::F32);
        let b = trace.param(&format!("b{i}"), &[pair[1]], DType::F32);
        h = &h.matmul(&w) + &b;
        if i + 1 < layers {
            h = h.relu();
        }
    }
    trace.finish(&h.cross_entropy(&y))
}

/// Feeds for [`mlp`]: points whose class is the index of their largest of the first `classes`
/// coordinates, a task an MLP learns quickly.
pub fn mlp_feeds(cfg: &MlpConfig, seed: u64) -> Result<Feeds> {
    let (rows, cols, classes) = (cfg.batch, cfg.widths[0], *cfg.widths.last().unwrap_or(&1));
    let x: Vec<f32> = (0..(rows * cols) as u64).map(|i| normal_f64(seed, 1, i) as f32).collect();
    let y: Vec<i64> = (0..rows)
        .map(|r| {
            let row = &x[r * cols..r * cols + classes.min(cols)];
            row.iter().enumerate().fold(0, |best, (j, &v)| if v > row[best] { j } else { best }) as i64
        })
        .collect();
    Ok(Feeds::new().with("x", HostTensor::f32([rows, cols], x)?).with("y", HostTensor::i64([rows], y)?))
}

/// A small GPT-style language model: token and position embeddings, pre-LN transformer blocks
/// (fused causal attention, [`Tensor::scaled_dot_product_attention`]; a gelu MLP), final layer
/// norm, head, cross-entropy.
#[derive(Clone, Debug)]
pub struct GptConfig {
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Model width.
    pub d_model: usize,
    /// Attention heads (must divide `d_model`).
    pub heads: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Dropout probability (0 for none).
    pub dropout: f64,
    /// Storage dtype of activations and parameters.
    pub dtype: DType,
}

/// The parameters of one pre-LN block.
pub struct BlockParams {
    /// Layer-norm gains and biases.
    pub ln1: (Tensor, Tensor),
    /// Query, key, value and output projections `[d, d]`.
    pub wq: Tensor,
    #[allow(missing_docs)]
    pub wk: Tensor,
    #[allow(missing_docs)]
    pub wv: Tensor,
    #[allow(missing_docs)]
    pub wo: Tensor,
    /// Second layer norm.
    pub ln2: (Tensor, Tensor),
    /// MLP weights `[d, 4d]`, `[4d, d]` and biases.
    pub w1: Tensor,
    #[allow(missing_docs)]
    pub b1: Tensor,
    #[allow(missing_docs)]
    pub w2: Tensor,
    #[allow(missing_docs)]
    pub b2: Tensor,
}

impl BlockParams {
    /// Declares the parameters of block `layer`.
    pub fn declare(trace: &Trace, layer: usize, d: usize, dtype: DType) -> BlockParams {
        let p =
            |name: &str, shape: &[usize], init: Init| trace.param_with(&format!("h{layer}.{name}"), shape, dtype, init);
        let ln = |name: &str| (p(&format!("{name}.g"), &[d], Init::Ones), p(&format!("{name}.b"), &[d], Init::Zeros));
        BlockParams {
            ln1: ln("ln1"),
            wq: p("wq", &[d, d], Init::Auto),
            wk: p("wk", &[d, d], Init::Auto),
            wv: p("wv", &[d, d], Init::Auto),
            wo: p("wo", &[d, d], Init::Auto),
            ln2: ln("ln2"),
            w1: p("w1", &[d, 4 * d], Init::Auto),
            b1: p("b1", &[4 * d], Init::Zeros),
            w2: p("w2", &[4 * d, d], Init::Auto),
            b2: p("b2", &[d], Init::Zeros),
        }
    }
}

/// Layer norm with a gain and a bias.
pub fn layer_norm(x: &Tensor, (g, b): &(Tensor, Tensor)) -> Tensor {
    &(&x.layer_norm(1e-5) * g) + b
}

/// Causal multi-head self-attention of `x` `[b, t, d]`, fused: the `t × t` scores are never
/// materialised ([`Tensor::scaled_dot_product_attention_in`], `sdpa` in policies). The heads stay
/// token-major (`[b, t, heads, dh]`), so neither the head split of q, k, v nor the context's
/// merge copies a transpose. The context before the output projection is named `attn_ctx`.
pub fn attention(x: &Tensor, p: &BlockParams, heads: usize) -> Tensor {
    let (q, k, v, [b, t, d]) = qkv(x, p, heads);
    let dh = d / heads;
    // Named so `save_names("attn_ctx")` policies can keep it (a view: its base, the fused op's
    // output, is what is kept).
    let scale = 1.0 / (dh as f64).sqrt();
    let ctx = Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, &q, &k, &v, true, scale).name("attn_ctx");
    ctx.reshape(&[b, t, d]).matmul(&p.wo)
}

/// [`attention`] composed from unfused ops: `softmax(q·kᵀ/√dh + mask)·v`, with the causal mask a
/// resident constant built from `arange` and a comparison. The reference the fused op is checked
/// and benchmarked against; it materialises `heads × t × t` scores and probabilities.
pub fn attention_unfused(x: &Tensor, p: &BlockParams, heads: usize) -> Tensor {
    let (q, k, v, [b, t, d]) = qkv(x, p, heads);
    let heads_first = |x: Tensor| x.transpose(&[0, 2, 1, 3]);
    let (q, k, v) = (heads_first(q), heads_first(k), heads_first(v));
    let dh = d / heads;
    let rows = x.arange_like(0.0, 1.0, t, DType::I64).reshape(&[t, 1]);
    let cols = x.arange_like(0.0, 1.0, t, DType::I64);
    // Scaling q rather than the scores touches t·dh values per head instead of t·t.
    let scores = (q * (1.0 / (dh as f64).sqrt())).matmul(&k.t());
    let scores = scores.masked_fill(&cols.gt(&rows), -1e9);
    let ctx = scores.softmax().matmul(&v).name("attn_ctx");
    ctx.transpose(&[0, 2, 1, 3]).reshape(&[b, t, d]).matmul(&p.wo)
}

/// [`attention`] for one decoding step: `x` `[b, 1, d]` attends through the key/value cache of
/// block `layer` (`h<layer>.attn`, [`DecodeStep::attend`]) to every position so far.
pub fn attention_step(x: &Tensor, p: &BlockParams, heads: usize, step: &DecodeStep, layer: usize) -> Tensor {
    let (q, k, v, [b, t, d]) = qkv(x, p, heads);
    let scale = 1.0 / ((d / heads) as f64).sqrt();
    let ctx = step.attend(&format!("h{layer}.attn"), &q, &k, &v, scale);
    ctx.reshape(&[b, t, d]).matmul(&p.wo)
}

/// One decoding step of [`gpt`] with the same parameters (a [`remat_core::Decoder`]'s step): the
/// token embedding plus the position's row of `wpe` (so the caches hold at most `cfg.seq`
/// positions), the blocks with [`attention_step`] and no dropout, the logits `[b, 1, vocab]`.
pub fn gpt_step(cfg: &GptConfig, step: &DecodeStep) -> Tensor {
    let trace = step.trace();
    let d = cfg.d_model;
    let wte = trace.param_with("wte", &[cfg.vocab, d], cfg.dtype, Init::Normal(0.02));
    let wpe = trace.param_with("wpe", &[cfg.seq, d], cfg.dtype, Init::Normal(0.02));
    let mut x = &wte.embedding(step.tokens()) + &wpe.index_select(0, step.position());
    let eval = GptConfig { dropout: 0.0, ..cfg.clone() };
    for layer in 0..cfg.layers {
        let p = BlockParams::declare(trace, layer, d, cfg.dtype);
        x = block(&x, &p, &eval, layer, &|part, x, p, heads| match part {
            Part::Attention => attention_step(x, p, heads, step, layer),
            Part::FeedForward => feed_forward(x, p),
        });
    }
    head(trace, &x, cfg)
}

/// The final layer norm and the head: the logits, named `logits`.
fn head(trace: &Trace, x: &Tensor, cfg: &GptConfig) -> Tensor {
    let d = cfg.d_model;
    let lnf = (
        trace.param_with("lnf.g", &[d], cfg.dtype, Init::Ones),
        trace.param_with("lnf.b", &[d], cfg.dtype, Init::Zeros),
    );
    let head = trace.param("head", &[d, cfg.vocab], cfg.dtype);
    // Named so a forward-only call ([`remat_core::Model::inference`]) can ask for it.
    layer_norm(x, &lnf).matmul(&head).name("logits")
}

/// q, k, v `[b, t, heads, dh]` (token-major) of `x` `[b, t, d]`.
fn qkv(x: &Tensor, p: &BlockParams, heads: usize) -> (Tensor, Tensor, Tensor, [usize; 3]) {
    let shape = x.shape();
    let (b, t, d) = (shape[0], shape[1], shape[2]);
    let dh = d / heads;
    let split = |w: &Tensor| x.matmul(w).reshape(&[b, t, heads, dh]);
    (split(&p.wq), split(&p.wk), split(&p.wv), [b, t, d])
}

/// The gelu MLP of a block; its pre-activation is named `ffn_pre`.
pub fn feed_forward(x: &Tensor, p: &BlockParams) -> Tensor {
    // Named so `save_names("ffn_pre")` policies can keep it.
    let pre = (&x.matmul(&p.w1) + &p.b1).name("ffn_pre");
    &pre.gelu().matmul(&p.w2) + &p.b2
}

/// Which part of a block a [`gpt_with`] hook is asked to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The attention sub-block (its input is already layer-normed).
    Attention,
    /// The MLP sub-block (its input is already layer-normed).
    FeedForward,
}

/// Traces the GPT of `cfg`. Inputs: `tokens` and `targets` `[batch, seq]` i64.
pub fn gpt(cfg: &GptConfig) -> Result<Graph> {
    gpt_with(cfg, &|part, x, p, heads| match part {
        Part::Attention => attention(x, p, heads),
        Part::FeedForward => feed_forward(x, p),
    })
}

/// A sub-block runner: `(part, normed input, block params, heads) -> output`.
pub type PartFn<'a> = dyn Fn(Part, &Tensor, &BlockParams, usize) -> Tensor + 'a;

/// [`gpt`] with each attention and MLP sub-block run by `run` (to wrap them in regions).
pub fn gpt_with(cfg: &GptConfig, run: &PartFn<'_>) -> Result<Graph> {
    gpt_blocks(cfg, &|x, p, layer| block(x, p, cfg, layer, run))
}

/// One pre-LN transformer block: `x + attn(ln1(x))`, then `+ mlp(ln2(·))`, with dropout on both
/// branches; `run` computes the two sub-blocks.
pub fn block(x: &Tensor, p: &BlockParams, cfg: &GptConfig, layer: usize, run: &PartFn<'_>) -> Tensor {
    let a = run(Part::Attention, &layer_norm(x, &p.ln1), p, cfg.heads);
    let x = x + &drop(&a, cfg.dropout, 2 * layer as u64);
    let f = run(Part::FeedForward, &layer_norm(&x, &p.ln2), p, cfg.heads);
    &x + &drop(&f, cfg.dropout, 2 * layer as u64 + 1)
}

/// A block runner: `(residual stream, block params, layer) -> new residual stream`.
pub type BlockFn<'a> = dyn Fn(&Tensor, &BlockParams, usize) -> Tensor + 'a;

/// [`gpt`] with each whole block run by `run` (to checkpoint blocks as units).
pub fn gpt_blocks(cfg: &GptConfig, run: &BlockFn<'_>) -> Result<Graph> {
    let trace = Trace::new().strict();
    let (b, t, d) = (cfg.batch, cfg.seq, cfg.d_model);
    let tokens = trace.input("tokens", &[b, t], DType::I64);
    let targets = trace.input("targets", &[b, t], DType::I64);
    let wte = trace.param_with("wte", &[cfg.vocab, d], cfg.dtype, Init::Normal(0.02));
    let wpe = trace.param_with("wpe", &[t, d], cfg.dtype, Init::Normal(0.02));
    let mut x = &wte.embedding(&tokens) + &wpe;
    for layer in 0..cfg.layers {
        let p = BlockParams::declare(&trace, layer, d, cfg.dtype);
        x = run(&x, &p, layer);
    }
    let logits = head(&trace, &x, cfg);
    let loss = logits.cast(DType::F32).cross_entropy(&targets);
    trace.finish(&loss)
}

fn drop(x: &Tensor, p: f64, seed: u64) -> Tensor {
    if p > 0.0 {
        x.dropout(p, seed)
    } else {
        x.clone()
    }
}

/// The additive causal mask: 0 on and below the diagonal, -1e9 above it.
pub fn causal_mask(t: usize, dtype: DType) -> HostTensor {
    let values: Vec<f64> = (0..t * t).map(|i| if i % t > i / t { -1e9 } else { 0.0 }).collect();
    HostTensor::new(vec![t, t], HostData::from_f64(&values, dtype)).expect("t*t values")
}

/// A batch of a deterministic synthetic language: each sequence follows `next = (a·prev + c)
/// mod vocab` with per-batch-row constants drawn from a small set, plus a fixed amount of
/// noise, so a model can learn the rule from context. `step` picks the batch.
pub fn synthetic_tokens(cfg: &GptConfig, step: u64) -> Result<Feeds> {
    let (b, t, v) = (cfg.batch, cfg.seq, cfg.vocab as u64);
    let mut tokens = Vec::with_capacity(b * t);
    let mut targets = Vec::with_capacity(b * t);
    for row in 0..b as u64 {
        let stream = step * 1_000_003 + row;
        let rule = uniform_u32(17, stream, 0) as u64 % 3;
        let (a, c) = [(1, 1), (1, 3), (3, 1)][rule as usize];
        let mut tok = uniform_u32(17, stream, 1) as u64 % v;
        for i in 0..=t as u64 {
            let noisy = uniform_u32(17, stream, 2 + i).is_multiple_of(16);
            let next = if noisy { uniform_u32(19, stream, i) as u64 % v } else { (a * tok + c) % v };
            if i < t as u64 {
                tokens.push(tok as i64);
                targets.push(next as i64);
            }
            tok = next;
        }
    }
    Ok(Feeds::new().with("tokens", HostTensor::i64([b, t], tokens)?).with("targets", HostTensor::i64([b, t], targets)?))
}
