//! Threading for the CPU kernels: how many threads, how work is split into chunks whose
//! results do not depend on the split, and the long-lived helper threads that run them.

use std::mem::MaybeUninit;
use std::sync::OnceLock;

/// The environment variable that sets the CPU kernels' default thread count.
pub const THREADS_VAR: &str = "REMAT_NUM_THREADS";

/// The default thread count of a CPU backend: [`THREADS_VAR`] when set to a positive number,
/// else the CPUs this process may run on (so `taskset` limits it), capped by
/// `MATMUL_NUM_THREADS` when set (the variable `matrixmultiply` reads for its own threads).
/// Read once.
pub fn default_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        let var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<usize>().ok()).filter(|&n| n > 0);
        if let Some(n) = var(THREADS_VAR) {
            return n;
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        var("MATMUL_NUM_THREADS").map_or(cpus, |c| c.min(cpus)).max(1)
    })
}

std::thread_local! {
    /// The thread count of the backend whose kernel this thread is running (0: none set).
    static CURRENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Runs `f` with the kernels on this thread limited to `threads` threads (a backend's own
/// count), restoring the previous limit after.
pub(crate) fn with_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    let before = CURRENT.with(|c| c.replace(threads.max(1)));
    let out = f();
    CURRENT.with(|c| c.set(before));
    out
}

/// Threads the CPU kernel running on this thread may use: its backend's count, else
/// [`default_threads`], and one while the helpers are found not to get a core of their own
/// ([`helpers`]: a busy machine).
pub(crate) fn threads() -> usize {
    let n = match CURRENT.with(|c| c.get()) {
        0 => default_threads(),
        n => n,
    };
    // The guard's lock and clock only where there are helpers to guard.
    if n > 1 && helpers::starved() {
        1
    } else {
        n
    }
}

/// Elements below which an elementwise loop stays on one thread: handing work to a polling
/// helper costs about a microsecond, a 16 Ki-element loop a few (thresholds measured on the
/// GPT step: lower ones gained nothing more).
const PAR_MIN: usize = 1 << 14;

/// Elements a thread must get before a loop whose elements each cost tens of instructions
/// (dropout's Philox words, a layer norm's row reductions) is split: a few µs of work.
pub(crate) const HEAVY_PAR_MIN: usize = 1 << 11;

/// Runs `f(offset, chunk)` over `out` split into chunks for up to [`threads`] threads, each
/// starting at a multiple of `row` and holding whole rows, except that the last also holds (or
/// is) any remainder of `out.len()` past the last whole row (one chunk when `out` is small).
/// Each element is computed by the same code whatever the split, so results do not depend on
/// the thread count.
pub(crate) fn par_rows<U: Send>(out: &mut [U], row: usize, f: impl Fn(usize, &mut [U]) + Sync) {
    par_rows_min(out, row, PAR_MIN, f)
}

/// [`par_rows`] giving each thread at least `min` elements (rather than [`PAR_MIN`]).
pub(crate) fn par_rows_min<U: Send>(out: &mut [U], row: usize, min: usize, f: impl Fn(usize, &mut [U]) + Sync) {
    let (row, min) = (row.max(1), min.max(1));
    let threads = threads().min(out.len() / min).min(out.len() / row).max(1);
    if threads == 1 {
        return f(0, out);
    }
    // A few tasks per thread, claimed as threads get free: on a shared machine one thread may
    // be descheduled, and a static split would make everyone wait for it.
    let rows = out.len() / row;
    let tasks = (threads * 4).min(rows).min(out.len() / min).max(threads);
    let per = rows.div_ceil(tasks) * row;
    let parts: Vec<(usize, &mut [U])> = out.chunks_mut(per).enumerate().map(|(i, c)| (i * per, c)).collect();
    par_tasks(parts, threads, |(at, chunk)| f(at, chunk));
}

/// A vector of `n` elements that `fill(offset, chunk)` writes, over chunks split as
/// [`par_rows`] splits them (starting at multiples of `row`). The output is never
/// zeroed first: for an elementwise kernel that saves a whole pass over memory.
///
/// # Safety
/// `fill` must initialise every element of every chunk it is given.
pub(crate) unsafe fn par_fill<U: Send>(
    n: usize,
    row: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<U>]) + Sync,
) -> Vec<U> {
    // SAFETY: the caller's promise, passed on.
    unsafe { par_fill_min(n, row, PAR_MIN, fill) }
}

