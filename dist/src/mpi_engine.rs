//! [`Mpi`]: the collectives over Open MPI (the `mpi` crate), run by one engine thread.
//!
//! MPI is initialised, used and finalised on that thread alone (`MPI_THREAD_FUNNELED` is all it
//! needs), so the training thread never blocks in MPI: it hands a bucket of gradients to the
//! engine and goes on with the backward while the engine reduces it.

use crate::collective::{check_root, sum_in_rank_order, timeout_from_env, Collective, Pending, Span};
use mpi::traits::*;
use remat_core::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Answer<T> = Sender<Result<(T, Span)>>;

/// One operation for the engine, with where to send its result.
enum Job {
    AllReduce(Vec<f32>, Answer<Vec<f32>>),
    Broadcast(Vec<u8>, usize, Answer<Vec<u8>>),
    AllGather(Vec<u8>, Answer<Vec<u8>>),
    ReduceScatter(Vec<f32>, Answer<Vec<f32>>),
    Barrier(Answer<()>),
}

/// The collectives of an MPI job (`mpirun -np N program`): rank and world size from
/// `MPI_COMM_WORLD`. Created once per process; dropping it finalises MPI.
pub struct Mpi {
    jobs: Option<Sender<Job>>,
    engine: Option<JoinHandle<()>>,
    rank: usize,
    size: usize,
    sent: Arc<AtomicU64>,
    timeout: Duration,
    started: u64,
    stuck: Arc<AtomicBool>,
}

impl Mpi {
    /// Starts MPI on an engine thread. An error when MPI cannot start (or was started already in
    /// this process).
    pub fn init() -> Result<Mpi> {
        let timeout = timeout_from_env()?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, started) = mpsc::channel::<Result<(usize, usize)>>();
        let sent = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&sent);
        let engine = std::thread::Builder::new()
            .name("remat-mpi".into())
            .spawn(move || {
                let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Funneled) else {
                    let _ =
                        ready.send(Err(Error::Invalid("MPI could not be initialised (already initialised?)".into())));
                    return;
                };
                let world = universe.world();
                let _ = ready.send(Ok((world.rank() as usize, world.size() as usize)));
                for job in queue {
                    run(&world, job, &counter);
                }
                drop(universe); // MPI_Finalize, on the thread that initialised MPI
            })
            .map_err(|e| Error::Invalid(format!("cannot start the MPI engine thread: {e}")))?;
        let (rank, size) =
            started.recv().map_err(|_| Error::Invalid("the MPI engine stopped while starting".into()))??;
        let stuck = Arc::new(AtomicBool::new(false));
        Ok(Mpi { jobs: Some(jobs), engine: Some(engine), rank, size, sent, timeout, started: 0, stuck })
    }

    fn submit<T>(&mut self, what: &str, job: impl FnOnce(Answer<T>) -> Job) -> Result<Pending<T>> {
        self.started += 1;
        let (answer, result) = mpsc::channel();
        let name = format!("rank {}: {what} (collective #{})", self.rank, self.started);
        self.jobs
            .as_ref()
            .ok_or_else(|| Error::Invalid("the MPI engine is shut down".into()))?
            .send(job(answer))
            .map_err(|_| Error::Invalid(format!("{name}: the MPI engine stopped")))?;
        Ok(Pending::new(result, name, self.timeout).marking_stuck(Arc::clone(&self.stuck)))
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        self.jobs.take(); // the engine finishes its queue, then finalises MPI
        if self.stuck.load(Ordering::Relaxed) {
            // A collective timed out: the engine may never return from it, so it is not waited
            // for (and MPI not finalised); the process is ending with that error anyway.
            return;
        }
        if let Some(engine) = self.engine.take() {
            let _ = engine.join();
        }
    }
}

