//! The trace of one decoding step: one token per sequence, its position, and the per-layer
//! key/value caches the step reads and updates.

use crate::dtype::DType;
use crate::graph::SrcLoc;
use crate::shape::fmt_shape;
use crate::tensor::Tensor;
use crate::trace::Trace;
use std::cell::RefCell;

/// What a step function records on: the token of each sequence at this step, its position,
/// attention through a key/value cache, and the encoder's outputs. Parameters and constants are
/// declared on [`DecodeStep::trace`] under the names the trained model gave them.
///
/// The step is traced once, for `[batch, 1]` tokens, and run once per generated token.
pub struct DecodeStep {
    trace: Trace,
    batch: usize,
    max_len: usize,
    tokens: Tensor,
    position: Tensor,
    caches: RefCell<Vec<Cache>>,
    contexts: Vec<Context>,
}

/// A cache the step reads (`input`, the buffer before this step) and its updated value.
pub(crate) struct Cache {
    pub input: Tensor,
    pub updated: Tensor,
}

/// An encoder output the step may read.
#[derive(Clone, Debug)]
pub(crate) struct Context {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: DType,
}

/// Names of the step's own inputs.
pub(crate) const TOKENS: &str = "tokens";
pub(crate) const POSITION: &str = "position";

impl DecodeStep {
    pub(crate) fn new(batch: usize, max_len: usize, contexts: Vec<Context>) -> DecodeStep {
        let trace = Trace::new();
        let tokens = trace.input(TOKENS, &[batch, 1], DType::I64);
        let position = trace.input(POSITION, &[1], DType::I64);
        DecodeStep { trace, batch, max_len, tokens, position, caches: RefCell::new(Vec::new()), contexts }
    }

    /// The trace the step records on: declare parameters (`trace.param(..)`, with the trained
    /// model's names, shapes and dtypes) and constants here.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The token of each sequence at this step: `[batch, 1]` i64.
    pub fn tokens(&self) -> &Tensor {
        &self.tokens
    }

    /// The position of this step's tokens (0 for a prompt's first): `[1]` i64. Index position
    /// tables with it (`wpe.index_select(0, step.position())`).
    pub fn position(&self) -> &Tensor {
        &self.position
    }

    /// Sequences decoded at once.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Positions the caches hold: the longest prompt plus generated text, less one.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Causal attention of this step's query over the keys and values of every position so far,
    /// through the key/value cache `name` (one per attention layer; `"h0.attn"`).
    ///
    /// `q`, `k`, `v` are this step's, token-major `[batch, 1, heads, head_dim]` as the fused
    /// attention takes them ([`crate::AttnLayout::TokenMajor`]); the result is the context in
    /// the same layout. `k` and `v` are written into the cache at [`DecodeStep::position`]
    /// (the cache is two inputs of the step, `<name>.k` `[batch, heads, head_dim, max_len]`
    /// and `<name>.v` `[batch, heads, max_len, head_dim]`, kept on the device between steps);
    /// the query then attends to positions `0..=position`, scaled by `scale`
    /// (`1/√head_dim` for the usual attention). The positions after it are masked out.
    #[track_caller]
    pub fn attend(&self, name: &str, q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Tensor {
        let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
        let step_shaped = |s: &[usize]| s.len() == 4 && s[0] == self.batch && s[1] == 1;
        let problem = if !(step_shaped(&qs) && step_shaped(&ks) && step_shaped(&vs)) {
            Some(format!("q, k and v must be [{}, 1, heads, head_dim] (one token per sequence)", self.batch))
        } else if qs != ks || ks[2] != vs[2] {
            Some("q and k must have one shape, and v the same heads".to_string())
        } else if q.dtype() != k.dtype() || k.dtype() != v.dtype() {
            Some("q, k and v must have one dtype".to_string())
        } else {
            None
        };
        if let Some(problem) = problem {
            let shapes = [(qs, q.dtype()), (ks.clone(), k.dtype()), (vs.clone(), v.dtype())];
            let shapes: Vec<String> = shapes.iter().map(|(s, d)| format!("{} {d}", fmt_shape(s))).collect();
            let loc = SrcLoc::from_caller(std::panic::Location::caller());
            let message = format!("cache `{name}`: {problem} (got {})", shapes.join(", "));
            self.trace.state.borrow_mut().fail("attend", loc, message);
            let guess = if q.rank() == 4 { q.shape() } else { vec![self.batch, 1, 1, 1] };
            return Tensor::poisoned_in(&self.trace.state, (guess, q.dtype()));
        }
        let (b, h, dh, dv, l) = (ks[0], ks[2], ks[3], vs[3], self.max_len);
        let k_cache = self.trace.input(&format!("{name}.k"), &[b, h, dh, l], k.dtype());
        let v_cache = self.trace.input(&format!("{name}.v"), &[b, h, l, dv], v.dtype());
        let slots = self.position.arange_like(0.0, 1.0, l, DType::I64);
        let here = slots.eq(&self.position);
        // Keys are cached transposed, so the scores are one plain product with no transpose of
        // the cache; each new key is a column, each new value a row.
        let k_cache_next = here.reshape(&[1, 1, 1, l]).where_(&k.transpose(&[0, 2, 3, 1]), &k_cache);
        let v_cache_next = here.reshape(&[1, 1, l, 1]).where_(&v.transpose(&[0, 2, 1, 3]), &v_cache);
        let later = slots.gt(&self.position).reshape(&[1, 1, 1, l]);
        let scores = &q.transpose(&[0, 2, 1, 3]).matmul(&k_cache_next) * scale;
        let probs = scores.masked_fill(&later, -1e9).softmax();
        let context = probs.matmul(&v_cache_next).transpose(&[0, 2, 1, 3]);
        let mut caches = self.caches.borrow_mut();
        caches.push(Cache { input: k_cache, updated: k_cache_next });
        caches.push(Cache { input: v_cache, updated: v_cache_next });
        context
    }

    /// The encoder's output `name` (declared by [`super::DecoderBuilder::encoder`]), computed
    /// once per [`super::Decoder::encode`] and kept on the device for every step.
    #[track_caller]
    pub fn context(&self, name: &str) -> Tensor {
        match self.contexts.iter().find(|c| c.name == name) {
            Some(c) => self.trace.input(name, &c.shape, c.dtype),
            None => {
                let loc = SrcLoc::from_caller(std::panic::Location::caller());
                let names = self.contexts.iter().map(|c| c.name.as_str());
                let message = if self.contexts.is_empty() {
                    format!("no encoder output `{name}`: the decoder has no encoder (add one with `.encoder(..)`)")
                } else {
                    let hint = remat_catalog::closest(name, names.clone())
                        .map_or(String::new(), |c| format!("; did you mean `{c}`?"));
                    format!(
                        "no encoder output is named `{name}`{hint} (encoder outputs: {})",
                        crate::text::short_list(names, 8)
                    )
                };
                self.trace.state.borrow_mut().fail("context", loc, message);
                Tensor::poisoned_in(&self.trace.state, (vec![self.batch, 1], DType::F32))
            }
        }
    }

    /// The trace and the caches recorded, for the decoder to finish.
    pub(crate) fn into_parts(self) -> (Trace, Vec<Cache>) {
        (self.trace, self.caches.into_inner())
    }
}
