//! Connect and gRPC-Web: tram services for HTTP clients that are not gRPC
//! clients (curl, browsers, Connect's libraries), over HTTP/1.1 (`http1`)
//! and HTTP/2 (the gRPC gateway hands over requests of these content
//! types, `h2`). One request is one call: its body read whole (bounded),
//! its messages decoded (from JSON through the method's descriptors, for
//! Connect's JSON), the tram method called, and the answer written in the
//! protocol's form; a streamed answer is written as the tram stream yields
//! it, by the connection's own task. Client-streaming and bidirectional
//! calls are therefore half-duplex here (every request message, then every
//! response), which is all HTTP/1.1 and browsers' fetch can carry; gRPC
//! clients on HTTP/2 get full duplex from the gRPC gateway.
//!
//! - `connect`: Connect's codes, errors, envelopes and headers.
//! - `grpcweb`: gRPC-Web's trailer frame and base64 bodies.
//! - `render`: a call's answer in these protocols' forms.
//! - `json`: protobuf's JSON mapping, through the descriptors.
//! - `http1`: serving HTTP/1.1 connections (hyper).
//! - `h2`: these protocols' requests on the gateway's HTTP/2 connections.

pub(crate) mod connect;
pub(crate) mod grpcweb;
pub(crate) mod h2;
pub(crate) mod http1;
pub(crate) mod json;
mod render;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request as HttpRequest, Response as HttpResponse};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Limited};
use tram::gateway::{self, RawMessage};
use tram::{Channel, Metadata, MethodKind as Kind, Request, Server, Status};

use crate::GatewayConfig;
use crate::wire::{self, Deframer, Encoding};
use json::{Json, Side};
use render::{Answer, connect_unary, empty, gunzip, render_error, stream_response, tram_ok};

/// A response body: whole, or a stream the connection polls.
pub(crate) type WebBody = UnsyncBoxBody<Bytes, Infallible>;

/// The protocols served here, as `rpc.system.name` names them.
pub(crate) const CONNECT: &str = "connectrpc";
const GRPC_WEB: &str = "grpc";

/// What a request is, from its method and content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// Connect unary (`application/proto`, `application/json`, or GET).
    ConnectUnary { json: bool },
    /// Connect streaming (`application/connect+proto|json`).
    ConnectStream { json: bool },
    /// gRPC-Web (`application/grpc-web`, `-text` for base64 bodies).
    GrpcWeb { text: bool },
}

impl Wire {
    /// The protocol of a request with this content type, if it is one of
    /// these.
    pub(crate) fn of(content_type: &str) -> Option<Wire> {
        let ct = content_type.split(';').next().unwrap_or("").trim();
        Some(match ct {
            "application/proto" => Wire::ConnectUnary { json: false },
            "application/json" => Wire::ConnectUnary { json: true },
            "application/connect+proto" => Wire::ConnectStream { json: false },
            "application/connect+json" => Wire::ConnectStream { json: true },
            "application/grpc-web" | "application/grpc-web+proto" => Wire::GrpcWeb { text: false },
            "application/grpc-web-text" | "application/grpc-web-text+proto" => {
                Wire::GrpcWeb { text: true }
            }
            _ => return None,
        })
    }

    fn json(self) -> bool {
        matches!(
            self,
            Wire::ConnectUnary { json: true } | Wire::ConnectStream { json: true }
        )
    }
}

/// Whether a request of this content type is for the web protocols (on an
/// HTTP/2 connection, where gRPC is the rest).
pub(crate) fn is_web(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|ct| Wire::of(ct).is_some())
}

/// Serves Connect and gRPC-Web requests with a tram server's methods.
pub(crate) struct Web {
    pub(crate) server: Server,
    pub(crate) config: Arc<GatewayConfig>,
    /// The JSON mapping, or why there is none.
    pub(crate) json: Result<Json, String>,
}

/// A request's call, as decoded.
struct Decoded {
    path: String,
    kind: Kind,
    wire: Wire,
    request: Request<()>,
    messages: Vec<Bytes>,
    /// The client takes gzip responses.
    gzip_out: bool,
}

