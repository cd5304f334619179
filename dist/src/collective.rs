//! The collective interface: what data-parallel training needs from a communication engine.

use remat_core::{CollectiveKind, Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a rank waits for a collective before it gives up: a rank that died, or ranks that
/// run different steps, end the job with an error instead of a hang. `REMAT_DIST_TIMEOUT`
/// (seconds) overrides it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The environment variable that sets [`DEFAULT_TIMEOUT`] in seconds.
pub const TIMEOUT_VAR: &str = "REMAT_DIST_TIMEOUT";

/// The longest [`TIMEOUT_VAR`] accepted, in seconds (about 31 years): beyond it a deadline
/// would overflow the clock's arithmetic.
pub const MAX_TIMEOUT_SECONDS: f64 = 1e9;

/// The shortest [`TIMEOUT_VAR`] accepted, in seconds: anything shorter rounds to no wait at all.
pub const MIN_TIMEOUT_SECONDS: f64 = 1e-3;

/// The collective timeout: `REMAT_DIST_TIMEOUT` seconds when set, else [`DEFAULT_TIMEOUT`]; a
/// value [`parse_timeout`] refuses is an error naming it.
pub fn timeout_from_env() -> Result<Duration> {
    match std::env::var_os(TIMEOUT_VAR) {
        None => Ok(DEFAULT_TIMEOUT),
        Some(text) => parse_timeout(&text.to_string_lossy()),
    }
}

/// `text` as a timeout: a number of seconds from [`MIN_TIMEOUT_SECONDS`] to
/// [`MAX_TIMEOUT_SECONDS`] (`1.5`, `120`, `1e3`); anything else (`0`, `-1`, `abc`, `NaN`, `inf`,
/// `1e20`) is a one-line error naming the value.
pub fn parse_timeout(text: &str) -> Result<Duration> {
    let refuse = |why: &str| {
        Error::config(TIMEOUT_VAR, format!(
            "{TIMEOUT_VAR}={text:?}: expected a positive number of seconds, from {MIN_TIMEOUT_SECONDS} to {MAX_TIMEOUT_SECONDS:e} ({why})"
        ))
    };
    let seconds = text.trim().parse::<f64>().map_err(|_| refuse("not a number"))?;
    if !seconds.is_finite() {
        return Err(refuse("not finite"));
    }
    if seconds < MIN_TIMEOUT_SECONDS {
        return Err(refuse(if seconds > 0.0 { "too short" } else { "not positive" }));
    }
    if seconds > MAX_TIMEOUT_SECONDS {
        return Err(refuse("too long"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| refuse("too long"))
}

/// When a collective ran on its engine: from the moment the engine started it to the moment it
/// finished (for the overlap a data-parallel step reports).
#[derive(Clone, Copy, Debug)]
pub struct Span {
    /// The engine started the operation.
    pub start: Instant,
    /// The engine finished it.
    pub end: Instant,
}

/// A collective started and not yet waited for.
pub struct Pending<T> {
    answer: Receiver<Result<(T, Span)>>,
    what: String,
    timeout: Duration,
    stuck: Option<Arc<AtomicBool>>,
}

impl<T> Pending<T> {
    /// A pending operation whose engine answers on `answer`.
    pub fn new(answer: Receiver<Result<(T, Span)>>, what: impl Into<String>, timeout: Duration) -> Self {
        Pending { answer, what: what.into(), timeout, stuck: None }
    }

    /// Sets `stuck` when the wait times out (the engine is then left to the process's end rather
    /// than joined: it may never come back from the collective).
    pub fn marking_stuck(mut self, stuck: Arc<AtomicBool>) -> Self {
        self.stuck = Some(stuck);
        self
    }

    /// An operation already done (a single process's collectives).
    pub fn ready(value: T) -> Self {
        let (tx, answer) = mpsc::channel();
        let now = Instant::now();
        let _ = tx.send(Ok((value, Span { start: now, end: now })));
        Pending { answer, what: String::new(), timeout: DEFAULT_TIMEOUT, stuck: None }
    }

    /// Waits for the result and when the engine ran it; an error when it failed or did not
    /// finish within the timeout (naming the operation).
    pub fn wait_timed(self) -> Result<(T, Span)> {
        match self.answer.recv_timeout(self.timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                if let Some(stuck) = &self.stuck {
                    stuck.store(true, Ordering::Relaxed);
                }
                Err(Error::collective(
                    CollectiveKind::Timeout,
                    format!(
                        "{} did not finish within {:.0} s: another rank died or runs a different step \
                 (set {TIMEOUT_VAR} to wait longer)",
                        self.what,
                        self.timeout.as_secs_f64()
                    ),
                ))
            }
            Err(RecvTimeoutError::Disconnected) => Err(Error::collective(
                CollectiveKind::Stopped,
                format!("{}: the communication engine stopped", self.what),
            )),
        }
    }

    /// Waits for the result.
    pub fn wait(self) -> Result<T> {
        self.wait_timed().map(|(value, _)| value)
    }
}

/// What data-parallel training needs from a communication engine: sums, broadcasts and gathers
/// over every rank of a job, each rank calling the same operations in the same order.
///
/// Every reduction sums in rank order (rank 0's values, plus rank 1's, ...), so every rank gets
/// the same bits and a run is deterministic for a given world size.
pub trait Collective: Send {
    /// This process's rank, `0..world_size()`.
    fn rank(&self) -> usize;

    /// How many ranks the job has.
    fn world_size(&self) -> usize;

    /// Starts summing `values` elementwise over every rank (in rank order); every rank gets the
    /// sums. The engine works while the caller goes on; [`Pending::wait`] returns them.
    fn start_all_reduce(&mut self, values: Vec<f32>) -> Result<Pending<Vec<f32>>>;

    /// Rank `root`'s `bytes` on every rank (each rank passes a buffer of the same length).
    fn broadcast(&mut self, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>>;

    /// Every rank's `bytes` (all of one length), concatenated in rank order.
    fn all_gather(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>>;

    /// This rank's chunk of the rank-order sum of `values`: with `world_size()` ranks, `values`
    /// holds `world_size()` chunks of equal length and rank `r` gets the sum of chunk `r`.
    fn reduce_scatter(&mut self, values: Vec<f32>) -> Result<Vec<f32>>;

    /// Returns once every rank has called it.
    fn barrier(&mut self) -> Result<()>;

    /// Bytes this rank has sent to other ranks so far.
    fn bytes_sent(&self) -> u64;

    /// Tells the other ranks that this one makes no more collectives (its program is ending,
    /// after success or an error): a rank still waiting in a collective then stops at once with
    /// an error naming this rank, instead of waiting out the timeout. Dropping an engine does
    /// it; nothing for one process.
    fn leave(&mut self) -> Result<()> {
        Ok(())
    }

    /// [`Collective::start_all_reduce`] and wait.
    fn all_reduce(&mut self, values: Vec<f32>) -> Result<Vec<f32>> {
        self.start_all_reduce(values)?.wait()
    }

    /// Every rank's `bytes`, which may differ in length, in rank order.
    fn all_gather_varied(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let lengths = self.all_gather((bytes.len() as u64).to_le_bytes().to_vec())?;
        let lengths: Vec<usize> =
            lengths.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize).collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let mut padded = bytes.to_vec();
        padded.resize(longest, 0);
        let all = self.all_gather(padded)?;
        Ok(lengths.iter().enumerate().map(|(r, &n)| all[r * longest..r * longest + n].to_vec()).collect())
    }
}

/// One process alone: every collective is the identity (world size 1).
#[derive(Clone, Copy, Debug, Default)]
pub struct Local;

impl Collective for Local {
    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        1
    }

    fn start_all_reduce(&mut self, values: Vec<f32>) -> Result<Pending<Vec<f32>>> {
        Ok(Pending::ready(values))
    }

    fn broadcast(&mut self, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        check_root(root, 1)?;
        Ok(bytes)
    }

    fn all_gather(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        Ok(bytes)
    }

    fn reduce_scatter(&mut self, values: Vec<f32>) -> Result<Vec<f32>> {
        Ok(values)
    }

    fn barrier(&mut self) -> Result<()> {
        Ok(())
    }

    fn bytes_sent(&self) -> u64 {
        0
    }
}

/// `Ok` when `root` is a rank of a `world`-rank job.
pub(crate) fn check_root(root: usize, world: usize) -> Result<()> {
    if root < world {
        Ok(())
    } else {
        Err(Error::config("root", format!("broadcast from rank {root}, but the job has {world} rank(s)")))
    }
}

/// The rank-order sum of `world` equal chunks of `gathered`, the reference every engine's
/// reductions equal.
pub fn sum_in_rank_order(gathered: &[f32], world: usize) -> Vec<f32> {
    let n = gathered.len() / world.max(1);
    let mut sum = gathered[..n].to_vec();
    for chunk in gathered.chunks_exact(n.max(1)).skip(1).take(world.saturating_sub(1)) {
        sum.iter_mut().zip(chunk).for_each(|(s, &x)| *s += x);
    }
    sum
}

/// Ends this rank after `error`: prints it as one line on standard error (`error: rank R: ..`),
/// then tells the other ranks ([`Collective::leave`]: each stops at its next collective, naming
/// this rank) and exits with code 1 at once. The line comes first so that it is out before
/// `mpirun` ends the job.
pub fn exit_with_error<C: Collective + ?Sized>(comm: &mut C, error: &dyn std::fmt::Display) -> ! {
    use std::io::Write;
    let rank = comm.rank();
    let text = error.to_string();
    let line = if text.starts_with(&format!("rank {rank}:")) {
        format!("error: {text}\n")
    } else {
        format!("error: rank {rank}: {text}\n")
    };
    // One write: `eprintln!` writes its pieces separately, and `mpirun` interleaves the pieces
    // of ranks that fail at the same moment.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    let _ = comm.leave();
    exit_now(1)
}

/// Ends this process at once with `code`, after flushing standard output and error, without
/// running exit handlers: MPI's would wait for an engine thread stuck in a collective with a rank
/// that is gone. `mpirun` then ends the other ranks and reports the code.
pub fn exit_now(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` only ends the process; nothing in this process runs after it.
    unsafe { libc::_exit(code) }
}
