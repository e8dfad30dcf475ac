//! A small executor for a connection's handler futures.
//!
//! The server's connection task polls its calls' handler futures itself
//! instead of spawning a task per call. Futures live in a slab; each slot
//! has a waker, made once and reused by every call that occupies the slot,
//! which queues the slot's index and wakes the connection task. Cancelling
//! a call drops its future on the spot.

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
            if let Some(w) = self.ready.owner.lock().as_ref() {
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
            }),
        }
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
    /// that finished. Registers `cx` to be woken when more are ready.
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>, mut done: impl FnMut(T)) {
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
