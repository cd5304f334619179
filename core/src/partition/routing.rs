//! The routing rule: forward values that select data are kept, never recomputed, unless a tag
//! asks for recomputation (`must_recompute`) — the rule the PyTorch exporter applies too
//! (docs/policies.md, "Routing").
//!
//! Recomputed under other numerics, or with ties broken another way, routing would send tokens
//! to other experts than the saved activations were computed for (NeMo-Automodel #2635), so
//! training frameworks save it (torchtitan). What can differ on a recompute is a decision taken
//! from floats; what is computed from kept decisions by integer and boolean ops is exact and is
//! recomputed like any value. So a forward value is routing when its tag does not say
//! `must_recompute`, it is not a view (its base is kept), and
//! - its op selects (`argmax`, `argmin`, `topk`, `argsort`, `bincount`: the catalog's
//!   `selects`),
//! - or it is an integer or boolean value taken from floats (a comparison, a cast) that reaches
//!   an index — an operand of `index_select`, `gather`, `embedding`, `index_add`, `scatter_add`,
//!   `one_hot`, `bincount` or `cross_entropy`'s targets — through integer and boolean values only
//!   (a capacity cut by weight feeding a dispatch).

use crate::autodiff::JointGraph;
use crate::graph::NodeId;
use crate::policy::Policy;

/// Which nodes of `joint` are routing (indexed by node).
pub(crate) fn routing_values(joint: &JointGraph) -> Vec<bool> {
    let g = joint.graph();
    let n = g.len();
    let discrete = |k: usize| !g.node(NodeId::new(k as u32)).dtype.is_float();
    // Which discrete values reach an index operand through discrete values only.
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
    g.ids()
        .map(|id| {
            let (k, node) = (id.index(), g.node(id));
            let info = node.op.info();
            let tagged_recompute = node.tag.is_some_and(|t| t.policy == Policy::MustRecompute);
            let taken_from_floats = discrete(k) && node.inputs.iter().any(|i| !discrete(i.index()));
            joint.is_forward(id)
                && !tagged_recompute
                && !info.view
                && (info.selects || (taken_from_floats && feeds_index[k]))
        })
        .collect()
}
