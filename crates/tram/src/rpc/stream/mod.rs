//! Streams of messages on a call: [`Streaming`], the consumer's side (a run
//! of messages taken at a time, credit returned as they are consumed), and
//! sending one message once the peer has granted credit for it. The state
//! the connection and the call's handles share is in `state`.

mod state;

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Buf;
use tram_wire::{CallId, Credit, Frame, Metadata};

use super::Status;
use super::codec::{Msg, RpcEncoder};
use crate::conn::Sender;
use crate::observe::{MethodObs, Observed};

pub(crate) use state::CallShared;
use state::Queued;

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
    #[cfg(test)]
    fn next<M: prost::Message + Default>(&mut self) -> Option<Result<M, prost::DecodeError>> {
        let mut msg = M::default();
        Some(self.next_into(&mut msg)?.map(|()| msg))
    }

    /// Decodes the next message taken into `msg` (a default one), and
    /// counts it as consumed; `None` when nothing is taken.
    ///
    /// Decoding into the caller's value, rather than returning a new one,
    /// spares a just-decoded message's moves from layer to layer: each
    /// reads back, in wider loads, fields the decoder has only just
    /// stored, and waits for those stores to land.
    #[inline]
    fn next_into<M: prost::Message>(
        &mut self,
        msg: &mut M,
    ) -> Option<Result<(), prost::DecodeError>> {
        loop {
            let (len, decoded) = match self.msgs.front_mut()? {
                Queued::Run(run) => {
                    let next = run.next_with(|b| (b.remaining(), msg.merge(b)));
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
                Queued::One(one) => {
                    let one = std::mem::take(one);
                    self.msgs.pop_front();
                    (one.len(), msg.merge(one))
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
    /// The method whose message sizes are recorded, and whether these
    /// messages are its requests.
    observed: Option<(&'static MethodObs, bool)>,
    /// A client's call, observed until its response stream ends.
    call_observed: Option<Box<Observed>>,
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

    /// The trailing metadata the call ended with (on the client), once the
    /// stream has ended with OK: `None` before, or if there was none to
    /// know (a handler's request stream).
    pub fn trailers(&self) -> Option<Metadata> {
        self.shared.trailers()
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
            observed: None,
            call_observed: None,
            _message: PhantomData,
        }
    }

    /// Records the size of each message taken as `method`'s requests (or
    /// responses).
    pub(crate) fn observed(mut self, method: &'static MethodObs, requests: bool) -> Self {
        self.observed = Some((method, requests));
        self
    }

    /// A client's call (if observed), its end seen as its response stream
    /// ends (or is dropped: cancelled), its responses' sizes recorded.
    pub(crate) fn observing(mut self, call: Option<Box<Observed>>) -> Self {
        if let Some(o) = &call {
            self.observed = Some((o.method(), false));
        }
        self.call_observed = call;
        self
    }

    /// The observed call ended with `code`.
    pub(crate) fn end_observed(&mut self, code: tram_wire::Code) {
        Observed::finish(self.call_observed.take(), code);
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
        let mut msg = M::default();
        let got = std::future::poll_fn(|cx| self.poll_into(cx, &mut msg)).await?;
        Ok(got.then_some(msg))
    }

    /// Decodes the next message into `msg` (a default one): `true` when
    /// there was one, `false` once the peer has finished.
    ///
    /// The message is decoded where the caller keeps it rather than built
    /// here and moved out: each move reads back, in wider loads, fields
    /// the decoder has only just stored, and waits for those stores to
    /// land (a fifth of a small message's cost, measured).
    fn poll_into(&mut self, cx: &mut Context<'_>, msg: &mut M) -> Poll<Result<bool, Status>> {
        let mut grant = 0;
        let outcome = loop {
            let before = self.taken.bytes;
            if let Some(decoded) = self.taken.next_into(msg) {
                if let Some((method, requests)) = &self.observed {
                    method.message(*requests, || self.taken.bytes - before);
                }
                if self.taken.due() {
                    grant += self.shared.credit(&mut self.taken);
                }
                break decoded
                    .map(|()| true)
                    .map_err(|e| Status::internal(format!("message does not decode: {e}")));
            }
            let (took, g) = self.shared.poll_take(&mut self.taken, cx);
            grant += g;
            match took {
                Poll::Ready(Some(Ok(()))) => {}
                Poll::Ready(Some(Err(status))) => break Err(status),
                Poll::Ready(None) => break Ok(false),
                Poll::Pending => {
                    self.send_credit(grant);
                    return Poll::Pending;
                }
            }
        };
        self.send_credit(grant);
        if self.call_observed.is_some() {
            match &outcome {
                Ok(false) => self.end_observed(tram_wire::Code::Ok),
                Err(status) => self.end_observed(status.code()),
                Ok(true) => {}
            }
        }
        Poll::Ready(outcome)
    }

    /// Grants the peer `grant` more messages, if any (checked inline: most
    /// messages taken grant nothing).
    #[inline]
    fn send_credit(&self, grant: u32) {
        if grant > 0 {
            self.grant(grant);
        }
    }

    #[inline(never)]
    fn grant(&self, n: u32) {
        // Credit is small and must not wait behind data.
        let _ = self
            .out
            .force_send(Frame::Credit(Credit { call: self.call, n }));
    }
}

impl<M: prost::Message + Default> futures_core::Stream for Streaming<M> {
    type Item = Result<M, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut msg = M::default();
        match std::task::ready!(self.get_mut().poll_into(cx, &mut msg)) {
            Ok(true) => Poll::Ready(Some(Ok(msg))),
            Ok(false) => Poll::Ready(None),
            Err(status) => Poll::Ready(Some(Err(status))),
        }
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
    use std::task::Waker;

    use bytes::Bytes;
    use tram_wire::MessageRun;

    use super::state::MAX_WINDOW;
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
