//! Generation with a key/value cache against the cache-free forward pass: the same logits at
//! every position (to 1e-5), the same greedy tokens, reproducible sampling, an encoder run once,
//! exact peaks, and errors that name what is wrong.

use remat_core::{
    AdamW, AttnLayout, Backend, CpuBackend, DType, DecodeStep, Decoder, DecoderBuilder, Error, Feeds, HostTensor, Init,
    Model, Params, Sampling, Tensor, Trace, TrainOptions, TrainState,
};
use remat_zoo::{self as zoo, GptConfig};

/// The text of `err`, which must be a decoder's misuse ([`Error::Decoder`]).
fn misuse(err: Error) -> String {
    assert!(matches!(err, Error::Decoder { .. }), "not a decoder misuse: {err:?}");
    err.to_string()
}

fn gpt_config(batch: usize) -> GptConfig {
    GptConfig { batch, seq: 12, d_model: 16, heads: 2, layers: 2, vocab: 24, dropout: 0.1, dtype: DType::F32 }
}

/// Tokens `[rows, len]` from a fixed pseudo-random sequence.
fn tokens(rows: usize, len: usize, vocab: usize, salt: u64) -> Vec<Vec<i64>> {
    (0..rows)
        .map(|r| (0..len as u64).map(|i| (remat_core::uniform_u32(salt, r as u64, i) % vocab as u32) as i64).collect())
        .collect()
}

/// The cache-free logits `[rows, seq, vocab]` of the trained GPT over `rows` (each padded with
/// zeros to the traced length: causal attention keeps the padding out of earlier positions).
fn cache_free_logits(model: &Model, params: &Params, cfg: &GptConfig, rows: &[Vec<i64>]) -> Vec<f32> {
    let t = cfg.seq;
    let mut flat = vec![0i64; cfg.batch * t];
    for (r, row) in rows.iter().enumerate() {
        flat[r * t..r * t + row.len()].copy_from_slice(row);
    }
    let feeds = Feeds::new().with("tokens", HostTensor::i64([cfg.batch, t], flat).unwrap());
    let infer = model.inference(&["logits"]).unwrap();
    infer.run(&mut CpuBackend::new(), params, &feeds).unwrap().values[0].to_f32_vec()
}

fn trained_gpt(cfg: &GptConfig) -> (Model, Params) {
    let model = Model::new(zoo::gpt(cfg).unwrap()).unwrap();
    let params = model.init_params(7).unwrap();
    (model, params)
}

/// Feeds `rows` (one per sequence, all of one length) through `decoder` a position at a time and
/// returns the largest difference between its logits and `full`, the cache-free logits
/// `[rows, len, vocab]` of the same tokens.
fn largest_step_difference(decoder: &mut Decoder<'_, CpuBackend>, rows: &[Vec<i64>], full: &[f32]) -> f32 {
    let (t, v) = (rows[0].len(), decoder.vocab());
    let mut worst = 0f32;
    for pos in 0..t {
        let column: Vec<i64> = rows.iter().map(|r| r[pos]).collect();
        let logits = decoder.step(&column).unwrap();
        for r in 0..rows.len() {
            let expected = &full[(r * t + pos) * v..(r * t + pos + 1) * v];
            for (a, b) in logits[r * v..(r + 1) * v].iter().zip(expected) {
                worst = worst.max((a - b).abs());
            }
        }
    }
    worst
}

fn first_argmax(row: &[f32]) -> i64 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as i64
}

#[test]
fn cached_logits_equal_the_cache_free_forward_at_every_position() {
    let cfg = gpt_config(2);
    let (model, params) = trained_gpt(&cfg);
    let rows = tokens(2, cfg.seq, cfg.vocab, 1);
    let full = cache_free_logits(&model, &params, &cfg, &rows);
    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(2, cfg.seq).build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s)).unwrap();
    let worst = largest_step_difference(&mut decoder, &rows, &full);
    assert!(worst <= 1e-5, "largest logit difference {worst}");
    assert_eq!(decoder.position(), cfg.seq);
    let err = misuse(decoder.step(&[0, 0]).unwrap_err());
    assert!(err.contains("hold 12 positions"), "{err}");
}

