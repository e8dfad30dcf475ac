//! Observability: metrics, call spans, trace context, snapshots of
//! connections, and hooks of your own.
//!
//! Every call, on either side, is seen by the side's observers as it
//! starts and as it ends; connections as they open and close.
//!
//! - **Metrics**, through the `metrics` facade, named after OpenTelemetry's
//!   RPC conventions: `rpc.server.call.duration` and
//!   `rpc.client.call.duration` (histograms, seconds),
//!   `rpc.{server,client}.request.size` and `.response.size` (bytes, one
//!   value per message; only with `.message_size_metrics(true)` on the
//!   builder), `rpc.{server,client}.calls.started` (counter) and
//!   `.calls.active` (gauge). Their attributes: `rpc.system.name` (`tram`,
//!   or `grpc` for a gateway's calls), `rpc.method` (the full path; on a
//!   server, `_OTHER` for a method it does not have, so a peer cannot grow
//!   the number of series; a channel keeps at most 1000 apart), and on the
//!   durations `rpc.response.status_code` and, for errors, `error.type`.
//!   Per side (`side` = `server` or `client`): `tram.connections.opened`,
//!   `.open` and `.closed` (by `reason`: `normal`, `idle`, `shutdown`,
//!   `protocol_error`, `timeout`, `io`), `tram.connection.bytes.received`
//!   and `.sent`, `tram.connection.queued.bytes` (outbound queues); and
//!   `tram.client.connect.attempts` and `.failures`. A server or channel
//!   records them when a recorder (`metrics-exporter-prometheus`, say) is
//!   installed by the time it is built; `.metrics(false)` on its builder
//!   turns them off, `.metrics(true)` on. Without a recorder a call pays
//!   for one check.
//! - **Spans**: `tram.server.call` and `tram.client.call` at DEBUG, target
//!   `tram::call` (enable them with `tram::call=debug`), with the same
//!   fields plus `otel.kind` and the `trace_id`; the status is recorded as
//!   the call ends, with events for cancellation and deadlines. A
//!   server's span is entered while its handler runs. Protocol violations
//!   are logged at INFO once per connection, at most ten lines a second in
//!   all.
//! - **Trace context**: W3C `traceparent` and `tracestate` travel in call
//!   metadata. A server continues the caller's trace for its handler, and
//!   calls the handler makes carry it on ([`TraceContext::current`],
//!   [`TraceContext::scope`]). tram propagates traces; it does not start
//!   them ([`TraceContext::new_root`] does).
//! - **Hooks**: an [`Observer`] added with `.observer(...)` on either
//!   builder sees every call's start and end and every connection event
//!   (grpc-go's stats handler in spirit); the metrics are built the same
//!   way.
//! - **Snapshots**: [`Server::connections`](crate::Server::connections)
//!   and [`Channel::endpoints`](crate::Channel::endpoints) (channelz in
//!   spirit), and [`Server::draining`](crate::Server::draining) for health
//!   checks.
//!
//! # Layout
//!
//! - this file: [`Observer`] and what it sees.
//! - `observers`: the set of observers a server or channel holds, and one
//!   call's observation.
//! - `metrics`: the built-in metrics' handles, registered once per method.
//! - `trace`: [`TraceContext`] (W3C trace context), current while a
//!   handler runs.
//! - `introspect`: connection snapshots.
//! - `limit`: logging that a flood of bad peers cannot turn into a flood
//!   of logs.

mod introspect;
pub(crate) mod limit;
mod metrics;
mod observers;
#[cfg(feature = "opentelemetry")]
mod otel;
pub(crate) mod trace;

use std::net::SocketAddr;
use std::time::Duration;

use tram_wire::{Code, Metadata};

pub(crate) use introspect::{ConnStats, Registered, Registry};
pub use introspect::{ConnectionInfo, EndpointInfo, EndpointState};
pub(crate) use observers::{MethodObs, MetricsConfig, Observed, Observers, TRAM, observe};
pub use trace::{Scoped, TRACEPARENT, TRACESTATE, TraceContext};

/// Which end of a call an observer is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The side that made the call.
    Client,
    /// The side that served it.
    Server,
}

/// A call as it starts.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CallStart<'a> {
    /// Which end this is.
    pub side: Side,
    /// `tram`, or the protocol a gateway served the call in (`grpc`,
    /// `connectrpc`).
    pub system: &'static str,
    /// The method's full path; on a server, `_OTHER` for one it does not
    /// have.
    pub method: &'a str,
    /// The other end's address, when known.
    pub peer: Option<SocketAddr>,
    /// The request's metadata.
    pub metadata: &'a Metadata,
}

/// A call as it ends.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CallEnd<'a> {
    /// Which end this is.
    pub side: Side,
    /// As at the start.
    pub system: &'static str,
    /// As at the start.
    pub method: &'a str,
    /// The call's status code (`Cancelled` for a call dropped before it
    /// ended, `DeadlineExceeded` for one whose deadline passed).
    pub code: Code,
    /// From the start to the end.
    pub elapsed: Duration,
}

/// Why a connection closed, as observers and the `reason` attribute see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CloseReason {
    /// Closed cleanly by the peer, or gracefully after GOAWAY.
    Normal,
    /// Closed for being idle.
    Idle,
    /// The peer broke the protocol.
    ProtocolError,
    /// The peer missed a deadline (handshake, keepalive).
    Timeout,
    /// The transport failed (reset, broken pipe).
    Io,
    /// The server is shutting down.
    Shutdown,
    /// The connection reached its maximum age.
    MaxAge,
}

impl CloseReason {
    /// The value of the `reason` attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Normal => "normal",
            CloseReason::Idle => "idle",
            CloseReason::ProtocolError => "protocol_error",
            CloseReason::Timeout => "timeout",
            CloseReason::Io => "io",
            CloseReason::Shutdown => "shutdown",
            CloseReason::MaxAge => "max_age",
        }
    }
}

/// Something that happened to a connection.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum ConnectionEvent<'a> {
    /// A connection opened (accepted by a server, connected by a client).
    Opened {
        /// Which end this is.
        side: Side,
        /// The other end.
        peer: Option<SocketAddr>,
    },
    /// A connection closed, after moving these many bytes.
    Closed {
        /// Which end this is.
        side: Side,
        /// The other end.
        peer: Option<SocketAddr>,
        /// Why.
        reason: CloseReason,
        /// Bytes read from it.
        bytes_received: u64,
        /// Bytes written to it.
        bytes_sent: u64,
    },
    /// A client's attempt to connect failed; the next is after `backoff`.
    ConnectFailed {
        /// What it tried to reach.
        target: &'a str,
        /// Failures in a row.
        failures: u32,
        /// The wait before the next attempt.
        backoff: Duration,
    },
}

/// Sees calls and connections; add one with `.observer(...)` on a
/// [`ServerBuilder`](crate::ServerBuilder) or
/// [`ChannelBuilder`](crate::ChannelBuilder). Its methods run on the
/// call's own task, so they should be quick; the defaults do nothing.
pub trait Observer: Send + Sync + 'static {
    /// A call started.
    fn call_start(&self, call: &CallStart<'_>) {
        let _ = call;
    }

    /// A call ended (exactly once per call that started).
    fn call_end(&self, call: &CallEnd<'_>) {
        let _ = call;
    }

    /// A connection opened or closed, or a connection attempt failed.
    fn connection(&self, event: &ConnectionEvent<'_>) {
        let _ = event;
    }
}

/// The `rpc.method` value of a method a server does not have.
pub const OTHER_METHOD: &str = "_OTHER";