impl Web {
    /// Answers one request. `channel` carries streaming calls to the
    /// server (an in-memory tram connection of the HTTP connection's own).
    pub(crate) async fn handle<B>(
        &self,
        req: HttpRequest<B>,
        peer: SocketAddr,
        channel: &Channel,
    ) -> HttpResponse<WebBody>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if req.method() == Method::OPTIONS {
            return self.preflight(&req);
        }
        let content_type = req.headers().get(http::header::CONTENT_TYPE);
        let unknown_type = content_type
            .and_then(|v| v.to_str().ok())
            .is_none_or(|ct| Wire::of(ct).is_none());
        if req.method() == Method::POST && unknown_type {
            // Not a call of these protocols at all: HTTP's answer, as
            // Connect's own servers give it.
            let mut response = HttpResponse::new(empty());
            *response.status_mut() = http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
            response.headers_mut().insert(
                "accept-post",
                HeaderValue::from_static(
                    "application/json, application/proto, application/connect+json, \
                     application/connect+proto, application/grpc-web, application/grpc-web-text",
                ),
            );
            return response;
        }
        let origin = req.headers().get(http::header::ORIGIN).cloned();
        let mut response = match self.decode(req).await {
            Ok(call) => self.call(call, peer, channel).await,
            Err((wire, status)) => render_error(wire, &status),
        };
        self.cors(origin, response.headers_mut());
        response
    }

    /// Reads and decodes a request: `Err` with the protocol to answer in
    /// (Connect unary when it cannot be told) and why not.
    async fn decode<B>(&self, req: HttpRequest<B>) -> Result<Decoded, (Wire, Status)>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let fallback = Wire::ConnectUnary { json: true };
        let (parts, body) = req.into_parts();
        let path = parts.uri.path().to_owned();
        let headers = &parts.headers;
        let get = parts.method == Method::GET;
        let wire = if get {
            Wire::ConnectUnary { json: false }
        } else if parts.method == Method::POST {
            let ct = headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            Wire::of(ct).ok_or_else(|| {
                (
                    fallback,
                    Status::unimplemented(format!("content type {ct:?} is not served here")),
                )
            })?
        } else {
            return Err((
                fallback,
                Status::unimplemented("only POST and GET are served"),
            ));
        };
        // The body is read (bounded) before anything can fail, so that an
        // HTTP/1.1 client still sending it gets the error, not a reset.
        let body = if get {
            Bytes::new()
        } else {
            let limit = self.config.max_message_size.saturating_mul(16);
            Limited::new(body, limit)
                .collect()
                .await
                .map_err(|e| {
                    (
                        wire,
                        Status::resource_exhausted(format!("request body: {e}")),
                    )
                })?
                .to_bytes()
        };
        let kind = self
            .server
            .method_kind(&path)
            .ok_or_else(|| (wire, Status::unimplemented(format!("no method {path}"))))?;
        let fail = |s: Status| (wire, s);
        match (wire, kind) {
            (Wire::ConnectUnary { .. }, Kind::Unary)
            | (Wire::ConnectStream { .. } | Wire::GrpcWeb { .. }, _) => {}
            (Wire::ConnectUnary { .. }, _) => {
                return Err(fail(Status::unimplemented(
                    "a streaming method takes application/connect+proto or +json",
                )));
            }
        }
        let mut request = Request::new(()).with_metadata(wire::headers_to_metadata(headers));
        let timeout = match wire {
            Wire::GrpcWeb { .. } => headers
                .get("grpc-timeout")
                .and_then(|v| v.to_str().ok())
                .and_then(wire::parse_timeout),
            _ => connect::timeout(headers).map_err(fail)?,
        };
        if let Some(t) = timeout {
            request = request.with_timeout(t);
        }
        let accepts = |h: &str| {
            headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.split(',').any(|e| e.trim() == "gzip"))
        };
        let gzip_out = self.config.compress_responses
            && match wire {
                Wire::ConnectUnary { .. } => accepts("accept-encoding"),
                Wire::ConnectStream { .. } => accepts("connect-accept-encoding"),
                Wire::GrpcWeb { .. } => accepts("grpc-accept-encoding"),
            };
        let (wire, messages) = if get {
            let q = connect::get_query(parts.uri.query().unwrap_or("")).map_err(fail)?;
            let wire = Wire::ConnectUnary { json: q.json };
            if !self.json.as_ref().is_ok_and(|j| j.side_effect_free(&path)) {
                return Err((
                    wire,
                    Status::unimplemented("GET is for methods marked free of side effects"),
                ));
            }
            let msg = if q.gzip {
                gunzip(&q.message, self.config.max_message_size)
            } else {
                Ok(q.message)
            };
            (wire, vec![msg.map_err(|s| (wire, s))?])
        } else {
            (wire, self.messages(wire, headers, body).map_err(fail)?)
        };
        let messages = match (&self.json, wire.json()) {
            (_, false) => messages,
            (Err(why), true) => return Err((wire, Status::unimplemented(why.clone()))),
            (Ok(json), true) => messages
                .iter()
                .map(|m| json.to_proto(&path, Side::Request, m))
                .collect::<Result<_, _>>()
                .map_err(fail)?,
        };
        Ok(Decoded {
            path,
            kind,
            wire,
            request,
            messages,
            gzip_out,
        })
    }

    /// The request messages in a body of `wire`.
    fn messages(&self, wire: Wire, headers: &HeaderMap, body: Bytes) -> Result<Vec<Bytes>, Status> {
        let max = self.config.max_message_size;
        let encoding = |h: &str| {
            headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("identity")
        };
        match wire {
            Wire::ConnectUnary { .. } => match encoding("content-encoding") {
                "gzip" => Ok(vec![gunzip(&body, max)?]),
                "identity" => {
                    if body.len() > max {
                        return Err(Status::resource_exhausted("request message too large"));
                    }
                    Ok(vec![body])
                }
                other => Err(Status::unimplemented(format!("content-encoding {other}"))),
            },
            Wire::ConnectStream { .. } => {
                let gzip = match encoding("connect-content-encoding") {
                    "gzip" => true,
                    "identity" => false,
                    other => {
                        return Err(Status::unimplemented(format!(
                            "connect-content-encoding {other}"
                        )));
                    }
                };
                connect::envelopes(body, max, gzip)
            }
            Wire::GrpcWeb { text } => {
                let body = if text {
                    grpcweb::decode_text(&body)?
                } else {
                    body
                };
                let encoding = Encoding::parse(encoding("grpc-encoding"))
                    .ok_or_else(|| Status::unimplemented("grpc-encoding"))?;
                let mut buf = BytesMut::from(&body[..]);
                let deframer = Deframer::new(max);
                let mut out = Vec::new();
                while let Some(m) = deframer.next(&mut buf, encoding).map_err(|e| e.status())? {
                    out.push(m);
                }
                if !buf.is_empty() {
                    return Err(Status::internal("request body ends inside a message"));
                }
                Ok(out)
            }
        }
    }

    /// Calls the method and renders the answer.
    async fn call(
        &self,
        call: Decoded,
        peer: SocketAddr,
        channel: &Channel,
    ) -> HttpResponse<WebBody> {
        let Decoded {
            path,
            kind,
            wire,
            request,
            messages,
            gzip_out,
        } = call;
        let (_, metadata, timeout) = request.into_parts();
        let with = |msg: RawMessage| opening(msg, &metadata, timeout);
        let system = if matches!(wire, Wire::GrpcWeb { .. }) {
            GRPC_WEB
        } else {
            CONNECT
        };
        let single = |messages: Vec<Bytes>| {
            let mut it = messages.into_iter();
            match (it.next(), it.next()) {
                (Some(m), None) => Ok(RawMessage(m)),
                _ => Err(Status::unimplemented(
                    "this method takes exactly one request message",
                )),
            }
        };
        let answer = match kind {
            Kind::Unary => match single(messages) {
                Ok(m) => Answer::One(
                    gateway::call_unary(&self.server, &path, with(m), peer, system).await,
                ),
                Err(s) => Answer::One(Err(s)),
            },
            Kind::ServerStreaming => match single(messages) {
                Ok(m) => Answer::Stream(channel.server_streaming(&path, with(m)).await),
                Err(s) => Answer::One(Err(s)),
            },
            Kind::ClientStreaming => {
                let requests = futures_util::stream::iter(messages.into_iter().map(RawMessage));
                let requests = opening(requests, &metadata, timeout);
                Answer::One(channel.client_streaming(&path, requests).await)
            }
            Kind::Bidi => {
                let requests = futures_util::stream::iter(messages.into_iter().map(RawMessage));
                let requests = opening(requests, &metadata, timeout);
                Answer::Stream(channel.bidi_streaming(&path, requests).await)
            }
        };
        let json = self.json.clone().ok().filter(|_| wire.json());
        let encode = move |m: Bytes| -> Result<Bytes, Status> {
            match &json {
                Some(j) => j.to_json(&path, Side::Response, m),
                None => Ok(m),
            }
        };
        match (wire, answer) {
            (Wire::ConnectUnary { json }, Answer::One(outcome)) => {
                connect_unary(json, outcome, encode, gzip_out)
            }
            (wire, Answer::One(outcome)) => {
                // A stream of one (or of none, on error).
                let (msg, headers, status) = match outcome {
                    Ok(resp) => {
                        let (m, h, t) = resp.into_parts();
                        (Some(m.0), h, tram_ok(t))
                    }
                    Err(s) => (None, Metadata::new(), s),
                };
                let first = msg.map(Ok);
                stream_response(wire, headers, first, None, status, encode, gzip_out)
            }
            (wire, Answer::Stream(Err(s))) => {
                stream_response(wire, Metadata::new(), None, None, s, encode, gzip_out)
            }
            (wire, Answer::Stream(Ok(mut responses))) => {
                // The first message (or the end) before the headers: it
                // brings the handler's leading metadata.
                let first = responses.message().await;
                let headers = responses.metadata().unwrap_or_default();
                match first {
                    Ok(Some(m)) => stream_response(
                        wire,
                        headers,
                        Some(Ok(m.0)),
                        Some(responses),
                        tram_ok(Metadata::new()),
                        encode,
                        gzip_out,
                    ),
                    Ok(None) => {
                        let end = tram_ok(responses.trailers().unwrap_or_default());
                        stream_response(wire, headers, None, None, end, encode, gzip_out)
                    }
                    Err(s) => stream_response(wire, headers, None, None, s, encode, gzip_out),
                }
            }
        }
    }

    /// Answers a CORS preflight, when CORS is on.
    fn preflight<B>(&self, req: &HttpRequest<B>) -> HttpResponse<WebBody> {
        let mut response = HttpResponse::new(empty());
        match &self.config.cors_allow_origin {
            Some(_) => {
                *response.status_mut() = http::StatusCode::NO_CONTENT;
                let h = response.headers_mut();
                h.insert(
                    "access-control-allow-methods",
                    HeaderValue::from_static("GET, POST"),
                );
                if let Some(asked) = req.headers().get("access-control-request-headers") {
                    h.insert("access-control-allow-headers", asked.clone());
                }
                h.insert("access-control-max-age", HeaderValue::from_static("7200"));
                self.cors(req.headers().get(http::header::ORIGIN).cloned(), h);
            }
            None => *response.status_mut() = http::StatusCode::METHOD_NOT_ALLOWED,
        }
        response
    }

    /// CORS headers for a request from `origin`, when CORS is on.
    fn cors(&self, origin: Option<HeaderValue>, h: &mut HeaderMap) {
        let (Some(allowed), Some(origin)) = (&self.config.cors_allow_origin, origin) else {
            return;
        };
        let ok = allowed == "*" || origin.as_bytes() == allowed.as_bytes();
        if ok {
            h.insert("access-control-allow-origin", origin);
            h.insert(
                "access-control-expose-headers",
                HeaderValue::from_static(
                    "grpc-status, grpc-message, grpc-status-details-bin, connect-content-encoding",
                ),
            );
            h.append(http::header::VARY, HeaderValue::from_static("origin"));
        }
    }
}

/// A call's request around `msg` (its one message, or the stream of them),
/// with the caller's metadata and deadline.
fn opening<T>(msg: T, metadata: &Metadata, timeout: Option<std::time::Duration>) -> Request<T> {
    let request = Request::new(msg).with_metadata(metadata.clone());
    match timeout {
        Some(t) => request.with_timeout(t),
        None => request,
    }
}
