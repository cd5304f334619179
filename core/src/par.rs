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
pub fn join<A, B: Send>(a: impl FnOnce() -> A, b: impl FnOnce() -> B + Send) -> (A, B) {
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

/// `(0..len).map(item)` collected, the two halves made at once where there is a second CPU, each
/// with a `state` of its own that `item` may update (made by `state()`, dropped at its end).
/// Both are written straight into the one vector: collecting each half on its own and joining
/// them would hold (and first touch) half as much memory again.
pub(crate) fn collect_halves<T: Send, S>(
    len: usize,
    state: impl Fn() -> S + Sync,
    item: impl Fn(&mut S, usize) -> T + Sync,
) -> Vec<T> {
    let mut out = Vec::with_capacity(len);
    let half = len / 2;
    let (first, second) = out.spare_capacity_mut()[..len].split_at_mut(half);
    let fill = |slots: &mut [std::mem::MaybeUninit<T>], from: usize| {
        let mut state = state();
        for (k, slot) in slots.iter_mut().enumerate() {
            slot.write(item(&mut state, from + k));
        }
    };
    join(|| fill(first, 0), || fill(second, half));
    // SAFETY: `join` returned, so both fills ran to their end and every slot below `len` holds
    // an item (a panic in either is resumed before this line; what was written then leaks).
    unsafe { out.set_len(len) };
    out
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
        // Each item counts the items its half made before it, itself included.
        for len in [1, 2, 7, 1000] {
            let counts = collect_halves(
                len,
                || 0,
                |made, _| {
                    *made += 1;
                    *made
                },
            );
            let half = len / 2;
            let expected: Vec<usize> = (0..len).map(|k| if k < half { k + 1 } else { k - half + 1 }).collect();
            assert_eq!(counts, expected, "{len} items");
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
}
