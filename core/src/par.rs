//! Two pieces of work at once where the machine has a second CPU, one after the other where it
//! has not: how the readers, the partitioner and the reports split their large passes (the CPU
//! kernels have their own pool, `backend::cpu::kernels::pool`).

use std::sync::OnceLock;

/// Whether this process may run on more than one CPU (read once).
pub(crate) fn second_cpu() -> bool {
    static SECOND: OnceLock<bool> = OnceLock::new();
    *SECOND.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()) > 1)
}

/// `a()` and `b()`: `b` on a thread of its own beside `a` where there is a second CPU, else `a`
/// then `b`. A panic in either is the caller's.
pub(crate) fn join<A, B: Send>(a: impl FnOnce() -> A, b: impl FnOnce() -> B + Send) -> (A, B) {
    if !second_cpu() {
        let first = a();
        return (first, b());
    }
    std::thread::scope(|scope| {
        let second = scope.spawn(b);
        let first = a();
        (first, second.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}
