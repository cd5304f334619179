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

use crate::partition::{Action, Decision, PGraph, Partition, Reason};
use serde_json::json;
use std::fmt::Write as _;

/// A partition of a joint graph, ready to print.
#[derive(Clone, Copy, Debug)]
pub struct Report<'a> {
    graph: &'a PGraph,
    partition: &'a Partition,
    planned_peak: Option<u64>,
    measured_peak: Option<u64>,
}

impl<'a> Report<'a> {
    /// A report of `partition`, which was computed over `graph`.
    pub fn new(graph: &'a PGraph, partition: &'a Partition) -> Self {
        Report { graph, partition, planned_peak: None, measured_peak: None }
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
    fn decision(&self, i: u32) -> Option<&'a Decision> {
        let d = &self.partition.decisions;
        d.binary_search_by_key(&i, |d| d.node).ok().map(|k| &d[k])
    }

    /// Why a decision was taken, with region labels and the Prefer tag it went against.
    fn why(&self, d: &Decision) -> String {
        let mut why = d.reason.to_string();
        if let Reason::Boundary(r) | Reason::RegionBudget(r) = d.reason {
            why += &format!(" ({})", self.graph.region_label(r));
        }
        if let Some(p) = d.overrode {
            why += &format!(" (overrode {p})");
        }
        why
    }

    /// Whether a saved value counts against budgets (inputs, parameters and constants do not).
    fn counted(&self, i: u32) -> bool {
        let n = &self.graph.nodes[i as usize];
        !(n.flags.resident || n.inputs.is_empty() || self.decision(i).is_some_and(|d| d.reason == Reason::Resident))
    }

    /// The table: saved values with shape, dtype, bytes, location and reason; recomputed ops with
    /// FLOPs; totals; warnings; peaks.
    pub fn text(&self) -> String {
        let (g, p) = (self.graph, self.partition);
        let mut out = String::new();
        let saved: Vec<u32> =
            (0..g.len() as u32).filter(|&i| p.saved.get(i as usize).copied().unwrap_or(false)).collect();
        let _ = writeln!(
            out,
            "partition ({}): {} value(s) saved, {} op(s) recomputed",
            p.strategy,
            saved.len(),
            p.recomputed.len()
        );
        let header = ["id", "op", "shape", "dtype", "bytes", "region", "name", "location", "why"];
        let rows: Vec<Vec<String>> = saved
            .iter()
            .map(|&i| {
                let mut row = self.columns(i);
                let size = fmt_bytes(g.nodes[i as usize].bytes);
                row.insert(4, if self.counted(i) { size } else { format!("({size})") });
                row.push(self.decision(i).map_or_else(String::new, |d| self.why(d)));
                row
            })
            .collect();
        out += "\nsaved for the backward (bytes in parentheses are resident and not counted):\n";
        out += &table(&header, &rows);
        let header = ["id", "op", "shape", "dtype", "flops", "region", "name", "location", "why"];
        let rows: Vec<Vec<String>> = p
            .recomputed
            .iter()
            .map(|&i| {
                let mut row = self.columns(i);
                row.insert(4, g.nodes[i as usize].flops.to_string());
                row.push(self.decision(i).map_or_else(String::new, |d| self.why(d)));
                row
            })
            .collect();
        out += "\nrecomputed in the backward:\n";
        out += &if rows.is_empty() { "  (nothing)\n".to_string() } else { table(&header, &rows) };
        let resident: u64 = saved.iter().filter(|&&i| !self.counted(i)).map(|&i| g.nodes[i as usize].bytes).sum();
        let _ = writeln!(
            out,
            "\ntotals: saved {} ({} B; inputs, parameters and constants excluded), resident {}, recompute {} FLOPs",
            fmt_bytes(p.saved_bytes),
            p.saved_bytes,
            fmt_bytes(resident),
            p.recompute_flops
        );
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
        if !peaks.is_empty() {
            let _ = writeln!(out, "peak memory: {}", peaks.join(", "));
        }
        out
    }

