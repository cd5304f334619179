//! The report as JSON, written with serde.

use super::{reason_code, Report};
use crate::graph::NodeId;
use crate::json_writer::{object, rows, spaced, write_fields, Field};
use crate::partition::{Action, Decision, Reason};
use crate::policy::Policy;
use serde::Serialize;

impl Report<'_> {
    /// The partition as JSON: `strategy`, `saved` (the saved values, what is held anyway apart),
    /// `held` (the inputs, parameters and forward outputs the backward reads), `recomputed`,
    /// `saved_bytes` (what is held anyway excluded), `held_bytes`, `recompute_flops`, `decisions`
    /// (`id`, `action`, `reason` code, `why` text, and `overrode`, `region`, `grad_of` or `view`
    /// where they apply), `warnings`, and the peaks when given. Ids are the document's own.
    pub fn json(&self) -> String {
        object(self.json_fields().into_iter().chain(self.peak_fields()).collect())
    }

    /// [`Report::json`], written to `out` as it is laid out rather than built first (large
    /// reports are tens of megabytes; the `remat` command writes it straight to its output).
    pub fn write_json(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        self.write_json_draft(self.json_draft(), out)
    }

    /// Every field of [`Report::json`] but the peaks, laid out ahead of them: the pipeline writes
    /// it out while planning ([`JsonDraft::write_head`]), then the peaks
    /// ([`Report::write_json_tail`]).
    pub(crate) fn json_draft(&self) -> JsonDraft {
        JsonDraft(self.json_fields())
    }

    /// Writes `draft` (of a report of the same partition and graph) with this report's peaks
    /// after it: what [`Report::write_json`] writes.
    fn write_json_draft(&self, draft: JsonDraft, out: &mut impl std::io::Write) -> std::io::Result<()> {
        draft.write_head(out)?;
        self.write_json_tail(out)
    }

    /// What follows a `JsonDraft::write_head` of a report of the same partition and graph:
    /// this report's peaks, and the end of the object.
    pub(crate) fn write_json_tail(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        write_fields(out, self.peak_fields().collect(), false)?;
        out.write_all(b"\n}\n")
    }

    fn json_fields(&self) -> Vec<(&'static str, Field)> {
        let (g, p) = (self.graph, self.partition);
        let (saved, resident) = self.kept();
        let ids = |list: &[NodeId]| {
            let ids: Vec<serde_json::Value> = list.iter().map(|&i| g.node(i).id.to_json()).collect();
            Field::Value(spaced(&ids))
        };
        let decisions = rows(&p.decisions, |d| self.decision_out(d));
        let mut fields = vec![
            ("strategy", value(&self.heading().1)),
            ("saved", ids(&saved)),
            ("held", ids(&resident)),
            ("offloaded", ids(&self.offloaded())),
            ("recomputed", ids(&p.recomputed)),
            ("saved_bytes", value(&p.saved_bytes)),
            ("held_bytes", value(&p.held_bytes)),
            ("host_bytes", value(&p.host_bytes)),
            ("bytes_to_host", value(&p.host_bytes)),
            ("bytes_to_device", value(&p.host_bytes)),
            ("exposed_transfer_s", value(&p.exposed_transfer_s)),
            ("recompute_flops", value(&p.recompute_flops)),
        ];
        if let Some(gap) = p.optimality_gap {
            fields.push(("optimality_gap", value(&gap)));
        }
        fields.push(("decisions", decisions));
        fields.push(("warnings", value(&p.warnings)));
        fields
    }

    /// The peaks known, after every other field.
    fn peak_fields(&self) -> impl Iterator<Item = (&'static str, Field)> {
        let peaks = [
            ("planned_peak", self.planned_peak),
            ("measured_peak", self.measured_peak),
            ("planned_host_peak", self.planned_host_peak),
            ("measured_host_peak", self.measured_host_peak),
        ];
        peaks.into_iter().filter_map(|(key, b)| Some((key, value(&b?))))
    }

    pub(super) fn decision_out(&self, d: &Decision) -> DecisionOut {
        let g = self.graph;
        let id = |i: NodeId| Some(g.node(i).id.to_json());
        let (region, grad_of, view) = match d.reason {
            Reason::ReadByRegion(r) | Reason::RegionBudget(r) => (Some(g.regions[r.index()].key), None, None),
            Reason::ReadByGradient(u) => (None, id(u), None),
            Reason::ViewBase(v) => (None, None, id(v)),
            _ => (None, None, None),
        };
        DecisionOut {
            id: g.node(d.node).id.to_json(),
            action: match d.action {
                Action::Save => "save",
                Action::Recompute => "recompute",
                Action::Offload => "offload",
            },
            reason: reason_code(d.reason),
            why: self.why(d),
            region,
            grad_of,
            view,
            overrode: d.overrode.map(Policy::name),
            offload: d.offload.map(|o| o.describe(g)),
        }
    }
}

/// A JSON report laid out but for its peaks ([`Report::json_draft`]).
pub(crate) struct JsonDraft(Vec<(&'static str, Field)>);

impl JsonDraft {
    /// Writes the report up to its peaks, leaving the object open for
    /// [`Report::write_json_tail`].
    pub(crate) fn write_head(self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        out.write_all(b"{")?;
        write_fields(out, self.0, true)
    }
}

impl std::fmt::Debug for JsonDraft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonDraft").field("fields", &self.0.len()).finish_non_exhaustive()
    }
}

/// One decision of the JSON report; the optional fields only where they apply.
#[derive(Serialize)]
pub(super) struct DecisionOut {
    id: serde_json::Value,
    action: &'static str,
    reason: &'static str,
    why: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grad_of: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    view: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    overrode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offload: Option<String>,
}

fn value<T: Serialize + ?Sized>(v: &T) -> Field {
    Field::Value(spaced(v))
}
