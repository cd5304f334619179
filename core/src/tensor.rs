//! [`Tensor`]: a handle to one node of a [`Trace`](crate::Trace), through which model code records ops (the op
//! methods themselves are in `tensor_ops.rs`).

use crate::dtype::DType;
use crate::graph::{NodeId, SrcLoc, Tag};
use crate::op::Op;
use crate::policy::{Policy, PolicySource};
use crate::recording::{record_node, Shared};
use crate::shape::fmt_shape;
use std::rc::Rc;

/// A value in a trace: a handle to one node. Cloning is cheap.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) state: Shared,
    /// `None` when an earlier error poisoned this value.
    pub(crate) id: Option<NodeId>,
    /// For a poisoned value, the shape and dtype it would have had (the failed op's best guess),
    /// so that model code reading `shape()` runs on until the trace reports the first error.
    pub(crate) guess: Option<Rc<(Vec<usize>, DType)>>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.borrow();
        match self.id {
            // Debug output must not panic (it runs inside panic messages and logs).
            Some(id) if state.finished => write!(f, "<tensor {id} of a finished trace>"),
            Some(id) => f.write_str(&state.graph.describe(id)),
            None => f.write_str("<poisoned tensor>"),
        }
    }
}

impl Tensor {
    /// The node, or `None` if an earlier error poisoned this value.
    pub fn id(&self) -> Option<NodeId> {
        self.id
    }

    /// The shape. For a value poisoned by an error, the shape the failed op would have produced
    /// (or its best guess): the trace reports the error at `finish`, and the code in between
    /// runs on.
    ///
    /// # Panics
    ///
    /// After [`crate::Trace::finish`], as every use of the trace's tensors does: the graph
    /// they point into has been handed out.
    #[track_caller]
    pub fn shape(&self) -> Vec<usize> {
        match self.id {
            Some(id) => self.state.borrow().live_graph().node(id).shape.to_vec(),
            None => self.guess.as_ref().map_or_else(Vec::new, |g| g.0.clone()),
        }
    }

    /// The number of axes.
    #[track_caller]
    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    /// The dtype (for a poisoned value, the one the failed op would have produced).
    #[track_caller]
    pub fn dtype(&self) -> DType {
        match self.id {
            Some(id) => self.state.borrow().live_graph().node(id).dtype,
            None => self.guess.as_ref().map_or(DType::F32, |g| g.1),
        }
    }

    /// The tag of this value's node, if recorded inside a region.
    #[track_caller]
    pub fn tag(&self) -> Option<Tag> {
        self.id.and_then(|id| self.state.borrow().live_graph().node(id).tag)
    }

    /// Names the value (like JAX's `checkpoint_name`): shown in reports, and matched by a
    /// region's `save_names` policy.
    #[track_caller]
    pub fn name(&self, name: &str) -> Tensor {
        if let Some(id) = self.id {
            let mut st = self.state.borrow_mut();
            st.assert_live();
            let regions_spec = st.graph.node(id).tag.and_then(|t| st.graph.region(t.region).spec.map(|s| (t, s)));
            let node = st.graph.node_mut(id);
            node.set_name(name.to_string());
            if let Some((tag, spec)) = regions_spec {
                if tag.source != PolicySource::Statement {
                    let (policy, source) = spec.policy.resolve(node.op.kind(), Some(name));
                    node.tag = Some(Tag { policy, source, ..tag });
                }
            }
        }
        self.clone()
    }

    /// Overrides the policy of this value's node, as `#[save]` / `#[recompute]` do.
    ///
    /// The value must have been computed inside the open region or in a region it calls (a
    /// nested region's output keeps its region and takes the policy); a value from outside —
    /// an input, a parameter, the caller's — records an error naming it. With no region open (a
    /// function whose policy is `none` runs unchecked) a value of a region it called takes the
    /// policy, and any other is left alone: nothing here is checkpointed, as in code outside any
    /// region.
    #[track_caller]
    pub fn set_policy(&self, policy: Policy) -> Tensor {
        let loc = SrcLoc::from_caller(std::panic::Location::caller());
        if let Some(id) = self.id {
            let mut st = self.state.borrow_mut();
            st.assert_live();
            let current = st.current_region().map(|(r, _)| r);
            let node = st.graph.node(id);
            match (node.tag, current) {
                // Computed in the open region or one it called (with none open, any region).
                (Some(tag), current) if current.is_none_or(|region| st.graph.region_is_within(tag.region, region)) => {
                    st.graph.node_mut(id).tag = Some(Tag { policy, source: PolicySource::Statement, ..tag });
                }
                (None, None) => {}
                // From outside the open region (the guard above took every tagged value when none is open).
                _ => {
                    let op = node.op.name();
                    let at = node.loc().map(|l| format!(" at {l}")).unwrap_or_default();
                    let what = match node.op.is_resident() {
                        true => format!("`{}`, an input or a parameter, is held anyway", node.name().unwrap_or(op)),
                        false => format!("this `{op}` (computed{at}) was computed outside it, by its caller"),
                    };
                    let message =
                        format!("`{policy}` applies to a value computed in this region or a region it calls; {what}");
                    st.fail(op, loc, message);
                }
            }
        }
        self.clone()
    }

