//! What a partition decides for each value the backward needs, and why: [`Action`], [`Reason`],
//! [`OffloadReason`] and the [`Decision`] that holds them.

use super::PGraph;
use crate::graph::{NodeId, RegionId};
use crate::policy::Policy;

/// What happens to a forward value the backward needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Kept from the forward pass (or held anyway: residents and outputs).
    Save,
    /// Computed again in the backward pass.
    Recompute,
    /// Kept in host memory: copied out after the forward produces it, fetched back before its
    /// first backward use.
    Offload,
}

/// Why a value is saved or recomputed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    /// A graph input, parameter or constant: resident anyway.
    Resident,
    /// A forward output: the caller holds it.
    Output,
    /// Cannot be recomputed.
    NotRecomputable,
    /// Random and without inputs: nothing to replay it from.
    RandomSource,
    /// The generator state this random op ran from (`rng_state_bytes`): kept so that the op
    /// replays exactly when recomputed.
    RngState(NodeId),
    /// Tagged MustSave.
    MustSave,
    /// Tagged MustOffload.
    MustOffload,
    /// A boundary value read by this region instance, which recomputes from it.
    ReadByRegion(RegionId),
    /// A boundary value read by the gradient of this forward node, which lies elsewhere.
    ReadByGradient(NodeId),
    /// The base of this view, which must be kept (must_save or a boundary value).
    ViewBase(NodeId),
    /// Tagged PreferSave (Respect).
    PreferSave,
    /// Tagged PreferOffload (Respect offloads it).
    PreferOffload,
    /// Outside any region (Respect saves what the backward needs).
    Untagged,
    /// In this region instance but without a policy of its own (a document may leave a node's
    /// policy out): treated as untagged.
    NoPolicy(RegionId),
    /// A compute-intensive op outside any region: min-cut does not recompute it.
    ComputeIntensive,
    /// The min-cut chose it.
    MinCut,
    /// The budget solver chose it.
    Budget,
    /// A decision given from outside and scored ([`evaluate`](fn@super::evaluate)): saved
    /// because listed, or recomputed because not.
    Given,
    /// A region's own budget chose it.
    RegionBudget(RegionId),
    /// A view: replayed from its base.
    View,
    /// Has no inputs: recomputed for its FLOPs (a factory such as `arange` or `full`) by
    /// `Respect` and `MinCut`; a budget may keep one.
    Factory,
    /// Tagged MustRecompute.
    MustRecompute,
    /// Tagged PreferRecompute.
    PreferRecompute,
}

impl Reason {
    /// Whether the reason marks a boundary value.
    pub fn is_boundary(self) -> bool {
        matches!(self, Reason::ReadByRegion(_) | Reason::ReadByGradient(_))
    }

    /// The reason in words, with the regions and nodes of `g` named:
    /// "read by region `g#1`, which recomputes from it".
    pub fn describe(self, g: &PGraph) -> String {
        match self {
            Reason::ReadByRegion(r) => format!("read by region `{}`, which recomputes from it", g.region_label(r)),
            Reason::ReadByGradient(u) => {
                let n = g.node(u);
                let place =
                    n.region.map_or_else(|| "untagged".to_string(), |r| format!("in region `{}`", g.region_label(r)));
                format!("read by the gradient of {} ({place})", n.id)
            }
            Reason::ViewBase(v) => format!("base of view {}, which must be kept (must_save or boundary)", g.node(v).id),
            Reason::RegionBudget(r) => format!("budget of region `{}`", g.region_label(r)),
            Reason::RngState(r) => format!("generator state of {}: kept to replay it exactly", g.node(r).id),
            Reason::NoPolicy(r) => format!("in region `{}` without a policy: saved when needed", g.region_label(r)),
            other => other.to_string(),
        }
    }
}

/// One decision: a forward node the backward needs, saved, offloaded or recomputed, and why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// The node.
    pub node: NodeId,
    /// Saved, offloaded or recomputed.
    pub action: Action,
    /// Why.
    pub reason: Reason,
    /// The node's Prefer tag the decision went against (budgets and min-cut only).
    pub overrode: Option<Policy>,
    /// Offloaded: why in host memory (the tag, a view's tag, or the solver), else `None`.
    pub offload: Option<OffloadReason>,
}

/// Why a kept value lives in host memory between the passes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OffloadReason {
    /// Its own must_offload / prefer_offload tag.
    Tag(Policy),
    /// The must_offload / prefer_offload tag of this view of it.
    View(Policy, NodeId),
    /// The budget solver chose it: cheaper than recomputing, or the only way to fit.
    Solver,
}

impl OffloadReason {
    /// The reason in words.
    pub fn describe(self, g: &PGraph) -> String {
        match self {
            OffloadReason::Tag(p) => format!("{p} tag"),
            OffloadReason::View(p, v) => format!("{p} tag of view {}", g.node(v).id),
            OffloadReason::Solver => "the budget solver: less exposed transfer time than recomputing".to_string(),
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Resident => f.write_str("resident (input or parameter)"),
            Reason::Output => f.write_str("graph output: the caller holds it"),
            Reason::NotRecomputable => f.write_str("needed and not recomputable"),
            Reason::RandomSource => f.write_str("random without inputs: nothing to replay it from"),
            Reason::RngState(r) => write!(f, "generator state of {r}: kept to replay it exactly"),
            Reason::MustSave => f.write_str("must_save tag"),
            Reason::MustOffload => f.write_str("must_offload tag"),
            Reason::PreferOffload => f.write_str("prefer_offload tag"),
            Reason::ReadByRegion(r) => write!(f, "read by region instance {}, which recomputes from it", r.raw()),
            Reason::ReadByGradient(u) => write!(f, "read by the gradient of {u}, which lies elsewhere"),
            Reason::ViewBase(v) => write!(f, "base of view {v}, which must be kept (must_save or boundary)"),
            Reason::PreferSave => f.write_str("prefer_save tag"),
            Reason::Untagged => f.write_str("outside any region: saved when needed"),
            Reason::NoPolicy(r) => write!(f, "in region instance {} without a policy: saved when needed", r.raw()),
            Reason::ComputeIntensive => f.write_str("compute-intensive and untagged: not recomputed"),
            Reason::MinCut => f.write_str("min-cut"),
            Reason::Budget => f.write_str("budget"),
            Reason::Given => f.write_str("the given decision"),
            Reason::RegionBudget(r) => write!(f, "budget of region instance {}", r.raw()),
            Reason::View => f.write_str("view: replayed from its base"),
            Reason::Factory => f.write_str("no inputs: recomputed for its FLOPs"),
            Reason::MustRecompute => f.write_str("must_recompute tag"),
            Reason::PreferRecompute => f.write_str("prefer_recompute tag"),
        }
    }
}
