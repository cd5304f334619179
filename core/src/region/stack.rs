//! The open region instances of this thread, innermost last.

use super::RegionSpec;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// An open region instance on this thread's stack.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ActiveRegion {
    /// Unique per process: two calls never share an instance.
    pub instance: u64,
    pub spec: &'static RegionSpec,
}

thread_local! {
    static STACK: RefCell<Vec<ActiveRegion>> = const { RefCell::new(Vec::new()) };
}

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(0);

/// Closes its region instance when dropped.
#[must_use = "the region closes when this guard is dropped"]
#[derive(Debug)]
pub struct RegionGuard {
    /// The stack's depth with this instance open; 0 for a guard that opened none.
    depth: usize,
    // A guard must be dropped on the thread that opened it.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Opens a fresh instance of `spec` on this thread; ops recorded until the guard drops carry it.
pub fn enter_region(spec: &'static RegionSpec) -> RegionGuard {
    let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
    let depth = STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.push(ActiveRegion { instance, spec });
        s.len()
    });
    RegionGuard { depth, _not_send: std::marker::PhantomData }
}

impl RegionGuard {
    /// A guard that opened no region ([`super::RegionPolicy::NONE`]).
    pub(crate) fn no_region() -> RegionGuard {
        RegionGuard { depth: 0, _not_send: std::marker::PhantomData }
    }
}

impl Drop for RegionGuard {
    fn drop(&mut self) {
        if self.depth == 0 {
            return;
        }
        // Truncating (rather than popping) keeps the stack right even if an inner guard leaked.
        STACK.with(|s| s.borrow_mut().truncate(self.depth - 1));
    }
}

/// The open instances, outermost first (a copy: for tests and rare reads).
#[cfg(test)]
pub(crate) fn active_regions() -> Vec<ActiveRegion> {
    with_active_regions(<[ActiveRegion]>::to_vec)
}

/// `f` of the open instances, outermost first, read in place: recording reads them once per op,
/// and a copy per op is quadratic in the nesting depth.
pub(crate) fn with_active_regions<T>(f: impl FnOnce(&[ActiveRegion]) -> T) -> T {
    STACK.with(|s| f(&s.borrow()))
}

/// Whether any region is open on this thread.
pub fn in_region() -> bool {
    STACK.with(|s| !s.borrow().is_empty())
}
