//! The memory rows of the exact peak search: at each step of the schedule, the bytes live there
//! bounded below by what is live whatever is saved plus what is live under a choice.
//!
//! Every row holds for every saved set: a plan that meets a peak meets every row, so the least
//! recompute under the rows is a proven lower bound on the least recompute of any plan within
//! the peak, and a saved set within the rows whose plan peaks within the limit is optimal.
//!
//! What the planner does ([`crate::Plan`]) that the rows read:
//! - the forward computes, in order, the ancestors of the forward outputs (released ones too)
//!   and of the saved values; each value is live from its step to its last read (for ever, for
//!   an output; to the forward's end, for a released one), and a saved one on into the backward;
//! - the backward computes its nodes in order; a forward value it reads is at hand from before
//!   its first reader to after its last — saved, or recomputed once and held — whatever is
//!   saved; a saved value is live from the forward until its first reader at least;
//! - a reshape may take over its input's buffer, so a reshape's own bytes are not counted at
//!   its step.
//!
//! What these rows leave out — values recomputed before their own first reader (for another's
//! recompute), values held after their last backward reader for a later recompute, the
//! intermediates of a recompute burst — is counted by rows made on demand where a plan breaks
//! them ([`super::lazy`]); what those leave out only makes them looser, never wrong.

use crate::error::Result;
use crate::graph::NodeId;
use crate::plan::Schedulable;

/// A 0/1 quantity a row or a link names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Var {
    /// The value (a schedule id) is saved: at hand for the backward, on the device or offloaded.
    /// In a row's terms it counts the value's bytes where it is on the device (an offloaded
    /// value is off it between the passes).
    Saved(NodeId),
    /// The value (a schedule id) is saved on the device, not offloaded.
    OnDevice(NodeId),
    /// A column of the rows' own ([`Rows::aux`]).
    Aux(usize),
    /// The constant 1.
    One,
}

/// `aux ≥ Σ all − Σ unless − (|all| − 1)`: a column that is 1 where every quantity of `all` is
/// and none of `unless`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Link {
    pub(crate) aux: usize,
    pub(crate) all: Vec<Var>,
    pub(crate) unless: Vec<Var>,
}

impl Link {
    pub(super) fn at_least(aux: usize, of: Var) -> Link {
        Link { aux, all: vec![of], unless: vec![] }
    }
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
    pub(crate) links: Vec<Link>,
    /// `Σ coefficient · quantity ≤ bound`.
    pub(crate) linear: Vec<(Vec<(Var, f64)>, f64)>,
    /// Columns of the rows' own, numbered from 0: per value a plan may recompute, "recomputed"
    /// ([`Schedule::recomputed`]); per forward node that not every plan computes, "computed in
    /// the forward" (at least its saved bit and each computed reader's); per value and each such
    /// reader of it, "live until that reader or later" (a suffix maximum over its readers); then
    /// those of the rows made on demand.
    pub(crate) aux: usize,
}

/// The rows of a graph's schedule, and what the rows made on demand ([`super::lazy`]) read.
pub(crate) struct Schedule<'g, G: ?Sized> {
    pub(super) facts: Facts<'g, G>,
    pub(super) backward: Backward,
    /// Per forward value, the forward nodes that read it and that a plan may recompute.
    pub(super) readers: Vec<Vec<usize>>,
    /// Per forward value, the earliest backward step that reads it or a value computed from it:
    /// no plan recomputes it before.
    pub(super) earliest: Vec<usize>,
    /// Per forward value, the latest backward step a plan may recompute it at: its first
    /// backward reader, or for a value the backward does not read, the latest of its readers'.
    pub(super) latest: Vec<usize>,
    /// Per forward value a plan may recompute, the column "recomputed" (see [`Schedule::recompute_links`]);
    /// `usize::MAX` for the rest.
    pub(super) recomputed: Vec<usize>,
    /// The links of [`Schedule::recomputed`], and how many columns they name.
    links: Vec<Link>,
    columns: usize,
}