    /// Records `op` applied to `self` and `others`.
    #[track_caller]
    pub(crate) fn apply(&self, op: Op, others: &[&Tensor]) -> Tensor {
        let loc = SrcLoc::from_caller(std::panic::Location::caller());
        self.state.borrow().assert_live();
        let operands: Vec<&Tensor> = std::iter::once(self).chain(others.iter().copied()).collect();
        if operands.iter().any(|t| !Rc::ptr_eq(&t.state, &self.state)) {
            self.state.borrow_mut().fail(op.name(), loc, "operands belong to different traces".into());
            return self.poisoned(op.guess(&[]));
        }
        let Some(ids) = operands.iter().map(|t| t.id).collect::<Option<Vec<NodeId>>>() else {
            // An operand is poisoned: its error is recorded; carry the shape on.
            let metas: Vec<(Vec<usize>, DType)> = operands.iter().map(|t| (t.shape(), t.dtype())).collect();
            let metas: Vec<_> = metas.iter().map(|(s, d)| (&s[..], *d)).collect();
            return self.poisoned(op.guess(&metas));
        };
        let inferred = self.state.borrow().graph.infer(&op, &ids);
        match inferred {
            Ok((shape, dtype)) => {
                let op = match op {
                    Op::Dropout { p, seed, .. } => Op::Dropout { p, seed, key: self.state.borrow().graph.len() as u64 },
                    op => op,
                };
                let id = record_node(&self.state, op, ids, shape, dtype, loc);
                Tensor::of(&self.state, id)
            }
            Err(message) => {
                let mut st = self.state.borrow_mut();
                let metas: Vec<_> = ids.iter().map(|&i| st.graph.node(i).meta()).collect();
                let guess = op.guess(&metas);
                let shapes: Vec<String> = metas.iter().map(|(s, d)| format!("{} {d}", fmt_shape(s))).collect();
                let message = format!("{message} (inputs: {})", shapes.join(", "));
                st.fail(op.name(), loc, message);
                drop(st);
                self.poisoned(guess)
            }
        }
    }

    /// A value poisoned by an error, with the shape and dtype it would have had.
    pub(crate) fn poisoned(&self, guess: (Vec<usize>, DType)) -> Tensor {
        Tensor::poisoned_in(&self.state, guess)
    }

    /// The value of node `id` of the trace `state`.
    pub(crate) fn of(state: &Shared, id: NodeId) -> Tensor {
        Tensor { state: state.clone(), id: Some(id), guess: None }
    }

    /// A value of the trace `state` poisoned by an error, with the shape and dtype it would have
    /// had.
    pub(crate) fn poisoned_in(state: &Shared, guess: (Vec<usize>, DType)) -> Tensor {
        Tensor { state: state.clone(), id: None, guess: Some(Rc::new(guess)) }
    }

    /// A 0-dim constant `value` of this tensor's dtype, recorded in its trace: what to compare
    /// with or fill from (`x.gt(&x.scalar_like(0.0))`), broadcasting against any shape.
    #[track_caller]
    pub fn scalar_like(&self, value: f64) -> Tensor {
        self.scalar(value)
    }

    /// A scalar constant of this tensor's dtype (for `x * 0.5` and friends).
    #[track_caller]
    pub(crate) fn scalar(&self, value: f64) -> Tensor {
        let loc = SrcLoc::from_caller(std::panic::Location::caller());
        let dtype = self.dtype();
        let id = record_node(&self.state, Op::Constant { value }, vec![], vec![], dtype, loc);
        Tensor::of(&self.state, id)
    }
}
