//! [`Mpi`]: the collectives over Open MPI (the `mpi` crate), driven by an [`Engine`] thread.
//!
//! MPI is initialised, used and finalised on the engine's thread (`MPI_THREAD_FUNNELED` is all it
//! needs). The engine waits on non-blocking collectives with short sleeps instead of MPI's busy
//! polling: with as many processes as cores, a spinning wait takes the core the backward runs on.

use crate::collective::sum_in_rank_order;
use crate::engine::{Engine, Transport};
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use remat_core::{CollectiveKind, Error, Result};
use std::time::Duration;

/// The collectives of an MPI job (`mpirun -np N program`): rank and world size from
/// `MPI_COMM_WORLD`.
pub struct Mpi;

impl Mpi {
    /// Starts MPI on an engine thread. An error when MPI cannot start (or was started already in
    /// this process). Dropping the engine finalises MPI.
    pub fn init() -> Result<Engine> {
        Engine::start("mpi", || {
            let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled).ok_or_else(|| {
                Error::collective(CollectiveKind::Start, "MPI could not be initialised (already initialised?)")
            })?;
            Ok(MpiTransport { world: universe.world(), _universe: universe, sent: 0 })
        })
    }
}

/// `MPI_COMM_WORLD`, and the universe that finalises MPI when dropped (after the communicator:
/// fields drop in order).
struct MpiTransport {
    world: SimpleCommunicator,
    _universe: Universe,
    sent: u64,
}

impl MpiTransport {
    fn others(&self) -> u64 {
        self.world.size() as u64 - 1
    }
}

impl Transport for MpiTransport {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn world_size(&self) -> usize {
        self.world.size() as usize
    }

    fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>> {
        let mut all = vec![0u8; bytes.len() * self.world_size()];
        mpi::request::scope(|scope| wait_idly(self.world.immediate_all_gather_into(scope, bytes, &mut all[..])));
        self.sent += bytes.len() as u64 * self.others();
        Ok(all)
    }

    fn broadcast_bytes(&mut self, bytes: &mut [u8], root: usize) -> Result<()> {
        let root_process = self.world.process_at_rank(root as i32);
        mpi::request::scope(|scope| wait_idly(root_process.immediate_broadcast_into(scope, bytes)));
        if self.rank() == root {
            self.sent += bytes.len() as u64 * self.others();
        }
        Ok(())
    }

    fn barrier(&mut self) -> Result<()> {
        wait_idly(self.world.immediate_barrier());
        Ok(())
    }

    fn bytes_sent(&self) -> u64 {
        self.sent
    }

    fn all_gather_f32(&mut self, values: &[f32]) -> Result<Vec<f32>> {
        let mut all = vec![0f32; values.len() * self.world_size()];
        mpi::request::scope(|scope| wait_idly(self.world.immediate_all_gather_into(scope, values, &mut all[..])));
        self.sent += values.len() as u64 * 4 * self.others();
        Ok(all)
    }

    /// Chunk `j` of every rank goes to rank `j` (all-to-all), which sums them in rank order.
    fn reduce_scatter_f32(&mut self, values: &[f32]) -> Result<Vec<f32>> {
        let size = self.world_size();
        let chunk = values.len() / size;
        let mut received = vec![0f32; chunk * size];
        mpi::request::scope(|scope| wait_idly(self.world.immediate_all_to_all_into(scope, values, &mut received[..])));
        self.sent += chunk as u64 * 4 * self.others();
        Ok(sum_in_rank_order(&received, size))
    }
}

/// Waits for `request`, polling with sleeps that back off from 20 µs to 1 ms (MPI's blocking
/// calls busy-poll).
fn wait_idly<'a, R: ?Sized, S: mpi::request::Scope<'a>>(request: mpi::request::Request<'a, R, S>) {
    let mut request = request;
    let mut pause = Duration::from_micros(20);
    loop {
        match request.test() {
            Ok(_) => return,
            Err(pending) => request = pending,
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}
