//! RPC over tram: calls multiplexed on a connection.
//!
//! Unary, server-streaming, client-streaming and bidirectional calls, with
//! gRPC's status codes, metadata, deadlines, cancellation and credit flow
//! control; see `PROTOCOL.md` for the wire rules. The types are also at the
//! crate root (`tram::Channel`, `tram::Server`, ...).
//!
//! # Layout
//!
//! - [`Status`], [`Request`], [`Response`]: what calls carry (`status`,
//!   `message`).
//! - `server`: [`Server`] and [`ServerBuilder`] (a folder: builder,
//!   handlers, accept loop, connection driver, call table).
//! - `client`: [`Channel`] and [`ChannelBuilder`] (a folder: builder,
//!   pool, unary and streaming calls, connection, call table, reader).
//! - `stream`: per-call stream state and credit; [`Streaming`].
//! - `intercept`: interceptors, run as each call opens: on the server to
//!   authenticate and authorise ([`CallInfo`]), on the client to add
//!   metadata to every call.
//!
//! What both sides share, written once:
//!
//! - `transport`: TCP or TLS into read and write halves, and opening the
//!   RPC protocol on them (preface and SETTINGS first).
//! - `protocol`: the protocol error and its GOAWAY; SETTINGS, PING,
//!   CREDIT and message-run handling.
//! - `settings`: the setters both builders share (limits, keepalive,
//!   socket and message-stream options).
//! - `timers`: handshake, idle and keepalive timers ([`Keepalive`]).
//! - `deadline`: a call's deadline.
//! - `unary`: a single response collected from its frames.
//! - `codec`: the RPC layer's encoder (method binding, messages encoded in
//!   place) and decoder (preface, frames, runs of messages).
//! - `exec`: the small executor that runs a connection's handler futures
//!   without a task per call.

mod alarm;
pub(crate) mod client;
pub(crate) mod codec;
mod deadline;
mod exec;
mod intercept;
mod message;
mod protocol;
pub(crate) mod server;
mod settings;
mod status;
mod stream;
mod timers;
mod transport;
mod unary;

pub use client::{Channel, ChannelBuilder, ClientStreamSink, RequestSink, UnaryCall};
pub use intercept::CallInfo;
pub use message::{IntoRequest, IntoStreamingRequest, Request, Response};
pub use server::{Draining, MethodKind, Server, ServerBuilder, Service};
pub use status::Status;
pub use stream::Streaming;
pub use timers::Keepalive;
pub use tram_wire::{Code, Metadata, metadata::MetadataBuilder};

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