#[test]
fn greedy_generation_equals_the_cache_free_loop() {
    let cfg = gpt_config(2);
    let (model, params) = trained_gpt(&cfg);
    let prompts = tokens(2, 3, cfg.vocab, 2);
    let n = cfg.seq - 3 + 1;
    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(2, cfg.seq).build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s)).unwrap();
    let generated = decoder.generate(&prompts, n, &Sampling::greedy()).unwrap();
    assert_eq!(generated.steps, cfg.seq);

    let mut text = prompts.clone();
    for _ in 0..n {
        let full = cache_free_logits(&model, &params, &cfg, &text);
        for (r, row) in text.iter_mut().enumerate() {
            let at = (r * cfg.seq + row.len() - 1) * cfg.vocab;
            row.push(first_argmax(&full[at..at + cfg.vocab]));
        }
    }
    for (r, row) in text.iter().enumerate() {
        assert_eq!(generated.tokens[r], row[3..], "row {r}");
    }
    // The plan's peak is the backend's, and what the decoder holds (parameters and caches) is
    // below it.
    assert_eq!(generated.measured_peak, generated.predicted_peak);
    let cache_bytes = 2 * cfg.layers * 2 * cfg.d_model * cfg.seq * 4;
    let param_bytes: usize = params.values().iter().map(HostTensor::bytes).sum();
    assert_eq!(decoder.held_bytes(), cache_bytes + param_bytes);
    assert!(generated.predicted_peak > decoder.held_bytes());
}

/// A decoder built from a training state reads the state's buffers: building it moves no
/// parameter and allocates only the caches, and it generates what a decoder given the same
/// parameters from the host generates, with the same exact peak.
#[test]
fn a_decoder_from_a_training_state_borrows_its_parameters() {
    let cfg = gpt_config(2);
    let (model, _) = trained_gpt(&cfg);
    let mut cpu = CpuBackend::new();
    let options = TrainOptions::from(&AdamW::new(1e-2));
    let mut state = TrainState::new(&mut cpu, &model, &model.init_params(3).unwrap(), options).unwrap();
    for step in 0..2 {
        state.step(&mut cpu, &model, &zoo::synthetic_tokens(&cfg, step).unwrap(), step).unwrap();
    }
    let host_params = state.params(&mut cpu).unwrap();
    let prompts = tokens(2, 3, cfg.vocab, 4);
    let n = cfg.seq - 3 + 1;
    let mut other = CpuBackend::new();
    let mut from_host =
        DecoderBuilder::new(2, cfg.seq).build(&mut other, &host_params, |s| zoo::gpt_step(&cfg, s)).unwrap();
    let want = from_host.generate(&prompts, n, &Sampling::greedy()).unwrap();

    // Building from the host uploads the parameters, the constants and the zeroed caches; from
    // the state, all but the parameters.
    let build_moves = |cpu: &mut CpuBackend, from_state: bool| {
        let before = cpu.transfers();
        let built = match from_state {
            true => DecoderBuilder::new(2, cfg.seq).build_from_state(cpu, &state, |s| zoo::gpt_step(&cfg, s)),
            false => DecoderBuilder::new(2, cfg.seq).build(cpu, &host_params, |s| zoo::gpt_step(&cfg, s)),
        };
        drop(built.unwrap());
        cpu.transfers().since(before).to_device_bytes as usize
    };
    assert_eq!(build_moves(&mut cpu, true), build_moves(&mut cpu, false) - state.param_bytes());
    let live = cpu.memory().live_bytes;
    let mut decoder =
        DecoderBuilder::new(2, cfg.seq).build_from_state(&mut cpu, &state, |s| zoo::gpt_step(&cfg, s)).unwrap();
    let got = decoder.generate(&prompts, n, &Sampling::greedy()).unwrap();
    assert_eq!(got.tokens, want.tokens);
    assert_eq!((got.measured_peak, got.predicted_peak), (want.measured_peak, want.predicted_peak));
    assert_eq!(decoder.held_bytes(), from_host.held_bytes());
    drop(decoder);
    // Dropped, the decoder freed its caches and constants and left the state's buffers alone.
    assert_eq!(cpu.memory().live_bytes, live);
    // A decoder whose parameter the state lacks names it.
    let wider = GptConfig { d_model: 32, ..cfg.clone() };
    let err =
        DecoderBuilder::new(2, cfg.seq).build_from_state(&mut cpu, &state, |s| zoo::gpt_step(&wider, s)).err().unwrap();
    assert!(err.to_string().contains("[32") || err.to_string().contains("32]"), "{err}");
}

