//! Handlers: how a registered method turns an incoming call into its
//! answer on the wire. A unary or client-streaming handler answers once
//! (one MESSAGE with END_STREAM, or MESSAGE then END with trailers); a
//! server-streaming or bidirectional handler answers with a stream sent as
//! the client grants credit, then END.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_core::Stream;
use tokio::time::Instant;
use tram_wire::{CallId, Code, Frame, Metadata};

use super::super::codec::{Msg, RpcEncoder};
use super::super::deadline;
use super::super::exec::BoxFuture;
use super::super::stream::{CallShared, Streaming, send_failed, send_message_with_credit};
use super::super::{Request, Response, Status};
use crate::conn::{self, Sender};
use crate::observe::trace;
use crate::observe::{MethodObs, Observed, Observers, TRAM};

/// How a method's messages flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodKind {
    /// One request, one response.
    Unary,
    /// One request, a stream of responses.
    ServerStreaming,
    /// A stream of requests, one response.
    ClientStreaming,
    /// Streams both ways.
    Bidi,
}

impl MethodKind {
    pub(crate) fn streams_requests(self) -> bool {
        matches!(self, MethodKind::ClientStreaming | MethodKind::Bidi)
    }
}

/// What a handler gets from the connection for one call.
pub(crate) struct IncomingCall {
    pub(crate) call: CallId,
    pub(crate) message: Option<Bytes>,
    pub(crate) metadata: Metadata,
    pub(crate) deadline: Option<Instant>,
    pub(crate) out: Sender<RpcEncoder>,
    /// Stream state; only calls that stream in either direction have it
    /// (a unary call allocates none).
    pub(crate) shared: Option<Arc<CallShared>>,
    /// The call as observed, when anything watches (see `observe`).
    pub(crate) observed: Option<Box<Observed>>,
}

impl IncomingCall {
    /// The call's stream state. Routes of streaming kinds always get one;
    /// the fallback only keeps this total.
    fn stream_state(&self) -> Arc<CallShared> {
        self.shared.clone().unwrap_or_else(|| CallShared::new(1, 1))
    }
}

/// A registered method's handler, type-erased: it starts the call's
/// future, which writes the call's answer itself.
pub(crate) type Handler = Box<dyn Fn(IncomingCall) -> BoxFuture + Send + Sync>;

/// A handler that answers on the connection's task, without a future
/// ([`ServerBuilder::unary_sync`](super::ServerBuilder::unary_sync)). It
/// returns the future that waits for room in the outbound queue, in the
/// rare case the queue is full.
pub(crate) type Inline = Box<dyn Fn(&mut IncomingCall) -> Option<BoxFuture> + Send + Sync>;

/// A method the server serves.
pub(crate) struct Route {
    /// The method's path, as bound (`/package.Service/Method`).
    pub(crate) name: Box<str>,
    pub(crate) kind: MethodKind,
    pub(crate) handler: Handler,
    /// The same method without a future, where it has one: the driver runs
    /// it in place of `handler` (which stays for the paths that need a
    /// future: spawned handlers, the gateway).
    pub(crate) inline: Option<Inline>,
    /// The method as the server's observers see tram's calls of it, from
    /// its first observed call.
    pub(crate) observed: OnceLock<&'static MethodObs>,
}

impl Route {
    /// The method as `observers` see calls of it in `system`.
    pub(crate) fn observed(
        &self,
        observers: &Observers,
        system: &'static str,
    ) -> &'static MethodObs {
        if system != TRAM {
            return observers.method(system, &self.name);
        }
        self.observed
            .get_or_init(|| observers.method(TRAM, &self.name))
    }
}

/// The request of a single-request method, decoded from the CALL (whose
/// message and metadata it takes).
pub(crate) fn single_request<M: prost::Message + Default>(
    call: &mut IncomingCall,
) -> Result<Request<M>, Status> {
    let bytes = call
        .message
        .take()
        .ok_or_else(|| Status::internal("call opened without its request message"))?;
    let message =
        M::decode(bytes).map_err(|e| Status::internal(format!("request does not decode: {e}")))?;
    // Taken, not cloned: nothing reads the call's metadata after its
    // request is made, and a clone and its drop are two locked operations.
    Ok(Request::from_wire(
        message,
        std::mem::take(&mut call.metadata),
        call.deadline,
    ))
}

