//! Rows of the exact peak search made on demand: where a plan the program chose peaks over the
//! limit, the rows it breaks that count what recomputes bring to hand, which would need columns
//! per value and step if made for every step.
//!
//! Two kinds, both holding for every saved set (see [`super::rows`] for the planner's rules):
//! - **at a backward step** `b`: a value the backward reads after `b` is at hand at `b` where a
//!   value recomputed by `b` reads it and it is not saved (recomputed early, then held); and a
//!   value is held at `b` after its last backward reader (or, saved, not read by it) where a
//!   reader of it is recomputed after `b`'s burst (a column "brought by `b`" per value, bounded
//!   above by what the plan does);
//! - **at a recompute**: a value a plan can recompute at one step only (its earliest and latest
//!   possible steps agree) is recomputed there, after what is live across the step's burst and
//!   with its inputs and the values recomputed for it that the backward reads from that step on.
//!
//! Each is checked against the plan first ([`Schedule::broken`]), with the least values its
//! columns take under that plan, so a row is added only where it cuts the plan's saved set off.

use super::rows::{Link, Row, Rows, Schedule, Var};
use crate::graph::NodeId;
use crate::plan::Schedulable;

/// A row made where a plan breaks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Lazy {
    /// At a backward step, with the values recomputed before their own first reader.
    Step(usize),
    /// At the recompute of a forward value whose step is fixed.
    Recompute(usize),
}

/// What a saved set puts at hand, per backward step.
struct Chosen {
    /// Per forward value not saved, the step the backward first has it at hand (`usize::MAX`
    /// where it never does).
    brought: Vec<usize>,
    /// Per step: bytes of saved values first read after it.
    saved_after: Vec<u64>,
    /// Per step: bytes of saved values first read at it.
    saved_at: Vec<u64>,
    /// Per step: bytes of values recomputed by it and first read after it.
    early: Vec<u64>,
    /// Per step: bytes held after their last backward reader (or, saved, not read by it) for a
    /// recompute after its burst.
    kept: Vec<u64>,
}

