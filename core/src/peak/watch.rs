//! The plans within the limit among the choices a round's program finds on its way. The
//! program's rows are a relaxation of the peak, so its last choice may peak over the limit where
//! a costlier one it passed did not (on the 12-layer GPT at 5.3 MB, a choice at 3 547 457 FLOPs
//! that fits, before those at 2.6–3.5 MFLOPs that do not, whose repair fails). Each choice is
//! planned as HiGHS reports it ([`Watcher`]); the program stops once its bound is within the
//! gap of the best plan, the search's or one of these.

use super::repair::{scored, Scoring};
use crate::partition::{Budget, Choice, CostModel, PGraph, Partition, Strategy, Watcher};
use crate::plan::{Plan, Schedulable, Schedule};
use std::sync::{Mutex, MutexGuard, PoisonError};

pub(super) struct Watch<'a, S: ?Sized> {
    schedule: &'a Schedule<'a, S>,
    pg: &'a PGraph,
    limit: u64,
    offload: bool,
    scoring: Scoring<'a>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The cheapest plan within the limit seen since [`Watch::take`], where it costs less than
    /// `known`.
    found: Option<(Partition, Plan)>,
    /// The cost of the best plan the search held when the round began.
    known: Option<f64>,
}

impl<'a, S: Schedulable + ?Sized> Watch<'a, S> {
    pub(super) fn new(
        schedule: &'a Schedule<'a, S>,
        pg: &'a PGraph,
        limit: u64,
        offload: bool,
        model: &'a CostModel,
    ) -> Self {
        let scoring = Scoring::new(pg, offload, model);
        Watch { schedule, pg, limit, offload, scoring, state: Mutex::default() }
    }

    /// Before a round: the cost of the best plan the search holds, which a plan seen must beat.
    pub(super) fn holding(&self, cost: Option<f64>) {
        self.state().known = cost;
    }

    /// After a round: the cheapest plan within the limit it saw that beats the one held.
    pub(super) fn take(&self) -> Option<(Partition, Plan)> {
        self.state().found.take()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held left nothing half-written that matters: a plan is
        // stored whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn best_of(&self, state: &State) -> Option<f64> {
        let found = state.found.as_ref().map(|(p, _)| self.scoring.cost(p));
        match (found, state.known) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl<S: Schedulable + ?Sized> Watcher for Watch<'_, S> {
    fn found(&self, choice: &Choice) -> Option<f64> {
        let planned = scored(self.schedule, self.pg, choice, &self.scoring).ok().flatten();
        let mut state = self.state();
        if let Some((mut partition, plan)) = planned.filter(|(_, plan)| plan.predicted_peak() as u64 <= self.limit) {
            // Costed as the search's own plans (an evaluation stands for no strategy).
            partition.strategy = Strategy::Budget(Budget::Bytes(u64::MAX)).with_offload(self.offload);
            let cost = self.scoring.cost(&partition);
            if self.best_of(&state).is_none_or(|best| cost < best) {
                state.found = Some((partition, plan));
            }
        }
        self.best_of(&state)
    }

    fn best(&self) -> Option<f64> {
        self.best_of(&self.state())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::{partition_with, partition_with_rows, Extra, Term};
    use crate::pipeline::Problem;

    /// A watcher that keeps every choice it is told of and holds no plan.
    #[derive(Default)]
    struct Recording(Mutex<Vec<Choice>>);

    impl Watcher for Recording {
        fn found(&self, choice: &Choice) -> Option<f64> {
            self.0.lock().unwrap().push(choice.clone());
            None
        }

        fn best(&self) -> Option<f64> {
            None
        }
    }

    /// Through HiGHS's callback the watcher is told of the program's choices as it finds them:
    /// the last is the one the program answers (its columns read as the program reads its own).
    /// The program: the 2-layer Llama's byte-budget program, its forward values' bytes within
    /// a third of their sum (a knapsack HiGHS searches, not one presolve decides).
    #[test]
    fn the_watcher_is_told_of_the_choice_the_program_answers() {
        let text = crate::peak::llama_document();
        let problem = Problem::read(&text).expect("a joint document");
        let pg = problem.graph();
        let forward: Vec<usize> = (0..pg.len()).filter(|&i| !pg.nodes[i].backward && !pg.nodes[i].flags.view).collect();
        let total: u64 = forward.iter().map(|&i| pg.nodes[i].bytes).sum();
        let row = forward.iter().map(|&i| (Term::Saved(crate::graph::NodeId::from_index(i)), pg.nodes[i].bytes as f64));
        let recording = Recording::default();
        let extra = Extra {
            rows: vec![(row.collect(), total as f64 / 3.0)],
            seconds: 30.0,
            watch: Some(&recording),
            ..Extra::default()
        };
        let searched = partition_with_rows(pg, &extra, &CostModel::CPU, false).expect("a plan");
        let told = recording.0.into_inner().unwrap();
        let answered = searched.choice.expect("the program's choice");
        assert!(!told.is_empty(), "the watcher was told of no choice");
        assert_eq!(told.last().unwrap().at_hand, answered.at_hand);
    }

    /// A choice within the limit that costs less than the plan held is kept, and only then: the
    /// min-cut's plan of the 2-layer Llama, watched under its own peak, one byte below it, and
    /// with a cheaper plan held.
    #[test]
    fn a_choice_is_kept_where_it_fits_and_costs_less_than_the_plan_held() {
        let text = crate::peak::llama_document();
        let problem = Problem::read(&text).expect("a joint document");
        let (pg, schedule, model) = (problem.graph(), problem.schedule(), CostModel::CPU);
        let partition = partition_with(pg, Strategy::MinCut, &model).expect("the min-cut's plan");
        let peak = schedule.plan(&partition, &model).expect("a plan").predicted_peak() as u64;
        let cost = partition.recompute_flops as f64;
        assert!(cost > 0.0, "the min-cut's plan recomputes nothing: nothing to tell apart");
        let choice = super::super::repair::choice_of(&partition, pg);

        let fits = Watch::new(&schedule, pg, peak, false, &model);
        fits.holding(Some(cost + 1.0));
        assert_eq!(fits.found(&choice), Some(cost));
        assert_eq!(fits.best(), Some(cost));
        let (kept, plan) = fits.take().expect("the plan kept");
        assert_eq!((kept.recompute_flops, plan.predicted_peak() as u64), (partition.recompute_flops, peak));
        assert!(fits.take().is_none(), "taken once");

        let over = Watch::new(&schedule, pg, peak - 1, false, &model);
        assert_eq!(over.found(&choice), None);
        assert!(over.take().is_none());

        let held = Watch::new(&schedule, pg, peak, false, &model);
        held.holding(Some(cost - 1.0));
        assert_eq!(held.found(&choice), Some(cost - 1.0));
        assert!(held.take().is_none());
    }
}
