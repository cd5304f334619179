//! The graph being recorded, shared by a [`Trace`](crate::Trace) and its tensors: the graph,
//! the region instances seen so far, and the errors kept for [`Trace::finish`](crate::Trace::finish).

use crate::dtype::DType;
use crate::error::Error;
use crate::graph::{Graph, Node, NodeId, Region, RegionId, SrcLoc, Tag};
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
}

pub(crate) type Shared = Rc<RefCell<TraceState>>;

impl TraceState {
    /// An empty graph.
    pub(crate) fn new() -> TraceState {
        TraceState { graph: Graph::new(), regions: HashMap::new(), errors: Vec::new() }
    }

    pub(crate) fn fail(&mut self, op: &'static str, loc: SrcLoc, message: String) {
        let location = loc.to_string();
        self.errors.push(Error::Trace { op, message, location, more: 0 });
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
    shape: Vec<usize>,
    dtype: DType,
    loc: SrcLoc,
) -> NodeId {
    let mut st = state.borrow_mut();
    let tag = st.current_region().map(|(region, spec)| {
        let (policy, source) = spec.policy.resolve(op.kind(), None);
        Tag { region, policy, source }
    });
    st.graph.push(Node { op, inputs, shape, dtype, tag, name: None, loc: Some(loc) })
}
