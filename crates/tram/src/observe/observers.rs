//! The observers of one server or channel ([`Observers`]), and what one
//! call carries from its start to its end ([`Observed`]).
//!
//! A call is observed only when something watches: metrics are on, an
//! observer of the user's is added, call spans are enabled, or the call
//! carries a trace context. Otherwise the call pays for one check and
//! carries nothing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::RwLock;
use tokio::time::Instant;
use tram_wire::{Code, Metadata};

use super::metrics::{ConnectionMetrics, MethodMetrics};
use super::trace::{self, TraceContext};
use super::{CallEnd, CallStart, CloseReason, ConnectionEvent, OTHER_METHOD, Observer, Side};

/// Methods a channel keeps apart in its metrics and spans; calls to more
/// (paths built at run time, say) are counted as `_OTHER`.
const MAX_METHODS: usize = 1000;

/// What watches the calls and connections of one server or channel.
pub(crate) struct Observers {
    side: Side,
    /// Metrics are on, or an observer of the user's is added: every call
    /// is observed.
    always: bool,
    metrics: bool,
    users: Box<[Arc<dyn Observer>]>,
    conns: Option<ConnectionMetrics>,
    /// Methods seen so far, by system (`tram` first), then by path.
    methods: RwLock<Vec<(&'static str, ByName)>>,
    /// `_OTHER` for tram's own calls (the server's unknown methods).
    other: OnceLock<Arc<MethodObs>>,
}

/// A system's methods, by path.
type ByName = HashMap<Box<str>, Arc<MethodObs>>;

/// One method as observed: its name and, with metrics on, its handles.
pub(crate) struct MethodObs {
    pub(crate) name: Box<str>,
    system: &'static str,
    metrics: Option<MethodMetrics>,
}

impl MethodObs {
    /// A message of `len` bytes, a request or a response.
    pub(crate) fn message(&self, request: bool, len: usize) {
        if let Some(m) = &self.metrics {
            if request {
                m.request_size(len);
            } else {
                m.response_size(len);
            }
        }
    }
}

/// The system of tram's own calls.
pub(crate) const TRAM: &str = "tram";

impl Observers {
    /// `metrics`: on, off, or (`None`) on when a metrics recorder is
    /// installed now.
    pub(crate) fn new(side: Side, metrics: Option<bool>, users: Vec<Arc<dyn Observer>>) -> Self {
        let metrics = metrics.unwrap_or_else(recorder_installed);
        Observers {
            side,
            always: metrics || !users.is_empty(),
            metrics,
            users: users.into_boxed_slice(),
            conns: metrics.then(|| ConnectionMetrics::new(side)),
            methods: RwLock::new(Vec::new()),
            other: OnceLock::new(),
        }
    }

    /// Whether a call must be observed even without a trace context of its
    /// own: metrics, observers or call spans are on.
    #[inline]
    pub(crate) fn watching(&self) -> bool {
        self.always || spans_enabled()
    }

    /// Whether connections' byte counts are recorded.
    pub(crate) fn counts_bytes(&self) -> bool {
        self.conns.is_some()
    }

    /// The method `name` of `system`, registered on first use (with its
    /// metric handles), `_OTHER` past the bound.
    pub(crate) fn method(&self, system: &'static str, name: &str) -> Arc<MethodObs> {
        if let Some(m) = self
            .methods
            .read()
            .iter()
            .find(|(s, _)| *s == system)
            .and_then(|(_, by_name)| by_name.get(name))
        {
            return m.clone();
        }
        let mut methods = self.methods.write();
        let index = match methods.iter().position(|(s, _)| *s == system) {
            Some(i) => i,
            None => {
                methods.push((system, HashMap::new()));
                methods.len() - 1
            }
        };
        let by_name = &mut methods[index].1;
        let name = if by_name.len() >= MAX_METHODS && !by_name.contains_key(name) {
            OTHER_METHOD
        } else {
            name
        };
        by_name
            .entry(name.into())
            .or_insert_with(|| self.new_method(system, name))
            .clone()
    }

    /// `_OTHER`, for a call to a method the server does not have.
    pub(crate) fn other(&self) -> &Arc<MethodObs> {
        self.other
            .get_or_init(|| self.new_method(TRAM, OTHER_METHOD))
    }

