//! Generation with a key/value cache: a trained model's step traced for one token per sequence,
//! run once per token over caches and parameters that stay on the device.
//!
//! A [`Decoder`] holds, as device buffers that live as long as it does: the parameters the step
//! (and the encoder) read, uploaded once from the trained [`Params`](crate::model::Params); the step's constants; two
//! caches per attention layer ([`DecodeStep::attend`]); and the encoder's outputs
//! ([`Decoder::encode`], computed once per source and read by every step). Each step uploads only
//! the tokens and their position, runs forward only (nothing saved, dropout off), hands each
//! cache over to the run — the step's updated cache replaces it, and the old one is freed right
//! after its last read, so the two are not held at once beyond one layer's — and downloads only
//! the logits.
//!
//! ```
//! use remat_core::{CpuBackend, DecoderBuilder, Model, Sampling};
//! use remat_zoo as zoo;
//! let cfg = zoo::GptConfig { batch: 1, seq: 16, d_model: 16, heads: 2, layers: 1, vocab: 32, dropout: 0.0, dtype: remat_core::DType::F32 };
//! let model = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
//! let params = model.init_params(0).unwrap();
//! let mut cpu = CpuBackend::new();
//! let mut decoder = DecoderBuilder::new(1, cfg.seq).build(&mut cpu, &params, |step| zoo::gpt_step(&cfg, step)).unwrap();
//! let out = decoder.generate(&[vec![1, 2, 3]], 8, &Sampling::greedy()).unwrap();
//! assert_eq!(out.tokens[0].len(), 8);
//! assert_eq!(out.measured_peak, out.predicted_peak);
//! ```

mod builder;
mod generate;
mod run;
mod sampling;
mod step;

pub use sampling::Sampling;
pub use step::DecodeStep;

use crate::autodiff::JointGraph;
use crate::backend::Backend;
use crate::error::Result;
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::plan::Plan;
use std::collections::BTreeMap;
use step::{POSITION, TOKENS};

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

/// A trained model set up for generation: a prompt prefilled, then one token a step, the
/// attention's keys and values kept in a cache on the backend.
pub struct Decoder<'b, B: Backend> {
    backend: &'b mut B,
    step: Program,
    encoder: Option<Program>,
    /// The parameters both programs read: uploaded from host values, or borrowed from a
    /// training state ([`DecoderBuilder::build_from_state`]).
    params: BTreeMap<String, crate::exec::Slot<'b, B>>,
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

impl<'b, B: Backend> Decoder<'b, B> {
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
}
