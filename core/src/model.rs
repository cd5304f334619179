//! The training API: a differentiated, planned model, its parameters, and one call per step.

use crate::autodiff::JointGraph;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::exec;
use crate::graph::{Graph, NodeId};
use crate::host::HostTensor;
use crate::op::{Init, Op};
use crate::partition::{CostModel, PGraph, Partition, Strategy};
use crate::pipeline;
use crate::plan::{Plan, Step};
use crate::report::Report;
use crate::rng;
use crate::shape::fmt_shape;
use std::collections::BTreeMap;

/// A model ready to train: its forward graph, the joint graph autodiff derived, and the plan.
#[derive(Clone, Debug)]
pub struct Model {
    forward: Graph,
    joint: JointGraph,
    partition: Option<Partition>,
    plan: Plan,
}

/// Values of the graph's inputs for one step, by declared name.
#[derive(Clone, Debug, Default)]
pub struct Feeds {
    values: BTreeMap<String, HostTensor>,
}

impl Feeds {
    /// No values yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the value of input `name`.
    pub fn with(mut self, name: &str, value: HostTensor) -> Self {
        self.insert(name, value);
        self
    }

    /// Sets the value of input `name`.
    pub fn insert(&mut self, name: &str, value: HostTensor) {
        self.values.insert(name.to_string(), value);
    }

    /// The names given values, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    /// The value of input `name`, if given.
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.values.get(name)
    }
}

/// What one training step returns.
#[derive(Clone, Debug)]
pub struct StepOutput {
    /// The loss.
    pub loss: f64,
    /// The graph's further outputs, in the order given to [`crate::Trace::finish_with`].
    pub outputs: Vec<HostTensor>,
    /// One gradient per parameter, in [`Params`] order.
    pub grads: Vec<HostTensor>,
    /// The plan's predicted peak bytes (inputs and parameters included).
    pub predicted_peak: usize,
    /// The peak bytes the backend measured during the step.
    pub measured_peak: usize,
    /// The plan's predicted peak of host memory (offloaded values).
    pub predicted_host_peak: usize,
    /// The peak host bytes the backend measured during the step.
    pub measured_host_peak: usize,
    /// Bytes the step copied to the device (parameters, the batch, the graph's constants) and
    /// back (the loss, further outputs, gradients), by the backend's counters.
    pub transfers: crate::TransferStats,
}

impl Model {
    /// Differentiates `forward`, partitions it with [`Strategy::Respect`] (every tag honoured
    /// literally; without tags, every value the backward reads is saved) and plans it.
    pub fn new(forward: Graph) -> Result<Model> {
        Self::with_strategy(forward, Strategy::Respect)
    }

    /// Differentiates `forward`, partitions it with `strategy` and plans it.
    pub fn with_strategy(forward: Graph, strategy: Strategy) -> Result<Model> {
        Self::with_cost_model(forward, strategy, &CostModel::default())
    }

    /// [`Model::with_strategy`] with the transfer and compute rates of `model`, which the
    /// offload solver and the prefetches use.
    pub fn with_cost_model(forward: Graph, strategy: Strategy, model: &CostModel) -> Result<Model> {
        let joint = JointGraph::new(&forward)?;
        Self::with_joint(forward, joint, strategy, model)
    }

    /// [`Model::with_cost_model`] from `joint`, the joint graph autodiff derived from `forward`
    /// (for a caller that needed it before choosing the strategy).
    pub(crate) fn with_joint(
        forward: Graph,
        joint: JointGraph,
        strategy: Strategy,
        model: &CostModel,
    ) -> Result<Model> {
        let (mut partition, plan) = pipeline::solve(
            &crate::plan::Schedule::InOrder(&joint),
            &PGraph::from_joint(&joint),
            strategy,
            model,
            crate::SearchTime::DEFAULT,
        )?;
        for warning in &partition.warnings {
            crate::warning::emit(warning);
        }
        // What tracing found (names in `save_names` no value carries, emitted then) leads the
        // warnings.
        partition.warnings.splice(0..0, forward.unknown_save_names());
        Ok(Model { forward, joint, partition: Some(partition), plan })
    }

    /// Differentiates `forward` and plans it saving exactly the values `choose` marks (for
    /// experiments; tags are not consulted).
    pub fn with_saved(forward: Graph, choose: impl FnOnce(&JointGraph) -> Vec<bool>) -> Result<Model> {
        let joint = JointGraph::new(&forward)?;
        let plan = Plan::new(&joint, &choose(&joint))?;
        Ok(Model { forward, joint, partition: None, plan })
    }

