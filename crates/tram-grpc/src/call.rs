//! One gRPC call over HTTP/2: its headers checked and mapped, the request
//! body deframed, the tram handler called (unary ones in this task,
//! streaming ones over the in-memory tram connection), and the answer sent
//! back as HTTP/2 data and trailers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use h2::RecvStream;
use h2::server::SendResponse;
use http::{HeaderMap, HeaderValue, Request as HttpRequest, Response as HttpResponse, StatusCode};
use tram::gateway::{self, RawMessage};
use tram::{Channel, Metadata, MethodKind as Kind, Request, Server, Status, Streaming};

use crate::web::{self, Web};
use crate::wire::{self, Deframer, Encoding};
use crate::{GatewayConfig, SYSTEM};

/// One gRPC call's context.
pub(crate) struct Call {
    pub(crate) server: Server,
    /// Streaming calls go over this in-memory tram connection (opened on
    /// the first one); unary calls run in the call's own task.
    pub(crate) channel: Channel,
    pub(crate) config: Arc<GatewayConfig>,
    /// Connect and gRPC-Web requests go here.
    pub(crate) web: Arc<Web>,
    pub(crate) peer: SocketAddr,
}

/// What the request headers said.
struct Head {
    path: String,
    kind: Kind,
    encoding: Encoding,
    gzip_responses: bool,
    request: Request<()>,
}