impl<G: Schedulable + ?Sized> Schedule<'_, G> {
    /// The rows the plan of `saved` (per forward value, whether the plan keeps it) breaks under
    /// `limit`, the most over first.
    pub(crate) fn broken(&self, saved: &[bool], limit: u64) -> Vec<Lazy> {
        let chosen = self.chosen(saved);
        let bw = &self.backward;
        let mut over = Vec::new();
        for &b in &bw.steps {
            let total = bw.held[b] + chosen.saved_after[b] + chosen.early[b] + chosen.kept[b];
            if total > limit {
                over.push((total, Lazy::Step(b)));
            }
        }
        for w in (0..self.facts.n_fwd).filter(|&w| self.fixed(w) && !saved[w] && chosen.brought[w] != usize::MAX) {
            let b = self.earliest[w];
            let cone: u64 = self.cone(w, Some(saved)).into_iter().map(|(y, counted)| self.cone_bytes(y, counted)).sum();
            let before: u64 = self
                .brought_before(w, &self.cone(w, None), saved, &chosen)
                .into_iter()
                .map(|v| self.facts.step_bytes(v))
                .sum();
            let mut total =
                self.across(b) + chosen.saved_at[b] + chosen.saved_after[b] + chosen.kept[b] + cone + before;
            for x in self.held_for(w) {
                if self.kept_span(x, saved, &chosen.brought).is_some_and(|(from, to)| from <= b && b <= to) {
                    total -= self.facts.step_bytes(x);
                }
                if self.backward.first[x] != usize::MAX || saved[x] {
                    total += self.facts.step_bytes(x);
                }
            }
            if total > limit {
                over.push((total, Lazy::Recompute(w)));
            }
        }
        over.sort_by(|x, y| y.cmp(x));
        over.into_iter().map(|(_, row)| row).collect()
    }

    /// Row `which`, made where the plan of `saved` breaks it, its columns numbered from `aux`.
    pub(crate) fn lazy_row(&self, which: Lazy, saved: &[bool], aux: usize) -> Rows {
        match which {
            Lazy::Step(b) => self.step_row(b, aux),
            Lazy::Recompute(w) => self.recompute_row(w, saved, aux),
        }
    }

    /// The values the plan of `saved` brings to hand before the burst that recomputes `w` (a
    /// value a plan recomputes at one step only) and the backward first reads after it, but
    /// those of `w`'s cone (`cone`, [`Schedule::cone`] under no saved set): at hand across the
    /// whole burst, held to their own first reader.
    fn brought_before(&self, w: usize, cone: &[(usize, bool)], saved: &[bool], chosen: &Chosen) -> Vec<usize> {
        let b = self.earliest[w];
        (0..self.facts.n_fwd)
            .filter(|&v| !saved[v] && chosen.brought[v] < b && self.backward.read_after(v, b))
            .filter(|&v| self.facts.step_bytes(v) > 0 && !cone.iter().any(|&(y, _)| y == v))
            .collect()
    }

    fn chosen(&self, saved: &[bool]) -> Chosen {
        let (f, bw) = (&self.facts, &self.backward);
        let n = f.graph.node_count();
        // A value not saved is at hand from its first reader, or earlier, where a value
        // recomputed before it reads it.
        let mut brought = vec![usize::MAX; f.n_fwd];
        for v in (0..f.n_fwd).rev().filter(|&v| f.decided(v) && !saved[v]) {
            brought[v] = self.readers[v].iter().map(|&w| brought[w]).fold(bw.first[v], usize::min);
        }
        let (mut saved_after, mut saved_at) = (vec![0i64; n + 2], vec![0u64; n + 1]);
        let mut early = vec![0i64; n + 2];
        let add = |over: &mut Vec<i64>, from: usize, to: usize, bytes: u64| {
            if from <= to {
                over[from] += bytes as i64;
                over[to + 1] -= bytes as i64;
            }
        };
        for v in (0..f.n_fwd).filter(|&v| f.decided(v) && bw.first[v] != usize::MAX) {
            if saved[v] {
                add(&mut saved_after, 0, bw.first[v] - 1, f.bytes(v));
                saved_at[bw.first[v]] += f.bytes(v);
            } else if brought[v] < bw.first[v] {
                add(&mut early, brought[v], bw.first[v] - 1, f.step_bytes(v));
            }
        }
        let mut kept = vec![0i64; n + 2];
        for v in (0..f.n_fwd).filter(|&v| f.decided(v) && f.step_bytes(v) > 0) {
            if let Some((from, to)) = self.kept_span(v, saved, &brought) {
                add(&mut kept, from, to, f.step_bytes(v));
            }
        }
        let sums = |change: Vec<i64>| -> Vec<u64> {
            let mut carried = 0i64;
            change[..=n]
                .iter()
                .map(|c| {
                    carried += c;
                    carried as u64
                })
                .collect()
        };
        Chosen { brought, saved_after: sums(saved_after), saved_at, early: sums(early), kept: sums(kept) }
    }

    /// The backward steps at which value `v` is held for a recompute after its burst under
    /// `saved` (inclusive): after its last backward reader (or from the backward's start, for a
    /// saved value the backward does not read) up to the last step a reader is recomputed at.
    fn kept_span(&self, v: usize, saved: &[bool], brought: &[usize]) -> Option<(usize, usize)> {
        let bw = &self.backward;
        let read = bw.first[v] != usize::MAX;
        if !read && !saved[v] {
            return None;
        }
        let until = self.readers[v]
            .iter()
            .map(|&w| if saved[w] { usize::MAX } else { brought[w] })
            .filter(|&t| t != usize::MAX)
            .max()?;
        let from = if read { bw.last[v] + 1 } else { self.facts.n_fwd };
        (until > from).then_some((from, until - 1))
    }

    /// The inputs of `w` held for its recompute alone at its step `b`: read by the backward
    /// before `b` only, or not at all.
    fn held_for(&self, w: usize) -> Vec<usize> {
        let (f, bw) = (&self.facts, &self.backward);
        let b = self.earliest[w];
        let mut inputs: Vec<usize> = f
            .graph
            .inputs(NodeId::from_index(w))
            .iter()
            .map(|x| x.index())
            .filter(|&x| f.decided(x) && f.step_bytes(x) > 0 && (bw.first[x] == usize::MAX || bw.last[x] < b))
            .collect();
        inputs.sort_unstable();
        inputs.dedup();
        inputs
    }

    /// Whether a plan that recomputes forward value `w` does so at one step only.
    fn fixed(&self, w: usize) -> bool {
        self.facts.decided(w) && self.earliest[w] != usize::MAX && self.earliest[w] == self.latest[w]
    }

    /// Bytes live across the burst before backward step `b` whatever is saved: those of its row
    /// but its own and the forward values it is the first to read (which the burst may bring).
    fn across(&self, b: usize) -> u64 {
        let (f, bw) = (&self.facts, &self.backward);
        let first_here: u64 = (0..f.n_fwd).filter(|&v| f.decided(v) && bw.first[v] == b).map(|v| f.bytes(v)).sum();
        bw.held[b] - f.step_bytes(b) - first_here
    }

    /// The values a recompute of `w` at its step brings to hand with it: `w` and, through values
    /// not saved (under `saved`, where given), the forward values it is computed from that no
    /// backward step before reads. Each with whether its bytes count at that moment: `w`, its
    /// inputs, and those the backward reads from that step on.
    fn cone(&self, w: usize, saved: Option<&[bool]>) -> Vec<(usize, bool)> {
        let (f, bw) = (&self.facts, &self.backward);
        let b = self.earliest[w];
        let mut seen = vec![false; f.n_fwd];
        let mut stack = vec![w];
        seen[w] = true;
        let mut cone = Vec::new();
        while let Some(y) = stack.pop() {
            let input_of_w = f.graph.inputs(NodeId::from_index(w)).iter().any(|x| x.index() == y);
            let counted = y == w || input_of_w || bw.first[y] != usize::MAX;
            cone.push((y, counted));
            for x in f.graph.inputs(NodeId::from_index(y)) {
                let x = x.index();
                let open = x < f.n_fwd && f.decided(x) && bw.first[x] >= b && !saved.is_some_and(|s| s[x]);
                if open && !seen[x] {
                    seen[x] = true;
                    stack.push(x);
                }
            }
        }
        cone
    }

    fn cone_bytes(&self, y: usize, counted: bool) -> u64 {
        if counted {
            self.facts.step_bytes(y)
        } else {
            0
        }
    }

    /// The row at backward step `b` with the values recomputes bring to hand before their own
    /// first reader ([`Schedule::early_columns`] by `b`).
    fn step_row(&self, b: usize, aux: usize) -> Rows {
        let (f, bw) = (&self.facts, &self.backward);
        let mut out = Rows { aux, ..Rows::default() };
        let mut terms = self.facts.saved_terms(|v| bw.read_after(v, b));
        let early = self.early_columns(b, b, None, &mut out);
        terms.extend(early.into_iter().map(|(v, column)| (Var::Aux(column), f.step_bytes(v))));
        let kept = self.kept_columns(b, &mut out);
        terms.extend(kept.into_iter().map(|(v, column)| (Var::Aux(column), f.step_bytes(v))));
        out.rows.push(Row { held: bw.held[b], terms });
        out
    }

    /// Columns for the values a recompute brings to hand by backward step `by` (after its burst)
    /// that the backward first reads after step `after` (among `only`, where given): a column
    /// per value on such a chain ("at hand by `by`"): a value the backward reads by `by` is at
    /// hand unless it is saved; another, where a value at hand by `by` reads it, unless it is
    /// saved. Returns the columns of the values counted, with their values.
    fn early_columns(&self, by: usize, after: usize, only: Option<&[usize]>, out: &mut Rows) -> Vec<(usize, usize)> {
        let (f, bw) = (&self.facts, &self.backward);
        let read_by = |v: usize| bw.first[v] <= by;
        let early =
            |v: usize| bw.read_after(v, after) && f.step_bytes(v) > 0 && only.is_none_or(|only| only.contains(&v));
        // Values from which a chain of readers reaches one the backward reads by `by`, and among
        // them those a value counted reaches.
        let mut reaches = vec![false; f.n_fwd];
        for v in (0..f.n_fwd).rev().filter(|&v| f.decided(v)) {
            reaches[v] = read_by(v) || self.readers[v].iter().any(|&w| reaches[w]);
        }
        let mut column = vec![usize::MAX; f.n_fwd];
        for v in (0..f.n_fwd).filter(|&v| reaches[v]) {
            let has_column = |x: &NodeId| column.get(x.index()).is_some_and(|&c| c != usize::MAX);
            if early(v) || f.graph.inputs(NodeId::from_index(v)).iter().any(has_column) {
                column[v] = out.aux;
                out.aux += 1;
            }
        }
        let mut counted = Vec::new();
        for v in (0..f.n_fwd).filter(|&v| column[v] != usize::MAX) {
            let unless = vec![saved(v)];
            if read_by(v) {
                out.links.push(Link { aux: column[v], all: vec![Var::One], unless: unless.clone() });
            } else {
                for &w in self.readers[v].iter().filter(|&&w| column[w] != usize::MAX) {
                    out.links.push(Link { aux: column[v], all: vec![Var::Aux(column[w])], unless: unless.clone() });
                }
            }
            if early(v) {
                counted.push((v, column[v]));
            }
        }
        counted
    }

    /// Columns for the values held at step `b` for a recompute after its burst: per forward
    /// value, "brought by `b`", at most what the plan does (not where saved; only where the
    /// backward reads it by `b` or a value brought by `b` reads it — the program gains nothing
    /// by setting it lower); per held value, at least 1 where a reader is recomputed and not
    /// brought by `b`, and the value is at hand (read by the backward before `b`, or saved).
    fn kept_columns(&self, b: usize, out: &mut Rows) -> Vec<(usize, usize)> {
        let (f, bw) = (&self.facts, &self.backward);
        // The values held at `b` for a later recompute, and the readers whose recompute holds them.
        let mut held = Vec::new();
        for v in (0..f.n_fwd).filter(|&v| f.decided(v) && f.step_bytes(v) > 0) {
            let read = bw.first[v] != usize::MAX;
            if read && bw.last[v] >= b {
                continue;
            }
            let readers: Vec<usize> = self.readers[v]
                .iter()
                .copied()
                .filter(|&w| self.recomputed[w] != usize::MAX && bw.first[w] > b)
                .collect();
            if !readers.is_empty() {
                held.push((v, readers));
            }
        }
        // "Brought by `b`" only for those readers and what bounds theirs: a value first read after
        // `b` is brought by it at most where a reader is.
        let mut by_b = vec![usize::MAX; f.n_fwd];
        let mut stack: Vec<usize> = held.iter().flat_map(|(_, readers)| readers.iter().copied()).collect();
        while let Some(y) = stack.pop() {
            if by_b[y] != usize::MAX {
                continue;
            }
            by_b[y] = out.aux;
            out.aux += 1;
            if bw.first[y] > b {
                stack.extend(self.readers[y].iter().copied().filter(|&x| self.recomputed[x] != usize::MAX));
            }
        }
        for y in (0..f.n_fwd).filter(|&y| by_b[y] != usize::MAX) {
            out.linear.push((vec![(Var::Aux(by_b[y]), 1.0), (saved(y), 1.0)], 1.0));
            if bw.first[y] > b {
                let mut terms = vec![(Var::Aux(by_b[y]), 1.0)];
                terms.extend(
                    self.readers[y].iter().filter(|&&x| by_b[x] != usize::MAX).map(|&x| (Var::Aux(by_b[x]), -1.0)),
                );
                out.linear.push((terms, 0.0));
            }
        }
        let mut columns = Vec::new();
        for (v, readers) in held {
            let read = bw.first[v] != usize::MAX;
            let column = out.aux;
            out.aux += 1;
            for w in readers {
                let mut all = vec![Var::Aux(self.recomputed[w])];
                if !read {
                    // Held from the backward's start where kept on the device; an offloaded
                    // value is fetched later, at a step the rows do not fix.
                    all.push(Var::OnDevice(NodeId::from_index(v)));
                }
                out.links.push(Link { aux: column, all, unless: vec![Var::Aux(by_b[w])] });
            }
            columns.push((v, column));
        }
        columns
    }

    /// The row at the recompute of `w` (at its one step `b`): what is live across `b`'s burst,
    /// saved values first read at `b` or after, and `w`'s cone — a column per value of it, "brought
    /// with `w`": `w` where it is recomputed, an input of a value
    /// brought with `w` unless it is saved.
    fn recompute_row(&self, w: usize, plan_saved: &[bool], aux: usize) -> Rows {
        let b = self.earliest[w];
        let cone = self.cone(w, None);
        let mut column = vec![usize::MAX; self.facts.n_fwd];
        let mut out = Rows { aux, ..Rows::default() };
        for &(y, _) in &cone {
            column[y] = out.aux;
            out.aux += 1;
        }
        out.links.push(Link::at_least(column[w], Var::Aux(self.recomputed[w])));
        let mut terms = self.facts.saved_terms(|v| self.backward.first[v] >= b && self.backward.first[v] != usize::MAX);
        for &(y, counted) in &cone {
            for x in self.facts.graph.inputs(NodeId::from_index(y)) {
                if let Some(&c) = column.get(x.index()).filter(|&&c| c != usize::MAX) {
                    out.links.push(Link { aux: c, all: vec![Var::Aux(column[y])], unless: vec![saved(x.index())] });
                }
            }
            if self.cone_bytes(y, counted) > 0 {
                terms.push((Var::Aux(column[y]), self.cone_bytes(y, counted)));
            }
        }
        // Values brought by an earlier burst and first read after `b` are at hand across the whole
        // burst: those the plan that broke the row brings (a column per value on every value's
        // chain would make the row as large as the program at 64 layers).
        let brought = self.brought_before(w, &cone, plan_saved, &self.chosen(plan_saved));
        let early = self.early_columns(b - 1, b, Some(&brought), &mut out);
        terms.extend(early.into_iter().map(|(v, column)| (Var::Aux(column), self.facts.step_bytes(v))));
        // An input read by the backward before `b` only is held for this recompute (a kept
        // column may count it too: the larger of both); one it does not read, where saved.
        let kept = self.kept_columns(b, &mut out);
        let held_for = self.held_for(w);
        for &x in &held_for {
            let c = out.aux;
            out.aux += 1;
            let mut all = vec![Var::Aux(column[w])];
            if self.backward.first[x] == usize::MAX {
                all.push(saved(x));
            }
            out.links.push(Link { aux: c, all, unless: vec![] });
            if let Some(&(_, k)) = kept.iter().find(|&&(v, _)| v == x) {
                out.links.push(Link::at_least(c, Var::Aux(k)));
            }
            terms.push((Var::Aux(c), self.facts.step_bytes(x)));
        }
        let step_bytes = |v: usize| self.facts.step_bytes(v);
        terms
            .extend(kept.into_iter().filter(|(v, _)| !held_for.contains(v)).map(|(v, k)| (Var::Aux(k), step_bytes(v))));
        out.rows.push(Row { held: self.across(b), terms });
        out
    }
}