    /// The partition the plan follows (absent for [`Model::with_saved`]).
    pub fn partition(&self) -> Option<&Partition> {
        self.partition.as_ref()
    }

    /// The saved-values report of the partition ([`crate::report::Report`]'s text) with the
    /// plan's predicted peak and, when given, a measured one. `None` for [`Model::with_saved`].
    pub fn report(&self, measured_peak: Option<usize>) -> Option<String> {
        let partition = self.partition.as_ref()?;
        let pg = PGraph::from_joint(&self.joint);
        let mut report = Report::new(&pg, partition).with_planned_peak(self.plan.predicted_peak() as u64);
        if let Some(peak) = measured_peak {
            report = report.with_measured_peak(peak as u64);
        }
        Some(report.text())
    }

    /// What the model's author should know: names in a region's `save_names` that no value of
    /// the region carries (found when the model was traced), then the partition's warnings.
    pub fn warnings(&self) -> Vec<String> {
        match &self.partition {
            Some(p) => p.warnings.clone(),
            None => self.forward.unknown_save_names(),
        }
    }

    /// A forward-only program computing the values named `names` (with `.name(..)` when the
    /// model was traced), for inference on a trained model: no backward, nothing saved for one,
    /// dropout off (as in evaluation), every value freed after its last use — the peak is the
    /// forward's own. Only the inputs and parameters those values depend on are needed (a
    /// model's `targets` need not be fed to get its logits).
    ///
    /// ```
    /// use remat_core::{CpuBackend, DType, Feeds, HostTensor, Model, Trace};
    /// let trace = Trace::new();
    /// let x = trace.input("x", &[2, 3], DType::F32);
    /// let y = trace.input("y", &[2], DType::I64);
    /// let w = trace.param("w", &[3, 4], DType::F32);
    /// let logits = x.matmul(&w).relu().name("logits");
    /// let model = Model::new(trace.finish(&logits.cross_entropy(&y)).unwrap()).unwrap();
    /// let params = model.init_params(0).unwrap();
    /// let infer = model.inference(&["logits"]).unwrap();
    /// let feeds = Feeds::new().with("x", HostTensor::f32([2, 3], vec![1.0; 6]).unwrap());
    /// let out = infer.run(&mut CpuBackend::new(), &params, &feeds).unwrap();
    /// assert_eq!(out.values[0].shape(), &[2, 4]);
    /// assert_eq!(out.measured_peak, out.predicted_peak);
    /// assert!(out.predicted_peak < model.plan().predicted_peak());
    /// ```
    pub fn inference(&self, names: &[&str]) -> Result<Inference<'_>> {
        let graph = &self.forward;
        let mut outputs = Vec::with_capacity(names.len());
        for &name in names {
            let found: Vec<NodeId> =
                (0..graph.len() as u32).map(NodeId::new).filter(|&i| graph.node(i).name() == Some(name)).collect();
            match found.as_slice() {
                [id] => outputs.push(*id),
                [] => {
                    let known = || graph.nodes().iter().filter_map(|n| n.name());
                    let hint = remat_catalog::closest(name, known())
                        .map_or(String::new(), |c| format!("; did you mean `{c}`?"));
                    return Err(Error::config("names", format!(
                        "no value of the model is named `{name}`{hint} (named values: {}); name one with `.name(\"{name}\")` when tracing",
                        crate::text::short_list(known(), 8)
                    )));
                }
                many => {
                    return Err(Error::config(
                        "names",
                        format!(
                            "`{name}` names {} values of the model ({}); give the one to compute a name of its own",
                            many.len(),
                            many.iter().map(|&i| graph.describe(i)).collect::<Vec<_>>().join(", ")
                        ),
                    ))
                }
            }
        }
        let plan = Plan::forward_only(&self.joint, &outputs)?;
        Ok(Inference { model: self, plan })
    }

    /// The forward graph.
    pub fn forward_graph(&self) -> &Graph {
        &self.forward
    }

    /// The joint forward + backward graph.
    pub fn joint(&self) -> &JointGraph {
        &self.joint
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Fresh parameters, initialised as each was declared, from `seed`. The memory is reserved
    /// first: a parameter larger than this machine can hold is an error naming it, not an abort.
    pub fn init_params(&self, seed: u64) -> Result<Params> {
        Params::init(&self.forward, seed)
    }

    /// Runs forward and backward once: the loss, further outputs and parameter gradients.
    pub fn step<B: Backend>(&self, backend: &mut B, params: &Params, feeds: &Feeds) -> Result<StepOutput> {
        self.step_seeded(backend, params, feeds, 0)
    }

    /// [`Model::step`] with a seed for random ops (dropout draws fresh masks per seed).
    pub fn step_seeded<B: Backend>(
        &self,
        backend: &mut B,
        params: &Params,
        feeds: &Feeds,
        run_seed: u64,
    ) -> Result<StepOutput> {
        let resident = self.resident_values(&self.plan, params, feeds)?;
        let out = exec::run(backend, &self.joint, &self.plan, &resident, run_seed)?;
        self.step_output(out)
    }

    /// [`Model::step_seeded`], handing each parameter's gradient to `on_grad` (its index in
    /// [`Params`] order and a copy) the moment the backward has finished it — before the step
    /// returns, so a data-parallel run reduces gradients while the backward goes on. The plan
    /// decides the order; it is the same on every run of the same model.
    pub fn step_streaming<B: Backend>(
        &self,
        backend: &mut B,
        params: &Params,
        feeds: &Feeds,
        run_seed: u64,
        on_grad: &mut dyn FnMut(usize, HostTensor) -> Result<()>,
    ) -> Result<StepOutput> {
        let resident = self.resident_values(&self.plan, params, feeds)?;
        let n_outputs = self.joint.forward_outputs().len();
        let mut on_final = |k: usize, value: HostTensor| on_grad(k - n_outputs, value);
        let out = exec::run_streaming(backend, &self.joint, &self.plan, &resident, run_seed, n_outputs, &mut on_final)?;
        self.step_output(out)
    }

    /// The order in which [`Model::step_streaming`] hands the gradients over (parameter
    /// indices): the order in which the plan's backward finishes them.
    pub fn gradient_order(&self) -> Vec<usize> {
        let n_outputs = self.joint.forward_outputs().len();
        let mut watch = exec::first_kept(&self.plan, self.joint.graph().len(), n_outputs);
        let mut order = Vec::with_capacity(self.plan.kept().len().saturating_sub(n_outputs));
        for step in self.plan.steps() {
            if let Step::Compute(id) | Step::Recompute(id) | Step::Alias(id) = *step {
                order.extend(watch[id.index()].take().map(|k| k - n_outputs));
            }
        }
        // Kept values no step computes (a parameter's gradient that is a resident value) are
        // handed over at the end, in node order.
        order.extend(watch.into_iter().flatten().map(|k| k - n_outputs));
        order
    }

    fn step_output(&self, out: exec::RunOutput) -> Result<StepOutput> {
        let n_outputs = self.joint.forward_outputs().len();
        let mut kept = out.kept.into_iter();
        let loss = kept.next().ok_or_else(|| Error::internal("the plan returned no loss"))?.scalar()?;
        let outputs: Vec<HostTensor> = kept.by_ref().take(n_outputs - 1).collect();
        Ok(StepOutput {
            loss,
            outputs,
            grads: kept.collect(),
            predicted_peak: self.plan.predicted_peak(),
            measured_peak: out.measured_peak,
            predicted_host_peak: self.plan.predicted_host_peak(),
            measured_host_peak: out.measured_host_peak,
            transfers: out.transfers,
        })
    }

    fn resident_values<'a>(&'a self, plan: &Plan, params: &'a Params, feeds: &'a Feeds) -> Result<Vec<&'a HostTensor>> {
        let graph = &self.forward;
        check_feeds(graph, feeds)?;
        if params.ids != graph.params() {
            return Err(Error::config("params", "these parameters belong to another graph (use Model::init_params)"));
        }
        let mut values = Vec::new();
        for &id in plan.resident() {
            let node = graph.node(id);
            let name = graph.leaf_name(id);
            let value = match node.op {
                Op::Param { .. } => params.value_of(id),
                Op::ConstantData { ref value } => Some(&**value),
                _ => feeds.values.get(&name),
            };
            values.push(value.ok_or_else(|| Error::Feed {
                what: node.op.name(),
                name,
                message: "no value given".into(),
            })?);
        }
        Ok(values)
    }
}

