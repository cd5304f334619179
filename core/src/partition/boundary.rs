//! The region boundary rule — **whoever reads it keeps it** — stated and implemented once.
//!
//! A region instance replays its own ops in the backward, so it keeps what it reads from
//! outside; code outside replays nothing, so it keeps what its own gradients read. Precisely, a
//! forward value `v` is a *boundary value* (saved in every strategy whenever the backward needs
//! it, never traded away by a budget) when
//!
//! - (a) a forward node inside a region instance `S` reads `v`, and `v` was produced outside `S`
//!   (untagged code, a sibling, the parent or a child instance); or
//! - (b) a backward node that computes part of the gradient of forward node `u` (its `grad_of`)
//!   reads `v`, and `u` lies in a different innermost instance than `v` (or is untagged while `v`
//!   is in a region, or the reverse).
//!
//! A region's outputs are not kept for being outputs. A view that is a boundary value is kept
//! through its base (the classification in `partition`). Backward nodes without `grad_of` (graphs from
//! other frameworks) force nothing by (b).

use super::PGraph;
use crate::graph::{NodeId, RegionId};

/// Why a value is a boundary value: the first reader that makes it one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    /// (a) Read by a forward node of this region instance, which recomputes from it.
    Region(RegionId),
    /// (b) Read by the gradient of this forward node, which lies elsewhere.
    Gradient(NodeId),
}

/// For each node, whether (and why) it is a boundary value. Backward nodes are never marked.
pub fn boundary_values(g: &PGraph) -> Vec<Option<Boundary>> {
    let mut marks = vec![None; g.len()];
    for n in &g.nodes {
        let reason = if n.backward {
            n.grad_of.map(|u| (g.node(u).region, Boundary::Gradient(u)))
        } else {
            n.region.map(|s| (Some(s), Boundary::Region(s)))
        };
        let Some((reader_region, reason)) = reason else { continue };
        for &v in &n.inputs {
            let value = g.node(v);
            if value.backward || value.region == reader_region {
                continue;
            }
            marks[v.index()].get_or_insert(reason);
        }
    }
    marks
}
