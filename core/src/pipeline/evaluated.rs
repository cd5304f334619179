//! A given decision scored over a problem's partition graph (`remat evaluate`), and planned:
//! the peak any saved set reaches under the problem's schedule.

use crate::error::Result;
use crate::graph::NodeId;
use crate::partition::{evaluate, CostModel, Evaluation, PGraph};
use crate::plan::{Plan, Schedulable, Schedule};
use crate::report::Report;

/// A decision "keep these values, recompute the rest", completed, scored and planned
/// ([`super::Problem::evaluate`]), with its report.
#[derive(Debug)]
pub struct Evaluated<'p> {
    graph: &'p PGraph,
    given: Vec<NodeId>,
    label: String,
    evaluation: Evaluation,
    plan: Plan,
}

impl<'p> Evaluated<'p> {
    pub(super) fn new<'s, S: Schedulable + ?Sized>(
        graph: &'p PGraph,
        schedule: &Schedule<'_, S>,
        save: impl IntoIterator<Item = &'s str>,
    ) -> Result<Self> {
        let ids = graph.find_ids(save.into_iter().filter(|s| !s.is_empty()))?;
        let evaluation = evaluate(graph, &ids)?;
        let plan = schedule.plan(&evaluation.partition, &CostModel::default())?;
        let given = distinct(&ids);
        let label = given_label(graph, &given);
        Ok(Evaluated { graph, given, label, evaluation, plan })
    }

    /// The decision's plan under the problem's schedule: its predicted peak is the one a
    /// strategy's plan would be held to.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The values given, each once, in the order first given.
    pub fn given(&self) -> &[NodeId] {
        &self.given
    }

    /// The completed decision, the rules it breaks and the values it keeps for nothing.
    pub fn evaluation(&self) -> &Evaluation {
        &self.evaluation
    }

    /// The completed decision's report, headed `evaluate (the given decision: keep ..)` (its
    /// JSON's `strategy` is `given`).
    pub fn report(&self) -> Report<'_> {
        Report::new(self.graph, &self.evaluation.partition).with_plan(&self.plan).with_heading("evaluate", &self.label)
    }

    /// The report as text, then the values kept for nothing and every rule broken.
    pub fn text(&self) -> String {
        self.report().evaluation_text(&self.evaluation)
    }

    /// The report as JSON (`strategy` reads `given`), with `given`, `broken` and `unneeded`.
    pub fn json(&self) -> String {
        Report::new(self.graph, &self.evaluation.partition)
            .with_plan(&self.plan)
            .with_heading("evaluate", "given")
            .evaluation_json(&self.given, &self.evaluation)
    }
}

/// `ids` without repeats, in the order first given.
fn distinct(ids: &[NodeId]) -> Vec<NodeId> {
    let mut seen = std::collections::HashSet::new();
    ids.iter().copied().filter(|&i| seen.insert(i)).collect()
}

/// What was scored, for the report's first line: `the given decision: keep %2, %5`.
fn given_label(graph: &PGraph, given: &[NodeId]) -> String {
    if given.is_empty() {
        return "the given decision: keep only what is held anyway".to_string();
    }
    let labels: Vec<String> = given.iter().map(|&i| graph.node(i).id.label()).collect();
    let shown: Vec<&str> = labels.iter().take(8).map(String::as_str).collect();
    let more = match labels.len() - shown.len() {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    format!("the given decision: keep {}{more}", shown.join(", "))
}