/// Every feed names an input of `graph` and fits its declaration, whether the plan reads it or
/// not: an unused input fed a wrong value is a mistake the next model change would turn into a
/// wrong result, so it is refused like a used one.
pub(crate) fn check_feeds(graph: &Graph, feeds: &Feeds) -> Result<()> {
    let inputs: Vec<(NodeId, String)> = graph.inputs().iter().map(|&i| (i, graph.leaf_name(i))).collect();
    for (name, value) in &feeds.values {
        match inputs.iter().find(|(_, declared)| declared == name) {
            Some(&(id, _)) => exec::check_feed(graph, id, value)?,
            None => {
                let names: Vec<&str> = inputs.iter().map(|(_, n)| n.as_str()).collect();
                return Err(Error::Feed {
                    what: "input",
                    name: name.clone(),
                    message: format!("not an input of the graph (inputs: {})", names.join(", ")),
                });
            }
        }
    }
    Ok(())
}

/// A forward-only program over a [`Model`] (see [`Model::inference`]).
#[derive(Clone, Debug)]
pub struct Inference<'m> {
    model: &'m Model,
    plan: Plan,
}

/// What one forward-only run returns.
#[derive(Clone, Debug)]
pub struct InferenceOutput {
    /// The values asked for, in the order named.
    pub values: Vec<HostTensor>,
    /// The plan's predicted peak bytes (the inputs and parameters it reads included).
    pub predicted_peak: usize,
    /// The peak bytes the backend measured during the run.
    pub measured_peak: usize,
}

