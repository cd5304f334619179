//! The exact budget search: one 0-1 program over every value the backward may reach, solved by
//! HiGHS's branch and bound.
//!
//! Per forward value `i` the backward may reach: `r_i` (reached: read by the backward, or an
//! input of a value it recomputes), `a_i` (at hand when reached: saved or offloaded; a free
//! choice for candidates, `r_i` for values kept whenever reached, 0 for the rest) and `o_i`
//! (offloaded: `a_i` for tag-fixed offloads, a free choice where the solver may offload). Rows:
//!
//! - `a_i ≤ r_i`, `o_i ≤ a_i`;
//! - `r_x ≥ r_j − a_j` for every input `x` of every value `j` that may be recomputed (a
//!   recomputed value's inputs are reached);
//! - per limit `k`: `Σ b_i (a_i − o_i) ≤ L_k` over the values whose bytes count against `k`.
//!
//! The objective is the search's own cost — recompute FLOPs, or under `BudgetOffload` recompute
//! seconds plus exposed transfer seconds — and, among plans of equal cost, the fewest device
//! bytes (a second solve with the cost bounded by the first's optimum). Both are solved to a
//! zero gap, so the answer is optimal under the cost model, and saved bytes never rise when the
//! global limit shrinks.

use super::problem::{Cost, Placement, Problem, Solved};
use highs::{HighsModelStatus, RowProblem, Sense};

/// A 0/1 quantity of the program: a constant or a binary column.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bit {
    Zero,
    One,
    Col(usize),
}

/// A linear expression over the columns, with a constant.
#[derive(Clone, Debug, Default)]
struct Expr {
    terms: Vec<(usize, f64)>,
    constant: f64,
}

impl Expr {
    /// The terms with one entry per column (HiGHS refuses a row naming a column twice), those
    /// that cancel left out.
    fn merged(&self) -> Vec<(usize, f64)> {
        let mut terms = self.terms.clone();
        terms.sort_by_key(|&(c, _)| c);
        let mut out: Vec<(usize, f64)> = Vec::with_capacity(terms.len());
        for (c, v) in terms {
            match out.last_mut() {
                Some((last, sum)) if *last == c => *sum += v,
                _ => out.push((c, v)),
            }
        }
        out.retain(|&(_, v)| v != 0.0);
        out
    }

    fn add(&mut self, bit: Bit, coef: f64) {
        match bit {
            Bit::Zero => {}
            Bit::One => self.constant += coef,
            Bit::Col(c) => self.terms.push((c, coef)),
        }
    }
}

/// `a − b` over terms sorted by column, those that cancel left out.
fn difference(a: &[(usize, f64)], b: &[(usize, f64)]) -> Vec<(usize, f64)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        let (c, v) = match (a.get(i), b.get(j)) {
            (Some(&(ca, va)), Some(&(cb, _))) if ca < cb => (ca, va),
            (Some(&(ca, va)), Some(&(cb, vb))) if ca == cb => {
                j += 1;
                (ca, va - vb)
            }
            (Some(&(ca, va)), None) => (ca, va),
            (_, Some(&(cb, vb))) => {
                j += 1;
                out.push((cb, -vb));
                continue;
            }
            (None, None) => unreachable!("the loop stops when both are done"),
        };
        i += 1;
        if v != 0.0 {
            out.push((c, v));
        }
    }
    out
}

/// The program's layout: a column per free decision, and each value's three quantities.
pub(super) struct Program {
    columns: usize,
    /// Continuous columns (of `columns`) and their upper bounds: the running sums of the
    /// caller's rows ([`Program::add_extra`]); every other column is binary.
    sums: Vec<(usize, f64)>,
    /// The continuous column of [`super::Term::Peak`], at least 0, where the caller's rows
    /// ask for the least peak ([`super::Extra::least_peak`]): then it is the objective.
    peak: Option<usize>,
    reached: Vec<Bit>,
    at_hand: Vec<Bit>,
    offloaded: Vec<Bit>,
    /// Rows `(lower, upper, expression)`: `lower ≤ expression ≤ upper`, either side optional.
    rows: Vec<(Option<f64>, Option<f64>, Expr)>,
}

/// Which limits a solve leaves out.
#[derive(Clone, Copy)]
enum Skip {
    None,
    One(usize),
    All,
}

impl Skip {
    fn keeps(self, k: usize) -> bool {
        match self {
            Skip::None => true,
            Skip::One(s) => s != k,
            Skip::All => false,
        }
    }
}

