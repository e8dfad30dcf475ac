//! A small executor for a connection's handler futures.
//!
//! The server's connection task polls its calls' handler futures itself
//! instead of spawning a task per call. Futures live in a slab; each slot
//! has a waker, made once and reused by every call that occupies the slot,
//! which queues the slot's index and wakes the connection task. Cancelling
//! a call drops its future on the spot.
//!
//! A handler woken by the connection task itself (a stream's credit read
//! in a turn, say) is only queued: the task polls the queue before it
//! returns. Waking a task from inside its own poll makes tokio schedule it
//! again as if it had yielded, which wakes an idle worker to steal it, so
//! the connection would hop between workers on every such wake-up.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};

use parking_lot::Mutex;
use slab::Slab;

/// A handler future: it writes its own outcome to the connection.
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

pub(crate) struct Exec<T> {
    tasks: Slab<Task<T>>,
    /// One waker per slot index, reused across occupants.
    /// Each slot's waker, made once: polling a task clones nothing.
    wakers: Vec<(Arc<SlotWaker>, Waker)>,
    ready: Arc<Ready>,
}

struct Task<T> {
    fut: BoxFuture,
    /// What the owner needs back when the task ends (its call id).
    tag: T,
}

struct Ready {
    queue: Mutex<Vec<usize>>,
    /// The connection task.
    owner: Mutex<Option<Waker>>,
    /// A slot was queued without waking the owner, which was being polled
    /// (set and cleared only on the thread polling it).
    unwoken: AtomicBool,
    /// A slot was queued since a poll last found no future to run, and
    /// cleared the queue instead (a hint, set after the push: at worst
    /// such a poll leaves an entry for the next one).
    stale: AtomicBool,
}

thread_local! {
    /// The address of the `Ready` whose owner this thread is polling, or 0.
    static POLLING: Cell<usize> = const { Cell::new(0) };
}

/// Marks an executor's owner as being polled on this thread until it is
/// dropped or handed to [`Exec::leave`].
pub(crate) struct Entered {
    /// What the thread was polling before (a nested poll restores it).
    prev: usize,
}

impl Drop for Entered {
    fn drop(&mut self) {
        POLLING.set(self.prev);
    }
}

struct SlotWaker {
    idx: usize,
    queued: AtomicBool,
    ready: Arc<Ready>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // A stale wake-up for an earlier occupant of the slot only causes a
        // spurious poll, which futures tolerate.
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.ready.queue.lock().push(self.idx);
            self.ready.stale.store(true, Ordering::Release);
            if POLLING.get() == Arc::as_ptr(&self.ready) as usize {
                self.ready.unwoken.store(true, Ordering::Relaxed);
            } else if let Some(w) = self.ready.owner.lock().as_ref() {
                w.wake_by_ref();
            }
        }
    }
}

impl<T> Exec<T> {
    pub(crate) fn new() -> Exec<T> {
        Exec {
            tasks: Slab::new(),
            wakers: Vec::new(),
            ready: Arc::new(Ready {
                queue: Mutex::new(Vec::new()),
                owner: Mutex::new(None),
                unwoken: AtomicBool::new(false),
                stale: AtomicBool::new(false),
            }),
        }
    }

    /// Marks the owner as being polled on this thread: until the mark is
    /// dropped or given to [`Exec::leave`], slots woken on this thread are
    /// queued without waking the owner.
    pub(crate) fn enter(&self) -> Entered {
        Entered {
            prev: POLLING.replace(Arc::as_ptr(&self.ready) as usize),
        }
    }

    /// Ends the owner's poll. True if a slot queued during it is still
    /// waiting to be polled: the owner must then wake itself.
    pub(crate) fn leave(&self, entered: Entered) -> bool {
        drop(entered);
        if !self.ready.unwoken.load(Ordering::Relaxed) {
            return false;
        }
        self.ready.unwoken.store(false, Ordering::Relaxed);
        !self.ready.queue.lock().is_empty()
    }

    /// Adds `fut` and polls it once right away (a handler that needs no
    /// I/O finishes here, with no scheduling at all). Returns its key, or
    /// `None` if it already finished.
    pub(crate) fn spawn(&mut self, mut fut: BoxFuture, tag: T) -> Option<usize> {
        // Polled with the waker of the slot it will take, before taking it:
        // a future that finishes at once never touches the slab.
        let idx = self.tasks.vacant_key();
        if idx == self.wakers.len() {
            let slot = Arc::new(SlotWaker {
                idx,
                queued: AtomicBool::new(false),
                ready: self.ready.clone(),
            });
            let waker = Waker::from(slot.clone());
            self.wakers.push((slot, waker));
        }
        if poll_in_slot(&self.wakers[idx], Some(&mut fut)) {
            return None;
        }
        let key = self.tasks.insert(Task { fut, tag });
        debug_assert_eq!(key, idx);
        Some(idx)
    }

    /// Drops the future at `idx` (cancellation).
    pub(crate) fn cancel(&mut self, idx: usize) -> Option<T> {
        self.tasks.try_remove(idx).map(|t| t.tag)
    }

