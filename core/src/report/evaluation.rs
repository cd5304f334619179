//! The report of a scored decision (`remat evaluate`): the partition's report, then what was
//! given, the rules it breaks and what it keeps for nothing.

use super::json::DecisionOut;
use super::Report;
use crate::graph::NodeId;
use crate::partition::Evaluation;
use serde::Serialize;

impl Report<'_> {
    /// [`Report::text`], then the values `evaluation` keeps for nothing and the rules it breaks.
    pub(crate) fn evaluation_text(&self, evaluation: &Evaluation) -> String {
        let mut text = self.text();
        let unneeded: Vec<String> = evaluation.unneeded.iter().map(|&i| self.graph.node(i).id.label()).collect();
        if !unneeded.is_empty() {
            text += &format!("\nkept for nothing (the backward never reaches them): {}\n", unneeded.join(", "));
        }
        if evaluation.broken.is_empty() {
            text += "\nrules: the decision keeps every rule\n";
        } else {
            text += &format!("\nrules broken ({}):\n", evaluation.broken.len());
            for line in &evaluation.broken {
                text += &format!("  - {line}\n");
            }
        }
        text
    }

    /// [`Report::json`]'s fields, then `given`, `broken` and `unneeded`, laid out one item a
    /// line throughout (serde_json's pretty layout, which `remat evaluate --json` has always
    /// printed).
    pub(crate) fn evaluation_json(&self, given: &[NodeId], evaluation: &Evaluation) -> String {
        let (g, p) = (self.graph, self.partition);
        let ids = |list: &[NodeId]| list.iter().map(|&i| g.node(i).id.to_json()).collect::<Vec<_>>();
        let (saved, held) = self.kept();
        let out = EvaluationOut {
            strategy: self.heading().1,
            saved: ids(&saved),
            held: ids(&held),
            offloaded: ids(&self.offloaded()),
            recomputed: ids(&p.recomputed),
            saved_bytes: p.saved_bytes,
            held_bytes: p.held_bytes,
            host_bytes: p.host_bytes,
            bytes_to_host: p.host_bytes,
            bytes_to_device: p.host_bytes,
            exposed_transfer_s: p.exposed_transfer_s,
            recompute_flops: p.recompute_flops,
            optimality_gap: p.optimality_gap,
            decisions: p.decisions.iter().map(|d| self.decision_out(d)).collect(),
            warnings: &p.warnings,
            planned_peak: self.planned_peak,
            measured_peak: self.measured_peak,
            planned_host_peak: self.planned_host_peak,
            measured_host_peak: self.measured_host_peak,
            given: ids(given),
            broken: &evaluation.broken,
            unneeded: ids(&evaluation.unneeded),
        };
        let mut text = serde_json::to_string_pretty(&out).expect("reports serialize to memory");
        text.push('\n');
        text
    }
}

/// A scored decision's report as JSON: the fields of [`Report::json`] in its order, then the
/// evaluation's (the test `evaluate_json_is_the_report_and_three_fields` holds them alike).
#[derive(Serialize)]
struct EvaluationOut<'r> {
    strategy: String,
    saved: Vec<serde_json::Value>,
    held: Vec<serde_json::Value>,
    offloaded: Vec<serde_json::Value>,
    recomputed: Vec<serde_json::Value>,
    saved_bytes: u64,
    held_bytes: u64,
    host_bytes: u64,
    bytes_to_host: u64,
    bytes_to_device: u64,
    exposed_transfer_s: f64,
    recompute_flops: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    optimality_gap: Option<f64>,
    decisions: Vec<DecisionOut>,
    warnings: &'r [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    planned_peak: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured_peak: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    planned_host_peak: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured_host_peak: Option<u64>,
    given: Vec<serde_json::Value>,
    broken: &'r [String],
    unneeded: Vec<serde_json::Value>,
}
