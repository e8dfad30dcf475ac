//! tram: message-oriented RPC over plain TCP.
//!
//! # Layout
//!
//! - [`conn`]: message streams. A connection over any `AsyncRead +
//!   AsyncWrite` with a codec of your choice (length-delimited bytes,
//!   protobuf, JSON lines, tram frames, or your own), batched writes, a
//!   byte-bounded outbound queue and a bounded read buffer; TCP connect and
//!   accept helpers.
//!
//! - [`rpc`]: calls over a message stream of tram frames: [`rpc::Server`],
//!   [`rpc::Channel`], unary and streaming calls, status, metadata,
//!   deadlines, cancellation, credit flow control.
//!
//! The wire format lives in the [`tram_wire`] crate, re-exported as
//! [`wire`].

pub mod conn;
pub mod rpc;

pub use tram_wire as wire;
