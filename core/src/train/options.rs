//! How a [`TrainState`](super::TrainState) updates its parameters ([`TrainOptions`]), what its optimizer holds
//! beside the plan, and planning a model for training under a peak budget.

use crate::autodiff::JointGraph;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};
use crate::model::Model;
use crate::optim::{AdamW, Sgd};
use crate::partition::{CostModel, Strategy};
use crate::update::{check_setting, UpdateRule};

/// How a [`TrainState`](super::TrainState) updates its parameters: the rule, global-norm clipping, and the dtype
/// of the optimizer state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainOptions {
    /// The optimizer and its hyperparameters.
    pub rule: UpdateRule,
    /// Scale every gradient by `min(1, max / ‖g‖)` (‖g‖ over all of them) before the update,
    /// as `torch.nn.utils.clip_grad_norm_`.
    pub max_grad_norm: Option<f64>,
    /// The optimizer state's dtype: f32 (the default, as PyTorch's) or f64 (as the host
    /// optimizers: the same updates bit for bit).
    pub state_dtype: DType,
    /// Mixed precision: master weights in this dtype (f32 or f64) for every parameter the model
    /// declares narrower (bf16, f16). The optimizer updates the masters; the model computes with
    /// copies rounded to its own dtype, refreshed on the device after each update.
    pub master_dtype: Option<DType>,
}

impl TrainOptions {
    /// `rule`, no clipping, f32 state.
    pub fn new(rule: UpdateRule) -> TrainOptions {
        TrainOptions { rule, max_grad_norm: None, state_dtype: DType::F32, master_dtype: None }
    }

    /// With global-norm clipping at `max`.
    pub fn clip_grad_norm(mut self, max: f64) -> TrainOptions {
        self.max_grad_norm = Some(max);
        self
    }

    /// With the optimizer state in `dtype` (f32 or f64).
    pub fn state_dtype(mut self, dtype: DType) -> TrainOptions {
        self.state_dtype = dtype;
        self
    }

    /// With master weights in `dtype` (f32 or f64) for parameters declared narrower: a model
    /// built in bf16 computes in bf16 and is updated in f32.
    pub fn master_weights(mut self, dtype: DType) -> TrainOptions {
        self.master_dtype = Some(dtype);
        self
    }

    /// The dtype of the master weights of a parameter declared `dtype`: `master_dtype` where it
    /// is wider, else none (the parameter is updated in place).
    pub fn master_for(&self, dtype: DType) -> Option<DType> {
        self.master_dtype.filter(|m| m.size() > dtype.size())
    }

    /// Checks the rule's hyperparameters, the clipping norm (finite, above 0) and the state's
    /// dtype.
    pub fn validate(&self) -> Result<()> {
        self.rule.validate()?;
        if let Some(max) = self.max_grad_norm {
            check_setting("max_grad_norm", max, max.is_finite() && max > 0.0, "finite and > 0")?;
        }
        if !matches!(self.state_dtype, DType::F32 | DType::F64) {
            return Err(Error::config(
                "state_dtype",
                format!("optimizer state in {} is not kept: choose f32 or f64", self.state_dtype),
            ));
        }
        if let Some(d) = self.master_dtype.filter(|d| !matches!(d, DType::F32 | DType::F64)) {
            return Err(Error::config(
                "master_dtype",
                format!("master weights in {d} are not kept: choose f32 or f64"),
            ));
        }
        Ok(())
    }
}

impl From<&AdamW> for TrainOptions {
    fn from(a: &AdamW) -> TrainOptions {
        TrainOptions::new(a.into())
    }
}

impl From<&Sgd> for TrainOptions {
    fn from(s: &Sgd) -> TrainOptions {
        TrainOptions::new(s.into())
    }
}

impl Model {
    /// [`Model::with_strategy`] for training with `options`: a `peak=B` strategy (with or
    /// without offload) bounds the whole [`TrainState::step`](super::TrainState::step), so the
    /// planner gets `B` less what the optimizer holds beside the plan — the state, the master
    /// weights, and the most the update adds for a moment (‖g‖², a working copy cast from its
    /// master, a gradient that is a parameter copied). Then
    /// [`TrainState::predicted_peak`](super::TrainState::predicted_peak) is at most `B`. A `B`
    /// below that reserve is an error naming both.
    pub fn for_training(forward: Graph, strategy: Strategy, options: &TrainOptions) -> Result<Model> {
        let joint = JointGraph::new(&forward)?;
        let reserve = training_reserve(&joint, options)?;
        let solve = |strategy| Model::with_joint(forward, joint, strategy, &CostModel::default());
        let strategy = match strategy {
            Strategy::Peak(b) | Strategy::PeakOffload(b) => {
                let left = b.checked_sub(reserve as u64).ok_or_else(|| {
                    Error::config(
                        "strategy",
                        format!(
                            "{strategy} leaves nothing for the step: the optimizer holds {reserve} bytes beside it (state, master weights, the update's own)"
                        ),
                    )
                })?;
                match strategy {
                    Strategy::Peak(_) => Strategy::Peak(left),
                    _ => Strategy::PeakOffload(left),
                }
            }
            other => return solve(other),
        };
        // A refusal speaks of the whole step: the limit asked, and the least one that fits.
        solve(strategy).map_err(|e| match e {
            Error::Infeasible { what, asked, least, message } => Error::Infeasible {
                what,
                asked: asked + reserve as u64,
                least: least.map(|l| l + reserve as u64),
                message: format!(
                    "for training, the optimizer holds {reserve} bytes beside the step, which leaves the plan: {message}"
                ),
            },
            other => other,
        })
    }
}

/// The bytes a [`TrainState`](super::TrainState) with `options` holds beside the plan of `joint` at its peak.
fn training_reserve(joint: &JointGraph, options: &TrainOptions) -> Result<usize> {
    options.validate()?;
    let graph = joint.graph();
    let params: Vec<NodeId> = joint.grads().iter().map(|&(p, _)| p).collect();
    let held = OptimizerBytes::of(options, params.iter().map(|&p| (&graph.node(p).shape[..], graph.node(p).dtype)));
    let clip = if options.max_grad_norm.is_some() { DType::F64.size() } else { 0 };
    let copies: usize =
        joint.grads().iter().filter(|(_, g)| params.contains(g)).map(|&(_, g)| graph.node(g).bytes()).sum();
    Ok(held.state + held.masters + held.largest_copy.max(clip).max(copies))
}

/// What the optimizer holds for parameters of the given shapes and dtypes under `options`:
/// its state, the master weights, and the largest working copy a master is cast to.
pub(super) struct OptimizerBytes {
    pub(super) state: usize,
    pub(super) masters: usize,
    pub(super) largest_copy: usize,
}

impl OptimizerBytes {
    pub(super) fn of<'a>(options: &TrainOptions, metas: impl Iterator<Item = (&'a [usize], DType)>) -> OptimizerBytes {
        let mut held = OptimizerBytes { state: 0, masters: 0, largest_copy: 0 };
        for (shape, dtype) in metas {
            let numel: usize = shape.iter().product();
            held.state += numel * options.state_dtype.size() * options.rule.state_count();
            if let Some(m) = options.master_for(dtype) {
                held.masters += numel * m.size();
                held.largest_copy = held.largest_copy.max(numel * dtype.size());
            }
        }
        held
    }
}
