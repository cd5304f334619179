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
//! In every strategy: inputs, parameters and constants are resident; forward outputs are held
//! by the caller; boundary values are kept by whoever reads them ([`boundary`]: "whoever reads
//! it keeps it"); views are replayed from their base (a kept view means a kept base); a MustSave
//! value the backward never needs is reported, not saved; a MustRecompute value the rules must
//! keep is an error naming both, in every strategy. [`check`] verifies every partition against
//! these rules independently of how it was found (after every partition in debug builds).

mod amount;
pub mod boundary;
mod budget;
mod check;
mod classify;
mod evaluate;
mod maxflow;
mod mincut;
pub mod offload;
mod pgraph;

pub use check::check;
pub use classify::counts_bytes;
pub use evaluate::{evaluate, Evaluation};
pub use maxflow::{Capacity, FlowNetwork};
pub use offload::{exposed_times, CostModel};
pub(crate) use pgraph::ShapeCache;
pub use pgraph::{value_bytes, DocId, Flags, PGraph, PNode, PRegion, StorageType};

use crate::error::Result;
use crate::graph::{NodeId, RegionId};
use crate::policy::{Policy, PolicySource};
use classify::{classify, closure_from, Class};

/// How to choose what to save.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strategy {
    /// Eager semantics: every tag honoured literally (the default).
    Respect,
    /// Compiler semantics: a min-cut over bytes decides what the tags leave open.
    MinCut,
    /// Fewest recompute FLOPs within a byte budget; Prefer tags become soft.
    Budget(Budget),
    /// A device-byte budget where the solver chooses, per open value, save, offload or
    /// recompute: the least recompute time plus exposed transfer time ([`CostModel`]).
    BudgetOffload(Budget),
    /// A peak-memory budget for a model: the plan's predicted peak (inputs and parameters
    /// included; on the CPU it equals the measured one) at most this many bytes, with the least
    /// recompute among the exact byte-budget plans ([`crate::Model::with_strategy`]; a joint
    /// graph alone has no schedule to measure a peak on, so [`partition`] refuses it).
    Peak(u64),
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
            Strategy::BudgetOffload(Budget::Bytes(b)) => write!(f, "budget+offload={b}"),
            Strategy::BudgetOffload(Budget::Fraction(x)) => write!(f, "budget+offload={x:?}"),
            Strategy::Peak(b) => write!(f, "peak={b}"),
        }
    }
}

impl std::str::FromStr for Budget {
    type Err = String;

    /// A fraction when it is a decimal number (`0.5`, `1.0`), else bytes with an optional
    /// binary unit (`4096`, `64KiB`, `2MiB`, `1GiB`, `1TiB`). A bad value is told what is wrong
    /// with it (negative, hexadecimal, an unknown unit, too large, ...).
    fn from_str(b: &str) -> Result<Budget, String> {
        amount::budget(b)
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    /// `respect`, `mincut`, `budget=B`, `budget+offload=B` (see [`Budget`]'s `from_str`) or
    /// `peak=BYTES` (`peak=3MiB`). An error names the strategy and what is wrong with its value.
    fn from_str(s: &str) -> Result<Strategy, String> {
        let at = |key: &str, value: &str, why: String| {
            format!("`{key}={}`: {why}", crate::text::shorten(value, crate::text::CELL))
        };
        match s {
            "respect" => Ok(Strategy::Respect),
            "mincut" => Ok(Strategy::MinCut),
            _ => match (s.strip_prefix("budget="), s.strip_prefix("budget+offload="), s.strip_prefix("peak=")) {
                (Some(b), ..) => amount::budget(b).map(Strategy::Budget).map_err(|e| at("budget", b, e)),
                (_, Some(b), _) => amount::budget(b).map(Strategy::BudgetOffload).map_err(|e| at("budget+offload", b, e)),
                (.., Some(b)) => amount::bytes(b).map(Strategy::Peak).map_err(|e| {
                    // A fraction is what `budget=` takes; a peak counts inputs and parameters,
                    // which no fraction of saved bytes measures.
                    let fraction = amount::budget(b).is_ok_and(|x| matches!(x, Budget::Fraction(_)));
                    let e = if fraction { format!("a peak is bytes ({}), not a fraction", amount::BYTES_FORMS) } else { e };
                    at("peak", b, e)
                }),
                _ => Err(format!(
                    "unknown strategy `{}`: expected `respect`, `mincut`, `budget=B`, `budget+offload=B` or `peak=BYTES`",
                    crate::text::shorten(s, crate::text::CELL)
                )),
            },
        }
    }
}

impl Strategy {
    /// The same strategy with the solver's offload choice on (`Budget` becomes `BudgetOffload`)
    /// or off; `Respect` and `MinCut` are unchanged (they offload what the tags ask either way).
    pub fn with_offload(self, on: bool) -> Strategy {
        match (self, on) {
            (Strategy::Budget(b), true) => Strategy::BudgetOffload(b),
            (Strategy::BudgetOffload(b), false) => Strategy::Budget(b),
            (s, _) => s,
        }
    }

