//! Reports of a partition: what is saved for the backward and why, what is recomputed and what
//! it costs — as a text table (like JAX's `print_saved_residuals`, with reasons), as JSON, and
//! as Graphviz DOT.
//!
//! ```
//! use remat_core::{partition, JointGraph, PGraph, Report, Strategy};
//! use remat_zoo as zoo;
//!
//! let g = zoo::mlp(&zoo::MlpConfig { batch: 2, widths: vec![3, 4, 2] }).unwrap();
//! let pg = PGraph::from_joint(&JointGraph::new(&g).unwrap());
//! let p = partition(&pg, Strategy::Respect).unwrap();
//! let report = Report::new(&pg, &p);
//! assert!(report.text().contains("saved for the backward"));
//! assert!(report.json().contains("\"strategy\": \"respect\""));
//! assert!(report.dot().starts_with("digraph"));
//! ```

mod dot;
mod evaluation;
mod json;
mod text;

pub use crate::text::fmt_bytes;
pub use dot::dot;

use crate::graph::NodeId;
use crate::partition::{counts_bytes, Decision, PGraph, Partition, Reason};
use crate::plan::TransferWindow;
use crate::policy::Policy;

/// A partition of a joint graph, ready to print.
#[derive(Clone, Copy, Debug)]
pub struct Report<'a> {
    graph: &'a PGraph,
    partition: &'a Partition,
    planned_peak: Option<u64>,
    measured_peak: Option<u64>,
    planned_host_peak: Option<u64>,
    measured_host_peak: Option<u64>,
    windows: Option<&'a [TransferWindow]>,
    heading: Option<(&'a str, &'a str)>,
}

impl<'a> Report<'a> {
    /// A report of `partition`, which was computed over `graph`.
    pub fn new(graph: &'a PGraph, partition: &'a Partition) -> Self {
        Report {
            graph,
            partition,
            planned_peak: None,
            measured_peak: None,
            planned_host_peak: None,
            measured_host_peak: None,
            windows: None,
            heading: None,
        }
    }

    /// Names what the report is of when no strategy made the partition (a decision scored by
    /// [`crate::partition::evaluate`]): the text's first line reads `{kind} ({label}): ...`
    /// rather than `partition ({strategy}): ...`, and the JSON's `strategy` is `label`.
    pub fn with_heading(mut self, kind: &'a str, label: &'a str) -> Self {
        self.heading = Some((kind, label));
        self
    }

    /// What the report calls itself and its strategy: `("partition", "mincut")` unless
    /// [`Report::with_heading`] said otherwise.
    fn heading(&self) -> (&'a str, String) {
        match self.heading {
            Some((kind, label)) => (kind, label.to_string()),
            None => ("partition", self.partition.strategy.to_string()),
        }
    }

    /// Adds the plan's predicted and a measured host peak (offloaded copies), when known.
    pub fn with_host_peaks(mut self, planned: u64, measured: Option<u64>) -> Self {
        self.planned_host_peak = Some(planned);
        self.measured_host_peak = measured;
        self
    }

    /// Adds each offloaded value's transfer window ([`crate::Plan::transfer_windows`]): the
    /// forward step that copies it out, and the backward steps that fetch it and first use it.
    pub fn with_transfer_windows(mut self, windows: &'a [TransferWindow]) -> Self {
        self.windows = Some(windows);
        self
    }

    /// Adds `plan`'s predicted device and host peaks (no measured host peak).
    pub fn with_plan(self, plan: &crate::Plan) -> Self {
        self.with_planned_peak(plan.predicted_peak() as u64).with_host_peaks(plan.predicted_host_peak() as u64, None)
    }

    /// Adds the plan's predicted peak bytes ([`crate::Plan::predicted_peak`]).
    pub fn with_planned_peak(mut self, bytes: u64) -> Self {
        self.planned_peak = Some(bytes);
        self
    }

    /// Adds the peak bytes a backend measured ([`crate::StepOutput::measured_peak`]).
    pub fn with_measured_peak(mut self, bytes: u64) -> Self {
        self.measured_peak = Some(bytes);
        self
    }

    /// The decision about forward node `i`, if the backward needs it.
    fn decision(&self, i: NodeId) -> Option<&'a Decision> {
        let d = &self.partition.decisions;
        d.binary_search_by_key(&i, |d| d.node).ok().map(|k| &d[k])
    }

    /// Why a decision was taken, in words, with the Prefer tag it went against.
    fn why(&self, d: &Decision) -> String {
        let mut why = d.reason.describe(self.graph);
        match (d.overrode, self.graph.node(d.node).region) {
            // A reader's keep: the producer's tag says what its own region keeps.
            (Some(Policy::MustRecompute), region) => {
                let inside =
                    region.map_or_else(|| "its producer".to_string(), |r| format!("`{}`", self.graph.region_label(r)));
                why += &format!("; must_recompute applies inside {inside}");
            }
            (Some(p), _) => why += &format!(" (overrode {p})"),
            (None, _) => {}
        }
        why
    }

    /// Values saved on the device, what is held anyway apart: (counted, held), each in id order.
    fn kept(&self) -> (Vec<NodeId>, Vec<NodeId>) {
        let (g, p) = (self.graph, self.partition);
        let kept = g.ids().filter(|&i| p.saved.get(i.index()).copied().unwrap_or(false) && !self.is_offloaded(i));
        kept.partition(|&i| counts_bytes(g, i))
    }

    fn is_offloaded(&self, i: NodeId) -> bool {
        self.partition.offloaded.get(i.index()).copied().unwrap_or(false)
    }

    /// Offloaded values, in id order.
    fn offloaded(&self) -> Vec<NodeId> {
        self.graph.ids().filter(|&i| self.is_offloaded(i)).collect()
    }

    /// Why a value is offloaded, with its transfer window when the plan's is known.
    fn offload_why(&self, i: NodeId) -> String {
        let mut why = self
            .decision(i)
            .and_then(|d| d.offload)
            .map_or_else(|| "offloaded".to_string(), |o| o.describe(self.graph));
        if let Some(d) = self.decision(i) {
            why += &format!("; kept because: {}", self.why(d));
        }
        if let Some(w) = self.windows.and_then(|w| w.iter().find(|w| w.value == i)) {
            let (out, fetch, first) = (w.offload, w.fetch, w.first_use);
            why += &format!("; out at forward step {out}, fetched at backward step {fetch}, first used at {first}");
        }
        why
    }
}

impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// A stable snake_case code for a reason (JSON reports).
pub fn reason_code(reason: Reason) -> &'static str {
    match reason {
        Reason::Resident => "resident",
        Reason::Output => "output",
        Reason::NotRecomputable => "not_recomputable",
        Reason::RandomSource => "random_source",
        Reason::RngState(_) => "rng_state",
        Reason::MustSave => "must_save",
        Reason::MustOffload => "must_offload",
        Reason::PreferOffload => "prefer_offload",
        Reason::ReadByRegion(_) | Reason::ReadByGradient(_) => "boundary",
        Reason::ViewBase(_) => "view_base",
        Reason::PreferSave => "prefer_save",
        Reason::Untagged | Reason::NoPolicy(_) => "untagged",
        Reason::ComputeIntensive => "compute_intensive",
        Reason::MinCut => "min_cut",
        Reason::Budget => "budget",
        Reason::Given => "given",
        Reason::RegionBudget(_) => "region_budget",
        Reason::View => "view",
        Reason::Factory => "factory",
        Reason::MustRecompute => "must_recompute",
        Reason::PreferRecompute => "prefer_recompute",
    }
}
