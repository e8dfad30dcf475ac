//! Absorbs a future's wake-ups of itself.
//!
//! The gateway polls an HTTP/2 connection and all of its calls in one task.
//! Sending a response wakes the connection (h2 asks for a flush) while that
//! very task is running; tokio then requeues the task as if it had yielded
//! and wakes a second worker thread to look for work: a futex wake and
//! wait, two system calls per call, which at one call in flight made the
//! gateway's CPU per call higher than tonic's. [`AbsorbSelfWakes`] gives
//! the future a waker of its own: a wake-up during its poll only marks it
//! to be polled again at once; one from elsewhere wakes the task as usual.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;

/// Polls again at once at most this many times per poll, then yields.
const REPOLL_BUDGET: usize = 32;

pub(crate) struct AbsorbSelfWakes<F> {
    inner: Pin<Box<F>>,
    flag: Arc<Flag>,
    waker: Waker,
}

struct Flag {
    /// Inside the inner future's poll.
    polling: AtomicBool,
    /// Woken since the poll began.
    woken: AtomicBool,
    /// The task to wake when not polling.
    task: Mutex<Option<Waker>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            if let Some(task) = self.task.lock().as_ref() {
                task.wake_by_ref();
            }
        }
    }
}

impl<F: Future> AbsorbSelfWakes<F> {
    pub(crate) fn new(inner: F) -> Self {
        let flag = Arc::new(Flag {
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            task: Mutex::new(None),
        });
        AbsorbSelfWakes {
            inner: Box::pin(inner),
            waker: Waker::from(flag.clone()),
            flag,
        }
    }
}

impl<F: Future> Future for AbsorbSelfWakes<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        {
            let mut task = self.flag.task.lock();
            if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        let this = &mut *self;
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..REPOLL_BUDGET {
            this.flag.woken.store(false, Ordering::SeqCst);
            this.flag.polling.store(true, Ordering::SeqCst);
            let polled = this.inner.as_mut().poll(&mut inner_cx);
            this.flag.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            // A wake-up that came while polling (from this task or, racing
            // with the end of the poll, from another) is served here.
            if !this.flag.woken.load(Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still being woken: give other tasks a turn.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn self_wakes_repoll_and_outside_wakes_reach_the_task() {
        // Wakes itself twice, then waits for a wake from another task.
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let mut polls = 0;
        let fut = std::future::poll_fn(move |cx| {
            polls += 1;
            if polls <= 2 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            match Pin::new(&mut rx).poll(cx) {
                Poll::Ready(_) => Poll::Ready(polls),
                Poll::Pending => Poll::Pending,
            }
        });
        let absorbed = AbsorbSelfWakes::new(fut);
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            let _ = tx.send(());
        });
        let polls = tokio::time::timeout(std::time::Duration::from_secs(5), absorbed)
            .await
            .expect("woken from outside");
        // Three polls in the first turn (two self-wakes absorbed), one more
        // when the message arrives.
        assert_eq!(polls, 4);
    }
}
