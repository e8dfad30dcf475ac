//! One call's stream state, shared by the connection and the call's
//! handles: inbound messages bounded by the credit we granted (a window
//! that grows while messages are small), and the credit the peer granted
//! us for outbound messages (PROTOCOL.md §6.3).

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;
use tram_wire::{MessageRun, Metadata};

use super::Taken;
use crate::rpc::Status;

/// One call's stream state.
pub(crate) struct CallShared {
    pub(super) state: Mutex<CallState>,
}

/// Messages waiting for the consumer: one at a time, or a run of plain
/// messages as it came off the wire (parsed as it is consumed).
pub(super) enum Queued {
    One(Bytes),
    Run(MessageRun),
}

pub(super) struct CallState {
    pub(super) inbox: VecDeque<Queued>,
    /// How the inbound direction ended, once it has.
    pub(super) inbox_end: Option<Result<(), Status>>,
    pub(super) reader: Option<Waker>,
    /// Messages the peer may still send before more credit.
    pub(super) recv_allowed: i64,
    /// Messages consumed since credit was last returned.
    pub(super) consumed: u32,
    /// Their bytes.
    pub(super) consumed_bytes: usize,
    /// Our window: credit is returned once half of it is consumed.
    pub(super) window: u32,
    /// The window we advertised: the least it shrinks back to.
    pub(super) initial_window: u32,
    /// Messages we may still send.
    pub(super) send_credit: u64,
    pub(super) writer: Option<Waker>,
    /// The call is over (cancelled or the connection lost): sends fail.
    pub(super) aborted: Option<Status>,
    /// The response's leading metadata, once the first message is in.
    pub(super) headers: Option<Metadata>,
    /// The trailers the call ended with (client side, on END with OK).
    pub(super) trailers: Option<Metadata>,
}

/// Bytes of unread messages one call's window aims to allow: the window
/// (counted in messages, as credit is) grows past the advertised
/// `initial_credit` while messages are small, so that a stream of small
/// messages is not held to a few dozen per round trip, and shrinks back as
/// they grow. Half of it is what the sender may still send while a grant
/// is on its way back and the sender wakes to it: at a quarter of this, a
/// sender of small messages outran it and both sides took turns sleeping.
const WINDOW_BYTES: usize = 1024 * 1024;
/// The largest window, in messages: 1 MiB of 16-byte messages. Plain
/// messages wait in the runs they arrived in, so queued messages cost
/// little beyond their bytes, and a large window keeps a sender of small
/// messages from waiting for credit; a slow reader's heap stays bounded by
/// the window and the connection's buffers (`tests/rpc_memory.rs`).
/// Messages of 16 bytes or more are held to 1 MiB by their size before
/// this cap.
pub(super) const MAX_WINDOW: u32 = 65536;

impl CallState {
    /// Counts what `taken` says was consumed since it last came here; the
    /// credit to hand back to the peer, if it is time to.
    pub(super) fn account(&mut self, taken: &mut Taken) -> u32 {
        self.consumed += std::mem::take(&mut taken.consumed);
        self.consumed_bytes += std::mem::take(&mut taken.bytes);
        let mut grant = 0;
        // Return credit in batches of half the window, not per message,
        // and not once the peer is done sending.
        if self.consumed >= self.window.div_ceil(2) && self.inbox_end.is_none() {
            grant = self.retune();
            self.recv_allowed += i64::from(grant);
        }
        taken.until = self.window.div_ceil(2).saturating_sub(self.consumed).max(1);
        grant
    }

    /// Credit to return for what was consumed since the last grant, after
    /// fitting the window to the size of the messages consumed.
    fn retune(&mut self) -> u32 {
        let consumed = std::mem::take(&mut self.consumed);
        let bytes = std::mem::take(&mut self.consumed_bytes);
        let average = (bytes / consumed.max(1) as usize).max(1);
        let fit = (WINDOW_BYTES / average).min(MAX_WINDOW as usize) as u32;
        let target = fit.max(self.initial_window);
        if target >= self.window {
            // Grow: the extra is granted on top of what was consumed.
            let grow = target - self.window;
            self.window = target;
            consumed + grow
        } else {
            // Shrink: hold back part of what was consumed (never all of
            // it, so the peer is never left without credit).
            let shrink = (self.window - target).min(consumed - 1);
            self.window -= shrink;
            consumed - shrink
        }
    }
}

/// The peer sent more messages than it had credit for, or overflowed a
/// credit window: a protocol error.
#[derive(Debug)]
pub(crate) struct CreditViolation;

impl CallShared {
    /// `window`: the credit we advertised (our `initial_credit`);
    /// `send_credit`: the peer's `initial_credit`.
    pub(crate) fn new(window: u32, send_credit: u32) -> Arc<CallShared> {
        Arc::new(CallShared {
            state: Mutex::new(CallState {
                inbox: VecDeque::new(),
                inbox_end: None,
                reader: None,
                recv_allowed: i64::from(window),
                consumed: 0,
                consumed_bytes: 0,
                window: window.max(1),
                initial_window: window.max(1),
                send_credit: u64::from(send_credit),
                writer: None,
                aborted: None,
                headers: None,
                trailers: None,
            }),
        })
    }