/// Why a program gave no plan.
#[derive(Debug)]
pub(super) enum Unsolved {
    /// No plan meets the limits.
    Infeasible,
    /// The solver stopped (time limit, numerical trouble) without a plan.
    Failed(String),
    /// The time ran out before a plan within the caller's cutoff was found: the bound proven on
    /// the cost ([`Partition::cost`](crate::Partition::cost)'s units), where there is one.
    NoneBelowCutoff(Option<f64>),
}

/// What a solve minimises: an expression, whether it takes integral values only (the solver
/// then stops within 0.5 of its bound), and a cutoff above which nothing is looked for.
struct Objective<'e> {
    expr: &'e Expr,
    integral: bool,
    cutoff: Option<f64>,
}

impl<'e> Objective<'e> {
    fn integral(expr: &'e Expr) -> Objective<'e> {
        Objective { expr, integral: true, cutoff: None }
    }
}

impl Program {
    pub fn new(p: &Problem<'_>) -> Program {
        let n = p.g.len();
        let mut prog = Program {
            columns: 0,
            sums: Vec::new(),
            peak: None,
            reached: vec![Bit::Zero; n],
            at_hand: vec![Bit::Zero; n],
            offloaded: vec![Bit::Zero; n],
            rows: Vec::new(),
        };
        let mut candidate = vec![false; n];
        for &c in &p.candidates {
            candidate[c.index()] = true;
        }
        for &i in &p.order {
            prog.reached[i] = if p.reads[i] { Bit::One } else { prog.column() };
            let views = p.views_keeping(i);
            prog.at_hand[i] = if candidate[i] || !views.is_empty() {
                let a = prog.column();
                // At hand only where reached, and wherever a view kept through it is reached
                // (each view reaches it) ...
                prog.at_most(a, prog.reached[i]);
                let mut any = Expr::default();
                any.add(a, 1.0);
                for &(_, v) in views {
                    prog.at_most(prog.reached[v.index()], a);
                    any.add(prog.reached[v.index()], -1.0);
                }
                // ... and, tied (no candidate), there alone.
                if !candidate[i] {
                    prog.rows.push((None, Some(0.0), any));
                }
                a
            } else if p.base[i] {
                prog.reached[i]
            } else {
                Bit::Zero
            };
            prog.offloaded[i] = if p.off.fixed[i] {
                prog.at_hand[i]
            } else if p.off.optional[i] && prog.at_hand[i] != Bit::Zero {
                let o = prog.column();
                prog.at_most(o, prog.at_hand[i]);
                o
            } else {
                Bit::Zero
            };
        }
        // A value recomputed (reached, not at hand) reaches its inputs.
        for &j in &p.order {
            if prog.at_hand[j] == prog.reached[j] {
                continue;
            }
            for &x in &p.g.node(crate::graph::NodeId::from_index(j)).inputs {
                let mut e = Expr::default();
                e.add(prog.reached[x.index()], 1.0);
                e.add(prog.reached[j], -1.0);
                e.add(prog.at_hand[j], 1.0);
                prog.rows.push((Some(0.0), None, e));
            }
        }
        if p.pairs.iter().any(|&(b, _)| !candidate[b.index()]) {
            prog.reach_exactly_where_tied(p, &candidate);
        }
        if let Some(extra) = p.extra {
            prog.add_extra(p, extra);
        }
        prog
    }

    /// Elsewhere a value may be marked reached without need, which only costs; reaching a view
    /// tied to a base keeps that base, which saves its recompute. So on every path to such a view
    /// a value is reached only where the backward reads it or a value that reads it is
    /// recomputed: `reached[x] ≤ Σ (reached[r] − at_hand[r])` over its readers `r`.
    fn reach_exactly_where_tied(&mut self, p: &Problem<'_>, candidate: &[bool]) {
        let n = p.g.len();
        // The views of tied bases (not candidates) and every value they flow into, in node
        // order (inputs first).
        let mut leads = vec![false; n];
        for &(b, v) in &p.pairs {
            leads[v.index()] |= !candidate[b.index()];
        }
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &j in p.order.iter().rev() {
            for &x in p.facts.inputs(j) {
                if leads[x.index()] {
                    leads[j] = true;
                    readers[x.index()].push(j);
                }
            }
        }
        for x in (0..n).filter(|&x| leads[x] && !p.reads[x]) {
            let mut e = Expr::default();
            e.add(self.reached[x], -1.0);
            for &r in &readers[x] {
                e.add(self.reached[r], 1.0);
                e.add(self.at_hand[r], -1.0);
            }
            self.rows.push((Some(0.0), None, e));
        }
    }

