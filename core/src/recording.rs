//! The graph being recorded, shared by a [`Trace`](crate::Trace) and its tensors: the graph,
//! the region instances seen so far, and the errors kept for [`Trace::finish`](crate::Trace::finish).

use crate::dtype::DType;
use crate::error::Error;
use crate::graph::{Graph, Label, Node, NodeId, Region, RegionId, Shape, SrcLoc, Tag};
use crate::op::Op;
use crate::region::{with_active_regions, ActiveRegion};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

pub(crate) struct TraceState {
    pub graph: Graph,
    /// Region instance (process-unique) → region of this graph.
    regions: HashMap<u64, RegionId>,
    pub(crate) errors: Vec<Error>,
    /// Warnings at `finish` are errors ([`crate::Trace::strict`]).
    pub(crate) strict: bool,
    /// [`crate::Trace::finish`] ran: the graph was handed out and tensors of this trace are dead.
    pub(crate) finished: bool,
    /// Per region of the graph, which instance of its function it is (`block #1`), counted as
    /// regions are added: recounting per error was quadratic in the regions.
    nth: Vec<usize>,
    /// Instances so far per function name.
    per_name: HashMap<&'static str, usize>,
}

/// What a use of a tensor after [`crate::Trace::finish`] panics with: the graph is gone, so
/// there is nothing to read or record on, and no later `finish` to report an error to.
pub(crate) const FINISHED: &str = "this tensor's trace is finished: `Trace::finish` took its graph, so the tensor can \
     no longer be read or recorded on (trace again for a new graph, and read shapes before finishing)";

pub(crate) type Shared = Rc<RefCell<TraceState>>;

impl TraceState {
    /// An empty graph.
    pub(crate) fn new() -> TraceState {
        TraceState {
            graph: Graph::new(),
            regions: HashMap::new(),
            errors: Vec::new(),
            strict: false,
            finished: false,
            nth: Vec::new(),
            per_name: HashMap::new(),
        }
    }

    /// The graph being recorded; panics with [`FINISHED`] once the trace has finished.
    #[track_caller]
    pub(crate) fn live_graph(&self) -> &Graph {
        self.assert_live();
        &self.graph
    }

    /// Panics with [`FINISHED`] once the trace has finished.
    #[track_caller]
    pub(crate) fn assert_live(&self) {
        if self.finished {
            panic!("{FINISHED}");
        }
    }

    /// Records an error of `op` at the user's `loc`, inside the open region instance if any
    /// (`model.rs:12:9 in region decoder_block #1`: a helper called from several blocks names
    /// its line, the instance says which call).
    pub(crate) fn fail(&mut self, op: &'static str, loc: SrcLoc, message: String) {
        let mut location = loc.to_string();
        if let Some((region, _)) = self.current_region() {
            location += &format!(" in region {}", self.instance_label(region));
        }
        self.errors.push(Error::Trace { op, message, location, more: 0 });
    }

    /// `block #1`: the region's function and which of its calls this instance is (from 0), then
    /// the enclosing instances (`mlp #0 in block #1`).
    fn instance_label(&self, region: RegionId) -> String {
        let regions = self.graph.regions();
        let mut parts = Vec::new();
        let mut at = Some(region);
        while let Some(id) = at {
            let r = &regions[id.index()];
            parts.push(format!("{} #{}", r.name, self.nth[id.index()]));
            at = r.parent;
        }
        parts.join(" in ")
    }

    pub(crate) fn take_error(&mut self) -> Option<Error> {
        let more = self.errors.len().saturating_sub(1);
        let first = self.errors.drain(..).next()?;
        Some(match first {
            Error::Trace { op, message, location, .. } => Error::Trace { op, message, location, more },
            other => other,
        })
    }

    /// The region of this graph for the innermost open instance, registering open instances
    /// (outermost first, so parents precede children) on first use.
    ///
    /// Linear in the instances registered, not in the depth: the innermost instance is
    /// usually registered already, and otherwise the walk stops at the first registered one
    /// (each instance is registered once). Walking the whole stack per op made tracing 10 000
    /// nested `#[checkpoint]` levels quadratic.
    pub(crate) fn current_region(&mut self) -> Option<(RegionId, &'static crate::region::RegionSpec)> {
        with_active_regions(|open| {
            let innermost = open.last()?;
            if let Some(&id) = self.regions.get(&innermost.instance) {
                count_looked_at(1);
                return Some((id, innermost.spec));
            }
            let first_new = open.iter().rposition(|a| self.regions.contains_key(&a.instance)).map_or(0, |k| k + 1);
            count_looked_at(open.len() - first_new + usize::from(first_new > 0));
            let mut parent = first_new.checked_sub(1).map(|k| self.regions[&open[k].instance]);
            for active in &open[first_new..] {
                parent = Some(self.add_region(active, parent));
            }
            Some((parent?, innermost.spec))
        })
    }

    fn add_region(&mut self, active: &ActiveRegion, parent: Option<RegionId>) -> RegionId {
        let spec = active.spec;
        let region = Region { parent, name: spec.name.to_string(), spec: Some(spec), budget: spec.budget };
        let id = self.graph.add_region(region);
        self.regions.insert(active.instance, id);
        let nth = self.per_name.entry(spec.name).or_insert(0);
        self.nth.push(*nth);
        *nth += 1;
        id
    }
}

#[cfg(test)]
thread_local! {
    /// Open instances [`TraceState::current_region`] has looked at on this thread: the work
    /// the nesting test counts.
    pub(crate) static LOOKED_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
fn count_looked_at(n: usize) {
    LOOKED_AT.with(|c| c.set(c.get() + n));
}

#[cfg(not(test))]
fn count_looked_at(_: usize) {}

/// Appends a node with known shape and tags it with the innermost open region.
pub(crate) fn record_node(
    state: &Shared,
    op: Op,
    inputs: Vec<NodeId>,
    shape: impl Into<Shape>,
    dtype: DType,
    loc: SrcLoc,
) -> NodeId {
    let mut st = state.borrow_mut();
    st.assert_live();
    let tag = st.current_region().map(|(region, spec)| {
        let (policy, source) = spec.policy.resolve(op.kind(), None);
        Tag { region, policy, source }
    });
    let shape = shape.into();
    // A declared shape is taken as given (an input's, a parameter's, a decoder's caches'): one
    // past 2^64 bytes is an error at `finish`, as the graph's own check would find it.
    if crate::shape::checked_bytes(&shape, dtype.size()).is_none() {
        let message = format!("{} {dtype} is more than 2^64 bytes", crate::shape::fmt_shape(&shape));
        st.fail(op.name(), loc, message);
    }
    st.graph.push(Node { op, inputs: inputs.into(), shape, dtype, tag, label: Label::of(None, Some(loc)) })
}
