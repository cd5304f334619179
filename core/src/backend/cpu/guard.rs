//! Whether a backend's pool threads get a core of their own: a record of what its parallel
//! kernels saved against the calling thread alone, which sends the kernels to one thread for a
//! while when they lose.
//!
//! Where another process keeps a core busy, a pool thread that shares that core runs in slices
//! of the scheduler's period (milliseconds) and the kernel's caller waits for the chunk it
//! began; kernels take tens of microseconds, so such waits cost more than the helpers save
//! (measured: the gpt step took 1.4–1.7× one thread's time with a busy loop on one of two
//! cores, docs/performance.md "Threads on a busy machine"). One thread computes the same bits,
//! so going serial changes no result, only the time.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How one parallel job went on the calling thread.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Times {
    /// Running its own share of the tasks.
    pub worked: Duration,
    /// Then waiting for the pool's threads to finish theirs.
    pub waited: Duration,
    /// Since the caller's previous parallel job began (kernels and the serial code between
    /// them), the time the caller was runnable but not running: its core taken by another
    /// thread ([`Descheduled`]).
    pub descheduled: Duration,
}

/// Gaps between two parallel jobs longer than this are the caller's own business (user code, a
/// sleep, another backend), not a training step's serial code: not judged.
const GAP_MAX: Duration = Duration::from_millis(5);

/// A gap in which the caller was off its core less than `1 / SHARED_FRACTION` of the time does
/// not count.
const SHARED_FRACTION: u32 = 4;

/// The calling thread's clocks at its last parallel job, to tell how long it was descheduled
/// since.
///
/// Where a busy process holds one of two cores, the scheduler sometimes leaves the caller on that
/// core and a pool thread on the free one: each kernel still gains from the helper, but
/// everything the caller does between kernels runs at half speed, and the step took 1.1–1.5× one
/// thread's time (which the scheduler moves to the free core). The time the caller was kept off
/// its core is the parallel pool's loss; with one thread it goes to the free core.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Descheduled {
    wall: Instant,
    cpu: Duration,
}

impl Descheduled {
    /// The clocks now, where the thread's CPU clock can be read.
    pub(crate) fn now() -> Option<Descheduled> {
        Some(Descheduled { wall: Instant::now(), cpu: thread_cpu_time()? })
    }

    /// The time between `self` and `later` the thread was not running, where the gap is short
    /// enough to judge (else zero).
    pub(crate) fn until(self, later: Descheduled) -> Duration {
        let wall = later.wall.saturating_duration_since(self.wall);
        if wall > GAP_MAX {
            return Duration::ZERO;
        }
        let off = wall.saturating_sub(later.cpu.saturating_sub(self.cpu));
        // A core shared with a busy process runs the caller about half the time; the odd
        // interrupt or a VM's stolen slice is noise, not a shared core.
        if off * SHARED_FRACTION < wall {
            return Duration::ZERO;
        }
        off
    }
}

/// The CPU time the calling thread has used.
#[cfg(unix)]
fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec the call writes; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    ok.then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(not(unix))]
fn thread_cpu_time() -> Option<Duration> {
    None
}

/// Jobs shorter than this tell nothing (timer and wake-up noise).
const JUDGED_MIN: Duration = Duration::from_micros(30);
/// Judged jobs between verdicts where the balance stays above zero.
const WINDOW: u32 = 16;
/// Judged jobs after which a balance below zero is a verdict at once: on a busy core each lost
/// job costs up to a scheduler slice (milliseconds), so waiting out a whole window of them on
/// every probe cost the d256 step a tenth of its time.
const EARLY: u32 = 4;
/// The running balance's decay per judged job (a window of about 30 jobs).
const DECAY: f64 = 0.97;
/// The share of the caller's time alone a job must save to count as a win: a job that saves
/// less is not worth the stalls a shared core brings now and then.
const MARGIN: f64 = 0.1;
/// The most a job's loss counts for, in multiples of its time alone: one stall on an idle machine
/// (an interrupt, a VM's stolen slice) does not outweigh a window of wins, but a busy core's
/// stalls, each a scheduler slice (milliseconds) on jobs of tens of microseconds, do.
const STALL_MAX: f64 = 4.0;
/// The first serial period; doubled while probes keep losing, up to [`SERIAL_MAX`].
const SERIAL_FIRST: Duration = Duration::from_millis(50);
const SERIAL_MAX: Duration = Duration::from_secs(2);

/// One backend pool's record (see the module's doc).
#[derive(Debug, Default)]
pub(crate) struct Guard {
    record: Mutex<Record>,
}

impl Guard {
    /// Whether the kernels should run on one thread now. A record another kernel is updating
    /// answers "no": the guard never makes a kernel wait.
    pub(crate) fn serial(&self) -> bool {
        let Ok(record) = self.record.try_lock() else { return false };
        record.serial_at(Instant::now())
    }

    /// Scores one parallel job of `tasks` tasks, of which the calling thread ran `mine`.
    pub(crate) fn judge(&self, tasks: usize, mine: usize, times: Times) {
        let mut record = self.record.lock().unwrap_or_else(|e| e.into_inner());
        record.judge(tasks, mine, times, Instant::now());
    }
}

/// The time parallel jobs saved lately (negative: lost), and until when the kernels run on one
/// thread.
#[derive(Debug)]
struct Record {
    /// Seconds saved against the caller alone, decayed per judged job.
    balance: f64,
    /// Judged jobs since the last verdict.
    judged: u32,
    /// The caller's descheduled time since the last judged job (jobs too short to judge add
    /// theirs here).
    descheduled: Duration,
    /// How long the next serial period lasts.
    period: Duration,
    serial_until: Option<Instant>,
}

