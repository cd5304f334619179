//! Reports of a partition: what is saved for the backward and why, what is recomputed and what
//! it costs — as a text table (like JAX's `print_saved_residuals`, with reasons), as JSON, and
//! as Graphviz DOT.
//!
//! ```
//! use remat_core::partition::{partition, PGraph};
//! use remat_core::{report::Report, zoo, JointGraph, Strategy};
//!
//! let g = zoo::mlp(&zoo::MlpConfig { batch: 2, widths: vec![3, 4, 2] }).unwrap();
//! let pg = PGraph::from_joint(&JointGraph::new(&g).unwrap());
//! let p = partition(&pg, Strategy::Respect).unwrap();
//! let report = Report::new(&pg, &p);
//! assert!(report.text().contains("saved for the backward"));
//! assert!(report.json().contains("\"strategy\": \"respect\""));
//! assert!(report.dot().starts_with("digraph"));
//! ```

use crate::graph::{NodeId, RegionId};
use crate::partition::{counts_bytes, Action, Decision, DocId, PGraph, Partition, Reason};
use crate::policy::Policy;
use crate::text;
pub use crate::text::fmt_bytes;
use std::fmt::Write as _;

/// A partition of a joint graph, ready to print.
#[derive(Clone, Copy, Debug)]
pub struct Report<'a> {
    graph: &'a PGraph,
    partition: &'a Partition,
    planned_peak: Option<u64>,
    measured_peak: Option<u64>,
    planned_host_peak: Option<u64>,
    measured_host_peak: Option<u64>,
    windows: Option<&'a [(NodeId, usize, usize, usize)]>,
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
    pub fn with_transfer_windows(mut self, windows: &'a [(NodeId, usize, usize, usize)]) -> Self {
        self.windows = Some(windows);
        self
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
        if let Some(&(_, out, fetch, first)) = self.windows.and_then(|w| w.iter().find(|w| w.0 == i)) {
            why += &format!("; out at forward step {out}, fetched at backward step {fetch}, first used at {first}");
        }
        why
    }

    /// The table: saved values with shape, dtype, bytes, location and reason; residents the
    /// backward reads; recomputed ops with FLOPs; totals; warnings; peaks. Long cells are
    /// shortened (the JSON keeps them whole).
    pub fn text(&self) -> String {
        let (g, p) = (self.graph, self.partition);
        let mut out = String::new();
        let (saved, resident) = self.kept();
        let _ = writeln!(
            out,
            "partition ({}): {} value(s) saved, {} resident, {} op(s) recomputed",
            p.strategy,
            saved.len(),
            resident.len(),
            p.recomputed.len()
        );
        let header = ["id", "op", "shape", "dtype", "bytes", "region", "name", "location", "why"];
        let rows = |ids: &[NodeId], metric: &dyn Fn(NodeId) -> String| -> Vec<Vec<String>> {
            ids.iter()
                .map(|&i| {
                    let mut row = self.columns(i);
                    row.insert(4, metric(i));
                    row.push(self.decision(i).map_or_else(String::new, |d| self.why(d)));
                    row
                })
                .collect()
        };
        let size = |i: NodeId| fmt_bytes(g.node(i).bytes);
        out += "\nsaved for the backward:\n";
        out += &table_or_nothing(&header, &rows(&saved, &size));
        let offloaded = self.offloaded();
        if !offloaded.is_empty() {
            out += "\noffloaded to host memory (copied out after the forward computes it, fetched before the backward uses it):\n";
            let rows: Vec<Vec<String>> = offloaded
                .iter()
                .map(|&i| {
                    let mut row = self.columns(i);
                    row.insert(4, size(i));
                    row.push(self.offload_why(i));
                    row
                })
                .collect();
            out += &table(&header, &rows);
        }
        out += "\nheld anyway (inputs, parameters and forward outputs the backward reads; not counted):\n";
        out += &table_or_nothing(&header, &rows(&resident, &size));
        let header = ["id", "op", "shape", "dtype", "flops", "region", "name", "location", "why"];
        out += "\nrecomputed in the backward:\n";
        out += &table_or_nothing(&header, &rows(&p.recomputed, &|i| g.node(i).flops.to_string()));
        let _ = writeln!(
            out,
            "\ntotals: saved {} ({} B; what is held anyway excluded), held anyway {} ({} B), recompute {} FLOPs",
            fmt_bytes(p.saved_bytes),
            p.saved_bytes,
            fmt_bytes(p.held_bytes),
            p.held_bytes,
            p.recompute_flops
        );
        let _ = writeln!(
            out,
            "offload: {} value(s), host {} ({} B), moved {} B each way (device to host, host to device), estimated \
             exposed transfer {:.3} ms",
            offloaded.len(),
            fmt_bytes(p.host_bytes),
            p.host_bytes,
            p.host_bytes,
            p.exposed_transfer_s * 1e3
        );
        match p.optimality_gap {
            Some(0.0) => out += "budget search: optimal (gap 0 to the proven lower bound)\n",
            Some(gap) => {
                let _ = writeln!(
                    out,
                    "budget search: within {:.2} % of the optimum (gap to a proven lower bound)",
                    gap * 100.0
                );
            }
            None => {}
        }
        if !p.warnings.is_empty() {
            out += "\nwarnings:\n";
            for w in &p.warnings {
                let _ = writeln!(out, "  - {w}");
            }
        }
        let mut peaks = Vec::new();
        if let Some(b) = self.planned_peak {
            peaks.push(format!("planned {} ({b} B)", fmt_bytes(b)));
        }
        if let Some(b) = self.measured_peak {
            peaks.push(format!("measured {} ({b} B)", fmt_bytes(b)));
        }
        if let Some(b) = self.planned_host_peak {
            peaks.push(format!("host planned {} ({b} B)", fmt_bytes(b)));
        }
        if let Some(b) = self.measured_host_peak {
            peaks.push(format!("host measured {} ({b} B)", fmt_bytes(b)));
        }
        if !peaks.is_empty() {
            let _ = writeln!(out, "peak memory: {}", peaks.join(", "));
        }
        out
    }

    /// id, op, shape, dtype, region, name, location of node `i` (bytes or FLOPs go in at 4),
    /// each shortened to a cell.
    fn columns(&self, i: NodeId) -> Vec<String> {
        let n = self.graph.node(i);
        let dash = || "-".to_string();
        let cell = |s: &str| text::shorten(s, text::CELL);
        vec![
            n.id.label(),
            cell(&n.op),
            n.shape.as_ref().map_or_else(dash, |s| cell(&crate::shape::fmt_shape(s))),
            n.dtype.map_or_else(dash, |t| t.to_string()),
            n.region.map_or_else(dash, |r| self.graph.region_label(r)),
            n.name.as_deref().map_or_else(dash, cell),
            n.loc.as_deref().map_or_else(dash, cell),
        ]
    }

    /// The partition as JSON: `strategy`, `saved` (the saved values, what is held anyway apart),
    /// `held` (the inputs, parameters and forward outputs the backward reads), `recomputed`,
    /// `saved_bytes` (what is held anyway excluded), `held_bytes`, `recompute_flops`, `decisions`
    /// (`id`, `action`, `reason` code, `why` text, and `overrode`, `region`, `grad_of` or `view`
    /// where they apply), `warnings`, and the peaks when given. Ids are the document's own.
    pub fn json(&self) -> String {
        let (g, p) = (self.graph, self.partition);
        let (saved, resident) = self.kept();
        let ids = |list: &[NodeId]| {
            let items: Vec<String> = list.iter().map(|&i| json_id(&g.node(i).id)).collect();
            format!("[{}]", items.join(", "))
        };
        let mut decisions = String::new();
        for (k, d) in p.decisions.iter().enumerate() {
            if k > 0 {
                decisions += ",\n    ";
            }
            let action = match d.action {
                Action::Save => "save",
                Action::Recompute => "recompute",
                Action::Offload => "offload",
            };
            let _ = write!(
                decisions,
                "{{\"id\": {}, \"action\": \"{action}\", \"reason\": \"{}\", \"why\": {}",
                json_id(&g.node(d.node).id),
                reason_code(d.reason),
                json_string(&self.why(d))
            );
            match d.reason {
                Reason::ReadByRegion(r) | Reason::RegionBudget(r) => {
                    let _ = write!(decisions, ", \"region\": {}", g.regions[r.index()].key);
                }
                Reason::ReadByGradient(u) => {
                    let _ = write!(decisions, ", \"grad_of\": {}", json_id(&g.node(u).id));
                }
                Reason::ViewBase(v) => {
                    let _ = write!(decisions, ", \"view\": {}", json_id(&g.node(v).id));
                }
                _ => {}
            }
            if let Some(o) = d.overrode {
                let _ = write!(decisions, ", \"overrode\": \"{}\"", o.name());
            }
            if let Some(o) = d.offload {
                let _ = write!(decisions, ", \"offload\": {}", json_string(&o.describe(g)));
            }
            decisions.push('}');
        }
        let mut out = format!("{{\n  \"strategy\": {}", json_string(&p.strategy.to_string()));
        let _ = write!(out, ",\n  \"saved\": {}", ids(&saved));
        let _ = write!(out, ",\n  \"held\": {}", ids(&resident));
        let _ = write!(out, ",\n  \"offloaded\": {}", ids(&self.offloaded()));
        let _ = write!(out, ",\n  \"recomputed\": {}", ids(&p.recomputed));
        let _ = write!(out, ",\n  \"saved_bytes\": {}", p.saved_bytes);
        let _ = write!(out, ",\n  \"held_bytes\": {}", p.held_bytes);
        let _ = write!(out, ",\n  \"host_bytes\": {}", p.host_bytes);
        let _ = write!(out, ",\n  \"bytes_to_host\": {}", p.host_bytes);
        let _ = write!(out, ",\n  \"bytes_to_device\": {}", p.host_bytes);
        let _ = write!(out, ",\n  \"exposed_transfer_s\": {:e}", p.exposed_transfer_s);
        let _ = write!(out, ",\n  \"recompute_flops\": {}", p.recompute_flops);
        if let Some(gap) = p.optimality_gap {
            let _ = write!(out, ",\n  \"optimality_gap\": {gap:?}");
        }
        if decisions.is_empty() {
            out += ",\n  \"decisions\": []";
        } else {
            let _ = write!(out, ",\n  \"decisions\": [\n    {decisions}\n  ]");
        }
        let _ = write!(out, ",\n  \"warnings\": {}", crate::json::spaced(&p.warnings));
        if let Some(b) = self.planned_peak {
            let _ = write!(out, ",\n  \"planned_peak\": {b}");
        }
        if let Some(b) = self.measured_peak {
            let _ = write!(out, ",\n  \"measured_peak\": {b}");
        }
        if let Some(b) = self.planned_host_peak {
            let _ = write!(out, ",\n  \"planned_host_peak\": {b}");
        }
        if let Some(b) = self.measured_host_peak {
            let _ = write!(out, ",\n  \"measured_host_peak\": {b}");
        }
        out + "\n}\n"
    }

    /// Graphviz DOT of the graph with this partition: see [`dot`].
    pub fn dot(&self) -> String {
        dot(self.graph, Some(self.partition))
    }
}

