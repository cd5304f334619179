//! [`Engine`]: a communication library (MPI, NCCL) driven by a thread of its own.
//!
//! The library is set up, used and torn down on that thread alone, so the training thread never
//! blocks in it: it hands a bucket of gradients over and goes on with the backward while the
//! engine reduces it. A [`Transport`] says how to do the few blocking operations the engine
//! needs; the engine turns them into every [`Collective`] operation, with rank-order sums.

use crate::collective::{check_root, sum_in_rank_order, timeout_from_env, Collective, Pending, Span};
use crate::guard::{self, Call, Op};
use remat_core::{CollectiveKind, Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The blocking operations of one communication library, run on the engine's thread (where the
/// transport is created, used and dropped: it need not be `Send`).
pub trait Transport {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// How many ranks.
    fn world_size(&self) -> usize;
    /// Every rank's `bytes` (one length on every rank), in rank order.
    fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>>;
    /// Rank `root`'s `bytes` into every rank's `bytes`.
    fn broadcast_bytes(&mut self, bytes: &mut [u8], root: usize) -> Result<()>;
    /// Returns once every rank has called it.
    fn barrier(&mut self) -> Result<()>;
    /// Bytes this rank has sent so far.
    fn bytes_sent(&self) -> u64;

    /// Every rank's `values`, in rank order.
    fn all_gather_f32(&mut self, values: &[f32]) -> Result<Vec<f32>> {
        let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        let all = self.all_gather_bytes(&bytes)?;
        Ok(all.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }

    /// This rank's chunk of the rank-order sum of `values` (`world_size()` equal chunks). By
    /// default every rank gathers everything and sums its own chunk; a transport with an
    /// all-to-all sends each chunk only where it is summed.
    fn reduce_scatter_f32(&mut self, values: &[f32]) -> Result<Vec<f32>> {
        let world = self.world_size();
        let chunk = values.len() / world;
        let all = self.all_gather_f32(values)?;
        let rank = self.rank();
        let mine: Vec<f32> =
            (0..world).flat_map(|r| all[r * values.len() + rank * chunk..][..chunk].iter().copied()).collect();
        Ok(sum_in_rank_order(&mine, world))
    }
}

/// One operation for the engine, with where to send its result.
enum Job {
    AllReduce(Vec<f32>, Answer<Vec<f32>>),
    Broadcast(Vec<u8>, usize, Answer<Vec<u8>>),
    AllGather(Vec<u8>, Answer<Vec<u8>>),
    ReduceScatter(Vec<f32>, Answer<Vec<f32>>),
    Barrier(Answer<()>),
    /// This rank's program is ending: tell the others, then finalise the transport if they are
    /// ending too.
    Leave(Answer<()>),
}

impl Job {
    /// How this job describes itself to the other ranks before it runs.
    fn call(&self, seq: u64) -> Call {
        let (op, len, root) = match self {
            Job::AllReduce(v, _) => (Op::AllReduce, v.len(), 0),
            Job::Broadcast(b, root, _) => (Op::Broadcast, b.len(), *root),
            Job::AllGather(b, _) => (Op::AllGather, b.len(), 0),
            Job::ReduceScatter(v, _) => (Op::ReduceScatter, v.len(), 0),
            Job::Barrier(_) => (Op::Barrier, 0, 0),
            Job::Leave(_) => (Op::Leave, 0, 0),
        };
        Call { op, len: len as u64, root: root as u64, seq }
    }

    /// Answers the job with `error` instead of running it.
    fn refuse(self, error: Error) {
        // A rank that stopped waiting has dropped its receiver: nothing to tell it then.
        match self {
            Job::AllReduce(_, a) | Job::ReduceScatter(_, a) => drop(a.send(Err(error))),
            Job::Broadcast(_, _, a) | Job::AllGather(_, a) => drop(a.send(Err(error))),
            Job::Barrier(a) | Job::Leave(a) => drop(a.send(Err(error))),
        }
    }
}

type Answer<T> = Sender<Result<(T, Span)>>;

/// The collectives of a job, run by an engine thread over a [`Transport`]. Dropping it lets the
/// engine finish its queue and drop the transport (MPI is finalised then).
pub struct Engine {
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    rank: usize,
    size: usize,
    sent: Arc<AtomicU64>,
    timeout: Duration,
    started: u64,
    stuck: Arc<AtomicBool>,
    left: bool,
    name: &'static str,
}

impl Engine {
    /// Starts an engine thread named `name` whose transport `make` creates there (an error from
    /// `make` is this call's error).
    pub fn start<T: Transport>(
        name: &'static str,
        make: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<Engine> {
        let timeout = timeout_from_env()?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, started) = mpsc::channel::<Result<(usize, usize)>>();
        let sent = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&sent);
        let thread = std::thread::Builder::new()
            .name(format!("remat-{name}"))
            .spawn(move || {
                let transport = match make() {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let _ = ready.send(Ok((transport.rank(), transport.world_size())));
                serve(transport, queue, &counter);
            })
            .map_err(|e| Error::Collective {
                kind: CollectiveKind::Start,
                message: format!("cannot start the {name} engine thread: {e}"),
                source: Some(Box::new(e)),
            })?;
        let (rank, size) = started.recv().map_err(|_| {
            Error::collective(CollectiveKind::Start, format!("the {name} engine stopped while starting"))
        })??;
        let stuck = Arc::new(AtomicBool::new(false));
        Ok(Engine {
            jobs: Some(jobs),
            thread: Some(thread),
            rank,
            size,
            sent,
            timeout,
            started: 0,
            stuck,
            left: false,
            name,
        })
    }

    fn submit<T>(&mut self, what: &str, job: impl FnOnce(Answer<T>) -> Job) -> Result<Pending<T>> {
        self.started += 1;
        let (answer, result) = mpsc::channel();
        let label = format!("rank {}: {what} (collective #{})", self.rank, self.started);
        let stopped =
            || Error::collective(CollectiveKind::Stopped, format!("{label}: the {} engine stopped", self.name));
        self.jobs.as_ref().ok_or_else(stopped)?.send(job(answer)).map_err(|_| stopped())?;
        Ok(Pending::new(result, label, self.timeout).marking_stuck(Arc::clone(&self.stuck)))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Telling the others is what ends a job whose other ranks still wait in a collective:
        // they stop at once naming this rank, rather than after the timeout. The outcome is
        // theirs to report (this rank's program has its own error, or none, to print).
        let _ = self.leave();
        self.jobs.take(); // the engine finishes its queue
        if self.stuck.load(Ordering::Relaxed) {
            // A collective timed out: the engine may never return from it, so it is not waited
            // for (nor the transport torn down); the process is ending with that error anyway.
            return;
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Collective for Engine {
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
        if !values.len().is_multiple_of(self.size) {
            return Err(Error::config(
                "values",
                format!(
                    "reduce-scatter of {} values over {} ranks: the length must divide evenly",
                    values.len(),
                    self.size
                ),
            ));
        }
        let what = format!("reduce-scatter of {} values", values.len());
        self.submit(&what, |a| Job::ReduceScatter(values, a))?.wait()
    }

    fn barrier(&mut self) -> Result<()> {
        self.submit("barrier", Job::Barrier)?.wait()
    }

    /// Tells the other ranks this one is leaving; when they all are, MPI (or NCCL) is finalised
    /// here. Once only: later calls, and collectives after it, are refused.
    fn leave(&mut self) -> Result<()> {
        if self.left || self.stuck.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.left = true;
        let result = self.submit("leaving the job", Job::Leave)?.wait();
        self.jobs.take();
        result
    }

    fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// Runs the jobs of the queue in order, each after the ranks have agreed on it. After a
/// disagreement nothing more is exchanged (the other ranks are elsewhere): every later job is
/// refused, and the transport is not finalised (that would wait for ranks that will not come).
fn serve<T: Transport>(mut transport: T, queue: Receiver<Job>, counter: &AtomicU64) {
    let mut broken: Option<String> = None;
    for (seq, job) in (1u64..).zip(queue) {
        if let Some(why) = &broken {
            job.refuse(Error::collective(
                CollectiveKind::Stopped,
                format!("not started: an earlier collective failed ({why})"),
            ));
            continue;
        }
        let call = job.call(seq);
        let agreed = transport.all_gather_bytes(&call.encode()).and_then(|all| guard::compare(&all));
        counter.store(transport.bytes_sent(), Ordering::Relaxed);
        match (agreed, job) {
            (Err(e), job) => {
                broken = Some(e.to_string());
                job.refuse(e);
            }
            (Ok(()), Job::Leave(answer)) => {
                // Every rank is leaving: finalise (drop the transport) before answering, so that
                // the rank may exit as soon as it hears back.
                drop(transport);
                let _ = answer.send(Ok(((), Span { start: Instant::now(), end: Instant::now() })));
                return;
            }
            (Ok(()), job) => {
                run(&mut transport, job);
                counter.store(transport.bytes_sent(), Ordering::Relaxed);
            }
        }
    }
    if broken.is_some() {
        std::mem::forget(transport);
    }
}

/// Runs one job on the engine thread and answers it.
fn run<T: Transport>(transport: &mut T, job: Job) {
    let start = Instant::now();
    let span = || Span { start, end: Instant::now() };
    match job {
        Job::AllReduce(values, answer) => {
            let result = all_reduce(transport, values);
            let _ = answer.send(result.map(|v| (v, span())));
        }
        Job::ReduceScatter(values, answer) => {
            let _ = answer.send(transport.reduce_scatter_f32(&values).map(|v| (v, span())));
        }
        Job::Broadcast(mut bytes, root, answer) => {
            let result = transport.broadcast_bytes(&mut bytes, root);
            let _ = answer.send(result.map(|()| (bytes, span())));
        }
        Job::AllGather(bytes, answer) => {
            let _ = answer.send(transport.all_gather_bytes(&bytes).map(|v| (v, span())));
        }
        Job::Barrier(answer) => {
            let _ = answer.send(transport.barrier().map(|()| ((), span())));
        }
        Job::Leave(answer) => {
            let _ = answer.send(Ok(((), span())));
        }
    }
}

/// The rank-order sum on every rank: each rank sums one chunk (reduce-scatter), then the sums are
/// gathered. Lengths that do not divide by the world size are padded with zeros.
fn all_reduce<T: Transport>(transport: &mut T, values: Vec<f32>) -> Result<Vec<f32>> {
    let n = values.len();
    let size = transport.world_size();
    let mut padded = values;
    padded.resize(n.div_ceil(size) * size, 0.0);
    let mine = transport.reduce_scatter_f32(&padded)?;
    let mut all = transport.all_gather_f32(&mine)?;
    all.truncate(n);
    Ok(all)
}