/// [`par_fill`] giving each thread at least `min` elements.
///
/// # Safety
/// `fill` must initialise every element of every chunk it is given.
pub(crate) unsafe fn par_fill_min<U: Send>(
    n: usize,
    row: usize,
    min: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<U>]) + Sync,
) -> Vec<U> {
    let mut out: Vec<U> = Vec::with_capacity(n);
    par_rows_min(&mut out.spare_capacity_mut()[..n], row, min, fill);
    // SAFETY: the chunks cover `0..n` and the caller's `fill` wrote each of them.
    unsafe { out.set_len(n) };
    out
}

/// Elements below which a copy stays on one thread: a copy is memory-bound, and below this
/// handing chunks to the helpers costs more than it saves (measured on the GPT step).
pub(crate) const COPY_PAR_MIN: usize = 1 << 16;

/// The chunk granularity for [`par_fill`] of a copy of `n` elements made of `row`-element units:
/// the whole copy on one thread when it is small.
pub(crate) fn copy_rows(n: usize, row: usize) -> usize {
    if n < COPY_PAR_MIN {
        n.max(1)
    } else {
        row
    }
}

/// A copy of `x`, in chunks on the kernels' threads when it is large.
pub(crate) fn par_copy<U: Copy + Send + Sync>(x: &[U]) -> Vec<U> {
    let fill = |at: usize, chunk: &mut [MaybeUninit<U>]| {
        let src = &x[at..at + chunk.len()];
        for (o, &v) in chunk.iter_mut().zip(src) {
            o.write(v);
        }
    };
    // SAFETY: `fill` writes every element of its chunk (`x` has `x.len()` elements).
    unsafe { par_fill(x.len(), copy_rows(x.len(), 1), fill) }
}

/// Runs `f` on every task, on `threads` threads (this one included), each claiming the next
/// unclaimed task. Which thread runs a task never changes what it computes.
pub(crate) fn par_tasks<T: Send>(tasks: Vec<T>, threads: usize, f: impl Fn(T) + Sync) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let n = tasks.len();
    let slots: Vec<Mutex<Option<T>>> = tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let next = AtomicUsize::new(0);
    // Runs the next unclaimed task; false when none is left.
    let claim = || {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            return false;
        }
        let task = slots[i].lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            f(task);
        }
        true
    };
    let work = || while claim() {};
    let mut mine = 0;
    let mut caller = || {
        while claim() {
            mine += 1;
        }
    };
    if let Some(times) = helpers::run(threads.min(n).saturating_sub(1), &work, &mut caller) {
        helpers::judge(n, mine, times);
    }
}

/// A few long-lived helper threads, each with a mailbox it spins on for a while before sleeping.
///
/// Kernels come back to back, tens of microseconds apart: a helper woken through a channel and
/// a condition variable for each one cost ~90 µs per round trip on the development machine
/// (more than many kernels take), so after a job a helper keeps polling its mailbox for
/// [`SPIN`] before it parks. Fresh threads per kernel would each start with a cold allocator
/// arena, and `matrixmultiply`'s packing buffers would page-fault on every call.
///
/// One caller uses the helpers at a time; a caller that finds them busy (another thread's
/// kernel, or a kernel nested in a job) runs its work alone, which computes the same.
mod helpers {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
    use std::sync::{Arc, Condvar, Mutex, OnceLock};
    use std::time::{Duration, Instant};

    /// How long an idle helper polls before it parks.
    const SPIN: Duration = Duration::from_micros(200);

    const IDLE: u8 = 0;
    const POSTED: u8 = 1;
    const DONE: u8 = 2;

    /// A job borrowed for the duration of [`run`], which waits for every helper it posted to
    /// before returning; the `'static` is a lie [`run`] makes true by waiting.
    type Job = &'static (dyn Fn() + Sync);

    /// One helper's mailbox. `state` goes IDLE → POSTED (the caller, after storing `job`) →
    /// DONE (the helper, after running and dropping it) → IDLE (the caller, having seen DONE).
    struct Mailbox {
        state: AtomicU8,
        job: Mutex<Option<Job>>,
        panicked: AtomicBool,
        /// Whether the helper sleeps on `wake` (read and written under this lock).
        parked: Mutex<bool>,
        wake: Condvar,
    }

    impl Mailbox {
        fn new() -> Mailbox {
            Mailbox {
                state: AtomicU8::new(IDLE),
                job: Mutex::new(None),
                panicked: AtomicBool::new(false),
                parked: Mutex::new(false),
                wake: Condvar::new(),
            }
        }