    /// A caller's rows ([`super::Extra`]) over its own columns and the program's quantities, and
    /// choices excluded (at least one candidate decided otherwise).
    fn add_extra(&mut self, p: &Problem<'_>, extra: &super::Extra<'_>) {
        let first_aux = self.columns;
        self.columns += extra.aux;
        if extra.least_peak {
            self.peak = Some(self.columns);
            self.columns += 1;
        }
        // The previous row's terms and the column holding their sum, where it has one.
        let mut previous: Option<(Vec<(usize, f64)>, usize)> = None;
        for (terms, limit) in &extra.rows {
            let mut e = Expr::default();
            for &(term, coefficient) in terms {
                match term {
                    super::Term::Saved(v) => e.add(self.at_hand[v.index()], coefficient),
                    super::Term::OnDevice(v) => {
                        e.add(self.at_hand[v.index()], coefficient);
                        e.add(self.offloaded[v.index()], -coefficient);
                    }
                    super::Term::Aux(a) => e.add(Bit::Col(first_aux + a), coefficient),
                    super::Term::Peak => {
                        debug_assert!(self.peak.is_some(), "a row names the peak the program does not minimise");
                        e.add(self.peak.map_or(Bit::Zero, Bit::Col), coefficient);
                    }
                }
            }
            previous = self.add_sum_row(e, *limit, previous.take());
        }
        // Σ |bit − chosen| ≥ 1 over every candidate's at-hand and offloaded bits.
        for choice in &extra.excluded {
            let mut e = Expr::default();
            for &c in &p.candidates {
                let c = c.index();
                for (bit, chosen) in [(self.at_hand[c], choice.at_hand[c]), (self.offloaded[c], choice.offloaded[c])] {
                    if chosen {
                        e.constant += 1.0;
                        e.add(bit, -1.0);
                    } else {
                        e.add(bit, 1.0);
                    }
                }
            }
            self.rows.push((Some(1.0), None, e));
        }
    }

    /// `e ≤ limit`, where `e` has many terms, written as a running sum: a continuous column
    /// `S = e − constant` bounded by `limit − constant`, defined from the previous row's sum
    /// where they differ in few terms (`S = S_prev + (e − e_prev)`). Consecutive memory rows of
    /// a schedule share most of what is live, so the program holds each term about once
    /// instead of once per step — the same rows, hundreds of thousands fewer nonzeros, which
    /// HiGHS's presolve and simplex otherwise spend most of their time on. Returns this row's
    /// terms and sum column, for the next.
    fn add_sum_row(
        &mut self,
        e: Expr,
        limit: f64,
        previous: Option<(Vec<(usize, f64)>, usize)>,
    ) -> Option<(Vec<(usize, f64)>, usize)> {
        /// Rows with fewer terms are written as they are.
        const FEW: usize = 8;
        let terms = e.merged();
        if terms.len() < FEW {
            self.rows.push((None, Some(limit), e));
            return None;
        }
        let sum = self.columns;
        self.columns += 1;
        self.sums.push((sum, limit - e.constant));
        let mut definition = Expr { terms: vec![(sum, 1.0)], constant: 0.0 };
        let change = previous
            .map(|(before, column)| (difference(&terms, &before), column))
            .filter(|(change, _)| change.len() + 1 < terms.len());
        match change {
            Some((change, column)) => {
                definition.terms.push((column, -1.0));
                definition.terms.extend(change.into_iter().map(|(c, v)| (c, -v)));
            }
            None => definition.terms.extend(terms.iter().map(|&(c, v)| (c, -v))),
        }
        self.rows.push((Some(0.0), Some(0.0), definition));
        Some((terms, sum))
    }

    fn column(&mut self) -> Bit {
        self.columns += 1;
        Bit::Col(self.columns - 1)
    }

    /// `x ≤ y`.
    fn at_most(&mut self, x: Bit, y: Bit) {
        let mut e = Expr::default();
        e.add(y, 1.0);
        e.add(x, -1.0);
        self.rows.push((Some(0.0), None, e));
    }

