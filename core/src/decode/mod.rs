//! Generation with a key/value cache: a trained model's step traced for one token per sequence,
//! run once per token over caches and parameters that stay on the device.
//!
//! A [`Decoder`] holds, as device buffers that live as long as it does: the parameters the step
//! (and the encoder) read, uploaded once from the trained [`Params`]; the step's constants; two
//! caches per attention layer ([`DecodeStep::attend`]); and the encoder's outputs
//! ([`Decoder::encode`], computed once per source and read by every step). Each step uploads only
//! the tokens and their position, runs forward only (nothing saved, dropout off), hands each
//! cache over to the run — the step's updated cache replaces it, and the old one is freed right
//! after its last read, so the two are not held at once beyond one layer's — and downloads only
//! the logits.
//!
//! ```
//! use remat_core::{zoo, CpuBackend, DecoderBuilder, Model, Sampling};
//! let cfg = zoo::GptConfig { batch: 1, seq: 16, d_model: 16, heads: 2, layers: 1, vocab: 32, dropout: 0.0, dtype: remat_core::DType::F32 };
//! let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
//! let params = model.init_params(0).unwrap();
//! let mut cpu = CpuBackend::new();
//! let mut decoder = DecoderBuilder::new(1, cfg.seq).build(&mut cpu, &params, |step| zoo::gpt_step(&cfg, step)).unwrap();
//! let out = decoder.generate(&[vec![1, 2, 3]], 8, &Sampling::greedy()).unwrap();
//! assert_eq!(out.tokens[0].len(), 8);
//! assert_eq!(out.measured_peak, out.predicted_peak);
//! ```

mod sampling;
mod step;

pub use sampling::Sampling;
pub use step::DecodeStep;

use crate::autodiff::JointGraph;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::exec::{self, Mode, Resident, Slot};
use crate::graph::{Graph, NodeId};
use crate::host::HostTensor;
use crate::model::{Feeds, Params};
use crate::op::Op;
use crate::plan::Plan;
use crate::shape::fmt_shape;
use crate::tensor::Tensor;
use crate::trace::Trace;
use std::collections::BTreeMap;
use step::{Context, POSITION, TOKENS};

/// Sets the shape of a [`Decoder`]: sequences at once, positions its caches hold, and an
/// optional encoder.
pub struct DecoderBuilder {
    batch: usize,
    max_len: usize,
    encoder: Option<Result<Graph>>,
}

/// What one program (the encoder or the step) reads, per resident value of its plan.
#[derive(Clone, Debug)]
enum Role {
    Param(String),
    Constant(NodeId),
    Tokens,
    Position,
    Cache(usize),
    Context(String),
    Feed(String),
}

/// A traced program, planned forward-only, with what each of its resident values is.
#[derive(Debug)]
struct Program {
    joint: JointGraph,
    plan: Plan,
    roles: Vec<Role>,
    /// Bytes of the resident values the decoder holds between runs (all but tokens, position
    /// and feeds).
    held_bytes: usize,
}

/// A trained model set up for generation (see the [module](self) documentation).
pub struct Decoder<'b, B: Backend> {
    backend: &'b mut B,
    step: Program,
    encoder: Option<Program>,
    params: BTreeMap<String, B::Buffer>,
    /// Constants of the step (then of the encoder), by program and node.
    constants: BTreeMap<(bool, NodeId), B::Buffer>,
    /// One per cache the step reads, in [`Role::Cache`] order; `None` while a step runs (and
    /// after one failed).
    caches: Vec<Option<B::Buffer>>,
    contexts: BTreeMap<String, B::Buffer>,
    batch: usize,
    max_len: usize,
    vocab: usize,
    position: usize,
    /// Bytes of the parameters and constants.
    param_bytes: usize,
    measured_peak: usize,
}