    fn new_method(&self, system: &'static str, name: &str) -> Arc<MethodObs> {
        Arc::new(MethodObs {
            name: name.into(),
            system,
            metrics: self
                .metrics
                .then(|| MethodMetrics::new(self.side, system, name)),
        })
    }

    /// A connection opened.
    pub(crate) fn opened(&self, peer: Option<SocketAddr>) {
        if let Some(m) = &self.conns {
            m.opened.increment(1);
            m.open.increment(1.0);
        }
        let event = ConnectionEvent::Opened {
            side: self.side,
            peer,
        };
        self.users.iter().for_each(|o| o.connection(&event));
    }

    /// Bytes moved on a connection since it last reported.
    pub(crate) fn transferred(&self, received: u64, sent: u64) {
        if let Some(m) = &self.conns {
            if received > 0 {
                m.bytes_received.increment(received);
            }
            if sent > 0 {
                m.bytes_sent.increment(sent);
            }
        }
    }

    /// Change in the bytes waiting in a connection's outbound queue.
    pub(crate) fn queued(&self, delta: i64) {
        if let Some(m) = &self.conns {
            if delta != 0 {
                m.queued.increment(delta as f64);
            }
        }
    }

    /// A connection closed, having moved these many bytes in all.
    pub(crate) fn closed(
        &self,
        peer: Option<SocketAddr>,
        reason: CloseReason,
        bytes_received: u64,
        bytes_sent: u64,
    ) {
        if let Some(m) = &self.conns {
            m.closed(reason);
        }
        let event = ConnectionEvent::Closed {
            side: self.side,
            peer,
            reason,
            bytes_received,
            bytes_sent,
        };
        self.users.iter().for_each(|o| o.connection(&event));
    }

    /// A client starts connecting.
    pub(crate) fn connect_attempt(&self) {
        if let Some(m) = &self.conns {
            m.connect_attempts.increment(1);
        }
    }

    /// A client's attempt to connect failed.
    pub(crate) fn connect_failed(&self, target: &str, failures: u32, backoff: Duration) {
        if let Some(m) = &self.conns {
            m.connect_failures.increment(1);
        }
        let event = ConnectionEvent::ConnectFailed {
            target,
            failures,
            backoff,
        };
        self.users.iter().for_each(|o| o.connection(&event));
    }
}

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observers")
            .field("metrics", &self.metrics)
            .field("observers", &self.users.len())
            .finish_non_exhaustive()
    }
}

/// Whether a metrics recorder is installed (global, or local to this
/// thread). The facade does not say so itself; its no-op recorder is the
/// one recorder with no state, which a recorder that records anything
/// cannot be.
fn recorder_installed() -> bool {
    metrics::with_recorder(|r| std::mem::size_of_val(r) != 0)
}

/// Whether call spans would be recorded now.
#[inline]
fn spans_enabled() -> bool {
    tracing::enabled!(target: "tram::call", tracing::Level::DEBUG)
}

/// One call, observed from its start to its end. Boxed, and made only for
/// calls that are (see [`Observers::watching`]). Dropped before its end, the
/// call counts as cancelled.
pub(crate) struct Observed {
    observers: Arc<Observers>,
    method: Arc<MethodObs>,
    started: Instant,
    span: tracing::Span,
    /// The trace context of the call: on a server, the handler's (a child
    /// of the caller's).
    trace: Option<TraceContext>,
    ended: bool,
}

impl Observed {
    /// A call of `method` starts, with these request headers. On a server,
    /// a `traceparent` in them is continued.
    pub(crate) fn start(
        observers: &Arc<Observers>,
        method: Arc<MethodObs>,
        peer: Option<SocketAddr>,
        metadata: &Metadata,
    ) -> Box<Observed> {
        let side = observers.side;
        let trace = match side {
            Side::Server => TraceContext::from_metadata(metadata).map(|c| c.child()),
            Side::Client => None,
        };
        let span = call_span(side, method.system, &method.name, trace.as_ref());
        if let Some(m) = &method.metrics {
            m.start();
        }
        if !observers.users.is_empty() {
            let call = CallStart {
                side,
                system: method.system,
                method: &method.name,
                peer,
                metadata,
            };
            observers.users.iter().for_each(|o| o.call_start(&call));
        }
        Box::new(Observed {
            observers: observers.clone(),
            method,
            started: Instant::now(),
            span,
            trace,
            ended: false,
        })
    }

