//! tram: message-oriented RPC over plain TCP.
//!
//! ```no_run
//! # mod kv { pub struct GetRequest { pub key: String } }
//! use tram::{Channel, Request, Response, Server, Status};
//! # #[derive(Clone, PartialEq, prost::Message)] struct Echo { #[prost(string, tag = "1")] text: String }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // A server with one unary method (generated services register all of
//! // theirs with `add_service`)...
//! let server = Server::builder()
//!     .unary("/echo.Echo/Say", |req: Request<Echo>| async move {
//!         Ok(Response::new(req.into_inner()))
//!     })
//!     .build();
//! tokio::spawn(server.serve("127.0.0.1:7000"));
//!
//! // ...and a client.
//! let channel = Channel::connect("127.0.0.1:7000").await?;
//! let reply: Response<Echo> = channel
//!     .unary("/echo.Echo/Say", Request::new(Echo { text: "hi".into() }))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`rpc`]: calls over a connection of tram frames: [`Server`] and
//!   [`Channel`] with their builders, unary and streaming calls, status,
//!   metadata, deadlines, cancellation, credit flow control, interceptors.
//!   Its types are re-exported here, at the crate root.
//! - [`conn`]: message streams. A connection over any `AsyncRead +
//!   AsyncWrite` with a codec of your choice (length-delimited bytes,
//!   protobuf, JSON lines, tram frames, or your own), batched writes, a
//!   byte-bounded outbound queue and a bounded read buffer; TCP connect and
//!   accept helpers.
//! - [`balance`]: one client over a fleet: discovery (a list, DNS, a
//!   stream of changes), power of two choices over Peak-EWMA, ejection,
//!   subsetting.
//! - [`observe`]: metrics (OpenTelemetry's RPC names, through the
//!   `metrics` facade), call spans, W3C trace context, observers of your
//!   own, snapshots of connections.
//! - [`gateway`]: plumbing for other protocols on a tram server's port
//!   (what `tram-grpc` is built on).
//! - `tls` (feature `tls`): TLS and mutual TLS with rustls, for both.
//!
//! The wire format lives in the [`tram_wire`] crate, re-exported as
//! [`wire`].

pub mod balance;
pub mod conn;
pub mod gateway;
pub mod observe;
pub mod rpc;
#[cfg(feature = "tls")]
pub mod tls;

pub use rpc::{
    CallInfo, Channel, ChannelBuilder, ClientStreamSink, Code, IntoRequest, IntoStreamingRequest,
    Keepalive, Metadata, MetadataBuilder, MethodKind, Request, RequestSink, Response, Server,
    ServerBuilder, Service, Status, Streaming, UnaryCall,
};
pub use tram_wire as wire;

#[doc(hidden)]
pub mod codegen;

/// Includes the code `tram-build` generated for a protobuf package, from
/// `OUT_DIR`: `tram::include_proto!("kv");`.
#[macro_export]
macro_rules! include_proto {
    ($package:literal) => {
        include!(concat!(env!("OUT_DIR"), "/", $package, ".rs"));
    };
}

/// The compiled descriptors `tram-build` wrote (for reflection).
#[macro_export]
macro_rules! include_file_descriptor_set {
    () => {
        include_bytes!(concat!(env!("OUT_DIR"), "/file_descriptor_set.bin"))
    };
}