    /// The budget, for `Budget` and `BudgetOffload`.
    pub fn budget(self) -> Option<Budget> {
        match self {
            Strategy::Budget(b) | Strategy::BudgetOffload(b) => Some(b),
            _ => None,
        }
    }
}

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
    /// A decision given from outside and scored ([`evaluate`]): saved because listed, or
    /// recomputed because not.
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

/// The outcome of partitioning: per forward node, saved or recomputed, with reasons.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// The strategy used.
    pub strategy: Strategy,
    /// Per node: kept from the forward for the backward (residents and outputs the backward
    /// needs included; offloaded values included — see `offloaded`).
    pub saved: Vec<bool>,
    /// Per node: kept in host memory between the passes (a subset of `saved`).
    pub offloaded: Vec<bool>,
    /// Forward nodes the backward recomputes, in id order.
    pub recomputed: Vec<NodeId>,
    /// One decision per forward node the backward needs, in id order.
    pub decisions: Vec<Decision>,
    /// Things the user should know (unneeded MustSave values, grouped by region and op), one line
    /// each.
    pub warnings: Vec<String>,
    /// Bytes of values saved on the device, what is held anyway and what is offloaded excluded
    /// ([`counts_bytes`]).
    pub saved_bytes: u64,
    /// Bytes of offloaded values: the host memory they take, and the bytes moved each way.
    pub host_bytes: u64,
    /// Estimated seconds of transfer no compute hides ([`offload`]'s cost model).
    pub exposed_transfer_s: f64,
    /// Bytes of what the backward reads that is held anyway — residents (inputs and parameters)
    /// and forward outputs — listed apart, never counted.
    pub held_bytes: u64,
    /// FLOPs spent recomputing.
    pub recompute_flops: u64,
    /// How far the budget search's plan may be from the optimum, relative to its cost (recompute
    /// FLOPs; under `BudgetOffload`, recompute plus exposed transfer seconds): 0.0 when proven
    /// optimal, `(cost − bound) / cost` against the lower bound it proved otherwise (the
    /// heuristic of very large graphs). `None` where no budget was searched (`Respect` and
    /// `MinCut` without region budgets).
    pub optimality_gap: Option<f64>,
}

/// [`partition_with`], every budget search solved by the exact 0-1 program however small (the
/// enumeration of every combination otherwise takes the smallest): for tests that hold one
/// against the other. Built without the `exact` feature, the eviction path answers instead.
#[doc(hidden)]
pub fn partition_by_program(g: &PGraph, strategy: Strategy, model: &CostModel) -> Result<Partition> {
    budget::with_search(budget::Search::Program, || partition_with(g, strategy, model))
}

/// [`partition_with`], every budget search done by the heuristic the largest graphs get (the
/// eviction path, with the Lagrangian bound behind its `optimality_gap`): for tests that hold
/// its plan and bound against the exact optimum.
#[doc(hidden)]
pub fn partition_by_heuristic(g: &PGraph, strategy: Strategy, model: &CostModel) -> Result<Partition> {
    budget::with_search(budget::Search::Heuristic, || partition_with(g, strategy, model))
}

/// Partitions `g` with `strategy` and the default [`CostModel`] (the CPU backend's); regions
/// with their own budget are solved together with it.
pub fn partition(g: &PGraph, strategy: Strategy) -> Result<Partition> {
    partition_with(g, strategy, &CostModel::default())
}

