//! How kernels split their work over the backend's threads so that the result does not depend
//! on the split: chunk boundaries come from the data (whole rows, chunks of a fixed size), never
//! from the thread count, and every element is computed by the same code whichever thread runs
//! its chunk. Chunks are many and small, taken by the calling thread and the backend's pool
//! threads as each gets free: a thread that shares its core with another process takes fewer,
//! and the caller never waits for a helper that has not started.

use super::super::threads::{beside, threads};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Elements per chunk of an elementwise loop: handing a chunk to another thread costs about a
/// microsecond, a 16 Ki-element loop a few.
const CHUNK: usize = 1 << 14;

/// Elements per chunk of a loop whose elements each cost tens of instructions (dropout's Philox
/// words, a layer norm's row reductions): a few µs of work.
pub(crate) const HEAVY_CHUNK: usize = 1 << 11;

/// Runs `f(offset, chunk)` over `out` split into chunks of whole rows of `row` elements, at
/// least [`CHUNK`] elements each (the same chunks whatever the thread count), except that the
/// last may be shorter and also holds (or is) any remainder of `out.len()` past the last whole
/// row (one chunk when `out` is small or there is one thread).
pub(crate) fn par_rows<U: Send>(out: &mut [U], row: usize, f: impl Fn(usize, &mut [U]) + Sync) {
    par_rows_min(out, row, CHUNK, f)
}

/// [`par_rows`] with chunks of at least `min` elements (rather than [`CHUNK`]).
pub(crate) fn par_rows_min<U: Send>(out: &mut [U], row: usize, min: usize, f: impl Fn(usize, &mut [U]) + Sync) {
    let row = row.max(1);
    let per = min.max(1).div_ceil(row) * row;
    if out.len() < 2 * per || serial() {
        return f(0, out);
    }
    let chunks: Vec<(usize, &mut [U])> = out.chunks_mut(per).enumerate().map(|(i, c)| (i * per, c)).collect();
    claimed(chunks, |(at, c)| f(at, c));
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
    unsafe { par_fill_min(n, row, CHUNK, fill) }
}

/// [`par_fill`] with chunks of at least `min` elements.
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
/// handing chunks to other threads costs more than it saves (measured on the GPT step).
const COPY_PAR_MIN: usize = 1 << 16;

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

/// Whether the kernel running on this thread has one thread (a kernel may then do its work in
/// fewer, larger pieces, which compute the same bits).
pub(crate) fn serial() -> bool {
    threads() == 1
}

/// Runs `f` on every task, each task on whichever of the kernels' threads takes it (in order on
/// one thread). Which thread runs a task never changes what it computes.
pub(crate) fn par_tasks<T: Send>(tasks: Vec<T>, f: impl Fn(T) + Sync) {
    if tasks.len() < 2 || serial() {
        return tasks.into_iter().for_each(f);
    }
    claimed(tasks, f);
}

/// Runs `f` on every task, on this thread and the pool's other threads, each taking the next
/// task not yet taken: a thread that shares its core with another process takes fewer.
fn claimed<T: Send>(tasks: Vec<T>, f: impl Fn(T) + Sync) {
    let n = tasks.len();
    let slots: Vec<Mutex<Option<T>>> = tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let next = AtomicUsize::new(0);
    // Runs tasks until none is left; how many it ran.
    let work = || {
        let mut ran = 0;
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return ran;
            }
            let task = slots[i].lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(task) = task {
                f(task);
                ran += 1;
            }
        }
    };
    beside(
        n,
        &|| {
            work();
        },
        work,
    );
}

#[cfg(test)]
mod tests {
    use crate::backend::cpu::threads::{threads, Pool};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Barrier, Mutex};
    use std::time::{Duration, Instant};

    /// Per task: the thread count its kernel saw, the thread that ran it, whether all met.
    type Seen = Vec<(usize, std::thread::ThreadId, bool)>;

    /// Runs `n` tasks of a kernel on `pool`, each waiting until all `n` run at once (or 20 s
    /// have passed): per task, the thread count the kernel saw, the thread that ran it and
    /// whether all `n` met.
    fn meet(pool: &Pool, n: usize) -> Seen {
        let arrived = AtomicUsize::new(0);
        let seen = Mutex::new(Vec::new());
        pool.enter(|| {
            super::par_tasks((0..n).collect(), |_| {
                arrived.fetch_add(1, Ordering::SeqCst);
                let deadline = Instant::now() + Duration::from_secs(20);
                while arrived.load(Ordering::SeqCst) < n && Instant::now() < deadline {
                    std::thread::yield_now();
                }
                let met = arrived.load(Ordering::SeqCst) >= n;
                seen.lock().unwrap().push((threads(), std::thread::current().id(), met));
            })
        });
        seen.into_inner().unwrap()
    }

    /// Two backends used at once from two threads each run their kernels on threads of their
    /// own, as many as their count: all of a kernel's tasks run at once on distinct threads,
    /// each seeing its backend's count (a shared pool busy with the other backend's kernel
    /// would leave one of them on a single thread, its tasks one after the other).
    #[test]
    fn two_backends_on_two_threads_each_run_on_their_own_threads() {
        let start = Barrier::new(2);
        let results: Vec<(usize, Seen)> = std::thread::scope(|s| {
            let runs: Vec<_> = [2usize, 3]
                .into_iter()
                .map(|n| {
                    let start = &start;
                    s.spawn(move || {
                        let pool = Pool::new(n);
                        start.wait();
                        (n, meet(&pool, n))
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        for (n, seen) in results {
            assert_eq!(seen.len(), n);
            assert!(seen.iter().all(|&(count, _, met)| count == n && met), "{n} threads: {seen:?}");
            let ran_on: std::collections::HashSet<_> = seen.iter().map(|&(_, on, _)| on).collect();
            assert_eq!(ran_on.len(), n, "{n} threads: {seen:?}");
        }
    }

    /// A backend of one thread, and a kernel called outside any backend, run on the caller's
    /// thread.
    #[test]
    fn one_thread_and_no_backend_run_on_the_callers_thread() {
        let caller = std::thread::current().id();
        for run in [|f: &dyn Fn()| Pool::new(1).enter(f), |f: &dyn Fn()| f()] {
            let ran_on = Mutex::new(Vec::new());
            run(&|| {
                assert_eq!(threads(), 1);
                super::par_tasks((0..4).collect(), |_| ran_on.lock().unwrap().push(std::thread::current().id()));
            });
            assert_eq!(ran_on.into_inner().unwrap(), vec![caller; 4]);
        }
    }

    /// Chunks come from the data: the same offsets and lengths on every thread count.
    #[test]
    fn chunks_do_not_depend_on_the_thread_count() {
        let chunks = |threads: usize| {
            let seen = Mutex::new(Vec::new());
            let mut out = vec![0u8; 100_003];
            Pool::new(threads).enter(|| super::par_rows(&mut out, 7, |at, c| seen.lock().unwrap().push((at, c.len()))));
            let mut seen = seen.into_inner().unwrap();
            seen.sort_unstable();
            seen
        };
        let many = chunks(2);
        assert!(many.len() > 4, "{many:?}");
        assert!(many.iter().all(|&(at, _)| at % 7 == 0));
        assert_eq!(many.iter().map(|&(_, len)| len).sum::<usize>(), 100_003);
        assert_eq!(chunks(3), many);
        assert_eq!(chunks(7), many);
        assert_eq!(chunks(1), vec![(0, 100_003)]);
    }
}
