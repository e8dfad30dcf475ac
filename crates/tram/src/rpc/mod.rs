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
//! - `exec`: the small executor that runs a connection's handler futures
//!   without a task per call.
//! - `codec`: the RPC layer's encoder (method binding, messages encoded in
//!   place) and decoder (preface, frames).

mod client;
mod codec;
mod exec;
mod message;
mod server;
mod status;
mod stream;

pub use client::{Channel, ChannelConfig, RequestSink, ResponseStream};
pub use message::{IntoRequest, Request, Response};
pub use server::{Kind, Server, ServerBuilder, ServerConfig, Service};
pub use status::Status;
pub use stream::Streaming;
pub use tram_wire::{Code, Metadata, metadata::MetadataBuilder};