impl Default for Record {
    fn default() -> Self {
        Record { balance: 0.0, judged: 0, descheduled: Duration::ZERO, period: SERIAL_FIRST, serial_until: None }
    }
}

impl Record {
    fn serial_at(&self, now: Instant) -> bool {
        self.serial_until.is_some_and(|until| now < until)
    }

    /// Adds what one job saved against the caller alone (its own time per task, times every
    /// task) to the balance; after every [`WINDOW`] judged jobs, a balance below zero sends the
    /// kernels to one thread for a period, twice as long each time the probe after it loses
    /// again. A stalled job among many that win does not: its loss counts for at most
    /// [`STALL_MAX`] times its time alone. The caller's time off its core since the last
    /// judged job counts as lost too.
    fn judge(&mut self, tasks: usize, mine: usize, times: Times, now: Instant) {
        let wall = times.worked + times.waited;
        self.descheduled += times.descheduled;
        if wall < JUDGED_MIN {
            return;
        }
        let descheduled = std::mem::take(&mut self.descheduled).as_secs_f64();
        let alone = times.worked.as_secs_f64() * tasks as f64 / mine.max(1) as f64;
        // A stalled job or gap counts for at most a few times the job's own time alone (see above).
        let saved = ((1.0 - MARGIN) * alone - wall.as_secs_f64() - descheduled).max(-STALL_MAX * alone);
        self.balance = self.balance * DECAY + saved;
        self.judged += 1;
        let lost = self.balance < 0.0;
        if self.judged < WINDOW && !(lost && self.judged >= EARLY) {
            return;
        }
        self.judged = 0;
        if lost {
            self.serial_until = Some(now + self.period);
            self.period = (self.period * 2).min(SERIAL_MAX);
            self.balance = 0.0;
        } else {
            self.period = SERIAL_FIRST;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Descheduled, Record, Times};
    use std::time::{Duration, Instant};

    /// Jobs that take longer than the caller alone would (pool threads without a core) send the
    /// kernels to one thread for a while, twice as long when the probe after it loses; jobs
    /// that win, or a few stalled ones among many that win, keep them parallel.
    #[test]
    fn jobs_that_lose_to_one_thread_make_the_kernels_serial_for_a_while() {
        let us = Duration::from_micros;
        let win = || Times { worked: us(100), waited: us(5), descheduled: us(0) }; // half the tasks each
        let loss = || Times { worked: us(100), waited: us(100), descheduled: us(0) }; // the helper ran nothing
        let stall = || Times { worked: us(100), waited: us(5000), descheduled: us(0) }; // a helper descheduled
        let t0 = Instant::now();
        let mut r = Record::default();
        for k in 0..64 {
            r.judge(8, if k % 8 == 7 { 8 } else { 4 }, if k % 8 == 7 { stall() } else { win() }, t0);
        }
        assert!(!r.serial_at(t0));
        let mut losses = 0;
        while !r.serial_at(t0) {
            r.judge(8, 8, loss(), t0);
            losses += 1;
            assert!(losses <= 64, "64 lost jobs and still parallel");
        }
        assert!(r.serial_at(t0 + Duration::from_millis(49)) && !r.serial_at(t0 + Duration::from_millis(51)));
        // The probe after it: lost jobs end it after EARLY of them, not a whole window.
        let t1 = t0 + Duration::from_millis(60);
        for _ in 0..super::EARLY {
            assert!(!r.serial_at(t1));
            r.judge(8, 8, loss(), t1);
        }
        assert!(r.serial_at(t1 + Duration::from_millis(99)) && !r.serial_at(t1 + Duration::from_millis(101)));
        // Short jobs are not judged at all.
        let mut quiet = Record::default();
        for _ in 0..64 {
            quiet.judge(8, 8, Times { worked: us(10), waited: us(10), descheduled: us(0) }, t0);
        }
        assert!(!quiet.serial_at(t0));
    }

    /// Jobs that win on their own, while the caller is kept off its core half the time between
    /// them (a busy process on its core, the pool's thread on the free one), send the kernels to
    /// one thread; the same jobs with the caller on its own core do not.
    #[test]
    fn a_caller_that_shares_its_core_makes_the_kernels_serial() {
        let us = Duration::from_micros;
        let t0 = Instant::now();
        let job = |descheduled| Times { worked: us(60), waited: us(5), descheduled };
        let mut own_core = Record::default();
        let mut shared = Record::default();
        for _ in 0..64 {
            own_core.judge(8, 4, job(us(0)), t0);
            shared.judge(8, 4, job(us(150)), t0);
        }
        assert!(!own_core.serial_at(t0));
        assert!(shared.serial_at(t0));
    }

    /// The time a caller was off its core between two jobs: counted when it is a shared core's
    /// share of the gap, not for the odd interrupt, nor across a gap too long to be a step's.
    #[test]
    fn descheduled_time_counts_on_a_shared_core_only() {
        let us = Duration::from_micros;
        let t0 = Instant::now();
        let at = |wall: u64, cpu: u64| Descheduled { wall: t0 + us(wall), cpu: us(cpu) };
        assert_eq!(at(0, 0).until(at(1000, 500)), us(500));
        assert_eq!(at(0, 0).until(at(1000, 900)), us(0));
        assert_eq!(at(0, 0).until(at(10_000, 5000)), us(0));
        assert!(Descheduled::now().is_some_and(|a| Descheduled::now().is_some_and(|b| a.until(b) <= us(1000))));
    }
}
