//! What the budget search knows of offloading: the values offloaded by tag, those the solver
//! may choose to offload (`BudgetOffload`), and the exposed seconds of each transfer.

use crate::graph::NodeId;
use crate::partition::classify::Class;
use crate::partition::offload::{can_leave, CostModel};
use crate::partition::{PGraph, Reason};
use crate::policy::Policy;

/// What the search knows of offloading. Every table holds one entry per node of the graph;
/// `fixed` and `optional` never both hold for a node, and `optional` is empty of `true` unless
/// `choose`.
pub(in crate::partition) struct Offload {
    /// Offloaded whenever kept (by tag).
    pub(super) fixed: Vec<bool>,
    /// Offloaded whenever kept by tag when the solver does not choose (every offload tag that
    /// can be met): `fixed` of the same problem without choice.
    pub(super) tagged: Vec<bool>,
    /// May be offloaded at the solver's choice (`BudgetOffload` only).
    pub(super) optional: Vec<bool>,
    /// Exposed seconds if offloaded.
    pub(super) exposed: Vec<f64>,
    /// Seconds per FLOP.
    pub(super) s_per_flop: f64,
    /// Whether the solver chooses offloads (`BudgetOffload`).
    pub(super) choose: bool,
}

impl Offload {
    /// Exposed seconds per value if offloaded.
    pub(in crate::partition) fn exposed(&self) -> &[f64] {
        &self.exposed
    }

    /// What the search knows of offloading for the partition of `g`: tagged offloads from
    /// `wish`, and where `choose`, the values the solver may offload; `exposed` per value.
    pub(in crate::partition) fn new(
        g: &PGraph,
        class: &[Class],
        wish: &[Option<Policy>],
        exposed: Vec<f64>,
        model: &CostModel,
        choose: bool,
    ) -> Offload {
        let tagged: Vec<bool> = g.ids().map(|i| wish[i.index()].is_some()).collect();
        let fixed: Vec<bool> = g
            .ids()
            .map(|i| match wish[i.index()] {
                Some(Policy::MustOffload) => true,
                Some(_) => !choose,
                None => false,
            })
            .collect();
        // Bases of must_save views stay on the device (found only where the solver chooses
        // offloads: a sweep over every node).
        let must_save_base = if choose { must_save_bases(g) } else { vec![false; g.len()] };
        let optional = g
            .ids()
            .map(|i| choose && !fixed[i.index()] && !must_save_base[i.index()] && may_choose(g, &class[i.index()], i))
            .collect();
        Offload { fixed, tagged, optional, exposed, s_per_flop: 1.0 / model.flops_per_s, choose }
    }

    /// The same problem with the solver's offload choice off: tagged offloads only.
    pub(super) fn without_choice(&self) -> Offload {
        Offload {
            fixed: self.tagged.clone(),
            tagged: self.tagged.clone(),
            optional: vec![false; self.optional.len()],
            exposed: self.exposed.clone(),
            s_per_flop: self.s_per_flop,
            choose: false,
        }
    }
}

/// Per node, whether it is the base of a `must_save` forward view (such bases stay on the device).
fn must_save_bases(g: &PGraph) -> Vec<bool> {
    let mut must_save_base = vec![false; g.len()];
    let output = g.output_mask();
    for v in g.ids() {
        let n = g.node(v);
        if !n.backward && n.flags.view && n.policy == Some(Policy::MustSave) {
            must_save_base[g.view_base(v, &output).index()] = true;
        }
    }
    must_save_base
}

/// Whether the solver may offload `i` of class `class` (tags and must_save bases aside): a
/// soft value, or one forced only by a boundary or by being a source, not a view, not in the
/// backward, not `must_save`, and able to leave the device.
fn may_choose(g: &PGraph, class: &Class, i: NodeId) -> bool {
    let n = g.node(i);
    let allowed = match class {
        Class::Soft(_) => true,
        Class::Forced(r) => {
            r.is_boundary()
                || matches!(
                    r,
                    Reason::NotRecomputable | Reason::RandomSource | Reason::RngState(_) | Reason::ViewBase(_)
                )
        }
        // A tied base, where its view keeps it.
        Class::Tied(_) => true,
        Class::Forbidden(_) => false,
    };
    allowed && !n.backward && !n.flags.view && n.policy != Some(Policy::MustSave) && can_leave(g, i)
}