    /// A request message of `len` bytes went out or came in.
    pub(crate) fn request_message(&self, len: usize) {
        self.method.message(true, len);
    }

    /// A response message of `len` bytes, likewise.
    pub(crate) fn response_message(&self, len: usize) {
        self.method.message(false, len);
    }

    /// The method observed.
    pub(crate) fn method(&self) -> &Arc<MethodObs> {
        &self.method
    }

    /// The call's span and trace context, to run a future in.
    pub(crate) fn scope(&self) -> (tracing::Span, Option<TraceContext>) {
        (self.span.clone(), self.trace.clone())
    }

    /// Enters the call's span and makes its trace context current, until
    /// the guard drops: around each poll of a server's handler.
    pub(crate) fn enter(&self) -> InCall<'_> {
        InCall {
            _span: self.span.enter(),
            _trace: self.trace.as_ref().map(TraceContext::enter),
        }
    }

    /// The call ended with `code`; `None`: it was not observed.
    #[inline]
    pub(crate) fn finish(observed: Option<Box<Observed>>, code: Code) {
        if let Some(mut o) = observed {
            o.end(code);
        }
    }

    /// The call ended with `code`.
    pub(crate) fn end(&mut self, code: Code) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let elapsed = self.started.elapsed();
        if let Some(m) = &self.method.metrics {
            m.end(code, elapsed);
        }
        if !self.span.is_disabled() {
            self.span.record("rpc.response.status_code", code.as_str());
            match code {
                Code::Ok => {}
                Code::Cancelled => tracing::debug!(parent: &self.span, "call cancelled"),
                Code::DeadlineExceeded => {
                    tracing::debug!(parent: &self.span, "call deadline exceeded");
                }
                _ => {
                    self.span.record("error.type", code.as_str());
                }
            }
        }
        if !self.observers.users.is_empty() {
            let call = CallEnd {
                side: self.observers.side,
                system: self.method.system,
                method: &self.method.name,
                code,
                elapsed,
            };
            self.observers.users.iter().for_each(|o| o.call_end(&call));
        }
    }
}

/// A call's span entered and its trace context current: see
/// [`Observed::enter`].
pub(crate) struct InCall<'a> {
    _span: tracing::span::Entered<'a>,
    _trace: Option<trace::Entered>,
}

impl Drop for Observed {
    fn drop(&mut self) {
        self.end(Code::Cancelled);
    }
}

/// Where a call of `system` starts, the observation it needs, if any: the
/// call is watched, or (on a server) carries a trace context to continue.
#[inline]
pub(crate) fn observe(
    observers: &Arc<Observers>,
    method: impl FnOnce() -> Arc<MethodObs>,
    peer: Option<SocketAddr>,
    metadata: &Metadata,
) -> Option<Box<Observed>> {
    let observed = observers.watching()
        || (observers.side == Side::Server
            && !metadata.is_empty()
            && metadata.get(trace::TRACEPARENT).is_some());
    observed.then(|| Observed::start(observers, method(), peer, metadata))
}

fn call_span(
    side: Side,
    system: &'static str,
    method: &str,
    trace: Option<&TraceContext>,
) -> tracing::Span {
    let span = match side {
        Side::Server => tracing::debug_span!(
            target: "tram::call",
            "tram.server.call",
            "rpc.system.name" = system,
            "rpc.method" = method,
            "rpc.response.status_code" = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
            "otel.kind" = "server",
            trace_id = tracing::field::Empty,
        ),
        Side::Client => tracing::debug_span!(
            target: "tram::call",
            "tram.client.call",
            "rpc.system.name" = system,
            "rpc.method" = method,
            "rpc.response.status_code" = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
            "otel.kind" = "client",
            trace_id = tracing::field::Empty,
        ),
    };
    if !span.is_disabled() {
        let current = match side {
            Side::Server => trace.cloned(),
            Side::Client => TraceContext::current(),
        };
        if let Some(t) = current {
            span.record("trace_id", t.trace_id());
        }
    }
    span
}