#[test]
fn sampling_is_reproducible_and_top_one_is_greedy() {
    let cfg = gpt_config(1);
    let (_, params) = trained_gpt(&cfg);
    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(1, cfg.seq).build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s)).unwrap();
    let prompt = tokens(1, 2, cfg.vocab, 3);
    let mut run = |s: Sampling| decoder.generate(&prompt, 10, &s).unwrap().tokens;
    let hot = Sampling::temperature(5.0, 11);
    assert_eq!(run(hot), run(hot), "the same seed gives the same text");
    let others: Vec<_> = (12..16).map(|seed| run(Sampling::temperature(5.0, seed))).collect();
    assert!(others.iter().any(|o| *o != run(hot)), "other seeds draw other text");
    assert_eq!(run(Sampling::temperature(5.0, 3).top_k(1)), run(Sampling::greedy()));
    let err = misuse(decoder.generate(&prompt, 4, &Sampling::temperature(-0.5, 0)).unwrap_err());
    assert!(err.contains("temperature"), "{err}");
}

// ---- An encoder-decoder: the encoder runs once, its outputs serve every step ----

const D: usize = 16;
const HEADS: usize = 2;
const VOCAB: usize = 20;

struct Layer {
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    cq: Tensor,
    ck: Tensor,
    cv: Tensor,
    co: Tensor,
    w1: Tensor,
    w2: Tensor,
    g: Tensor,
}

fn layer(trace: &Trace, l: usize) -> Layer {
    let p = |n: &str, shape: &[usize]| trace.param_with(&format!("dec{l}.{n}"), shape, DType::F32, Init::Auto);
    Layer {
        wq: p("wq", &[D, D]),
        wk: p("wk", &[D, D]),
        wv: p("wv", &[D, D]),
        wo: p("wo", &[D, D]),
        cq: p("cq", &[D, D]),
        ck: p("ck", &[D, D]),
        cv: p("cv", &[D, D]),
        co: p("co", &[D, D]),
        w1: p("w1", &[D, 2 * D]),
        w2: p("w2", &[2 * D, D]),
        g: trace.param_with(&format!("dec{l}.g"), &[D], DType::F32, Init::Ones),
    }
}

fn heads(x: &Tensor) -> Tensor {
    let s = x.shape();
    x.reshape(&[s[0], s[1], HEADS, D / HEADS])
}

fn merge(x: &Tensor) -> Tensor {
    let s = x.shape();
    x.reshape(&[s[0], s[1], D])
}

fn scale() -> f64 {
    1.0 / ((D / HEADS) as f64).sqrt()
}