    /// The device bytes counted against limit `k`.
    fn bytes(&self, p: &Problem<'_>, k: Option<u32>) -> Expr {
        let mut e = Expr::default();
        for &i in &p.order {
            let counts = match k {
                Some(k) => p.limits_of(i).contains(&k),
                None => {
                    !p.limits_of(i).is_empty()
                        || crate::partition::classify::counts_bytes(p.g, crate::graph::NodeId::from_index(i))
                }
            };
            if counts {
                let b = p.g.nodes[i].bytes as f64;
                e.add(self.at_hand[i], b);
                e.add(self.offloaded[i], -b);
            }
        }
        e
    }

    /// The search's cost in FLOPs: recompute FLOPs, and under `BudgetOffload` exposed transfer
    /// time as the FLOPs the same seconds compute (seconds per FLOP are around 1e-11: in seconds
    /// every coefficient would sit below the solver's tolerances).
    fn cost(&self, p: &Problem<'_>) -> Expr {
        let mut e = Expr::default();
        for &i in &p.order {
            let f = p.g.nodes[i].flops as f64;
            e.add(self.reached[i], f);
            e.add(self.at_hand[i], -f);
            if p.off.choose {
                e.add(self.offloaded[i], p.off.exposed[i] / p.off.s_per_flop);
            }
        }
        e
    }

    /// Solves: the least `objective` within every limit of `p` but those `skip` leaves out,
    /// with the extra rows `extra`; `time_limit` in seconds. Returns the columns, and a proven
    /// bound on the objective where the solver stopped short of optimality.
    fn run(
        &self,
        p: &Problem<'_>,
        objective: Objective<'_>,
        skip: Skip,
        extra: &[(Option<f64>, Option<f64>, Expr)],
        time_limit: f64,
    ) -> Result<(Vec<f64>, Option<f64>), Unsolved> {
        let Objective { expr: objective, integral: integral_objective, cutoff } = objective;
        let mut pb = RowProblem::default();
        let mut cost = vec![0.0; self.columns];
        for &(c, v) in &objective.merged() {
            cost[c] += v;
        }
        let mut upper = vec![None; self.columns];
        for &(c, u) in &self.sums {
            upper[c] = Some(u);
        }
        let cols: Vec<_> = cost
            .iter()
            .zip(&upper)
            .enumerate()
            .map(|(i, (&c, u))| match u {
                Some(u) => pb.add_column(c, f64::NEG_INFINITY..=*u),
                None if self.peak == Some(i) => pb.add_column(c, 0.0..),
                None => pb.add_integer_column(c, 0.0..=1.0),
            })
            .collect();
        // The objective's constant as a column fixed at 1 (the crate passes no offset): HiGHS
        // stops at a gap relative to the whole cost, not to the cost less a constant that may
        // be most of it.
        if objective.constant != 0.0 {
            pb.add_column(objective.constant, 1.0..=1.0);
        }
        let columns = pb.num_cols();
        let limit_rows = p.limits.iter().enumerate().filter(|&(k, _)| skip.keeps(k)).map(|(k, &l)| {
            let scope = k as u32;
            (None, (l != u64::MAX).then_some(l as f64), self.bytes(p, Some(scope)))
        });
        for (lo, hi, e) in self.rows.iter().cloned().chain(limit_rows).chain(extra.iter().cloned()) {
            let terms = e.merged();
            if terms.is_empty() {
                // A row of constants: it holds or no plan does.
                let holds = lo.is_none_or(|l| e.constant >= l - 1e-9) && hi.is_none_or(|h| e.constant <= h + 1e-9);
                if holds {
                    continue;
                }
                return Err(Unsolved::Infeasible);
            }
            let factors: Vec<_> = terms.iter().map(|&(c, v)| (cols[c], v)).collect();
            let shift = |b: f64| b - e.constant;
            match (lo, hi) {
                (Some(l), Some(h)) => pb.add_row(shift(l)..=shift(h), factors),
                (Some(l), None) => pb.add_row(shift(l).., factors),
                (None, Some(h)) => pb.add_row(..=shift(h), factors),
                (None, None) => {}
            }
        }
        let gap = p.extra.map_or(0.0, |extra| extra.gap);
        let mut model = pb
            .try_optimise(Sense::Minimise)
            .map_err(|e| Unsolved::Failed(format!("HiGHS refused the program: {e:?}")))?;
        model.make_quiet();
        let options: [(&str, f64); 3] = [
            ("mip_rel_gap", gap),
            ("mip_abs_gap", if integral_objective { 0.5 } else { 1e-12 }),
            ("time_limit", time_limit),
        ];
        for (key, value) in options {
            model.try_set_option(key, value).map_err(|e| Unsolved::Failed(format!("{key}: {e:?}")))?;
        }
        for (key, value) in [("parallel", "off"), ("presolve", "on")] {
            model.try_set_option(key, value).map_err(|e| Unsolved::Failed(format!("{key}: {e:?}")))?;
        }
        model.try_set_option("threads", 1).map_err(|e| Unsolved::Failed(format!("threads: {e:?}")))?;
        if let Some(cutoff) = cutoff {
            // Nothing above it is looked for: a program with no solution at or below it is
            // infeasible.
            model
                .try_set_option("objective_bound", cutoff)
                .map_err(|e| Unsolved::Failed(format!("objective_bound: {e:?}")))?;
        }
        let to_objective = |c: f64| in_objective(p, c);
        let choice = |columns: &[f64]| {
            let (at_hand, offloaded) = self.plan(p, columns);
            super::Choice { at_hand, offloaded }
        };
        let mut watching = p
            .extra
            .and_then(|e| e.watch)
            .filter(|_| self.peak.is_none())
            .map(|watcher| super::watch::Watching::new(&choice, watcher, columns, gap, &to_objective));
        if let Some(watching) = watching.as_mut() {
            if !watching.attach(model.as_mut_ptr()) {
                return Err(Unsolved::Failed("HiGHS refused the callback".into()));
            }
        }
        let solved = model.try_solve().map_err(|e| Unsolved::Failed(format!("HiGHS failed: {e:?}")))?;
        let status = solved.status();
        let bound = solved.double_info_value(c"mip_dual_bound").ok();
        match status {
            // Optimal within a gap the caller allowed: the bound it proved, where below.
            HighsModelStatus::Optimal if gap > 0.0 => {
                let value = solved.objective_value();
                Ok((solved.get_solution().columns().to_vec(), bound.filter(|&b| b < value - 0.5)))
            }
            HighsModelStatus::Optimal | HighsModelStatus::ModelEmpty => {
                Ok((solved.get_solution().columns().to_vec(), None))
            }
            HighsModelStatus::Infeasible => Err(Unsolved::Infeasible),
            HighsModelStatus::ReachedTimeLimit
            | HighsModelStatus::ReachedIterationLimit
            | HighsModelStatus::ReachedSolutionLimit
            | HighsModelStatus::ReachedInterrupt
                if solved.primal_solution_status() == highs::HighsSolutionStatus::Feasible =>
            {
                // Stopped short: a bound the solver does not report proves nothing (not that the
                // choice is optimal).
                Ok((solved.get_solution().columns().to_vec(), Some(bound.unwrap_or(f64::NEG_INFINITY))))
            }
            HighsModelStatus::ReachedTimeLimit | HighsModelStatus::ReachedInterrupt if cutoff.is_some() => {
                Err(Unsolved::NoneBelowCutoff(bound.filter(|b| b.is_finite())))
            }
            other => Err(Unsolved::Failed(format!("HiGHS stopped: {other:?}"))),
        }
    }

