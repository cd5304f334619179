//! Generation with and without the key/value cache: tokens per second and peak device bytes for
//! 64, 256 and 1024 generated tokens, greedy, after a 16-token prompt, on the gpt example's model
//! (4 layers, d_model 64, 4 heads, vocabulary 32; batch 1) with its learned position table as
//! long as the text.
//!
//! With the cache: a [`remat::Decoder`] whose caches hold the prompt and generated text (one
//! forward step per token over one token). Without: the cache-free call a user has without it,
//! [`remat::Model::inference`] on the whole window for every token (the text so far,
//! left-aligned; causal attention keeps the padding out). Both must generate the same tokens;
//! the bench checks it and prints the ratio of the rates measured in the same run.
//!
//! ```sh
//! cargo bench --bench decode            # 64, 256 and 1024 tokens (about a minute on 2 cores)
//! cargo bench --bench decode -- 64 256  # some of them
//! ```

use remat::{CpuBackend, DType, DecoderBuilder, Feeds, HostTensor, Model, Params, Sampling};
use remat_zoo::{self as zoo, GptConfig};
use std::time::Instant;

const PROMPT: usize = 16;

fn main() -> Result<(), remat::Error> {
    let filter: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    println!("generated  cache tok/s  no-cache tok/s  speed-up  cache peak KiB  no-cache peak KiB  same tokens");
    for n in [64, 256, 1024] {
        if !filter.is_empty() && !filter.contains(&n) {
            continue;
        }
        let seq = PROMPT + n - 1;
        let cfg =
            GptConfig { batch: 1, seq, d_model: 64, heads: 4, layers: 4, vocab: 32, dropout: 0.0, dtype: DType::F32 };
        let model = Model::new(zoo::gpt(&cfg)?)?;
        let params = model.init_params(0)?;
        let prompt: Vec<i64> = (0..PROMPT as i64).map(|i| (i * 7 + 3) % 32).collect();

        let mut cpu = CpuBackend::new();
        let mut decoder = DecoderBuilder::new(1, seq).build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s))?;
        let start = Instant::now();
        let cached = decoder.generate(std::slice::from_ref(&prompt), n, &Sampling::greedy())?;
        let cached_rate = n as f64 / start.elapsed().as_secs_f64();

        let start = Instant::now();
        let (plain, plain_peak) = cache_free(&model, &params, &cfg, &prompt, n)?;
        let plain_rate = n as f64 / start.elapsed().as_secs_f64();

        println!(
            "{n:>9}  {cached_rate:>11.0}  {plain_rate:>14.1}  {:>7.1}x  {:>14.1}  {:>17.1}  {}",
            cached_rate / plain_rate,
            cached.measured_peak as f64 / 1024.0,
            plain_peak as f64 / 1024.0,
            if plain == cached.tokens[0] { "yes" } else { "NO" }
        );
    }
    Ok(())
}

/// Greedy generation with the forward-only call over the whole window per token; the tokens and
/// the largest measured peak.
fn cache_free(
    model: &Model,
    params: &Params,
    cfg: &GptConfig,
    prompt: &[i64],
    n: usize,
) -> Result<(Vec<i64>, usize), remat::Error> {
    let infer = model.inference(&["logits"])?;
    let (t, v) = (cfg.seq, cfg.vocab);
    let mut cpu = CpuBackend::new();
    let mut text = prompt.to_vec();
    let mut peak = 0;
    for _ in 0..n {
        let mut window = text.clone();
        window.resize(t, 0);
        let feeds = Feeds::new().with("tokens", HostTensor::i64([1, t], window)?);
        let out = infer.run(&mut cpu, params, &feeds)?;
        peak = peak.max(out.measured_peak);
        let logits = out.values[0].to_f32_vec();
        let last = &logits[(text.len() - 1) * v..text.len() * v];
        text.push((0..v).fold(0, |b, i| if last[i] > last[b] { i } else { b }) as i64);
    }
    Ok((text[prompt.len()..].to_vec(), peak))
}
