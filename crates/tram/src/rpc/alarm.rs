//! A connection's one tokio timer, polled only when it may have fired.
//!
//! A connection task is polled at every read, and polling a tokio `Sleep`
//! costs a check of the coop budget and a compare-and-swap on the timer's
//! waker slot even when it is far from due: with one call in flight, one
//! of these a call on each side, all of it on lines a sleeping worker no
//! longer has in cache. An [`Alarm`] registers a waker of its own with the
//! `Sleep`, which marks the alarm as rung and then wakes the task: the
//! `Sleep` is polled again only after that, or after a reset.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};

pub(crate) struct Alarm {
    sleep: Pin<Box<Sleep>>,
    bell: Arc<Bell>,
    /// `bell` as a waker, made once.
    waker: Waker,
    /// The task's waker as last handed to `bell` (compared, never woken,
    /// here: the poller owns it, so the comparison takes no lock).
    task: Option<Waker>,
    /// Reset (or new) since the `Sleep` was last polled: its deadline is
    /// not registered with the timer yet.
    reset: bool,
}

struct Bell {
    rung: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Bell {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.rung.store(true, Ordering::Release);
        if let Some(task) = self.task.lock().as_ref() {
            task.wake_by_ref();
        }
    }
}

impl Alarm {
    /// An alarm due at `at`.
    pub(crate) fn new(at: Instant) -> Alarm {
        let bell = Arc::new(Bell {
            rung: AtomicBool::new(false),
            task: Mutex::new(None),
        });
        Alarm {
            sleep: Box::pin(tokio::time::sleep_until(at)),
            waker: Waker::from(bell.clone()),
            bell,
            task: None,
            reset: true,
        }
    }

    /// When it is due.
    pub(crate) fn deadline(&self) -> Instant {
        self.sleep.deadline()
    }

    /// Makes it due at `at` instead.
    pub(crate) fn reset(&mut self, at: Instant) {
        self.sleep.as_mut().reset(at);
        self.reset = true;
    }

    /// Ready once the deadline has passed; until then the task polling it
    /// is woken when it does.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            *self.bell.task.lock() = Some(cx.waker().clone());
            self.task = Some(cx.waker().clone());
            // A task that moved to another waker may have missed a ring.
            self.reset = true;
        }
        if !self.reset && !self.bell.rung.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        self.reset = false;
        // Cleared before the poll: a ring from here on is seen next time.
        self.bell.rung.store(false, Ordering::Relaxed);
        self.sleep
            .as_mut()
            .poll(&mut Context::from_waker(&self.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Polls `alarm` once in the task polling this future.
    async fn poll_once(alarm: &mut Alarm) -> Poll<()> {
        std::future::poll_fn(|cx| Poll::Ready(alarm.poll(cx))).await
    }

    #[tokio::test(start_paused = true)]
    async fn rings_once_due_and_wakes_the_task() {
        let mut alarm = Alarm::new(Instant::now() + 10 * MS);
        assert!(poll_once(&mut alarm).await.is_pending());
        // Polls before it is due skip the timer and stay pending.
        for _ in 0..3 {
            assert!(poll_once(&mut alarm).await.is_pending());
        }
        // Waiting on it alone: only its ring can wake the task.
        tokio::time::timeout(
            Duration::from_secs(1),
            std::future::poll_fn(|cx| alarm.poll(cx)),
        )
        .await
        .expect("the alarm woke its task");
        assert!(Instant::now() >= alarm.deadline());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reset_moves_the_deadline_both_ways() {
        let start = Instant::now();
        let mut alarm = Alarm::new(start + Duration::from_secs(3600));
        assert!(poll_once(&mut alarm).await.is_pending());
        alarm.reset(start + 5 * MS);
        std::future::poll_fn(|cx| alarm.poll(cx)).await;
        assert!(Instant::now() >= start + 5 * MS);
        assert!(Instant::now() < start + Duration::from_secs(1));
        // Later again: pending until then.
        alarm.reset(Instant::now() + 20 * MS);
        assert!(poll_once(&mut alarm).await.is_pending());
        tokio::time::advance(10 * MS).await;
        assert!(poll_once(&mut alarm).await.is_pending());
        std::future::poll_fn(|cx| alarm.poll(cx)).await;
        assert!(Instant::now() >= start + 25 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_task_is_woken_too() {
        let start = Instant::now();
        let mut alarm = Alarm::new(start + 10 * MS);
        assert!(poll_once(&mut alarm).await.is_pending());
        // Polled from another task from now on.
        let waited = tokio::spawn(async move {
            std::future::poll_fn(|cx| alarm.poll(cx)).await;
            Instant::now()
        });
        let at = tokio::time::timeout(Duration::from_secs(1), waited)
            .await
            .expect("the alarm woke the task that polls it now")
            .unwrap();
        assert!(at - start >= 10 * MS);
    }
}
