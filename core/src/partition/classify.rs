//! How each forward node may be treated before any strategy looks at it, and the conflicts
//! between what the user asked and what the rules require.
//!
//! In order of precedence: residents (inputs, parameters, constants) and forward outputs are
//! held anyway; `not_recomputable` values are kept; views are replayed from their base;
//! MustRecompute values are never saved; MustSave and MustOffload values are kept; random nodes without inputs
//! are kept (nothing to replay them from), other nodes without inputs (factories such as
//! `arange` or `full`) are recomputed for their FLOPs; boundary values and the bases of kept
//! views are kept; everything else is up to the strategy.

use super::boundary::{boundary_values, Boundary};
use super::{PGraph, Reason};
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::policy::{Policy, PolicySource};

/// How a node may be treated, before any strategy looks at it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Class {
    /// Kept whenever needed; never recomputed.
    Forced(Reason),
    /// Never saved.
    Forbidden(Reason),
    /// Up to the strategy; the reason says what `Respect` does.
    Soft(Reason),
}

impl Class {
    pub fn is_forced(self) -> bool {
        matches!(self, Class::Forced(_))
    }
}

/// The class of every forward node (backward nodes get `Forbidden(View)`, never looked at), or
/// the first conflict between the user's tags and the rules, naming both.
pub(crate) fn classify(g: &PGraph) -> Result<Vec<Class>> {
    let boundary = boundary_values(g);
    let output = g.output_mask();
    let mut class: Vec<Class> = g
        .ids()
        .map(|i| {
            let n = g.node(i);
            let f = n.flags;
            if n.backward {
                Class::Forbidden(Reason::View)
            } else if f.resident {
                Class::Forced(Reason::Resident)
            } else if output[i.index()] {
                Class::Forced(Reason::Output)
            } else if f.not_recomputable {
                Class::Forced(Reason::NotRecomputable)
            } else if f.view {
                Class::Forbidden(Reason::View)
            } else if n.policy == Some(Policy::MustRecompute) {
                Class::Forbidden(Reason::MustRecompute)
            } else if n.policy == Some(Policy::MustSave) {
                Class::Forced(Reason::MustSave)
            } else if n.policy == Some(Policy::MustOffload) {
                Class::Forced(Reason::MustOffload)
            } else if n.inputs.is_empty() && f.random {
                Class::Forced(Reason::RandomSource)
            } else if n.inputs.is_empty() {
                Class::Forbidden(Reason::Factory)
            } else if let Some(b) = boundary[i.index()] {
                Class::Forced(boundary_reason(b))
            } else {
                Class::Soft(match n.policy {
                    Some(Policy::PreferSave) => Reason::PreferSave,
                    Some(Policy::PreferOffload) => Reason::PreferOffload,
                    Some(_) => Reason::PreferRecompute,
                    None => n.region.map_or(Reason::Untagged, Reason::NoPolicy),
                })
            }
        })
        .collect();
    // A view that must be kept (must_save, or a boundary value) is kept through its base, when
    // the backward may need the view.
    let kept_view_of = kept_views(g, &class, &output, &boundary);
    for (c, v) in class.iter_mut().zip(&kept_view_of) {
        if let (Class::Soft(_), Some(v)) = (*c, v) {
            *c = Class::Forced(Reason::ViewBase(*v));
        }
    }
    check_conflicts(g, &class, &output, &boundary, &kept_view_of)?;
    Ok(class)
}

/// Whether forward node `i` is a view that must be kept: must_save or must_offload, or a
/// boundary value (kept through its base).
fn must_keep_view(g: &PGraph, i: usize, boundary: &[Option<Boundary>]) -> bool {
    let n = &g.nodes[i];
    !n.backward
        && n.flags.view
        && (matches!(n.policy, Some(Policy::MustSave | Policy::MustOffload)) || boundary[i].is_some())
}

/// For each node, the first view that must be kept through it and that the backward may need:
/// one it reaches with only the forced values at hand, and the bases found so far (a view's id
/// is above its base's, so one sweep from the last node back finds each base before its own
/// inputs are visited). A view the backward can never need forces nothing.
fn kept_views(g: &PGraph, class: &[Class], output: &[bool], boundary: &[Option<Boundary>]) -> Vec<Option<NodeId>> {
    let mut kept_view_of: Vec<Option<NodeId>> = vec![None; g.len()];
    let mut reached = g.backward_reads();
    for i in (0..g.len()).rev() {
        if g.nodes[i].backward || !reached[i] {
            continue;
        }
        if must_keep_view(g, i, boundary) {
            let base = g.view_base(NodeId(i as u32), output).index();
            if base != i {
                kept_view_of[base].get_or_insert(NodeId(i as u32));
            }
        }
        let at_hand = class[i].is_forced() || (kept_view_of[i].is_some() && matches!(class[i], Class::Soft(_)));
        if !at_hand {
            for &x in &g.nodes[i].inputs {
                reached[x.index()] = true;
            }
        }
    }
    kept_view_of
}

