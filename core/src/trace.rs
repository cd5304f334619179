//! Tracing: recording ops on [`Tensor`] handles into a tagged [`Graph`].
//!
//! A [`Trace`] owns the graph being recorded. Tensors are cheap handles (a node id and the
//! trace). Recording checks shapes and dtypes at once; an error does not panic and does not stop
//! the user's code: it is kept (with the op, the shapes and the caller's line) and returned by
//! [`Trace::finish`], and the failed op yields a *poisoned* tensor on which later ops record
//! nothing further. That is what lets model code read `x.matmul(&w).relu()` without `?` on
//! every op.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{Graph, SrcLoc};
use crate::host::HostTensor;
use crate::op::{Init, Op};
use crate::recording::{record_node, Shared, TraceState};
use crate::shape::fmt_shape;
use crate::tensor::Tensor;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// A model being recorded.
///
/// ```
/// use remat_core::{DType, Trace};
/// let trace = Trace::new();
/// let x = trace.input("x", &[4, 3], DType::F32);
/// let w = trace.param("w", &[3, 2], DType::F32);
/// let loss = x.matmul(&w).relu().sum_all();
/// let graph = trace.finish(&loss).unwrap();
/// assert_eq!(graph.params().len(), 1);
/// ```
pub struct Trace {
    pub(crate) state: Shared,
}

