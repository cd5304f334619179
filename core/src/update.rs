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
use crate::host::{HostTensor, HostValuesMut};
use crate::shape::fmt_shape;
use half::{bf16, f16};

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

/// The CPU's [`crate::Backend::update`]: one step of `call` on `param` in place, from `grad`,
/// updating `state`; `sum_squares` is every gradient's (when clipping). On one thread; the CPU
/// backend runs the same job split over its threads.
pub fn host_update(
    call: &UpdateCall<'_>,
    param: &mut HostTensor,
    grad: &HostTensor,
    state: &mut [&mut HostTensor],
    sum_squares: Option<f64>,
) -> Result<()> {
    with_update_job(call, param, grad, state, sum_squares, |job| job.run())
}

/// Checks the call ([`UpdateCall::check`]) and runs `run` on the job over every element: typed
/// views of the buffers (fp8 parameters and gradients through f64 copies, the parameter's
/// written back after).
pub(crate) fn with_update_job(
    call: &UpdateCall<'_>,
    param: &mut HostTensor,
    grad: &HostTensor,
    state: &mut [&mut HostTensor],
    sum_squares: Option<f64>,
    run: impl FnOnce(UpdateJob<'_>),
) -> Result<()> {
    let metas: Vec<Meta<'_>> = state.iter().map(|s| meta(s)).collect();
    call.check(meta(param), meta(grad), &metas, sum_squares.is_some())?;
    let scale = match (call.max_norm, sum_squares) {
        (Some(max), Some(sum)) => clip_factor(max, sum),
        _ => 1.0,
    };
    let copied_grad =
        (!matches!(grad.dtype(), DType::F32 | DType::F64 | DType::BF16 | DType::F16)).then(|| grad.to_f64_vec());
    let grads = match &copied_grad {
        Some(copy) => Values::F64(copy),
        None => Values::of(grad),
    };
    let mut states = state.iter_mut().map(|t| StateSlice::of(t));
    let s = [states.next(), states.next()];
    let dtype = param.dtype();
    let mut copied_weights =
        (!matches!(dtype, DType::F32 | DType::F64 | DType::BF16 | DType::F16)).then(|| param.to_f64_vec());
    let weights = match &mut copied_weights {
        Some(copy) => Weights::F64(copy),
        None => Weights::of(param),
    };
    run(UpdateJob { c: call.coefficients, scale, w: weights, g: grads, s });
    if let Some(copy) = copied_weights {
        param.set_data(crate::host::HostData::from_f64(&copy, dtype))?;
    }
    Ok(())
}

/// One update over a run of elements: the weights, their gradients and their state, as typed
/// views; [`UpdateJob::split`] cuts it into independent runs (each element is computed the same
/// way whichever run holds it).
pub(crate) struct UpdateJob<'a> {
    c: Coefficients,
    /// The clip factor (1 without clipping).
    scale: f64,
    w: Weights<'a>,
    g: Values<'a>,
    /// The rule's state buffers: none, velocity, or m and v.
    s: [Option<StateSlice<'a>>; 2],
}

impl<'a> UpdateJob<'a> {
    /// The elements.
    pub(crate) fn len(&self) -> usize {
        self.w.len()
    }

    /// Runs of at most `size` elements, in order.
    pub(crate) fn split(self, size: usize) -> Vec<UpdateJob<'a>> {
        let size = size.max(1);
        let mut out = Vec::with_capacity(self.len().div_ceil(size));
        let mut rest = self;
        while rest.len() > size {
            let (head, tail) = rest.split_at(size);
            out.push(head);
            rest = tail;
        }
        out.push(rest);
        out
    }

    fn split_at(self, at: usize) -> (UpdateJob<'a>, UpdateJob<'a>) {
        let (w0, w1) = self.w.split_at(at);
        let (g0, g1) = self.g.split_at(at);
        let [a, b] = self.s;
        let (a0, a1) = split_state(a, at);
        let (b0, b1) = split_state(b, at);
        let job = |w, g, s| UpdateJob { c: self.c, scale: self.scale, w, g, s };
        (job(w0, g0, [a0, b0]), job(w1, g1, [a1, b1]))
    }

    /// Every element's update, in order: one loop over typed slices (no dispatch per element)
    /// where the state buffers share a dtype, as [`crate::TrainState`] keeps them.
    pub(crate) fn run(mut self) {
        let (c, scale) = (self.c, self.scale);
        if let Some((m, v)) = same_dtype::<f32>(&mut self.s) {
            return typed(&c, scale, self.w, self.g, m, v);
        }
        if let Some((m, v)) = same_dtype::<f64>(&mut self.s) {
            return typed(&c, scale, self.w, self.g, m, v);
        }
        self.run_mixed();
    }

    /// [`UpdateJob::run`] element by element, for state buffers of two dtypes.
    fn run_mixed(mut self) {
        let (c, scale) = (self.c, self.scale);
        let [a, b] = &mut self.s;
        for i in 0..self.w.len() {
            let (w, g) = (self.w.get(i), self.g.get(i) * scale);
            let new = match (c.kind, a.as_mut(), b.as_mut()) {
                (RuleKind::AdamW, Some(m), Some(v)) => {
                    let (mut mi, mut vi) = (m.get(i), v.get(i));
                    let new = c.adamw(w, g, &mut mi, &mut vi);
                    m.set(i, mi);
                    v.set(i, vi);
                    new
                }
                (RuleKind::Sgd, Some(vel), _) => {
                    let mut vi = vel.get(i);
                    let new = c.sgd(w, g, Some(&mut vi));
                    vel.set(i, vi);
                    new
                }
                // Checked: AdamW has its two buffers; SGD without momentum none.
                _ => c.sgd(w, g, None),
            };
            self.w.set(i, new);
        }
    }
}

