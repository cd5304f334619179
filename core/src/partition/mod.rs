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
//! keep is an error naming both, in every strategy. [`check()`] verifies every partition against
//! these rules independently of how it was found (after every partition in debug builds).

mod amount;
pub mod boundary;
mod budget;
#[cfg(feature = "exact")]
pub(crate) use budget::{Choice, Extra, Term, Watcher};
mod check;
mod classify;
mod doc_id;
mod evaluate;
mod finish;
mod maxflow;
mod mincut;
pub mod offload;
mod pgraph;
mod reason;
mod routing;
mod storage_type;
mod strategy;

pub use check::check;
pub use classify::counts_bytes;
pub use doc_id::DocId;
#[cfg(feature = "exact")]
pub(crate) use evaluate::offloading;
pub use evaluate::{evaluate, Evaluation};
pub(crate) use finish::in_region;
pub use offload::{exposed_times, CostModel};
pub(crate) use pgraph::ShapeCache;
pub use pgraph::{Flags, PGraph, PNode, PRegion};
pub use reason::{Action, Decision, OffloadReason, Reason};
pub use storage_type::{value_bytes, StorageType};
pub use strategy::{Budget, Strategy};

use crate::error::Result;
use crate::graph::NodeId;
use classify::{classify, Class};
use finish::finish;

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
    /// Estimated seconds of transfer no compute hides ([`CostModel`]'s estimate).
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

impl Partition {
    /// What its strategy minimised, in the units of [`Partition::optimality_gap`]: recompute
    /// FLOPs, or where the strategy chooses offloads, recompute plus exposed transfer seconds
    /// under `model`.
    pub fn cost(&self, model: &CostModel) -> f64 {
        if self.strategy.chooses_offload() {
            model.compute_s(self.recompute_flops) + self.exposed_transfer_s
        } else {
            self.recompute_flops as f64
        }
    }
}

/// [`partition_with`], every budget search solved by the exact 0-1 program however small (the
/// enumeration of every combination otherwise takes the smallest): for tests that hold one
/// against the other. Built without the `exact` feature, the eviction path answers instead.
#[cfg(feature = "test-hooks")]
pub fn partition_by_program(g: &PGraph, strategy: Strategy, model: &CostModel) -> Result<Partition> {
    budget::with_search(budget::Search::Program, || partition_with(g, strategy, model))
}

/// [`partition_with`], every budget search done by the heuristic the largest graphs get (the
/// eviction path, with the Lagrangian bound behind its `optimality_gap`): for tests that hold
/// its plan and bound against the exact optimum.
#[cfg(feature = "test-hooks")]
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
    partition_searched(g, strategy, model, None).map(|s| s.partition)
}

/// A partition, with what its budget search decided and proved.
#[cfg_attr(not(feature = "exact"), allow(dead_code))]
pub(crate) struct Searched {
    pub(crate) partition: Partition,
    /// The search's proven lower bound on the cost (`None`: optimal, or nothing searched).
    pub(crate) bound: Option<f64>,
    /// What the search kept at hand and offloaded (before views are settled on their bases),
    /// where a caller's rows joined the search (only the peak search reads it: a copy per
    /// partition of every graph would be work for nothing).
    pub(crate) choice: Option<budget::Choice>,
}

/// [`partition_with`], under a byte budget the exact program's `extra` rows join (for
/// [`Strategy::Peak`]'s search; with `offload`, [`Strategy::PeakOffload`]'s, where the program
/// chooses offloads too and its cost is in seconds).
#[cfg(feature = "exact")]
pub(crate) fn partition_with_rows(
    g: &PGraph,
    extra: &budget::Extra<'_>,
    model: &CostModel,
    offload: bool,
) -> Result<Searched> {
    partition_searched(g, Strategy::Budget(Budget::Bytes(u64::MAX)).with_offload(offload), model, Some(extra))
}

