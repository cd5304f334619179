//! The update rules a resident optimizer applies, element by element, and the host reference of
//! the two optimizer kernels every backend runs ([`crate::Backend::update`] and
//! [`crate::Backend::sum_squares`]).
//!
//! One definition of the arithmetic serves the host optimizers ([`crate::AdamW`],
//! [`crate::Sgd`]), the CPU backend's kernels and the CUDA kernels (which take the same
//! [`Coefficients`], computed here on the host): every update is computed in f64 from the
//! stored values and rounded once to each buffer's dtype, so an f64 optimizer state on the
//! device follows the host optimizer bit for bit.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::shape::fmt_shape;

mod job;

pub use job::host_update;
pub(crate) use job::with_update_job;

/// How each parameter is updated from its gradient: the optimizer and its hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UpdateRule {
    /// SGD with momentum and decoupled weight decay, as [`crate::Sgd`]: `v = momentum·v + g`,
    /// `w -= lr·(v + weight_decay·w)`. With `momentum` 0 no state is kept.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum (0 for plain SGD).
        momentum: f64,
        /// Decoupled weight decay.
        weight_decay: f64,
    },
    /// AdamW, as [`crate::AdamW`] (and `torch.optim.AdamW`): two moments per element, bias
    /// corrected, decoupled weight decay.
    AdamW {
        /// Learning rate.
        lr: f64,
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Denominator epsilon.
        eps: f64,
        /// Decoupled weight decay.
        weight_decay: f64,
    },
}

impl UpdateRule {
    /// State buffers kept per parameter: AdamW's two moments, SGD's velocity (none without
    /// momentum).
    pub fn state_count(&self) -> usize {
        match *self {
            UpdateRule::Sgd { momentum, .. } => usize::from(momentum != 0.0),
            UpdateRule::AdamW { .. } => 2,
        }
    }

    /// The names of the state buffers, in order (`m`, `v` for AdamW; `velocity` for SGD).
    pub fn state_names(&self) -> &'static [&'static str] {
        match self {
            UpdateRule::Sgd { .. } => &["velocity"][..self.state_count()],
            UpdateRule::AdamW { .. } => &["m", "v"],
        }
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        match *self {
            UpdateRule::Sgd { lr, .. } | UpdateRule::AdamW { lr, .. } => lr,
        }
    }

    /// This rule with learning rate `lr` (a schedule changes it between steps).
    pub fn with_lr(mut self, new: f64) -> UpdateRule {
        match &mut self {
            UpdateRule::Sgd { lr, .. } | UpdateRule::AdamW { lr, .. } => *lr = new,
        }
        self
    }

    /// Checks the hyperparameters, naming the first no update can use.
    pub fn validate(&self) -> Result<()> {
        match *self {
            UpdateRule::Sgd { lr, momentum, weight_decay } => {
                check_setting("lr", lr, lr.is_finite() && lr >= 0.0, "finite and >= 0")?;
                check_setting("momentum", momentum, (0.0..=1.0).contains(&momentum), "in [0, 1]")?;
                check_setting("weight_decay", weight_decay, weight_decay.is_finite(), "finite")
            }
            UpdateRule::AdamW { lr, beta1, beta2, eps, weight_decay } => {
                check_setting("lr", lr, lr.is_finite() && lr >= 0.0, "finite and >= 0")?;
                check_setting("beta1", beta1, (0.0..1.0).contains(&beta1), "in [0, 1)")?;
                check_setting("beta2", beta2, (0.0..1.0).contains(&beta2), "in [0, 1)")?;
                check_setting("eps", eps, eps.is_finite() && eps > 0.0, "finite and > 0")?;
                check_setting("weight_decay", weight_decay, weight_decay.is_finite(), "finite")
            }
        }
    }

    /// The scalars of step `t` (1 for the first).
    pub fn coefficients(&self, t: u64) -> Coefficients {
        match *self {
            UpdateRule::Sgd { lr, momentum, weight_decay } => Coefficients {
                kind: RuleKind::Sgd,
                lr,
                beta1: momentum,
                beta2: 0.0,
                eps: 0.0,
                weight_decay,
                bias1: 1.0,
                bias2: 1.0,
            },
            UpdateRule::AdamW { lr, beta1, beta2, eps, weight_decay } => Coefficients {
                kind: RuleKind::AdamW,
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                bias1: bias_correction(beta1, t),
                bias2: bias_correction(beta2, t),
            },
        }
    }
}

/// Which arithmetic [`Coefficients`] drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// [`UpdateRule::Sgd`]: `beta1` is the momentum.
    Sgd,
    /// [`UpdateRule::AdamW`].
    AdamW,
}

