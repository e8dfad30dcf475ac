//! Per-call stream state shared by the connection and the call's user:
//! inbound messages bounded by the credit we granted, and the credit the
//! peer granted us for outbound messages (PROTOCOL.md §6.3).

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;
use tram_wire::{CallId, Credit, Frame};

use super::Status;
use super::codec::{Msg, RpcEncoder};
use crate::conn::Sender;

/// One call's stream state.
pub(crate) struct CallShared {
    st: Mutex<CallState>,
}

struct CallState {
    inbox: VecDeque<Bytes>,
    /// How the inbound direction ended, once it has.
    inbox_end: Option<Result<(), Status>>,
    reader: Option<Waker>,
    /// Messages the peer may still send before more credit.
    recv_allowed: i64,
    /// Messages consumed since credit was last returned.
    consumed: u32,
    /// Our window: credit is returned once half of it is consumed.
    window: u32,
    /// Messages we may still send.
    send_credit: u64,
    writer: Option<Waker>,
    /// The call is over (cancelled or the connection lost): sends fail.
    aborted: Option<Status>,
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
            st: Mutex::new(CallState {
                inbox: VecDeque::new(),
                inbox_end: None,
                reader: None,
                recv_allowed: i64::from(window),
                consumed: 0,
                window: window.max(1),
                send_credit: u64::from(send_credit),
                writer: None,
                aborted: None,
            }),
        })
    }

    /// A message from the peer.
    pub(crate) fn push(&self, msg: Bytes) -> Result<(), CreditViolation> {
        let mut st = self.st.lock();
        st.recv_allowed -= 1;
        if st.recv_allowed < 0 {
            return Err(CreditViolation);
        }
        if st.inbox_end.is_none() {
            st.inbox.push_back(msg);
            if let Some(w) = st.reader.take() {
                w.wake();
            }
        }
        Ok(())
    }

    /// The peer's direction ended (`Ok`), or the call failed (`Err`).
    pub(crate) fn close_inbox(&self, end: Result<(), Status>) {
        let mut st = self.st.lock();
        if st.inbox_end.is_none() {
            st.inbox_end = Some(end);
        }
        if let Some(w) = st.reader.take() {
            w.wake();
        }
    }

    /// CREDIT from the peer.
    pub(crate) fn add_credit(&self, n: u32) -> Result<(), CreditViolation> {
        let mut st = self.st.lock();
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
        let mut st = self.st.lock();
        if st.inbox_end.is_none() {
            st.inbox_end = Some(Err(status.clone()));
        }
        st.aborted.get_or_insert(status);
        let (r, w) = (st.reader.take(), st.writer.take());
        drop(st);
        r.into_iter().chain(w).for_each(Waker::wake);
    }

    /// Waits for credit to send one message, and takes it.
    pub(crate) async fn take_send_credit(&self) -> Result<(), Status> {
        std::future::poll_fn(|cx| {
            let mut st = self.st.lock();
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

    /// The next inbound message; `Ready(None)` at a clean end. Returns the
    /// credit to hand back to the peer, if it is time to.
    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<(Option<Result<Bytes, Status>>, u32)> {
        let mut st = self.st.lock();
        if let Some(msg) = st.inbox.pop_front() {
            st.consumed += 1;
            let mut grant = 0;
            // Return credit in batches of half the window, not per message,
            // and not once the peer is done sending.
            if st.consumed >= st.window.div_ceil(2) && st.inbox_end.is_none() {
                grant = std::mem::take(&mut st.consumed);
                st.recv_allowed += i64::from(grant);
            }
            return Poll::Ready((Some(Ok(msg)), grant));
        }
        match &mut st.inbox_end {
            Some(Ok(())) => Poll::Ready((None, 0)),
            Some(Err(_)) => {
                // Report the error once, then end.
                let e = st.inbox_end.replace(Ok(()));
                Poll::Ready((e.and_then(Result::err).map(Err), 0))
            }
            None => {
                st.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A stream of messages from the peer on one call: the request stream of a
/// client-streaming or bidirectional handler, or the response stream of a
/// streaming call on the client.
///
/// Credit flows back to the peer as messages are taken, so a slow consumer
/// holds the peer back instead of buffering without bound. Dropping it
/// stops reading; on the client, dropping the call's stream cancels it.
pub struct Streaming<M> {
    shared: Arc<CallShared>,
    out: Sender<RpcEncoder>,
    call: CallId,
    /// Keeps the call alive (client side: dropping cancels the call).
    _guard: Option<Box<dyn Send + Sync>>,
    _message: PhantomData<fn() -> M>,
}

impl<M> Streaming<M> {
    pub(crate) fn new(
        shared: Arc<CallShared>,
        out: Sender<RpcEncoder>,
        call: CallId,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> Self {
        Streaming {
            shared,
            out,
            call,
            _guard: guard,
            _message: PhantomData,
        }
    }
}

impl<M: prost::Message + Default> Streaming<M> {
    /// The next message, `Ok(None)` when the peer has finished.
    ///
    /// # Errors
    ///
    /// The call's status if it failed, or [`Code::Internal`](tram_wire::Code)
    /// for a message that does not decode.
    pub async fn message(&mut self) -> Result<Option<M>, Status> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next_message(cx))
            .await
            .transpose()
    }

    fn poll_next_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<M, Status>>> {
        let (item, grant) = std::task::ready!(self.shared.poll_next(cx));
        if grant > 0 {
            // Credit is small and must not wait behind data.
            let _ = self.out.force_send(Frame::Credit(Credit {
                call: self.call,
                n: grant,
            }));
        }
        Poll::Ready(item.map(|r| {
            r.and_then(|b| {
                M::decode(b).map_err(|e| Status::internal(format!("message does not decode: {e}")))
            })
        }))
    }
}

impl<M: prost::Message + Default> futures_core::Stream for Streaming<M> {
    type Item = Result<M, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_next_message(cx)
    }
}

impl<M> std::fmt::Debug for Streaming<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming")
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

/// Sends one message on a call once the peer has granted credit for it.
pub(crate) async fn send_message<M: prost::Message>(
    out: &Sender<RpcEncoder>,
    shared: &CallShared,
    call: CallId,
    msg: &M,
    end_stream: bool,
) -> Result<(), Status> {
    shared.take_send_credit().await?;
    out.send(Msg {
        call,
        end_stream,
        msg,
    })
    .await
    .map_err(|e| match e.kind() {
        crate::conn::ErrorKind::Encode => Status::resource_exhausted(e.to_string()),
        _ => Status::unavailable("connection closed"),
    })
}
