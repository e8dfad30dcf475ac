//! gRPC, Connect and gRPC-Web for tram services: ordinary gRPC clients
//! (any language, grpcurl, gRPC-aware proxies) over HTTP/2, and Connect and
//! gRPC-Web clients (browsers, curl, Connect's libraries) over HTTP/1.1 and
//! HTTP/2, call the same handlers a tram [`Server`] runs, on the same port.
//!
//! ```no_run
//! # async fn run(server: tram::rpc::Server) -> std::io::Result<()> {
//! // The tram server, as built for native clients...
//! let server = tram_grpc::with_gateway(server);
//! // ...now also answers gRPC (h2c, prior knowledge) on the same port.
//! server.serve("0.0.0.0:7000").await
//! # }
//! ```
//!
//! # How a gRPC call reaches a handler
//!
//! Each HTTP/2 connection is one task, which drives the connection and
//! polls all of its calls (as a tram connection's task polls its
//! handlers): no task is spawned per stream, and answering a call hands no
//! wake-up to another task or thread. A unary call runs its tram handler
//! right there ([`tram::gateway::call_unary`]); each streaming call becomes
//! one tram call on an in-memory tram connection to the server, one per
//! HTTP/2 connection ([`Server::serve_connection`]). Either way handlers,
//! interceptors, limits, deadlines and cancellation are the tram server's
//! own, and nothing is written twice per service. As with tram's own
//! connections, a handler that computes for long without awaiting holds up
//! the other calls of its connection: move such work to
//! `tokio::task::spawn_blocking`.
//! The gateway maps:
//!
//! - `/package.Service/Method` to the tram method of that path, and the
//!   method's kind (unary, server, client or bidirectional streaming) to
//!   how the request body is read;
//! - 5-byte length-prefixed messages to tram messages (passed through,
//!   never decoded), gzip-compressed ones when `grpc-encoding: gzip`; an
//!   unsupported encoding gets `UNIMPLEMENTED` with `grpc-accept-encoding`;
//! - request headers to tram metadata (`-bin` values base64-decoded),
//!   `grpc-timeout` to the call's deadline;
//! - the tram status to `grpc-status`, percent-encoded `grpc-message`,
//!   `grpc-status-details-bin` and trailing metadata, as trailers, or as
//!   a trailers-only response when the call fails before any message;
//! - RST_STREAM from the client to cancelling the tram call (its handler
//!   is dropped); HTTP/2 flow control is the h2 crate's, and responses wait
//!   for window before they are sent.
//!
//! [`standard::add_standard_services`] adds gRPC server reflection (v1 and
//! v1alpha) and health checking, as tram services: grpcurl-style tools list
//! and call services without the `.proto` files.
//!
//! Under TLS (tram's `tls` feature), a client that negotiates ALPN `h2`
//! reaches the gateway; give the server's rustls config
//! `alpn_protocols = [b"h2", ...]` for that. Other TLS clients speak tram.
//!
//! Responses are gzip-compressed when the client accepts gzip and
//! [`GatewayConfig::compress_responses`] is on.
//!
//! A handler's leading metadata (`Response::with_metadata`) becomes the
//! HTTP response headers, sent with the first response message of every
//! call kind (or in a trailers-only response), as a gRPC server sends
//! them.
//!
//! # Connect and gRPC-Web
//!
//! Requests with Connect's content types (`application/json`,
//! `application/proto`, `application/connect+json|proto`, and GET for
//! methods marked free of side effects) and gRPC-Web's
//! (`application/grpc-web`, `-text`) are answered on HTTP/1.1 connections
//! (hyper) and on the HTTP/2 ones alike. JSON goes through the services'
//! descriptors ([`GatewayConfig::descriptors`]); handlers only see
//! protobuf. A request body is read whole (bounded) before its call, so
//! request streams are half-duplex there; responses stream.
//!
//! # Layout
//!
//! - this file: [`Gateway`], its settings, and each HTTP/2 connection's task.
//! - `sniff`: HTTP/2 or HTTP/1.1, by a connection's first bytes.
//! - `web`: Connect and gRPC-Web (its own module map).
//! - `call`: one gRPC call: headers, request body, the tram handler, the
//!   answer as data and trailers.
//! - `wire`: gRPC's message framing (5-byte prefix, gzip), status and
//!   metadata to and from HTTP headers.
//! - `wake`: keeps the connection's task from waking itself needlessly.
//! - [`standard`]: reflection and health, as tram services.

mod call;
#[cfg(test)]
mod properties;
mod sniff;
pub mod standard;
mod wake;
mod web;
mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use tokio::io::{AsyncRead, AsyncWrite};
use tram::gateway;
use tram::{Channel, Server};

use call::Call;
pub use wire::decode_message;

/// What the server's observers call the gateway's calls
/// (`rpc.system.name`).
const SYSTEM: &str = "grpc";

/// Settings of the gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Largest request or response message, in bytes (default 4 MiB, tram's
    /// default frame size).
    pub max_message_size: usize,
    /// gzip responses for clients that accept it (default off: on a fast
    /// network compression costs more CPU than it saves).
    pub compress_responses: bool,
    /// Streams one HTTP/2 connection may have open (default 1024).
    pub max_concurrent_streams: u32,
    /// HTTP/2 receive window per stream (default 1 MiB).
    pub stream_window: u32,
    /// HTTP/2 receive window per connection (default 4 MiB).
    pub connection_window: u32,
    /// Encoded `FileDescriptorSet`s of the services (what
    /// `tram::include_file_descriptor_set!()` gives): Connect's JSON
    /// (`application/json`, `application/connect+json`) and GET for
    /// methods free of side effects need them (default none: Connect and
    /// gRPC-Web with protobuf bodies only).
    pub descriptors: Vec<Bytes>,
    /// `Access-Control-Allow-Origin` for browsers' Connect and gRPC-Web
    /// calls from other origins: an origin, or `*` for any (default none:
    /// no CORS headers, preflights refused).
    pub cors_allow_origin: Option<String>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            max_message_size: 4 << 20,
            compress_responses: false,
            max_concurrent_streams: 1024,
            stream_window: 1 << 20,
            connection_window: 4 << 20,
            descriptors: Vec::new(),
            cors_allow_origin: None,
        }
    }
}

