//! Running the programs: the encoder once per source, the step once per token.

use super::{Decoder, Role};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::exec::{self, Mode, Resident, Slot};
use crate::graph::{Graph, NodeId};
use crate::host::HostTensor;
use crate::model::Feeds;

impl<'b, B: Backend> Decoder<'b, B> {
    /// Runs the encoder on `feeds` (its declared inputs) and keeps its outputs on the device
    /// for every step after; starts a new sequence ([`Decoder::reset`]).
    pub fn encode(&mut self, feeds: &Feeds) -> Result<()> {
        let Some(encoder) = &self.encoder else {
            return Err(Error::decoder("this decoder has no encoder (add one with `DecoderBuilder::encoder`)"));
        };
        let graph = encoder.joint.graph();
        check_encoder_feeds(graph, feeds)?;
        let mut resident = Vec::with_capacity(encoder.roles.len());
        for (&id, role) in encoder.plan.resident().iter().zip(&encoder.roles) {
            resident.push(match role {
                Role::Param(name) => Resident::Borrowed(self.params[name].buffer()),
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
                _ => return Err(Error::internal("the encoder reads a decoder-only value")),
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
                    return Err(Error::decoder(format!(
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
            return Err(Error::decoder(format!(
                "a step takes one token per sequence: {} given, the decoder decodes {}",
                tokens.len(),
                self.batch
            )));
        }
        if self.position >= self.max_len {
            return Err(Error::decoder(format!(
                "the caches hold {} positions and all are filled: build the decoder with a larger max_len, or reset() it",
                self.max_len
            )));
        }
        if self.caches.iter().any(Option::is_none) {
            return Err(Error::decoder(
                "an earlier step failed after taking over the caches: call reset() to start again",
            ));
        }
        if self.encoder.is_some() && self.contexts.is_empty() {
            return Err(Error::decoder("the step reads the encoder's outputs: call encode(..) first"));
        }
        let token_values = HostTensor::i64([self.batch, 1], tokens.to_vec())?;
        let position_value = HostTensor::i64([1], vec![self.position as i64])?;
        let program = &self.step;
        let mut resident = Vec::with_capacity(program.roles.len());
        for role in &program.roles {
            resident.push(match role {
                Role::Param(name) => Resident::Borrowed(self.params[name].buffer()),
                Role::Constant(id) => Resident::Borrowed(&self.constants[&(true, *id)]),
                Role::Tokens => Resident::Host(&token_values),
                Role::Position => Resident::Host(&position_value),
                Role::Cache(k) => Resident::Owned(self.caches[*k].take().expect("caches checked above")),
                Role::Context(name) | Role::Feed(name) => match self.contexts.get(name) {
                    Some(buffer) => Resident::Borrowed(buffer),
                    None => return Err(Error::decoder(format!("the step reads `{name}`, which nothing provides"))),
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
                _ => return Err(Error::decoder(format!("the step's updated cache {k} is not a computed value"))),
            }
        }
        let logits = match slots[outputs[0].index()].take() {
            Some(slot) => self.backend.download(slot.buffer())?,
            None => return Err(Error::internal("the step computed no logits")),
        };
        self.position += 1;
        let peak = self.held_bytes() + finished.measured_peak;
        self.measured_peak = self.measured_peak.max(peak);
        Ok(logits.to_f32_vec())
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
