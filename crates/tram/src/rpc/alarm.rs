//! A connection's housekeeping timer (handshake, idle, keepalive, maximum
//! age), kept off tokio's timer wheel by a thread of the process's own.
//!
//! While any timer is in tokio's wheel, a worker that parks reads the
//! clock, looks through the wheel and sleeps in `epoll_wait` with a
//! timeout, which arms a kernel timer and cancels it on waking; under a
//! hypervisor, programming the CPU's timer is an exit to the host. With
//! few calls in flight a worker parks at every call, so a connection's
//! far-off deadlines (seconds to minutes, nearly never due) cost every call
//! on both sides. The process's alarm thread keeps them instead: it sleeps
//! until the earliest, and wakes a connection's task only when its own
//! alarm is due. Moving a deadline later, as traffic does, is one store;
//! the thread finds the new deadline when the old one comes. Earlier
//! deadlines, new alarms and dropped ones take the thread's lock.
//!
//! These deadlines follow the real clock: tokio's paused time (its
//! `test-util`) does not move them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

/// Not in the thread's queue.
const UNARMED: u64 = u64::MAX;

pub(crate) struct Alarm {
    at: Instant,
    bell: Arc<Bell>,
    /// The task's waker as last handed to `bell` (compared, never woken,
    /// here: the poller owns it, so the comparison takes no lock).
    task: Option<Waker>,
}

/// What the alarm thread holds of an alarm.
struct Bell {
    id: u64,
    /// The alarm's deadline, in nanoseconds from `EPOCH`.
    due: AtomicU64,
    /// When the thread's queue holds it (`UNARMED`: it does not); written
    /// under the queue's lock only.
    armed: AtomicU64,
    rung: AtomicBool,
    task: parking_lot::Mutex<Option<Waker>>,
}

impl Bell {
    fn ring(&self) {
        self.rung.store(true, Ordering::Release);
        if let Some(task) = self.task.lock().as_ref() {
            task.wake_by_ref();
        }
    }
}

impl Alarm {
    /// An alarm due at `at`.
    pub(crate) fn new(at: Instant) -> Alarm {
        let due = nanos(at);
        let mut q = queue();
        let id = q.next_id;
        q.next_id += 1;
        let bell = Arc::new(Bell {
            id,
            due: AtomicU64::new(due),
            armed: AtomicU64::new(UNARMED),
            rung: AtomicBool::new(false),
            task: parking_lot::Mutex::new(None),
        });
        q.arm(&bell, due);
        Alarm {
            at,
            bell,
            task: None,
        }
    }

    /// When it is due.
    pub(crate) fn deadline(&self) -> Instant {
        self.at
    }

    /// Makes it due at `at` instead.
    pub(crate) fn reset(&mut self, at: Instant) {
        self.at = at;
        let due = nanos(at);
        self.bell.due.store(due, Ordering::Release);
        // Later than (or as late as) the thread will look: it finds the new
        // deadline then. Earlier: it must know now.
        if due < self.bell.armed.load(Ordering::Acquire) {
            queue().arm(&self.bell, due);
        }
    }

    /// Ready once the deadline has passed; until then the task polling it
    /// is woken when it does.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut moved = false;
        if !self.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            *self.bell.task.lock() = Some(cx.waker().clone());
            self.task = Some(cx.waker().clone());
            moved = true;
        }
        // Cleared before the clock is read: a ring from here on is seen
        // next time.
        if !self.bell.rung.swap(false, Ordering::AcqRel) && !moved {
            return Poll::Pending;
        }
        let due = self.bell.due.load(Ordering::Acquire);
        if now() >= due {
            return Poll::Ready(());
        }
        // Rung for a deadline since moved later (the thread read it just
        // before the move): in the queue again.
        if self.bell.armed.load(Ordering::Acquire) == UNARMED {
            queue().arm(&self.bell, due);
        }
        Poll::Pending
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        queue().disarm(&self.bell);
    }
}

/// The alarms the thread waits for, earliest first.
struct Queue {
    alarms: BTreeMap<(u64, u64), Weak<Bell>>,
    next_id: u64,
    /// The thread, once started.
    started: bool,
}

impl Queue {
    /// Puts `bell` in the queue at `due` (only there).
    fn arm(&mut self, bell: &Arc<Bell>, due: u64) {
        self.disarm(bell);
        let earliest = self.alarms.first_key_value().is_none_or(|(k, _)| due < k.0);
        self.alarms.insert((due, bell.id), Arc::downgrade(bell));
        bell.armed.store(due, Ordering::Release);
        if !self.started {
            self.started = true;
            std::thread::Builder::new()
                .name("tram-alarms".into())
                .spawn(run)
                .expect("spawning tram's alarm thread");
        } else if earliest {
            SERVICE
                .get()
                .expect("made with the queue")
                .wake
                .notify_one();
        }
    }

    fn disarm(&mut self, bell: &Bell) {
        let armed = bell.armed.swap(UNARMED, Ordering::AcqRel);
        if armed != UNARMED {
            self.alarms.remove(&(armed, bell.id));
        }
    }
}

struct Service {
    queue: Mutex<Queue>,
    /// Notified when the earliest deadline moves earlier.
    wake: Condvar,
}

static SERVICE: OnceLock<Service> = OnceLock::new();

fn queue() -> MutexGuard<'static, Queue> {
    let service = SERVICE.get_or_init(|| Service {
        queue: Mutex::new(Queue {
            alarms: BTreeMap::new(),
            next_id: 0,
            started: false,
        }),
        wake: Condvar::new(),
    });
    // The queue is consistent between statements: a panic elsewhere
    // while it was held leaves nothing half done.
    service.queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// The alarm thread: rings each alarm when its deadline comes, and puts