/// The request stream of a client-streaming or bidirectional method.
pub(crate) fn request_stream<M>(call: &IncomingCall) -> Request<Streaming<M>> {
    let mut requests = Streaming::new(call.stream_state(), call.out.clone(), call.call, None);
    if let Some(o) = &call.observed {
        requests = requests.observed(o.method(), true);
    }
    Request::from_wire(requests, call.metadata.clone(), call.deadline)
}

/// Runs a handler that answers once (unary, client streaming) under the
/// call's deadline, and sends its answer as the call's end.
pub(crate) fn respond_one<M, Fut>(call: IncomingCall, handler: Result<Fut, Status>) -> BoxFuture
where
    M: prost::Message + Send + 'static,
    Fut: Future<Output = Result<Response<M>, Status>> + Send + 'static,
{
    let state = match (handler, call.deadline) {
        (Ok(fut), None) => One::Handler { fut },
        (Ok(fut), Some(at)) => One::Deadline {
            fut,
            at,
            timer: None,
        },
        (Err(status), _) => One::Failed {
            status: Some(status),
        },
    };
    Box::pin(RespondOne { call, state })
}

pin_project_lite::pin_project! {
    /// The future of a handler that answers once, written out so that the
    /// common case is small and moves little: the handler's own future
    /// beside the call, the answer queued synchronously when it is ready.
    /// The deadline's timer and waiting for room in the outbound queue are
    /// boxed, for the calls that need them; the timer is made only once
    /// the handler has waited (one that answers at once, as most do,
    /// never registers one with the runtime's timer, whose lock every
    /// worker shares).
    struct RespondOne<Fut> {
        call: IncomingCall,
        #[pin]
        state: One<Fut>,
    }
}

pin_project_lite::pin_project! {
    #[project = OneProj]
    enum One<Fut> {
        Handler { #[pin] fut: Fut },
        Deadline {
            #[pin]
            fut: Fut,
            at: tokio::time::Instant,
            timer: Option<Pin<Box<tokio::time::Sleep>>>,
        },
        Failed { status: Option<Status> },
        Sending { fut: BoxFuture },
    }
}

impl<M, Fut> Future for RespondOne<Fut>
where
    M: prost::Message + Send + 'static,
    Fut: Future<Output = Result<Response<M>, Status>>,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        let outcome = {
            let _in_call = this.call.observed.as_deref().map(Observed::enter);
            match this.state.as_mut().project() {
                OneProj::Handler { fut } => ready!(fut.poll(cx)),
                OneProj::Deadline { fut, at, timer } => match fut.poll(cx) {
                    Poll::Ready(outcome) => outcome,
                    Poll::Pending => {
                        let at = *at;
                        let timer =
                            timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                        ready!(timer.as_mut().poll(cx));
                        Err(deadline::exceeded())
                    }
                },
                OneProj::Failed { status } => Err(status
                    .take()
                    .unwrap_or_else(|| Status::internal("call polled after its end"))),
                OneProj::Sending { fut } => return fut.as_mut().poll(cx),
            }
        };
        match finish_unary(this.call, outcome) {
            None => Poll::Ready(()),
            Some(mut waiting) => {
                let polled = waiting.as_mut().poll(cx);
                this.state.set(One::Sending { fut: waiting });
                polled
            }
        }
    }
}

/// Answers a unary call at once with `f`, a handler that does not await:
/// the request decoded, `f` run inside the call's span, the answer queued.
pub(crate) fn answer_now<Req, Resp, F>(call: &mut IncomingCall, f: &F) -> Option<BoxFuture>
where
    Req: prost::Message + Default,
    Resp: prost::Message + Send + 'static,
    F: Fn(Request<Req>) -> Result<Response<Resp>, Status>,
{
    let outcome = {
        let request = single_request(call);
        let _in_call = call.observed.as_deref().map(Observed::enter);
        request.and_then(f)
    };
    finish_unary(call, outcome)
}

