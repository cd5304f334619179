//! The partitioner: which forward values the backward pass gets by saving them, and which by
//! recomputing them — with a reason for each.
//!
//! Three strategies share one classification of nodes (`classify`):
//!
//! | tag | `Respect` | `MinCut` | `Budget` |
//! |---|---|---|---|
//! | MustSave | saved when needed | same | same |
//! | PreferSave | saved when needed | min-cut decides | solver may recompute |
//! | MustRecompute | never saved | never saved | never saved |
//! | PreferRecompute | never saved | never saved | solver may save |
//! | untagged | saved when needed | min-cut decides (GEMMs not recomputed) | solver decides |
//!
//! In every strategy: inputs and parameters are resident; forward outputs are held by the
//! caller; values crossing a region boundary are saved when needed; views are replayed from
//! their base (a saved view means a saved base); a MustSave value the backward never needs is
//! reported, not saved; a MustRecompute value that must also be saved is an error.

mod budget;
mod maxflow;
mod mincut;
mod view;

pub use maxflow::FlowNetwork;
pub use view::{Flags, PGraph, PNode, PRegion};

use crate::error::{Error, Result};
use crate::policy::Policy;

/// How to choose what to save.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strategy {
    /// Eager semantics: every tag honoured literally (the default).
    Respect,
    /// Compiler semantics: a min-cut over bytes decides what the tags leave open.
    MinCut,
    /// Fewest recompute FLOPs within a byte budget; Prefer tags become soft.
    Budget(Budget),
}

/// A byte budget for saved values (inputs, parameters and constants excluded).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// At most this many bytes.
    Bytes(u64),
    /// A fraction of the way from the bytes of the forced saves alone (0.0) to the bytes
    /// `Respect` saves (1.0).
    Fraction(f64),
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Strategy::Respect => f.write_str("respect"),
            Strategy::MinCut => f.write_str("mincut"),
            Strategy::Budget(Budget::Bytes(b)) => write!(f, "budget={b}"),
            Strategy::Budget(Budget::Fraction(x)) => write!(f, "budget={x:?}"),
        }
    }
}

impl std::str::FromStr for Budget {
    type Err = String;

    /// A fraction when it has a decimal point (`0.5`, `1.0`), else bytes with an optional
    /// binary suffix (`4096`, `64KiB`, `2MiB`, `1GiB`).
    fn from_str(b: &str) -> Result<Budget, String> {
        if b.contains('.') {
            let f: f64 = b.parse().map_err(|_| format!("`{b}` is not a fraction (like 0.5)"))?;
            if !(0.0..=1.0).contains(&f) {
                return Err(format!("a fraction budget must be in [0, 1], got {f}"));
            }
            return Ok(Budget::Fraction(f));
        }
        let units = [("KiB", 1u64 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("B", 1)];
        let (digits, scale) =
            units.iter().find_map(|&(suffix, scale)| b.strip_suffix(suffix).map(|d| (d, scale))).unwrap_or((b, 1));
        let n: u64 = digits.trim().parse().map_err(|_| {
            format!("`{b}` is neither bytes (4096, 64KiB, 2MiB, 1GiB) nor a fraction with a decimal point (0.5)")
        })?;
        n.checked_mul(scale).map(Budget::Bytes).ok_or_else(|| format!("`{b}` is too many bytes"))
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    /// `respect`, `mincut` or `budget=B` (see [`Budget`]'s `from_str`).
    fn from_str(s: &str) -> Result<Strategy, String> {
        match s {
            "respect" => Ok(Strategy::Respect),
            "mincut" => Ok(Strategy::MinCut),
            _ => match s.strip_prefix("budget=") {
                Some(b) => b.parse().map(Strategy::Budget),
                None => Err(format!("unknown strategy `{s}`: expected `respect`, `mincut` or `budget=B`")),
            },
        }
    }
}

/// What happens to a forward value the backward needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Kept from the forward pass.
    Save,
    /// Computed again in the backward pass.
    Recompute,
}

/// Why a value is saved or recomputed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    /// A graph input or parameter: resident anyway.
    Resident,
    /// A forward output: the caller holds it.
    Output,
    /// Cannot be recomputed.
    NotRecomputable,
    /// Tagged MustSave.
    MustSave,
    /// Crosses the boundary of this region instance.
    Boundary(u32),
    /// The base of this view, which the user asked to save.
    ViewBase(u32),
    /// Tagged PreferSave (Respect).
    PreferSave,
    /// Outside any region (Respect saves what the backward needs).
    Untagged,
    /// A compute-intensive op outside any region: min-cut does not recompute it.
    ComputeIntensive,
    /// The min-cut chose it.
    MinCut,
    /// The budget solver chose it.
    Budget,
    /// A region's own budget solve chose it.
    RegionBudget(u32),
    /// A view: replayed from its base.
    View,
    /// Has no inputs: free to recompute.
    Constant,
    /// Tagged MustRecompute.
    MustRecompute,
    /// Tagged PreferRecompute.
    PreferRecompute,
}

