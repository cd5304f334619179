//! The memory rows of the exact peak search: at each step of the schedule, the bytes live there
//! bounded below by what is live whatever is saved plus what is live under a choice.
//!
//! Every row holds for every saved set: a plan that meets a peak meets every row, so the least
//! recompute under the rows is a proven lower bound on the least recompute of any plan within
//! the peak, and a saved set within the rows whose plan peaks within the limit is optimal.
//!
//! What the planner does ([`crate::Plan`]) that the rows read:
//! - the forward computes, in order, the ancestors of the forward outputs and of the saved
//!   values; each value is live from its step to its last read (for ever, for an output), and a
//!   saved one on into the backward;
//! - the backward computes its nodes in order; a forward value it reads is at hand from before
//!   its first reader to after its last — saved, or recomputed once and held — whatever is
//!   saved; a saved value is live from the forward until its first reader at least;
//! - a reshape may take over its input's buffer, so a reshape's own bytes are not counted at
//!   its step.
//!
//! What the rows leave out (values recomputed before their own first reader, for another's
//! recompute; saved values read only by recomputes) only makes them looser, never wrong.

use crate::error::Result;
use crate::graph::NodeId;
use crate::plan::Schedulable;

/// A 0/1 quantity a row or a link names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Var {
    /// The value (a schedule id) is saved.
    Saved(NodeId),
    /// A column of the rows' own ([`Rows::aux`]).
    Aux(usize),
}

/// One step's row: `held + Σ bytes · var ≤ peak`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    /// Bytes live at the step whatever is saved (inputs and parameters included).
    pub(crate) held: u64,
    /// What is live at the step only under a choice, with its bytes.
    pub(crate) terms: Vec<(Var, u64)>,
}

/// The rows, and what their own columns stand for.
#[derive(Debug, Default)]
pub(crate) struct Rows {
    pub(crate) rows: Vec<Row>,
    /// `(a, var)`: column `a` is at least `var`.
    pub(crate) links: Vec<(usize, Var)>,
    /// Columns of the rows' own: per forward node that not every plan computes, "computed in the
    /// forward" (at least its saved bit and each computed reader's); per value and each such
    /// reader of it, "live until that reader or later" (a suffix maximum over its readers).
    pub(crate) aux: usize,
}

/// The rows of `graph`'s schedule. The backward's rows only shrink their terms from step to step,
/// so a row whose held bytes an earlier one reaches is implied by it and left out.
pub(crate) fn memory_rows(graph: &(impl Schedulable + ?Sized)) -> Result<Rows> {
    let facts = Facts::of(graph)?;
    let mut rows = forward_rows(&facts);
    rows.rows.extend(backward_rows(&facts));
    Ok(rows)
}

/// What both passes read of the graph.
struct Facts<'g, G: ?Sized> {
    graph: &'g G,
    n_fwd: usize,
    /// Per node, whether it is a forward output.
    output: Vec<bool>,
    /// Bytes of the inputs and parameters.
    resident_bytes: u64,
}

impl<'g, G: Schedulable + ?Sized> Facts<'g, G> {
    fn of(graph: &'g G) -> Result<Self> {
        let n_fwd = graph.forward_len()?;
        let mut output = vec![false; graph.node_count()];
        for o in graph.forward_outputs() {
            output[o.index()] = true;
        }
        let mut facts = Facts { graph, n_fwd, output, resident_bytes: 0 };
        facts.resident_bytes = (0..n_fwd).filter(|&i| facts.resident(i)).map(|i| facts.bytes(i)).sum();
        Ok(facts)
    }

    fn bytes(&self, i: usize) -> u64 {
        self.graph.bytes(NodeId::from_index(i)) as u64
    }

    fn resident(&self, i: usize) -> bool {
        self.graph.is_resident(NodeId::from_index(i))
    }

    /// A forward value the rows may count as saved: computed, not held anyway.
    fn decided(&self, i: usize) -> bool {
        i < self.n_fwd && !self.resident(i) && !self.output[i]
    }

    /// The bytes step `i` adds: none for a reshape, which may take over its input's buffer.
    fn step_bytes(&self, i: usize) -> u64 {
        if self.graph.is_reshape(NodeId::from_index(i)) {
            0
        } else {
            self.bytes(i)
        }
    }
}

