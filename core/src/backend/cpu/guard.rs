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
    /// How long the next serial period lasts.
    period: Duration,
    serial_until: Option<Instant>,
}

impl Default for Record {
    fn default() -> Self {
        Record { balance: 0.0, judged: 0, period: SERIAL_FIRST, serial_until: None }
    }
}

impl Record {
    fn serial_at(&self, now: Instant) -> bool {
        self.serial_until.is_some_and(|until| now < until)
    }

    /// Adds what one job saved against the caller alone (its own time per task, times every
    /// task) to the balance; after every [`WINDOW`] judged jobs, a balance below zero sends the
    /// kernels to one thread for a period, twice as long each time the probe after it loses
    /// again. A single stalled job among many that win does not: its loss counts for at most
    /// its own time.
    fn judge(&mut self, tasks: usize, mine: usize, times: Times, now: Instant) {
        let wall = times.worked + times.waited;
        if wall < JUDGED_MIN {
            return;
        }
        let alone = times.worked.as_secs_f64() * tasks as f64 / mine.max(1) as f64;
        let saved = ((1.0 - MARGIN) * alone - wall.as_secs_f64()).max(-alone);
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
    use super::{Record, Times};
    use std::time::{Duration, Instant};

    /// Jobs that take longer than the caller alone would (pool threads without a core) send the
    /// kernels to one thread for a while, twice as long when the probe after it loses; jobs
    /// that win, or a few stalled ones among many that win, keep them parallel.
    #[test]
    fn jobs_that_lose_to_one_thread_make_the_kernels_serial_for_a_while() {
        let us = Duration::from_micros;
        let win = || Times { worked: us(100), waited: us(5) }; // half the tasks each
        let loss = || Times { worked: us(100), waited: us(100) }; // the helper ran nothing
        let stall = || Times { worked: us(100), waited: us(5000) }; // a helper descheduled
        let t0 = Instant::now();
        let mut r = Record::default();
        for k in 0..64 {
            r.judge(8, if k % 8 == 0 { 8 } else { 4 }, if k % 8 == 0 { stall() } else { win() }, t0);
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
            quiet.judge(8, 8, Times { worked: us(10), waited: us(10) }, t0);
        }
        assert!(!quiet.serial_at(t0));
    }
}
