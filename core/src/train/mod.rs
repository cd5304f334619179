//! Training whose state stays on the backend: parameters, optimizer state and gradients live in
//! the backend's buffers across steps, and a step moves only the batch in and the loss (and the
//! graph's further outputs) out.
//!
//! ```
//! use remat_core::{AdamW, CpuBackend, DType, Feeds, HostTensor, Model, Trace, TrainOptions, TrainState};
//! let trace = Trace::new();
//! let x = trace.input("x", &[4, 3], DType::F32);
//! let y = trace.input("y", &[4], DType::I64);
//! let w = trace.param("w", &[3, 2], DType::F32);
//! let model = Model::new(trace.finish(&x.matmul(&w).cross_entropy(&y)).unwrap()).unwrap();
//! let mut cpu = CpuBackend::new();
//! let options = TrainOptions::from(&AdamW::new(0.1)).clip_grad_norm(1.0);
//! let mut state = TrainState::new(&mut cpu, &model, &model.init_params(0).unwrap(), options).unwrap();
//! let feeds = Feeds::new()
//!     .with("x", HostTensor::f32([4, 3], (0..12).map(|i| i as f32 / 12.0).collect()).unwrap())
//!     .with("y", HostTensor::i64([4], vec![0, 1, 1, 0]).unwrap());
//! let first = state.step(&mut cpu, &model, &feeds, 0).unwrap();
//! let second = state.step(&mut cpu, &model, &feeds, 1).unwrap();
//! assert!(second.loss < first.loss);
//! // The batch in (48 + 32 bytes), the loss out (4 bytes): nothing else crosses.
//! assert_eq!((second.transfers.to_device_bytes, second.transfers.to_host_bytes), (80, 4));
//! assert_eq!(second.measured_peak, second.predicted_peak);
//! ```

mod options;
mod reduce;

use options::OptimizerBytes;
pub use options::TrainOptions;
pub use reduce::{GradientReducer, Gradients};

use crate::backend::{Backend, KernelCall, TransferStats};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::exec::{self, Mode, Resident, Slot};
use crate::graph::NodeId;
use crate::host::{HostData, HostTensor};
use crate::model::{Feeds, Model, Params};
use crate::op::Op;
use crate::optim::{AdamW, Layout};
use crate::shape::fmt_shape;
use crate::update::{UpdateCall, UpdateRule};

/// A model's parameters and optimizer state, held in a backend's buffers across steps.
///
/// [`TrainState::step`] runs forward, backward and the optimizer update on the backend: the
/// batch is uploaded, the loss and the graph's further outputs are downloaded, and nothing else
/// crosses (by [`Backend::transfers`]). The gradients live only between the backward and the
/// update. [`TrainState::params`] and [`TrainState::adamw`] bring the state back to the host
/// (to save it, evaluate, or compare), and [`TrainState::resume`] makes one from saved state.
pub struct TrainState<B: Backend> {
    ids: Vec<NodeId>,
    names: Vec<String>,
    /// Each parameter's shape and dtype.
    metas: Vec<(Vec<usize>, DType)>,
    params: Vec<B::Buffer>,
    /// Per parameter, the rule's state buffers ([`UpdateRule::state_names`]).
    state: Vec<Vec<B::Buffer>>,
    /// Per parameter, its master weights where it has them ([`TrainOptions::master_dtype`]):
    /// then `params` holds the copy the model computes with.
    masters: Vec<Option<B::Buffer>>,
    /// Per parameter, whether this state updates it (all, unless [`TrainState::keep_only`]
    /// sharded the optimizer over ranks).
    owned: Vec<bool>,
    options: TrainOptions,
    /// Steps taken.
    t: u64,
    param_bytes: usize,
    state_bytes: usize,
    master_bytes: usize,
}

/// What one [`TrainState::step`] returns.
#[derive(Clone, Debug)]
pub struct TrainStepOutput {
    /// The loss (before this step's update).
    pub loss: f64,
    /// The graph's further outputs, in the order given to [`crate::Trace::finish_with`].
    pub outputs: Vec<HostTensor>,
    /// The step's predicted peak bytes on the backend: the plan's, the optimizer state, and
    /// the update's own ([`TrainState::predicted_peak`]).
    pub predicted_peak: usize,
    /// The peak bytes the backend measured over the step (forward, backward and update), the
    /// parameters and optimizer state included.
    pub measured_peak: usize,
    /// The plan's predicted peak of host memory (offloaded values).
    pub predicted_host_peak: usize,
    /// The peak host bytes the backend measured during the step.
    pub measured_host_peak: usize,
    /// Bytes the step copied to the device (the batch, the graph's constants) and back (the
    /// loss and further outputs), by the backend's counters.
    pub transfers: TransferStats,
}