impl Collective for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.size
    }

    fn start_all_reduce(&mut self, values: Vec<f32>) -> Result<Pending<Vec<f32>>> {
        let what = format!("all-reduce of {} values", values.len());
        self.submit(&what, |a| Job::AllReduce(values, a))
    }

    fn broadcast(&mut self, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        check_root(root, self.size)?;
        let what = format!("broadcast of {} bytes from rank {root}", bytes.len());
        self.submit(&what, |a| Job::Broadcast(bytes, root, a))?.wait()
    }

    fn all_gather(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let what = format!("all-gather of {} bytes", bytes.len());
        self.submit(&what, |a| Job::AllGather(bytes, a))?.wait()
    }

    fn reduce_scatter(&mut self, values: Vec<f32>) -> Result<Vec<f32>> {
        if values.len() % self.size != 0 {
            return Err(Error::Invalid(format!(
                "reduce-scatter of {} values over {} ranks: the length must divide evenly",
                values.len(),
                self.size
            )));
        }
        let what = format!("reduce-scatter of {} values", values.len());
        self.submit(&what, |a| Job::ReduceScatter(values, a))?.wait()
    }

    fn barrier(&mut self) -> Result<()> {
        self.submit("barrier", Job::Barrier)?.wait()
    }

    fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// Runs one job on the engine thread and answers it. MPI's own errors abort the job (Open MPI's
/// default handler), which `mpirun` reports on every rank.
fn run(world: &mpi::topology::SimpleCommunicator, job: Job, sent: &AtomicU64) {
    let start = Instant::now();
    let span = || Span { start, end: Instant::now() };
    let size = world.size() as usize;
    match job {
        Job::AllReduce(values, answer) => {
            let n = values.len();
            let chunk = n.div_ceil(size);
            let mut padded = values;
            padded.resize(chunk * size, 0.0);
            let mine = scatter_sum(world, &padded, chunk, sent);
            let mut all = gather_f32(world, &mine, sent);
            all.truncate(n);
            let _ = answer.send(Ok((all, span())));
        }
        Job::ReduceScatter(values, answer) => {
            let chunk = values.len() / size;
            let mine = scatter_sum(world, &values, chunk, sent);
            let _ = answer.send(Ok((mine, span())));
        }
        Job::Broadcast(mut bytes, root, answer) => {
            let rank = world.rank() as usize;
            world.process_at_rank(root as i32).broadcast_into(&mut bytes[..]);
            if rank == root {
                sent.fetch_add((bytes.len() * (size - 1)) as u64, Ordering::Relaxed);
            }
            let _ = answer.send(Ok((bytes, span())));
        }
        Job::AllGather(bytes, answer) => {
            let mut all = vec![0u8; bytes.len() * size];
            world.all_gather_into(&bytes[..], &mut all[..]);
            sent.fetch_add((bytes.len() * (size - 1)) as u64, Ordering::Relaxed);
            let _ = answer.send(Ok((all, span())));
        }
        Job::Barrier(answer) => {
            world.barrier();
            let _ = answer.send(Ok(((), span())));
        }
    }
}

/// This rank's chunk of the rank-order sum: chunk `j` of every rank goes to rank `j`
/// (all-to-all), which adds them up in rank order.
fn scatter_sum(world: &mpi::topology::SimpleCommunicator, values: &[f32], chunk: usize, sent: &AtomicU64) -> Vec<f32> {
    let size = world.size() as usize;
    let mut received = vec![0f32; chunk * size];
    mpi::request::scope(|scope| {
        wait_idly(world.immediate_all_to_all_into(scope, values, &mut received[..]));
    });
    sent.fetch_add((chunk * (size - 1) * 4) as u64, Ordering::Relaxed);
    sum_in_rank_order(&received, size)
}

fn gather_f32(world: &mpi::topology::SimpleCommunicator, mine: &[f32], sent: &AtomicU64) -> Vec<f32> {
    let size = world.size() as usize;
    let mut all = vec![0f32; mine.len() * size];
    mpi::request::scope(|scope| {
        wait_idly(world.immediate_all_gather_into(scope, mine, &mut all[..]));
    });
    sent.fetch_add((mine.len() * (size - 1) * 4) as u64, Ordering::Relaxed);
    all
}

/// Waits for `request` without spinning: a blocking MPI call busy-polls, which on a machine
/// with as many processes as cores takes a core from the backward this reduction is meant to
/// overlap. Polls back off from 20 µs to 1 ms while the other ranks are still computing.
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