fn json_id(id: &DocId) -> String {
    match id {
        DocId::Index(i) => i.to_string(),
        DocId::Name(s) => json_string(s),
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn table_or_nothing(header: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        "  (nothing)\n".to_string()
    } else {
        table(header, rows)
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

/// How deep DOT clusters nest; deeper regions are drawn flat inside their ancestor at this depth.
const MAX_NESTING: usize = 256;

/// Fill colours of DOT nodes.
const SAVED: &str = "#8fd18f";
const RESIDENT: &str = "#cfe3f7";
const RECOMPUTED: &str = "#f7c06b";
const OFFLOADED: &str = "#b9a3e3";

/// Graphviz DOT of a joint graph: forward nodes are boxes, backward nodes grey ellipses; with a
/// partition, saved values are filled green (resident ones light blue), offloaded ones purple
/// (dotted outline) and recomputed ones orange; regions are `subgraph cluster_r<index>` clusters, nested as the regions are. Every
/// label is escaped (backslashes, quotes, newlines, NULs) and shortened, and regions nest
/// without recursion, so any graph — 10^5 nested regions included — renders in linear output.
pub fn dot(g: &PGraph, partition: Option<&Partition>) -> String {
    let mut out = String::from("digraph remat {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n");
    if let Some(p) = partition {
        let _ = writeln!(out, "  label=\"strategy {}\";", escape(&p.strategy.to_string()));
    }
    let mut recomputed = vec![false; g.len()];
    for &i in partition.map_or(&[][..], |p| &p.recomputed) {
        recomputed[i.index()] = true;
    }
    let line = |i: usize| -> String {
        let n = &g.nodes[i];
        let mut label = format!("{} {}", n.id.label(), text::shorten(&n.op, text::CELL));
        if let Some(name) = &n.name {
            label += &format!(" {}", text::quoted(name));
        }
        let second = match (&n.shape, n.dtype) {
            (Some(s), Some(t)) => format!("{} {t}", text::shorten(&crate::shape::fmt_shape(s), text::CELL)),
            _ => format!("{} B", n.bytes),
        };
        let saved = partition.is_some_and(|p| p.saved.get(i).copied().unwrap_or(false));
        let offloaded = partition.is_some_and(|p| p.offloaded.get(i).copied().unwrap_or(false));
        let style = if n.backward {
            "shape=ellipse, color=gray50, fontcolor=gray30".to_string()
        } else if offloaded {
            format!("shape=box, style=\"filled,dotted\", fillcolor=\"{OFFLOADED}\"")
        } else if saved {
            let fill = if n.flags.resident { RESIDENT } else { SAVED };
            format!("shape=box, style=filled, fillcolor=\"{fill}\"")
        } else if recomputed[i] {
            format!("shape=box, style=\"filled,dashed\", fillcolor=\"{RECOMPUTED}\"")
        } else {
            "shape=box".to_string()
        };
        format!("n{i} [label=\"{}\\n{}\", {style}];", escape(&label), escape(&second))
    };
    let regions = g.regions.len();
    // Graphviz's parser gives up on clusters nested a few thousand deep, so regions deeper than
    // `MAX_NESTING` are drawn side by side inside their ancestor at that depth, labelled with
    // their true parent.
    let mut depth = vec![0usize; regions];
    let mut anchor: Vec<Option<usize>> = vec![None; regions];
    for (r, region) in g.regions.iter().enumerate() {
        if let Some(p) = region.parent.map(RegionId::index).filter(|&p| p < r) {
            depth[r] = depth[p] + 1;
            anchor[r] = if depth[p] < MAX_NESTING { Some(p) } else { anchor[p] };
        }
    }
    let mut children = vec![Vec::new(); regions];
    let mut members = vec![Vec::new(); regions];
    let mut top_regions = Vec::new();
    for (r, anchor) in anchor.iter().enumerate() {
        match anchor {
            Some(p) => children[*p].push(r),
            None => top_regions.push(r),
        }
    }
    for (i, n) in g.nodes.iter().enumerate() {
        match n.region.filter(|r| r.index() < regions) {
            Some(r) => members[r.index()].push(i),
            None => {
                let _ = writeln!(out, "  {}", line(i));
            }
        }
    }
    // Depth-first over the region tree with an explicit stack: `Open(r)` writes the cluster's
    // head and members and schedules its children and then its `Close`.
    enum Visit {
        Open(usize),
        Close,
    }
    let mut stack: Vec<Visit> = top_regions.into_iter().rev().map(Visit::Open).collect();
    let mut depth = 1usize;
    while let Some(visit) = stack.pop() {
        match visit {
            Visit::Open(r) => {
                // Deep nesting is indented up to a point; the structure is in the braces.
                let pad = "  ".repeat(depth.min(8));
                let mut label = g.region_label(RegionId(r as u32));
                if let Some(b) = g.regions[r].budget {
                    label += &format!(" (budget {b})");
                }
                if let Some(p) = g.regions[r].parent.filter(|p| anchor[r] != Some(p.index())) {
                    label += &format!(" (in {})", g.region_label(p));
                }
                let _ = writeln!(out, "{pad}subgraph cluster_r{r} {{");
                let _ = writeln!(out, "{pad}  label=\"{}\"; style=rounded; color=gray40;", escape(&label));
                for &i in &members[r] {
                    let _ = writeln!(out, "{pad}  {}", line(i));
                }
                stack.push(Visit::Close);
                stack.extend(children[r].iter().rev().map(|&c| Visit::Open(c)));
                depth += 1;
            }
            Visit::Close => {
                depth -= 1;
                let _ = writeln!(out, "{}}}", "  ".repeat(depth.min(8)));
            }
        }
    }
    for (i, n) in g.nodes.iter().enumerate() {
        for &x in &n.inputs {
            let style = if n.backward && !g.node(x).backward { " [style=dashed]" } else { "" };
            let _ = writeln!(out, "  n{} -> n{i}{style};", x.0);
        }
    }
    out + "}\n"
}

/// Escapes a string for a quoted DOT label: backslashes, quotes, line breaks and every other
/// control character (NUL included), so `dot` reads back exactly one label.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out += "\\\\",
            '"' => out += "\\\"",
            '\n' => out += "\\n",
            '\r' => {}
            c if c.is_control() => {
                let _ = write!(out, "\\\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Left-aligned columns, two spaces apart, indented by two.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut s = String::from(" ");
        for (k, (cell, w)) in cells.iter().zip(&width).enumerate() {
            if k + 1 == cells.len() {
                let _ = write!(s, " {cell}");
            } else {
                let _ = write!(s, " {cell:<w$} ");
            }
        }
        out += s.trim_end();
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}
