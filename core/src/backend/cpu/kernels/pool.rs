//! Threading for the CPU kernels: how many threads, how work is split into chunks whose
//! results do not depend on the split, and the long-lived helper threads that run them.

use std::mem::MaybeUninit;
use std::sync::OnceLock;

/// Threads the CPU kernels may use: the CPUs this process may run on (so `taskset` limits it),
/// capped by `MATMUL_NUM_THREADS` when set (the variable `matrixmultiply` reads for its own
/// threads). Read once.
pub(crate) fn threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cap = std::env::var("MATMUL_NUM_THREADS").ok().and_then(|v| v.parse::<usize>().ok()).filter(|&n| n > 0);
        cap.map_or(cpus, |c| c.min(cpus)).max(1)
    })
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
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        let task = slots[i].lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            f(task);
        }
    };
    helpers::run(threads.min(n).saturating_sub(1), &work);
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

    /// Runs `work` on this thread and on `extra` helper threads, returning when all are done.
    pub(super) fn run(extra: usize, work: &(dyn Fn() + Sync)) {
        if extra == 0 {
            return work();
        }
        let Ok(mut list) = helpers().try_lock() else {
            return work();
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
        let mine = catch_unwind(AssertUnwindSafe(work));
        let helper_panicked = posted.iter().fold(false, |any, m| m.finish() | any);
        drop(list);
        if let Err(payload) = mine {
            std::panic::resume_unwind(payload);
        }
        assert!(!helper_panicked, "a CPU kernel thread panicked");
    }
}