impl Default for Trace {
    fn default() -> Self {
        Self::new()
    }
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        let state = TraceState::new();
        Trace { state: Rc::new(RefCell::new(state)) }
    }

    /// This trace, strict: what would be a warning at [`Trace::finish`] is an error instead — a
    /// name in a region's `save_names` or `offload_names` that no value of the region carries
    /// (a typo would otherwise train with the value recomputed).
    pub fn strict(self) -> Self {
        self.state.borrow_mut().strict = true;
        self
    }

    /// Declares a graph input (data, ids, targets) fed at every step.
    #[track_caller]
    pub fn input(&self, name: &str, shape: &[usize], dtype: DType) -> Tensor {
        self.leaf(Op::Input, name, shape, dtype)
    }

    /// Declares a trainable parameter, initialised by [`Init::Auto`].
    #[track_caller]
    pub fn param(&self, name: &str, shape: &[usize], dtype: DType) -> Tensor {
        self.param_with(name, shape, dtype, Init::Auto)
    }

    /// Declares a trainable parameter with an explicit initialisation.
    #[track_caller]
    pub fn param_with(&self, name: &str, shape: &[usize], dtype: DType, init: Init) -> Tensor {
        self.leaf(Op::Param { init }, name, shape, dtype)
    }

    /// A tensor of `shape` full of `value`.
    #[track_caller]
    pub fn constant(&self, value: f64, shape: &[usize], dtype: DType) -> Tensor {
        let loc = SrcLoc::from_caller(std::panic::Location::caller());
        let id = record_node(&self.state, Op::Constant { value }, vec![], shape.to_vec(), dtype, loc);
        Tensor::of(&self.state, id)
    }

    /// A constant made from host data (a rotary table, a mask): recorded once in the graph,
    /// resident for the whole step like a parameter (never recomputed, never fed), and not
    /// differentiated. `name` labels it in reports and must be unique among leaves.
    ///
    /// ```
    /// use remat_core::{DType, HostTensor, Trace};
    /// let trace = Trace::new();
    /// let table = trace.constant_from("table", HostTensor::f32([2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap());
    /// assert_eq!(table.shape(), vec![2, 2]);
    /// ```
    #[track_caller]
    pub fn constant_from(&self, name: &str, value: HostTensor) -> Tensor {
        let (shape, dtype) = (value.shape().to_vec(), value.dtype());
        self.leaf(Op::ConstantData { value: Arc::new(value) }, name, &shape, dtype)
    }

    /// `[start, start + step, ...]`: `len` values of `dtype` (f32, f64 or i64).
    #[track_caller]
    pub fn arange(&self, start: f64, step: f64, len: usize, dtype: DType) -> Tensor {
        let loc = SrcLoc::from_caller(std::panic::Location::caller());
        if !dtype.is_float() && dtype != DType::I64 || dtype.is_fp8() {
            self.state.borrow_mut().fail(
                "arange",
                loc,
                format!("arange makes f32, f64, bf16, f16 or i64 values, not {dtype}"),
            );
            return Tensor::poisoned_in(&self.state, (vec![len], DType::F32));
        }
        let id = record_node(&self.state, Op::Arange { start, step }, vec![], vec![len], dtype, loc);
        Tensor::of(&self.state, id)
    }

    #[track_caller]
    fn leaf(&self, op: Op, name: &str, shape: &[usize], dtype: DType) -> Tensor {
        let loc = SrcLoc::from_caller(std::panic::Location::caller());
        let duplicate = self.state.borrow().graph.nodes().iter().any(|n| n.op.info().leaf && n.name() == Some(name));
        if duplicate {
            self.state.borrow_mut().fail(op.name(), loc, format!("`{name}` is already declared"));
            return Tensor::poisoned_in(&self.state, (shape.to_vec(), dtype));
        }
        let id = record_node(&self.state, op, vec![], shape.to_vec(), dtype, loc);
        self.state.borrow_mut().graph.node_mut(id).set_name(name.to_string());
        Tensor::of(&self.state, id)
    }

    /// The graph recorded so far (for dumps while tracing).
    pub fn snapshot(&self) -> Graph {
        self.state.borrow().graph.clone()
    }

    /// The first error recorded so far, if any.
    pub fn error(&self) -> Option<String> {
        self.state.borrow().errors.first().map(|e| e.to_string())
    }

    /// Ends the trace with `loss` as the graph's output; returns the graph or the first error
    /// recorded (with how many followed it).
    ///
    /// The trace's tensors are dead after it: reading one (`shape()`, `dtype()`, `name(..)`)
    /// or recording an op on one panics with a message saying the tensor's trace is finished
    /// (`{:?}` prints `<tensor %3 of a finished trace>`). Read what you need before finishing.
    pub fn finish(self, loss: &Tensor) -> Result<Graph> {
        self.finish_with(loss, &[])
    }

    /// Ends the trace with `loss` and further outputs the caller wants back from each step.
    pub fn finish_with(self, loss: &Tensor, extra: &[&Tensor]) -> Result<Graph> {
        let outputs: Vec<&Tensor> = std::iter::once(loss).chain(extra.iter().copied()).collect();
        self.finish_outputs(&outputs, true)
    }

    /// Ends the trace with `outputs`; with `loss_first`, the first must be a scalar loss.
    pub(crate) fn finish_outputs(self, outputs: &[&Tensor], loss_first: bool) -> Result<Graph> {
        let mut state = self.state.borrow_mut();
        // Whatever the outcome, the trace is gone: its tensors panic with a message saying so
        // rather than index a taken graph.
        state.finished = true;
        if let Some(first) = state.take_error() {
            return Err(first);
        }
        let mut ids = Vec::new();
        for t in outputs {
            if !Rc::ptr_eq(&t.state, &self.state) {
                return Err(Error::config("outputs", "an output belongs to another trace"));
            }
            ids.push(t.id.ok_or_else(|| Error::config("outputs", "an output is poisoned by an earlier error"))?);
        }
        if loss_first {
            let loss_node = state.graph.node(ids[0]);
            if loss_node.shape.iter().product::<usize>() != 1 || !loss_node.dtype.is_float() {
                return Err(Error::config(
                    "loss",
                    format!(
                        "the loss must be a single floating value, got {} {} ({})",
                        fmt_shape(&loss_node.shape),
                        loss_node.dtype,
                        state.graph.describe(ids[0])
                    ),
                ));
            }
        }
        state.graph.set_outputs(ids);
        let graph = std::mem::take(&mut state.graph);
        // Reported here, where the model is traced; `Model` repeats them in its warnings.
        let unknown = graph.unknown_save_names();
        if state.strict && !unknown.is_empty() {
            return Err(Error::config(
                "strict",
                format!(
                    "strict trace: {}{}",
                    unknown[0],
                    if unknown.len() > 1 { format!(" (and {} more)", unknown.len() - 1) } else { String::new() }
                ),
            ));
        }
        for warning in &unknown {
            crate::warning::emit(warning);
        }
        debug_assert!(graph.validate().is_ok(), "traced graph violates its invariants");
        Ok(graph)
    }
}

/// Recording on a tensor's own trace, for model code that holds tensors but not the trace.
impl Tensor {
    /// [`Trace::arange`] on this tensor's trace, for model code that holds tensors but not the
    /// trace (positions, causal masks).
    #[track_caller]
    pub fn arange_like(&self, start: f64, step: f64, len: usize, dtype: DType) -> Tensor {
        Trace { state: self.state.clone() }.arange(start, step, len, dtype)
    }

    /// [`Trace::constant_from`] on this tensor's trace.
    #[track_caller]
    pub fn constant_like(&self, name: &str, value: HostTensor) -> Tensor {
        Trace { state: self.state.clone() }.constant_from(name, value)
    }
}