/// One decision: a forward node the backward needs, saved or recomputed, and why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// The node.
    pub node: u32,
    /// Saved or recomputed.
    pub action: Action,
    /// Why.
    pub reason: Reason,
    /// The node's Prefer tag the decision went against (budgets and min-cut only).
    pub overrode: Option<Policy>,
}

/// The outcome of partitioning: per forward node, saved or recomputed, with reasons.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// The strategy used.
    pub strategy: Strategy,
    /// Per node: kept from the forward for the backward (residents included).
    pub saved: Vec<bool>,
    /// Forward nodes the backward recomputes, in id order.
    pub recomputed: Vec<u32>,
    /// One decision per forward node the backward needs, in id order.
    pub decisions: Vec<Decision>,
    /// Things the user should know (an unneeded MustSave, ...).
    pub warnings: Vec<String>,
    /// Bytes of saved values, inputs, parameters and constants excluded.
    pub saved_bytes: u64,
    /// FLOPs spent recomputing.
    pub recompute_flops: u64,
}

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

/// Partitions `g` with `strategy`, then re-solves any region that has its own budget.
pub fn partition(g: &PGraph, strategy: Strategy) -> Result<Partition> {
    validate(g)?;
    let class = classify(g)?;
    let respect_hand = respect_at_hand(&class);
    check_conflicts(g, &class, &respect_hand)?;
    let (mut at_hand, mut chosen) = match strategy {
        Strategy::Respect => (respect_hand.clone(), vec![None; g.len()]),
        Strategy::MinCut => mincut::solve(g, &class),
        Strategy::Budget(b) => budget::solve_global(g, &class, &respect_hand, b)?,
    };
    budget::solve_regions(g, &class, &mut at_hand, &mut chosen)?;
    Ok(finish(g, strategy, &class, &at_hand, &chosen))
}

fn validate(g: &PGraph) -> Result<()> {
    for (i, n) in g.nodes.iter().enumerate() {
        if let Some(&bad) = n.inputs.iter().find(|&&x| x as usize >= i) {
            return Err(Error::Invalid(format!(
                "%{i} ({}): input %{bad} does not precede it (cycle or dangling input)",
                n.op
            )));
        }
        if !n.backward && n.inputs.iter().any(|&x| g.nodes[x as usize].backward) {
            return Err(Error::Invalid(format!("%{i} ({}): a forward node reads a backward node", n.op)));
        }
        if let Some(r) = n.region {
            if r as usize >= g.regions.len() {
                return Err(Error::Invalid(format!("%{i} ({}): region {r} does not exist", n.op)));
            }
        }
    }
    Ok(())
}

