//! The order a read's unary callers are woken in.
//!
//! On a multi-threaded runtime, unary callers answered by one read of up
//! to `RELAY_READ` answers are woken as a relay: the reader wakes the
//! first two, and each caller that takes its answer (or gives up) wakes
//! the next. A task woken from a worker goes to that worker's LIFO slot
//! and runs next, there; woken all at once, a read's callers queue up
//! behind it and the other worker, notified, steals half of them, and a
//! late one waits for the whole queue: the relay shortens the tail of a
//! loaded connection. A longer read's callers are woken as a fan: the
//! reader wakes `FAN_HEADS` of them and each caller that takes its answer
//! wakes two more, the one that runs next from the LIFO slot and one the
//! other worker can steal (a chain that long stalls whole while its
//! worker is preempted, since a task in the LIFO slot cannot be stolen).
//! (A current-thread runtime has no LIFO slot; there the reader wakes
//! every caller at once.)
//! A caller woken that does not poll its call stalls the relay (or its
//! branch of the fan), so the reader wakes all the callers left on either
//! `RELAY_FLUSH` after the relay began: a relay is never the only thing a
//! caller waits for.
//!
//! The relay lives beside the call table, under a lock of its own held
//! for a pop or two: a caller that takes its answer from its slot passes
//! the relay on without the table's lock, which the reader holds while it
//! routes a read.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;

use parking_lot::Mutex;

use super::Effects;

/// A read answering more calls than this, with small answers, wakes
/// [`FAN_HEADS`] of them and each caller that takes its answer wakes two
/// more (a fan); up to this many, it wakes two, each the head of a relay
/// through the rest. Measured, not derived: two heads did better at 32
/// calls in flight than one (a relay of one head leaves the other worker
/// idle). A long read's callers woken one after another run a few at a
/// time from the worker's LIFO slot and then spill to the other worker
/// over and over, a wake-up of it each time; and a chain stalls whole
/// while its worker is preempted, for a task in the LIFO slot cannot be
/// stolen. Woken at once they queue up behind each other on one worker
/// until the other steals half. A fan keeps the next caller in the LIFO slot and
/// one more where the other worker can take it.
pub(super) const RELAY_READ: usize = 32;

/// The callers a long read wakes itself, the heads of its fan. Measured:
/// at 256 calls in flight 4 did better than 2 and 8, each better than
/// every caller at once.
pub(super) const FAN_HEADS: usize = 4;

/// Answers this large on average (bytes read per caller answered) make a
/// read one relay whatever its length: with 16 KiB answers one head made
/// 5% more calls per second than two (the second worker's share then costs
/// more in wake-ups and in the socket's lock than it saves).
const LARGE_ANSWER: usize = 4096;

/// Unary callers answered, not yet woken.
#[derive(Default)]
pub(crate) struct Relay {
    /// Each caller that completes (or gives up) wakes the first.
    relay: VecDeque<Waker>,
    /// The same for long reads: each wakes the first two.
    fan: VecDeque<Waker>,
}

impl Relay {
    /// Of the callers `fx` is to wake, leaves the first two and queues the
    /// rest on the relay; for a read of more than [`RELAY_READ`], leaves
    /// [`FAN_HEADS`] and queues the rest on the fan; for answers of
    /// [`LARGE_ANSWER`] bytes or more on average (in `read` bytes), leaves
    /// only the first. Returns whether any caller is left waiting.
    pub(crate) fn queue(&mut self, fx: &mut Effects, read: usize) -> bool {
        let n = fx.wake.len();
        if read >= n * LARGE_ANSWER {
            self.relay.extend(fx.wake.drain(n.min(1)..));
        } else if n <= RELAY_READ {
            self.relay.extend(fx.wake.drain(n.min(2)..));
        } else {
            self.fan.extend(fx.wake.drain(FAN_HEADS..));
        }
        !(self.relay.is_empty() && self.fan.is_empty())
    }

    /// The callers for one that completed to wake, in the order to wake
    /// them: two of a fan, or else the next of the relay. A task woken
    /// from a worker goes to its LIFO slot and pushes the one woken before
    /// out to the worker's queue, where the other worker can take it: the
    /// last is the one that runs next.
    pub(crate) fn pass_on(&mut self) -> [Option<Waker>; 2] {
        match self.fan.pop_front() {
            Some(next) => [self.fan.pop_front(), Some(next)],
            None => [None, self.relay.pop_front()],
        }
    }

    fn is_empty(&self) -> bool {
        self.relay.is_empty() && self.fan.is_empty()
    }

    /// Every caller left on the relay or the fan is to be woken now.
    pub(crate) fn flush(&mut self, fx: &mut Effects) {
        fx.wake.extend(self.fan.drain(..));
        fx.wake.extend(self.relay.drain(..));
    }
}

/// A connection's [`Relay`], shared by its reader and its callers: a
/// caller that completes when nothing waits on it (one call in flight, a
/// short read) does not take the lock.
#[derive(Default)]
pub(crate) struct SharedRelay {
    relay: Mutex<Relay>,
    /// Some caller may be waiting on it (set under the lock, cleared there
    /// when it empties).
    waiting: AtomicBool,
}

impl SharedRelay {
    /// [`Relay::queue`].
    pub(crate) fn queue(&self, fx: &mut Effects, read: usize) -> bool {
        if fx.wake.len() <= 1 {
            return self.waiting.load(Ordering::Relaxed);
        }
        let mut relay = self.relay.lock();
        let waiting = relay.queue(fx, read);
        self.waiting.store(waiting, Ordering::Relaxed);
        waiting
    }

    /// [`Relay::pass_on`]. The callers it finds waiting were queued before
    /// the read that queued them woke anyone, so a caller woken by that
    /// read (or by one of them) sees the flag set.
    pub(crate) fn pass_on(&self) -> [Option<Waker>; 2] {
        if !self.waiting.load(Ordering::Relaxed) {
            return [None, None];
        }
        let mut relay = self.relay.lock();
        let next = relay.pass_on();
        if relay.is_empty() {
            self.waiting.store(false, Ordering::Relaxed);
        }
        next
    }

    /// [`Relay::flush`].
    pub(crate) fn flush(&self, fx: &mut Effects) {
        let mut relay = self.relay.lock();
        relay.flush(fx);
        self.waiting.store(false, Ordering::Relaxed);
    }
}
