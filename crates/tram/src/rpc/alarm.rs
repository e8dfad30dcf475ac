//! A connection's housekeeping timer (handshake, idle, keepalive, maximum
//! age), kept off the runtime's timer by one thread for the process.
//!
//! Why not a tokio `Sleep`: a runtime with any timer pending parks its
//! idle workers in `epoll_wait` with a timeout, and a kernel sleep with a
//! timeout arms and cancels a high-resolution timer around every wait. A
//! server with one call in flight sleeps and wakes once a call, so every
//! connection's keepalive, seconds away, would put that price on every
//! call. These deadlines are coarse and rarely move (a keepalive's is
//! checked when it rings, not moved by every read), so one thread keeps
//! them all: it sleeps until the earliest, rings the alarms due, and wakes
//! their tasks. A runtime whose own timers are empty then parks without a
//! timeout. A client's unary calls ring their deadlines through one alarm
//! a connection (`client/deadlines.rs`); other deadlines (a server's
//! handler that waits, streams) stay on the runtime's timer.
//!
//! Polling an alarm that has not rung costs a waker comparison and a load:
//! a connection task is polled at every read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use parking_lot::{Condvar, Mutex};
use tokio::time::Instant;

pub(crate) struct Alarm {
    bell: Arc<Bell>,
    deadline: Instant,
    /// Where it waits in the clock's schedule; `None` once rung (or made
    /// due already).
    key: Option<Key>,
    /// The task's waker as last handed to `bell` (compared, never woken,
    /// here: the poller owns it, so the comparison takes no lock).
    task: Option<Waker>,
}

struct Bell {
    /// The number of the deadline it waits for, with [`RUNG`] set once
    /// that deadline has passed: a ring meant for a deadline since moved
    /// finds another number and is lost, as it should be.
    state: AtomicU64,
    task: Mutex<Option<Waker>>,
}

const RUNG: u64 = 1 << 63;

impl Bell {
    fn ring(&self, id: u64) {
        let rang = self
            .state
            .compare_exchange(id, id | RUNG, Ordering::Release, Ordering::Relaxed)
            .is_ok();
        if rang {
            if let Some(task) = self.task.lock().as_ref() {
                task.wake_by_ref();
            }
        }
    }

    fn rung(&self) -> bool {
        self.state.load(Ordering::Acquire) & RUNG != 0
    }
}

/// A deadline and a number unique to the alarm that set it.
type Key = (std::time::Instant, u64);

/// The process's alarms and the thread that rings them.
struct Clock {
    schedule: Mutex<Schedule>,
    /// Signalled when an alarm goes ahead of the earliest.
    sooner: Condvar,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Schedule {
    due: BTreeMap<Key, Arc<Bell>>,
    /// Whether the ringing thread runs (it is started by the first alarm
    /// that waits, and started again there if the system refused it).
    running: bool,
}

fn clock() -> &'static Clock {
    static CLOCK: OnceLock<Clock> = OnceLock::new();
    CLOCK.get_or_init(|| Clock {
        schedule: Mutex::new(Schedule::default()),
        sooner: Condvar::new(),
        next_id: AtomicU64::new(0),
    })
}

impl Clock {
    /// Schedules `bell` to ring at `at`, under a number of its own.
    fn add(&'static self, at: std::time::Instant, bell: &Arc<Bell>) -> Key {
        // From 1: a bell whose state is 0 waits for nothing.
        let key = (at, self.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        bell.state.store(key.1, Ordering::Relaxed);
        let mut s = self.schedule.lock();
        let first = s.due.first_key_value().is_none_or(|(k, _)| key < *k);
        s.due.insert(key, bell.clone());
        if !s.running {
            s.running = self.start();
        } else if first {
            self.sooner.notify_one();
        }
        key
    }

    fn remove(&self, key: &Key) {
        self.schedule.lock().due.remove(key);
    }

    /// Starts the ringing thread; whether it runs. Refused (the process is
    /// out of threads), the alarms wait until the next one is set tries
    /// again, and the refusal is logged.
    fn start(&'static self) -> bool {
        let started = std::thread::Builder::new()
            .name("tram-alarm".into())
            .spawn(move || self.ring_due());
        if let Err(e) = &started {
            tracing::error!("tram: cannot start the thread that rings connections' timers: {e}");
        }
        started.is_ok()
    }

    /// The ringing thread: rings every alarm due, then sleeps until the
    /// earliest left or until one goes ahead of it.
    fn ring_due(&self) {
        let mut s = self.schedule.lock();
        loop {
            let now = std::time::Instant::now();
            let mut rung = Vec::new();
            while let Some(entry) = s.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let id = entry.key().1;
                rung.push((id, entry.remove()));
            }
            if !rung.is_empty() {
                // Woken outside the lock: a woken task may set its next
                // alarm at once.
                parking_lot::MutexGuard::unlocked(&mut s, || {
                    rung.iter().for_each(|(id, b)| b.ring(*id))
                });
                continue;
            }
            match s.due.first_key_value().map(|(k, _)| k.0) {
                Some(at) => {
                    self.sooner.wait_until(&mut s, at);
                }
                None => self.sooner.wait(&mut s),
            }
        }
    }
}

impl Alarm {
    /// An alarm due at `at`.
    pub(crate) fn new(at: Instant) -> Alarm {
        let mut alarm = Alarm {
            bell: Arc::new(Bell {
                state: AtomicU64::new(0),
                task: Mutex::new(None),
            }),
            deadline: at,
            key: None,
            task: None,
        };
        alarm.set(at);
        alarm
    }

    /// When it is due.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Makes it due at `at` instead.
    pub(crate) fn reset(&mut self, at: Instant) {
        if let Some(key) = self.key.take() {
            clock().remove(&key);
        }
        self.deadline = at;
        self.set(at);
    }

    fn set(&mut self, at: Instant) {
        let at = at.into_std();
        if at <= std::time::Instant::now() {
            self.bell.state.store(RUNG, Ordering::Relaxed);
        } else {
            self.key = Some(clock().add(at, &self.bell));
        }
    }

    /// Whether it has rung (and not been reset since).
    pub(crate) fn rung(&self) -> bool {
        self.bell.rung()
    }

    /// Ready once the deadline has passed (until a reset); until then the
    /// task polling it is woken when it does.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            // Handed over before the bell is looked at: a ring after the
            // look wakes this waker (the bell's lock orders the two).
            *self.bell.task.lock() = Some(cx.waker().clone());
            self.task = Some(cx.waker().clone());
        }
        if self.bell.rung() {
            // Rung: the clock has let it go.
            self.key = None;
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    #[cfg(test)]
    fn is_scheduled(key: &Key) -> bool {
        clock().schedule.lock().due.contains_key(key)
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            clock().remove(&key);
        }
    }
}

#[cfg(test)]
mod tests;