impl<B: Backend> TrainState<B> {
    /// Uploads `params` (of `model`) and zero optimizer state to `backend`.
    pub fn new(backend: &mut B, model: &Model, params: &Params, options: TrainOptions) -> Result<TrainState<B>> {
        let zeros = |p: &HostTensor| vec![0.0; p.numel()];
        let state = params.values().iter().map(|p| vec![zeros(p); options.rule.state_count()]).collect();
        Self::with_state(backend, model, params, options, 0, state)
    }

    /// Resumes training from a host optimizer's state (as [`crate::load_state`] reads it):
    /// `params` and `optimizer`'s moments and step count are uploaded. `options.rule` must be
    /// AdamW; its hyperparameters are `optimizer`'s unless `options` says otherwise.
    pub fn resume(
        backend: &mut B,
        model: &Model,
        params: &Params,
        optimizer: &AdamW,
        options: TrainOptions,
    ) -> Result<TrainState<B>> {
        if !matches!(options.rule, UpdateRule::AdamW { .. }) {
            return Err(Error::config("rule", "an AdamW state resumes AdamW training, not SGD"));
        }
        let (m, v) = optimizer.moments();
        let state = if m.is_empty() {
            params.values().iter().map(|p| vec![vec![0.0; p.numel()]; 2]).collect()
        } else {
            optimizer.layout.check(params, "the AdamW state")?;
            m.iter().zip(v).map(|(m, v)| vec![m.clone(), v.clone()]).collect()
        };
        Self::with_state(backend, model, params, options, optimizer.t(), state)
    }

    fn with_state(
        backend: &mut B,
        model: &Model,
        params: &Params,
        options: TrainOptions,
        t: u64,
        state: Vec<Vec<Vec<f64>>>,
    ) -> Result<TrainState<B>> {
        options.validate()?;
        if params.ids != model.forward_graph().params() {
            return Err(Error::config("params", "these parameters belong to another graph (use Model::init_params)"));
        }
        let mut buffers = Vec::with_capacity(params.len());
        let mut states = Vec::with_capacity(params.len());
        let mut masters = Vec::with_capacity(params.len());
        for ((name, p), s) in params.names().iter().zip(params.values()).zip(state) {
            if !p.dtype().is_float() {
                return Err(Error::Feed {
                    what: "param",
                    name: name.clone(),
                    message: format!("an optimizer updates float parameters, this one is {}", p.dtype()),
                });
            }
            buffers.push(backend.upload(p)?);
            masters.push(match options.master_for(p.dtype()) {
                Some(m) => Some(
                    backend.upload(&HostTensor::new(p.shape().to_vec(), HostData::from_f64(&p.to_f64_vec(), m))?)?,
                ),
                None => None,
            });
            let mut own = Vec::with_capacity(s.len());
            for values in s {
                let data = HostData::from_f64(&values, options.state_dtype);
                own.push(backend.upload(&HostTensor::new(p.shape().to_vec(), data)?)?);
            }
            states.push(own);
        }
        let param_bytes = params.values().iter().map(HostTensor::bytes).sum();
        let held = OptimizerBytes::of(&options, params.values().iter().map(|p| (p.shape(), p.dtype())));
        Ok(TrainState {
            ids: params.ids.clone(),
            names: params.names().to_vec(),
            metas: params.values().iter().map(|p| (p.shape().to_vec(), p.dtype())).collect(),
            params: buffers,
            state: states,
            masters,
            owned: vec![true; params.len()],
            options,
            t,
            param_bytes,
            state_bytes: held.state,
            master_bytes: held.masters,
        })
    }

    /// Steps taken.
    pub fn t(&self) -> u64 {
        self.t
    }

    /// The update rule, clipping and state dtype.
    pub fn options(&self) -> &TrainOptions {
        &self.options
    }

