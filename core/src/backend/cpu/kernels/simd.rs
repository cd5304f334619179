//! Wider vectors for the elementwise loops, chosen at run time.
//!
//! The crate is compiled for baseline x86-64 (SSE2), so plain loops vectorise four f32 lanes
//! wide at most. [`wide_fn!`] compiles a loop twice more, with AVX2 and FMA and with AVX-512,
//! and calls the widest copy the CPU runs: eight or sixteen lanes (the AVX-512 copy takes GELU
//! and its gradient from 12 to 8 ms per GPT step on the development machine). Results are
//! bit-identical whichever runs: Rust never contracts `a * b + c` into a fused multiply-add by
//! itself, every lane computes what the scalar loop computes, and reductions keep their own
//! fixed [`LANES`] accumulators whatever the vector width (a test runs a training step's kernels
//! under each copy and compares their bits).

use std::mem::MaybeUninit;
use std::sync::OnceLock;

/// In tests, the widest copy [`wide_fn!`] may pick (0 baseline, 1 AVX2, 2 AVX-512), so that a
/// test can run every copy on a CPU that has them all and compare their bits.
#[cfg(test)]
pub(crate) static WIDTH_CAP: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);

#[cfg(test)]
fn width_allows(tier: u8) -> bool {
    WIDTH_CAP.load(std::sync::atomic::Ordering::Relaxed) >= tier
}

#[cfg(not(test))]
#[inline(always)]
fn width_allows(_tier: u8) -> bool {
    true
}

/// Whether the CPU has AVX-512 (F, BW, DQ, VL) besides AVX2 and FMA (checked once).
#[inline]
pub(crate) fn avx512() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    width_allows(2)
        && *HAS.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                std::is_x86_feature_detected!("avx2")
                    && std::is_x86_feature_detected!("fma")
                    && std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512dq")
                    && std::is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                false
            }
        })
}

/// Whether the CPU has AVX2 and FMA (checked once).
#[inline]
pub(crate) fn avx2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    width_allows(1)
        && *HAS.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                false
            }
        })
}

/// Defines `fn name<generics>(args) -> ret { body }` compiled three times: with AVX-512, with
/// AVX2 + FMA, and at baseline width; each call runs the widest the CPU has. The body is written once; the
/// generic names are repeated in brackets for the call:
///
/// ```ignore
/// wide_fn! {
///     fn double<[T: Float]>[T](x: &[T]) -> Vec<T> { x.iter().map(|&v| v + v).collect() }
/// }
/// ```
///
/// (A closure passed to a `#[target_feature]` function is not inlined into it, and would run at
/// baseline width: hence a macro that duplicates the body.)
macro_rules! wide_fn {
    ($(#[$meta:meta])* $vis:vis fn $name:ident<[$($gen:tt)*]>[$($g:ident),*]($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$meta])*
        #[inline]
        $vis fn $name<$($gen)*>($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[allow(clippy::too_many_arguments)]
                #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")]
                unsafe fn with_avx512<$($gen)*>($($arg: $ty),*) -> $ret $body
                #[allow(clippy::too_many_arguments)]
                #[target_feature(enable = "avx2,fma")]
                unsafe fn with_avx2<$($gen)*>($($arg: $ty),*) -> $ret $body
                if $crate::backend::cpu::kernels::simd::avx512() {
                    // SAFETY: the CPU supports AVX-512 F/BW/DQ/VL, AVX2 and FMA (checked at run
                    // time just above).
                    return unsafe { with_avx512::<$($g),*>($($arg),*) };
                }
                if $crate::backend::cpu::kernels::simd::avx2() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked at run time just above).
                    return unsafe { with_avx2::<$($g),*>($($arg),*) };
                }
            }
            $body
        }
    };
}
pub(crate) use wide_fn;

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
    pool::run(threads.min(n).saturating_sub(1), &work);
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
mod pool {
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

wide_fn! {
    /// Writes every element of `out` (`x` is at least as long).
    fn map_into<[T: Copy, U: Copy, F: Fn(T) -> U]>[T, U, F](out: &mut [MaybeUninit<U>], x: &[T], f: &F) -> () {
        for (o, &v) in out.iter_mut().zip(x) {
            o.write(f(v));
        }
    }
}

wide_fn! {
    /// Writes every element of `out` (`a` and `b` are at least as long).
    fn zip_into<[T: Copy, U: Copy, F: Fn(T, T) -> U]>[T, U, F](out: &mut [MaybeUninit<U>], a: &[T], b: &[T], f: &F) -> () {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            o.write(f(x, y));
        }
    }
}