/// A stored element type: read as f64, written rounded once from f64.
trait Elem: Copy {
    fn get(self) -> f64;
    fn put(x: f64) -> Self;
}

impl Elem for f32 {
    #[inline]
    fn get(self) -> f64 {
        self as f64
    }
    #[inline]
    fn put(x: f64) -> f32 {
        x as f32
    }
}

impl Elem for f64 {
    #[inline]
    fn get(self) -> f64 {
        self
    }
    #[inline]
    fn put(x: f64) -> f64 {
        x
    }
}

impl Elem for bf16 {
    #[inline]
    fn get(self) -> f64 {
        self.to_f64()
    }
    #[inline]
    fn put(x: f64) -> bf16 {
        bf16::from_f64(x)
    }
}

impl Elem for f16 {
    #[inline]
    fn get(self) -> f64 {
        self.to_f64()
    }
    #[inline]
    fn put(x: f64) -> f16 {
        f16::from_f64(x)
    }
}

/// A state slice of element type `S`, if it is one.
trait StateOf<'a>: Sized {
    fn is(s: &StateSlice<'_>) -> bool;
    fn of(s: StateSlice<'a>) -> Result<&'a mut [Self], StateSlice<'a>>;
}

impl<'a> StateOf<'a> for f32 {
    fn is(s: &StateSlice<'_>) -> bool {
        matches!(s, StateSlice::F32(_))
    }

    fn of(s: StateSlice<'a>) -> Result<&'a mut [f32], StateSlice<'a>> {
        match s {
            StateSlice::F32(v) => Ok(v),
            other => Err(other),
        }
    }
}

impl<'a> StateOf<'a> for f64 {
    fn is(s: &StateSlice<'_>) -> bool {
        matches!(s, StateSlice::F64(_))
    }

    fn of(s: StateSlice<'a>) -> Result<&'a mut [f64], StateSlice<'a>> {
        match s {
            StateSlice::F64(v) => Ok(v),
            other => Err(other),
        }
    }
}

/// The state buffers as typed slices of `S`, taken out of `s`, where every one present is of
/// `S`; else `s` is left as it was.
type States<'a, S> = (Option<&'a mut [S]>, Option<&'a mut [S]>);

fn same_dtype<'a, S: StateOf<'a>>(s: &mut [Option<StateSlice<'a>>; 2]) -> Option<States<'a, S>> {
    if !s.iter().all(|x| x.as_ref().is_none_or(S::is)) {
        return None;
    }
    let mut take = |k: usize| s[k].take().map(|x| S::of(x).ok()).unwrap_or(None);
    Some((take(0), take(1)))
}

/// The update over typed slices: the weights and gradients in their dtypes (every pair, each
/// its own loop), the state in `S`.
fn typed<S: Elem>(
    c: &Coefficients,
    scale: f64,
    w: Weights<'_>,
    g: Values<'_>,
    m: Option<&mut [S]>,
    v: Option<&mut [S]>,
) {
    macro_rules! pairs {
        ($($wv:ident, $gv:ident);* $(;)?) => {
            match (w, g) {
                $((Weights::$wv(w), Values::$gv(g)) => typed_loop(c, scale, w, g, m, v),)*
            }
        };
    }
    pairs!(
        F32, F32; F32, F64; F32, BF16; F32, F16;
        F64, F32; F64, F64; F64, BF16; F64, F16;
        BF16, F32; BF16, F64; BF16, BF16; BF16, F16;
        F16, F32; F16, F64; F16, BF16; F16, F16;
    )
}

/// One rule's loop over typed slices (the arithmetic of [`Coefficients`], element for element).
fn typed_loop<W: Elem, G: Elem, S: Elem>(
    c: &Coefficients,
    scale: f64,
    w: &mut [W],
    g: &[G],
    m: Option<&mut [S]>,
    v: Option<&mut [S]>,
) {
    match (c.kind, m, v) {
        (RuleKind::AdamW, Some(m), Some(v)) => {
            for (((w, g), m), v) in w.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                let (mut mi, mut vi) = (m.get(), v.get());
                *w = W::put(c.adamw(w.get(), g.get() * scale, &mut mi, &mut vi));
                (*m, *v) = (S::put(mi), S::put(vi));
            }
        }
        (RuleKind::Sgd, Some(vel), _) => {
            for ((w, g), vel) in w.iter_mut().zip(g).zip(vel.iter_mut()) {
                let mut vi = vel.get();
                *w = W::put(c.sgd(w.get(), g.get() * scale, Some(&mut vi)));
                *vel = S::put(vi);
            }
        }
        // Checked: AdamW has its two buffers; SGD without momentum none.
        _ => {
            for (w, g) in w.iter_mut().zip(g) {
                *w = W::put(c.sgd(w.get(), g.get() * scale, None));
            }
        }
    }
}

fn split_state(s: Option<StateSlice<'_>>, at: usize) -> (Option<StateSlice<'_>>, Option<StateSlice<'_>>) {
    match s {
        Some(s) => {
            let (a, b) = s.split_at(at);
            (Some(a), Some(b))
        }
        None => (None, None),
    }
}

/// A parameter's weights, read as f64 and written rounded once to their dtype.
enum Weights<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    BF16(&'a mut [bf16]),
    F16(&'a mut [f16]),
}

impl<'a> Weights<'a> {
    /// A parameter of one of the four dtypes ([`with_update_job`] copies the others).
    fn of(t: &'a mut HostTensor) -> Weights<'a> {
        match t.values_mut() {
            HostValuesMut::F32(v) => Weights::F32(v),
            HostValuesMut::BF16(v) => Weights::BF16(v),
            HostValuesMut::F16(v) => Weights::F16(v),
            HostValuesMut::F64(v) => Weights::F64(v),
            _ => unreachable!("fp8 weights are updated through an f64 copy"),
        }
    }

    fn len(&self) -> usize {
        match self {
            Weights::F32(v) => v.len(),
            Weights::F64(v) => v.len(),
            Weights::BF16(v) => v.len(),
            Weights::F16(v) => v.len(),
        }
    }

    fn split_at(self, at: usize) -> (Weights<'a>, Weights<'a>) {
        match self {
            Weights::F32(v) => {
                let (a, b) = v.split_at_mut(at);
                (Weights::F32(a), Weights::F32(b))
            }
            Weights::F64(v) => {
                let (a, b) = v.split_at_mut(at);
                (Weights::F64(a), Weights::F64(b))
            }
            Weights::BF16(v) => {
                let (a, b) = v.split_at_mut(at);
                (Weights::BF16(a), Weights::BF16(b))
            }
            Weights::F16(v) => {
                let (a, b) = v.split_at_mut(at);
                (Weights::F16(a), Weights::F16(b))
            }
        }
    }

    #[inline]
    fn get(&self, i: usize) -> f64 {
        match self {
            Weights::F32(v) => v[i] as f64,
            Weights::F64(v) => v[i],
            Weights::BF16(v) => v[i].to_f64(),
            Weights::F16(v) => v[i].to_f64(),
        }
    }

    #[inline]
    fn set(&mut self, i: usize, x: f64) {
        match self {
            Weights::F32(v) => v[i] = x as f32,
            Weights::F64(v) => v[i] = x,
            Weights::BF16(v) => v[i] = bf16::from_f64(x),
            Weights::F16(v) => v[i] = f16::from_f64(x),
        }
    }
}

/// An f32 or f64 state buffer's elements, read and written as f64.
enum StateSlice<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
}

impl<'a> StateSlice<'a> {
    /// Checked to be f32 or f64 ([`UpdateCall::check`]).
    fn of(t: &'a mut HostTensor) -> StateSlice<'a> {
        match t.values_mut() {
            HostValuesMut::F32(v) => StateSlice::F32(v),
            HostValuesMut::F64(v) => StateSlice::F64(v),
            _ => unreachable!("optimizer state checked to be f32 or f64"),
        }
    }

    fn split_at(self, at: usize) -> (StateSlice<'a>, StateSlice<'a>) {
        match self {
            StateSlice::F32(v) => {
                let (a, b) = v.split_at_mut(at);
                (StateSlice::F32(a), StateSlice::F32(b))
            }
            StateSlice::F64(v) => {
                let (a, b) = v.split_at_mut(at);
                (StateSlice::F64(a), StateSlice::F64(b))
            }
        }
    }

    #[inline]
    fn get(&self, i: usize) -> f64 {
        match self {
            StateSlice::F32(v) => v[i] as f64,
            StateSlice::F64(v) => v[i],
        }
    }

    #[inline]
    fn set(&mut self, i: usize, x: f64) {
        match self {
            StateSlice::F32(v) => v[i] = x as f32,
            StateSlice::F64(v) => v[i] = x,
        }
    }
}

/// A gradient's elements, read as f64.
enum Values<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    BF16(&'a [bf16]),
    F16(&'a [f16]),
}

impl<'a> Values<'a> {
    /// A gradient of one of the four dtypes ([`with_update_job`] copies the others).
    fn of(t: &'a HostTensor) -> Values<'a> {
        use crate::host::HostData as D;
        match t.data() {
            D::F32(v) => Values::F32(v),
            D::BF16(v) => Values::BF16(v),
            D::F16(v) => Values::F16(v),
            D::F64(v) => Values::F64(v),
            _ => unreachable!("fp8 gradients are read through an f64 copy"),
        }
    }

    fn split_at(self, at: usize) -> (Values<'a>, Values<'a>) {
        match self {
            Values::F32(v) => (Values::F32(&v[..at]), Values::F32(&v[at..])),
            Values::F64(v) => (Values::F64(&v[..at]), Values::F64(&v[at..])),
            Values::BF16(v) => (Values::BF16(&v[..at]), Values::BF16(&v[at..])),
            Values::F16(v) => (Values::F16(&v[..at]), Values::F16(&v[at..])),
        }
    }

    #[inline]
    fn get(&self, i: usize) -> f64 {
        match self {
            Values::F32(v) => v[i] as f64,
            Values::F64(v) => v[i],
            Values::BF16(v) => v[i].to_f64(),
            Values::F16(v) => v[i].to_f64(),
        }
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