/// Runs a handler that answers with a stream (server streaming, bidi) under
/// the call's deadline: sends each item as credit allows, then END.
pub(crate) fn respond_stream<M, S, Fut>(
    mut call: IncomingCall,
    handler: Result<Fut, Status>,
) -> BoxFuture
where
    M: prost::Message + 'static,
    S: Stream<Item = Result<M, Status>> + Send + 'static,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
{
    let mut observed = call.observed.take();
    let scope = observed.as_deref().map(Observed::scope);
    let respond = async move {
        let outcome = deadline::within(call.deadline, async {
            let (stream, headers, trailers) = handler?.await?.into_parts();
            let unsent = send_stream(&call, stream, headers, observed.as_deref()).await?;
            // No message carried the headers: they go with the trailers,
            // as in a gRPC trailers-only response.
            Ok(merge(unsent, trailers))
        })
        .await;
        let code = finish_stream(&call, outcome);
        if let Some(o) = &mut observed {
            o.end(code);
        }
    };
    match scope {
        None => Box::pin(respond),
        Some((span, trace)) => {
            use tracing::Instrument;
            Box::pin(trace::scoped(trace, respond).instrument(span))
        }
    }
}

/// Sends a single response as the call's end: one MESSAGE frame with
/// END_STREAM (the unary fast path), or MESSAGE then END when there are
/// trailers. The answer is queued at once when the queue has room (it
/// nearly always has); otherwise the returned future waits for room and
/// sends it.
fn finish_unary<M>(
    call: &mut IncomingCall,
    outcome: Result<Response<M>, Status>,
) -> Option<BoxFuture>
where
    M: prost::Message + Send + 'static,
{
    let observed = call.observed.take();
    let out = &call.out;
    let status = match outcome {
        Ok(resp) => {
            let (msg, headers, trailers) = resp.into_parts();
            if let Some(o) = &observed {
                o.response_message(|| msg.encoded_len());
            }
            let frame = Msg {
                call: call.call,
                end_stream: trailers.is_empty(),
                metadata: (!headers.is_empty()).then_some(&headers),
                msg: &msg,
            };
            match out.try_send(frame) {
                Ok(()) if trailers.is_empty() => {
                    Observed::finish(observed, Code::Ok);
                    return None;
                }
                Ok(()) => Status::new(Code::Ok, "").with_trailers(trailers),
                Err(conn::TrySendError::Full(_)) => {
                    let (out, id) = (out.clone(), call.call);
                    return Some(Box::pin(async move {
                        let frame = Msg {
                            call: id,
                            end_stream: trailers.is_empty(),
                            metadata: (!headers.is_empty()).then_some(&headers),
                            msg: &msg,
                        };
                        let status = match out.send(frame).await {
                            Ok(()) if trailers.is_empty() => {
                                Observed::finish(observed, Code::Ok);
                                return;
                            }
                            Ok(()) => Status::new(Code::Ok, "").with_trailers(trailers),
                            Err(e) => match refused(e) {
                                Some(status) => status,
                                None => return,
                            },
                        };
                        Observed::finish(observed, status.code());
                        let _ = out.force_send(Frame::End(status.to_wire(id)));
                    }));
                }
                Err(conn::TrySendError::Encode(e)) => refused(e)?,
                Err(conn::TrySendError::Closed(_)) => return None,
            }
        }
        Err(status) => status,
    };
    Observed::finish(observed, status.code());
    let _ = out.force_send(Frame::End(status.to_wire(call.call)));
    None
}

/// The status to end a call with when its answer could not be queued:
/// too large for the peer; `None` if the connection is gone.
fn refused(e: conn::Error) -> Option<Status> {
    (e.kind() == conn::ErrorKind::Encode)
        .then(|| Status::resource_exhausted(format!("response too large: {e}")))
}