/// What [`Decoder::generate`] returns.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The generated tokens of each sequence (the prompt not included).
    pub tokens: Vec<Vec<i64>>,
    /// Steps run (prompt tokens and generated ones fed back).
    pub steps: usize,
    /// The most device bytes the decoder holds at once during the steps, by the step's plan:
    /// parameters, constants, caches and encoder outputs, plus the step's own values.
    pub predicted_peak: usize,
    /// The same, measured by the backend over this generation's steps.
    pub measured_peak: usize,
}

impl DecoderBuilder {
    /// A builder for decoding `batch` sequences at once through caches of `max_len` positions
    /// (a prompt and what is generated after it, less one, must fit).
    pub fn new(batch: usize, max_len: usize) -> DecoderBuilder {
        DecoderBuilder { batch, max_len, encoder: None }
    }

    /// An encoder, traced now: `encode` declares the inputs fed to [`Decoder::encode`] and the
    /// parameters it reads, and returns the values the step reads through
    /// [`DecodeStep::context`], each named with [`Tensor::name`]. Its outputs are computed once
    /// per source and kept on the device for every step (a cross-attention's keys and values
    /// can be among them, so no step recomputes them).
    pub fn encoder(mut self, encode: impl FnOnce(&Trace) -> Vec<Tensor>) -> DecoderBuilder {
        let trace = Trace::new();
        let outputs = encode(&trace);
        let refs: Vec<&Tensor> = outputs.iter().collect();
        self.encoder = Some(trace.finish_outputs(&refs, false));
        self
    }

    /// Traces the step with `step` (which returns the logits, `[batch, vocab]` or
    /// `[batch, 1, vocab]`), plans it and the encoder, and uploads the parameters they read
    /// from `params` (matched by name; shapes and dtypes must be the trained ones) onto
    /// `backend`, with zeroed caches.
    pub fn build<'b, B: Backend>(
        self,
        backend: &'b mut B,
        params: &Params,
        step: impl FnOnce(&DecodeStep) -> Tensor,
    ) -> Result<Decoder<'b, B>> {
        let (batch, max_len) = (self.batch, self.max_len);
        if batch == 0 || max_len == 0 {
            return Err(Error::Invalid(format!(
                "a decoder needs at least one sequence and one position (batch {batch}, max_len {max_len})"
            )));
        }
        let encoder_graph = self.encoder.transpose()?;
        let contexts = match &encoder_graph {
            Some(graph) => encoder_contexts(graph)?,
            None => Vec::new(),
        };
        let handle = DecodeStep::new(batch, max_len, contexts);
        let logits = step(&handle);
        let vocab = check_logits(&logits, batch)?;
        let (trace, caches) = handle.into_parts();
        let mut outputs = vec![&logits];
        outputs.extend(caches.iter().map(|c| &c.updated));
        let step_graph = trace.finish_outputs(&outputs, false)?;
        let cache_inputs: Vec<NodeId> = caches.iter().filter_map(|c| c.input.id()).collect();
        let step = Program::new(step_graph, &cache_inputs, true)?;
        let encoder = encoder_graph.map(|g| Program::new(g, &[], false)).transpose()?;

        let mut decoder = Decoder {
            backend,
            step,
            encoder,
            params: BTreeMap::new(),
            constants: BTreeMap::new(),
            caches: Vec::new(),
            contexts: BTreeMap::new(),
            batch,
            max_len,
            vocab,
            position: 0,
            param_bytes: 0,
            measured_peak: 0,
        };
        decoder.upload_held(params)?;
        decoder.zero_caches()?;
        Ok(decoder)
    }
}

