//! Optimizers: update parameters in place from a step's gradients.
//!
//! Updates are computed in f64 and rounded back to each parameter's dtype (round to nearest
//! even); optimizer state is kept in f64, so a saved and restored state resumes bit-exactly.

use crate::error::{Error, Result};
use crate::host::{HostData, HostTensor};
use crate::model::Params;
use crate::shape::fmt_shape;

/// Something that updates parameters from gradients.
pub trait Optimizer {
    /// Applies one update. `grads` are in [`Params`] order, as [`crate::StepOutput::grads`].
    fn step(&mut self, params: &mut Params, grads: &[HostTensor]) -> Result<()>;
}

/// Stochastic gradient descent with optional momentum and decoupled weight decay.
#[derive(Clone, Debug)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f64,
    /// Momentum (0 for plain SGD).
    pub momentum: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    velocity: Vec<Vec<f64>>,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Sgd { lr, momentum: 0.0, weight_decay: 0.0, velocity: Vec::new() }
    }

    /// With momentum.
    pub fn with_momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, params: &mut Params, grads: &[HostTensor]) -> Result<()> {
        check(params, grads)?;
        ensure_state(&mut self.velocity, params);
        for (i, (p, g)) in params.values_mut().iter_mut().zip(grads).enumerate() {
            let g = g.to_f64_vec();
            let v = &mut self.velocity[i];
            update(p, |j, w| {
                v[j] = self.momentum * v[j] + g[j];
                w - self.lr * (v[j] + self.weight_decay * w)
            });
        }
        Ok(())
    }
}

/// AdamW (Loshchilov & Hutter): Adam with decoupled weight decay.
#[derive(Clone, Debug)]
pub struct AdamW {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator epsilon.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// Steps taken so far.
    pub t: u64,
    /// First moments, one per parameter.
    pub m: Vec<Vec<f64>>,
    /// Second moments, one per parameter.
    pub v: Vec<Vec<f64>>,
}

impl AdamW {
    /// AdamW with learning rate `lr` and the usual defaults (0.9, 0.999, 1e-8, decay 0.01).
    pub fn new(lr: f64) -> Self {
        AdamW { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, t: 0, m: Vec::new(), v: Vec::new() }
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, params: &mut Params, grads: &[HostTensor]) -> Result<()> {
        check(params, grads)?;
        ensure_state(&mut self.m, params);
        ensure_state(&mut self.v, params);
        self.t += 1;
        let bias1 = 1.0 - self.beta1.powi(self.t as i32);
        let bias2 = 1.0 - self.beta2.powi(self.t as i32);
        for (i, (p, g)) in params.values_mut().iter_mut().zip(grads).enumerate() {
            let g = g.to_f64_vec();
            let (m, v) = (&mut self.m[i], &mut self.v[i]);
            update(p, |j, w| {
                m[j] = self.beta1 * m[j] + (1.0 - self.beta1) * g[j];
                v[j] = self.beta2 * v[j] + (1.0 - self.beta2) * g[j] * g[j];
                let step = (m[j] / bias1) / ((v[j] / bias2).sqrt() + self.eps);
                w - self.lr * (step + self.weight_decay * w)
            });
        }
        Ok(())
    }
}

fn check(params: &Params, grads: &[HostTensor]) -> Result<()> {
    if grads.len() != params.len() {
        return Err(Error::Invalid(format!("{} gradients for {} parameters", grads.len(), params.len())));
    }
    for ((name, p), g) in params.names().iter().zip(params.values()).zip(grads) {
        if p.shape() != g.shape() {
            return Err(Error::Feed {
                what: "param",
                name: name.clone(),
                message: format!("gradient has shape {}, parameter {}", fmt_shape(g.shape()), fmt_shape(p.shape())),
            });
        }
    }
    Ok(())
}

fn ensure_state(state: &mut Vec<Vec<f64>>, params: &Params) {
    if state.len() != params.len() {
        *state = params.values().iter().map(|p| vec![0.0; p.numel()]).collect();
    }
}

/// Applies `f(index, old) -> new` to every element, in the parameter's own precision.
fn update(p: &mut HostTensor, mut f: impl FnMut(usize, f64) -> f64) {
    let dtype = p.dtype();
    match p.data_mut() {
        HostData::F64(w) => w.iter_mut().enumerate().for_each(|(j, x)| *x = f(j, *x)),
        HostData::F32(w) => w.iter_mut().enumerate().for_each(|(j, x)| *x = f(j, *x as f64) as f32),
        other => {
            let new: Vec<f64> = other.to_f64_vec().into_iter().enumerate().map(|(j, x)| f(j, x)).collect();
            *other = HostData::from_f64(&new, dtype);
        }
    }
}