    /// The 0/1 value of `bit` in a solution.
    fn value(bit: Bit, columns: &[f64]) -> bool {
        match bit {
            Bit::Zero => false,
            Bit::One => true,
            Bit::Col(c) => columns.get(c).is_some_and(|&v| v > 0.5),
        }
    }

    fn plan(&self, p: &Problem<'_>, columns: &[f64]) -> (Vec<bool>, Vec<bool>) {
        let mut at_hand = p.base.clone();
        let mut offloaded = p.off.fixed.clone();
        for &c in &p.candidates {
            at_hand[c.index()] = Self::value(self.at_hand[c.index()], columns);
        }
        for &i in &p.order {
            offloaded[i] = p.off.fixed[i] || Self::value(self.offloaded[i], columns);
        }
        (at_hand, offloaded)
    }

    /// The least cost within the limits, then the fewest device bytes at that cost.
    pub fn solve(&self, p: &Problem<'_>, time_limit: f64) -> Result<Solved, Unsolved> {
        if let Some(peak) = self.peak {
            return self.least_peak(p, peak, time_limit);
        }
        let cost = self.cost(p);
        let integral = !p.off.choose;
        // The caller's cutoff, in the objective's units.
        let cutoff = p.extra.and_then(|e| e.cutoff).map(|c| in_objective(p, c));
        let in_cost = |b: f64| in_cost(p, b);
        let (first, bound) = match self.run(p, Objective { expr: &cost, integral, cutoff }, Skip::None, &[], time_limit)
        {
            Err(Unsolved::NoneBelowCutoff(bound)) => return Err(Unsolved::NoneBelowCutoff(bound.map(in_cost))),
            other => other?,
        };
        let (at_hand, offloaded) = self.plan(p, &first);
        let mut scratch = vec![false; p.g.len()];
        let mut bytes = vec![0; p.limits.len()];
        let (flops, exposed) = p.eval_into(&at_hand, &offloaded, &mut scratch, &mut bytes);
        if !p.fits(&bytes) {
            return Err(Unsolved::Failed(format!(
                "the program's plan keeps {bytes:?} bytes against limits {:?}",
                p.limits
            )));
        }
        if bound.is_some() {
            // Stopped short: the plan as found, with the bound it proved (in the cost's units).
            let bound = bound.map(in_cost);
            return Ok(Solved { plan: Placement { at_hand, offloaded }, bound });
        }
        if p.extra.is_some_and(|extra| !extra.fewest_bytes) {
            return Ok(Solved { plan: Placement { at_hand, offloaded }, bound: None });
        }
        // Among plans of this cost, the fewest device bytes.
        let optimum = match p.cost(flops, exposed) {
            Cost::Flops(f) => f as f64 + 0.5,
            Cost::Time(t) => {
                let f = t / p.off.s_per_flop;
                f + 1e-9 * f.max(1.0)
            }
        };
        let at_cost = [(None, Some(optimum), cost)];
        let total = self.bytes(p, None);
        match self.run(p, Objective::integral(&total), Skip::None, &at_cost, time_limit) {
            Ok((second, None)) => {
                let (at_hand2, offloaded2) = self.plan(p, &second);
                let (f2, e2) = p.eval_into(&at_hand2, &offloaded2, &mut scratch, &mut bytes);
                let keeps_cost = !p.cost(f2, e2).lt(&p.cost(flops, exposed), 0, 0)
                    && !p.cost(flops, exposed).lt(&p.cost(f2, e2), 0, 0);
                if p.fits(&bytes) && keeps_cost {
                    return Ok(Solved { plan: Placement { at_hand: at_hand2, offloaded: offloaded2 }, bound: None });
                }
                Ok(Solved { plan: Placement { at_hand, offloaded }, bound: None })
            }
            _ => Ok(Solved { plan: Placement { at_hand, offloaded }, bound: None }),
        }
    }