impl Program {
    /// Plans `graph` forward-only, handing the resident values `consumed` over to each run.
    /// The step's inputs are its tokens, position, caches and the encoder's outputs; the
    /// encoder's are fed.
    fn new(graph: Graph, consumed: &[NodeId], is_step: bool) -> Result<Program> {
        let outputs = graph.outputs().to_vec();
        let joint = JointGraph::without_backward(graph)?;
        let plan = Plan::forward_only_consuming(&joint, &outputs, consumed)?;
        let graph = joint.graph();
        let mut roles = Vec::new();
        let mut held_bytes = 0;
        for &id in plan.resident() {
            let node = graph.node(id);
            let name = graph.leaf_name(id);
            let role = match node.op {
                Op::Param { .. } => Role::Param(name),
                Op::ConstantData { .. } => Role::Constant(id),
                _ if !is_step => Role::Feed(name),
                _ if name == TOKENS => Role::Tokens,
                _ if name == POSITION => Role::Position,
                _ => match consumed.iter().position(|&c| c == id) {
                    Some(k) => Role::Cache(k),
                    None => Role::Context(name),
                },
            };
            if !matches!(role, Role::Tokens | Role::Position | Role::Feed(_)) {
                held_bytes += node.bytes();
            }
            roles.push(role);
        }
        Ok(Program { joint, plan, roles, held_bytes })
    }

    fn graph(&self) -> &Graph {
        self.joint.graph()
    }
}

/// The encoder's outputs as the step may read them: each named, names distinct.
fn encoder_contexts(graph: &Graph) -> Result<Vec<Context>> {
    if graph.outputs().is_empty() {
        return Err(Error::Invalid(
            "the encoder returns no outputs: return the values the step reads, each named with `.name(\"..\")`".into(),
        ));
    }
    let mut contexts: Vec<Context> = Vec::new();
    for &id in graph.outputs() {
        let node = graph.node(id);
        let Some(name) = node.name().map(str::to_string) else {
            return Err(Error::Invalid(format!(
                "the encoder's output {} has no name: name each with `.name(\"..\")`, the name the step reads it by",
                graph.describe(id)
            )));
        };
        if contexts.iter().any(|c| c.name == name) || name == TOKENS || name == POSITION {
            return Err(Error::Invalid(format!(
                "the encoder's outputs must have distinct names, not `tokens` or `position`: `{name}` is taken"
            )));
        }
        contexts.push(Context { name, shape: node.shape.to_vec(), dtype: node.dtype });
    }
    Ok(contexts)
}

/// The vocabulary size of the step's logits, which must be `[batch, vocab]` or `[batch, 1, vocab]`.
fn check_logits(logits: &Tensor, batch: usize) -> Result<usize> {
    let shape = logits.shape();
    match shape.as_slice() {
        [b, v] | [b, 1, v] if *b == batch && *v > 0 && logits.dtype().is_float() => Ok(*v),
        _ => Err(Error::Invalid(format!(
            "the step must return logits [{batch}, vocab] or [{batch}, 1, vocab] of a float dtype, got {} {}",
            fmt_shape(&shape),
            logits.dtype()
        ))),
    }
}

