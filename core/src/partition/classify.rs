//! How each forward node may be treated before any strategy looks at it, and the conflicts
//! between what the user asked and what the rules require.
//!
//! In order of precedence: residents (inputs, parameters, constants) and forward outputs are
//! held anyway; `not_recomputable` values are kept; views are replayed from their base;
//! MustRecompute values are never saved; MustSave and MustOffload values are kept; random nodes without inputs
//! are kept (nothing to replay them from), other nodes without inputs (factories such as
//! `arange` or `full`) are recomputed for their FLOPs; boundary values and the bases of kept
//! views are kept; everything else is up to the strategy.

use super::boundary::Boundary;
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
    /// Kept exactly when the backward reaches a view kept through it, recomputed otherwise: a
    /// value tagged to be recomputed (must_recompute; prefer_recompute where Prefer tags bind)
    /// that is the base of such a view ([`Reason::ViewBase`]). No strategy chooses it: which
    /// views are reached decides ([`view_pairs`]).
    Tied(Reason),
}

impl Class {
    pub fn is_forced(self) -> bool {
        matches!(self, Class::Forced(_))
    }
}

/// The class of every forward node (backward nodes get `Forbidden(View)`, never looked at), or
/// the first conflict between the user's tags and the rules, naming both. `backward[i]`: node
/// `i` is a backward node (the table [`PGraph::validate`]'s sweep fills). `reads` is
/// [`PGraph::backward_reads`], `boundary` [`super::boundary::boundary_values`];
/// `must_recompute_tags` whether any forward node is tagged must_recompute (conflicts are looked
/// for only then); `prefer_binds` whether the strategy follows prefer_recompute tags (`Respect`
/// and `MinCut`), which makes such a base of a kept view [`Class::Tied`].
pub(crate) fn classify(
    g: &PGraph,
    backward: &[bool],
    reads: &[bool],
    boundary: &[Option<Boundary>],
    must_recompute_tags: bool,
    prefer_binds: bool,
) -> Result<Vec<Class>> {
    let output = g.output_mask();
    // The random op each generator state belongs to (its only user, which reads it first). The
    // flag of each first input is looked up in a table of its own: read from the inputs' nodes,
    // at random, each lookup would miss the cache on a large graph.
    // (Only a forward node's state is ever kept: a backward node is loaded for neither table.)
    let rng_state: Vec<bool> = g.nodes.iter().zip(backward).map(|(n, &b)| !b && n.flags.rng_state).collect();
    let mut state_of = vec![None; g.len()];
    if rng_state.contains(&true) {
        for i in g.ids() {
            if let Some(&s) = g.node(i).inputs.first().filter(|s| rng_state[s.index()]) {
                state_of[s.index()] = Some(i);
            }
        }
    }
    let mut class: Vec<Class> = g
        .ids()
        .map(|i| {
            if backward[i.index()] {
                return Class::Forbidden(Reason::View);
            }
            let n = g.node(i);
            let f = n.flags;
            if f.resident {
                Class::Forced(Reason::Resident)
            } else if output[i.index()] {
                Class::Forced(Reason::Output)
            } else if let (true, Some(op)) = (f.rng_state, state_of[i.index()]) {
                Class::Forced(Reason::RngState(op))
            } else if f.not_recomputable {
                Class::Forced(Reason::NotRecomputable)
            } else if f.view {
                Class::Forbidden(Reason::View)
            } else if n.policy == Some(Policy::MustRecompute) {
                // A producer's tag never cancels its reader's keep: must_recompute says what the
                // producing region keeps for its own backward; a region that reads the value
                // from outside keeps it all the same.
                // A factory replays without inputs: its tag holds whoever reads it.
                match boundary[i.index()] {
                    Some(b) if !factory(g, i) => Class::Forced(boundary_reason(b)),
                    _ => Class::Forbidden(Reason::MustRecompute),
                }
            } else if n.policy == Some(Policy::MustSave) {
                Class::Forced(Reason::MustSave)
            } else if n.policy == Some(Policy::MustOffload) {
                Class::Forced(Reason::MustOffload)
            } else if n.inputs.is_empty() && f.random {
                Class::Forced(Reason::RandomSource)
            } else if n.inputs.is_empty() {
                // Recomputed for its FLOPs by `Respect` and `MinCut`; a budget may keep one.
                Class::Soft(Reason::Factory)
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
    // the backward may need the view; a reader's keep outweighs the base's must_recompute, which
    // holds wherever the backward needs no such view.
    let kept = kept_views(g, &class, &output, boundary, reads);
    for ((i, c), k) in class.iter_mut().enumerate().zip(&kept) {
        let factory = || factory(g, NodeId::from_index(i));
        match (*c, k.first(), k.reader) {
            (Class::Soft(Reason::PreferRecompute), Some(v), _) if prefer_binds => *c = Class::Tied(Reason::ViewBase(v)),
            // A factory base replays the view for free.
            (Class::Soft(r), Some(v), _) if r != Reason::Factory => *c = Class::Forced(Reason::ViewBase(v)),
            (Class::Forbidden(Reason::MustRecompute), _, Some(v)) if k.tagged.is_none() && !factory() => {
                *c = Class::Tied(Reason::ViewBase(v))
            }
            _ => {}
        }
    }
    if must_recompute_tags {
        check_conflicts(g, &class, &kept, reads)?;
    }
    Ok(class)
}

/// The views kept through a node: the first must_save or must_offload view of it, and the first
/// boundary view (its reader keeps it), each only where the backward may need the view.
#[derive(Clone, Copy, Debug, Default)]
struct KeptViews {
    tagged: Option<NodeId>,
    reader: Option<NodeId>,
}

impl KeptViews {
    fn first(&self) -> Option<NodeId> {
        match (self.tagged, self.reader) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Whether forward node `i` is a view that must be kept: must_save or must_offload (by tag),
/// or a boundary value (by its reader); kept through its base.
fn must_keep_view(g: &PGraph, i: usize, boundary: &[Option<Boundary>]) -> Option<KeepBy> {
    let n = &g.nodes[i];
    if n.backward || !n.flags.view {
        return None;
    }
    if matches!(n.policy, Some(Policy::MustSave | Policy::MustOffload)) {
        Some(KeepBy::Tag)
    } else {
        boundary[i].map(|_| KeepBy::Reader)
    }
}

/// `class` for the budget searches: each value forced only as the base of a kept view left to
/// the search (`Soft(ViewBase)`), which keeps it at hand wherever one of its kept views is
/// reached ([`view_pairs`]) and otherwise as it chooses. That is the checker's rule — a needed
/// kept view is kept through its base — where classification keeps the base wherever the
/// backward *may* need the view: a choice that saves what lies between the two leaves the view
/// unneeded and the base free to be recomputed.
pub(crate) fn bases_by_choice(mut class: Vec<Class>) -> Vec<Class> {
    for c in &mut class {
        if let Class::Forced(reason @ Reason::ViewBase(_)) = *c {
            *c = Class::Soft(reason);
        }
    }
    class
}

/// Who keeps a view: its own tag, or the region that reads it.
#[derive(Clone, Copy, PartialEq)]
enum KeepBy {
    Tag,
    Reader,
}

/// For each node, the views that must be kept through it and that the backward may need: those
/// it reaches with only the forced values at hand (a view's id is above its base's, so one sweep
/// from the last node back finds each base before its own inputs are visited). A base kept for
/// its views is walked through: wherever its views are not needed it may be recomputed (a tied
/// base is; a budget search may recompute the others), and its replay may need more views. The
/// same in every strategy, so conflicts are too. A view the backward can never need keeps
/// nothing.
fn kept_views(
    g: &PGraph,
    class: &[Class],
    output: &[bool],
    boundary: &[Option<Boundary>],
    reads: &[bool],
) -> Vec<KeptViews> {
    let mut kept: Vec<KeptViews> = vec![KeptViews::default(); g.len()];
    let mut reached = reads.to_vec();
    for i in (0..g.len()).rev() {
        // `reached` first: only forward nodes are ever reached, and a node not looked at is
        // not loaded (the backward's are most of this sweep's memory).
        if !reached[i] || g.nodes[i].backward {
            continue;
        }
        if let Some(by) = must_keep_view(g, i, boundary) {
            let base = g.view_base(NodeId::from_index(i), output).index();
            if base != i {
                let slot = if by == KeepBy::Tag { &mut kept[base].tagged } else { &mut kept[base].reader };
                slot.get_or_insert(NodeId::from_index(i));
            }
        }
        if !class[i].is_forced() {
            for &x in &g.nodes[i].inputs {
                reached[x.index()] = true;
            }
        }
    }
    kept
}

/// Settles every [`Class::Tied`] value under the strategy's choice `at_hand`: kept where the
/// backward reaches a view kept through it, recomputed otherwise (its tag's reason in
/// `chosen`); a base left to a budget search is kept where such a view is reached. One sweep
/// from the last node back settles every base before its own inputs (a view's id is above its
/// base's); the rest of the choice stands, and forced values a recompute reaches are kept. The
/// budget searches evaluate plans the same way ([`super::budget`]'s `Problem::eval_into`), so
/// what they counted is what is kept.
/// `reads` is [`PGraph::backward_reads`], `boundary` [`super::boundary::boundary_values`].
pub(crate) fn settle_view_bases(
    g: &PGraph,
    class: &[Class],
    boundary: &[Option<Boundary>],
    reads: &[bool],
    at_hand: &mut [bool],
    chosen: &mut [Option<Reason>],
) {
    let output = g.output_mask();
    // Per base, the lowest needed view kept through it.
    let mut demanded: Vec<Option<NodeId>> = vec![None; g.len()];
    let mut reached = reads.to_vec();
    for i in (0..g.len()).rev() {
        // `reached` first: only forward nodes are ever reached, and a node not looked at is
        // not loaded (the backward's are most of this sweep's memory).
        if !reached[i] || g.nodes[i].backward {
            continue;
        }
        if must_keep_view(g, i, boundary).is_some() {
            demanded[g.view_base(NodeId::from_index(i), &output).index()] = Some(NodeId::from_index(i));
        }
        match class[i] {
            Class::Tied(_) if demanded[i].is_none() => {
                at_hand[i] = false;
                chosen[i] = Some(match g.nodes[i].policy {
                    Some(Policy::MustRecompute) => Reason::MustRecompute,
                    _ => Reason::PreferRecompute,
                });
            }
            // Forced values are kept whenever needed, also those a recompute above now reaches
            // beyond what the strategy looked at.
            Class::Forced(_) | Class::Tied(_) => at_hand[i] = true,
            // A base a budget search left to itself ([`bases_by_choice`]) is kept where a view
            // kept through it is needed, as the search counted it.
            Class::Soft(Reason::ViewBase(_)) if !at_hand[i] && demanded[i].is_some() => {
                at_hand[i] = true;
                chosen[i] = demanded[i].map(Reason::ViewBase);
            }
            _ => {}
        }
        if !at_hand[i] {
            for &x in &g.nodes[i].inputs {
                reached[x.index()] = true;
            }
        }
    }
}

/// The pairs `(base, view)`, sorted, for each view kept through its base (must_save or
/// must_offload, or a boundary value) whose base a search keeps wherever the view is reached: a
/// [`Class::Tied`] base (kept exactly there) or one [`bases_by_choice`] left to the search
/// (`Soft(ViewBase)`: kept there, and elsewhere as it chooses).
pub(crate) fn view_pairs(g: &PGraph, class: &[Class]) -> Vec<(NodeId, NodeId)> {
    let paired = |c: &Class| matches!(c, Class::Tied(_) | Class::Soft(Reason::ViewBase(_)));
    if !class.iter().any(paired) {
        return Vec::new();
    }
    let boundary = super::boundary::boundary_values(g);
    let boundary = &boundary[..];
    let output = g.output_mask();
    let mut pairs: Vec<(NodeId, NodeId)> = (0..g.len())
        .filter(|&v| must_keep_view(g, v, boundary).is_some())
        .map(|v| (g.view_base(NodeId::from_index(v), &output), NodeId::from_index(v)))
        .filter(|&(b, _)| paired(&class[b.index()]))
        .collect();
    pairs.sort_unstable();
    pairs
}

pub(crate) fn boundary_reason(b: Boundary) -> Reason {
    match b {
        Boundary::Region(r) => Reason::ReadByRegion(r),
        Boundary::Gradient(u) => Reason::ReadByGradient(u),
    }
}

/// MustRecompute values no plan can honour are an error naming both annotations, in every
/// strategy: judged on everything the backward could need (the closure with only forced values
/// at hand), which no strategy exceeds. A reader's keep is no conflict (the producer's tag
/// applies inside its own region), nor is a forward output (the caller holds it); what remains
/// is a value that cannot be recomputed — flagged `not_recomputable`, random without inputs, or
/// an input or a parameter tagged explicitly — and the base of a view another tag keeps.
fn check_conflicts(g: &PGraph, class: &[Class], kept: &[KeptViews], reads: &[bool]) -> Result<()> {
    // What the backward could need, made when the first must_recompute value asks (most graphs
    // have none: a sweep over every node saved).
    let mut needed: Option<Vec<bool>> = None;
    for i in g.ids() {
        let n = g.node(i);
        if n.backward || n.policy != Some(Policy::MustRecompute) {
            continue;
        }
        let needed = needed.get_or_insert_with(|| {
            // A base kept only for its views may be recomputed where they are not needed (a
            // tied one, or one a budget search decides): the backward could need what it reads.
            let forced: Vec<bool> =
                class.iter().map(|c| c.is_forced() && !matches!(c, Class::Forced(Reason::ViewBase(_)))).collect();
            closure_from(g, reads.to_vec(), &forced)
        });
        let tag = format!("must_recompute ({})", source_text(g, i));
        // A traced region's policy may reach a constant it encloses; that tag is moot (the value
        // is held anyway). Written explicitly, as in a document, it is a contradiction.
        let explicit = matches!(n.source, None | Some(PolicySource::Explicit));
        let clash = if n.flags.resident {
            explicit.then(|| "it is resident (an input or a parameter): held, never recomputed".to_string())
        } else if !needed[i.index()]
            || matches!(class[i.index()], Class::Forced(r) if r.is_boundary() || r == Reason::Output)
        {
            None
        } else if let Some(&m) = n.inputs.iter().find(|&&x| n.flags.not_recomputable && g.node(x).flags.mutated) {
            Some(format!("it reads {}, which the forward mutates: it cannot be recomputed", g.describe(m)))
        } else if n.flags.not_recomputable {
            Some("it is flagged not_recomputable".to_string())
        } else if n.inputs.is_empty() && n.flags.random {
            Some("it is random and has no inputs: there is nothing to replay it from".to_string())
        } else if let Some(v) = kept[i.index()].tagged.filter(|_| !factory(g, i)) {
            let p = g.node(v).policy.map_or("must_save", Policy::name);
            Some(format!(
                "it is the base of {}, which is {p} ({}): a view is kept through its base",
                g.describe(v),
                source_text(g, v)
            ))
        } else {
            None
        };
        if let Some(clash) = clash {
            return Err(Error::Conflict(format!("{}: {tag} conflicts with the rules: {clash}", g.describe(i))));
        }
    }
    Ok(())
}

/// Whether node `i` is a factory (no inputs, not random, not resident): as a view's base it is
/// kept for free, replayed whenever the view is.
fn factory(g: &PGraph, i: NodeId) -> bool {
    let node = g.node(i);
    node.inputs.is_empty() && !node.flags.random && !node.flags.resident
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
    closure_from(g, g.backward_reads(), at_hand)
}

/// [`closure`] from `reached` = [`PGraph::backward_reads`], for callers that already have it.
pub(crate) fn closure_from(g: &PGraph, mut reached: Vec<bool>, at_hand: &[bool]) -> Vec<bool> {
    // Reverse id order visits users before inputs, so one sweep suffices.
    for i in (0..g.len()).rev() {
        // The arrays first: a node neither reached nor at hand is not loaded (the backward's are
        // never reached).
        if !reached[i] || at_hand[i] || g.nodes[i].backward {
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
