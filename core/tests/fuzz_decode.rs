//! A fuzzer over the decoder's calls, run as a test: small GPT decoders (batch 1 or 2, caches
//! of 1 to 10 positions over a model of 8) take random `generate`, `generate_sliding`, `step`,
//! `reset` and `encode` calls (and some decoders too large for any memory, refused when built) — prompts empty, long, of unequal lengths, with ids outside the
//! vocabulary or near `i64::MIN`/`i64::MAX`; `n` small or near `usize::MAX`; temperatures of 0,
//! NaN, ±inf, negative or tiny; top-k of 0, 1 or `usize::MAX`; parameters sometimes NaN. The
//! oracles, none of them read from the code under test:
//!
//! - nothing panics, and every call returns (every `n` is either small or refused);
//! - every error is one non-empty line of at most 800 characters;
//! - `generate` succeeds exactly when the rules say it can (valid sampling, one prompt per
//!   sequence of one length, prompt and generated tokens fitting the caches and the model's
//!   position table, ids inside the vocabulary, finite parameters);
//! - every success holds `n` ids per sequence inside the vocabulary, and the caches never hold
//!   more than `max_len` positions;
//! - greedy generation equals the argmax of the full-window forward pass run by `Inference`
//!   (up to ties within float error).
//!
//! `REMAT_FUZZ_CASES` (default 1000) sets the count, `REMAT_FUZZ_SEED` the first seed.

#[path = "../../benches/common/xorshift.rs"]
mod xorshift;

use remat_core::{
    CpuBackend, DType, Decoder, DecoderBuilder, Error, Feeds, HostTensor, Model, Params, Result, Sampling,
};
use remat_zoo::{self as zoo, GptConfig};
use std::panic::{catch_unwind, AssertUnwindSafe};
use xorshift::Rng;

const VOCAB: usize = 12;
const SEQ: usize = 8;

fn cfg(batch: usize) -> GptConfig {
    GptConfig { batch, seq: SEQ, d_model: 16, heads: 2, layers: 1, vocab: VOCAB, dropout: 0.0, dtype: DType::F32 }
}

fn env<T: std::str::FromStr>(key: &str) -> Option<T> {
    std::env::var(key).ok()?.parse().ok()
}

/// The trained model of each batch size and one set of parameter values for both.
struct Models {
    models: Vec<Model>,
    params: Vec<Params>,
}

impl Models {
    fn new() -> Models {
        let models: Vec<Model> = (1..=2).map(|b| Model::new(zoo::gpt(&cfg(b)).unwrap()).unwrap()).collect();
        let first = models[0].init_params(5).unwrap();
        let mut second = models[1].init_params(0).unwrap();
        for (name, value) in first.names().iter().zip(first.values()) {
            second.set(name, value.clone()).unwrap();
        }
        Models { models, params: vec![first, second] }
    }
}

fn id(rng: &mut Rng) -> i64 {
    match rng.below(10) {
        0 => *rng.pick(&[-1, i64::MIN, i64::MAX, VOCAB as i64, 1 << 40]),
        _ => rng.below(VOCAB) as i64,
    }
}

fn prompts(rng: &mut Rng, batch: usize) -> Vec<Vec<i64>> {
    let rows = if rng.chance(8) { *rng.pick(&[0, 1, 2, 3]) } else { batch };
    let len = *rng.pick(&[0, 1, 1, 2, 3, 5, 8, 9, 12]);
    (0..rows)
        .map(|_| {
            let len = if rng.chance(10) { rng.below(4) } else { len };
            (0..len).map(|_| id(rng)).collect()
        })
        .collect()
}

fn n(rng: &mut Rng) -> usize {
    match rng.below(8) {
        0 => *rng.pick(&[usize::MAX, usize::MAX - 1, usize::MAX - 7, usize::MAX / 2 + 1, usize::MAX / 8 + 3]),
        1 => 0,
        _ => 1 + rng.below(10),
    }
}

fn sampling(rng: &mut Rng) -> Sampling {
    let temperature = match rng.below(3) {
        0 => 0.0,
        1 => *rng.pick(&[0.5, 1.0, 2.0, 1e-30, 1e30, -0.0]),
        _ => *rng.pick(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -1e-300]),
    };
    let top_k = *rng.pick(&[None, None, Some(0), Some(1), Some(3), Some(VOCAB), Some(usize::MAX)]);
    Sampling { temperature, top_k, seed: rng.next() }
}

fn valid_sampling(s: &Sampling) -> bool {
    s.temperature.is_finite() && s.temperature >= 0.0 && s.top_k != Some(0)
}

