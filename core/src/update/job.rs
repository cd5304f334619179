//! The host reference of [`crate::Backend::update`]: an update over typed views of the
//! buffers ([`UpdateJob`]), one tight loop per dtype pair, which the CPU backend splits over its
//! threads.

use super::{clip_factor, meta, Coefficients, Meta, RuleKind, UpdateCall};
use crate::dtype::DType;
use crate::error::Result;
use crate::host::{HostTensor, HostValuesMut};
use half::{bf16, f16};

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
