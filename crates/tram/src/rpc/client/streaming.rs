//! Streaming calls. Requests go out as a `Stream` (as tonic takes them) or
//! through a sink: [`ClientStreamSink`] for client streaming (send, then
//! `finish` for the response) and [`RequestSink`] for the sending half of
//! a bidirectional call (send, then `close`). Responses come back as a
//! [`Streaming`], the same type a server's handler reads requests from.

use std::marker::PhantomData;
use std::pin::pin;
use std::sync::Arc;

use futures_core::Stream;
use parking_lot::Mutex;
use tram_wire::{CallId, Metadata};

use super::super::stream::{CallShared, Streaming, send_message};
use super::super::{IntoStreamingRequest, Request, Response, Status, deadline};
use super::Channel;
use super::conn::CallHandle;
use super::share::ConnRef;
use crate::observe::{MethodObs, Observed};

/// Sends the requests of a bidirectional call. Dropping it without
/// [`RequestSink::close`] leaves the request stream open; dropping it and
/// the call's response [`Streaming`] cancels the call.
pub struct RequestSink<Req> {
    conn: ConnRef,
    shared: Arc<CallShared>,
    id: CallId,
    guard: Arc<Mutex<CallHandle>>,
    closed: bool,
    /// The method whose request sizes are recorded, if observed.
    method: Option<&'static MethodObs>,
    _types: PhantomData<fn(Req)>,
}

impl<Req: prost::Message> RequestSink<Req> {
    /// Sends one request, waiting for the server's credit.
    ///
    /// # Errors
    ///
    /// The call's status if it has ended (the server may end it early),
    /// `UNAVAILABLE`, or `FAILED_PRECONDITION` after [`RequestSink::close`].
    pub async fn send(&mut self, msg: Req) -> Result<(), Status> {
        if self.closed {
            return Err(Status::failed_precondition("request stream already closed"));
        }
        if let Some(m) = &self.method {
            m.message(true, || msg.encoded_len());
        }
        send_message(&self.conn.out, &self.shared, self.id, &msg, false).await
    }

    /// Ends the request stream (a half-close); responses keep coming.
    pub fn close(&mut self) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        if self.conn.half_close(self.id) {
            self.guard.lock().done = true;
        }
    }
}

impl<Req> std::fmt::Debug for RequestSink<Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestSink")
            .field("call", &self.id)
            .field("closed", &self.closed)
            .finish()
    }
}

/// A client-streaming call in progress: send requests, then
/// [`ClientStreamSink::finish`] for the response. Dropping it before
/// `finish` returns cancels the call.
pub struct ClientStreamSink<Req, Resp> {
    sink: RequestSink<Req>,
    responses: Streaming<Resp>,
}

impl<Req: prost::Message, Resp: prost::Message + Default> ClientStreamSink<Req, Resp> {
    /// Sends one request, waiting for the server's credit.
    ///
    /// # Errors
    ///
    /// As [`RequestSink::send`].
    pub async fn send(&mut self, msg: Req) -> Result<(), Status> {
        self.sink.send(msg).await
    }

    /// Ends the request stream and waits for the response.
    ///
    /// # Errors
    ///
    /// The call's status.
    pub async fn finish(mut self) -> Result<Response<Resp>, Status> {
        self.sink.close();
        single_response(&self.sink.guard, &mut self.responses).await
    }
}

impl<Req, Resp> std::fmt::Debug for ClientStreamSink<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.sink.fmt(f)
    }
}

/// The one response of a client-streaming call, with its headers.
async fn single_response<Resp: prost::Message + Default>(
    guard: &Mutex<CallHandle>,
    responses: &mut Streaming<Resp>,
) -> Result<Response<Resp>, Status> {
    let msg = responses
        .message()
        .await?
        .ok_or_else(|| Status::internal("call ended without a response message"))?;
    guard.lock().done = true;
    responses.end_observed(tram_wire::Code::Ok);
    let resp = Response::new(msg);
    Ok(match responses.metadata() {
        Some(h) => resp.with_metadata(h),
        None => resp,
    })
}

/// A bidirectional call's request sender task, aborted when the call's
/// response stream is dropped.
struct Sender(tokio::task::JoinHandle<()>);

impl Drop for Sender {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Channel {
    /// A server-streaming call: one request, a stream of responses.
    ///
    /// # Errors
    ///
    /// As [`Channel::unary`], for opening the call; the stream carries the
    /// rest.
    pub async fn server_streaming<Req, Resp>(
        &self,
        path: &str,
        request: Request<Req>,
    ) -> Result<Streaming<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let (msg, metadata, timeout) = request.into_parts();
        let (handle, shared, observed) = self
            .open_stream(path, Some(&msg), metadata, timeout, true)
            .await?;
        let (conn, id) = (handle.conn.clone(), handle.id);
        let guard = Box::new(Mutex::new(handle));
        Ok(Streaming::new(shared, conn.out.clone(), id, Some(guard)).observing(observed))
    }

