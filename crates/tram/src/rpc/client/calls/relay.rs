//! The relays of one connection's answered unary callers, one per thread
//! the callers last waited on: a read's answers are woken as one relay per
//! thread, so that a caller is woken by a caller of its own thread (and
//! runs on it next, from its LIFO slot) rather than pulled over to the
//! reader's.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Waker;

use super::Effects;

/// Threads given relays of their own, at most: callers on further threads
/// share the last.
const THREADS: usize = 8;

/// A small number for the current thread, unique in the process.
pub(crate) fn thread_token() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    thread_local! {
        static TOKEN: Cell<u32> = const { Cell::new(0) };
    }
    TOKEN.with(|t| match t.get() {
        0 => {
            let token = NEXT.fetch_add(1, Ordering::Relaxed).max(1);
            t.set(token);
            token
        }
        token => token,
    })
}

#[derive(Default)]
pub(super) struct Relays {
    lists: Vec<List>,
}

/// One thread's relay.
struct List {
    thread: u32,
    waiting: VecDeque<Waker>,
    /// A caller woken from it is yet to pass it on: answers for this
    /// thread join the queue without waking anyone.
    running: bool,
}

impl Relays {
    pub(super) fn is_empty(&self) -> bool {
        self.lists.iter().all(|l| l.waiting.is_empty())
    }

    fn list(&mut self, thread: u32) -> &mut List {
        let i = match self.lists.iter().position(|l| l.thread == thread) {
            Some(i) => i,
            None if self.lists.len() < THREADS => {
                self.lists.push(List {
                    thread,
                    waiting: VecDeque::new(),
                    running: false,
                });
                self.lists.len() - 1
            }
            None => THREADS - 1,
        };
        &mut self.lists[i]
    }

    /// Moves `fx.answered` to the relays, and to `fx.wake` the heads of
    /// the relays not running (two for a `short` read; `here`'s last, so
    /// that it takes the reader's LIFO slot).
    pub(super) fn queue(&mut self, fx: &mut Effects, short: bool, here: u32) {
        let mut started: Vec<u32> = Vec::new();
        for (thread, waker) in fx.answered.drain(..) {
            let list = self.list(thread);
            list.waiting.push_back(waker);
            if !list.running {
                list.running = true;
                started.push(thread);
            }
        }
        let heads = if short && started.len() == 1 { 2 } else { 1 };
        // Other threads' heads first: `here`'s, woken last, takes the
        // reader's LIFO slot and pushes theirs to its queue, for their
        // threads to steal.
        started.sort_by_key(|t| *t == here);
        for thread in started {
            let list = self.list(thread);
            let n = heads.min(list.waiting.len());
            fx.wake.extend(list.waiting.drain(..n));
        }
    }

    /// The next caller for one answered on `thread`'s relay to wake.
    pub(super) fn next(&mut self, thread: u32) -> Option<Waker> {
        let list = self.list(thread);
        let next = list.waiting.pop_front();
        list.running = next.is_some();
        next
    }

    pub(super) fn drain(&mut self, fx: &mut Effects) {
        for l in &mut self.lists {
            fx.wake.extend(l.waiting.drain(..));
            l.running = false;
        }
    }
}