    /// id, op, shape, dtype, region, name, location of node `i` (bytes or FLOPs go in at 4).
    fn columns(&self, i: u32) -> Vec<String> {
        let n = &self.graph.nodes[i as usize];
        let dash = || "-".to_string();
        vec![
            format!("%{i}"),
            n.op.clone(),
            n.shape.as_ref().map_or_else(dash, |s| format!("{s:?}")),
            n.dtype.map_or_else(dash, |t| t.to_string()),
            n.region.map_or_else(dash, |r| self.graph.region_label(r)),
            n.name.clone().unwrap_or_else(dash),
            n.loc.clone().unwrap_or_else(dash),
        ]
    }

    /// The partition as JSON: `strategy`, `saved` (every forward value kept, residents
    /// included), `recomputed`, `saved_bytes` (residents and constants excluded),
    /// `recompute_flops`, `decisions` (`id`, `action`, `reason` code, `why` text, and `overrode`,
    /// `region` or `view` where they apply), `warnings`, and the peaks when given.
    pub fn json(&self) -> String {
        let p = self.partition;
        let saved: Vec<u32> = (0..p.saved.len() as u32).filter(|&i| p.saved[i as usize]).collect();
        let decisions: Vec<String> = p
            .decisions
            .iter()
            .map(|d| {
                let mut v = json!({
                    "id": d.node,
                    "action": match d.action { Action::Save => "save", Action::Recompute => "recompute" },
                    "reason": reason_code(d.reason),
                    "why": self.why(d),
                });
                match d.reason {
                    Reason::Boundary(r) | Reason::RegionBudget(r) => v["region"] = json!(r),
                    Reason::ViewBase(view) => v["view"] = json!(view),
                    _ => {}
                }
                if let Some(o) = d.overrode {
                    v["overrode"] = json!(o.name());
                }
                crate::json::spaced(&v)
            })
            .collect();
        let mut out = format!("{{\n  \"strategy\": {}", crate::json::spaced(&p.strategy.to_string()));
        let _ = write!(out, ",\n  \"saved\": {}", crate::json::spaced(&saved));
        let _ = write!(out, ",\n  \"recomputed\": {}", crate::json::spaced(&p.recomputed));
        let _ = write!(out, ",\n  \"saved_bytes\": {}", p.saved_bytes);
        let _ = write!(out, ",\n  \"recompute_flops\": {}", p.recompute_flops);
        if decisions.is_empty() {
            out += ",\n  \"decisions\": []";
        } else {
            let _ = write!(out, ",\n  \"decisions\": [\n    {}\n  ]", decisions.join(",\n    "));
        }
        let _ = write!(out, ",\n  \"warnings\": {}", crate::json::spaced(&p.warnings));
        if let Some(b) = self.planned_peak {
            let _ = write!(out, ",\n  \"planned_peak\": {b}");
        }
        if let Some(b) = self.measured_peak {
            let _ = write!(out, ",\n  \"measured_peak\": {b}");
        }
        out + "\n}\n"
    }

    /// Graphviz DOT of the graph with this partition: see [`dot`].
    pub fn dot(&self) -> String {
        dot(self.graph, Some(self.partition))
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
        Reason::MustSave => "must_save",
        Reason::Boundary(_) => "boundary",
        Reason::ViewBase(_) => "view_base",
        Reason::PreferSave => "prefer_save",
        Reason::Untagged => "untagged",
        Reason::ComputeIntensive => "compute_intensive",
        Reason::MinCut => "min_cut",
        Reason::Budget => "budget",
        Reason::RegionBudget(_) => "region_budget",
        Reason::View => "view",
        Reason::Constant => "constant",
        Reason::MustRecompute => "must_recompute",
        Reason::PreferRecompute => "prefer_recompute",
    }
}

/// Fill colours of DOT nodes.
const SAVED: &str = "#8fd18f";
const RESIDENT: &str = "#cfe3f7";
const RECOMPUTED: &str = "#f7c06b";