        /// The helper's loop: wait for a job (spinning, then parked), run it, report.
        fn serve(&self) {
            loop {
                self.wait_for_job();
                let job = self.job.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(job) = job {
                    if catch_unwind(AssertUnwindSafe(job)).is_err() {
                        self.panicked.store(true, Ordering::Relaxed);
                    }
                }
                self.state.store(DONE, Ordering::Release);
            }
        }

        fn wait_for_job(&self) {
            let start = Instant::now();
            let mut polls = 0u32;
            while self.state.load(Ordering::Acquire) != POSTED {
                std::hint::spin_loop();
                polls += 1;
                if polls.is_multiple_of(64) && start.elapsed() > SPIN {
                    // The state is checked again under the lock the poster takes to wake us,
                    // so a job posted meanwhile is never missed.
                    let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
                    *parked = true;
                    while self.state.load(Ordering::Acquire) != POSTED {
                        parked = self.wake.wait(parked).unwrap_or_else(|e| e.into_inner());
                    }
                    *parked = false;
                    return;
                }
            }
        }

        fn post(&self, job: Job) {
            *self.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
            self.state.store(POSTED, Ordering::Release);
            let parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
            if *parked {
                self.wake.notify_one();
            }
        }

        /// Waits until the helper has finished the posted job; whether it panicked.
        fn finish(&self) -> bool {
            let mut polls = 0u32;
            while self.state.load(Ordering::Acquire) != DONE {
                polls += 1;
                if polls < 1 << 12 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            self.state.store(IDLE, Ordering::Relaxed);
            self.panicked.swap(false, Ordering::Relaxed)
        }
    }

    /// The helpers started so far; the lock is held by the caller using them.
    fn helpers() -> &'static Mutex<Vec<Arc<Mailbox>>> {
        static HELPERS: OnceLock<Mutex<Vec<Arc<Mailbox>>>> = OnceLock::new();
        HELPERS.get_or_init(|| Mutex::new(Vec::new()))
    }