    /// The least peak the caller's rows allow ([`super::Extra::least_peak`]): the choice, and as
    /// its bound the peak its rows count where the program is solved, or the bound proven where
    /// it stopped short — in bytes, not the cost's units.
    fn least_peak(&self, p: &Problem<'_>, peak: usize, time_limit: f64) -> Result<Solved, Unsolved> {
        let objective = Expr { terms: vec![(peak, 1.0)], constant: 0.0 };
        let (columns, bound) = self.run(p, Objective::integral(&objective), Skip::None, &[], time_limit)?;
        let (at_hand, offloaded) = self.plan(p, &columns);
        let bound = bound.unwrap_or(columns[peak]);
        Ok(Solved { plan: Placement { at_hand, offloaded }, bound: Some(bound) })
    }

    /// The fewest device bytes counted against limit `k` that any plan keeps — within the other
    /// limits when `others`, else under no limit — or `None` when no plan meets them.
    pub fn least_bytes(&self, p: &Problem<'_>, k: usize, others: bool, time_limit: f64) -> Option<u64> {
        let objective = self.bytes(p, Some(k as u32));
        let skip = if others { Skip::One(k) } else { Skip::All };
        let (columns, _) = self.run(p, Objective::integral(&objective), skip, &[], time_limit).ok()?;
        let (at_hand, offloaded) = self.plan(p, &columns);
        let mut scratch = vec![false; p.g.len()];
        let mut bytes = vec![0; p.limits.len()];
        p.eval_into(&at_hand, &offloaded, &mut scratch, &mut bytes);
        Some(bytes[k])
    }
}

/// A cost ([`super::super::Partition::cost`]'s units) in the objective's: FLOPs, or with offloads
/// the seconds as the FLOPs they compute.
fn in_objective(p: &Problem<'_>, cost: f64) -> f64 {
    if p.off.choose {
        cost / p.off.s_per_flop
    } else {
        cost
    }
}

/// An objective value in the cost's units ([`in_objective`]'s inverse).
fn in_cost(p: &Problem<'_>, objective: f64) -> f64 {
    if p.off.choose {
        objective * p.off.s_per_flop
    } else {
        objective
    }
}