/// The scalars of one step of an [`UpdateRule`], computed once on the host (so every backend
/// uses the same bias corrections): what a kernel needs besides the buffers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Coefficients {
    /// The rule.
    pub kind: RuleKind,
    /// Learning rate.
    pub lr: f64,
    /// AdamW's first-moment decay; SGD's momentum.
    pub beta1: f64,
    /// AdamW's second-moment decay (0 for SGD).
    pub beta2: f64,
    /// AdamW's epsilon (0 for SGD).
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// `1 − beta1^t` (1 for SGD).
    pub bias1: f64,
    /// `1 − beta2^t` (1 for SGD).
    pub bias2: f64,
}

impl Coefficients {
    /// AdamW's update of one element: the new weight from the old `w`, its gradient `g` and its
    /// moments (updated in place).
    #[inline]
    pub fn adamw(&self, w: f64, g: f64, m: &mut f64, v: &mut f64) -> f64 {
        *m = self.beta1 * *m + (1.0 - self.beta1) * g;
        *v = self.beta2 * *v + (1.0 - self.beta2) * g * g;
        let step = (*m / self.bias1) / ((*v / self.bias2).sqrt() + self.eps);
        w - self.lr * (step + self.weight_decay * w)
    }

    /// SGD's update of one element; `velocity` is updated in place (`None` without momentum:
    /// the step is the gradient).
    #[inline]
    pub fn sgd(&self, w: f64, g: f64, velocity: Option<&mut f64>) -> f64 {
        let step = match velocity {
            Some(v) => {
                *v = self.beta1 * *v + g;
                *v
            }
            None => g,
        };
        w - self.lr * (step + self.weight_decay * w)
    }
}

/// `Ok` when `ok` holds for `value` and it is not NaN; else an error naming the setting and what
/// it must be.
pub(crate) fn check_setting(name: &str, value: f64, ok: bool, expected: &str) -> Result<()> {
    if ok && !value.is_nan() {
        Ok(())
    } else {
        Err(Error::config(name, format!("optimizer setting `{name}` is {value}; it must be {expected}")))
    }
}

/// `1 - beta^t`: `powi` while `t` fits its exponent, `powf` past it (where `beta^t` is 0
/// anyway), never a wrapped exponent.
pub(crate) fn bias_correction(beta: f64, t: u64) -> f64 {
    match i32::try_from(t) {
        Ok(t) => 1.0 - beta.powi(t),
        Err(_) => 1.0 - beta.powf(t as f64),
    }
}

/// The factor global-norm clipping scales every gradient by, from the sum of their squares:
/// `min(1, max_norm / (‖g‖ + 1e-6))`, as `torch.nn.utils.clip_grad_norm_`. A NaN norm (a NaN
/// gradient) gives a NaN factor, as `torch.clamp` keeps NaN, so every weight shows it rather
/// than only those the NaN reached; an infinite norm gives 0.
#[inline]
pub fn clip_factor(max_norm: f64, sum_squares: f64) -> f64 {
    let factor = max_norm / (sum_squares.sqrt() + 1e-6);
    if factor >= 1.0 {
        1.0
    } else {
        factor
    }
}

/// One optimizer step of one parameter, as a backend runs it.
#[derive(Clone, Copy, Debug)]
pub struct UpdateCall<'a> {
    /// The parameter's name (for errors).
    pub name: &'a str,
    /// The step's scalars.
    pub coefficients: Coefficients,
    /// Global-norm clipping: the largest norm. The sum of the squares of every gradient is
    /// handed beside the call ([`crate::Backend::sum_squares`]).
    pub max_norm: Option<f64>,
}

impl UpdateCall<'_> {
    /// The checks every backend makes before updating: gradient and state of the parameter's
    /// shape, the gradient of its dtype, the state in f32 or f64 and as many buffers as the
    /// rule keeps, a float parameter, and the sum of squares there exactly when clipping.
    pub fn check(&self, param: Meta<'_>, grad: Meta<'_>, state: &[Meta<'_>], clipping: bool) -> Result<()> {
        let error = |message: String| Error::Feed { what: "param", name: self.name.to_string(), message };
        if !param.1.is_float() {
            return Err(error(format!("an optimizer updates float parameters, this one is {}", param.1)));
        }
        // A model computing in bf16 hands bf16 gradients to f32 master weights: any float
        // gradient of the parameter's shape will do.
        if grad.0 != param.0 || !grad.1.is_float() {
            return Err(error(format!(
                "its gradient is {} {}, the parameter {} {}",
                fmt_shape(grad.0),
                grad.1,
                fmt_shape(param.0),
                param.1
            )));
        }
        let wanted = match self.coefficients.kind {
            RuleKind::AdamW => 2,
            RuleKind::Sgd => usize::from(self.coefficients.beta1 != 0.0),
        };
        if state.len() != wanted {
            return Err(error(format!("the rule keeps {wanted} state buffers per parameter, {} given", state.len())));
        }
        for s in state {
            if s.0 != param.0 || !matches!(s.1, DType::F32 | DType::F64) {
                return Err(error(format!(
                    "an optimizer state buffer is {} {}; it must be {} in f32 or f64",
                    fmt_shape(s.0),
                    s.1,
                    fmt_shape(param.0)
                )));
            }
        }
        if clipping != self.max_norm.is_some() {
            return Err(Error::internal(format!(
                "update of `{}`: a sum of squares {} without clipping",
                self.name,
                if clipping { "given" } else { "missing" }
            )));
        }
        Ok(())
    }
}