    /// The response's leading metadata (client side).
    pub(crate) fn set_headers(&self, headers: Metadata) {
        self.state.lock().headers = Some(headers);
    }

    /// The response's leading metadata, if it has arrived.
    pub(crate) fn headers(&self) -> Option<Metadata> {
        self.state.lock().headers.clone()
    }

    /// Records the trailers the call ended with.
    pub(crate) fn set_trailers(&self, trailers: Metadata) {
        self.state.lock().trailers = Some(trailers);
    }

    /// The trailers the call ended with, once it has.
    pub(crate) fn trailers(&self) -> Option<Metadata> {
        self.state.lock().trailers.clone()
    }

    /// A message from the peer.
    pub(crate) fn push(&self, msg: Bytes) -> Result<(), CreditViolation> {
        let mut st = self.state.lock();
        st.recv_allowed -= 1;
        if st.recv_allowed < 0 {
            return Err(CreditViolation);
        }
        if st.inbox_end.is_none() {
            st.inbox.push_back(Queued::One(msg));
            if let Some(w) = st.reader.take() {
                w.wake();
            }
        }
        Ok(())
    }

    /// A run of plain messages from the peer, queued whole: one lock, one
    /// queue entry and one wake-up for all of them.
    pub(crate) fn push_run(&self, run: MessageRun) -> Result<(), CreditViolation> {
        let mut st = self.state.lock();
        st.recv_allowed -= run.len() as i64;
        if st.recv_allowed < 0 {
            return Err(CreditViolation);
        }
        if st.inbox_end.is_none() {
            st.inbox.push_back(Queued::Run(run));
            if let Some(w) = st.reader.take() {
                w.wake();
            }
        }
        Ok(())
    }

    /// The peer's direction ended (`Ok`), or the call failed (`Err`).
    pub(crate) fn close_inbox(&self, end: Result<(), Status>) {
        let mut st = self.state.lock();
        if st.inbox_end.is_none() {
            st.inbox_end = Some(end);
        }
        if let Some(w) = st.reader.take() {
            w.wake();
        }
    }

    /// CREDIT from the peer.
    pub(crate) fn add_credit(&self, n: u32) -> Result<(), CreditViolation> {
        let mut st = self.state.lock();
        st.send_credit += u64::from(n);
        if st.send_credit > u64::from(tram_wire::MAX_CREDIT) {
            return Err(CreditViolation);
        }
        if let Some(w) = st.writer.take() {
            w.wake();
        }
        Ok(())
    }

    /// The call is over: wake everything, fail further sends and reads.
    pub(crate) fn abort(&self, status: Status) {
        let mut st = self.state.lock();
        if st.inbox_end.is_none() {
            st.inbox_end = Some(Err(status.clone()));
        }
        st.aborted.get_or_insert(status);
        let (r, w) = (st.reader.take(), st.writer.take());
        drop(st);
        r.into_iter().chain(w).for_each(Waker::wake);
    }

    /// Takes all the credit the peer has granted (0 if none), for a sender
    /// that counts it down itself: one lock per run of messages rather
    /// than per message.
    pub(crate) fn take_all_send_credit(&self) -> Result<u64, Status> {
        let mut st = self.state.lock();
        if let Some(s) = &st.aborted {
            return Err(s.clone());
        }
        Ok(std::mem::take(&mut st.send_credit))
    }

    /// Waits for credit to send one message, and takes it.
    pub(crate) async fn take_send_credit(&self) -> Result<(), Status> {
        std::future::poll_fn(|cx| {
            let mut st = self.state.lock();
            if let Some(s) = &st.aborted {
                return Poll::Ready(Err(s.clone()));
            }
            if st.send_credit > 0 {
                st.send_credit -= 1;
                return Poll::Ready(Ok(()));
            }
            st.writer = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Counts what `taken` says was consumed since it last came here, and
    /// returns the credit to hand back to the peer if it is time to.
    pub(super) fn credit(&self, taken: &mut Taken) -> u32 {
        self.state.lock().account(taken)
    }

    /// For a consumer that has consumed everything it took: takes every
    /// message that has arrived since (`Ready(Some(Ok(())))`: `taken` has
    /// them), or `Ready(None)` at a clean end. Also returns the credit to
    /// hand back to the peer, if it is time to, even when there is nothing
    /// to take yet.
    pub(super) fn poll_take(
        &self,
        taken: &mut Taken,
        cx: &mut Context<'_>,
    ) -> (Poll<Option<Result<(), Status>>>, u32) {
        debug_assert!(
            taken.msgs.is_empty(),
            "taken before the last run was consumed"
        );
        let mut st = self.state.lock();
        let grant = st.account(taken);
        if !st.inbox.is_empty() {
            // The emptied buffer goes back as the inbox: neither side
            // allocates once both have grown to the usual run.
            std::mem::swap(&mut st.inbox, &mut taken.msgs);
            return (Poll::Ready(Some(Ok(()))), grant);
        }
        let next = match &mut st.inbox_end {
            Some(Ok(())) => Poll::Ready(None),
            Some(Err(_)) => {
                // Report the error once, then end.
                let e = st.inbox_end.replace(Ok(()));
                Poll::Ready(e.and_then(Result::err).map(Err))
            }
            None => {
                st.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        };
        (next, grant)
    }
}