/// `f` of every element: vectorised, and threaded for large slices.
pub(crate) fn map<T: Copy + Sync, U: Copy + Send, F: Fn(T) -> U + Sync>(x: &[T], f: F) -> Vec<U> {
    // SAFETY: each chunk `at..at + len` of the output has its input `x[at..at + len]`, and
    // `map_into` writes every element of the chunk.
    unsafe { par_fill(x.len(), 1, |at, chunk| map_into(chunk, &x[at..at + chunk.len()], &f)) }
}

/// `f` of every pair of elements of two slices (as long as the shorter): vectorised, and
/// threaded for large slices.
pub(crate) fn zip<T: Copy + Sync, U: Copy + Send, F: Fn(T, T) -> U + Sync>(a: &[T], b: &[T], f: F) -> Vec<U> {
    let n = a.len().min(b.len());
    let fill = |at: usize, chunk: &mut [MaybeUninit<U>]| {
        zip_into(chunk, &a[at..at + chunk.len()], &b[at..at + chunk.len()], &f)
    };
    // SAFETY: both inputs have at least `n` elements, and `zip_into` writes every element.
    unsafe { par_fill(n, 1, fill) }
}

// The lane loops index on purpose: fixed-size indexed loops are what the compiler vectorises.
/// Accumulators a row reduction keeps: the loop carries eight independent sums (which the
/// compiler keeps in one vector register) instead of one long dependency chain.
pub(crate) const LANES: usize = 8;

/// `Σ f(x[i])` over eight interleaved partial sums, combined in a fixed order: the same result
/// on every run, every thread count and every strategy (not the left-to-right sum's bits).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(crate) fn lane_sum<T: super::Float>(x: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] += f(c[l]);
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] += f(v);
    }
    combine(acc)
}

/// `Σ f(a[i], b[i])` as [`lane_sum`] does it.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(crate) fn lane_sum2<T: super::Float>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> T {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [T::ZERO; LANES];
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            acc[l] += f(x[l], y[l]);
        }
    }
    for (l, (&x, &y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        acc[l] += f(x, y);
    }
    combine(acc)
}

/// The NaN-propagating maximum of `x` (−∞ for an empty row), over eight lanes.
#[inline(always)]
pub(crate) fn lane_max<T: super::Float>(x: &[T]) -> T {
    lane_max_by::<T, LANES>(x, |m, v| if v > m || v.is_nan() { v } else { m })
}

/// The maximum of `x` as `pick(max so far, element)` chooses it (−∞ for an empty row), over
/// `W` lanes folded pairwise. A maximum is exact in any order, so the lane count changes no
/// result; `pick` decides what a NaN does.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(crate) fn lane_max_by<T: super::Float, const W: usize>(x: &[T], pick: impl Fn(T, T) -> T) -> T {
    let mut acc = [T::NEG_INFINITY; W];
    let mut chunks = x.chunks_exact(W);
    for c in &mut chunks {
        for l in 0..W {
            acc[l] = pick(acc[l], c[l]);
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] = pick(acc[l], v);
    }
    fold_pairwise(acc, pick)
}

/// The lanes' sums added pairwise: (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then 0+1.
#[inline(always)]
fn combine<T: super::Float>(acc: [T; LANES]) -> T {
    fold_pairwise(acc, |a, b| a + b)
}

