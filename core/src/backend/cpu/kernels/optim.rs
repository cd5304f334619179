//! The optimizer update on the CPU backend's threads: the host reference's job
//! (`update::job::UpdateJob`) cut into runs of a fixed size (so the bits do not depend on
//! the thread count: every element is computed the same way whichever run holds it).

use super::split;
use crate::error::Result;
use crate::host::HostTensor;
use crate::update::{with_update_job, UpdateCall};

/// Elements per run: an AdamW element costs tens of instructions (a division and a square root
/// in f64), so a run is a few µs of work.
const RUN: usize = split::HEAVY_CHUNK;

/// [`crate::host_update`] split over the backend's threads.
pub(crate) fn update(
    call: &UpdateCall<'_>,
    param: &mut HostTensor,
    grad: &HostTensor,
    state: &mut [&mut HostTensor],
    sum_squares: Option<f64>,
) -> Result<()> {
    with_update_job(call, param, grad, state, sum_squares, |job| {
        if job.len() < 2 * RUN || split::serial() {
            job.run();
        } else {
            split::par_tasks(job.split(RUN), |run| run.run());
        }
    })
}
