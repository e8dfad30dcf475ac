//! Per-call stream state shared by the connection and the call's user:
//! inbound messages bounded by the credit we granted, and the credit the
//! peer granted us for outbound messages (PROTOCOL.md §6.3).

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes};
use parking_lot::Mutex;
use tram_wire::{CallId, Credit, Frame, MessageRun, Metadata};

use super::Status;
use super::codec::{Msg, RpcEncoder};
use crate::conn::Sender;

/// One call's stream state.
pub(crate) struct CallShared {
    state: Mutex<CallState>,
}

/// Messages waiting for the consumer: one at a time, or a run of plain
/// messages as it came off the wire (parsed as it is consumed).
enum Queued {
    One(Bytes),
    Run(MessageRun),
}

struct CallState {
    inbox: VecDeque<Queued>,
    /// How the inbound direction ended, once it has.
    inbox_end: Option<Result<(), Status>>,
    reader: Option<Waker>,
    /// Messages the peer may still send before more credit.
    recv_allowed: i64,
    /// Messages consumed since credit was last returned.
    consumed: u32,
    /// Their bytes.
    consumed_bytes: usize,
    /// Our window: credit is returned once half of it is consumed.
    window: u32,
    /// The window we advertised: the least it shrinks back to.
    initial_window: u32,
    /// Messages we may still send.
    send_credit: u64,
    writer: Option<Waker>,
    /// The call is over (cancelled or the connection lost): sends fail.
    aborted: Option<Status>,
    /// The response's leading metadata, once the first message is in.
    headers: Option<Metadata>,
}

/// Bytes of unread messages one call's window aims to allow: the window
/// (counted in messages, as credit is) grows past the advertised
/// `initial_credit` while messages are small, so that a stream of small
/// messages is not held to a few dozen per round trip, and shrinks back as
/// they grow.
const WINDOW_BYTES: usize = 256 * 1024;
/// The largest window, in messages: 256 KiB of 16-byte messages. Plain
/// messages wait in the runs they arrived in, so queued messages cost
/// little beyond their bytes; raising it from 4096 gave a stream of
/// 16-byte messages 8% more messages/s (A/B, 5 pairs: the server waits
/// less for credit), for a slow reader's peak heap of 0.94 MiB instead of
/// 0.44 to 0.57 (`tests/rpc_memory.rs`; 0.82 before runs). Messages of 64
/// bytes or more are held to 256 KiB by their size before this cap.
const MAX_WINDOW: u32 = 16384;