/// A buffer's shape and dtype, as [`UpdateCall::check`] compares them.
pub type Meta<'a> = (&'a [usize], DType);

/// A tensor's [`Meta`].
pub fn meta(t: &HostTensor) -> Meta<'_> {
    (t.shape(), t.dtype())
}

/// Σ x² over every element of `tensors`, in f64, in order: the CPU's [`crate::Backend::sum_squares`].
pub fn host_sum_squares(tensors: &[&HostTensor]) -> Result<f64> {
    let mut sum = 0f64;
    for t in tensors {
        if !t.dtype().is_float() {
            return Err(Error::config("gradients", format!("a sum of squares of a {} tensor", t.dtype())));
        }
        sum = with_f64(t, sum, |sum, x| sum + x * x);
    }
    Ok(sum)
}

/// Folds `f` over the elements of `t` as f64, without a converted copy.
fn with_f64(t: &HostTensor, init: f64, f: impl Fn(f64, f64) -> f64) -> f64 {
    use crate::host::HostData as D;
    match t.data() {
        D::F32(v) => v.iter().fold(init, |a, &x| f(a, x as f64)),
        D::F64(v) => v.iter().fold(init, |a, &x| f(a, x)),
        D::BF16(v) => v.iter().fold(init, |a, x| f(a, x.to_f64())),
        D::F16(v) => v.iter().fold(init, |a, x| f(a, x.to_f64())),
        _ => t.to_f64_vec().into_iter().fold(init, f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// State buffers of two dtypes go element by element, one dtype through the typed loops:
    /// the weights and `m` come out the same (the step reads the moments before they are
    /// stored), and `v` differs only by its rounding.
    #[test]
    fn state_of_two_dtypes_updates_as_state_of_one() {
        let n = 1000;
        let values =
            |k: u64, f: fn(f64) -> f64| (0..n).map(|i| f(crate::rng::normal_f64(k, 0, i))).collect::<Vec<f64>>();
        let tensor = |v: &[f64], dtype: DType| {
            HostTensor::new(vec![n as usize], crate::host::HostData::from_f64(v, dtype)).unwrap()
        };
        let rule = UpdateRule::AdamW { lr: 0.1, beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.01 };
        let call = UpdateCall { name: "w", coefficients: rule.coefficients(2), max_norm: None };
        let (w0, g) = (tensor(&values(1, |x| x), DType::BF16), tensor(&values(2, |x| x), DType::BF16));
        let (m0, v0) = (values(3, |x| 0.1 * x), values(4, |x| 0.01 * x * x));
        let (mut w_one, mut m_one, mut v_one) = (w0.clone(), tensor(&m0, DType::F32), tensor(&v0, DType::F32));
        host_update(&call, &mut w_one, &g, &mut [&mut m_one, &mut v_one], None).unwrap();
        let (mut w_two, mut m_two) = (w0.clone(), tensor(&m0, DType::F32));
        let mut v_two = tensor(&v0.iter().map(|&x| x as f32 as f64).collect::<Vec<_>>(), DType::F64);
        host_update(&call, &mut w_two, &g, &mut [&mut m_two, &mut v_two], None).unwrap();
        assert_ne!(w_one, w0);
        assert_eq!((w_two, m_two), (w_one, m_one));
        let rounded: Vec<f64> = v_two.to_f64_vec().iter().map(|&x| x as f32 as f64).collect();
        assert_eq!(rounded, v_one.to_f64_vec());
    }

    /// `torch.nn.utils.clip_grad_norm_`: `clamp(max / (norm + 1e-6), max=1)`, NaN kept.
    #[test]
    fn the_clip_factor_is_torchs_nan_included() {
        assert_eq!(clip_factor(1.0, 0.0), 1.0);
        assert_eq!(clip_factor(1.0, 4.0), 1.0 / (2.0 + 1e-6));
        assert_eq!(clip_factor(3.0, 4.0), 1.0);
        assert_eq!(clip_factor(1.0, f64::INFINITY), 0.0);
        assert!(clip_factor(1.0, f64::NAN).is_nan());
    }
}