fn check_error(what: &str, result: &Result<impl Sized>) -> std::result::Result<(), String> {
    if let Err(e) = result {
        let text = e.to_string();
        if text.is_empty() || text.contains('\n') || text.chars().count() > 800 {
            return Err(format!("{what}: not one short line: {text:?}"));
        }
    }
    Ok(())
}

/// The largest logit of the row, the first on ties, and whether another is within float error.
fn argmax(row: &[f32]) -> (i64, bool) {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    let near = row.iter().enumerate().any(|(i, &v)| i != best && (row[best] - v).abs() < 1e-4);
    (best as i64, near)
}

/// Greedy continuation of `prompts` by the cache-free forward pass over the whole window.
fn oracle_agrees(models: &Models, prompts: &[Vec<i64>], generated: &[Vec<i64>]) -> std::result::Result<(), String> {
    let batch = prompts.len();
    let (model, params) = (&models.models[batch - 1], &models.params[batch - 1]);
    let infer = model.inference(&["logits"]).map_err(|e| e.to_string())?;
    let mut text = prompts.to_vec();
    // `k` is a column of every sequence's tokens, not an index into one slice.
    #[allow(clippy::needless_range_loop)]
    for k in 0..generated[0].len() {
        let mut flat = vec![0i64; batch * SEQ];
        for (r, row) in text.iter().enumerate() {
            flat[r * SEQ..r * SEQ + row.len()].copy_from_slice(row);
        }
        let feeds = Feeds::new().with("tokens", HostTensor::i64([batch, SEQ], flat).unwrap());
        let logits =
            infer.run(&mut CpuBackend::new(), params, &feeds).map_err(|e| e.to_string())?.values[0].to_f32_vec();
        for (r, row) in text.iter_mut().enumerate() {
            let at = (r * SEQ + row.len() - 1) * VOCAB;
            let (best, tie) = argmax(&logits[at..at + VOCAB]);
            if best != generated[r][k] && !tie {
                return Err(format!(
                    "sequence {r}, token {k}: generated {}, the forward pass's argmax {best}",
                    generated[r][k]
                ));
            }
            row.push(generated[r][k]);
        }
    }
    Ok(())
}

/// Whether `generate` must succeed, by the rules stated in the module documentation.
fn generate_can(prompts: &[Vec<i64>], n: usize, s: &Sampling, batch: usize, max_len: usize, finite: bool) -> bool {
    let len = prompts.first().map_or(0, Vec::len);
    let shaped = prompts.len() == batch && len > 0 && prompts.iter().all(|p| p.len() == len);
    if !valid_sampling(s) || !shaped {
        return false;
    }
    if n == 0 {
        return true;
    }
    let positions = len as u128 + n as u128 - 1;
    let ids_ok = prompts.iter().flatten().all(|&t| (0..VOCAB as i64).contains(&t));
    positions <= max_len as u128 && positions <= SEQ as u128 && ids_ok && finite
}

/// What the cases did, to show the fuzzer reaches past the argument checks.
#[derive(Default, Debug)]
struct Counts {
    calls: u64,
    generated: u64,
    compared: u64,
    refused: u64,
    non_finite: u64,
}

