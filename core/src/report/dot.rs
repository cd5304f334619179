//! The graph and a partition as Graphviz DOT.

use super::Report;
use crate::graph::RegionId;
use crate::partition::{PGraph, Partition};
use crate::text;
use std::fmt::Write as _;

impl Report<'_> {
    /// Graphviz DOT of the graph with this partition: see [`dot`].
    pub fn dot(&self) -> String {
        dot(self.graph, Some(self.partition))
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
        if let Some(name) = n.name() {
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
                let mut label = g.region_label(RegionId::from_index(r));
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
            let _ = writeln!(out, "  n{} -> n{i}{style};", x.raw());
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