/// The encoder: embedding, one non-causal self-attention, RMSNorm: `memory` `[b, s, D]`.
fn encode(trace: &Trace, source: &Tensor) -> Tensor {
    let emb = trace.param_with("src_embed", &[VOCAB, D], DType::F32, Init::Normal(0.5));
    let (wq, wk, wv) = (trace.param("enc.wq", &[D, D], DType::F32), trace.param("enc.wk", &[D, D], DType::F32), {
        trace.param("enc.wv", &[D, D], DType::F32)
    });
    let x = emb.embedding(source);
    let a = Tensor::scaled_dot_product_attention_in(
        AttnLayout::TokenMajor,
        &heads(&x.matmul(&wq)),
        &heads(&x.matmul(&wk)),
        &heads(&x.matmul(&wv)),
        false,
        scale(),
    );
    (&x + &merge(&a)).rms_norm(1e-6)
}

/// Cross-attention keys and values of layer `l` from the encoder's memory.
fn cross_kv(memory: &Tensor, p: &Layer) -> (Tensor, Tensor) {
    (heads(&memory.matmul(&p.ck)), heads(&memory.matmul(&p.cv)))
}

/// A decoder layer after self-attention `attn`: cross-attention to (ck, cv), then an MLP.
fn decoder_rest(x: &Tensor, p: &Layer, ck: &Tensor, cv: &Tensor) -> Tensor {
    let q = heads(&x.rms_norm(1e-6).matmul(&p.cq));
    let c = Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, &q, ck, cv, false, scale());
    let x = x + &merge(&c).matmul(&p.co);
    let h = &x.rms_norm(1e-6) * &p.g;
    &x + &h.matmul(&p.w1).silu().matmul(&p.w2)
}

const LAYERS: usize = 2;

/// The whole model for training shapes: source `[b, s]`, target tokens `[b, t]`.
fn seq2seq(b: usize, s: usize, t: usize) -> remat_core::Graph {
    let trace = Trace::new();
    let source = trace.input("source", &[b, s], DType::I64);
    let target = trace.input("tokens", &[b, t], DType::I64);
    let labels = trace.input("labels", &[b, t], DType::I64);
    let memory = encode(&trace, &source);
    let emb = trace.param_with("tgt_embed", &[VOCAB, D], DType::F32, Init::Normal(0.5));
    let mut x = emb.embedding(&target);
    for l in 0..LAYERS {
        let p = layer(&trace, l);
        let n = x.rms_norm(1e-6);
        let (q, k, v) = (heads(&n.matmul(&p.wq)), heads(&n.matmul(&p.wk)), heads(&n.matmul(&p.wv)));
        let a = Tensor::scaled_dot_product_attention_in(AttnLayout::TokenMajor, &q, &k, &v, true, scale());
        x = &x + &merge(&a).matmul(&p.wo);
        let (ck, cv) = cross_kv(&memory, &p);
        x = decoder_rest(&x, &p, &ck, &cv);
    }
    let out = trace.param("out", &[D, VOCAB], DType::F32);
    let logits = x.matmul(&out).name("logits");
    trace.finish(&logits.cross_entropy(&labels)).unwrap()
}

/// One step of [`seq2seq`]'s decoder, reading the encoder's per-layer cross keys and values.
fn seq2seq_step(step: &DecodeStep) -> Tensor {
    let trace = step.trace();
    let emb = trace.param_with("tgt_embed", &[VOCAB, D], DType::F32, Init::Normal(0.5));
    let mut x = emb.embedding(step.tokens());
    for l in 0..LAYERS {
        let p = layer(trace, l);
        let n = x.rms_norm(1e-6);
        let (q, k, v) = (heads(&n.matmul(&p.wq)), heads(&n.matmul(&p.wk)), heads(&n.matmul(&p.wv)));
        x = &x + &merge(&step.attend(&format!("dec{l}.self"), &q, &k, &v, scale())).matmul(&p.wo);
        let (ck, cv) = (step.context(&format!("dec{l}.cross_k")), step.context(&format!("dec{l}.cross_v")));
        x = decoder_rest(&x, &p, &ck, &cv);
    }
    x.matmul(&trace.param("out", &[D, VOCAB], DType::F32))
}