    /// A client-streaming call: every request of `requests` is sent (as the
    /// server grants credit), then the request stream is closed, and the
    /// one response returned. If the server answers early (an error, say),
    /// sending stops.
    ///
    /// # Errors
    ///
    /// As [`Channel::unary`].
    pub async fn client_streaming<R, Resp>(
        &self,
        path: &str,
        requests: R,
    ) -> Result<Response<Resp>, Status>
    where
        R: IntoStreamingRequest,
        R::Message: prost::Message,
        Resp: prost::Message + Default,
    {
        let (requests, metadata, timeout) = requests.into_streaming_request().into_parts();
        let at = deadline::after(timeout);
        deadline::within(at, async {
            let (mut sink, mut responses) = self
                .open_duplex::<R::Message, Resp>(path, metadata, timeout)
                .await?;
            let guard = sink.guard.clone();
            let sending = send_all(&mut sink, requests);
            let mut sending = pin!(sending);
            let mut sent = false;
            loop {
                tokio::select! {
                    biased;
                    answer = single_response(&guard, &mut responses) => return answer,
                    result = &mut sending, if !sent => {
                        sent = true;
                        result?;
                    }
                }
            }
        })
        .await
    }

    /// A bidirectional call: the requests of `requests` are sent by a task
    /// of their own (as the server grants credit; the request stream is
    /// closed when it ends), while the responses are read from the stream
    /// returned. Dropping that stream cancels the call and stops sending.
    ///
    /// # Errors
    ///
    /// As [`Channel::unary`], for opening the call.
    pub async fn bidi_streaming<R, Resp>(
        &self,
        path: &str,
        requests: R,
    ) -> Result<Streaming<Resp>, Status>
    where
        R: IntoStreamingRequest,
        R::Message: prost::Message + Send + 'static,
        Resp: prost::Message + Default,
    {
        let (requests, metadata, timeout) = requests.into_streaming_request().into_parts();
        let (mut sink, responses) = self
            .open_duplex::<R::Message, Resp>(path, metadata, timeout)
            .await?;
        let sender = tokio::spawn(async move {
            // A failure shows on the response stream as the call's status.
            let _ = send_all(&mut sink, requests).await;
        });
        Ok(responses.with_guard(Box::new(Sender(sender))))
    }

    /// A client-streaming call driven by hand: send requests with the sink,
    /// then [`ClientStreamSink::finish`] for the response. The request's
    /// metadata and timeout apply to the call.
    ///
    /// # Errors
    ///
    /// As [`Channel::unary`], for opening the call.
    pub async fn client_stream_sink<Req, Resp>(
        &self,
        path: &str,
        request: Request<()>,
    ) -> Result<ClientStreamSink<Req, Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let ((), metadata, timeout) = request.into_parts();
        let (sink, responses) = self.open_duplex(path, metadata, timeout).await?;
        Ok(ClientStreamSink { sink, responses })
    }

    /// A bidirectional call driven by hand: a sink for requests and a
    /// stream of responses. The request's metadata and timeout apply to
    /// the call.
    ///
    /// # Errors
    ///
    /// As [`Channel::unary`], for opening the call.
    pub async fn bidi_stream_sink<Req, Resp>(
        &self,
        path: &str,
        request: Request<()>,
    ) -> Result<(RequestSink<Req>, Streaming<Resp>), Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let ((), metadata, timeout) = request.into_parts();
        self.open_duplex(path, metadata, timeout).await
    }

    /// Opens a call whose requests stream: the sink and the responses.
    async fn open_duplex<Req, Resp>(
        &self,
        path: &str,
        metadata: Metadata,
        timeout: Option<std::time::Duration>,
    ) -> Result<(RequestSink<Req>, Streaming<Resp>), Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let (handle, shared, observed) = self
            .open_stream::<Req>(path, None, metadata, timeout, false)
            .await?;
        let (conn, id) = (handle.conn.clone(), handle.id);
        let guard = Arc::new(Mutex::new(handle));
        let method = observed.as_ref().map(|o| o.method());
        let responses = Streaming::new(
            shared.clone(),
            conn.out.clone(),
            id,
            Some(Box::new(guard.clone())),
        )
        .observing(observed);
        let sink = RequestSink {
            conn,
            shared,
            id,
            guard,
            closed: false,
            method,
            _types: PhantomData,
        };
        Ok((sink, responses))
    }

    /// Opens a streaming call: its handle, stream state and observation
    /// (ended here if the call cannot be opened).
    async fn open_stream<M: prost::Message>(
        &self,
        path: &str,
        msg: Option<&M>,
        metadata: Metadata,
        timeout: Option<std::time::Duration>,
        end_stream: bool,
    ) -> Result<(CallHandle, Arc<CallShared>, Option<Box<Observed>>), Status> {
        let (metadata, observed) = self.observe_call(path, metadata);
        if let (Some(o), Some(msg)) = (&observed, msg) {
            o.request_message(|| msg.encoded_len());
        }
        let at = deadline::after(timeout);
        let opened = deadline::within(at, async {
            let conn = self.pool.connection().await?;
            let metadata = conn.intercept(path, metadata)?;
            let shared = conn.new_shared();
            let handle = conn
                .open(
                    path,
                    msg,
                    metadata,
                    timeout,
                    end_stream,
                    Some(shared.clone()),
                )
                .await?;
            Ok((handle, shared))
        })
        .await;
        match opened {
            Ok((handle, shared)) => Ok((handle, shared, observed)),
            Err(status) => {
                Observed::finish(observed, status.code());
                Err(status)
            }
        }
    }
}

/// Sends every request of `requests`, then closes the request stream.
async fn send_all<Req, S>(sink: &mut RequestSink<Req>, requests: S) -> Result<(), Status>
where
    Req: prost::Message,
    S: Stream<Item = Req>,
{
    let mut requests = pin!(requests);
    while let Some(msg) = std::future::poll_fn(|cx| requests.as_mut().poll_next(cx)).await {
        sink.send(msg).await?;
    }
    sink.close();
    Ok(())
}