/// Graphviz DOT of a joint graph: forward nodes are boxes, backward nodes grey ellipses; with a
/// partition, saved values are filled green (resident ones light blue) and recomputed ones
/// orange; regions are `subgraph cluster_r<id>` clusters, nested as the regions are.
pub fn dot(g: &PGraph, partition: Option<&Partition>) -> String {
    let mut out = String::from("digraph remat {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n");
    if let Some(p) = partition {
        let _ = writeln!(out, "  label=\"strategy {}\";", escape(&p.strategy.to_string()));
    }
    let recomputed: Vec<bool> = {
        let mut r = vec![false; g.len()];
        for &i in partition.map_or(&[][..], |p| &p.recomputed) {
            r[i as usize] = true;
        }
        r
    };
    let line = |i: usize| -> String {
        let n = &g.nodes[i];
        let mut label = format!("%{i} {}", n.op);
        if let Some(name) = &n.name {
            label += &format!(" \"{name}\"");
        }
        match (&n.shape, n.dtype) {
            (Some(s), Some(t)) => label += &format!("\\n{s:?} {t}"),
            _ => label += &format!("\\n{} B", n.bytes),
        }
        let saved = partition.is_some_and(|p| p.saved.get(i).copied().unwrap_or(false));
        let style = if n.backward {
            "shape=ellipse, color=gray50, fontcolor=gray30".to_string()
        } else if saved {
            let fill = if n.flags.resident { RESIDENT } else { SAVED };
            format!("shape=box, style=filled, fillcolor=\"{fill}\"")
        } else if recomputed[i] {
            format!("shape=box, style=\"filled,dashed\", fillcolor=\"{RECOMPUTED}\"")
        } else {
            "shape=box".to_string()
        };
        format!("n{i} [label=\"{}\", {style}];", escape(&label))
    };
    // Regions: children per region, nodes per region.
    let mut children = vec![Vec::new(); g.regions.len()];
    let mut members = vec![Vec::new(); g.regions.len()];
    let mut top_regions = Vec::new();
    for (r, region) in g.regions.iter().enumerate() {
        match region.parent.filter(|&p| (p as usize) < g.regions.len()) {
            Some(p) => children[p as usize].push(r),
            None => top_regions.push(r),
        }
    }
    for (i, n) in g.nodes.iter().enumerate() {
        match n.region.filter(|&r| (r as usize) < g.regions.len()) {
            Some(r) => members[r as usize].push(i),
            None => {
                let _ = writeln!(out, "  {}", line(i));
            }
        }
    }
    fn cluster(
        out: &mut String,
        g: &PGraph,
        r: usize,
        depth: usize,
        children: &[Vec<usize>],
        members: &[Vec<usize>],
        line: &dyn Fn(usize) -> String,
    ) {
        let pad = "  ".repeat(depth);
        let mut label = g.region_label(r as u32);
        if let Some(b) = g.regions[r].budget {
            label += &format!(" (budget {b})");
        }
        let _ = writeln!(out, "{pad}subgraph cluster_r{r} {{");
        let _ = writeln!(out, "{pad}  label=\"{}\"; style=rounded; color=gray40;", escape(&label));
        for &i in &members[r] {
            let _ = writeln!(out, "{pad}  {}", line(i));
        }
        for &c in &children[r] {
            cluster(out, g, c, depth + 1, children, members, line);
        }
        let _ = writeln!(out, "{pad}}}");
    }
    for r in top_regions {
        cluster(&mut out, g, r, 1, &children, &members, &line);
    }
    for (i, n) in g.nodes.iter().enumerate() {
        for &x in &n.inputs {
            let style = if n.backward && !g.nodes[x as usize].backward { " [style=dashed]" } else { "" };
            let _ = writeln!(out, "  n{x} -> n{i}{style};");
        }
    }
    out + "}\n"
}

/// Escapes the quotes of a DOT label (our line breaks are already `\n`).
fn escape(s: &str) -> String {
    s.replace('"', "\\\"")
}

/// `512 B`, `1.5 KiB`, `3.0 MiB`, `2.0 GiB`.
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
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
