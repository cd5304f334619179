//! Setting a [`Decoder`] up: tracing the step (and the encoder), planning both forward-only,
//! and uploading the parameters, constants and zeroed caches they hold.

use super::step::{Context, POSITION, TOKENS};
use super::{DecodeStep, Decoder, DecoderBuilder, Program, Role};
use crate::backend::Backend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::exec::{self, Slot};
use crate::graph::{Graph, NodeId};
use crate::host::HostTensor;
use crate::model::Params;
use crate::op::Op;
use crate::shape::fmt_shape;
use crate::tensor::Tensor;
use crate::trace::Trace;
use crate::train::TrainState;
use std::collections::BTreeMap;

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
        self.build_with(backend, Trained::Host(params), step)
    }

    /// [`DecoderBuilder::build`] from the parameters of a training state on the same backend,
    /// without copying them: the decoder reads the state's buffers (so the state cannot step
    /// while the decoder lives), and only constants and caches are allocated.
    pub fn build_from_state<'b, B: Backend>(
        self,
        backend: &'b mut B,
        state: &'b TrainState<B>,
        step: impl FnOnce(&DecodeStep) -> Tensor,
    ) -> Result<Decoder<'b, B>> {
        self.build_with(backend, Trained::Resident(state), step)
    }

    fn build_with<'b, B: Backend>(
        self,
        backend: &'b mut B,
        trained: Trained<'_, 'b, B>,
        step: impl FnOnce(&DecodeStep) -> Tensor,
    ) -> Result<Decoder<'b, B>> {
        let (batch, max_len) = (self.batch, self.max_len);
        if batch == 0 || max_len == 0 {
            return Err(Error::decoder(format!(
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
        decoder.upload_held(trained)?;
        decoder.zero_caches()?;
        Ok(decoder)
    }
}

/// The encoder's outputs as the step may read them: each named, names distinct.
fn encoder_contexts(graph: &Graph) -> Result<Vec<Context>> {
    if graph.outputs().is_empty() {
        return Err(Error::decoder(
            "the encoder returns no outputs: return the values the step reads, each named with `.name(\"..\")`",
        ));
    }
    let mut contexts: Vec<Context> = Vec::new();
    for &id in graph.outputs() {
        let node = graph.node(id);
        let Some(name) = node.name().map(str::to_string) else {
            return Err(Error::decoder(format!(
                "the encoder's output {} has no name: name each with `.name(\"..\")`, the name the step reads it by",
                graph.describe(id)
            )));
        };
        if contexts.iter().any(|c| c.name == name) || name == TOKENS || name == POSITION {
            return Err(Error::decoder(format!(
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
        _ => Err(Error::decoder(format!(
            "the step must return logits [{batch}, vocab] or [{batch}, 1, vocab] of a float dtype, got {} {}",
            fmt_shape(&shape),
            logits.dtype()
        ))),
    }
}

impl<'b, B: Backend> Decoder<'b, B> {
    /// Uploads the parameters (or borrows them from a training state) and constants both
    /// programs read, once.
    fn upload_held(&mut self, trained: Trained<'_, 'b, B>) -> Result<()> {
        let programs = [(true, Some(&self.step)), (false, self.encoder.as_ref())];
        for (is_step, program) in programs {
            let Some(program) = program else { continue };
            let graph = program.graph();
            for (&id, role) in program.plan.resident().iter().zip(&program.roles) {
                match role {
                    Role::Param(name) if !self.params.contains_key(name) => {
                        let held = match trained {
                            Trained::Host(params) => {
                                let value = params.get(name);
                                trained_value(params.names(), value.map(|v| (v.shape(), v.dtype())), graph, id, name)?;
                                value.map(|v| self.backend.upload(v)).transpose()?.map(Slot::Owned)
                            }
                            Trained::Resident(state) => {
                                trained_value(state.names(), state.meta(name), graph, id, name)?;
                                state.buffer(name).map(Slot::Borrowed)
                            }
                        };
                        let held =
                            held.ok_or_else(|| Error::internal(format!("parameter `{name}` checked but absent")))?;
                        self.param_bytes += graph.node(id).bytes();
                        self.params.insert(name.clone(), held);
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
    pub(super) fn zero_caches(&mut self) -> Result<()> {
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
}

/// Checks that the trained parameters (of names `names`) hold `name` as node `id` of `graph`
/// declares it: `found` is its shape and dtype there, if any.
fn trained_value(
    names: &[String],
    found: Option<(&[usize], DType)>,
    graph: &Graph,
    id: NodeId,
    name: &str,
) -> Result<()> {
    let node = graph.node(id);
    let (shape, dtype) = found.ok_or_else(|| Error::Feed {
        what: "param",
        name: name.to_string(),
        message: format!(
            "declared by the decoder at {}, but the trained parameters have none of that name{} (they have: {})",
            node.loc().map_or("?".to_string(), |l| l.to_string()),
            remat_catalog::closest(name, names.iter().map(String::as_str))
                .map_or(String::new(), |c| format!("; did you mean `{c}`?")),
            crate::text::short_list(names.iter().map(String::as_str), 6)
        ),
    })?;
    exec::check_meta(graph, id, shape, dtype).map_err(|e| match e {
        Error::Feed { what, name, message } => Error::Feed {
            what,
            name,
            message: format!("{message} (the trained value; the decoder's declaration must match)"),
        },
        other => other,
    })
}

/// Where a decoder's parameters come from.
#[derive(Clone, Copy)]
enum Trained<'p, 'b, B: Backend> {
    /// Host values, uploaded once.
    Host(&'p Params),
    /// A training state's buffers on the decoder's backend, borrowed.
    Resident(&'b TrainState<B>),
}
