//! Snapshots of live connections, channelz in spirit:
//! [`Server::connections`](crate::Server::connections) and
//! [`Channel::endpoints`](crate::Channel::endpoints).
//!
//! A connection's task publishes its figures once per turn (relaxed
//! stores); a snapshot reads them, with the queue's own counters, under a
//! lock that only registering, leaving and snapshots take.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use slab::Slab;

use crate::conn::Sender;
use crate::rpc::codec::RpcEncoder;

/// One live connection, as a snapshot saw it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// The other end.
    pub peer: Option<SocketAddr>,
    /// How long it has been open.
    pub age: Duration,
    /// Calls open on it.
    pub calls_in_flight: usize,
    /// Calls it has carried.
    pub calls_started: u64,
    /// Bytes waiting in its outbound queue.
    pub queued_bytes: usize,
    /// Bytes read from it.
    pub bytes_received: u64,
    /// Bytes written to it.
    pub bytes_sent: u64,
    /// It is going away (GOAWAY sent or received): no new calls.
    pub going_away: bool,
}

impl ConnectionInfo {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        peer: Option<SocketAddr>,
        age: Duration,
        calls_in_flight: usize,
        calls_started: u64,
        queued_bytes: usize,
        bytes_received: u64,
        bytes_sent: u64,
        going_away: bool,
    ) -> ConnectionInfo {
        ConnectionInfo {
            peer,
            age,
            calls_in_flight,
            calls_started,
            queued_bytes,
            bytes_received,
            bytes_sent,
            going_away,
        }
    }
}

/// One endpoint of a channel (a connection slot of it: `pool_size` rows
/// per endpoint), as a snapshot saw it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EndpointInfo {
    /// What it connects to.
    pub target: String,
    /// Where it stands.
    pub state: EndpointState,
    /// Its connection, while it has one.
    pub connection: Option<ConnectionInfo>,
    /// Failed attempts to connect in a row.
    pub failures: u32,
    /// While backing off: the wait until the next attempt.
    pub retry_in: Option<Duration>,
    /// Why the last attempt to connect failed, if it did.
    pub last_error: Option<String>,
    /// The endpoint's latency estimate (Peak-EWMA, decayed to now), in
    /// nanoseconds; meaningful on channels that balance.
    pub latency_ns: f64,
}

impl EndpointInfo {
    pub(crate) fn new(
        target: String,
        state: EndpointState,
        connection: Option<ConnectionInfo>,
        failures: u32,
        retry_in: Option<Duration>,
        last_error: Option<String>,
        latency_ns: f64,
    ) -> EndpointInfo {
        EndpointInfo {
            target,
            state,
            connection,
            failures,
            retry_in,
            last_error,
            latency_ns,
        }
    }
}

/// Where a channel's endpoint stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndpointState {
    /// No connection, none being made (the next call connects).
    Idle,
    /// A connection is being made.
    Connecting,
    /// Connected and taking calls.
    Ready,
    /// The last attempt failed: calls fail fast until the next.
    BackingOff,
    /// Ejected by outlier detection: its calls failed too often.
    Ejected,
}

/// What a connection publishes for snapshots.
pub(crate) struct ConnStats {
    peer: Option<SocketAddr>,
    opened: Instant,
    calls: AtomicUsize,
    started: AtomicU64,
    received: AtomicU64,
    going_away: AtomicBool,
    out: Sender<RpcEncoder>,
}

impl ConnStats {
    pub(crate) fn new(peer: Option<SocketAddr>, out: &Sender<RpcEncoder>) -> ConnStats {
        ConnStats {
            peer,
            opened: Instant::now(),
            calls: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            received: AtomicU64::new(0),
            going_away: AtomicBool::new(false),
            out: out.uncounted(),
        }
    }

    /// The connection's figures as of this turn.
    pub(crate) fn publish(&self, calls: usize, started: u64, received: u64, going_away: bool) {
        self.calls.store(calls, Ordering::Relaxed);
        self.started.store(started, Ordering::Relaxed);
        self.received.store(received, Ordering::Relaxed);
        if going_away {
            self.going_away.store(true, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> ConnectionInfo {
        ConnectionInfo::new(
            self.peer,
            self.opened.elapsed(),
            self.calls.load(Ordering::Relaxed),
            self.started.load(Ordering::Relaxed),
            self.out.queued_bytes(),
            self.received.load(Ordering::Relaxed),
            self.out.bytes_written(),
            self.going_away.load(Ordering::Relaxed),
        )
    }
}

/// The live connections of one server.
#[derive(Default)]
pub(crate) struct Registry {
    conns: Mutex<Slab<Arc<ConnStats>>>,
}

impl Registry {
    /// Registers a connection until the returned guard drops.
    pub(crate) fn register(self: &Arc<Self>, stats: ConnStats) -> Registered {
        let stats = Arc::new(stats);
        let key = self.conns.lock().insert(stats.clone());
        Registered {
            registry: self.clone(),
            key,
            stats,
        }
    }

    /// Every live connection, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<ConnectionInfo> {
        let conns: Vec<_> = self.conns.lock().iter().map(|(_, s)| s.clone()).collect();
        let mut infos: Vec<_> = conns.iter().map(|s| s.snapshot()).collect();
        infos.sort_by_key(|c| std::cmp::Reverse(c.age));
        infos
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("connections", &self.conns.lock().len())
            .finish()
    }
}

/// A connection's place in its server's registry, left when dropped.
pub(crate) struct Registered {
    registry: Arc<Registry>,
    key: usize,
    pub(crate) stats: Arc<ConnStats>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.conns.lock().try_remove(self.key);
    }
}