fn one_case(rng: &mut Rng, models: &Models, counts: &mut Counts) -> std::result::Result<(), String> {
    let batch = 1 + rng.below(2);
    let max_len = *rng.pick(&[1, 2, 4, 7, 8, 8, 8, 10]);
    let mut params = models.params[batch - 1].clone();
    let finite = !rng.chance(8);
    if !finite {
        let head = params.get("head").unwrap().clone();
        let mut values = head.to_f32_vec();
        let k = rng.below(values.len());
        values[k] = *rng.pick(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        // A whole column of the head: that token's logit is non-finite whatever the input.
        for row in 0..values.len() / VOCAB {
            values[row * VOCAB + k % VOCAB] = values[k];
        }
        params.set("head", HostTensor::f32(head.shape().to_vec(), values).unwrap()).unwrap();
    }
    let mut cpu = CpuBackend::new();
    if rng.chance(20) {
        // Caches or a batch no memory holds: refused when built.
        let (b, m) = *rng.pick(&[(1, usize::MAX), (1, 1 << 40), (usize::MAX, 4), (1 << 30, 1 << 30), (0, 4), (1, 0)]);
        let c = cfg(b);
        let built = DecoderBuilder::new(b, m).build(&mut cpu, &params, |s| zoo::gpt_step(&c, s));
        check_error("build", &built)?;
        return if built.is_err() { Ok(()) } else { Err(format!("a decoder of batch {b}, max_len {m} was built")) };
    }
    let c = cfg(batch);
    let mut decoder: Decoder<'_, CpuBackend> = DecoderBuilder::new(batch, max_len)
        .build(&mut cpu, &params, |s| zoo::gpt_step(&c, s))
        .map_err(|e| e.to_string())?;
    for _ in 0..1 + rng.below(4) {
        counts.calls += 1;
        match rng.below(6) {
            0..=2 => {
                // Half the calls are well formed, so that generation itself is exercised.
                let (p, n, s) = if rng.chance(2) {
                    let len = 1 + rng.below(4);
                    let p = (0..batch).map(|_| (0..len).map(|_| rng.below(VOCAB) as i64).collect()).collect();
                    let s = if rng.chance(3) { sampling(rng) } else { Sampling::greedy() };
                    (p, 1 + rng.below(5), s)
                } else {
                    (prompts(rng, batch), n(rng), sampling(rng))
                };
                let sliding = rng.chance(3);
                let keep = *rng.pick(&[0, 1, max_len / 2, max_len, max_len + 1]);
                let result = if sliding {
                    // A sliding generation of more tokens than memory holds is refused, not run:
                    // only small `n` may succeed.
                    decoder.generate_sliding(&p, n, &s, keep)
                } else {
                    decoder.generate(&p, n, &s)
                };
                check_error("generate", &result)?;
                if let Err(e) = &result {
                    counts.refused += 1;
                    counts.non_finite +=
                        (matches!(e, Error::Decoder { .. }) && e.to_string().contains("non-finite logit")) as u64;
                }
                if decoder.position() > max_len {
                    return Err(format!("the caches hold {} positions of {max_len}", decoder.position()));
                }
                if !sliding && result.is_ok() != generate_can(&p, n, &s, batch, max_len, finite) {
                    return Err(format!("generate {p:?} n={n} {s:?} max_len {max_len} finite {finite}: {result:?}"));
                }
                if sliding && n > 1 << 20 && result.is_ok() {
                    return Err(format!("generate_sliding of {n} tokens succeeded"));
                }
                if let Ok(g) = result {
                    counts.generated += (n > 0) as u64;
                    if g.tokens.len() != batch || g.tokens.iter().any(|t| t.len() != n) {
                        return Err(format!("{n} tokens asked for, got {:?}", g.tokens));
                    }
                    if g.tokens.iter().flatten().any(|&t| !(0..VOCAB as i64).contains(&t)) {
                        return Err(format!("ids outside the vocabulary: {:?}", g.tokens));
                    }
                    if !sliding && s.temperature == 0.0 && n > 0 {
                        oracle_agrees(models, &p, &g.tokens)?;
                        counts.compared += 1;
                    }
                }
            }
            3 => {
                let tokens: Vec<i64> = (0..*rng.pick(&[batch, batch, 0, batch + 1])).map(|_| id(rng)).collect();
                let before = decoder.position();
                let result = decoder.step(&tokens);
                check_error("step", &result)?;
                if let Ok(logits) = &result {
                    if logits.len() != batch * VOCAB || decoder.position() != before + 1 || before >= max_len {
                        return Err(format!(
                            "step at {before}: {} logits, position now {}",
                            logits.len(),
                            decoder.position()
                        ));
                    }
                }
            }
            4 => {
                decoder.reset().map_err(|e| e.to_string())?;
            }
            _ => {
                let result = decoder.encode(&Feeds::new());
                check_error("encode", &result)?;
                if !matches!(result, Err(Error::Decoder { .. })) {
                    return Err(format!("encode on a decoder without an encoder: {result:?}"));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn random_decoder_calls_never_panic_hang_or_break_the_rules() {
    let models = Models::new();
    let cases: u64 = env("REMAT_FUZZ_CASES").unwrap_or(1000);
    let first: u64 = env("REMAT_FUZZ_SEED").unwrap_or(1);
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    let mut counts = Counts::default();
    for k in first..first + cases {
        let mut rng = Rng(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let outcome = catch_unwind(AssertUnwindSafe(|| one_case(&mut rng, &models, &mut counts)));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(m)) => failures.push(format!("case {k}: {m}")),
            Err(panic) => failures.push(format!(
                "case {k}: panic: {}",
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or(panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        }
        if failures.len() >= 10 {
            break;
        }
    }
    let _ = std::panic::take_hook();
    println!("{cases} random decoder cases: {counts:?}");
    assert!(failures.is_empty(), "{} failing cases:\n{}", failures.len(), failures.join("\n"));
    // The random calls must reach generation, not only its argument checks.
    assert!(counts.compared * 20 > cases && counts.non_finite > 0, "{counts:?}");
}