/// [`partition`] with the transfer and compute rates of `model` (used by `BudgetOffload`'s
/// solver and for the exposed-transfer estimate).
pub fn partition_with(g: &PGraph, strategy: Strategy, model: &CostModel) -> Result<Partition> {
    let validated = g.validated()?;
    model.validate()?;
    let wishes = offload::wishes(g, validated.offload_tags)?;
    // What the backward reads: every sweep below starts from it (one pass over every node,
    // computed once); beside it, which values are boundary values (another).
    let (reads, boundary) =
        crate::par::join(|| g.backward_reads_from(&validated.backward), || boundary::boundary_values(g));
    let class = classify(g, &validated.backward, &reads, &boundary, validated.must_recompute_tags)?;
    let respect = respect_at_hand(&class);
    let choose = matches!(strategy, Strategy::BudgetOffload(_));
    // Exposed transfer times matter only for values that may leave the device: none without an
    // offload tag or the solver's choice of offloads, and then nothing reads them.
    let exposed = if choose || wishes.wish.iter().any(Option::is_some) {
        offload::exposed_times(g, model)
    } else {
        vec![0.0; g.len()]
    };
    let ctx = budget::Offload::new(g, &class, &wishes.wish, exposed, model, choose);
    // A budget's bound may still be proven on a thread of this scope while the partition is
    // finished.
    std::thread::scope(|scope| {
        let budget::Solution { mut at_hand, mut chosen, offloaded: off, grade } = match strategy {
            Strategy::Respect => budget::solve(scope, g, &class, &reads, respect.clone(), &respect, None, &ctx)?,
            Strategy::MinCut => {
                let (at_hand, chosen) = mincut::solve(g, &class, &reads);
                budget::refine(scope, g, &class, &reads, at_hand, chosen, &respect, None, &ctx)?
            }
            Strategy::Budget(b) | Strategy::BudgetOffload(b) => {
                budget::solve(scope, g, &class, &reads, respect.clone(), &respect, Some(b), &ctx)?
            }
            Strategy::Peak(bytes) => {
                return Err(crate::error::Error::Invalid(format!(
                    "peak={bytes} needs a plan to measure peaks on: a traced model (Model::with_strategy) or a \
                 remat.graph document; a joint graph alone has no schedule (budget=B bounds saved bytes)"
                )))
            }
        };
        // A must_recompute base no needed view asks for is recomputed; so is a prefer_recompute one
        // where Prefer tags bind.
        let prefer_binds = matches!(strategy, Strategy::Respect | Strategy::MinCut);
        classify::settle_view_bases(g, &class, &boundary, &reads, prefer_binds, &mut at_hand, &mut chosen);
        let mut p =
            finish(g, strategy, &class, &reads, &validated.backward, &at_hand, &chosen, &off, &wishes, ctx.exposed());
        p.warnings.extend(wishes.warnings);
        let searched = strategy.budget().is_some() || g.regions.iter().any(|r| r.budget.is_some());
        let bound = grade.wait();
        p.optimality_gap = searched.then(|| {
            let cost = if choose {
                p.recompute_flops as f64 / model.flops_per_s + p.exposed_transfer_s
            } else {
                p.recompute_flops as f64
            };
            match bound {
                None => 0.0,
                Some(b) if cost > 0.0 => ((cost - b) / cost).clamp(0.0, 1.0),
                Some(_) => 0.0,
            }
        });
        debug_assert!(check(g, &p).is_ok(), "{strategy}: partition breaks a rule: {:?}", check(g, &p).err());
        Ok(p)
    })
}

/// What `Respect` keeps at hand: forced values and values it saves by tag.
fn respect_at_hand(class: &[Class]) -> Vec<bool> {
    class
        .iter()
        .map(|c| match c {
            Class::Forced(_) => true,
            Class::Forbidden(_) => false,
            Class::Soft(r) => !matches!(r, Reason::PreferRecompute | Reason::Factory),
        })
        .collect()
}

/// Where a grouped warning's values are: in region `f` (the function's name, shortened), or
/// outside any region.
pub(crate) fn in_region(function: Option<&str>) -> String {
    function.map_or("outside any region".to_string(), |f| {
        format!("in region `{}`", crate::text::shorten(f, crate::text::CELL))
    })
}

/// Unneeded Must values of one region function, op and policy: how many, and in how many
/// instances.
#[derive(Default)]
struct Unneeded {
    values: u32,
    instances: rustc_hash::FxHashSet<RegionId>,
    /// The instance, when there is just one (named in the warning).
    first: Option<RegionId>,
}

/// What groups unneeded Must values: the region function, the op and the policy.
type UnneededKey<'a> = (Option<&'a str>, &'a str, Policy);

/// Groups of unneeded Must values, in order of first sight.
#[derive(Default)]
struct UnneededGroups<'a> {
    index: rustc_hash::FxHashMap<UnneededKey<'a>, usize>,
    groups: Vec<(UnneededKey<'a>, Unneeded)>,
}