impl<'g, G: Schedulable + ?Sized> Schedule<'g, G> {
    pub(crate) fn of(graph: &'g G) -> Result<Self> {
        let facts = Facts::of(graph)?;
        let backward = Backward::of(&facts);
        let mut readers = vec![Vec::new(); facts.n_fwd];
        for k in (0..facts.n_fwd).filter(|&k| facts.decided(k)) {
            for x in graph.inputs(NodeId::from_index(k)) {
                readers[x.index()].push(k);
            }
        }
        for list in &mut readers {
            list.dedup();
        }
        let mut earliest = vec![usize::MAX; facts.n_fwd];
        for v in (0..facts.n_fwd).rev().filter(|&v| facts.decided(v)) {
            earliest[v] = readers[v].iter().map(|&w| earliest[w]).fold(backward.first[v], usize::min);
        }
        let mut latest = vec![usize::MAX; facts.n_fwd];
        for v in (0..facts.n_fwd).rev().filter(|&v| facts.decided(v) && earliest[v] != usize::MAX) {
            latest[v] = if backward.first[v] != usize::MAX {
                backward.first[v]
            } else {
                readers[v].iter().map(|&w| latest[w]).filter(|&l| l != usize::MAX).max().unwrap_or(usize::MAX)
            };
        }
        let mut schedule = Schedule {
            facts,
            backward,
            readers,
            earliest,
            latest,
            recomputed: Vec::new(),
            links: Vec::new(),
            columns: 0,
        };
        schedule.recompute_links();
        Ok(schedule)
    }

    /// The columns of [`Schedule::recomputed`]: a value the backward reads is recomputed unless
    /// saved, and so is one a recomputed value reads. (Not the program's own "reached", which
    /// also counts reads by backward nodes no gradient needs.)
    fn recompute_links(&mut self) {
        let (f, bw) = (&self.facts, &self.backward);
        let mut column = vec![usize::MAX; f.n_fwd];
        for v in (0..f.n_fwd).filter(|&v| f.decided(v) && self.earliest[v] != usize::MAX) {
            column[v] = self.columns;
            self.columns += 1;
        }
        for v in (0..f.n_fwd).filter(|&v| column[v] != usize::MAX) {
            let unless = vec![Var::Saved(NodeId::from_index(v))];
            if bw.first[v] != usize::MAX {
                self.links.push(Link { aux: column[v], all: vec![Var::One], unless: unless.clone() });
            } else {
                for &w in self.readers[v].iter().filter(|&&w| column[w] != usize::MAX) {
                    self.links.push(Link { aux: column[v], all: vec![Var::Aux(column[w])], unless: unless.clone() });
                }
            }
        }
        self.recomputed = column;
    }

    /// Per value of this schedule, whether `partition` saves it (`partition` is of the graph
    /// `planned` plans, whose ids [`crate::plan::Schedule::graph_id`] maps these to).
    pub(crate) fn saved_by<S: Schedulable + ?Sized>(
        &self,
        planned: &crate::plan::Schedule<'_, S>,
        partition: &crate::partition::Partition,
    ) -> Vec<bool> {
        (0..self.facts.n_fwd).map(|v| partition.saved[planned.graph_id(NodeId::from_index(v)).index()]).collect()
    }

    /// The rows every program starts with. The backward's rows only shrink their terms from
    /// step to step, so a row whose held bytes an earlier one reaches is implied by it and left
    /// out.
    pub(crate) fn rows(&self) -> Rows {
        let mut rows = forward_rows(&self.facts, self.columns);
        rows.links.extend(self.links.iter().cloned());
        rows.rows.extend(backward_rows(&self.facts, &self.backward));
        rows
    }
}

/// What both passes read of the graph.
pub(super) struct Facts<'g, G: ?Sized> {
    pub(super) graph: &'g G,
    pub(super) n_fwd: usize,
    /// Per node, whether it is a forward output.
    output: Vec<bool>,
    /// Per node, whether it is a released output: held to the forward's end, decided past it.
    released: Vec<bool>,
    /// Bytes of the inputs and parameters.
    resident_bytes: u64,
}

impl<'g, G: Schedulable + ?Sized> Facts<'g, G> {
    fn of(graph: &'g G) -> Result<Self> {
        let n_fwd = graph.forward_len()?;
        let output = crate::id::marked(graph.node_count(), graph.forward_outputs());
        let released = crate::id::marked(graph.node_count(), graph.released_outputs());
        let mut facts = Facts { graph, n_fwd, output, released, resident_bytes: 0 };
        facts.resident_bytes = (0..n_fwd).filter(|&i| facts.resident(i)).map(|i| facts.bytes(i)).sum();
        Ok(facts)
    }

    pub(super) fn bytes(&self, i: usize) -> u64 {
        self.graph.bytes(NodeId::from_index(i)) as u64
    }

    pub(super) fn resident(&self, i: usize) -> bool {
        self.graph.is_resident(NodeId::from_index(i))
    }

