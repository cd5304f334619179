//! Optimizers: update parameters in place from a step's gradients.
//!
//! Updates are computed in f64 and rounded back to each parameter's dtype (round to nearest
//! even); optimizer state is kept in f64, so a saved and restored state resumes bit-exactly.
//!
//! An optimizer's state belongs to the parameters it was first stepped with: stepping it with
//! parameters of another name, shape or dtype is an error naming the parameter (a model with as
//! many but smaller parameters would otherwise update only part of each), and so are
//! hyperparameters no update can use (a NaN learning rate, a `beta` of 1).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::{HostData, HostTensor, HostValuesMut};
use crate::model::Params;
use crate::shape::fmt_shape;
use crate::update::UpdateRule;

/// Something that updates parameters from gradients.
pub trait Optimizer {
    /// Applies one update. `grads` are in [`Params`] order, as [`crate::StepOutput::grads`].
    fn step(&mut self, params: &mut Params, grads: &[HostTensor]) -> Result<()>;
}

/// The parameters an optimizer state belongs to: name, shape and dtype of each, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Layout(pub(crate) Vec<(String, Vec<usize>, DType)>);

impl Layout {
    pub(crate) fn of(params: &Params) -> Layout {
        Layout(
            params
                .names()
                .iter()
                .zip(params.values())
                .map(|(n, v)| (n.clone(), v.shape().to_vec(), v.dtype()))
                .collect(),
        )
    }

    /// Whether `params` are the parameters of this layout; the error names the first that
    /// differs.
    pub(crate) fn check(&self, params: &Params, what: &str) -> Result<()> {
        let here = Layout::of(params);
        if here.0.len() != self.0.len() {
            return Err(Error::optimizer_state(format!(
                "{what} belongs to a model with {} parameters, these are {}",
                self.0.len(),
                here.0.len()
            )));
        }
        for (k, ((name, shape, dtype), (n, s, d))) in here.0.iter().zip(&self.0).enumerate() {
            if name != n || shape != s || dtype != d {
                return Err(Error::Feed {
                    what: "param",
                    name: name.clone(),
                    message: format!(
                        "{what} belongs to other parameters: this one is {} {dtype}, parameter {k} of the state is `{}` {} {d}",
                        fmt_shape(shape),
                        crate::text::shorten(n, crate::text::CELL),
                        fmt_shape(s),
                    ),
                });
            }
        }
        Ok(())
    }
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
    layout: Layout,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Sgd { lr, momentum: 0.0, weight_decay: 0.0, velocity: Vec::new(), layout: Layout::default() }
    }

    /// With momentum.
    pub fn with_momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }

    fn validate(&self) -> Result<()> {
        UpdateRule::from(self).validate()
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, params: &mut Params, grads: &[HostTensor]) -> Result<()> {
        self.validate()?;
        check(params, grads)?;
        bind(&mut self.layout, &mut [&mut self.velocity], params, "the SGD state")?;
        let c = UpdateRule::from(&*self).coefficients(1);
        for ((p, g), v) in params.values_mut().iter_mut().zip(grads).zip(&mut self.velocity) {
            // The velocity is kept even without momentum (then it is the gradient).
            update(p, g, v.iter_mut(), |w, g, v| {
                *v = c.beta1 * *v + g;
                c.sgd(w, *v, None)
            })?;
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
    pub(crate) t: u64,
    pub(crate) m: Vec<Vec<f64>>,
    pub(crate) v: Vec<Vec<f64>>,
    pub(crate) layout: Layout,
}

impl AdamW {
    /// AdamW with learning rate `lr` and the usual defaults (0.9, 0.999, 1e-8, decay 0.01).
    pub fn new(lr: f64) -> Self {
        AdamW {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            t: 0,
            m: Vec::new(),
            v: Vec::new(),
            layout: Layout::default(),
        }
    }

    /// Steps taken so far.
    pub fn t(&self) -> u64 {
        self.t
    }

    /// The first and second moments, one vector per parameter (empty before the first step).
    pub fn moments(&self) -> (&[Vec<f64>], &[Vec<f64>]) {
        (&self.m, &self.v)
    }

    /// This optimizer with the state of `t` steps over `params`: the moments `m` and `v`, one
    /// vector per parameter (as [`AdamW::moments`] gives them), e.g. gathered from the ranks of a
    /// sharded run to save a training state. Moments of the wrong count or length are an error
    /// naming the parameter.
    pub fn with_state(mut self, params: &Params, t: u64, m: Vec<Vec<f64>>, v: Vec<Vec<f64>>) -> Result<AdamW> {
        for (what, moment) in [("m", &m), ("v", &v)] {
            if moment.len() != params.len() {
                return Err(Error::optimizer_state(format!(
                    "AdamW moments `{what}`: {} vectors for {} parameters",
                    moment.len(),
                    params.len()
                )));
            }
            for ((name, p), x) in params.names().iter().zip(params.values()).zip(moment) {
                if x.len() != p.numel() {
                    return Err(Error::Feed {
                        what: "param",
                        name: name.clone(),
                        message: format!("AdamW moment `{what}` has {} values for {} elements", x.len(), p.numel()),
                    });
                }
            }
        }
        self.layout = Layout::of(params);
        (self.t, self.m, self.v) = (t, m, v);
        Ok(self)
    }

    /// Checks the hyperparameters: `lr`, `eps` and `weight_decay` finite (`lr` and
    /// `weight_decay` at least 0, `eps` above 0), `beta1` and `beta2` in [0, 1).
    pub fn validate(&self) -> Result<()> {
        UpdateRule::from(self).validate()
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, params: &mut Params, grads: &[HostTensor]) -> Result<()> {
        self.validate()?;
        check(params, grads)?;
        let t = self
            .t
            .checked_add(1)
            .ok_or_else(|| Error::optimizer_state(format!("AdamW has taken {} steps, the most it counts", self.t)))?;
        bind(&mut self.layout, &mut [&mut self.m, &mut self.v], params, "the AdamW state")?;
        self.t = t;
        let rule = self.rule(t);
        let moments = params.values_mut().iter_mut().zip(grads).zip(self.m.iter_mut().zip(&mut self.v));
        for ((p, g), (m, v)) in moments {
            update(p, g, m.iter_mut().zip(v.iter_mut()), &rule)?;
        }
        Ok(())
    }
}

impl AdamW {
    /// The update of one element at step `t` (1 for the first): new weight from the old one, its
    /// gradient and its moments (updated in place).
    fn rule(&self, t: u64) -> impl Fn(f64, f64, (&mut f64, &mut f64)) -> f64 {
        let c = UpdateRule::from(self).coefficients(t);
        move |w, g, (m, v)| c.adamw(w, g, m, v)
    }

    /// Step `t` (1 for the first) of AdamW on a run of elements: `w` (the weights, in f64;
    /// round them to the parameter's dtype as [`Optimizer::step`] does), `g` their gradients,
    /// `m` and `v` their moments. The arithmetic of [`Optimizer::step`] element for element, for
    /// an optimizer that owns a slice of the parameters (ZeRO-1: each rank updates its shard and
    /// the shards are gathered), so a sharded run's weights equal an unsharded run's bit for bit.
    pub fn update_elements(&self, t: u64, w: &mut [f64], g: &[f64], m: &mut [f64], v: &mut [f64]) -> Result<()> {
        self.validate()?;
        if t == 0 {
            return Err(Error::config("t", "AdamW steps count from 1"));
        }
        let n = w.len();
        if g.len() != n || m.len() != n || v.len() != n {
            return Err(Error::config(
                "elements",
                format!("AdamW on {n} weights got {} gradients and {} + {} moments", g.len(), m.len(), v.len()),
            ));
        }
        let rule = self.rule(t);
        for (((w, &g), m), v) in w.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            *w = rule(*w, g, (m, v));
        }
        Ok(())
    }
}