impl Call {
    pub(crate) async fn run(
        self,
        request: HttpRequest<RecvStream>,
        mut respond: SendResponse<Bytes>,
    ) {
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let method = request.method();
        if method == http::Method::GET
            || method == http::Method::OPTIONS
            || web::is_web(content_type)
        {
            return web::h2::serve(&self.web, request, respond, self.peer, &self.channel).await;
        }
        // gRPC-Web's types also start so; they went to `web` above.
        let grpc = content_type.is_some_and(|ct| ct.starts_with("application/grpc"));
        let (parts, body) = request.into_parts();
        if parts.method != http::Method::POST {
            return http_error(&mut respond, StatusCode::METHOD_NOT_ALLOWED);
        }
        if !grpc {
            return http_error(&mut respond, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        }
        let head = match self.head(parts.uri.path(), &parts.headers) {
            Ok(h) => h,
            Err(status) => return trailers_only(&mut respond, &status),
        };
        let mut body = Body {
            stream: body,
            buf: BytesMut::new(),
            deframer: Deframer::new(self.config.max_message_size),
            encoding: head.encoding,
        };
        self.dispatch(&head, &mut body, &mut respond).await;
    }

    fn head(&self, path: &str, headers: &HeaderMap) -> Result<Head, Status> {
        let kind = self
            .server
            .method_kind(path)
            .ok_or_else(|| Status::unimplemented(format!("unknown method {path}")))?;
        let encoding = match headers.get("grpc-encoding").map(|v| v.to_str()) {
            None => Encoding::Identity,
            Some(Ok(v)) => Encoding::parse(v).ok_or_else(|| {
                Status::unimplemented(format!(
                    "grpc-encoding {v} is not supported (supported: {})",
                    wire::ACCEPT_ENCODING
                ))
            })?,
            Some(Err(_)) => return Err(Status::unimplemented("unreadable grpc-encoding")),
        };
        let gzip_responses = self.config.compress_responses
            && headers
                .get_all("grpc-accept-encoding")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .any(|e| e.trim() == "gzip");
        let mut request = Request::new(()).with_metadata(wire::headers_to_metadata(headers));
        if let Some(t) = headers
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(wire::parse_timeout)
        {
            request = request.with_timeout(t);
        }
        Ok(Head {
            path: path.to_owned(),
            kind,
            encoding,
            gzip_responses,
            request,
        })
    }

    /// Runs the call: reads the request messages the method's kind takes,
    /// and writes what the tram call answers.
    async fn dispatch(&self, head: &Head, body: &mut Body, respond: &mut SendResponse<Bytes>) {
        let (metadata, timeout) = (head.request.metadata().clone(), head.request.timeout());
        let request = |msg: RawMessage| {
            let r = Request::new(msg).with_metadata(metadata.clone());
            match timeout {
                Some(t) => r.with_timeout(t),
                None => r,
            }
        };
        let mut out = Out {
            respond,
            stream: None,
            gzip: head.gzip_responses,
            leading: Metadata::new(),
        };
        match head.kind {
            Kind::Unary => {
                let msg = match body.single().await {
                    Ok(m) => m,
                    Err(s) => return out.finish(&s).await,
                };
                // The fast path: the handler runs right here, with no
                // connection and no task hand-off in between.
                let call =
                    gateway::call_unary(&self.server, &head.path, request(msg), self.peer, SYSTEM);
                let Some(answer) = out.or_reset(call).await else {
                    return;
                };
                match answer {
                    Ok(resp) => {
                        let trailers = resp.trailers().clone();
                        out.leading = resp.metadata().clone();
                        if out.message(&resp.into_inner().0).await.is_ok() {
                            out.finish(&wire::ok_status(trailers)).await;
                        }
                    }
                    Err(s) => out.finish(&s).await,
                }
            }
            // Streaming calls are rarer and their state is large: boxed,
            // so that every unary call's task does not carry it.
            Kind::ServerStreaming | Kind::ClientStreaming | Kind::Bidi => {
                Box::pin(self.streaming(head, body, out, request)).await;
            }
        }
    }

    /// The streaming kinds, over the in-memory tram connection.
    async fn streaming(
        &self,
        head: &Head,
        body: &mut Body,
        mut out: Out<'_>,
        request: impl Fn(RawMessage) -> Request<RawMessage>,
    ) {
        let (metadata, timeout) = (head.request.metadata(), head.request.timeout());
        match head.kind {
            Kind::Unary => unreachable!("unary calls are dispatched directly"),
            Kind::ServerStreaming => {
                let msg = match body.single().await {
                    Ok(m) => m,
                    Err(s) => return out.finish(&s).await,
                };
                let call = self
                    .channel
                    .server_streaming::<_, RawMessage>(&head.path, request(msg));
                let Some(opened) = out.or_reset(call).await else {
                    return;
                };
                match opened {
                    // The headers go with the first message, and with them
                    // the handler's leading metadata.
                    Ok(responses) => out.stream(responses).await,
                    Err(s) => out.finish(&s).await,
                }
            }
            Kind::ClientStreaming | Kind::Bidi => {
                let mut opening = Request::new(()).with_metadata(metadata.clone());
                if let Some(t) = timeout {
                    opening = opening.with_timeout(t);
                }
                let call = self
                    .channel
                    .bidi_stream_sink::<RawMessage, RawMessage>(&head.path, opening);
                let (mut sink, responses) = match out.or_reset(call).await {
                    Some(Ok(pair)) => pair,
                    Some(Err(s)) => return out.finish(&s).await,
                    None => return,
                };
                // As a gRPC server does, the headers go with the first
                // response message (carrying the handler's leading
                // metadata), or as a trailers-only response: clients must
                // not wait for them before sending.
                // Requests flow in while responses flow out; the call ends
                // when the responses do.
                let pump = async {
                    loop {
                        match body.message().await {
                            Ok(Some(m)) => {
                                if let Err(s) = sink.send(RawMessage(m)).await {
                                    // The call ended (its status comes
                                    // with the responses, and may win the
                                    // race), or this message could not be
                                    // sent: end the call with why.
                                    return s;
                                }
                            }
                            Ok(None) => {
                                sink.close();
                                return std::future::pending().await;
                            }
                            Err(s) => return s,
                        }
                    }
                };
                let bad = tokio::select! {
                    () = out.stream(responses) => None,
                    bad = pump => Some(bad),
                };
                if let Some(status) = bad {
                    // A malformed or reset request stream: the response
                    // stream was dropped (cancelling the call); say why.
                    out.finish(&status).await;
                }
            }
        }
    }
}

/// Reads gRPC messages from a request body.
struct Body {
    stream: RecvStream,
    buf: BytesMut,
    deframer: Deframer,
    encoding: Encoding,
}

impl Body {
    /// The next message; `None` at the end of the request stream.
    async fn message(&mut self) -> Result<Option<Bytes>, Status> {
        loop {
            if let Some(m) = self
                .deframer
                .next(&mut self.buf, self.encoding)
                .map_err(|e| e.status())?
            {
                return Ok(Some(m));
            }
            match self.stream.data().await {
                Some(Ok(chunk)) => {
                    let _ = self.stream.flow_control().release_capacity(chunk.len());
                    self.buf.extend_from_slice(&chunk);
                }
                Some(Err(e)) => return Err(Status::cancelled(format!("request stream: {e}"))),
                None if self.buf.is_empty() => return Ok(None),
                None => return Err(Status::internal("request ends inside a message")),
            }
        }
    }

