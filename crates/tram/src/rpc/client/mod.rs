//! The client: [`Channel`], built with [`ChannelBuilder`].
//!
//! # Layout
//!
//! - `builder`: [`ChannelBuilder`] and the settings it makes; `fleet`:
//!   its fleet settings (endpoints, DNS, discovery, policy, ejection,
//!   subsetting).
//! - `pool`: the channel's endpoints, and the connection each call takes
//!   (one fixed endpoint, or a pick among many: see [`crate::balance`]).
//! - `unary`: [`UnaryCall`] (the fast path and the general one) and batches.
//! - `streaming`: server, client and bidirectional streaming calls, and
//!   their sinks.
//! - `conn`: one connection: its outbound queue, and its call table kept
//!   in the queue's encoder under the queue's one lock, shared by the
//!   callers and the reader.
//! - `share`: the references callers hold to a connection, counted in
//!   shares by thread.
//! - `calls`: the call table as pure code (frames in, effects out), the
//!   slot a unary call's answer is handed over in, and the relay its
//!   callers are woken by.
//! - `reader`: opening a connection, and its reader task.

mod builder;
pub(super) mod calls;
mod conn;
mod deadlines;
mod fleet;
mod pool;
mod reader;
mod share;
mod streaming;
mod unary;

use std::sync::Arc;

pub use builder::ChannelBuilder;
pub use streaming::{ClientStreamSink, RequestSink};
pub use unary::UnaryCall;

use tram_wire::Metadata;

use super::{Request, Status};
use crate::observe::{EndpointInfo, Observed, TRAM, observe, trace};
pub(crate) use builder::ChannelConfig;
use pool::Pool;
pub(crate) use reader::connect;
pub(crate) use share::{ConnRef, Shares};

/// A client of one server address, or of a fleet (see
/// [`crate::balance`]): cheap to clone, shared by any number of tasks. Connects on the first call (or at once with [`Channel::connect`]),
/// reconnects after a failure (with exponential backoff and jitter; calls
/// made while waiting to retry fail at once with `UNAVAILABLE`), and fails
/// every call in flight with `UNAVAILABLE` when its connection is lost.
/// Calls are retried only when marked idempotent and configured to
/// ([`ChannelBuilder::retries`]).
#[derive(Clone)]
pub struct Channel {
    pool: Arc<Pool>,
}

impl Channel {
    /// A channel to `target` (`host:port`), with default settings. Nothing
    /// happens until the first call.
    pub fn new(target: impl Into<String>) -> Channel {
        Channel::builder(target).build()
    }

    /// A channel to `target` (`host:port`), connected now.
    ///
    /// # Errors
    ///
    /// `UNAVAILABLE` with the reason when the connection cannot be made.
    pub async fn connect(target: impl Into<String>) -> Result<Channel, Status> {
        Channel::builder(target).connect().await
    }

    /// Starts a builder for a channel to `target` (`host:port`, or a name
    /// for [`ChannelBuilder::connector`]).
    pub fn builder(target: impl Into<String>) -> ChannelBuilder {
        ChannelBuilder::new(target.into())
    }

    fn from_config(config: ChannelConfig) -> Channel {
        Channel {
            pool: Arc::new(Pool::new(config)),
        }
    }

    /// Waits until the channel has a usable connection, connecting if
    /// needed.
    ///
    /// # Errors
    ///
    /// `UNAVAILABLE` with the reason when no connection can be made now.
    pub async fn ready(&self) -> Result<(), Status> {
        self.pool.connection().await.map(drop)
    }

    /// A snapshot of the channel's endpoints: each connection slot's
    /// state, its connection's figures, and the last failure to connect.
    pub fn endpoints(&self) -> Vec<EndpointInfo> {
        self.pool.endpoints()
    }

    /// A call of `path` starts: its metadata, with the current trace
    /// context if there is one, and its observation if anything watches.
    fn observe_call(&self, path: &str, metadata: Metadata) -> (Metadata, Option<Box<Observed>>) {
        let observers = &self.pool.config.observers;
        let observed = observe(
            observers,
            || observers.method(TRAM, path),
            None,
            &metadata,
            None,
        );
        (
            trace::propagate_for(metadata, observed.as_deref()),
            observed,
        )
    }

    /// A unary call.
    ///
    /// # Errors
    ///
    /// The server's status, or a local one: `UNAVAILABLE` (no connection),
    /// `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED` (message too large for the
    /// server, or no capacity), `INTERNAL` (response does not decode).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels the call on the server.
    pub fn unary<'a, Req, Resp>(
        &'a self,
        path: &'a str,
        request: Request<Req>,
    ) -> UnaryCall<'a, Req, Resp>
    where
        Req: prost::Message + 'a,
        Resp: prost::Message + Default + 'a,
    {
        UnaryCall::new(self, path, request)
    }
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("target", &self.pool.config.target)
            .finish_non_exhaustive()
    }
}
