//! Handlers: how a registered method turns an incoming call into its
//! answer on the wire. A unary or client-streaming handler answers once
//! (one MESSAGE with END_STREAM, or MESSAGE then END with trailers); a
//! server-streaming or bidirectional handler answers with a stream sent as
//! the client grants credit, then END.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

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

/// A method the server serves.
pub(crate) struct Route {
    /// The method's path, as bound (`/package.Service/Method`).
    pub(crate) name: Box<str>,
    pub(crate) kind: MethodKind,
    pub(crate) handler: Handler,
}

/// The request of a single-request method, decoded from the CALL (whose
/// message it takes).
pub(crate) fn single_request<M: prost::Message + Default>(
    call: &mut IncomingCall,
) -> Result<Request<M>, Status> {
    let bytes = call
        .message
        .take()
        .ok_or_else(|| Status::internal("call opened without its request message"))?;
    let message =
        M::decode(bytes).map_err(|e| Status::internal(format!("request does not decode: {e}")))?;
    Ok(Request::from_wire(
        message,
        call.metadata.clone(),
        call.deadline,
    ))
}

/// The request stream of a client-streaming or bidirectional method.
pub(crate) fn request_stream<M>(call: &IncomingCall) -> Request<Streaming<M>> {
    let requests = Streaming::new(call.stream_state(), call.out.clone(), call.call, None);
    Request::from_wire(requests, call.metadata.clone(), call.deadline)
}

/// Runs a handler that answers once (unary, client streaming) under the
/// call's deadline, and sends its answer as the call's end.
pub(crate) fn respond_one<M, Fut>(call: IncomingCall, handler: Result<Fut, Status>) -> BoxFuture
where
    M: prost::Message + 'static,
    Fut: Future<Output = Result<Response<M>, Status>> + Send + 'static,
{
    Box::pin(async move {
        let outcome = match handler {
            Ok(fut) => deadline::within(call.deadline, fut).await,
            Err(s) => Err(s),
        };
        finish_unary(&call, outcome).await;
    })
}

/// Runs a handler that answers with a stream (server streaming, bidi) under
/// the call's deadline: sends each item as credit allows, then END.
pub(crate) fn respond_stream<M, S, Fut>(
    call: IncomingCall,
    handler: Result<Fut, Status>,
) -> BoxFuture
where
    M: prost::Message + 'static,
    S: Stream<Item = Result<M, Status>> + Send + 'static,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
{
    Box::pin(async move {
        let outcome = deadline::within(call.deadline, async {
            let (stream, headers, trailers) = handler?.await?.into_parts();
            let unsent = send_stream(&call, stream, headers).await?;
            // No message carried the headers: they go with the trailers,
            // as in a gRPC trailers-only response.
            Ok(merge(unsent, trailers))
        })
        .await;
        finish_stream(&call, outcome);
    })
}

/// Sends a single response as the call's end: one MESSAGE frame with
/// END_STREAM (the unary fast path), or MESSAGE then END when there are
/// trailers.
async fn finish_unary<M: prost::Message>(
    call: &IncomingCall,
    outcome: Result<Response<M>, Status>,
) {
    let out = &call.out;
    let result: Result<(), Status> = match outcome {
        Ok(resp) => {
            let (msg, headers, trailers) = resp.into_parts();
            let sent = out
                .send(Msg {
                    call: call.call,
                    end_stream: trailers.is_empty(),
                    metadata: (!headers.is_empty()).then_some(&headers),
                    msg: &msg,
                })
                .await;
            match sent {
                Ok(()) if trailers.is_empty() => return,
                Ok(()) => Err(Status::new(Code::Ok, "").with_trailers(trailers)),
                Err(e) if e.kind() == conn::ErrorKind::Encode => Err(Status::resource_exhausted(
                    format!("response too large: {e}"),
                )),
                Err(_) => return,
            }
        }
        Err(status) => Err(status),
    };
    if let Err(status) = result {
        let _ = out.force_send(Frame::End(status.to_wire(call.call)));
    }
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
fn finish_stream(call: &IncomingCall, outcome: Result<Metadata, Status>) {
    let status = match outcome {
        Ok(trailers) => Status::new(Code::Ok, "").with_trailers(trailers),
        Err(s) => s,
    };
    let _ = call.out.force_send(Frame::End(status.to_wire(call.call)));
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