fn check(params: &Params, grads: &[HostTensor]) -> Result<()> {
    if grads.len() != params.len() {
        return Err(Error::config("grads", format!("{} gradients for {} parameters", grads.len(), params.len())));
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

/// Binds per-parameter `states` to `params`: created (zeros) on the first step, and from then on
/// refused for parameters of another name, shape or dtype. Every state vector has exactly its
/// parameter's element count afterwards.
fn bind(layout: &mut Layout, states: &mut [&mut Vec<Vec<f64>>], params: &Params, what: &str) -> Result<()> {
    if layout.0.is_empty() && states.iter().all(|s| s.is_empty()) {
        for state in states.iter_mut() {
            **state = params.values().iter().map(|p| vec![0.0; p.numel()]).collect();
        }
        *layout = Layout::of(params);
        return Ok(());
    }
    layout.check(params, what)?;
    for state in states.iter() {
        let fits = state.len() == params.len() && state.iter().zip(params.values()).all(|(s, p)| s.len() == p.numel());
        if !fits {
            return Err(Error::optimizer_state(format!(
                "{what} holds moments of the wrong length for its own parameters"
            )));
        }
    }
    Ok(())
}

/// Applies `f(old, gradient, state) -> new` to every element (in f64), rounding the result to
/// the parameter's own precision; `state` yields each element's optimizer state in order (as
/// many as the parameter has elements: [`bind`] checked it).
///
/// f32 and f64 parameters with gradients of their own dtype are updated in place by one zipped
/// pass (no index, no bounds checks, no converted copies); other dtypes go through f64 copies.
fn update<S>(
    p: &mut HostTensor,
    g: &HostTensor,
    state: impl Iterator<Item = S>,
    f: impl Fn(f64, f64, S) -> f64,
) -> Result<()> {
    let dtype = p.dtype();
    match (p.values_mut(), g.data()) {
        (HostValuesMut::F64(w), HostData::F64(g)) => {
            w.iter_mut().zip(g).zip(state).for_each(|((x, &g), s)| *x = f(*x, g, s));
        }
        (HostValuesMut::F32(w), HostData::F32(g)) => {
            w.iter_mut().zip(g).zip(state).for_each(|((x, &g), s)| *x = f(*x as f64, g as f64, s) as f32);
        }
        _ => {
            let old = p.to_f64_vec();
            let new: Vec<f64> = old.into_iter().zip(g.to_f64_vec()).zip(state).map(|((x, g), s)| f(x, g, s)).collect();
            p.set_data(HostData::from_f64(&new, dtype))?;
        }
    }
    Ok(())
}

impl From<&AdamW> for UpdateRule {
    fn from(a: &AdamW) -> UpdateRule {
        UpdateRule::AdamW { lr: a.lr, beta1: a.beta1, beta2: a.beta2, eps: a.eps, weight_decay: a.weight_decay }
    }
}

impl From<&Sgd> for UpdateRule {
    fn from(s: &Sgd) -> UpdateRule {
        UpdateRule::Sgd { lr: s.lr, momentum: s.momentum, weight_decay: s.weight_decay }
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
        let mut p = Params::init(&trace.finish(&loss).unwrap(), 0).unwrap();
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
