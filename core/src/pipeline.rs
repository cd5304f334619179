//! One pipeline from a graph to its explained partition: a `remat.graph` or `remat.joint`
//! document, a forward graph or a traced joint graph in; the partition graph, the partition,
//! its plan and its report out. The `remat` command, the Python module, the benches and
//! [`crate::Model`] all go through it, so every strategy — `peak=` included — works from every
//! entry.

mod evaluated;
mod json_out;

pub use evaluated::Evaluated;

use crate::autodiff::JointGraph;
use crate::error::Result;
use crate::graph::Graph;
use crate::json::{self, Document};
use crate::partition::{partition_with, CostModel, PGraph, Partition, Strategy};
use crate::peak::SearchTime;
use crate::plan::{Plan, Reorder, Schedulable, Schedule, TransferWindow};
use crate::report::Report;

/// A graph to partition: its partition graph, and what plans its partitions.
///
/// ```
/// use remat_core::{CostModel, Problem, Strategy};
///
/// let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/examples/two_regions.graph.json"))?;
/// let problem = Problem::read(&doc)?;
/// let solved = problem.partition("peak=2KiB".parse()?, &CostModel::default())?;
/// let plan = solved.plan();
/// assert!(plan.predicted_peak() <= 2048);
/// assert!(solved.report().text().contains("peak memory: planned"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Problem<'j> {
    graph: PGraph,
    planner: Planner<'j>,
    /// How long `peak=`'s exact search may look.
    time: SearchTime,
}

/// What plans a problem's partitions.
#[derive(Debug)]
enum Planner<'j> {
    /// The traced joint graph the partition graph was made from, kept by its owner (a
    /// [`crate::Model`] runs it).
    Joint(&'j JointGraph),
    /// The partition graph itself: made from a joint graph since dropped (which it plans exactly
    /// as), or read from a `remat.joint` document that lists its forward nodes first.
    Graph,
    /// The partition graph of a `remat.joint` document whose forward and backward nodes
    /// interleave, planned with its forward nodes first ([`Schedule`]).
    ForwardFirst(Reorder),
}

impl Problem<'static> {
    /// A problem read from a `remat.graph` (differentiated here) or `remat.joint` document. A
    /// caller that owns a large text may rather [`crate::json::read`] it, drop it, then call
    /// [`Problem::from_document`], so that the text is not held while the graph is partitioned.
    pub fn read(text: &str) -> Result<Self> {
        Self::from_document(json::read(text)?)
    }

    /// A problem of a document already read ([`crate::json::read`]).
    pub fn from_document(document: Document) -> Result<Self> {
        match document {
            Document::Graph(forward, ids) => {
                // The joint graph takes the forward graph's nodes over rather than copy them, and
                // is not held beside the partition graph, which plans alike: a third of the peak
                // on large graphs (docs/performance.md, "Partition graph").
                let joint = JointGraph::from_forward(forward)?;
                Ok(Problem::of(PGraph::from_joint_with_ids(&joint, &ids), Planner::Graph))
            }
            Document::Joint(graph) => {
                let planner = Reorder::of(&graph).map_or(Planner::Graph, Planner::ForwardFirst);
                Ok(Problem::of(graph, planner))
            }
        }
    }

    /// A problem of a forward graph, differentiated here; the joint graph is not kept.
    pub fn from_forward(forward: Graph) -> Result<Self> {
        let joint = JointGraph::from_forward(forward)?;
        Ok(Problem::of(PGraph::from_joint(&joint), Planner::Graph))
    }
}

impl<'j> Problem<'j> {
    /// A problem of a traced joint graph, which plans every partition.
    pub fn from_joint(joint: &'j JointGraph) -> Self {
        Problem::of(PGraph::from_joint(joint), Planner::Joint(joint))
    }

    fn of(graph: PGraph, planner: Planner<'j>) -> Self {
        Problem { graph, planner, time: SearchTime::DEFAULT }
    }

