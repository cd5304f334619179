//! The routing rule: forward values that select data are kept, never recomputed, unless a tag
//! asks for recomputation (`must_recompute`) — the rule the PyTorch exporter applies to
//! `topk`, `sort`, `argmax`, ... (docs/policies.md, "Routing").
//!
//! Recomputed under other numerics, or with ties broken another way, routing would send tokens
//! to other experts than the saved activations were computed for (NeMo-Automodel #2635), so
//! training frameworks save it (torchtitan). A value is routing when it is computed in the
//! forward, its tag does not say `must_recompute`, and
//! - its op selects (`argmax`, `argmin`, `topk`, `argsort`, `bincount`: the catalog's `selects`),
//! - or it is an integer or boolean value computed from routing (an expert id times a capacity,
//!   a mask of the tokens sent to expert `e`),
//! - or it is a comparison whose value reaches an index — an `index_select`, `gather`,
//!   `embedding`, `index_add`, `scatter_add`, `one_hot` or `bincount` operand — through integer
//!   and boolean values only (a capacity cut feeding a dispatch).

use crate::autodiff::JointGraph;
use crate::graph::NodeId;
use crate::op::Op;
use crate::policy::Policy;

/// Which nodes of `joint` are routing (indexed by node). A view of routing is not flagged (views
/// are never saved; their base is) but passes the property on to what is computed from it.
pub(crate) fn routing_values(joint: &JointGraph) -> Vec<bool> {
    let g = joint.graph();
    let n = g.len();
    let discrete = |k: usize| !g.node(NodeId::new(k as u32)).dtype.is_float();
    // Reverse pass: which discrete values reach an index operand through discrete values only.
    let mut feeds_index = vec![false; n];
    for k in (0..n).rev() {
        let node = g.node(NodeId::new(k as u32));
        for &at in node.op.index_inputs() {
            if let Some(&i) = node.inputs.get(at) {
                feeds_index[i.index()] = true;
            }
        }
        if feeds_index[k] && discrete(k) {
            for &i in &node.inputs {
                if discrete(i.index()) {
                    feeds_index[i.index()] = true;
                }
            }
        }
    }
    // Forward pass, in topological order.
    let mut routing = vec![false; n];
    for id in g.ids() {
        let k = id.index();
        let node = g.node(id);
        if !joint.is_forward(id) || node.tag.is_some_and(|t| t.policy == Policy::MustRecompute) || !discrete(k) {
            continue;
        }
        routing[k] = node.op.info().selects
            || (matches!(node.op, Op::Compare(_)) && feeds_index[k])
            || node.inputs.iter().any(|i| routing[i.index()]);
    }
    for id in g.ids() {
        routing[id.index()] &= !g.node(id).op.info().view;
    }
    routing
}