    /// Sets the learning rate of the steps to come (a schedule).
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        let rule = self.options.rule.with_lr(lr);
        rule.validate()?;
        self.options.rule = rule;
        Ok(())
    }

    /// The parameters' names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The buffer of parameter `name` on the backend.
    pub fn buffer(&self, name: &str) -> Option<&B::Buffer> {
        self.names.iter().position(|n| n == name).map(|k| &self.params[k])
    }

    /// Each parameter's shape and dtype, in order.
    pub fn metas(&self) -> &[(Vec<usize>, DType)] {
        &self.metas
    }

    /// The shape and dtype of parameter `name`.
    pub fn meta(&self, name: &str) -> Option<(&[usize], DType)> {
        self.names.iter().position(|n| n == name).map(|k| (&self.metas[k].0[..], self.metas[k].1))
    }

    /// Bytes of the parameters on the backend.
    pub fn param_bytes(&self) -> usize {
        self.param_bytes
    }

    /// Bytes of the optimizer state on the backend.
    pub fn state_bytes(&self) -> usize {
        self.state_bytes
    }

    /// Bytes of the master weights on the backend (0 without mixed precision).
    pub fn master_bytes(&self) -> usize {
        self.master_bytes
    }

    /// Bytes the state holds between steps: parameters, master weights, optimizer state.
    pub fn held_bytes(&self) -> usize {
        self.param_bytes + self.master_bytes + self.state_bytes
    }

    /// The peak bytes a [`TrainState::step`] of `model` holds on the backend: the largest of
    /// the plan's peak with the optimizer state beside it, the end of the backward with copies
    /// of the gradients that are parameters themselves (an update must not read a parameter it
    /// already changed), and the update (parameters, state, gradients and, when clipping, the
    /// 8-byte sum of squares).
    pub fn predicted_peak(&self, model: &Model) -> usize {
        let plan = model.plan();
        let graph = model.joint().graph();
        let mut seen = vec![false; graph.len()];
        let mut at_end = plan.resident_bytes();
        for &id in plan.kept() {
            if !std::mem::replace(&mut seen[id.index()], true) && !plan.resident().contains(&id) {
                at_end += graph.node(id).bytes();
            }
        }
        let mut grads = 0;
        let mut copies = 0;
        let mut counted = vec![false; graph.len()];
        for &(_, g) in model.joint().grads() {
            if !std::mem::replace(&mut counted[g.index()], true) {
                grads += graph.node(g).bytes();
                if self.ids.contains(&g) {
                    copies += graph.node(g).bytes();
                }
            }
        }
        let clip = if self.options.max_grad_norm.is_some() { DType::F64.size() } else { 0 };
        let apart = self.master_bytes + self.state_bytes;
        let run = plan.predicted_peak() + apart;
        let copied = at_end + copies + apart;
        let update = self.held_bytes() + grads + clip;
        // Each working copy is made anew from its master before the old one is dropped.
        let refresh = self.held_bytes() + self.largest_copy();
        run.max(copied).max(update).max(refresh)
    }

    /// One training step of `model` on `feeds`: forward and backward (random ops seeded by
    /// `run_seed`), then the optimizer update of every parameter in place. On an error before
    /// the update (a bad feed, memory) no parameter has changed.
    pub fn step(&mut self, backend: &mut B, model: &Model, feeds: &Feeds, run_seed: u64) -> Result<TrainStepOutput> {
        self.step_inner(backend, model, feeds, run_seed, None)
    }

    /// [`TrainState::step`] with `reducer` between the backward and the update: it is handed
    /// each gradient buffer the moment the backward finishes it (so a data-parallel run reduces
    /// while the backward goes on), then overwrites every gradient with its reduced value
    /// before the update reads them.
    pub fn step_reducing(
        &mut self,
        backend: &mut B,
        model: &Model,
        feeds: &Feeds,
        run_seed: u64,
        reducer: &mut dyn GradientReducer<B>,
    ) -> Result<TrainStepOutput> {
        self.step_inner(backend, model, feeds, run_seed, Some(reducer))
    }

    fn step_inner(
        &mut self,
        backend: &mut B,
        model: &Model,
        feeds: &Feeds,
        run_seed: u64,
        mut reducer: Option<&mut (dyn GradientReducer<B> + '_)>,
    ) -> Result<TrainStepOutput> {
        self.check_model(model)?;
        let t = self.t.checked_add(1).ok_or_else(|| {
            Error::optimizer_state(format!("the training state has taken {} steps, the most it counts", self.t))
        })?;
        crate::model::check_feeds(model.forward_graph(), feeds)?;
        let predicted_peak = self.predicted_peak(model);
        let before = backend.transfers();
        let outside = backend.memory().live_bytes.saturating_sub(self.held_bytes());
        let (outputs, mut grads, host_peak) = self
            .forward_backward(backend, model, feeds, run_seed, reducer.as_deref_mut())
            .map_err(|e| e.with_predicted_peak(predicted_peak as u64))?;
        let loss = outputs.first().ok_or_else(|| Error::internal("the plan returned no loss"))?.scalar()?;
        if let Some(reducer) = reducer {
            let mut view = Gradients { buffers: &mut grads.buffers, of_param: &grads.of_param };
            reducer.finish(backend, &mut view)?;
        }
        self.update(backend, t, &grads).map_err(|e| e.with_predicted_peak(predicted_peak as u64))?;
        drop(grads);
        self.refresh_copies(backend).map_err(|e| e.with_predicted_peak(predicted_peak as u64))?;
        self.t = t;
        Ok(TrainStepOutput {
            loss,
            outputs: outputs.into_iter().skip(1).collect(),
            predicted_peak,
            measured_peak: backend.memory().peak_bytes.saturating_sub(outside),
            predicted_host_peak: model.plan().predicted_host_peak(),
            measured_host_peak: host_peak,
            transfers: backend.transfers().since(before),
        })
    }

    /// Whether `model` is the one this state's parameters belong to: the same parameters, of
    /// the same shapes and dtypes (so its gradients fit them).
    fn check_model(&self, model: &Model) -> Result<()> {
        let graph = model.forward_graph();
        let another = |why: String| {
            Error::config("model", format!("this training state holds the parameters of another model: {why}"))
        };
        if self.ids != graph.params() {
            return Err(another(format!("{} parameters here, {} in the model", self.ids.len(), graph.params().len())));
        }
        for ((&id, name), (shape, dtype)) in self.ids.iter().zip(&self.names).zip(&self.metas) {
            let node = graph.node(id);
            if graph.leaf_name(id) != *name || node.shape[..] != shape[..] || node.dtype != *dtype {
                return Err(another(format!(
                    "parameter `{name}` is {} {dtype} here, `{}` {} {} in the model",
                    fmt_shape(shape),
                    graph.leaf_name(id),
                    fmt_shape(&node.shape),
                    node.dtype
                )));
            }
        }
        Ok(())
    }

    /// The forward and backward: the forward outputs (downloaded), each parameter's gradient
    /// (an index into the owned buffers: parameters with the same gradient share one), and the
    /// host peak.
    fn forward_backward(
        &self,
        backend: &mut B,
        model: &Model,
        feeds: &Feeds,
        run_seed: u64,
        reducer: Option<&mut (dyn GradientReducer<B> + '_)>,
    ) -> Result<(Vec<HostTensor>, Grads<B>, usize)> {
        let (joint, plan) = (model.joint(), model.plan());
        let graph = joint.graph();
        let mut resident = Vec::with_capacity(plan.resident().len());
        for &id in plan.resident() {
            let node = graph.node(id);
            resident.push(match &node.op {
                Op::Param { .. } => {
                    let k = self.ids.iter().position(|&p| p == id).ok_or_else(|| missing_param(graph, id))?;
                    Resident::Borrowed(&self.params[k])
                }
                Op::ConstantData { value } => Resident::Host(value),
                _ => {
                    let name = graph.leaf_name(id);
                    let value = feeds.get(&name).ok_or_else(|| Error::Feed {
                        what: node.op.name(),
                        name,
                        message: "no value given".into(),
                    })?;
                    exec::check_feed(graph, id, value)?;
                    Resident::Host(value)
                }
            });
        }
        let n_outputs = joint.forward_outputs().len();
        let finished = match reducer {
            None => exec::run_program(backend, graph, plan, resident, run_seed, Mode::Train)?,
            Some(reducer) => {
                let mut hand_over = |b: &mut B, k: usize, grad: &B::Buffer| reducer.gradient(b, k - n_outputs, grad);
                let mut notify = exec::Notify::new(plan, graph.len(), n_outputs, &mut hand_over);
                exec::run_program_with(backend, graph, plan, resident, run_seed, Mode::Train, Some(&mut notify))?
            }
        };
        let mut slots = finished.slots;
        let mut outputs = Vec::with_capacity(n_outputs);
        for &id in &plan.kept()[..n_outputs] {
            let slot = slots[id.index()].as_ref().ok_or_else(|| missing_value(graph, id))?;
            outputs.push(backend.download(slot.buffer())?);
        }
        let mut grads = Grads { buffers: Vec::new(), of_param: Vec::with_capacity(self.ids.len()) };
        let mut taken: Vec<Option<usize>> = vec![None; graph.len()];
        for &(_, g) in joint.grads() {
            if let Some(k) = taken[g.index()] {
                grads.of_param.push(k);
                continue;
            }
            let buffer = match slots[g.index()].take().ok_or_else(|| missing_value(graph, g))? {
                Slot::Owned(buffer) => buffer,
                // A parameter's gradient that is a parameter: copied, as the update of that
                // parameter must not change the gradient of another.
                Slot::Borrowed(buffer) => {
                    let node = graph.node(g);
                    let copy = Op::Reshape { shape: node.shape.to_vec() };
                    let metas = [node.meta()];
                    let call = KernelCall::new(g, &copy, &metas, &node.shape, node.dtype, 0);
                    backend.execute(&call, &[buffer])?
                }
            };
            taken[g.index()] = Some(grads.buffers.len());
            grads.of_param.push(grads.buffers.len());
            grads.buffers.push(buffer);
        }
        Ok((outputs, grads, finished.measured_host_peak))
    }

    /// Every parameter's update from `grads`, after checking all of them (so a mismatch leaves
    /// every parameter as it was).
    fn update(&mut self, backend: &mut B, t: u64, grads: &Grads<B>) -> Result<()> {
        let coefficients = self.options.rule.coefficients(t);
        let max_norm = self.options.max_grad_norm;
        let sum_squares = match self.options.max_grad_norm {
            Some(_) => Some(backend.sum_squares(&grads.buffers.iter().collect::<Vec<_>>())?),
            None => None,
        };
        for (k, name) in self.names.iter().enumerate().filter(|&(k, _)| self.owned[k]) {
            let grad = &grads.buffers[grads.of_param[k]];
            let call = UpdateCall { name, coefficients, max_norm };
            let target = self.masters[k].as_mut().unwrap_or(&mut self.params[k]);
            backend.update(&call, target, grad, &mut self.state[k], sum_squares.as_ref())?;
        }
        Ok(())
    }

    /// Each parameter with master weights gets a new working copy, its master rounded to the
    /// model's dtype on the device.
    fn refresh_copies(&mut self, backend: &mut B) -> Result<()> {
        for k in 0..self.params.len() {
            let Some(master) = &self.masters[k] else { continue };
            let (shape, dtype) = &self.metas[k];
            let master_dtype = self.options.master_dtype.unwrap_or(*dtype);
            let cast = Op::Cast { dtype: *dtype };
            let metas = [(&shape[..], master_dtype)];
            let call = KernelCall::new(self.ids[k], &cast, &metas, shape, *dtype, 0);
            self.params[k] = backend.execute(&call, &[master])?;
        }
        Ok(())
    }

    /// Bytes of the largest working copy made from a master (0 without).
    fn largest_copy(&self) -> usize {
        let bytes = |(shape, dtype): &(Vec<usize>, DType)| shape.iter().product::<usize>() * dtype.size();
        self.metas
            .iter()
            .zip(&self.masters)
            .filter(|(_, m)| m.is_some())
            .map(|(meta, _)| bytes(meta))
            .max()
            .unwrap_or(0)
    }

    /// Shards the optimizer (ZeRO-1): from now on this state updates only the parameters `owned`
    /// marks and keeps optimizer state (and master weights) for those alone; the others' are
    /// freed. A data-parallel run gives each rank its share and broadcasts each updated
    /// parameter from its owner ([`TrainState::write_param`]).
    pub fn keep_only(&mut self, owned: &[bool]) -> Result<()> {
        if owned.len() != self.params.len() {
            return Err(Error::config(
                "owned",
                format!("{} ownership marks for {} parameters", owned.len(), self.params.len()),
            ));
        }
        for (k, &own) in owned.iter().enumerate() {
            if !own && self.owned[k] {
                let numel: usize = self.metas[k].0.iter().product();
                self.state_bytes -= self.state[k].len() * numel * self.options.state_dtype.size();
                self.state[k].clear();
                if self.masters[k].take().is_some() {
                    self.master_bytes -= numel * self.options.master_dtype.map_or(0, DType::size);
                }
            }
            self.owned[k] = own && self.owned[k];
        }
        Ok(())
    }

    /// Whether this state updates parameter `k` ([`TrainState::keep_only`]).
    pub fn owns(&self, k: usize) -> bool {
        self.owned.get(k).copied().unwrap_or(false)
    }

    /// Parameter `k`'s buffer (the copy the model computes with).
    pub fn param_buffer(&self, k: usize) -> Option<&B::Buffer> {
        self.params.get(k)
    }

    /// Overwrites parameter `k` with `value` (its shape and dtype), and its master weights with
    /// it where it has them: a parameter updated by its owner and broadcast to the other ranks.
    pub fn write_param(&mut self, backend: &mut B, k: usize, value: &HostTensor) -> Result<()> {
        let (shape, dtype) = self.metas.get(k).ok_or_else(|| Error::config("param", format!("no parameter {k}")))?;
        if value.shape() != &shape[..] || value.dtype() != *dtype {
            return Err(Error::Feed {
                what: "param",
                name: self.names[k].clone(),
                message: format!(
                    "declared {} {dtype}, got {} {}",
                    fmt_shape(shape),
                    fmt_shape(value.shape()),
                    value.dtype()
                ),
            });
        }
        backend.write(&mut self.params[k], value)?;
        if let (Some(master), Some(m)) = (self.masters[k].as_mut(), self.options.master_dtype) {
            backend.write(master, &HostTensor::new(shape.clone(), HostData::from_f64(&value.to_f64_vec(), m))?)?;
        }
        Ok(())
    }

    /// Parameter `k`'s optimizer state, downloaded in f64 (`m`, `v` for AdamW), or `None` where
    /// this state does not own it.
    pub fn state_values(&self, backend: &mut B, k: usize) -> Result<Option<Vec<Vec<f64>>>> {
        if !self.owns(k) {
            return Ok(None);
        }
        let values = self.state[k].iter().map(|s| Ok(backend.download(s)?.to_f64_vec())).collect::<Result<_>>()?;
        Ok(Some(values))
    }

    /// The parameters, downloaded (to save, evaluate or generate from them on the host).
    pub fn params(&self, backend: &mut B) -> Result<Params> {
        let values = self.params.iter().map(|b| backend.download(b)).collect::<Result<Vec<_>>>()?;
        Ok(Params { ids: self.ids.clone(), names: self.names.clone(), values })
    }

    /// An AdamW optimizer holding this state's moments and step count (downloaded, in f64), with
    /// its hyperparameters: with [`TrainState::params`], what [`crate::save_state`] writes.
    pub fn adamw(&self, backend: &mut B) -> Result<AdamW> {
        let UpdateRule::AdamW { lr, beta1, beta2, eps, weight_decay } = self.options.rule else {
            return Err(Error::config("rule", "this training state runs SGD, not AdamW"));
        };
        if let Some(k) = self.owned.iter().position(|&own| !own) {
            return Err(Error::optimizer_state(format!(
                "this training state is sharded: it holds no moments of `{}` (gather them from the rank that owns it)",
                self.names[k]
            )));
        }
        let mut m = Vec::with_capacity(self.state.len());
        let mut v = Vec::with_capacity(self.state.len());
        for s in &self.state {
            m.push(backend.download(&s[0])?.to_f64_vec());
            v.push(backend.download(&s[1])?.to_f64_vec());
        }
        let layout = self.names.iter().zip(&self.metas).map(|(n, (s, d))| (n.clone(), s.clone(), *d)).collect();
        Ok(AdamW { lr, beta1, beta2, eps, weight_decay, t: self.t, m, v, layout: Layout(layout) })
    }
}

/// The gradients between the backward and the update.
struct Grads<B: Backend> {
    /// One buffer per distinct gradient node.
    buffers: Vec<B::Buffer>,
    /// For each parameter, its gradient's index in `buffers`.
    of_param: Vec<usize>,
}

fn missing_param(graph: &crate::graph::Graph, id: NodeId) -> Error {
    Error::Node {
        node: id,
        op: graph.node(id).op.name(),
        message: format!("parameter {} has no buffer in the training state", graph.leaf_name(id)),
    }
}

fn missing_value(graph: &crate::graph::Graph, id: NodeId) -> Error {
    Error::Node {
        node: id,
        op: graph.node(id).op.name(),
        message: format!(
            "value {} {} not live at the end of the step (plan is inconsistent)",
            fmt_shape(&graph.node(id).shape),
            graph.node(id).dtype
        ),
    }
}