/// `a`'s entries, then `b`'s.
fn merge(a: Metadata, b: Metadata) -> Metadata {
    if a.is_empty() {
        return b;
    }
    if b.is_empty() {
        return a;
    }
    let raw = [a.as_bytes().as_ref(), b.as_bytes().as_ref()].concat();
    Metadata::from_raw(raw.into()).unwrap_or(b)
}

/// Ends a streaming response: END with OK and trailers, or the error.
/// Returns the call's code.
fn finish_stream(call: &IncomingCall, outcome: Result<Metadata, Status>) -> Code {
    let status = match outcome {
        Ok(trailers) => Status::new(Code::Ok, "").with_trailers(trailers),
        Err(s) => s,
    };
    let code = status.code();
    let _ = call.out.force_send(Frame::End(status.to_wire(call.call)));
    code
}

/// Messages of a response stream taken from the handler and queued
/// together, at most.
const STREAM_RUN: usize = 64;

/// Drives a response stream: each item is sent when the client has granted
/// credit for it.
///
/// The first message carries `headers` (the response's leading metadata);
/// if there is none, they are handed back to go with the trailers.
async fn send_stream<M, S>(
    call: &IncomingCall,
    stream: S,
    headers: Metadata,
    observed: Option<&Observed>,
) -> Result<Metadata, Status>
where
    M: prost::Message,
    S: Stream<Item = Result<M, Status>>,
{
    let mut headers = Some(headers).filter(|h| !h.is_empty());
    // Credit taken from the call's shared state, counted down here (a
    // cancelled call stops this loop by dropping it, not through credit).
    let mut credit: u64 = 0;
    let shared = &call.stream_state();
    let mut stream = pin!(stream);
    // While the handler's stream has messages ready and the client has
    // granted credit for them, they are only queued (corked); the queue is
    // written as soon as either runs dry: a burst costs one write. The
    // messages ready are taken a run at a time and queued under one lock.
    let mut cork = None;
    let mut run: Vec<M> = Vec::new();
    loop {
        // The messages ready now (at least one), and whether the stream
        // ended after them, or failed.
        let ended = std::future::poll_fn(|cx| {
            while run.len() < STREAM_RUN {
                match stream.as_mut().poll_next(cx) {
                    Poll::Ready(Some(Ok(m))) => run.push(m),
                    Poll::Ready(Some(Err(s))) => return Poll::Ready(Some(Err(s))),
                    Poll::Ready(None) => return Poll::Ready(Some(Ok(()))),
                    Poll::Pending if run.is_empty() => {
                        cork = None;
                        return Poll::Pending;
                    }
                    Poll::Pending => break,
                }
            }
            Poll::Ready(None)
        })
        .await;
        if let Some(o) = observed {
            run.iter()
                .for_each(|m| o.response_message(|| m.encoded_len()));
        }
        let mut sent = 0;
        while sent < run.len() {
            if credit == 0 {
                credit = shared.take_all_send_credit()?;
                if credit == 0 {
                    cork = None;
                    shared.take_send_credit().await?;
                    credit = 1 + shared.take_all_send_credit()?;
                }
            }
            if cork.is_none() {
                cork = Some(call.out.cork());
            }
            if let Some(first) = headers.take() {
                // The first message carries the response's headers.
                send_message_with_credit(&call.out, call.call, &run[0], false, Some(&first))
                    .await?;
                (sent, credit) = (1, credit - 1);
                continue;
            }
            let upto = run
                .len()
                .min(sent + usize::try_from(credit).unwrap_or(usize::MAX));
            let mut msgs = run[sent..upto].iter().map(|msg| Msg {
                call: call.call,
                end_stream: false,
                metadata: None,
                msg,
            });
            let queued = call.out.try_send_iter(&mut msgs).map_err(send_failed)?;
            sent += queued;
            credit -= queued as u64;
            if sent < upto {
                // The queue is full: wait for the writer to make room.
                call.out.ready().await.map_err(send_failed)?;
            }
        }
        run.clear();
        match ended {
            None => {}
            Some(Ok(())) => return Ok(headers.unwrap_or_default()),
            Some(Err(s)) => return Err(s),
        }
    }
}
