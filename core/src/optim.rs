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
        let (lr, momentum, decay) = (self.lr, self.momentum, self.weight_decay);
        for ((p, g), v) in params.values_mut().iter_mut().zip(grads).zip(&mut self.velocity) {
            update(p, g, v.iter_mut(), |w, g, v| {
                *v = momentum * *v + g;
                w - lr * (*v + decay * w)
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
        let (lr, beta1, beta2, eps, decay) = (self.lr, self.beta1, self.beta2, self.eps, self.weight_decay);
        let moments = params.values_mut().iter_mut().zip(grads).zip(self.m.iter_mut().zip(&mut self.v));
        for ((p, g), (m, v)) in moments {
            update(p, g, m.iter_mut().zip(v.iter_mut()), |w, g, (m, v)| {
                *m = beta1 * *m + (1.0 - beta1) * g;
                *v = beta2 * *v + (1.0 - beta2) * g * g;
                let step = (*m / bias1) / ((*v / bias2).sqrt() + eps);
                w - lr * (step + decay * w)
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

/// Applies `f(old, gradient, state) -> new` to every element (in f64), rounding the result to
/// the parameter's own precision; `state` yields each element's optimizer state in order.
///
/// f32 and f64 parameters with gradients of their own dtype are updated in place by one zipped
/// pass (no index, no bounds checks, no converted copies); other dtypes go through f64 copies.
fn update<S>(p: &mut HostTensor, g: &HostTensor, state: impl Iterator<Item = S>, f: impl Fn(f64, f64, S) -> f64) {
    let dtype = p.dtype();
    match (p.data_mut(), g.data()) {
        (HostData::F64(w), HostData::F64(g)) => {
            w.iter_mut().zip(g).zip(state).for_each(|((x, &g), s)| *x = f(*x, g, s));
        }
        (HostData::F32(w), HostData::F32(g)) => {
            w.iter_mut().zip(g).zip(state).for_each(|((x, &g), s)| *x = f(*x as f64, g as f64, s) as f32);
        }
        (other, g) => {
            let old = other.to_f64_vec();
            let new: Vec<f64> = old.into_iter().zip(g.to_f64_vec()).zip(state).map(|((x, g), s)| f(x, g, s)).collect();
            *other = HostData::from_f64(&new, dtype);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::trace::Trace;
    use half::bf16;

    /// Parameters of three dtypes (f64 `[3]`, f32 `[2, 2]`, bf16 `[3]`), set to known values.
    fn params() -> Params {
        let trace = Trace::new();
        let a = trace.param("a", &[3], DType::F64);
        let b = trace.param("b", &[2, 2], DType::F32);
        let c = trace.param("c", &[3], DType::BF16);
        let loss = &(&a.sum_all() + &b.cast(DType::F64).sum_all()) + &c.cast(DType::F64).sum_all();
        let mut p = Params::init(&trace.finish(&loss).unwrap(), 0);
        p.set("a", HostTensor::f64(vec![3], vec![0.5, -1.25, 2.0]).unwrap()).unwrap();
        p.set("b", HostTensor::f32(vec![2, 2], vec![0.1, -0.2, 0.3, 4.0]).unwrap()).unwrap();
        p.set("c", HostTensor::from_f32(vec![3], &[1.5, -0.75, 0.0], DType::BF16).unwrap()).unwrap();
        p
    }

    /// Step `s`'s gradients: fixed but different per step and element.
    fn grads(p: &Params, s: usize) -> Vec<HostTensor> {
        p.values()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let g: Vec<f64> = (0..t.numel()).map(|j| ((s * 7 + i * 3 + j) % 5) as f64 * 0.3 - 0.6).collect();
                HostTensor::new(t.shape().to_vec(), HostData::from_f64(&g, t.dtype())).unwrap()
            })
            .collect()
    }

    /// Rounds an f64 to a parameter's dtype and back.
    fn round(x: f64, dtype: DType) -> f64 {
        match dtype {
            DType::F32 => x as f32 as f64,
            DType::BF16 => bf16::from_f64(x).to_f64(),
            _ => x,
        }
    }

    /// AdamW as Loshchilov & Hutter and `torch.optim.AdamW` write it, element by element in f64,
    /// the weight rounded to its dtype after each step.
    #[test]
    fn adamw_matches_the_textbook_update_in_every_dtype() {
        let mut p = params();
        let mut opt = AdamW::new(0.05);
        let mut want: Vec<Vec<f64>> = p.values().iter().map(|t| t.to_f64_vec()).collect();
        let mut m: Vec<Vec<f64>> = want.iter().map(|w| vec![0.0; w.len()]).collect();
        let mut v = m.clone();
        for s in 1..=4 {
            let g = grads(&p, s);
            opt.step(&mut p, &g).unwrap();
            for (i, w) in want.iter_mut().enumerate() {
                let (gi, dtype) = (g[i].to_f64_vec(), p.values()[i].dtype());
                for j in 0..w.len() {
                    m[i][j] = 0.9 * m[i][j] + 0.1 * gi[j];
                    v[i][j] = 0.999 * v[i][j] + (1.0 - 0.999) * gi[j] * gi[j];
                    let m_hat = m[i][j] / (1.0 - 0.9f64.powi(s as i32));
                    let v_hat = v[i][j] / (1.0 - 0.999f64.powi(s as i32));
                    w[j] = round(w[j] - 0.05 * (m_hat / (v_hat.sqrt() + 1e-8) + 0.01 * w[j]), dtype);
                }
            }
            for (i, w) in want.iter().enumerate() {
                let got = p.values()[i].to_f64_vec();
                let close = got.iter().zip(w).all(|(a, b)| (a - b).abs() <= 1e-12 * b.abs().max(1.0));
                assert!(close, "step {s}, parameter {}: {got:?} vs {w:?}", p.names()[i]);
            }
        }
    }

    #[test]
    fn sgd_with_momentum_and_decay_matches_the_textbook_update() {
        let mut p = params();
        let mut opt = Sgd::new(0.1).with_momentum(0.5);
        opt.weight_decay = 0.02;
        let mut want: Vec<Vec<f64>> = p.values().iter().map(|t| t.to_f64_vec()).collect();
        let mut vel: Vec<Vec<f64>> = want.iter().map(|w| vec![0.0; w.len()]).collect();
        for s in 1..=3 {
            let g = grads(&p, s);
            opt.step(&mut p, &g).unwrap();
            for (i, w) in want.iter_mut().enumerate() {
                let (gi, dtype) = (g[i].to_f64_vec(), p.values()[i].dtype());
                for j in 0..w.len() {
                    vel[i][j] = 0.5 * vel[i][j] + gi[j];
                    w[j] = round(w[j] - 0.1 * (vel[i][j] + 0.02 * w[j]), dtype);
                }
            }
            for (i, w) in want.iter().enumerate() {
                assert_eq!(&p.values()[i].to_f64_vec(), w, "step {s}, parameter {}", p.names()[i]);
            }
        }
    }

    #[test]
    fn a_gradient_of_the_wrong_shape_is_an_error_naming_the_parameter() {
        let mut p = params();
        let mut g = grads(&p, 1);
        g[1] = HostTensor::f32(vec![4], vec![0.0; 4]).unwrap();
        let err = AdamW::new(0.1).step(&mut p, &g).unwrap_err().to_string();
        assert!(err.contains('b') && err.contains("[4]") && err.contains("[2, 2]"), "{err}");
    }
}