impl CallState {
    /// Counts what `taken` says was consumed since it last came here; the
    /// credit to hand back to the peer, if it is time to.
    fn account(&mut self, taken: &mut Taken) -> u32 {
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
    fn credit(&self, taken: &mut Taken) -> u32 {
        self.state.lock().account(taken)
    }

    /// For a consumer that has consumed everything it took: takes every
    /// message that has arrived since (`Ready(Some(Ok(())))`: `taken` has
    /// them), or `Ready(None)` at a clean end. Also returns the credit to
    /// hand back to the peer, if it is time to, even when there is nothing
    /// to take yet.
    fn poll_take(
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

/// The messages a consumer took from its call's inbox in one go: one lock
/// per run of messages rather than one per message. Each counts as
/// consumed when it is handed out; the count reaches the call's state when
/// it is due a grant of credit (so credit flows back as promptly as if each
/// message were taken alone) or when the consumer comes back for more.
struct Taken {
    msgs: VecDeque<Queued>,
    /// Messages handed out and not yet counted in the call's state, and
    /// their bytes.
    consumed: u32,
    bytes: usize,
    /// How many more make credit due.
    until: u32,
}

impl Taken {
    fn new(shared: &CallShared) -> Taken {
        Taken {
            msgs: VecDeque::new(),
            consumed: 0,
            bytes: 0,
            until: shared.state.lock().window.div_ceil(2),
        }
    }

    /// The next message taken, decoded, counted as consumed. A message of
    /// a run is decoded where it lies in the run.
    fn next<M: prost::Message + Default>(&mut self) -> Option<Result<M, prost::DecodeError>> {
        loop {
            let (len, decoded) = match self.msgs.front_mut()? {
                Queued::Run(run) => {
                    let next = run.next_with(|b| (b.remaining(), M::decode(b)));
                    if run.len() == 0 {
                        self.msgs.pop_front();
                    }
                    match next {
                        Some(next) => next,
                        // An empty run (which the reader never queues)
                        // was dropped above: on to the next entry.
                        None => continue,
                    }
                }
                Queued::One(msg) => {
                    let msg = std::mem::take(msg);
                    self.msgs.pop_front();
                    (msg.len(), M::decode(msg))
                }
            };
            self.consumed += 1;
            self.bytes += len;
            return Some(decoded);
        }
    }

    /// Credit is due for what was consumed.
    fn due(&self) -> bool {
        self.consumed >= self.until
    }
}

/// A stream of messages from the peer on one call: the request stream of a
/// client-streaming or bidirectional handler, or the response stream of a
/// streaming call on the client. Read it with [`Streaming::message`] or as
/// a [`Stream`](futures_core::Stream).
///
/// Credit flows back to the peer as messages are taken, so a slow consumer
/// holds the peer back instead of buffering without bound. Dropping it
/// stops reading; on the client, dropping the call's response stream (and
/// its request sink, if any) cancels the call.
pub struct Streaming<M> {
    shared: Arc<CallShared>,
    taken: Taken,
    out: Sender<RpcEncoder>,
    call: CallId,
    /// Keeps the call alive (client side: dropping cancels the call).
    _guard: Option<Box<dyn Send + Sync>>,
    _message: PhantomData<fn() -> M>,
}

impl<M> Streaming<M> {
    /// The response's leading metadata (on the client), once the first
    /// response message has arrived: `None` before, or if the server sent
    /// none (a call that ends without a message sends it with its
    /// trailers, as gRPC's trailers-only responses do). Always `None` for
    /// a handler's request stream.
    pub fn metadata(&self) -> Option<Metadata> {
        self.shared.headers()
    }

    /// Keeps `extra` alive as long as the stream.
    pub(crate) fn with_guard(mut self, extra: Box<dyn Send + Sync>) -> Self {
        let old = self._guard.take();
        self._guard = Some(Box::new((old, extra)));
        self
    }

    pub(crate) fn new(
        shared: Arc<CallShared>,
        out: Sender<RpcEncoder>,
        call: CallId,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> Self {
        Streaming {
            taken: Taken::new(&shared),
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
        let mut grant = 0;
        let item = loop {
            if let Some(item) = self.taken.next::<M>() {
                if self.taken.due() {
                    grant += self.shared.credit(&mut self.taken);
                }
                break Some(
                    item.map_err(|e| Status::internal(format!("message does not decode: {e}"))),
                );
            }
            let (took, g) = self.shared.poll_take(&mut self.taken, cx);
            grant += g;
            match took {
                Poll::Ready(Some(Ok(()))) => {}
                Poll::Ready(Some(Err(status))) => break Some(Err(status)),
                Poll::Ready(None) => break None,
                Poll::Pending => {
                    self.send_credit(grant);
                    return Poll::Pending;
                }
            }
        };
        self.send_credit(grant);
        Poll::Ready(item)
    }

    fn send_credit(&self, grant: u32) {
        if grant > 0 {
            // Credit is small and must not wait behind data.
            let _ = self.out.force_send(Frame::Credit(Credit {
                call: self.call,
                n: grant,
            }));
        }
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
    send_message_with_credit(out, call, msg, end_stream, None).await
}

/// Sends one message for which credit has already been taken, with the
/// response's leading metadata if it is the server's first.
pub(crate) async fn send_message_with_credit<M: prost::Message>(
    out: &Sender<RpcEncoder>,
    call: CallId,
    msg: &M,
    end_stream: bool,
    metadata: Option<&Metadata>,
) -> Result<(), Status> {
    out.send(Msg {
        call,
        end_stream,
        metadata,
        msg,
    })
    .await
    .map_err(send_failed)
}

/// Why a message could not be queued, as the call's status.
pub(crate) fn send_failed(e: crate::conn::Error) -> Status {
    match e.kind() {
        crate::conn::ErrorKind::Encode => Status::resource_exhausted(e.to_string()),
        _ => Status::unavailable("connection closed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::RawMessage;

    /// `n` plain messages of 16 bytes on call 1, as one run.
    fn run_of(n: usize) -> MessageRun {
        let mut buf = bytes::BytesMut::new();
        for _ in 0..n {
            Frame::Message(tram_wire::Message {
                call: 1,
                end_stream: false,
                metadata: None,
                payload: Bytes::from_static(&[7; 16]),
            })
            .encode(&mut buf);
        }
        let run = tram_wire::FrameDecoder::new(1 << 20).decode_run(&mut buf);
        assert!(buf.is_empty());
        run.expect("plain messages make a run")
    }

    /// Messages taken and not yet handed out.
    fn left(taken: &Taken) -> usize {
        taken
            .msgs
            .iter()
            .map(|q| match q {
                Queued::One(_) => 1,
                Queued::Run(r) => r.len(),
            })
            .sum()
    }

    /// Pushes `n` messages of `size` bytes, each consumed as it arrives;
    /// the credit granted.
    fn consume(shared: &CallShared, n: usize, size: usize) -> u32 {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut taken = Taken::new(shared);
        let mut granted = 0;
        for _ in 0..n {
            shared
                .push(Bytes::from(vec![0; size]))
                .expect("within credit");
            match shared.poll_take(&mut taken, &mut cx) {
                (Poll::Ready(Some(Ok(()))), grant) => granted += grant,
                _ => panic!("a pushed message is ready"),
            }
            let msg = taken.next::<RawMessage>().expect("taken");
            assert_eq!(msg.expect("decodes").0.len(), size);
        }
        // The last is counted when the consumer comes back for more.
        if let (Poll::Pending, grant) = shared.poll_take(&mut taken, &mut cx) {
            granted += grant;
        }
        granted
    }

    #[test]
    fn a_run_taken_at_once_returns_credit_at_half_the_window() {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let shared = CallShared::new(64, 64);
        shared.push_run(run_of(40)).expect("within credit");
        shared.push_run(run_of(24)).expect("within credit");
        // One more than the credit is a violation, and nothing of it is queued.
        assert!(shared.push_run(run_of(1)).is_err());
        shared.state.lock().recv_allowed += 1;
        assert_eq!(shared.state.lock().inbox.len(), 2);

        let mut taken = Taken::new(&shared);
        let (took, grant) = shared.poll_take(&mut taken, &mut cx);
        assert!(matches!(took, Poll::Ready(Some(Ok(())))));
        assert_eq!(grant, 0);
        assert_eq!(left(&taken), 64, "both runs are taken at once");
        assert!(shared.state.lock().inbox.is_empty());
        // The credit comes due with the 32nd message handed out, while
        // half the run is still to be consumed: the peer need not stall.
        let mut handed = 0;
        while !taken.due() {
            let msg = taken.next::<RawMessage>().expect("still taken");
            assert_eq!(msg.expect("decodes").0, &[7; 16][..]);
            handed += 1;
        }
        assert_eq!(handed, 32);
        let grant = shared.credit(&mut taken);
        assert!(grant >= 32, "granted {grant}");
        assert_eq!(left(&taken), 32);
        // The rest, across the two runs, and nothing after.
        for _ in 0..32 {
            let msg = taken.next::<RawMessage>().expect("still taken");
            assert_eq!(msg.expect("decodes").0, &[7; 16][..]);
        }
        assert!(taken.next::<RawMessage>().is_none());
        assert!(taken.msgs.is_empty());
    }

    #[test]
    fn window_grows_for_small_messages_and_shrinks_back() {
        let shared = CallShared::new(64, 64);
        // Small messages: the window grows to its cap, granted as extra.
        let granted = consume(&shared, 32, 16);
        assert!(granted > 32, "granted {granted}");
        let mut total = granted;
        total += consume(&shared, 4096, 16);
        assert_eq!(shared.state.lock().window, MAX_WINDOW);
        assert!(total > 4096);
        // Large messages: it shrinks back towards the advertised window,
        // and every grant returns at least one credit.
        for _ in 0..200 {
            let w = shared.state.lock().window;
            let g = consume(&shared, (w as usize).div_ceil(2), 64 * 1024);
            assert!(g >= 1);
        }
        assert_eq!(shared.state.lock().window, 64);
        // The peer never had more credit than the window allows.
        assert!(shared.state.lock().recv_allowed <= i64::from(MAX_WINDOW));
    }
}