impl GatewayConfig {
    /// This config with `sets` as [`descriptors`](Self::descriptors).
    #[must_use]
    pub fn with_descriptors(mut self, sets: &[&'static [u8]]) -> Self {
        self.descriptors = sets.iter().map(|s| Bytes::from_static(s)).collect();
        self
    }
}

/// Serves gRPC over HTTP/2 by calling a tram [`Server`]'s handlers.
#[derive(Clone)]
pub struct Gateway {
    server: Server,
    config: Arc<GatewayConfig>,
    web: Arc<web::Web>,
}

/// `server`, answering gRPC over HTTP/2 on its own port as well as tram
/// (connections are told apart by their first byte).
pub fn with_gateway(server: Server) -> Server {
    with_gateway_config(server, GatewayConfig::default())
}

/// [`with_gateway`] with settings.
pub fn with_gateway_config(server: Server, config: GatewayConfig) -> Server {
    let gateway = Gateway::new(server.clone(), config);
    server.with_gateway(Arc::new(gateway))
}

impl Gateway {
    /// A gateway to `server`'s methods.
    ///
    /// Descriptors that do not decode are logged (`tracing` error) and
    /// JSON calls then fail with `UNIMPLEMENTED` saying why.
    pub fn new(server: Server, config: GatewayConfig) -> Gateway {
        let config = Arc::new(config);
        let json = web::json::Json::from_config(&config);
        if let Err(e) = &json {
            if !config.descriptors.is_empty() {
                tracing::error!(error = %e, "gateway descriptors do not decode: no JSON");
            }
        }
        let web = Arc::new(web::Web {
            server: server.clone(),
            config: config.clone(),
            json,
        });
        Gateway {
            server,
            config,
            web,
        }
    }

    /// Serves one connection that does not speak tram: HTTP/2 (prior
    /// knowledge) or HTTP/1.1, told apart by its first bytes.
    pub async fn serve_http<IO>(&self, io: IO, peer: SocketAddr)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        match sniff::sniff(io).await {
            Ok((sniff::Http::H2, io)) => self.serve_h2(io, peer).await,
            Ok((sniff::Http::H1, io)) => {
                let channel = self.channel(peer, web::CONNECT);
                web::http1::serve(self.web.clone(), io, peer, channel).await;
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "connection closed before its protocol was known")
            }
        }
    }

    /// The in-memory tram connection that carries an HTTP connection's
    /// streaming calls to the server (opened on the first one); its calls
    /// observed as `system`'s.
    fn channel(&self, peer: SocketAddr, system: &'static str) -> Channel {
        let server = self.server.clone();
        Channel::builder(format!("gateway for {peer}"))
            .keepalive(None)
            // The calls are the server's, observed there as the gateway's.
            .metrics(false)
            .connector(move || {
                let (ours, theirs) = tokio::io::duplex(256 * 1024);
                let server = server.clone();
                tokio::spawn(async move {
                    let _ = gateway::serve_connection(&server, theirs, peer, system).await;
                });
                std::future::ready(Ok(ours))
            })
            .build()
    }

    /// Serves one HTTP/2 connection (prior knowledge: the client's preface
    /// comes first) until it closes.
    pub async fn serve_h2<IO>(&self, io: IO, peer: SocketAddr)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        wake::AbsorbSelfWakes::new(self.serve_h2_inner(io, peer)).await;
    }

    async fn serve_h2_inner<IO>(&self, io: IO, peer: SocketAddr)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let handshake = h2::server::Builder::new()
            .max_concurrent_streams(self.config.max_concurrent_streams)
            .initial_window_size(self.config.stream_window)
            .initial_connection_window_size(self.config.connection_window)
            .max_frame_size(1 << 20)
            .handshake::<_, Bytes>(io);
        let mut conn = match handshake.await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "HTTP/2 handshake failed");
                return;
            }
        };
        // One in-memory tram connection per HTTP/2 connection, to this
        // server: interceptors see the HTTP/2 client's address.
        let channel = self.channel(peer, SYSTEM);
        // The connection's calls run in this task, beside the connection
        // itself, as a tram connection's do: no task spawned per call, and
        // no wake-up handed between tasks (and threads) to answer one.
        // Each call is woken on its own; when the connection ends, calls
        // still running are dropped, which cancels them.
        let mut calls = FuturesUnordered::new();
        loop {
            let accepted = tokio::select! {
                biased;
                Some(()) = calls.next(), if !calls.is_empty() => continue,
                accepted = conn.accept() => accepted,
            };
            let (request, respond) = match accepted {
                Some(Ok(r)) => r,
                Some(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "HTTP/2 connection error");
                    return;
                }
                None => return,
            };
            let call = Call {
                server: self.server.clone(),
                channel: channel.clone(),
                config: self.config.clone(),
                web: self.web.clone(),
                peer,
            };
            calls.push(call.run(request, respond));
        }
    }
}

impl gateway::Protocol for Gateway {
    fn serve(&self, io: gateway::Io, peer: SocketAddr) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let gateway = self.clone();
        Box::pin(async move { gateway.serve_http(io, peer).await })
    }
}