/// The encoder as a decoder runs it: the memory's cross keys and values for every layer.
fn seq2seq_encoder(trace: &Trace, b: usize, s: usize) -> Vec<Tensor> {
    let source = trace.input("source", &[b, s], DType::I64);
    let memory = encode(trace, &source);
    let mut outputs = Vec::new();
    for l in 0..LAYERS {
        let (ck, cv) = cross_kv(&memory, &layer(trace, l));
        outputs.push(ck.name(&format!("dec{l}.cross_k")));
        outputs.push(cv.name(&format!("dec{l}.cross_v")));
    }
    outputs
}

#[test]
fn an_encoder_runs_once_and_its_outputs_serve_every_step() {
    let (b, s, t) = (2, 5, 9);
    let model = Model::new(seq2seq(b, s, t)).unwrap();
    let params = model.init_params(4).unwrap();
    let source = tokens(b, s, VOCAB, 5).concat();
    let source = HostTensor::i64([b, s], source).unwrap();
    let target = tokens(b, t, VOCAB, 6);
    let feeds =
        Feeds::new().with("source", source.clone()).with("tokens", HostTensor::i64([b, t], target.concat()).unwrap());
    let full = model.inference(&["logits"]).unwrap().run(&mut CpuBackend::new(), &params, &feeds).unwrap().values[0]
        .to_f32_vec();

    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(b, t)
        .encoder(|trace| seq2seq_encoder(trace, b, s))
        .build(&mut cpu, &params, seq2seq_step)
        .unwrap();
    // No step before the encoder has run; then the encoder's outputs are inputs of the step,
    // and nothing of the encoder (its source, its parameters) is.
    let err = misuse(decoder.step(&[1, 2]).unwrap_err());
    assert!(err.contains("encode"), "{err}");
    let graph = decoder.step_graph();
    let step_inputs: Vec<String> = graph.inputs().iter().map(|&i| graph.leaf_name(i)).collect();
    assert!(step_inputs.contains(&"dec1.cross_v".to_string()) && !step_inputs.contains(&"source".to_string()));
    assert!(!graph.params().iter().any(|&p| graph.leaf_name(p).starts_with("enc.")));

    decoder.encode(&Feeds::new().with("source", source)).unwrap();
    let worst = largest_step_difference(&mut decoder, &target, &full);
    assert!(worst <= 1e-5, "largest logit difference {worst}");
    let generated = decoder.generate(&[vec![1], vec![2]], t, &Sampling::greedy()).unwrap();
    assert_eq!(generated.measured_peak, generated.predicted_peak);
}

// ---- What a user can get wrong ----

