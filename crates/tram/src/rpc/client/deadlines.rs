//! A connection's one timer for its unary calls' deadlines.
//!
//! Why not a timer per call: a tokio `Sleep` is registered with the
//! runtime's timer under its one lock, which every worker shares, as a call
//! begins and taken out as it ends; with every call given a deadline, a
//! loaded client made about three quarters of the calls it made without.
//! So the deadlines live in the call table, under the lock a call takes
//! anyway, and one [`Alarm`] (rung off the runtime's timer) wakes the
//! reader at the earliest. The reader wakes the callers whose deadline has
//! passed; each ends its call as it would at a deadline it saw pass.

use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use parking_lot::Mutex;

use super::super::alarm::Alarm;
use super::calls::Effects;
use super::conn::ClientConn;

#[derive(Default)]
pub(super) struct DeadlineTimer {
    state: Mutex<TimerState>,
    /// An alarm is set (read without the lock by the reader at every poll).
    set: AtomicBool,
}

#[derive(Default)]
struct TimerState {
    alarm: Option<Alarm>,
    /// The reader task, which the alarm wakes.
    reader: Option<Waker>,
}

impl DeadlineTimer {
    /// Sets the alarm for `at` unless it is set for sooner already, or has
    /// rung (the reader then looks at every call's deadline, `at`'s too).
    pub(super) fn set(&self, at: Instant) {
        let at = tokio::time::Instant::from_std(at);
        let mut s = self.state.lock();
        if let Some(alarm) = &s.alarm {
            if alarm.rung() || alarm.deadline() <= at {
                return;
            }
        }
        self.arm(&mut s, at);
    }

    /// After a ring: sets the alarm for `next`, the earliest deadline left,
    /// or lets it go.
    fn rang(&self, next: Option<Instant>) {
        let mut s = self.state.lock();
        match next {
            Some(at) => self.arm(&mut s, tokio::time::Instant::from_std(at)),
            None => {
                s.alarm = None;
                self.set.store(false, Ordering::Release);
            }
        }
    }

    fn arm(&self, s: &mut TimerState, at: tokio::time::Instant) {
        match &mut s.alarm {
            Some(alarm) => alarm.reset(at),
            None => s.alarm = Some(Alarm::new(at)),
        }
        self.set.store(true, Ordering::Release);
        if let (Some(alarm), Some(reader)) = (&mut s.alarm, &s.reader) {
            // Hands the reader's waker to the alarm; one due already rings
            // at once, which no thread does for it.
            if alarm.poll(&mut Context::from_waker(reader)).is_ready() {
                reader.wake_by_ref();
            }
        }
    }

    /// The reader's poll: ready once the alarm has rung. The first poll
    /// (`first`) registers the reader's waker even with no alarm set.
    pub(super) fn poll(&self, first: bool, cx: &mut Context<'_>) -> Poll<()> {
        if !first && !self.set.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        let mut s = self.state.lock();
        if !s.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.reader = Some(cx.waker().clone());
        }
        match &mut s.alarm {
            Some(alarm) => alarm.poll(cx),
            None => Poll::Pending,
        }
    }
}

impl ClientConn {
    /// The deadline timer rang: wakes the callers whose deadline has passed,
    /// and sets the timer for the earliest left (or lets it go).
    pub(super) fn expire_deadlines(&self) {
        let mut fx = Effects::default();
        let mut calls = self.calls();
        let next = calls.expire(Instant::now(), &mut fx);
        // Under the table's lock: a call opened meanwhile finds the timer
        // as the table says it is.
        self.deadlines.rang(next);
        self.apply(calls, &mut fx);
    }
}
