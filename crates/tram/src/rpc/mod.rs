//! RPC over tram: calls multiplexed on a connection.
//!
//! Unary, server-streaming, client-streaming and bidirectional calls, with
//! gRPC's status codes, metadata, deadlines, cancellation and credit flow
//! control; see `PROTOCOL.md` for the wire rules.
//!
//! # Layout
//!
//! - [`Status`], [`Request`], [`Response`]: what calls carry.
//! - `server`: [`Server`]: routes, accept loop, per-connection driver.
//! - `client`: [`Channel`]: connections, calls, reconnection.
//! - `stream`: per-call stream state and credit; [`Streaming`].
//! - `intercept`: [`ServerInterceptor`] (authentication, authorisation)
//!   and [`ClientInterceptor`] (metadata on every call).
//! - `exec`: the small executor that runs a connection's handler futures
//!   without a task per call.
//! - `codec`: the RPC layer's encoder (method binding, messages encoded in
//!   place) and decoder (preface, frames).

mod client;
mod codec;
mod exec;
mod intercept;
mod message;
mod server;
mod status;
mod stream;

pub use client::{Channel, ChannelConfig, RequestSink, ResponseStream, UnaryCall};
pub use intercept::{CallInfo, ClientInterceptor, ServerInterceptor};
pub use message::RawMessage;
pub use message::{IntoRequest, Request, Response};
pub use server::{
    Keepalive, Kind, OtherIo, OtherProtocol, ReadWrite, Server, ServerBuilder, ServerConfig,
    Service,
};
pub use status::Status;
pub use stream::Streaming;
pub use tram_wire::{Code, Metadata, metadata::MetadataBuilder};

/// The read half of a connection, whatever the transport (TCP or TLS):
/// one virtual call per read.
pub(crate) type BoxRead = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
/// The write half, likewise.
pub(crate) type BoxWrite = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// Hashes the small integer keys of per-connection tables (call ids,
/// method numbers) with one multiplication instead of SipHash: the keys
/// come from one peer, and each table is bounded by the connection's limits.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A per-connection table keyed by call id or method number.
pub(crate) type IdMap<V> =
    std::collections::HashMap<u32, V, std::hash::BuildHasherDefault<IdHasher>>;