#[test]
fn mistakes_are_errors_that_name_the_problem() {
    let cfg = gpt_config(1);
    let (_, params) = trained_gpt(&cfg);
    let mut cpu = CpuBackend::new();
    let build = |cpu: &mut CpuBackend, f: &dyn Fn(&DecodeStep) -> Tensor| {
        DecoderBuilder::new(1, cfg.seq).build(cpu, &params, f).map(|_| ()).unwrap_err()
    };
    // A parameter declared with another shape than the trained one.
    let wider = GptConfig { vocab: 30, ..cfg.clone() };
    let err = build(&mut cpu, &|s| zoo::gpt_step(&wider, s)).to_string();
    assert!(err.contains("`wte`") && err.contains("[24, 16]") && err.contains("[30, 16]"), "{err}");
    // A parameter the trained model does not have.
    let err = build(&mut cpu, &|s| s.trace().param("wtee", &[2, 2], DType::F32).sum(&[1], false).reshape(&[1, 2]))
        .to_string();
    assert!(err.contains("`wtee`") && err.contains("did you mean `wte`"), "{err}");
    // Logits of the wrong shape; an encoder output that does not exist; q, k, v of a sequence.
    let err = misuse(build(&mut cpu, &|s| s.tokens().cast(DType::F32).reshape(&[1])));
    assert!(err.contains("logits [1, vocab]"), "{err}");
    let err = build(&mut cpu, &|s| s.context("memory")).to_string();
    assert!(err.contains("no encoder"), "{err}");
    let err = build(&mut cpu, &|s| {
        let q = s.trace().input("q", &[1, 4, 2, 8], DType::F32);
        s.attend("a", &q, &q, &q, 1.0).reshape(&[1, 64])
    })
    .to_string();
    assert!(err.contains("cache `a`") && err.contains("decode.rs"), "{err}");

    let mut decoder = DecoderBuilder::new(1, cfg.seq).build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s)).unwrap();
    let err = misuse(decoder.step(&[1, 2]).unwrap_err());
    assert!(err.contains("one token per sequence"), "{err}");
    let err = misuse(decoder.generate(&[vec![1; 8]], 6, &Sampling::greedy()).unwrap_err());
    assert!(err.contains("need 13 positions") && err.contains("hold 12"), "{err}");
    let err = decoder.step(&[cfg.vocab as i64 + 3]).unwrap_err().to_string();
    assert!(err.contains("embedding"), "{err}");
    // The failed step took the caches over: a reset makes them again, and decoding goes on.
    assert!(misuse(decoder.step(&[1]).unwrap_err()).contains("reset()"));
    decoder.reset().unwrap();
    assert_eq!(decoder.step(&[1]).unwrap().len(), cfg.vocab);
    let err = misuse(decoder.encode(&Feeds::new()).unwrap_err());
    assert!(err.contains("no encoder"), "{err}");
}

#[test]
fn sliding_generation_is_passes_of_plain_generation() {
    let cfg = gpt_config(2);
    let (_, params) = trained_gpt(&cfg);
    let (max_len, keep, n) = (6, 3, 14);
    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(2, max_len).build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s)).unwrap();
    let prompts = tokens(2, 2, cfg.vocab, 8);
    let slid = decoder.generate_sliding(&prompts, n, &Sampling::greedy(), keep).unwrap();
    // The same by hand: a pass as long as the caches allow, then passes over the last `keep`.
    let mut text = prompts.clone();
    let mut context = prompts.clone();
    while text[0].len() - 2 < n {
        let room = (max_len + 1 - context[0].len()).min(n - (text[0].len() - 2));
        let pass = decoder.generate(&context, room, &Sampling::greedy()).unwrap();
        for r in 0..2 {
            text[r].extend_from_slice(&pass.tokens[r]);
            context[r] = text[r][text[r].len() - keep..].to_vec();
        }
    }
    for (r, row) in text.iter().enumerate() {
        assert_eq!(slid.tokens[r], row[2..], "row {r}");
    }
    assert_eq!(slid.measured_peak, slid.predicted_peak);
    let err = misuse(decoder.generate(&prompts, n, &Sampling::greedy()).unwrap_err());
    assert!(err.contains("generate_sliding"), "{err}");
    let err = misuse(decoder.generate_sliding(&prompts, n, &Sampling::greedy(), 0).unwrap_err());
    assert!(err.contains("kept per pass (0)"), "{err}");
}

// ---- Refusing what the decoder cannot do (issue 45) ----

/// The reproducers' model: one layer, d16, a vocabulary of 12, caches of 8 positions.
fn small_gpt() -> (GptConfig, Params) {
    let cfg =
        GptConfig { batch: 1, seq: 8, d_model: 16, heads: 2, layers: 1, vocab: 12, dropout: 0.0, dtype: DType::F32 };
    let params = Model::new(zoo::gpt(&cfg).unwrap()).unwrap().init_params(3).unwrap();
    (cfg, params)
}