/// Lets a prefer_recompute value forced only as the base of a kept view go back to being
/// recomputed when, under the strategy's choice `at_hand`, the backward needs none of the views
/// kept through it: classification forces such a base when the backward *may* need the view,
/// and a choice that saves what lies between the two can make it unneeded. One sweep from the
/// last node back settles every base before its own inputs; the rest of the choice stands, and
/// forced values the recompute reaches are kept.
pub(crate) fn settle_view_bases(g: &PGraph, class: &[Class], at_hand: &mut [bool], chosen: &mut [Option<Reason>]) {
    let boundary = boundary_values(g);
    let output = g.output_mask();
    let mut demanded = vec![false; g.len()];
    let mut reached = g.backward_reads();
    for i in (0..g.len()).rev() {
        if g.nodes[i].backward || !reached[i] {
            continue;
        }
        if must_keep_view(g, i, &boundary) {
            demanded[g.view_base(NodeId(i as u32), &output).index()] = true;
        }
        match class[i] {
            Class::Forced(Reason::ViewBase(_))
                if !demanded[i] && g.nodes[i].policy == Some(Policy::PreferRecompute) =>
            {
                at_hand[i] = false;
                chosen[i] = Some(Reason::PreferRecompute);
            }
            // Forced values are kept whenever needed, also those a recompute above now reaches
            // beyond what the strategy looked at.
            Class::Forced(_) => at_hand[i] = true,
            _ => {}
        }
        if !at_hand[i] {
            for &x in &g.nodes[i].inputs {
                reached[x.index()] = true;
            }
        }
    }
}

pub(crate) fn boundary_reason(b: Boundary) -> Reason {
    match b {
        Boundary::Region(r) => Reason::ReadByRegion(r),
        Boundary::Gradient(u) => Reason::ReadByGradient(u),
    }
}

/// MustRecompute values that the rules must keep are an error naming both annotations, in every
/// strategy: judged on everything the backward could need (the closure with only forced values
/// at hand), which no strategy exceeds.
fn check_conflicts(
    g: &PGraph,
    class: &[Class],
    output: &[bool],
    boundary: &[Option<Boundary>],
    kept_view_of: &[Option<NodeId>],
) -> Result<()> {
    let forced: Vec<bool> = class.iter().map(|c| c.is_forced()).collect();
    let needed = closure(g, &forced);
    for i in g.ids() {
        let n = g.node(i);
        if n.backward || n.policy != Some(Policy::MustRecompute) {
            continue;
        }
        let tag = format!("must_recompute ({})", source_text(g, i));
        // A traced region's policy may reach a constant or the loss it encloses; that tag is moot
        // (the value is held anyway). Written explicitly, as in a document, it is a contradiction.
        let explicit = matches!(n.source, None | Some(PolicySource::Explicit));
        let clash = if n.flags.resident || output[i.index()] {
            explicit.then(|| {
                if n.flags.resident {
                    "it is resident (an input or a parameter): held, never recomputed".to_string()
                } else {
                    "it is a forward output: the caller holds it, it is never recomputed".to_string()
                }
            })
        } else if !needed[i.index()] {
            None
        } else if n.flags.not_recomputable {
            Some("it is flagged not_recomputable".to_string())
        } else if n.inputs.is_empty() && n.flags.random {
            Some("it is random and has no inputs: there is nothing to replay it from".to_string())
        } else if let (Some(b), false) = (boundary[i.index()], n.flags.view) {
            Some(format!(
                "it is a boundary value ({}), which is always kept; use prefer_recompute, or end the region after another op",
                boundary_reason(b).describe(g)
            ))
        } else if let Some(v) = kept_view_of[i.index()] {
            let why = match g.node(v).policy {
                Some(p @ (Policy::MustSave | Policy::MustOffload)) => format!("{p} ({})", source_text(g, v)),
                _ => "a boundary value".to_string(),
            };
            Some(format!("it is the base of {}, which is {why}: a view is kept through its base", g.describe(v)))
        } else {
            None
        };
        if let Some(clash) = clash {
            return Err(Error::Conflict(format!("{}: {tag} conflicts with the rules: {clash}", g.describe(i))));
        }
    }
    Ok(())
}

/// Where a node's tag came from, for messages.
pub(crate) fn source_text(g: &PGraph, i: NodeId) -> String {
    let n = g.node(i);
    let region = n.region.map_or_else(|| "no region".to_string(), |r| g.region_label(r));
    match n.source {
        Some(PolicySource::OpKind) => format!("the policy of region {region} for `{}`", n.op),
        Some(PolicySource::Name) => format!("save_names of region {region}"),
        Some(PolicySource::Default) => format!("the default of region {region}"),
        Some(PolicySource::Statement) => "a statement attribute".to_string(),
        Some(PolicySource::Explicit) | None => "an explicit tag".to_string(),
    }
}

/// The forward values the backward reaches given which values are at hand: what it reads, and
/// recursively the inputs of whatever is not at hand (recomputed).
pub(crate) fn closure(g: &PGraph, at_hand: &[bool]) -> Vec<bool> {
    let mut reached = g.backward_reads();
    // Reverse id order visits users before inputs, so one sweep suffices.
    for i in (0..g.len()).rev() {
        if g.nodes[i].backward || !reached[i] || at_hand[i] {
            continue;
        }
        for &x in &g.nodes[i].inputs {
            reached[x.index()] = true;
        }
    }
    reached
}

/// Whether a saved node counts in `saved_bytes` and against budgets: everything but what is held
/// anyway — residents (inputs and parameters) and forward outputs (the caller holds them).
/// Constants are never saved (recomputed for free). The one definition, used by the
/// partitioner, its checker and the reports.
pub fn counts_bytes(g: &PGraph, i: NodeId) -> bool {
    !g.node(i).flags.resident && !g.forward_outputs.contains(&i)
}