/// The class of every forward node.
pub(crate) fn classify(g: &PGraph) -> Result<Vec<Class>> {
    let boundaries = g.boundaries();
    let mut outputs = vec![false; g.len()];
    for &o in &g.forward_outputs {
        outputs[o as usize] = true;
    }
    // A view that must be kept (must_save, or crossing a boundary) is kept through its base:
    // the first non-view ancestor along first inputs.
    let mut view_base_of = vec![None; g.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        let keep = n.policy == Some(Policy::MustSave) || boundaries[i].is_some();
        if n.flags.view && keep && !n.backward {
            let mut base = i;
            while g.nodes[base].flags.view {
                match g.nodes[base].inputs.first() {
                    Some(&b) => base = b as usize,
                    None => break,
                }
            }
            if base != i {
                view_base_of[base].get_or_insert(i as u32);
            }
        }
    }
    let class = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let f = n.flags;
            if f.resident {
                Class::Forced(Reason::Resident)
            } else if outputs[i] {
                Class::Forced(Reason::Output)
            } else if f.not_recomputable {
                Class::Forced(Reason::NotRecomputable)
            } else if f.view {
                Class::Forbidden(Reason::View)
            } else if n.policy == Some(Policy::MustRecompute) {
                Class::Forbidden(Reason::MustRecompute)
            } else if n.policy == Some(Policy::MustSave) {
                Class::Forced(Reason::MustSave)
            } else if let Some(r) = boundaries[i] {
                Class::Forced(Reason::Boundary(r))
            } else if let Some(v) = view_base_of[i] {
                Class::Forced(Reason::ViewBase(v))
            } else if n.inputs.is_empty() {
                Class::Forbidden(Reason::Constant)
            } else {
                Class::Soft(match n.policy {
                    Some(Policy::PreferSave) => Reason::PreferSave,
                    Some(_) => Reason::PreferRecompute,
                    None => Reason::Untagged,
                })
            }
        })
        .collect();
    Ok(class)
}

/// What `Respect` keeps at hand: forced values and values it saves by tag.
fn respect_at_hand(class: &[Class]) -> Vec<bool> {
    class
        .iter()
        .map(|c| match c {
            Class::Forced(_) => true,
            Class::Forbidden(_) => false,
            Class::Soft(r) => *r != Reason::PreferRecompute,
        })
        .collect()
}

/// MustRecompute values that the rules would also have to save are an error naming both.
fn check_conflicts(g: &PGraph, class: &[Class], respect_hand: &[bool]) -> Result<()> {
    let boundaries = g.boundaries();
    let needed = closure(g, respect_hand).reached;
    for (i, n) in g.nodes.iter().enumerate() {
        if n.backward || n.policy != Some(Policy::MustRecompute) || !needed[i] {
            continue;
        }
        let tag = format!("must_recompute ({})", source_text(g, i));
        let clash = if n.flags.not_recomputable {
            Some("it is flagged not_recomputable".to_string())
        } else if let Some(r) = boundaries[i] {
            Some(format!(
                "it crosses the boundary of region {}, and boundary values the backward needs are always saved; \
                 use prefer_recompute, or end the region after another op",
                g.region_label(r)
            ))
        } else if let Class::Forced(Reason::ViewBase(v)) = class[i] {
            Some(format!("it is the base of {}, which must be kept (a view is kept through its base)", g.describe(v)))
        } else {
            None
        };
        if let Some(clash) = clash {
            return Err(Error::Conflict(format!("{}: {tag} conflicts with the rules: {clash}", g.describe(i as u32))));
        }
    }
    Ok(())
}

/// Where a node's tag came from, for messages.
fn source_text(g: &PGraph, i: usize) -> String {
    let n = &g.nodes[i];
    let region = n.region.map_or_else(|| "no region".to_string(), |r| g.region_label(r));
    let rule = match n.source {
        Some(crate::policy::PolicySource::OpKind) => format!("the policy of region {region} for `{}`", n.op),
        Some(crate::policy::PolicySource::Name) => format!("save_names of region {region}"),
        Some(crate::policy::PolicySource::Default) => format!("the default of region {region}"),
        Some(crate::policy::PolicySource::Statement) => "a statement attribute".to_string(),
        Some(crate::policy::PolicySource::Explicit) | None => "an explicit tag".to_string(),
    };
    rule
}