/// `len + n - 1` once wrapped for `n = usize::MAX`: the check passed and generation looped
/// forever. Now the positions are counted without wrapping, and a sliding generation of more
/// tokens than memory holds is refused before its first step.
#[test]
fn a_huge_n_is_refused_at_once() {
    let (cfg, params) = small_gpt();
    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(1, 8).build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s)).unwrap();
    for n in [usize::MAX, usize::MAX - 1, usize::MAX / 2 + 1] {
        let err = misuse(decoder.generate(&[vec![1, 2, 3]], n, &Sampling::greedy()).unwrap_err());
        let needed = 3u128 + n as u128 - 1;
        assert!(err.contains(&format!("need {needed} positions (3 + {n} - 1")) && err.contains("hold 8"), "{err}");
        let err = decoder.generate_sliding(&[vec![1, 2, 3]], n, &Sampling::greedy(), 4).unwrap_err().to_string();
        assert!(err.starts_with("cannot allocate") && err.contains(&format!("{n} generated tokens")), "{err}");
        assert_eq!(decoder.position(), 0, "no step ran");
    }
}

/// The refusal's numbers add up; `n = 0` runs nothing and returns no tokens, whatever the
/// prompt's length.
#[test]
fn the_refusal_counts_positions_right_and_n_zero_is_nothing() {
    let (cfg, params) = small_gpt();
    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(1, 8).build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s)).unwrap();
    let none = decoder.generate(&[vec![1; 9]], 0, &Sampling::greedy()).unwrap();
    assert_eq!((none.tokens, none.steps), (vec![Vec::<i64>::new()], 0));
    let err = misuse(decoder.generate(&[vec![1; 9]], 1, &Sampling::greedy()).unwrap_err());
    assert!(err.contains("a prompt of 9 tokens and 1 generated need 9 positions (9 + 1 - 1"), "{err}");
    let err = misuse(decoder.generate(&[vec![1; 8]], 2, &Sampling::greedy()).unwrap_err());
    assert!(err.contains("need 9 positions (8 + 2 - 1") && err.contains("the caches hold 8"), "{err}");
    // The limit itself fits: 8 prompt tokens and 1 generated take 8 positions; 1 and 8 too.
    assert_eq!(decoder.generate(&[vec![1; 8]], 1, &Sampling::greedy()).unwrap().steps, 8);
    assert_eq!(decoder.generate(&[vec![1]], 8, &Sampling::greedy()).unwrap().tokens[0].len(), 8);
}

/// Non-finite logits are an error naming the generated token, the step's position and the
/// sequence, under greedy and sampling (a NaN head once gave `[0, 0, 0]` greedy and
/// `[11, 11, 11]` at temperature 1, silently).
#[test]
fn non_finite_logits_are_an_error_naming_the_step() {
    let (cfg, mut params) = small_gpt();
    let head = params.get("head").unwrap().clone();
    params.set("head", HostTensor::f32(head.shape().to_vec(), vec![f32::NAN; head.numel()]).unwrap()).unwrap();
    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(1, 8).build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s)).unwrap();
    for sampling in [Sampling::greedy(), Sampling::temperature(1.0, 2), Sampling::temperature(0.5, 1).top_k(3)] {
        let err = misuse(decoder.generate(&[vec![1, 2, 3]], 3, &sampling).unwrap_err());
        assert!(
            err.starts_with("generated token 0 (the step at position 2), sequence 0: the logit of token 0 is NaN"),
            "{sampling:?}: {err}"
        );
    }

    // Finite for the first two positions, NaN from the third: the error names the third.
    let (_, params) = small_gpt();
    let late = |s: &DecodeStep| (-s.position().cast(DType::F32) + 1.5).sqrt().reshape(&[1, 1]).expand(&[1, 4]);
    let mut decoder = DecoderBuilder::new(1, 8).build(&mut cpu, &params, late).unwrap();
    let err = misuse(decoder.generate(&[vec![0]], 5, &Sampling::greedy()).unwrap_err());
    assert!(
        err.starts_with("generated token 2 (the step at position 2), sequence 0: the logit of token 0 is NaN"),
        "{err}"
    );
    // Infinite, and only in the second sequence.
    let (_, params) = small_gpt();
    let by_token = |s: &DecodeStep| (-s.tokens().cast(DType::F32) + 1.0).log().expand(&[2, 4]);
    let mut decoder = DecoderBuilder::new(2, 8).build(&mut cpu, &params, by_token).unwrap();
    let err = misuse(decoder.generate(&[vec![0], vec![1]], 2, &Sampling::temperature(1.0, 0)).unwrap_err());
    assert!(
        err.starts_with("generated token 0 (the step at position 0), sequence 1: the logit of token 0 is -inf"),
        "{err}"
    );
}