    /// The same problem, its `peak=` and `peak+offload=` searches taking `time` rather than
    /// [`SearchTime::DEFAULT`]: more to narrow the gap of an answer near the least peak, less
    /// to sweep many limits.
    ///
    /// ```
    /// use remat_core::{CostModel, Problem, SearchTime};
    ///
    /// let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/examples/two_regions.graph.json"))?;
    /// let problem = Problem::read(&doc)?.with_search_time("5s".parse::<SearchTime>()?);
    /// let solved = problem.partition("peak=2KiB".parse()?, &CostModel::default())?;
    /// assert!(solved.plan().predicted_peak() <= 2048);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_search_time(self, time: SearchTime) -> Self {
        Problem { time, ..self }
    }

    /// The partition graph: what the partitioner sees.
    pub fn graph(&self) -> &PGraph {
        &self.graph
    }

    /// Partitions with `strategy` and the rates of `model`, and plans the partition (for
    /// `peak=`, searched over the byte-budget plans, [`crate::peak::partition_for_peak`]). A
    /// `remat.joint` document is planned in its node order, forward nodes first (docs/graph-json.md).
    pub fn partition(&self, strategy: Strategy, model: &CostModel) -> Result<Partitioned<'_>> {
        let schedule = self.schedule();
        let (partition, plan) = solve(&schedule, &self.graph, strategy, model, self.time)?;
        let windows = schedule.transfer_windows(&plan);
        Ok(Partitioned { graph: &self.graph, partition, plan, windows })
    }

    /// The order this problem's partitions are planned in.
    pub(crate) fn schedule(&self) -> Schedule<'_, dyn Schedulable + '_> {
        match &self.planner {
            Planner::Joint(joint) => Schedule::InOrder(*joint),
            Planner::Graph => Schedule::InOrder(&self.graph),
            Planner::ForwardFirst(order) => Schedule::ForwardFirst(order.view(&self.graph)),
        }
    }

    /// The partition alone, unplanned (a sweep of strategies, a drawing); `peak=` still plans
    /// to search.
    pub fn partition_only(&self, strategy: Strategy, model: &CostModel) -> Result<Partition> {
        match strategy {
            Strategy::Peak(_) | Strategy::PeakOffload(_) => {
                self.partition(strategy, model).map(Partitioned::into_partition)
            }
            _ => partition_with(&self.graph, strategy, model),
        }
    }

    /// Scores a given decision: keep the values with document ids `save` (a view stands for its
    /// base), recompute the rest ([`crate::partition::evaluate`]); and plans it, as every
    /// partition is planned, for its predicted peak.
    pub fn evaluate<'s>(&self, save: impl IntoIterator<Item = &'s str>) -> Result<Evaluated<'_>> {
        Evaluated::new(&self.graph, &self.schedule(), save)
    }
}

/// Partitions `graph` with `strategy` and plans the partition over `schedule` (of the joint
/// graph `graph` was made from, or of `graph` itself, which plans alike): for `peak=`, the
/// search over plans ([`crate::peak::partition_for_peak`]), taking `time`.
pub(crate) fn solve<S: Schedulable + ?Sized>(
    schedule: &Schedule<'_, S>,
    graph: &PGraph,
    strategy: Strategy,
    model: &CostModel,
    time: SearchTime,
) -> Result<(Partition, Plan)> {
    if strategy.peak().is_some() {
        return crate::peak::search(schedule, graph, strategy, model, time);
    }
    let partition = partition_with(graph, strategy, model)?;
    let plan = schedule.plan(&partition, model)?;
    Ok((partition, plan))
}

/// A partition of a [`Problem`], its plan, and each offloaded value's transfer window under
/// that plan.
#[derive(Debug)]
pub struct Partitioned<'p> {
    graph: &'p PGraph,
    partition: Partition,
    plan: Plan,
    windows: Vec<TransferWindow>,
}

impl<'p> Partitioned<'p> {
    /// The partition.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// The plan: the forward and backward programs, in the graph's ids.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The report: the partition with the plan's predicted peaks and transfer windows.
    pub fn report(&self) -> Report<'_> {
        Report::new(self.graph, &self.partition).with_transfer_windows(&self.windows).with_plan(&self.plan)
    }

    /// The partition and the plan, for a caller that keeps them past the problem.
    pub fn into_parts(self) -> (Partition, Plan) {
        (self.partition, self.plan)
    }

    /// The partition, the plan dropped.
    pub fn into_partition(self) -> Partition {
        self.partition
    }
}