    /// A forward value the rows may count as saved: computed, not held anyway.
    pub(super) fn decided(&self, i: usize) -> bool {
        i < self.n_fwd && !self.resident(i) && !self.output[i]
    }

    /// A saved term, with its bytes, for each value the rows may count as saved that `counted`
    /// picks.
    pub(super) fn saved_terms(&self, counted: impl Fn(usize) -> bool) -> Vec<(Var, u64)> {
        (0..self.n_fwd)
            .filter(|&v| self.decided(v) && counted(v))
            .map(|v| (Var::Saved(NodeId::from_index(v)), self.bytes(v)))
            .collect()
    }

    /// The bytes step `i` adds: none for a reshape, which may take over its input's buffer.
    pub(super) fn step_bytes(&self, i: usize) -> u64 {
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
fn forward_rows<G: Schedulable + ?Sized>(f: &Facts<'_, G>, first_aux: usize) -> Rows {
    let (graph, n_fwd, output) = (f.graph, f.n_fwd, &f.output);
    let node = NodeId::from_index;
    let roots: Vec<NodeId> = graph.forward_outputs().iter().chain(graph.released_outputs()).copied().collect();
    let always = crate::plan::ancestors(graph, &roots, n_fwd);
    let computed_step = |k: usize| !f.resident(k);
    let mut out = Rows { aux: first_aux, ..Rows::default() };
    // "Computed" columns for the steps not every plan takes.
    let mut computed = vec![usize::MAX; n_fwd];
    for k in (0..n_fwd).filter(|&k| computed_step(k) && !always[k]) {
        computed[k] = out.aux;
        out.aux += 1;
        out.links.push(Link::at_least(computed[k], Var::Saved(node(k))));
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
                    out.links.push(Link::at_least(computed[x.index()], Var::Aux(computed[k])));
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
            out.links.push(Link::at_least(a, Var::Aux(computed[u])));
            if let Some(&later) = until[v].last() {
                out.links.push(Link::at_least(a, Var::Aux(later)));
            } else if f.decided(v) {
                // Kept to the forward's end on the device only: an offloaded value is freed
                // after its last forward reader, as one not saved is.
                out.links.push(Link::at_least(a, Var::OnDevice(node(v))));
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
            if output[v] || f.released[v] || (always[v] && last_always[v].is_some_and(|l| l >= k)) {
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

/// What the backward's rows read: its steps and what is live at each whatever is saved.
pub(super) struct Backward {
    /// The nodes the gradients need, in order.
    pub(super) steps: Vec<usize>,
    /// Per value, its first and last backward reader (`usize::MAX` and 0 where none reads it).
    pub(super) first: Vec<usize>,
    pub(super) last: Vec<usize>,
    /// Per backward step: inputs, parameters and outputs, the gradients so far, backward values
    /// read at or past it, forward values between their first and last reader, its own bytes.
    pub(super) held: Vec<u64>,
}

impl Backward {
    fn of<G: Schedulable + ?Sized>(f: &Facts<'_, G>) -> Backward {
        let (graph, n_fwd) = (f.graph, f.n_fwd);
        let n = graph.node_count();
        let bytes = |i: usize| f.bytes(i);
        let live = crate::plan::ancestors(graph, graph.gradients(), n);
        let steps: Vec<usize> = (n_fwd..n).filter(|&b| live[b]).collect();
        let mut kept = vec![false; n];
        for g in graph.gradients() {
            kept[g.index()] = true;
        }
        let (mut first, mut last) = (vec![usize::MAX; n], vec![0usize; n]);
        for &b in &steps {
            for x in graph.inputs(NodeId::from_index(b)) {
                first[x.index()] = first[x.index()].min(b);
                last[x.index()] = last[x.index()].max(b);
            }
        }
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
        Backward { steps, first, last, held }
    }

    /// Whether forward value `v` is read by the backward after step `b`, and not at `b`.
    pub(super) fn read_after(&self, v: usize, b: usize) -> bool {
        self.first[v] != usize::MAX && self.first[v] > b
    }
}

/// Rows at the backward's steps: each node the gradients need, where no earlier step's row (with
/// more saved terms) holds as much.
fn backward_rows<G: Schedulable + ?Sized>(f: &Facts<'_, G>, bw: &Backward) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut earlier_max = None;
    for &b in &bw.steps {
        if earlier_max.is_some_and(|m| m >= bw.held[b]) {
            continue;
        }
        earlier_max = Some(bw.held[b]);
        rows.push(Row { held: bw.held[b], terms: f.saved_terms(|v| bw.read_after(v, b)) });
    }
    rows
}