/// An encoder that returns nothing could never be used (its declared input was refused, and
/// the step then asked for `encode` forever): it is refused when the decoder is built.
#[test]
fn an_encoder_without_outputs_is_refused_at_build() {
    let (cfg, params) = small_gpt();
    let mut cpu = CpuBackend::new();
    let built = DecoderBuilder::new(1, 8)
        .encoder(|trace| {
            let _source = trace.input("source", &[1, 4], DType::F32);
            vec![]
        })
        .build(&mut cpu, &params, |s| zoo::gpt_step(&cfg, s));
    let err = misuse(built.map(|_| ()).unwrap_err());
    assert!(err.starts_with("the encoder returns no outputs"), "{err}");
}

/// Every feed of `encode` is checked against the encoder's declared inputs, read by its
/// outputs or not; an unknown name lists the declared ones.
#[test]
fn encoder_feeds_are_checked_against_every_declared_input() {
    let (_, params) = small_gpt();
    let mut cpu = CpuBackend::new();
    let mut decoder = DecoderBuilder::new(1, 8)
        .encoder(|trace| {
            let source = trace.input("source", &[1, 4], DType::F32);
            let _hint = trace.input("hint", &[2], DType::F32);
            vec![source.tanh().name("memory")]
        })
        .build(&mut cpu, &params, |s| s.context("memory").reshape(&[1, 4]))
        .unwrap();
    let source = || HostTensor::f32([1, 4], vec![0.5; 4]).unwrap();
    let err = decoder
        .encode(&Feeds::new().with("source", source()).with("hint", HostTensor::i64([2], vec![1, 2]).unwrap()))
        .unwrap_err()
        .to_string();
    assert_eq!(err, "input `hint`: declared [2] f32, got [2] i64");
    let err = decoder.encode(&Feeds::new().with("sourse", source())).unwrap_err().to_string();
    assert_eq!(err, "input `sourse`: not an input of the encoder (it declares: `source`, `hint`)");
    decoder.encode(&Feeds::new().with("source", source())).unwrap();
    let logits = decoder.step(&[1]).unwrap();
    assert!(logits.iter().all(|&l| (l - 0.5f32.tanh()).abs() < 1e-6), "{logits:?}");
}

/// Caches or batches no memory holds are errors when the decoder is built, not panics or aborts
/// (a cache of more than 2^64 bytes once reached the graph's debug check, a panic).
#[test]
fn huge_caches_are_refused_at_build() {
    let (cfg, params) = small_gpt();
    let mut cpu = CpuBackend::new();
    for (batch, max_len) in [(1, usize::MAX), (1, 1 << 40), (usize::MAX, 8), (1 << 40, 8), (1 << 20, 1 << 20)] {
        let c = GptConfig { batch, ..cfg.clone() };
        let built = DecoderBuilder::new(batch, max_len).build(&mut cpu, &params, |s| zoo::gpt_step(&c, s));
        let err = built.map(|_| ()).unwrap_err().to_string();
        let named = err.contains("is more than 2^64 bytes") || err.starts_with("cannot allocate");
        assert!(named && !err.contains('\n'), "batch {batch}, max_len {max_len}: {err}");
    }
}