impl Inference<'_> {
    /// The forward-only plan (its backward program is empty; nothing is saved).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Runs the forward pass once with `params`, dropout off.
    pub fn run<B: Backend>(&self, backend: &mut B, params: &Params, feeds: &Feeds) -> Result<InferenceOutput> {
        let resident = self.model.resident_values(&self.plan, params, feeds)?;
        let out = exec::run_inference(backend, &self.model.joint, &self.plan, &resident)?;
        Ok(InferenceOutput {
            values: out.kept,
            predicted_peak: self.plan.predicted_peak(),
            measured_peak: out.measured_peak,
        })
    }
}

/// The values of a graph's parameters, in the graph's parameter order.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub(crate) ids: Vec<NodeId>,
    pub(crate) names: Vec<String>,
    pub(crate) values: Vec<HostTensor>,
}

impl Params {
    /// Parameters of `graph`, each initialised as declared ([`Init`]) from `seed`; an error
    /// naming the parameter when its memory cannot be had.
    pub fn init(graph: &Graph, seed: u64) -> Result<Params> {
        let ids = graph.params();
        let mut names = Vec::new();
        let mut values = Vec::new();
        for &id in &ids {
            let node = graph.node(id);
            let init = match node.op {
                Op::Param { init } => init,
                _ => Init::Zeros,
            };
            let name = graph.leaf_name(id);
            let value = initial_value(&node.shape, node.dtype, init, seed, id.raw() as u64).map_err(|e| match e {
                Error::HostMemory { bytes, .. } => Error::HostMemory {
                    what: format!("parameter {} {} {}", crate::text::quoted(&name), fmt_shape(&node.shape), node.dtype),
                    bytes,
                },
                other => other,
            })?;
            names.push(name);
            values.push(value);
        }
        Ok(Params { ids, names, values })
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The values, in order.
    pub fn values(&self) -> &[HostTensor] {
        &self.values
    }

    /// The values, mutably (optimizers update them in place).
    pub fn values_mut(&mut self) -> &mut [HostTensor] {
        &mut self.values
    }

    /// The value of parameter `name`.
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.names.iter().position(|n| n == name).map(|i| &self.values[i])
    }

    /// Replaces the value of parameter `name`; its shape and dtype must match.
    pub fn set(&mut self, name: &str, value: HostTensor) -> Result<()> {
        let i = self.names.iter().position(|n| n == name).ok_or_else(|| Error::Feed {
            what: "param",
            name: name.to_string(),
            message: format!("no such parameter (parameters: {})", self.names.join(", ")),
        })?;
        let old = &self.values[i];
        if old.shape() != value.shape() || old.dtype() != value.dtype() {
            return Err(Error::Feed {
                what: "param",
                name: name.to_string(),
                message: format!(
                    "declared {} {}, got {} {}",
                    fmt_shape(old.shape()),
                    old.dtype(),
                    fmt_shape(value.shape()),
                    value.dtype()
                ),
            });
        }
        self.values[i] = value;
        Ok(())
    }

    fn value_of(&self, id: NodeId) -> Option<&HostTensor> {
        self.ids.iter().position(|&i| i == id).map(|i| &self.values[i])
    }
}

fn initial_value(shape: &[usize], dtype: crate::DType, init: Init, seed: u64, key: u64) -> Result<HostTensor> {
    let normal = |std: f64| HostTensor::from_fn(shape, dtype, |i| std * rng::normal_f64(seed, key, i as u64));
    match init {
        Init::Zeros => HostTensor::full(shape, 0.0, dtype),
        Init::Ones => HostTensor::full(shape, 1.0, dtype),
        Init::Normal(std) => normal(std),
        Init::Auto if shape.len() >= 2 => normal(1.0 / (shape[shape.len() - 2] as f64).sqrt()),
        Init::Auto => HostTensor::full(shape, 0.0, dtype),
    }
}
