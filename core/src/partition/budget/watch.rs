//! The exact program watched while HiGHS searches it, through its C API's callback (the `highs`
//! crate wraps none): each improving choice is handed to the caller's [`Watcher`], and the search
//! is interrupted once its proven bound is within the stopping gap of the watcher's best plan.
//!
//! The peak search needs both: the program's rows are a relaxation of the plan's peak, so the
//! program's own incumbent may peak over the limit while a costlier one it passed on the way did
//! not, and the program's own gap (to that incumbent) says nothing of the plans that fit.

use super::{Choice, Watcher};
use std::ffi::{c_char, c_int, c_void};

/// What the callback reads and keeps; lives on the caller's stack for the whole solve.
pub(super) struct Watching<'a> {
    /// The choice a solution's columns stand for.
    choice: &'a dyn Fn(&[f64]) -> Choice,
    watcher: &'a (dyn Watcher + Sync),
    /// Columns of the model HiGHS solves (the length of its solutions).
    columns: usize,
    /// The relative gap at which the search stops.
    gap: f64,
    /// A cost ([`crate::partition::Partition::cost`]'s units) in the objective's.
    to_objective: &'a dyn Fn(f64) -> f64,
    /// The watcher's best plan, in the objective's units.
    best: Option<f64>,
}

impl<'a> Watching<'a> {
    pub(super) fn new(
        choice: &'a dyn Fn(&[f64]) -> Choice,
        watcher: &'a (dyn Watcher + Sync),
        columns: usize,
        gap: f64,
        to_objective: &'a dyn Fn(f64) -> f64,
    ) -> Self {
        let best = watcher.best().map(to_objective);
        Watching { choice, watcher, columns, gap, to_objective, best }
    }

    /// Registers the callback on `highs` (a `Highs` instance) for this state. The state must
    /// outlive every solve of that instance.
    pub(super) fn attach(&mut self, highs: *mut c_void) -> bool {
        // SAFETY: `highs` is a live instance; `self` outlives its solves (the caller's promise).
        unsafe {
            let data = (self as *mut Watching<'a>).cast::<c_void>();
            highs_sys::Highs_setCallback(highs, Some(on_event), data) == highs_sys::STATUS_OK
                && highs_sys::Highs_startCallback(highs, highs_sys::kHighsCallbackMipImprovingSolution)
                    == highs_sys::STATUS_OK
                && highs_sys::Highs_startCallback(highs, highs_sys::kHighsCallbackMipInterrupt) == highs_sys::STATUS_OK
        }
    }

    fn improving(&mut self, columns: &[f64]) {
        if let Some(best) = self.watcher.found(&(self.choice)(columns)) {
            self.best = Some((self.to_objective)(best));
        }
    }

    fn done(&self, bound: f64) -> bool {
        self.best.is_some_and(|best| bound.is_finite() && bound >= best * (1.0 - self.gap))
    }
}

unsafe extern "C" fn on_event(
    kind: c_int,
    _message: *const c_char,
    out: *const highs_sys::HighsCallbackDataOut,
    input: *mut highs_sys::HighsCallbackDataIn,
    data: *mut c_void,
) {
    // A panic must not unwind into HiGHS: it is dropped (the search goes on unwatched).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `data` is the `Watching` `attach` registered, alive for the solve; `out` and
        // `input` are HiGHS's, valid for this call.
        let (state, out) = unsafe { (&mut *data.cast::<Watching<'_>>(), &*out) };
        if kind == highs_sys::kHighsCallbackMipImprovingSolution as c_int && !out.mip_solution.is_null() {
            // SAFETY: an improving solution has a value per column of the model.
            let columns = unsafe { std::slice::from_raw_parts(out.mip_solution, state.columns) };
            state.improving(columns);
        } else if kind == highs_sys::kHighsCallbackMipInterrupt as c_int
            && state.done(out.mip_dual_bound)
            && !input.is_null()
        {
            // SAFETY: as above.
            unsafe { (*input).user_interrupt = 1 };
        }
    }));
}