    /// Exactly one message, as unary and server-streaming methods take.
    async fn single(&mut self) -> Result<RawMessage, Status> {
        let first = self.message().await?.ok_or_else(|| {
            Status::unimplemented("no request message for a single-request method")
        })?;
        if self.message().await?.is_some() {
            return Err(Status::unimplemented(
                "more than one request message for a single-request method",
            ));
        }
        Ok(RawMessage(first))
    }
}

/// The response side of one call.
struct Out<'a> {
    respond: &'a mut SendResponse<Bytes>,
    /// Set once the response headers are out.
    stream: Option<h2::SendStream<Bytes>>,
    gzip: bool,
    /// The call's leading metadata: in the response headers if it is known
    /// when they go out, else with the trailers.
    leading: Metadata,
}

impl Out<'_> {
    /// Sends one message (the headers first, if not yet sent), waiting for
    /// HTTP/2 window.
    async fn message(&mut self, msg: &[u8]) -> Result<(), h2::Error> {
        self.headers()?;
        let stream = self.stream.as_mut().expect("headers sent");
        let mut data = wire::frame(msg, self.gzip);
        while !data.is_empty() {
            stream.reserve_capacity(data.len());
            let granted = std::future::poll_fn(|cx| stream.poll_capacity(cx))
                .await
                .ok_or_else(|| h2::Error::from(h2::Reason::CANCEL))??;
            let n = granted.min(data.len());
            stream.send_data(data.split_to(n), false)?;
        }
        Ok(())
    }

    /// Sends the response headers, once, with the leading metadata known
    /// by then: with the first response message, which carries the tram
    /// handler's leading metadata.
    fn headers(&mut self) -> Result<(), h2::Error> {
        if self.stream.is_none() {
            let mut head = HttpResponse::new(());
            let h = head.headers_mut();
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/grpc"),
            );
            h.insert(
                "grpc-accept-encoding",
                HeaderValue::from_static(wire::ACCEPT_ENCODING),
            );
            if self.gzip {
                h.insert("grpc-encoding", HeaderValue::from_static("gzip"));
            }
            wire::metadata_to_headers(&std::mem::take(&mut self.leading), h);
            self.stream = Some(self.respond.send_response(head, false)?);
        }
        Ok(())
    }

    /// Runs `fut` until it finishes or the client resets the stream
    /// (`None`: the caller drops what it was doing, which cancels the tram
    /// call).
    async fn or_reset<T>(&mut self, fut: impl Future<Output = T>) -> Option<T> {
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            let reset = match self.stream.as_mut() {
                Some(stream) => stream.poll_reset(cx),
                None => self.respond.poll_reset(cx),
            };
            match reset {
                Poll::Ready(_) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// Relays a tram response stream, then its status.
    async fn stream(&mut self, mut responses: Streaming<RawMessage>) {
        let mut first = true;
        loop {
            let Some(next) = self.or_reset(responses.message()).await else {
                return;
            };
            match next {
                Ok(Some(m)) => {
                    if std::mem::take(&mut first) {
                        // The handler's leading metadata: with the headers
                        // if they are still to go, else with the trailers.
                        self.leading = responses.metadata().unwrap_or_default();
                    }
                    if self.message(&m.0).await.is_err() {
                        return;
                    }
                }
                Ok(None) => {
                    let trailers = responses.trailers().unwrap_or_default();
                    return self.finish(&wire::ok_status(trailers)).await;
                }
                Err(s) => return self.finish(&s).await,
            }
        }
    }

    /// Ends the response with `status`: as trailers, or trailers-only when
    /// nothing was sent yet.
    async fn finish(&mut self, status: &Status) {
        match self.stream.as_mut() {
            Some(stream) => {
                let mut trailers = HeaderMap::new();
                wire::status_headers(status, &mut trailers);
                // Leading metadata that came after the headers went out.
                wire::metadata_to_headers(&self.leading, &mut trailers);
                let _ = stream.send_trailers(trailers);
            }
            None => trailers_only(self.respond, status),
        }
    }
}

/// A response that is only headers: the status of a call that failed
/// before any message.
fn trailers_only(respond: &mut SendResponse<Bytes>, status: &Status) {
    let mut head = HttpResponse::new(());
    let h = head.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(
        "grpc-accept-encoding",
        HeaderValue::from_static(wire::ACCEPT_ENCODING),
    );
    wire::status_headers(status, h);
    let _ = respond.send_response(head, true);
}

/// A plain HTTP error, for requests that are not gRPC at all.
fn http_error(respond: &mut SendResponse<Bytes>, code: StatusCode) {
    let mut head = HttpResponse::new(());
    *head.status_mut() = code;
    let _ = respond.send_response(head, true);
}
