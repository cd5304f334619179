//! A partition's JSON report written while its plan is made: the report up to the plan's peaks
//! does not depend on the plan, and on large graphs laying it out takes as long as planning
//! (docs/performance.md, "Report").

use super::{Partitioned, Problem};
use crate::error::Result;
use crate::partition::{partition_with, CostModel, Strategy};
use crate::report::Report;
use std::io::Write;

impl Problem<'_> {
    /// [`Problem::partition`], with its report written to `out` as JSON
    /// ([`Report::write_json`]): byte for byte what `partition(..)?.report().write_json(out)`
    /// writes, the part before the plan's peaks laid out and written while the plan is made.
    ///
    /// The outer error is partitioning's or planning's, the inner one writing's. Planning a
    /// partition just made fails only on a bug; the JSON then ends where the peaks would start.
    pub fn partition_json(
        &self,
        strategy: Strategy,
        model: &CostModel,
        out: &mut (impl Write + Send),
    ) -> Result<(Partitioned<'_>, std::io::Result<()>)> {
        // A peak's plan comes with its partition.
        if strategy.peak().is_some() {
            let solved = self.partition(strategy, model)?;
            let written = solved.report().write_json(out);
            return Ok((solved, written));
        }
        let partition = partition_with(&self.graph, strategy, model)?;
        let head = Report::new(&self.graph, &partition);
        let (planned, head) = crate::concurrent::join(
            || {
                let schedule = self.schedule();
                let plan = schedule.plan(&partition, model)?;
                let windows = schedule.transfer_windows(&plan);
                Ok::<_, crate::error::Error>((plan, windows))
            },
            || head.json_draft().write_head(out),
        );
        let (plan, windows) = planned?;
        let solved = Partitioned { graph: &self.graph, partition, plan, windows };
        let written = head.and_then(|()| solved.report().write_json_tail(out));
        Ok((solved, written))
    }
}
