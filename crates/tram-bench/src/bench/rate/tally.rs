//! The open loop's bookkeeping, which its calls share nothing to keep: as
//! the closed loop's callers do (`runner::load`), each thread records the
//! calls that end on it in a shard of its own, and the step adds the
//! shards up at its end.
//!
//! A call's task carries copies ([`Ender`]) and no reference count: a
//! lock on one histogram, a counter every call adds to, a count of the
//! step's state and of its payload would each move a cache line between
//! the client's workers on every call, at 100–200 ns a crossing on the
//! 2-vCPU guests. That is the harness's cost, not the system's, and it
//! would fall on every system alike, lowering all their rates and
//! adding its lock's waits to every tail.
//!
//! The shards are the process's, so one step runs at a time ([`Tally`]
//! holds a lock for it), and a call that ends after its step has been
//! added up (past the step's grace) is left out by its step's number.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::runner::clock::Stamp;
use crate::runner::latency::{Hist, new_hist};
use crate::runner::load::thread_number;

/// Shards: more than the threads that end calls (a runtime's workers, the
/// floor's reader), so that two rarely share one.
const SHARDS: usize = 16;

/// One thread's share of a step's calls, on cache lines of its own.
#[repr(align(128))]
struct Shard {
    /// Latency of the window's answered calls (made once, then reset by
    /// each step).
    hist: Mutex<Option<Hist>>,
    /// Calls answered inside the window (by completion time).
    completed: AtomicU64,
    /// Calls of the window that failed.
    errors: AtomicU64,
    /// Every call that ended, for the calls in flight.
    ended: AtomicU64,
}

impl Shard {
    const fn new() -> Shard {
        Shard {
            hist: Mutex::new(None),
            completed: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            ended: AtomicU64::new(0),
        }
    }

    fn hist(&self) -> MutexGuard<'_, Option<Hist>> {
        // A panic while recording leaves a histogram, not a broken one.
        self.hist.lock().unwrap_or_else(|e| e.into_inner())
    }
}

static SHARDS_OF_THE_PROCESS: [Shard; SHARDS] = [const { Shard::new() }; SHARDS];

/// The step whose calls the shards take; 0 between steps.
static STEP: AtomicU64 = AtomicU64::new(0);

/// Held for a step's length: one step at a time.
static ONE_STEP: Mutex<()> = Mutex::new(());

/// The shards, for one step.
pub(super) struct Tally {
    number: u64,
    _one: MutexGuard<'static, ()>,
}

/// What a call's task needs to record its end: copies only.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ender {
    step: u64,
    epoch: Stamp,
    /// The measuring window, in nanoseconds from `epoch`.
    window: (u64, u64),
}

/// What a step's calls added up to.
pub(super) struct Totals {
    pub(super) hist: Hist,
    pub(super) completed: u64,
    pub(super) errors: u64,
    pub(super) ended: u64,
}

impl Tally {
    /// Empties the shards for a step whose window is `window` nanoseconds
    /// from `epoch`, and takes them until [`Tally::totals`].
    pub(super) fn begin(epoch: Stamp, window: (u64, u64)) -> (Tally, Ender) {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let one = ONE_STEP.lock().unwrap_or_else(|e| e.into_inner());
        for shard in &SHARDS_OF_THE_PROCESS {
            match &mut *shard.hist() {
                Some(h) => h.reset(),
                none => *none = Some(new_hist()),
            }
            shard.completed.store(0, Ordering::Relaxed);
            shard.errors.store(0, Ordering::Relaxed);
            shard.ended.store(0, Ordering::Relaxed);
        }
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        STEP.store(number, Ordering::Release);
        let ender = Ender {
            step: number,
            epoch,
            window,
        };
        (Tally { number, _one: one }, ender)
    }

    /// Adds the shards up; calls that end later are left out.
    pub(super) fn totals(self) -> Totals {
        debug_assert_eq!(STEP.load(Ordering::Relaxed), self.number);
        STEP.store(0, Ordering::Release);
        let mut totals = Totals {
            hist: new_hist(),
            completed: 0,
            errors: 0,
            ended: 0,
        };
        for shard in &SHARDS_OF_THE_PROCESS {
            if let Some(h) = &*shard.hist() {
                // Same bounds on both sides: adding cannot fail.
                let _ = totals.hist.add(h);
            }
            totals.completed += shard.completed.load(Ordering::Relaxed);
            totals.errors += shard.errors.load(Ordering::Relaxed);
            totals.ended += shard.ended.load(Ordering::Relaxed);
        }
        totals
    }
}

/// Calls of the step under way ended so far, answered or not (read by the
/// dispatcher, which cannot hold the [`Tally`]).
pub(super) fn ended() -> u64 {
    SHARDS_OF_THE_PROCESS
        .iter()
        .map(|s| s.ended.load(Ordering::Acquire))
        .sum()
}

impl Ender {
    /// Records a call due at `intended` (nanoseconds from the epoch) as
    /// answered (`ok`) or failed, now, in this thread's shard.
    pub(super) fn finish(&self, intended: u64, ok: bool) {
        if STEP.load(Ordering::Acquire) != self.step {
            return;
        }
        let done = self.epoch.elapsed();
        let (start, end) = self.window;
        let shard = &SHARDS_OF_THE_PROCESS[thread_number() % SHARDS];
        if (start..end).contains(&intended) {
            if ok {
                if let Some(h) = &mut *shard.hist() {
                    h.saturating_record(done.saturating_sub(intended).max(1));
                }
            } else {
                shard.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if ok && (start..end).contains(&done) {
            shard.completed.fetch_add(1, Ordering::Relaxed);
        }
        shard.ended.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls ended on several threads add up to one step's totals, counted
    /// by window; a call of an earlier step is left out of the next.
    #[test]
    fn calls_on_many_threads_add_up_and_a_late_one_is_left_out() {
        let epoch = Stamp::now();
        // The whole test inside the window: intended at 1 ns, done later.
        let window = (0, u64::MAX);
        let (tally, ender) = Tally::begin(epoch, window);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        ender.finish(1, true);
                    }
                    ender.finish(1, false);
                });
            }
        });
        assert_eq!(ended(), 404);
        let totals = tally.totals();
        assert_eq!(totals.hist.len(), 400);
        assert_eq!(
            (totals.completed, totals.errors, totals.ended),
            (400, 4, 404)
        );

        // The same call ending after its step was added up.
        let (next, _) = Tally::begin(epoch, window);
        ender.finish(1, true);
        let totals = next.totals();
        assert_eq!((totals.hist.len(), totals.ended), (0, 0));
    }

    /// A call intended outside the window counts as ended only; one
    /// answered after the window is recorded but not completed in it.
    #[test]
    fn the_window_decides_what_counts() {
        let epoch = Stamp::now();
        let (tally, ender) = Tally::begin(epoch, (1_000, 2_000));
        ender.finish(0, true);
        ender.finish(0, false);
        // Intended inside the window, answered well after it.
        std::thread::sleep(std::time::Duration::from_micros(10));
        ender.finish(1_500, true);
        let totals = tally.totals();
        assert_eq!(totals.hist.len(), 1);
        assert_eq!((totals.completed, totals.errors, totals.ended), (0, 0, 3));
    }
}
