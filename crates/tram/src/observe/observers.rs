//! The observers of one server or channel ([`Observers`]), and what one
//! call carries from its start to its end ([`Observed`]).
//!
//! A call is observed only when something watches: metrics are on, an
//! observer of the user's is added, call spans are enabled, or the call
//! carries a trace context. Otherwise the call pays for one check and
//! carries nothing.

use std::cell::RefCell;
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

/// Methods kept apart in metrics and spans, across the process; calls to
/// more (paths built at run time, say) are counted as `_OTHER`.
const MAX_METHODS: usize = 10_000;

/// What watches the calls and connections of one server or channel.
pub(crate) struct Observers {
    side: Side,
    /// Metrics are on, or an observer of the user's is added: every call
    /// is observed.
    always: bool,
    metrics: Level,
    /// The user's observers; `None` if there are none.
    users: Option<Users>,
    conns: Option<ConnectionMetrics>,
}

/// The user's observers, shared by the calls that tell them.
type Users = Arc<[Arc<dyn Observer>]>;

/// One method as observed: its name and, with metrics on, its handles.
/// Made once per process for each side, system and method (see
/// [`intern`]), and never freed, so that a call refers to it without a
/// reference count.
pub(crate) struct MethodObs {
    pub(crate) name: Box<str>,
    side: Side,
    system: &'static str,
    level: Level,
    metrics: Option<MethodMetrics>,
}

/// Which built-in metrics a server or channel records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Level {
    Off,
    /// Calls, durations, connections.
    On,
    /// And every message's size.
    WithSizes,
}

/// The metric settings of a builder: on, off, or (`None`) on when a
/// recorder is installed at build time; and message sizes or not.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MetricsConfig {
    pub(crate) on: Option<bool>,
    pub(crate) sizes: bool,
}

impl MetricsConfig {
    /// Off, whatever recorder is installed.
    pub(crate) const OFF: MetricsConfig = MetricsConfig {
        on: Some(false),
        sizes: false,
    };
}

impl MethodObs {
    /// A message, a request or a response, of the length `len` gives
    /// (asked only if message sizes are recorded).
    #[inline]
    pub(crate) fn message(&self, request: bool, len: impl FnOnce() -> usize) {
        if let Some(m) = &self.metrics {
            m.message_size(request, len);
        }
    }

    fn is(&self, side: Side, system: &str, level: Level, name: &str) -> bool {
        self.side == side && self.system == system && self.level == level && &*self.name == name
    }
}

/// The system of tram's own calls.
pub(crate) const TRAM: &str = "tram";