/// `acc` folded by `op` in halves: lane `l` with lane `l + N/2`, then with `l + N/4`, … (`N` a
/// power of two), so that the fold is log₂ N dependent steps in a fixed order.
#[inline(always)]
pub(crate) fn fold_pairwise<T: Copy, const N: usize>(mut acc: [T; N], op: impl Fn(T, T) -> T) -> T {
    let mut width = N / 2;
    while width > 0 {
        for l in 0..width {
            acc[l] = op(acc[l], acc[l + width]);
        }
        width /= 2;
    }
    acc[0]
}

/// `e^x` in f32 without a libm call, so loops over it vectorise: Cephes' `expf` (range
/// reduction by ln 2 in two parts, a degree-6 polynomial, the exponent put in by bits), within
/// 2 ulp of libm. Below −87.3 it is 0 (as `exp` underflows there); NaN stays NaN.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const HI: f32 = 88.3;
    const LO: f32 = -87.3;
    let under = x < LO;
    let xc = if x > HI {
        HI
    } else if under {
        LO
    } else {
        x
    };
    // Round x·log2(e) to the nearest integer (1.5·2^23 pushes the fraction out of the mantissa).
    let magic = 12_582_912.0f32;
    let shifted = xc * std::f32::consts::LOG2_E + magic;
    let n = shifted - magic;
    let r = xc - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = 1.987_569_1e-4f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 0.166_666_65;
    let p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // `shifted` is `magic + n` exactly (|n| ≤ 128, and its ulp is 1), so `n` is also its low
    // mantissa bits: the exponent comes from integer ops, where a float-to-int cast would be
    // a saturating one that the compiler does not vectorise.
    let n_bits = (shifted.to_bits() as i32).wrapping_sub(magic.to_bits() as i32);
    let scale = f32::from_bits((n_bits.wrapping_add(127) as u32) << 23);
    let e = y * scale;
    if under {
        0.0
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_f32_is_within_two_ulp_of_libm() {
        let mut worst = 0u32;
        for i in -87_000..88_000 {
            let x = i as f32 * 1e-3 + 0.000_123;
            let (got, want) = (exp_f32(x), x.exp());
            worst = worst.max(got.to_bits().abs_diff(want.to_bits()));
        }
        assert!(worst <= 2, "{worst} ulp");
        assert_eq!(exp_f32(-1e9), 0.0);
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn lane_reductions() {
        let x: Vec<f64> = (0..37).map(|i| i as f64 * 0.5 - 3.0).collect();
        let want: f64 = x.iter().sum();
        assert!((lane_sum(&x, |v| v) - want).abs() < 1e-12);
        assert!((lane_sum2(&x, &x, |a, b| a * b) - x.iter().map(|v| v * v).sum::<f64>()).abs() < 1e-9);
        assert_eq!(lane_max(&x), 15.0);
        assert_eq!(lane_max::<f64>(&[]), f64::NEG_INFINITY);
        let mut with_nan = x.clone();
        with_nan[3] = f64::NAN;
        assert!(lane_max(&with_nan).is_nan());
        // In the remainder past the last whole chunk of lanes too.
        let mut nan_in_tail = x.clone();
        nan_in_tail[35] = f64::NAN;
        assert!(lane_max(&nan_in_tail).is_nan());
        // A `pick` that skips NaN gives the largest number, at any lane count.
        let skip_nan = |m: f64, v: f64| if v > m { v } else { m };
        assert_eq!(lane_max_by::<f64, 16>(&with_nan, skip_nan), 15.0);
        assert_eq!(lane_max_by::<f64, 4>(&nan_in_tail, skip_nan), 15.0);
    }

    #[test]
    fn map_and_zip_are_the_scalar_loops() {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 100.0).collect();
        assert_eq!(map(&x, |v| v * 2.0 + 1.0), x.iter().map(|v| v * 2.0 + 1.0).collect::<Vec<_>>());
        assert_eq!(zip(&x, &x[1..], |a, b| a - b).len(), 999);
    }
}