/// The forward values the backward reaches given which values are at hand: what it reads, and
/// recursively the inputs of whatever is not at hand (recomputed).
pub(crate) struct Closure {
    /// Reached: needed by the backward, directly or to recompute something.
    pub reached: Vec<bool>,
}

pub(crate) fn closure(g: &PGraph, at_hand: &[bool]) -> Closure {
    let reads = g.backward_reads();
    let mut reached = vec![false; g.len()];
    // Reverse id order visits users before inputs, so one sweep suffices.
    for i in (0..g.len()).rev() {
        if g.nodes[i].backward {
            continue;
        }
        if reads[i] {
            reached[i] = true;
        }
        if reached[i] && !at_hand[i] {
            for &x in &g.nodes[i].inputs {
                reached[x as usize] = true;
            }
        }
    }
    Closure { reached }
}

/// Bytes counted against budgets: everything saved except residents and constants.
pub(crate) fn counts_bytes(class: Class) -> bool {
    !matches!(class, Class::Forced(Reason::Resident) | Class::Forbidden(Reason::Constant))
}

fn finish(g: &PGraph, strategy: Strategy, class: &[Class], at_hand: &[bool], chosen: &[Option<Reason>]) -> Partition {
    let reached = closure(g, at_hand).reached;
    let mut saved = vec![false; g.len()];
    let mut recomputed = Vec::new();
    let mut decisions = Vec::new();
    let mut warnings = Vec::new();
    let (mut saved_bytes, mut recompute_flops) = (0, 0);
    for (i, n) in g.nodes.iter().enumerate() {
        if n.backward {
            continue;
        }
        if !reached[i] {
            if n.policy == Some(Policy::MustSave) {
                warnings
                    .push(format!("{} is must_save but the backward never needs it: not saved", g.describe(i as u32)));
            }
            continue;
        }
        let action = if at_hand[i] { Action::Save } else { Action::Recompute };
        let reason = chosen[i].unwrap_or(match class[i] {
            Class::Forced(r) | Class::Forbidden(r) | Class::Soft(r) => r,
        });
        // Only a soft decision can go against a Prefer tag; forced ones follow the rules.
        let overrode = match (class[i], action, n.policy) {
            (Class::Soft(_), Action::Save, Some(p @ Policy::PreferRecompute))
            | (Class::Soft(_), Action::Recompute, Some(p @ Policy::PreferSave)) => Some(p),
            _ => None,
        };
        if action == Action::Save {
            saved[i] = true;
            if counts_bytes(class[i]) {
                saved_bytes += n.bytes;
            }
        } else {
            recomputed.push(i as u32);
            recompute_flops += n.flops;
        }
        decisions.push(Decision { node: i as u32, action, reason, overrode });
    }
    Partition { strategy, saved, recomputed, decisions, warnings, saved_bytes, recompute_flops }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Resident => f.write_str("resident (input or parameter)"),
            Reason::Output => f.write_str("graph output: the caller holds it"),
            Reason::NotRecomputable => f.write_str("needed and not recomputable"),
            Reason::MustSave => f.write_str("must_save tag"),
            Reason::Boundary(r) => write!(f, "crosses the boundary of region instance {r}"),
            Reason::ViewBase(v) => write!(f, "base of view %{v}, which must be kept (must_save or boundary)"),
            Reason::PreferSave => f.write_str("prefer_save tag"),
            Reason::Untagged => f.write_str("outside any region: saved when needed"),
            Reason::ComputeIntensive => f.write_str("compute-intensive and untagged: not recomputed"),
            Reason::MinCut => f.write_str("min-cut"),
            Reason::Budget => f.write_str("budget"),
            Reason::RegionBudget(r) => write!(f, "budget of region instance {r}"),
            Reason::View => f.write_str("view: replayed from its base"),
            Reason::Constant => f.write_str("no inputs: free to recompute"),
            Reason::MustRecompute => f.write_str("must_recompute tag"),
            Reason::PreferRecompute => f.write_str("prefer_recompute tag"),
        }
    }
}
