//! How many threads a CPU backend's kernels use, and the rayon pool each backend owns to run
//! them in.
//!
//! A kernel learns its thread count from where it runs: inside a backend's pool, that pool's
//! count; on a backend of one thread, or outside any backend (a kernel called directly), one.
//! So two backends on two threads each run on their own threads, with their own counts. While
//! a pool's threads are found not to get a core of their own ([`super::guard`]), its kernels
//! run on one thread.

use super::guard::{Descheduled, Guard, Times};
use std::cell::{Cell, OnceCell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The environment variable that sets the CPU kernels' default thread count.
pub(crate) const THREADS_VAR: &str = "REMAT_NUM_THREADS";

/// The default thread count of a CPU backend: [`THREADS_VAR`] when set to a positive number,
/// else the CPUs this process may run on (so `taskset` limits it), capped by
/// `MATMUL_NUM_THREADS` when set (the variable `matrixmultiply` reads for its own threads).
/// Read once.
pub(crate) fn default_threads() -> usize {
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

/// A backend's kernel threads: the calling thread and a rayon pool of `threads - 1` workers,
/// built on first use (none for one thread, or where the system refuses the threads: the
/// kernels then run on the caller's thread, which computes the same bits).
#[derive(Debug)]
pub(crate) struct Pool {
    threads: usize,
    pool: OnceCell<Option<Arc<Shared>>>,
}

/// A started pool and the record of how its parallel kernels fare.
#[derive(Debug)]
struct Shared {
    pool: rayon::ThreadPool,
    guard: Guard,
}

impl Pool {
    pub(crate) fn new(threads: usize) -> Pool {
        Pool { threads: threads.max(1), pool: OnceCell::new() }
    }

    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    fn pool(&self) -> Option<&Arc<Shared>> {
        self.pool
            .get_or_init(|| {
                if self.threads == 1 {
                    return None;
                }
                let threads = self.threads;
                let built = rayon::ThreadPoolBuilder::new()
                    // The caller is the pool's other thread: it takes chunks beside the workers.
                    .num_threads(self.threads - 1)
                    .start_handler(move |_| WORKER_OF.with(|w| w.set(threads)))
                    .thread_name(|k| format!("remat-cpu-{k}"))
                    .build();
                match built {
                    Ok(pool) => Some(Arc::new(Shared { pool, guard: Guard::default() })),
                    Err(e) => {
                        log::warn!(
                            "the CPU backend's {} kernel threads could not start ({e}): one thread",
                            self.threads
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Runs `f` (a kernel) with the kernels it calls on this pool's threads.
    pub(crate) fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let mine = match self.pool() {
            Some(pool) => Current::Pool(Arc::clone(pool)),
            None => Current::Serial,
        };
        let before = CURRENT.with(|c| c.replace(mine));
        // Restored on unwind too, so a panicking kernel leaves no pool behind on this thread.
        struct Restore(Option<Current>);
        impl Drop for Restore {
            fn drop(&mut self) {
                if let Some(before) = self.0.take() {
                    CURRENT.with(|c| *c.borrow_mut() = before);
                }
            }
        }
        let _restore = Restore(Some(before));
        f()
    }
}

/// Where the kernels on this thread run.
enum Current {
    /// Not inside [`Pool::enter`]: on a worker of a pool (a kernel's task), that pool; else one
    /// thread.
    Outside,
    /// A backend of one thread.
    Serial,
    /// A backend's pool, entered from a thread outside it.
    Pool(Arc<Shared>),
}

std::thread_local! {
    /// On a worker of a backend's pool, that backend's thread count (its workers and the
    /// caller); else 0.
    static WORKER_OF: Cell<usize> = const { Cell::new(0) };
    static CURRENT: RefCell<Current> = const { RefCell::new(Current::Outside) };
    /// The clocks of this thread's last parallel job on a backend's pool.
    static LAST_JOB: Cell<Option<Descheduled>> = const { Cell::new(None) };
}

/// Threads the kernel running on this thread may use (see the module's doc).
pub(crate) fn threads() -> usize {
    CURRENT.with(|c| match &*c.borrow() {
        Current::Pool(shared) if shared.guard.serial() => 1,
        Current::Pool(shared) => shared.pool.current_num_threads() + 1,
        Current::Serial => 1,
        Current::Outside => match WORKER_OF.with(|w| w.get()) {
            0 if rayon::current_thread_index().is_some() => rayon::current_num_threads(),
            0 => 1,
            backend_threads => backend_threads,
        },
    })
}

/// `mine()` on this thread with `helper()` started on each other thread of the kernel's pool
/// (the backend's, or the pool of the worker this runs on), returning once every helper that
/// started has returned. The caller never waits for a helper to start: one that starts after
/// the caller is done does nothing (its share was taken). `mine` returns how many of the job's
/// `tasks` it ran itself; a backend's pool judges the job by it ([`super::guard`]). Called only
/// where [`threads`] is above one.
pub(crate) fn beside(tasks: usize, helper: &(impl Fn() + Sync), mine: impl FnOnce() -> usize) {
    let shared = CURRENT.with(|c| match &*c.borrow() {
        Current::Pool(shared) => Some(Arc::clone(shared)),
        _ => None,
    });
    let Some(shared) = shared else {
        // A kernel inside a task of a pool: that pool's scope (nested kernels are rare and small).
        return rayon::in_place_scope(|s| {
            (1..rayon::current_num_threads()).for_each(|_| s.spawn(|_| helper()));
            mine();
        });
    };
    let clocks = Descheduled::now();
    let descheduled = match (LAST_JOB.replace(clocks), clocks) {
        (Some(last), Some(now)) => last.until(now),
        _ => std::time::Duration::ZERO,
    };
    let start = Instant::now();
    let (mine, worked) = late_helpers_skip(&shared, helper, || (mine(), start.elapsed()));
    shared.guard.judge(tasks, mine, Times { worked, waited: start.elapsed() - worked, descheduled });
}

/// `mine()` with `helper()` posted to each other thread of the pool; returns once `mine` has and
/// every helper that started before it ended has too.
///
/// rayon's scopes wait for every job they spawn to finish, so a kernel of a few microseconds
/// waited for a sleeping worker to wake (tens of microseconds, and the caller then slept too):
/// the gpt step at d_model 64 took as long on two threads as on one. Here a helper that starts
/// after the caller has finished finds the job closed and touches nothing of it. (Helpers that
/// poll for the next kernel a while, as the pool before rayon's did, made a busy machine's
/// step slower still: 1.46× one thread's time at d_model 256.)
fn late_helpers_skip<R>(shared: &Shared, helper: &(dyn Fn() + Sync), mine: impl FnOnce() -> R) -> R {
    // SAFETY: only the lifetime is erased. A helper calls `helper` only after counting itself
    // in `active` and then finding the job open; `Close` (run on return and on unwind) closes
    // the job and then waits until `active` is zero. Both sides use SeqCst, so either the
    // helper sees the job closed or the caller sees it counted: `helper` is never called after
    // this function has returned.
    let erased: &'static (dyn Fn() + Sync) = unsafe { std::mem::transmute(helper) };
    let job = Arc::new(Posted {
        work: erased,
        active: AtomicUsize::new(0),
        closed: AtomicBool::new(false),
        panicked: AtomicBool::new(false),
    });
    for _ in 0..shared.pool.current_num_threads() {
        let job = Arc::clone(&job);
        shared.pool.spawn(move || job.run());
    }
    let close = Close(&job);
    let out = mine();
    drop(close);
    assert!(!job.panicked.load(Ordering::SeqCst), "a CPU kernel thread panicked");
    out
}

/// A job posted to a pool's other threads (see [`late_helpers_skip`]).
struct Posted {
    /// Valid while `closed` is false (or this helper is counted in `active`).
    work: &'static (dyn Fn() + Sync),
    /// Helpers inside `work` now.
    active: AtomicUsize,
    closed: AtomicBool,
    panicked: AtomicBool,
}

impl Posted {
    fn run(&self) {
        self.active.fetch_add(1, Ordering::SeqCst);
        if !self.closed.load(Ordering::SeqCst) {
            // A panic is the caller's to report; unwinding out of a rayon job aborts.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(self.work)).is_err() {
                self.panicked.store(true, Ordering::SeqCst);
            }
        }
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Closes a posted job and waits for the helpers inside it, when dropped.
struct Close<'a>(&'a Posted);

impl Drop for Close<'_> {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::SeqCst);
        let mut spins = 0u32;
        while self.0.active.load(Ordering::SeqCst) != 0 {
            // A helper that began a task finishes it in about a task's time, unless it lost its
            // core; then yield to it.
            spins += 1;
            if spins < 1 << 10 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}