impl<'a> UnneededGroups<'a> {
    fn add(&mut self, function: Option<&'a str>, op: &'a str, policy: Policy, region: Option<RegionId>) {
        let key = (function, op, policy);
        let k = *self.index.entry(key).or_insert_with(|| {
            self.groups.push((key, Unneeded::default()));
            self.groups.len() - 1
        });
        let group = &mut self.groups[k].1;
        group.values += 1;
        if let Some(r) = region {
            group.first.get_or_insert(r);
            group.instances.insert(r);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn finish(
    g: &PGraph,
    strategy: Strategy,
    class: &[Class],
    reads: &[bool],
    backward: &[bool],
    at_hand: &[bool],
    chosen: &[Option<Reason>],
    off: &[bool],
    wishes: &offload::Wishes,
    exposed: &[f64],
) -> Partition {
    let reached = closure_from(g, reads.to_vec(), at_hand);
    let mut saved = vec![false; g.len()];
    let mut offloaded = vec![false; g.len()];
    let (mut host_bytes, mut exposed_transfer_s) = (0u64, 0f64);
    let mut recomputed = Vec::new();
    let mut decisions = Vec::new();
    // Grouped by region function (not instance: a model calls one function per layer), op and
    // policy.
    let mut unneeded = UnneededGroups::default();
    let (mut saved_bytes, mut held_bytes, mut recompute_flops) = (0u64, 0u64, 0u64);
    // Backward nodes skipped by the phase table, not loaded (most of a joint graph's nodes).
    for i in g.ids().filter(|i| !backward[i.index()]) {
        let n = g.node(i);
        if !reached[i.index()] {
            // Warned about only where the user chose the value itself (a statement attribute,
            // `save_names`, an explicit tag): a kind-wide rule such as `save(matmul)` covers
            // values the backward happens not to read (a projection feeding a residual add),
            // and not keeping those is what the rule means.
            let chosen_one_by_one =
                matches!(n.source, Some(PolicySource::Name | PolicySource::Statement | PolicySource::Explicit) | None);
            if let (Some(p @ (Policy::MustSave | Policy::MustOffload)), true) = (n.policy, chosen_one_by_one) {
                let function = n.region.map(|r| g.regions[r.index()].name.as_str());
                unneeded.add(function, &n.op, p, n.region);
            }
            continue;
        }
        let action = match (at_hand[i.index()], off[i.index()]) {
            (true, true) => Action::Offload,
            (true, false) => Action::Save,
            (false, _) => Action::Recompute,
        };
        let reason = chosen[i.index()].unwrap_or(match class[i.index()] {
            Class::Forced(r) | Class::Forbidden(r) | Class::Soft(r) => r,
        });
        // Only a soft decision can go against a Prefer tag; forced ones follow the rules, and a
        // reader keeps a value whatever its producer's must_recompute says.
        let overrode = match (class[i.index()], action, n.policy) {
            (Class::Forced(r), Action::Save | Action::Offload, Some(p @ Policy::MustRecompute))
                if r.is_boundary() || matches!(r, Reason::ViewBase(_)) =>
            {
                Some(p)
            }
            (Class::Soft(_), Action::Save | Action::Offload, Some(p @ Policy::PreferRecompute))
            | (Class::Soft(_), Action::Recompute | Action::Offload, Some(p @ Policy::PreferSave))
            | (Class::Soft(_), Action::Recompute | Action::Save, Some(p @ Policy::PreferOffload)) => Some(p),
            _ => None,
        };
        let offload = (action == Action::Offload).then(|| match (wishes.wish[i.index()], wishes.via_view[i.index()]) {
            (Some(p), Some(v)) => OffloadReason::View(p, v),
            (Some(p), None) if !matches!(strategy, Strategy::BudgetOffload(_)) || p == Policy::MustOffload => {
                OffloadReason::Tag(p)
            }
            _ => OffloadReason::Solver,
        });
        // Sums cannot overflow: `PGraph::validate` checked the graph's totals.
        if action == Action::Offload {
            saved[i.index()] = true;
            offloaded[i.index()] = true;
            host_bytes += n.bytes;
            exposed_transfer_s += exposed[i.index()];
        } else if action == Action::Save {
            saved[i.index()] = true;
            if counts_bytes(g, i) {
                saved_bytes += n.bytes;
            } else {
                held_bytes += n.bytes;
            }
        } else {
            recomputed.push(i);
            recompute_flops += n.flops;
        }
        decisions.push(Decision { node: i, action, reason, overrode, offload });
    }
    let warnings = unneeded
        .groups
        .into_iter()
        .map(|((function, op, policy), group)| {
            let count = group.values;
            let region = match (function, group.instances.len(), group.first) {
                (Some(_), 1, Some(one)) => format!("in region `{}`", g.region_label(one)),
                (Some(_), many, _) => format!("{} ({many} instances)", in_region(function)),
                (None, ..) => in_region(None),
            };
            let op = crate::text::shorten(op, crate::text::CELL);
            let (values, them) =
                if count == 1 { ("1 value is".to_string(), "it") } else { (format!("{count} values are"), "them") };
            let not = if policy == Policy::MustSave { "not saved" } else { "not offloaded" };
            format!("{region}: {values} {policy} ({op}) but the backward never needs {them}: {not}")
        })
        .collect();
    Partition {
        strategy,
        saved,
        offloaded,
        recomputed,
        decisions,
        warnings,
        saved_bytes,
        host_bytes,
        exposed_transfer_s,
        held_bytes,
        recompute_flops,
        optimality_gap: None,
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