    /// Runs `work` on `extra` helper threads and `mine` on this one, returning when all are
    /// done, with how long `mine` took and how long this thread then waited for the helpers
    /// (`None` when it ran alone).
    pub(super) fn run(extra: usize, work: &(dyn Fn() + Sync), mine: &mut dyn FnMut()) -> Option<Times> {
        if extra == 0 {
            mine();
            return None;
        }
        let Ok(mut list) = helpers().try_lock() else {
            mine();
            return None;
        };
        while list.len() < extra {
            let mailbox = Arc::new(Mailbox::new());
            let served = mailbox.clone();
            let spawned = std::thread::Builder::new().name("remat-cpu".into()).spawn(move || served.serve());
            if spawned.is_err() {
                break;
            }
            list.push(mailbox);
        }
        // SAFETY: helpers use the reference only until they report DONE, and this function
        // does not return (or unwind) before every posted helper has reported.
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn() + Sync), Job>(work) };
        let posted = &list[..extra.min(list.len())];
        for mailbox in posted {
            mailbox.post(job);
        }
        let start = Instant::now();
        let own = catch_unwind(AssertUnwindSafe(mine));
        let worked = start.elapsed();
        let helper_panicked = posted.iter().fold(false, |any, m| m.finish() | any);
        let waited = start.elapsed() - worked;
        drop(list);
        if let Err(payload) = own {
            std::panic::resume_unwind(payload);
        }
        assert!(!helper_panicked, "a CPU kernel thread panicked");
        Some(Times { worked, waited })
    }

    /// How one parallel job went on the calling thread.
    pub(super) struct Times {
        /// Running its own share of the tasks.
        pub worked: Duration,
        /// Then waiting for the helpers to finish theirs.
        pub waited: Duration,
    }

    /// Jobs shorter than this tell nothing (timer and wake-up noise).
    const JUDGED_MIN: Duration = Duration::from_micros(30);
    /// Judged jobs between verdicts, and the decay of the running balance per job (a window of
    /// about 30 jobs).
    const WINDOW: u32 = 16;
    const DECAY: f64 = 0.97;
    /// The first serial period; doubled while probes keep losing, up to [`STARVE_MAX`].
    const STARVE_FIRST: Duration = Duration::from_millis(50);
    const STARVE_MAX: Duration = Duration::from_secs(2);

    /// The helpers' record on this machine: the time parallel jobs saved lately (negative: lost)
    /// and until when the kernels run on one thread because the helpers were found not to get
    /// a core.
    pub(super) struct Record {
        /// Seconds saved against running alone, decayed per judged job.
        balance: f64,
        /// Judged jobs since the last verdict.
        judged: u32,
        period: Duration,
        serial_until: Option<Instant>,
    }

    fn record() -> &'static Mutex<Record> {
        static RECORD: Mutex<Record> = Mutex::new(Record::new());
        &RECORD
    }

    /// Whether the kernels should run on one thread for now: a busy machine (another process
    /// on the cores) left the helpers without a core of their own, so that waiting for them
    /// cost more than their share of the work saved. Parallel jobs resume after a back-off
    /// period, and go serial again (for twice as long) if they still lose.
    pub(super) fn starved() -> bool {
        let Ok(record) = record().try_lock() else { return false };
        record.serial_at(Instant::now())
    }

    /// Scores one parallel job of `tasks` tasks of which this thread ran `mine` (see
    /// [`Record::judge`]).
    pub(super) fn judge(tasks: usize, mine: usize, times: Times) {
        let mut record = record().lock().unwrap_or_else(|e| e.into_inner());
        record.judge(tasks, mine, times, Instant::now());
    }

    impl Record {
        /// A record with nothing judged yet.
        pub(super) const fn new() -> Record {
            Record { balance: 0.0, judged: 0, period: STARVE_FIRST, serial_until: None }
        }

        /// Whether kernels run on one thread at `now`.
        pub(super) fn serial_at(&self, now: Instant) -> bool {
            self.serial_until.is_some_and(|until| now < until)
        }

        /// Scores one parallel job at `now`: what it saved against this thread alone (its own
        /// per-task time times every task), added to a running balance; after every [`WINDOW`]
        /// judged jobs, a balance below zero (parallel jobs cost more than they saved, lately)
        /// sends the kernels to one thread for a while. Single lost jobs on a noisy machine do
        /// not: the time the others save outweighs them.
        pub(super) fn judge(&mut self, tasks: usize, mine: usize, times: Times, now: Instant) {
            let wall = times.worked + times.waited;
            if wall < JUDGED_MIN {
                return;
            }
            let alone = times.worked.as_secs_f64() * tasks as f64 / mine.max(1) as f64;
            // A loss counts for at most the job's own time: one helper stalled for milliseconds
            // by a noisy neighbour must not outweigh the many jobs the helpers speed up.
            let saved = (alone - wall.as_secs_f64()).max(-alone);
            self.balance = self.balance * DECAY + saved;
            self.judged += 1;
            if self.judged < WINDOW {
                return;
            }
            self.judged = 0;
            if self.balance < 0.0 {
                self.serial_until = Some(now + self.period);
                self.period = (self.period * 2).min(STARVE_MAX);
                self.balance = 0.0;
            } else {
                self.period = STARVE_FIRST;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::helpers::{Record, Times};
    use std::time::{Duration, Instant};

    /// Parallel jobs that take longer than this thread alone would (helpers without a core)
    /// send the kernels to one thread for a while, twice as long when probes lose again; jobs
    /// that win, or a few stalled ones among many that win, keep them parallel.
    #[test]
    fn jobs_that_lose_to_one_thread_make_the_kernels_serial_for_a_while() {
        let us = Duration::from_micros;
        let win = || Times { worked: us(100), waited: us(5) }; // half the tasks each
        let loss = || Times { worked: us(100), waited: us(100) }; // the helper ran nothing
        let stall = || Times { worked: us(100), waited: us(5000) }; // a helper descheduled
        let t0 = Instant::now();
        let mut r = Record::new();
        for k in 0..64 {
            // One stalled job in eight, the others winning: still parallel.
            r.judge(8, if k % 8 == 0 { 8 } else { 4 }, if k % 8 == 0 { stall() } else { win() }, t0);
        }
        assert!(!r.serial_at(t0));
        let mut losses = 0;
        while !r.serial_at(t0) {
            r.judge(8, 8, loss(), t0);
            losses += 1;
            assert!(losses <= 64, "64 lost jobs and still parallel");
        }
        // Serial for 50 ms, then parallel again; losing again doubles the period.
        assert!(r.serial_at(t0 + Duration::from_millis(49)) && !r.serial_at(t0 + Duration::from_millis(51)));
        let t1 = t0 + Duration::from_millis(60);
        for _ in 0..16 {
            r.judge(8, 8, loss(), t1);
        }
        assert!(r.serial_at(t1 + Duration::from_millis(99)) && !r.serial_at(t1 + Duration::from_millis(101)));
    }
}
