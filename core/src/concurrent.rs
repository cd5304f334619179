//! The one place where core's algorithms (the readers, differentiation, the partitioner, the
//! reports) run work at once; none of them starts a thread of its own. (The CPU kernels run in
//! their backend's own pool: `backend::cpu::threads`.)
//!
//! Two pieces of work that both end before the caller goes on are joined on rayon's global pool
//! ([`join`], [`collect_halves`]). Two shapes rayon's join cannot take without blocking one of
//! its workers run on a scoped thread instead: a producer that hands batches through a bounded
//! channel to the caller ([`pipeline`]), and work that outlives the call that starts it
//! ([`scope`], [`spawn`]). On a machine with one CPU each runs one thing after the other.

use rayon::prelude::*;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::OnceLock;

/// Whether this process may run on more than one CPU (read once).
pub(crate) fn second_cpu() -> bool {
    static SECOND: OnceLock<bool> = OnceLock::new();
    *SECOND.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()) > 1)
}

/// `a()` and `b()`, at once where there is a second CPU (on rayon's global pool), else `a` then
/// `b`. A panic in either is the caller's.
pub(crate) fn join<A: Send, B: Send>(a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B + Send) -> (A, B) {
    if !second_cpu() {
        let first = a();
        return (first, b());
    }
    rayon::join(a, b)
}

/// `(0..len).map(item)` collected, the two halves made at once where there is a second CPU, each
/// with a `state` of its own that `item` may update (made by `state()`). Both are written
/// straight into the one vector: collecting each half on its own and joining them would hold
/// (and first touch) half as much memory again.
pub(crate) fn collect_halves<T: Send, S>(
    len: usize,
    state: impl Fn() -> S + Sync + Send,
    item: impl Fn(&mut S, usize) -> T + Sync + Send,
) -> Vec<T> {
    if !second_cpu() || len < 2 {
        let mut state = state();
        return (0..len).map(|k| item(&mut state, k)).collect();
    }
    let mut out = Vec::with_capacity(len);
    // At least half the items per piece: two pieces, two states.
    (0..len).into_par_iter().with_min_len(len / 2).map_init(&state, &item).collect_into_vec(&mut out);
    out
}

/// Runs `produce(sender)` on a second thread while `consume(receiver)` runs on this one, the
/// two linked by a channel holding at most `bound` messages; both results, once both have
/// returned. Where there is no second CPU, `None`: the caller runs its one-thread pass instead.
/// `produce` should stop when a send fails (the consumer stopped early and dropped its end).
pub(crate) fn pipeline<M: Send, P: Send, C>(
    bound: usize,
    produce: impl FnOnce(SyncSender<M>) -> P + Send,
    consume: impl FnOnce(Receiver<M>) -> C,
) -> Option<(P, C)> {
    if !second_cpu() {
        return None;
    }
    Some(std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<M>(bound);
        let producer = scope.spawn(move || produce(tx));
        let consumed = consume(rx);
        let produced = producer.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (produced, consumed)
    }))
}

/// A scope in which work may be started that the caller collects later ([`Task::wait`]), after
/// the call that started it has returned; every task has ended when [`scope`] returns.
pub(crate) type Scope<'scope, 'env> = std::thread::Scope<'scope, 'env>;

/// Runs `f` with a [`Scope`] its callees may start work in ([`spawn`]).
pub(crate) fn scope<'env, R>(f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R) -> R {
    std::thread::scope(f)
}

/// `work()` started in `scope` beside the caller where there is a second CPU, else run now; its
/// result is collected with [`Task::wait`].
pub(crate) fn spawn<'scope, T: Send + 'scope>(
    scope: &'scope Scope<'scope, '_>,
    work: impl FnOnce() -> T + Send + 'scope,
) -> Task<'scope, T> {
    if !second_cpu() {
        return Task::Done(work());
    }
    Task::Running(scope.spawn(work))
}

/// Work started in a [`Scope`].
pub(crate) enum Task<'scope, T> {
    Running(std::thread::ScopedJoinHandle<'scope, T>),
    Done(T),
}

impl<T> Task<'_, T> {
    /// The work's result, once it has ended (a panic in it is the caller's).
    pub(crate) fn wait(self) -> T {
        match self {
            Task::Running(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Task::Done(t) => t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_collect_in_order_at_every_length() {
        for len in [0, 1, 2, 3, 7, 1000] {
            let items = collect_halves(len, || (), |_, k| format!("item {k}"));
            assert_eq!(items, (0..len).map(|k| format!("item {k}")).collect::<Vec<_>>());
        }
    }

    #[test]
    fn each_half_has_a_state_of_its_own() {
        // Each item counts the items made with its state before it, itself included: with two
        // states, no count reaches past the half of the items (rounded up).
        for len in [2, 7, 1000] {
            let counts = collect_halves(
                len,
                || 0,
                |made, _| {
                    *made += 1;
                    *made
                },
            );
            let states = counts.iter().filter(|&&c| c == 1).count();
            assert!(second_cpu() || states == 1, "{len} items, one CPU: {states} states");
            if second_cpu() {
                assert_eq!(states, 2, "{len} items: {counts:?}");
                assert!(counts.iter().all(|&c| c <= len.div_ceil(2)), "{len} items: {counts:?}");
            }
        }
    }

    #[test]
    fn a_panic_in_either_half_reaches_the_caller() {
        for bad in [1, 900] {
            let caught = std::panic::catch_unwind(|| {
                collect_halves(1000, || (), |_, k| if k == bad { panic!("item {k}") } else { vec![k] })
            });
            let message = caught.expect_err("the panic is resumed");
            assert_eq!(message.downcast_ref::<String>().map(String::as_str), Some(format!("item {bad}").as_str()));
        }
    }

    #[test]
    fn a_pipeline_hands_every_message_over_in_order() {
        let Some((sent, got)) = pipeline(
            2,
            |tx| (0..100).take_while(|&k| tx.send(k).is_ok()).count(),
            |rx| rx.iter().collect::<Vec<i32>>(),
        ) else {
            return assert!(!second_cpu());
        };
        assert_eq!((sent, got), (100, (0..100).collect()));
        // A consumer that stops early stops the producer: its sends fail, nothing hangs.
        let (sent, got) = pipeline(1, |tx| (0..100).take_while(|&k| tx.send(k).is_ok()).count(), |rx| rx.recv())
            .expect("a second CPU, as above");
        assert_eq!(got, Ok(0));
        assert!(sent < 100, "{sent} sent");
    }

    #[test]
    fn a_task_started_in_a_scope_is_collected_after_its_starter_returned() {
        let data = [1, 2, 3];
        let total = scope(|s| {
            let start = || spawn(s, || data.iter().sum::<i32>());
            let task = start();
            task.wait()
        });
        assert_eq!(total, 6);
    }
}