/// Every method observed in the process, by side, system and metrics
/// level, then by name: at most [`MAX_METHODS`] of them, plus
/// `_OTHER`.
type Interned = HashMap<(Side, &'static str, Level), HashMap<Box<str>, &'static MethodObs>>;

static INTERNED: OnceLock<RwLock<(Interned, usize)>> = OnceLock::new();

thread_local! {
    /// The methods this thread looked up last: a client's calls find
    /// theirs without a lock or a hash.
    static RECENT: RefCell<([Option<&'static MethodObs>; 8], usize)> =
        const { RefCell::new(([None; 8], 0)) };
}

/// The one [`MethodObs`] for `name` of `system` on `side` (with the metric
/// handles of `level`), made on first use.
fn intern(side: Side, system: &'static str, level: Level, name: &str) -> &'static MethodObs {
    let hit = RECENT.with(|r| {
        r.borrow()
            .0
            .iter()
            .flatten()
            .find(|m| m.is(side, system, level, name))
            .copied()
    });
    if let Some(m) = hit {
        return m;
    }
    let m = intern_slow(side, system, level, name);
    RECENT.with(|r| {
        let (slots, next) = &mut *r.borrow_mut();
        slots[*next] = Some(m);
        *next = (*next + 1) % slots.len();
    });
    m
}

#[inline(never)]
fn intern_slow(side: Side, system: &'static str, level: Level, name: &str) -> &'static MethodObs {
    let interned = INTERNED.get_or_init(RwLock::default);
    let key = (side, system, level);
    if let Some(m) = interned.read().0.get(&key).and_then(|by| by.get(name)) {
        return m;
    }
    let mut guard = interned.write();
    let (all, count) = &mut *guard;
    let by_name = all.entry(key).or_default();
    if let Some(m) = by_name.get(name) {
        return m;
    }
    let name = if *count >= MAX_METHODS {
        OTHER_METHOD
    } else {
        name
    };
    by_name.entry(name.into()).or_insert_with(|| {
        *count += 1;
        // Bounded by `MAX_METHODS`: leaked on purpose, see `MethodObs`.
        Box::leak(Box::new(MethodObs {
            name: name.into(),
            side,
            system,
            level,
            metrics: (level != Level::Off)
                .then(|| MethodMetrics::new(side, system, name, level == Level::WithSizes)),
        }))
    })
}

impl Observers {
    /// `metrics`: which metrics, `on` when a metrics recorder is installed
    /// now unless said.
    pub(crate) fn new(side: Side, metrics: MetricsConfig, users: Vec<Arc<dyn Observer>>) -> Self {
        let on = metrics.on.unwrap_or_else(recorder_installed);
        let level = match (on, metrics.sizes) {
            (false, _) => Level::Off,
            (true, false) => Level::On,
            (true, true) => Level::WithSizes,
        };
        Observers {
            side,
            always: on || !users.is_empty(),
            metrics: level,
            users: (!users.is_empty()).then(|| users.into()),
            conns: on.then(|| ConnectionMetrics::new(side)),
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

    /// The method `name` of `system`, as these observers see it.
    pub(crate) fn method(&self, system: &'static str, name: &str) -> &'static MethodObs {
        intern(self.side, system, self.metrics, name)
    }

    /// `_OTHER`, for a call to a method the server does not have.
    pub(crate) fn other(&self) -> &'static MethodObs {
        self.method(TRAM, OTHER_METHOD)
    }

    fn users(&self) -> &[Arc<dyn Observer>] {
        self.users.as_deref().unwrap_or_default()
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
        self.users().iter().for_each(|o| o.connection(&event));
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
        self.users().iter().for_each(|o| o.connection(&event));
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
        self.users().iter().for_each(|o| o.connection(&event));
    }
}

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observers")
            .field("metrics", &self.metrics)
            .field("observers", &self.users().len())
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
    method: &'static MethodObs,
    /// The user's observers, if any.
    users: Option<Users>,
    started: Instant,
    span: tracing::Span,
    /// The trace context of the call: on a server, the handler's (a child
    /// of the caller's).
    trace: Option<TraceContext>,
    ended: bool,
}

impl Observed {
    /// A call of `method` started at `started`, with these request
    /// headers. On a server, a `traceparent` in them is continued.
    pub(crate) fn start(
        observers: &Observers,
        method: &'static MethodObs,
        peer: Option<SocketAddr>,
        metadata: &Metadata,
        started: Instant,
    ) -> Box<Observed> {
        let side = observers.side;
        let incoming = match side {
            Side::Server if !metadata.is_empty() => TraceContext::from_metadata(metadata),
            _ => None,
        };
        #[allow(unused_mut)]
        let mut trace = incoming.as_ref().map(TraceContext::child);
        let span = call_span(side, method.system, &method.name, trace.as_ref());
        #[cfg(feature = "opentelemetry")]
        if !span.is_disabled() {
            if let Some(parent) = &incoming {
                super::otel::set_remote_parent(&span, parent);
            }
            // The handler's calls continue from this span, as
            // OpenTelemetry knows it.
            if side == Side::Server {
                if let Some(own) = super::otel::span_trace(&span) {
                    trace = Some(own);
                }
            }
        }
        if let Some(m) = &method.metrics {
            m.start();
        }
        if let Some(users) = &observers.users {
            let call = CallStart {
                side,
                system: method.system,
                method: &method.name,
                peer,
                metadata,
            };
            users.iter().for_each(|o| o.call_start(&call));
        }
        Box::new(Observed {
            method,
            users: observers.users.clone(),
            started,
            span,
            trace,
            ended: false,
        })
    }

    /// The call span's OpenTelemetry context, if an OpenTelemetry layer
    /// records it.
    #[cfg(feature = "opentelemetry")]
    pub(crate) fn otel_trace(&self) -> Option<TraceContext> {
        if self.span.is_disabled() {
            return None;
        }
        super::otel::span_trace(&self.span)
    }

    /// A request message went out or came in; `len` gives its length.
    #[inline]
    pub(crate) fn request_message(&self, len: impl FnOnce() -> usize) {
        self.method.message(true, len);
    }

    /// A response message, likewise.
    #[inline]
    pub(crate) fn response_message(&self, len: impl FnOnce() -> usize) {
        self.method.message(false, len);
    }

    /// The method observed.
    pub(crate) fn method(&self) -> &'static MethodObs {
        self.method
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
        let method = self.method;
        if let Some(m) = &method.metrics {
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
        if let Some(users) = &self.users {
            let call = CallEnd {
                side: method.side,
                system: method.system,
                method: &method.name,
                code,
                elapsed,
            };
            users.iter().for_each(|o| o.call_end(&call));
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

/// Where a call starts, the observation it needs, if any: the call is
/// watched, or (on a server) carries a trace context to continue.
/// `started`: when the call started, if the caller has the time at hand.
#[inline]
pub(crate) fn observe(
    observers: &Observers,
    method: impl FnOnce() -> &'static MethodObs,
    peer: Option<SocketAddr>,
    metadata: &Metadata,
    started: Option<Instant>,
) -> Option<Box<Observed>> {
    let observed = observers.watching()
        || (observers.side == Side::Server
            && !metadata.is_empty()
            && metadata.get(trace::TRACEPARENT).is_some());
    observed.then(|| {
        let started = started.unwrap_or_else(Instant::now);
        Observed::start(observers, method(), peer, metadata, started)
    })
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