/// Rows at every forward step. A step every plan takes (an ancestor of the outputs) adds its
/// bytes to `held`; another is taken where the plan computes it (a column). A value is live at a
/// step when a reader every plan computes comes at or after it (held), else when it is saved or
/// a reader at or after the step is computed (a column per value and reader: the largest of the
/// readers' columns from that reader on, and the saved bit).
fn forward_rows<G: Schedulable + ?Sized>(f: &Facts<'_, G>) -> Rows {
    let (graph, n_fwd, output) = (f.graph, f.n_fwd, &f.output);
    let node = NodeId::from_index;
    let always = crate::plan::ancestors(graph, graph.forward_outputs(), n_fwd);
    let computed_step = |k: usize| !f.resident(k);
    let mut out = Rows::default();
    // "Computed" columns for the steps not every plan takes.
    let mut computed = vec![usize::MAX; n_fwd];
    for k in (0..n_fwd).filter(|&k| computed_step(k) && !always[k]) {
        computed[k] = out.aux;
        out.aux += 1;
        out.links.push((computed[k], Var::Saved(node(k))));
    }
    // Each value's last reader every plan computes, and its other readers in order.
    let mut last_always = vec![None; n_fwd];
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n_fwd];
    for k in (0..n_fwd).filter(|&k| computed_step(k)) {
        for x in graph.inputs(node(k)) {
            if always[k] {
                last_always[x.index()] = Some(k);
            } else {
                readers[x.index()].push(k);
                // A computed step computes its inputs.
                if computed[x.index()] != usize::MAX {
                    out.links.push((computed[x.index()], Var::Aux(computed[k])));
                }
            }
        }
    }
    // Per value, per reader not every plan computes: live until that reader or a later one.
    let mut until: Vec<Vec<usize>> = vec![Vec::new(); n_fwd];
    for v in (0..n_fwd).filter(|&v| computed_step(v)) {
        readers[v].dedup();
        for &u in readers[v].iter().rev() {
            let a = out.aux;
            out.aux += 1;
            out.links.push((a, Var::Aux(computed[u])));
            if let Some(&later) = until[v].last() {
                out.links.push((a, Var::Aux(later)));
            } else if f.decided(v) {
                out.links.push((a, Var::Saved(node(v))));
            }
            until[v].push(a);
        }
        until[v].reverse();
    }
    for k in (0..n_fwd).filter(|&k| computed_step(k)) {
        let mut held = f.resident_bytes;
        let mut terms = Vec::new();
        if always[k] {
            held += f.step_bytes(k);
        } else if f.step_bytes(k) > 0 {
            terms.push((Var::Aux(computed[k]), f.step_bytes(k)));
        }
        for v in (0..k).filter(|&v| computed_step(v)) {
            if output[v] || (always[v] && last_always[v].is_some_and(|l| l >= k)) {
                held += f.bytes(v);
                continue;
            }
            // The first reader at or after k that not every plan computes.
            match readers[v].iter().position(|&u| u >= k) {
                Some(j) => terms.push((Var::Aux(until[v][j]), f.bytes(v))),
                None if f.decided(v) => terms.push((Var::Saved(node(v)), f.bytes(v))),
                None => {}
            }
        }
        out.rows.push(Row { held, terms });
    }
    out
}

/// Rows at the backward's steps: each node the gradients need.
fn backward_rows<G: Schedulable + ?Sized>(f: &Facts<'_, G>) -> Vec<Row> {
    let (graph, n_fwd) = (f.graph, f.n_fwd);
    let n = graph.node_count();
    let bytes = |i: usize| f.bytes(i);
    let live = crate::plan::ancestors(graph, graph.gradients(), n);
    let steps: Vec<usize> = (n_fwd..n).filter(|&b| live[b]).collect();
    let mut kept = vec![false; n];
    for g in graph.gradients() {
        kept[g.index()] = true;
    }
    // First and last backward step reading each value.
    let (mut first, mut last) = (vec![usize::MAX; n], vec![0usize; n]);
    for &b in &steps {
        for x in graph.inputs(NodeId::from_index(b)) {
            first[x.index()] = first[x.index()].min(b);
            last[x.index()] = last[x.index()].max(b);
        }
    }
    // held[b]: outputs, the gradients so far, backward values read at or past b, forward
    // values between their first and last reader.
    let outputs: u64 = (0..n_fwd).filter(|&i| f.output[i] && !f.resident(i)).map(bytes).sum();
    let mut change = vec![0i64; n + 2];
    for &v in &steps {
        let end = if kept[v] { n } else { last[v].max(v) };
        if end > v {
            change[v + 1] += bytes(v) as i64;
            change[end + 1] -= bytes(v) as i64;
        }
    }
    for v in (0..n_fwd).filter(|&v| f.decided(v) && first[v] != usize::MAX) {
        change[first[v]] += bytes(v) as i64;
        change[last[v] + 1] -= bytes(v) as i64;
    }
    let mut carried = 0i64;
    let mut held = vec![0u64; n];
    for b in 0..n {
        carried += change[b];
        held[b] = f.resident_bytes + outputs + carried as u64 + if b >= n_fwd { f.step_bytes(b) } else { 0 };
    }
    // Keep a step's row where no earlier step's row (with more saved terms) holds as much.
    let mut rows = Vec::new();
    let mut earlier_max = None;
    for &b in &steps {
        if earlier_max.is_some_and(|m| m >= held[b]) {
            continue;
        }
        earlier_max = Some(held[b]);
        let terms = (0..n_fwd)
            .filter(|&v| f.decided(v) && first[v] != usize::MAX && first[v] > b)
            .map(|v| (Var::Saved(NodeId::from_index(v)), bytes(v)))
            .collect();
        rows.push(Row { held: held[b], terms });
    }
    rows
}