    /// Polls every future that was woken; calls `done` with the tag of each
    /// that finished. Registers `cx` to be woken when more are ready (with
    /// no future pending, none can be, and nothing is registered).
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>, mut done: impl FnMut(T)) {
        if self.tasks.is_empty() {
            // Every handler finished as it was spawned (a call answered at
            // once): nothing can wake that needs the owner, and what is
            // queued belongs to futures that are gone. Two locks fewer on
            // the path of every such call.
            // A load first: the swap is a locked instruction, and the
            // hint is almost always clear.
            if self.ready.stale.load(Ordering::Relaxed)
                && self.ready.stale.swap(false, Ordering::Acquire)
            {
                self.ready.queue.lock().clear();
            }
            return;
        }
        {
            let mut owner = self.ready.owner.lock();
            if !owner.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *owner = Some(cx.waker().clone());
            }
        }
        loop {
            let batch = std::mem::take(&mut *self.ready.queue.lock());
            if batch.is_empty() {
                return;
            }
            for idx in batch {
                if self.tasks.contains(idx) && self.poll_one(idx) {
                    if let Some(t) = self.tasks.try_remove(idx) {
                        done(t.tag);
                    }
                }
            }
        }
    }

    /// Polls the future at `idx`; true if it finished (the caller removes
    /// it).
    fn poll_one(&mut self, idx: usize) -> bool {
        let fut = self.tasks.get_mut(idx).map(|t| &mut t.fut);
        poll_in_slot(&self.wakers[idx], fut)
    }

    /// Drops every future (the connection is closing).
    pub(crate) fn clear(&mut self) {
        self.tasks.clear();
    }
}

/// Polls `fut` (if any) as the occupant of `slot`: the slot's queued flag
/// is cleared first, so that a wake-up during the poll queues it again.
/// True if it finished.
fn poll_in_slot((slot, waker): &(Arc<SlotWaker>, Waker), fut: Option<&mut BoxFuture>) -> bool {
    slot.queued.store(false, Ordering::Release);
    fut.is_some_and(|f| f.as_mut().poll(&mut Context::from_waker(waker)).is_ready())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Poll;

    use super::*;

    /// Counts its wake-ups: the connection task.
    #[derive(Default)]
    struct Owner(AtomicUsize);

    impl Wake for Owner {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// An executor holding one pending future, whose waker is returned,
    /// with `owner` registered as its connection task.
    fn one_pending(owner: &Arc<Owner>) -> (Exec<()>, Waker) {
        let slot: Arc<Mutex<Option<Waker>>> = Arc::default();
        let keep = slot.clone();
        let mut exec = Exec::new();
        let fut = std::future::poll_fn(move |cx| {
            *keep.lock() = Some(cx.waker().clone());
            Poll::<()>::Pending
        });
        assert!(exec.spawn(Box::pin(fut), ()).is_some());
        let waker = Waker::from(owner.clone());
        exec.poll_ready(&mut Context::from_waker(&waker), |()| {});
        let handler = slot.lock().clone().unwrap();
        (exec, handler)
    }

    /// A handler woken from inside the owner's poll is queued without a
    /// wake-up, and `leave` says it is waiting; outside the poll, or from
    /// another thread during it, the owner is woken.
    #[test]
    fn a_handler_woken_inside_the_owners_poll_does_not_wake_it() {
        let owner = Arc::new(Owner::default());
        let (mut exec, handler) = one_pending(&owner);

        let entered = exec.enter();
        handler.wake_by_ref();
        assert_eq!(owner.0.load(Ordering::SeqCst), 0);
        assert!(exec.leave(entered), "the queued handler is reported");

        // Polled: nothing waits, and the next poll's leave says so.
        let waker = Waker::from(owner.clone());
        exec.poll_ready(&mut Context::from_waker(&waker), |()| {});
        let entered = exec.enter();
        assert!(!exec.leave(entered));

        handler.wake_by_ref();
        assert_eq!(owner.0.load(Ordering::SeqCst), 1, "woken outside a poll");
        exec.poll_ready(&mut Context::from_waker(&waker), |()| {});

        let entered = exec.enter();
        let other = handler.clone();
        std::thread::spawn(move || other.wake()).join().unwrap();
        assert_eq!(
            owner.0.load(Ordering::SeqCst),
            2,
            "woken from another thread"
        );
        assert!(!exec.leave(entered), "that wake-up was the owner's own");
    }

    /// With no future left, a poll drops what cancelled ones queued
    /// instead of keeping it, and the slot's next occupant is still
    /// polled when woken.
    #[test]
    fn wake_ups_of_cancelled_handlers_are_dropped() {
        let owner = Arc::new(Owner::default());
        let waker = Waker::from(owner.clone());
        let (mut exec, handler) = one_pending(&owner);
        for _ in 0..3 {
            handler.wake_by_ref();
            assert!(exec.cancel(0).is_some());
            exec.poll_ready(&mut Context::from_waker(&waker), |()| {});
            assert!(exec.ready.queue.lock().is_empty());
            // The next occupant of the slot: pending until woken once.
            let mut woken = false;
            let fut = std::future::poll_fn(move |_| {
                if std::mem::replace(&mut woken, true) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            assert_eq!(exec.spawn(Box::pin(fut), ()), Some(0));
        }
        handler.wake_by_ref();
        let mut finished = 0;
        exec.poll_ready(&mut Context::from_waker(&waker), |()| finished += 1);
        assert_eq!(finished, 1, "the woken occupant was polled to its end");
    }

    /// A mark dropped without `leave` (an early return) still ends the
    /// poll: later wake-ups wake the owner.
    #[test]
    fn a_dropped_mark_ends_the_poll() {
        let owner = Arc::new(Owner::default());
        let (exec, handler) = one_pending(&owner);
        drop(exec.enter());
        handler.wake_by_ref();
        assert_eq!(owner.0.load(Ordering::SeqCst), 1);
    }
}