fn saved(v: usize) -> Var {
    Var::Saved(NodeId::from_index(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::{evaluate, CostModel, PGraph};
    use crate::pipeline::Problem;
    use crate::plan::Schedule as Planned;

    /// Every row holds for every plan: under a saved set, no row made on demand, and no row the
    /// programs start with (its columns at the least values its links allow), counts more than
    /// the plan's own peak (the planner's walk, not the rows, says what is live). Random saved
    /// sets of the 2-layer Llama in docs/peak, at densities from a tenth to nine tenths.
    #[test]
    fn no_row_counts_more_than_the_plan_holds() {
        let text = crate::peak::llama_document();
        let problem = Problem::read(&text).expect("a joint document");
        let planned = problem.schedule();
        let checked = match &planned {
            Planned::InOrder(g) => check(&Schedule::of(*g).expect("rows"), &planned, problem.graph()),
            Planned::ForwardFirst(f) => check(&Schedule::of(f).expect("rows"), &planned, problem.graph()),
        };
        assert!(checked > 100, "only {checked} saved sets could be planned");
    }

    /// Each row's count under `saved` (per value, whether saved, none offloaded) with its
    /// columns at the least values the links allow: what the program counts for that saved set.
    fn least_totals(rows: &Rows, saved: &[bool]) -> Vec<u64> {
        let mut aux = vec![0u8; rows.aux];
        let value = |var: &Var, aux: &[u8]| -> i64 {
            match *var {
                Var::Saved(v) | Var::OnDevice(v) => i64::from(saved[v.index()]),
                Var::Aux(a) => i64::from(aux[a]),
                Var::One => 1,
            }
        };
        loop {
            let mut changed = false;
            for link in &rows.links {
                let all: i64 = link.all.iter().map(|v| value(v, &aux)).sum();
                let unless: i64 = link.unless.iter().map(|v| value(v, &aux)).sum();
                if all - unless - (link.all.len() as i64 - 1) >= 1 && aux[link.aux] == 0 {
                    aux[link.aux] = 1;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        rows.rows
            .iter()
            .map(|row| row.held + row.terms.iter().map(|(v, b)| value(v, &aux) as u64 * b).sum::<u64>())
            .collect()
    }

    /// The saved sets checked.
    fn check<G: Schedulable + ?Sized, S: Schedulable + ?Sized>(
        rows: &Schedule<'_, G>,
        schedule: &Planned<'_, S>,
        pg: &PGraph,
    ) -> usize {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let forward: Vec<NodeId> = (0..pg.len()).filter(|&i| !pg.nodes[i].backward).map(NodeId::from_index).collect();
        let mut checked = 0;
        for round in 0..300 {
            let density = 1 + round % 9;
            let ids: Vec<NodeId> = forward.iter().copied().filter(|_| next() % 10 < density).collect();
            let evaluation = evaluate(pg, &ids).expect("an evaluation");
            if !evaluation.broken.is_empty() {
                continue;
            }
            let plan = schedule.plan(&evaluation.partition, &CostModel::CPU).expect("a plan");
            let saved = rows.saved_by(schedule, &evaluation.partition);
            let peak = plan.predicted_peak() as u64;
            assert_eq!(rows.broken(&saved, peak), vec![], "round {round}: rows over the plan's peak {peak}");
            for (i, total) in least_totals(&rows.rows(), &saved).into_iter().enumerate() {
                assert!(
                    total <= peak,
                    "round {round}: the first rows' row {i} counts {total} against a peak of {peak}"
                );
            }
            checked += 1;
        }
        checked
    }
}
