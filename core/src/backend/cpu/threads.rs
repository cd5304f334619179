//! How many threads a CPU backend's kernels use, and the rayon pool each backend owns to run
//! them in.
//!
//! A kernel learns its thread count from where it runs: inside a backend's pool, that pool's
//! count; on a backend of one thread, or outside any backend (a kernel called directly), one.
//! So two backends on two threads each run on their own threads, with their own counts. While
//! a pool's threads are found not to get a core of their own ([`super::guard`]), its kernels
//! run on one thread.

use super::guard::{Guard, Times};
use std::cell::{OnceCell, RefCell};
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

/// A backend's kernel threads: a rayon pool of `threads` threads, built on first use (none for
/// one thread, or where the system refuses the threads: the kernels then run on the caller's
/// thread, which computes the same bits).
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
                let built = rayon::ThreadPoolBuilder::new()
                    .num_threads(self.threads)
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
    static CURRENT: RefCell<Current> = const { RefCell::new(Current::Outside) };
}

/// Threads the kernel running on this thread may use (see the module's doc).
pub(crate) fn threads() -> usize {
    CURRENT.with(|c| match &*c.borrow() {
        Current::Pool(shared) if shared.guard.serial() => 1,
        Current::Pool(shared) => shared.pool.current_num_threads(),
        Current::Serial => 1,
        Current::Outside if rayon::current_thread_index().is_some() => rayon::current_num_threads(),
        Current::Outside => 1,
    })
}

/// `mine()` on this thread with `helper()` started on each other thread of the kernel's pool
/// (the backend's, or the pool of the worker this runs on), returning once all have returned.
/// The caller never waits for a helper to start its share: helpers that start late find less
/// (or nothing) left to take. `mine` returns how many of the job's `tasks` it ran itself; a
/// backend's pool judges the job by it ([`super::guard`]). Called only where [`threads`] is
/// above one.
pub(crate) fn beside(tasks: usize, helper: &(impl Fn() + Sync), mine: impl FnOnce() -> usize) {
    let shared = CURRENT.with(|c| match &*c.borrow() {
        Current::Pool(shared) => Some(Arc::clone(shared)),
        _ => None,
    });
    let Some(shared) = shared else {
        return rayon::in_place_scope(|s| {
            (1..rayon::current_num_threads()).for_each(|_| s.spawn(|_| helper()));
            mine();
        });
    };
    let start = Instant::now();
    let mut ran = (0, start.elapsed());
    shared.pool.in_place_scope(|s| {
        (1..shared.pool.current_num_threads()).for_each(|_| s.spawn(|_| helper()));
        ran = (mine(), start.elapsed());
    });
    let (mine, worked) = ran;
    shared.guard.judge(tasks, mine, Times { worked, waited: start.elapsed() - worked });
}
