//! The graph being recorded, shared by a [`Trace`](crate::Trace) and its tensors: the graph,
//! the region instances seen so far, and the errors kept for [`Trace::finish`](crate::Trace::finish).

use crate::dtype::DType;
use crate::error::Error;
use crate::graph::{Graph, Label, Node, NodeId, Region, RegionId, Shape, SrcLoc, Tag};
use crate::op::Op;
use crate::region::active_regions;
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
}

pub(crate) type Shared = Rc<RefCell<TraceState>>;

impl TraceState {
    /// An empty graph.
    pub(crate) fn new() -> TraceState {
        TraceState { graph: Graph::new(), regions: HashMap::new(), errors: Vec::new(), strict: false }
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
            let nth = regions[..id.index()].iter().filter(|other| other.name == r.name).count();
            parts.push(format!("{} #{nth}", r.name));
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
    pub(crate) fn current_region(&mut self) -> Option<(RegionId, &'static crate::region::RegionSpec)> {
        let open = active_regions();
        let mut parent = None;
        for active in &open {
            let id = match self.regions.get(&active.instance) {
                Some(&id) => id,
                None => {
                    let region = Region {
                        parent,
                        name: active.spec.name.to_string(),
                        spec: Some(active.spec),
                        budget: active.spec.budget,
                    };
                    let id = self.graph.add_region(region);
                    self.regions.insert(active.instance, id);
                    id
                }
            };
            parent = Some(id);
        }
        Some((parent?, open.last()?.spec))
    }
}

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
    let tag = st.current_region().map(|(region, spec)| {
        let (policy, source) = spec.policy.resolve(op.kind(), None);
        Tag { region, policy, source }
    });
    st.graph.push(Node {
        op,
        inputs: inputs.into(),
        shape: shape.into(),
        dtype,
        tag,
        label: Label::of(None, Some(loc)),
    })
}
