//! The load of the streaming benchmark, the same for every system: a
//! window of messages in flight between a client's writer and reader, and
//! a message counter.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;

/// Keeps at most `size` messages in flight between a client's writer and
/// reader. Shared by both clients so their overhead is the same.
pub(crate) struct Window {
    size: u64,
    received: AtomicU64,
    waiting: AtomicBool,
    notify: Notify,
}

impl Window {
    pub(crate) fn new(size: u64) -> Arc<Window> {
        Arc::new(Window {
            size,
            received: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            notify: Notify::new(),
        })
    }

    /// How many more may be sent, waiting until at least one may.
    pub(crate) async fn room(&self, sent: u64) -> u64 {
        loop {
            let in_flight = sent - self.received.load(Ordering::Acquire);
            if in_flight < self.size {
                return self.size - in_flight;
            }
            let notified = self.notify.notified();
            self.waiting.store(true, Ordering::SeqCst);
            if sent - self.received.load(Ordering::SeqCst) < self.size {
                continue;
            }
            notified.await;
        }
    }

    pub(crate) fn arrived(&self, n: u64, total: &AtomicU64) {
        self.received.fetch_add(n, Ordering::AcqRel);
        total.fetch_add(n, Ordering::Relaxed);
        if self.waiting.load(Ordering::SeqCst) && self.waiting.swap(false, Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }
}

/// Counts received messages into `received` in runs, not one atomic
/// add per message (the same for every client).
pub(crate) struct Counter<'a> {
    received: &'a AtomicU64,
    pending: u64,
}

impl<'a> Counter<'a> {
    pub(crate) fn new(received: &'a AtomicU64) -> Self {
        Counter {
            received,
            pending: 0,
        }
    }

    pub(crate) fn one(&mut self) {
        self.pending += 1;
        if self.pending == 256 {
            self.received.fetch_add(256, Ordering::Relaxed);
            self.pending = 0;
        }
    }
}