fn partition_searched(
    g: &PGraph,
    strategy: Strategy,
    model: &CostModel,
    extra: Option<&budget::Extra<'_>>,
) -> Result<Searched> {
    let validated = g.validated()?;
    model.validate()?;
    let wishes = offload::wishes(g, validated.offload_tags)?;
    // What the backward reads: every sweep below starts from it (one pass over every node,
    // computed once); beside it, which values are boundary values (another).
    let (reads, boundary) =
        crate::concurrent::join(|| g.backward_reads_from(&validated.backward), || boundary::boundary_values(g));
    // Prefer tags bind under `Respect` and `MinCut`: a prefer_recompute base of a kept view is
    // then recomputed wherever the backward needs none of its kept views, as a must_recompute one.
    let prefer_binds = matches!(strategy, Strategy::Respect | Strategy::MinCut);
    let class = classify(g, &validated.backward, &reads, &boundary, validated.must_recompute_tags, prefer_binds)?;
    // The budget searches keep the base of a kept view where the view is needed, as the
    // checker's rule says, rather than wherever the backward may need it.
    let class = if strategy.budget().is_some() { classify::bases_by_choice(class) } else { class };
    let respect = respect_at_hand(&class);
    let choose = strategy.chooses_offload();
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
    crate::concurrent::scope(|scope| {
        let budget::Solution { mut at_hand, mut chosen, offloaded: off, grade } = match strategy {
            Strategy::Respect => budget::solve(scope, g, &class, &reads, respect.clone(), &respect, None, &ctx, None)?,
            Strategy::MinCut => {
                let (at_hand, chosen) = mincut::solve(g, &class, &reads);
                budget::refine(scope, g, &class, &reads, at_hand, chosen, &respect, None, &ctx, None)?
            }
            Strategy::Budget(b) | Strategy::BudgetOffload(b) => {
                budget::solve(scope, g, &class, &reads, respect.clone(), &respect, Some(b), &ctx, extra)?
            }
            Strategy::Peak(_) | Strategy::PeakOffload(_) => {
                return Err(crate::error::Error::config(
                    "strategy",
                    format!(
                        "{strategy} needs a plan to measure peaks on: partition through remat::Problem (a traced \
                 model, a remat.graph or remat.joint document) or Model::with_strategy; a partition graph alone \
                 is not planned (budget=B bounds saved bytes)"
                    ),
                ))
            }
        };
        let choice = extra.map(|_| budget::Choice { at_hand: at_hand.clone(), offloaded: off.clone() });
        classify::settle_view_bases(g, &class, &boundary, &reads, &mut at_hand, &mut chosen);
        let mut p =
            finish(g, strategy, &class, &reads, &validated.backward, &at_hand, &chosen, &off, &wishes, ctx.exposed());
        p.warnings.extend(wishes.warnings);
        let searched = strategy.budget().is_some() || g.regions.iter().any(|r| r.budget.is_some());
        let bound = grade.wait();
        p.optimality_gap = searched.then(|| {
            let cost = p.cost(model);
            match bound {
                None => 0.0,
                Some(b) if cost > 0.0 => ((cost - b) / cost).clamp(0.0, 1.0),
                Some(_) => 0.0,
            }
        });
        debug_assert!(check(g, &p).is_ok(), "{strategy}: partition breaks a rule: {:?}", check(g, &p).err());
        Ok(Searched { partition: p, bound, choice })
    })
}

/// What `Respect` keeps at hand: forced values and values it saves by tag (a tied value is at
/// hand where its views keep it, which the searches and the settling see for themselves).
fn respect_at_hand(class: &[Class]) -> Vec<bool> {
    class
        .iter()
        .map(|c| match c {
            Class::Forced(_) => true,
            Class::Forbidden(_) | Class::Tied(_) => false,
            Class::Soft(r) => !matches!(r, Reason::PreferRecompute | Reason::Factory),
        })
        .collect()
}