impl<'b, B: Backend> Decoder<'b, B> {
    /// Uploads the parameters and constants both programs read, once.
    fn upload_held(&mut self, params: &Params) -> Result<()> {
        let programs = [(true, Some(&self.step)), (false, self.encoder.as_ref())];
        for (is_step, program) in programs {
            let Some(program) = program else { continue };
            let graph = program.graph();
            for (&id, role) in program.plan.resident().iter().zip(&program.roles) {
                match role {
                    Role::Param(name) if !self.params.contains_key(name) => {
                        let value = trained_value(params, graph, id, name)?;
                        self.params.insert(name.clone(), self.backend.upload(value)?);
                        self.param_bytes += value.bytes();
                    }
                    Role::Constant(id) => {
                        let Op::ConstantData { value } = &graph.node(*id).op else { continue };
                        self.constants.insert((is_step, *id), self.backend.upload(value)?);
                        self.param_bytes += value.bytes();
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Fresh, zeroed caches (what [`Decoder::reset`] does after a failed step).
    fn zero_caches(&mut self) -> Result<()> {
        let graph = self.step.joint.graph();
        let mut caches: Vec<(usize, B::Buffer)> = Vec::new();
        for (&id, role) in self.step.plan.resident().iter().zip(&self.step.roles) {
            if let Role::Cache(k) = role {
                let node = graph.node(id);
                caches.push((*k, self.backend.upload(&HostTensor::full(node.shape.to_vec(), 0.0, node.dtype)?)?));
            }
        }
        caches.sort_by_key(|&(k, _)| k);
        self.caches = caches.into_iter().map(|(_, b)| Some(b)).collect();
        Ok(())
    }

    /// Bytes of the caches.
    fn cache_bytes(&self) -> usize {
        let graph = self.step.graph();
        let caches = self.step.roles.iter().zip(self.step.plan.resident()).filter(|(r, _)| matches!(r, Role::Cache(_)));
        caches.map(|(_, &id)| graph.node(id).bytes()).sum()
    }

    /// Sequences decoded at once.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Positions the caches hold.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The logits' last dimension.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The position the next [`Decoder::step`] writes (how many tokens the caches hold).
    pub fn position(&self) -> usize {
        self.position
    }

    /// The step's forward-only plan.
    pub fn step_plan(&self) -> &Plan {
        &self.step.plan
    }

    /// The step's graph (its outputs: the logits, then each cache's updated value).
    pub fn step_graph(&self) -> &Graph {
        self.step.graph()
    }

    /// Device bytes the decoder holds between steps: parameters, constants, caches, and the
    /// encoder's outputs once [`Decoder::encode`] has run.
    pub fn held_bytes(&self) -> usize {
        let contexts = if self.contexts.is_empty() { 0 } else { self.contexts_bytes() };
        self.param_bytes + self.cache_bytes() + contexts
    }

    /// The most device bytes the decoder holds at once, by the plans (see
    /// [`Generation::predicted_peak`]).
    pub fn predicted_peak(&self) -> usize {
        let encoder = self.encoder.as_ref().map_or(0, |e| e.plan.predicted_peak() - e.held_bytes);
        self.step_predicted_peak().max(self.param_bytes + self.cache_bytes() + encoder)
    }

    /// What the decoder holds at most during a step, by the step's plan.
    fn step_predicted_peak(&self) -> usize {
        let during = self.step.plan.predicted_peak() - self.step.held_bytes;
        self.param_bytes + self.cache_bytes() + self.contexts_bytes() + during
    }

    /// Bytes of the encoder's outputs.
    fn contexts_bytes(&self) -> usize {
        self.encoder.as_ref().map_or(0, |e| e.graph().outputs().iter().map(|&o| e.graph().node(o).bytes()).sum())
    }

    /// Starts a new sequence: the next step writes position 0. Caches a failed step lost are
    /// made again.
    pub fn reset(&mut self) -> Result<()> {
        self.position = 0;
        if self.caches.iter().any(Option::is_none) {
            self.zero_caches()?;
        }
        Ok(())
    }

    /// Runs the encoder on `feeds` (its declared inputs) and keeps its outputs on the device
    /// for every step after; starts a new sequence ([`Decoder::reset`]).
    pub fn encode(&mut self, feeds: &Feeds) -> Result<()> {
        let Some(encoder) = &self.encoder else {
            return Err(Error::Invalid("this decoder has no encoder (add one with `DecoderBuilder::encoder`)".into()));
        };
        let graph = encoder.joint.graph();
        check_encoder_feeds(graph, feeds)?;
        let mut resident = Vec::with_capacity(encoder.roles.len());
        for (&id, role) in encoder.plan.resident().iter().zip(&encoder.roles) {
            resident.push(match role {
                Role::Param(name) => Resident::Borrowed(&self.params[name]),
                Role::Constant(id) => Resident::Borrowed(&self.constants[&(false, *id)]),
                Role::Feed(name) => {
                    let value = feeds.get(name).ok_or_else(|| Error::Feed {
                        what: "input",
                        name: name.clone(),
                        message: "the encoder reads it; no value given".into(),
                    })?;
                    exec::check_feed(graph, id, value)?;
                    Resident::Host(value)
                }
                _ => return Err(Error::Invalid("the encoder reads a decoder-only value".into())),
            });
        }
        self.contexts.clear();
        let finished = exec::run_program(self.backend, graph, &encoder.plan, resident, 0, Mode::Eval)?;
        let mut slots = finished.slots;
        for &out in graph.outputs() {
            let name = graph.node(out).name().map(str::to_string).unwrap_or_default();
            match slots[out.index()].take() {
                Some(Slot::Owned(buffer)) => {
                    self.contexts.insert(name, buffer);
                }
                _ => {
                    return Err(Error::Invalid(format!(
                        "the encoder's output `{name}` is one of its inputs or parameters: return a computed value"
                    )))
                }
            }
        }
        let peak = self.param_bytes + self.cache_bytes() + finished.measured_peak;
        self.measured_peak = self.measured_peak.max(peak);
        self.reset()
    }

    /// Runs one step: `tokens` (one per sequence) at [`Decoder::position`], written into the
    /// caches; returns the logits, `batch × vocab` values, row by row.
    pub fn step(&mut self, tokens: &[i64]) -> Result<Vec<f32>> {
        if tokens.len() != self.batch {
            return Err(Error::Invalid(format!(
                "a step takes one token per sequence: {} given, the decoder decodes {}",
                tokens.len(),
                self.batch
            )));
        }
        if self.position >= self.max_len {
            return Err(Error::Invalid(format!(
                "the caches hold {} positions and all are filled: build the decoder with a larger max_len, or reset() it",
                self.max_len
            )));
        }
        if self.caches.iter().any(Option::is_none) {
            return Err(Error::Invalid(
                "an earlier step failed after taking over the caches: call reset() to start again".into(),
            ));
        }
        if self.encoder.is_some() && self.contexts.is_empty() {
            return Err(Error::Invalid("the step reads the encoder's outputs: call encode(..) first".into()));
        }
        let token_values = HostTensor::i64([self.batch, 1], tokens.to_vec())?;
        let position_value = HostTensor::i64([1], vec![self.position as i64])?;
        let program = &self.step;
        let mut resident = Vec::with_capacity(program.roles.len());
        for role in &program.roles {
            resident.push(match role {
                Role::Param(name) => Resident::Borrowed(&self.params[name]),
                Role::Constant(id) => Resident::Borrowed(&self.constants[&(true, *id)]),
                Role::Tokens => Resident::Host(&token_values),
                Role::Position => Resident::Host(&position_value),
                Role::Cache(k) => Resident::Owned(self.caches[*k].take().expect("caches checked above")),
                Role::Context(name) | Role::Feed(name) => match self.contexts.get(name) {
                    Some(buffer) => Resident::Borrowed(buffer),
                    None => return Err(Error::Invalid(format!("the step reads `{name}`, which nothing provides"))),
                },
            });
        }
        let graph = program.joint.graph();
        let finished = exec::run_program(self.backend, graph, &program.plan, resident, 0, Mode::Eval)
            .map_err(|e| e.with_predicted_peak(self.predicted_peak() as u64))?;
        let mut slots = finished.slots;
        let outputs = graph.outputs();
        for (k, &out) in outputs[1..].iter().enumerate() {
            match slots[out.index()].take() {
                Some(Slot::Owned(buffer)) => self.caches[k] = Some(buffer),
                _ => return Err(Error::Invalid(format!("the step's updated cache {k} is not a computed value"))),
            }
        }
        let logits = match slots[outputs[0].index()].take() {
            Some(slot) => self.backend.download(slot.buffer())?,
            None => return Err(Error::Invalid("the step computed no logits".into())),
        };
        self.position += 1;
        let peak = self.held_bytes() + finished.measured_peak;
        self.measured_peak = self.measured_peak.max(peak);
        Ok(logits.to_f32_vec())
    }

    /// Generates `n` tokens after each sequence's prompt (all of one length), picking each as
    /// `sampling` says. The prompts run through the caches one token at a time from position 0
    /// ([`Decoder::reset`]); prompt and generated text must fit the caches: a prompt of `len`
    /// tokens and `n ≥ 1` generated ones take `len + n - 1` positions (the last token generated
    /// is never fed back). `n = 0` runs nothing and returns no tokens. See
    /// [`Decoder::generate_sliding`] for longer text.
    pub fn generate(&mut self, prompts: &[Vec<i64>], n: usize, sampling: &Sampling) -> Result<Generation> {
        let len = prompts.first().map_or(0, Vec::len);
        // In u128, where `len + n - 1` cannot wrap: a wrapped sum once passed the check and
        // generated forever.
        let needed = (len as u128 + n as u128).saturating_sub(1);
        if n > 0 && needed > self.max_len as u128 {
            return Err(Error::Invalid(format!(
                "a prompt of {len} tokens and {n} generated need {needed} positions ({len} + {n} - 1: the last \
                 generated token is not fed back); the caches hold {} (generate_sliding goes on past them)",
                self.max_len
            )));
        }
        self.generate_sliding(prompts, n, sampling, self.max_len)
    }

    /// [`Decoder::generate`] for text longer than the caches: whenever they are full, the last
    /// `keep` tokens of each sequence become the prompt of a fresh pass from position 0 (what a
    /// model with a fixed context window sees of them). Draws continue, not repeat, across passes.
    ///
    /// Every row of logits a token is picked from must be finite: a NaN or infinite logit is an
    /// error naming the generated token, its position and the sequence.
    pub fn generate_sliding(
        &mut self,
        prompts: &[Vec<i64>],
        n: usize,
        sampling: &Sampling,
        keep: usize,
    ) -> Result<Generation> {
        sampling.validate()?;
        let len = prompts.first().map_or(0, Vec::len);
        if prompts.len() != self.batch || len == 0 || prompts.iter().any(|p| p.len() != len) {
            let mut lens: Vec<String> = prompts.iter().take(8).map(|p| p.len().to_string()).collect();
            if prompts.len() > 8 {
                lens.push(format!("... ({} prompts)", prompts.len()));
            }
            return Err(Error::Invalid(format!(
                "generate takes {} prompts (one per sequence) of one length, at least 1: got lengths [{}]",
                self.batch,
                lens.join(", ")
            )));
        }
        if n == 0 {
            self.measured_peak = 0;
            let tokens = vec![Vec::new(); self.batch];
            return Ok(Generation { tokens, steps: 0, predicted_peak: self.step_predicted_peak(), measured_peak: 0 });
        }
        if keep == 0 || keep > self.max_len || len > self.max_len {
            return Err(Error::Invalid(format!(
                "the caches hold {} positions: the prompt ({len} tokens) and the tokens kept per pass ({keep}) must be 1 to {0}",
                self.max_len
            )));
        }
        let mut text = self.text_for(prompts, n)?;
        self.measured_peak = 0;
        let mut context = len;
        let mut steps = 0;
        while text[0].len() - len < n {
            self.reset()?;
            let mut logits = Vec::new();
            for i in text[0].len() - context..text[0].len() {
                let column: Vec<i64> = text.iter().map(|t| t[i]).collect();
                logits = self.step(&column)?;
            }
            loop {
                let index = text[0].len() - len;
                let next = self.pick(&logits, sampling, index)?;
                for (row, &t) in next.iter().enumerate() {
                    text[row].push(t);
                }
                if text[0].len() - len == n || self.position == self.max_len {
                    break;
                }
                logits = self.step(&next)?;
            }
            steps += self.position;
            context = keep;
        }
        Ok(Generation {
            tokens: text.into_iter().map(|t| t[len..].to_vec()).collect(),
            steps,
            predicted_peak: self.step_predicted_peak(),
            measured_peak: self.measured_peak,
        })
    }

    /// The prompts, with room reserved for `n` more tokens each: a length no memory holds is an
    /// error now, not an abort after hours of steps.
    fn text_for(&self, prompts: &[Vec<i64>], n: usize) -> Result<Vec<Vec<i64>>> {
        let mut text = Vec::with_capacity(prompts.len());
        for prompt in prompts {
            let mut row = Vec::new();
            let total = prompt.len().checked_add(n);
            if total.is_none_or(|t| row.try_reserve_exact(t).is_err()) {
                return Err(Error::HostMemory {
                    what: format!("{n} generated tokens after a prompt of {} (per sequence)", prompt.len()),
                    bytes: total.and_then(|t| u64::try_from(t).ok()?.checked_mul(8)),
                });
            }
            row.extend_from_slice(prompt);
            text.push(row);
        }
        Ok(text)
    }

    /// The next token of each sequence, picked from its row of `logits` (generated token
    /// `index`, read at the position before [`Decoder::position`]).
    fn pick(&self, logits: &[f32], sampling: &Sampling, index: usize) -> Result<Vec<i64>> {
        let mut next = Vec::with_capacity(self.batch);
        for (row, values) in logits.chunks_exact(self.vocab).enumerate() {
            if let Some((token, value)) = sampling::first_non_finite(values) {
                return Err(Error::Invalid(format!(
                    "generated token {index} (the step at position {}), sequence {row}: the logit of token {token} \
                     is {value}; a non-finite logit cannot be picked from (are the parameters finite?)",
                    self.position.saturating_sub(1)
                )));
            }
            next.push(sampling.pick(values, index as u64, row as u64));
        }
        Ok(next)
    }
}

/// Every feed is one of the encoder's declared inputs, of its shape and dtype — read by the
/// encoder's outputs or not, so that a wrong value is never accepted because it is unused.
fn check_encoder_feeds(graph: &Graph, feeds: &Feeds) -> Result<()> {
    let inputs: Vec<(NodeId, String)> = graph.inputs().iter().map(|&i| (i, graph.leaf_name(i))).collect();
    for name in feeds.names() {
        let Some(&(id, _)) = inputs.iter().find(|(_, declared)| declared == name) else {
            let names = inputs.iter().map(|(_, n)| n.as_str());
            return Err(Error::Feed {
                what: "input",
                name: name.to_string(),
                message: if inputs.is_empty() {
                    "the encoder declares no inputs".to_string()
                } else {
                    format!("not an input of the encoder (it declares: {})", crate::text::short_list(names, 8))
                },
            });
        };
        let value = feeds.get(name).expect("a name the feeds list");
        exec::check_feed(graph, id, value)?;
    }
    Ok(())
}

/// The trained value of parameter `name` (node `id` of `graph`), which must match its
/// declaration there.
fn trained_value<'p>(params: &'p Params, graph: &Graph, id: NodeId, name: &str) -> Result<&'p HostTensor> {
    let node = graph.node(id);
    let value = params.get(name).ok_or_else(|| Error::Feed {
        what: "param",
        name: name.to_string(),
        message: format!(
            "declared by the decoder at {}, but the trained parameters have none of that name{} (they have: {})",
            node.loc().map_or("?".to_string(), |l| l.to_string()),
            remat_catalog::closest(name, params.names().iter().map(String::as_str))
                .map_or(String::new(), |c| format!("; did you mean `{c}`?")),
            crate::text::short_list(params.names().iter().map(String::as_str), 6)
        ),
    })?;
    exec::check_feed(graph, id, value).map_err(|e| match e {
        Error::Feed { what, name, message } => Error::Feed {
            what,
            name,
            message: format!("{message} (the trained value; the decoder's declaration must match)"),
        },
        other => other,
    })?;
    Ok(value)
}
