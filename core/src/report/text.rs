//! The report as a text table.

use super::{fmt_bytes, Report};
use crate::graph::NodeId;
use crate::text;
use std::fmt::Write as _;

impl Report<'_> {
    /// The table: saved values with shape, dtype, bytes, location and reason; residents the
    /// backward reads; recomputed ops with FLOPs; totals; warnings; peaks. Long cells are
    /// shortened (the JSON keeps them whole).
    pub fn text(&self) -> String {
        let (g, p) = (self.graph, self.partition);
        let mut out = String::new();
        let (saved, resident) = self.kept();
        let (kind, label) = self.heading();
        let _ = writeln!(
            out,
            "{kind} ({label}): {} value(s) saved, {} resident, {} op(s) recomputed",
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
        let peak = p.strategy.peak().is_some();
        let search = if peak { "peak search" } else { "budget search" };
        match p.optimality_gap {
            Some(0.0) => {
                let _ = writeln!(out, "{search}: optimal (gap 0 to the proven lower bound)");
            }
            Some(gap) => {
                // The peak search stops within its gap of its bound unless its time runs out first.
                let more = if peak && gap > crate::peak::STOPPING_GAP {
                    "; more search time may narrow it (--search-seconds, search_seconds=, Problem::with_search_time)"
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "{search}: within {:.2} % of the optimum (gap to a proven lower bound{more})",
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
            n.name().map_or_else(dash, cell),
            n.loc().map_or_else(dash, cell),
        ]
    }
}

fn table_or_nothing(header: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        "  (nothing)\n".to_string()
    } else {
        table(header, rows)
    }
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