/// back those whose deadline moved later meanwhile.
fn run() {
    let service = SERVICE.get().expect("started from the queue");
    let mut due_now = Vec::new();
    loop {
        let mut q = queue();
        loop {
            let now = now();
            let Some((&(at, id), _)) = q.alarms.first_key_value() else {
                if !due_now.is_empty() {
                    break;
                }
                q = service.wake.wait(q).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            if at > now {
                if !due_now.is_empty() {
                    break;
                }
                let wait = Duration::from_nanos(at - now);
                q = service
                    .wake
                    .wait_timeout(q, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            let Some(bell) = q.alarms.remove(&(at, id)).and_then(|b| b.upgrade()) else {
                continue;
            };
            bell.armed.store(UNARMED, Ordering::Release);
            let due = bell.due.load(Ordering::Acquire);
            if due > now {
                q.alarms.insert((due, id), Arc::downgrade(&bell));
                bell.armed.store(due, Ordering::Release);
            } else {
                due_now.push(bell);
            }
        }
        drop(q);
        // Rung outside the lock: a wake-up may run the task's poll, which
        // takes it.
        for bell in due_now.drain(..) {
            bell.ring();
        }
    }
}

/// The time alarms are measured from.
static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

/// `at` in nanoseconds from `EPOCH` (0 before it).
fn nanos(at: Instant) -> u64 {
    let epoch = *EPOCH.get_or_init(std::time::Instant::now);
    let since = at.into_std().saturating_duration_since(epoch);
    u64::try_from(since.as_nanos()).unwrap_or(UNARMED - 1)
}

/// The real clock's time in nanoseconds from `EPOCH` (tokio's paused
/// time, if any, is not looked at: the thread cannot follow it).
fn now() -> u64 {
    nanos(Instant::from_std(std::time::Instant::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Polls `alarm` once in the task polling this future.
    async fn poll_once(alarm: &mut Alarm) -> Poll<()> {
        std::future::poll_fn(|cx| Poll::Ready(alarm.poll(cx))).await
    }

    /// Waits for `alarm`, at most a second.
    async fn wait(alarm: &mut Alarm) {
        tokio::time::timeout(
            Duration::from_secs(1),
            std::future::poll_fn(|cx| alarm.poll(cx)),
        )
        .await
        .expect("the alarm woke its task");
    }

    fn armed(alarm: &Alarm) -> bool {
        let key = (alarm.bell.armed.load(Ordering::Acquire), alarm.bell.id);
        queue().alarms.contains_key(&key)
    }

    #[tokio::test]
    async fn rings_once_due_and_wakes_the_task() {
        let mut alarm = Alarm::new(Instant::now() + 20 * MS);
        assert!(poll_once(&mut alarm).await.is_pending());
        // Polls before it is due read no clock and stay pending.
        for _ in 0..3 {
            assert!(poll_once(&mut alarm).await.is_pending());
        }
        // Waiting on it alone: only its ring can wake the task.
        wait(&mut alarm).await;
        assert!(Instant::now() >= alarm.deadline());
        assert!(!armed(&alarm), "a rung alarm leaves the queue");
    }

    #[tokio::test]
    async fn a_reset_moves_the_deadline_both_ways() {
        let start = Instant::now();
        let mut alarm = Alarm::new(start + Duration::from_secs(3600));
        assert!(poll_once(&mut alarm).await.is_pending());
        // Earlier: the thread learns of it at once.
        alarm.reset(start + 5 * MS);
        wait(&mut alarm).await;
        assert!(Instant::now() >= start + 5 * MS);
        // Later, twice, the first without the queue knowing (it holds the
        // alarm at the first deadline and finds the second then).
        alarm.reset(Instant::now() + 20 * MS);
        assert!(poll_once(&mut alarm).await.is_pending());
        alarm.reset(Instant::now() + 60 * MS);
        let set = Instant::now();
        tokio::time::sleep(30 * MS).await;
        assert!(poll_once(&mut alarm).await.is_pending());
        wait(&mut alarm).await;
        assert!(Instant::now() >= set + 60 * MS);
    }

    #[tokio::test]
    async fn a_new_task_is_woken_too() {
        let start = Instant::now();
        let mut alarm = Alarm::new(start + 20 * MS);
        assert!(poll_once(&mut alarm).await.is_pending());
        // Polled from another task from now on.
        let waited = tokio::spawn(async move {
            wait(&mut alarm).await;
            Instant::now()
        });
        let at = waited.await.unwrap();
        assert!(at - start >= 20 * MS);
    }

    #[tokio::test]
    async fn dropped_alarms_leave_the_queue() {
        let alarms: Vec<Alarm> = (1..=100u32)
            .map(|i| Alarm::new(Instant::now() + Duration::from_secs(600) + i * MS))
            .collect();
        assert!(alarms.iter().all(armed));
        let keys: Vec<_> = alarms
            .iter()
            .map(|a| (a.bell.armed.load(Ordering::Acquire), a.bell.id))
            .collect();
        drop(alarms);
        let q = queue();
        assert!(keys.iter().all(|k| !q.alarms.contains_key(k)));
    }

    #[tokio::test]
    async fn alarms_ring_in_deadline_order() {
        let start = Instant::now();
        // Made latest first, so that each new one is the earliest.
        let mut alarms: Vec<Alarm> = (0..5u32)
            .rev()
            .map(|i| Alarm::new(start + (10 + 10 * i) * MS))
            .collect();
        alarms.reverse();
        let mut rung = Vec::new();
        for alarm in &mut alarms {
            wait(alarm).await;
            rung.push(Instant::now());
        }
        for (i, at) in rung.iter().enumerate() {
            assert!(*at >= start + (10 + 10 * i as u32) * MS);
        }
    }
}
