//! W3C trace context (`traceparent`, `tracestate`) carried in call
//! metadata, the context current while a handler runs, and the call spans.
//!
//! A server reads the caller's `traceparent` and makes a child of it
//! current while the handler is polled; a call made then carries the trace
//! on, as a child of the handler's. Nothing is added to calls made outside
//! any trace context: tram propagates traces, it does not start them
//! (start one with [`TraceContext::new_root`]).

use std::cell::RefCell;
use std::fmt::Write as _;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tram_wire::Metadata;

/// The metadata key of the W3C trace parent.
pub const TRACEPARENT: &str = "traceparent";
/// The metadata key of the W3C trace state.
pub const TRACESTATE: &str = "tracestate";

/// A W3C trace context: the trace a call belongs to and the span it is a
/// child of.
#[derive(Clone, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
    state: Option<Arc<str>>,
}

thread_local! {
    static CURRENT: RefCell<Option<TraceContext>> = const { RefCell::new(None) };
}

/// Set once any context has been made current: until then, calls skip
/// looking for one.
static EVER_CURRENT: AtomicBool = AtomicBool::new(false);

impl TraceContext {
    /// A new trace (random ids), sampled.
    pub fn new_root() -> TraceContext {
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&random_nonzero().to_be_bytes());
        trace_id[8..].copy_from_slice(&random_nonzero().to_be_bytes());
        TraceContext {
            trace_id,
            span_id: random_nonzero().to_be_bytes(),
            flags: 1,
            state: None,
        }
    }

    /// The context a call's `traceparent` (and `tracestate`) carry, if it
    /// has a valid one.
    pub fn from_metadata(metadata: &Metadata) -> Option<TraceContext> {
        let parent = metadata.get(TRACEPARENT)?;
        let mut ctx = TraceContext::parse(std::str::from_utf8(parent).ok()?)?;
        ctx.state = metadata
            .get(TRACESTATE)
            .and_then(|s| std::str::from_utf8(s).ok())
            .filter(|s| !s.is_empty() && s.len() <= 512)
            .map(Arc::from);
        Some(ctx)
    }

    /// Parses a `traceparent` value (version 00, or a later version's
    /// first four fields, as the spec asks).
    pub fn parse(value: &str) -> Option<TraceContext> {
        let mut parts = value.trim().split('-');
        let version = parts.next()?;
        let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
        let version = hex_array::<1>(version)?[0];
        if version == 0xff || (version == 0 && parts.next().is_some()) {
            return None;
        }
        let trace_id = hex_array::<16>(trace)?;
        let span_id = hex_array::<8>(span)?;
        let flags = hex_array::<1>(flags)?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            flags,
            state: None,
        })
    }

    /// The `traceparent` value.
    pub fn traceparent(&self) -> String {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        push_hex(&mut s, &self.trace_id);
        s.push('-');
        push_hex(&mut s, &self.span_id);
        s.push('-');
        push_hex(&mut s, &[self.flags]);
        s
    }

    /// The trace's id, as 32 hex digits.
    pub fn trace_id(&self) -> String {
        let mut s = String::with_capacity(32);
        push_hex(&mut s, &self.trace_id);
        s
    }

    /// The span's id (the parent of what this context's calls start), as
    /// 16 hex digits.
    pub fn span_id(&self) -> String {
        let mut s = String::with_capacity(16);
        push_hex(&mut s, &self.span_id);
        s
    }

    /// The `tracestate` carried along, if any.
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }

    /// Whether the trace is sampled (flag 01).
    pub fn is_sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// A context from its ids (trace, span, flags), no trace state.
    #[cfg(feature = "opentelemetry")]
    pub(crate) fn from_ids(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> TraceContext {
        TraceContext {
            trace_id,
            span_id,
            flags,
            state: None,
        }
    }

    /// The trace id, span id and flags.
    #[cfg(feature = "opentelemetry")]
    pub(crate) fn ids(&self) -> ([u8; 16], [u8; 8], u8) {
        (self.trace_id, self.span_id, self.flags)
    }

    /// `metadata` with this context itself as the `traceparent` (the span
    /// named is the server call's parent); unchanged if it has one.
    #[cfg(feature = "opentelemetry")]
    pub(crate) fn inject_as_parent(&self, metadata: Metadata) -> Metadata {
        if metadata.get(TRACEPARENT).is_some() {
            return metadata;
        }
        let mut b = metadata.to_builder();
        let _ = b.ascii(TRACEPARENT, &self.traceparent());
        b.build()
    }

    /// A child: the same trace, a new span id.
    pub fn child(&self) -> TraceContext {
        TraceContext {
            span_id: random_nonzero().to_be_bytes(),
            ..self.clone()
        }
    }

    /// The context current on this thread: set while a server's handler is
    /// polled (a child of the caller's), or inside [`TraceContext::scope`].
    #[inline]
    pub fn current() -> Option<TraceContext> {
        if !EVER_CURRENT.load(Ordering::Relaxed) {
            return None;
        }
        current_slow()
    }

    /// Runs `fut` with this context current whenever it is polled: calls it
    /// makes carry the trace on. (A task spawned from a handler does not
    /// inherit the handler's context; wrap it in this.)
    pub fn scope<F: Future>(self, fut: F) -> Scoped<F> {
        scoped(Some(self), fut)
    }

    /// Makes this context current until the guard drops.
    pub(crate) fn enter(&self) -> Entered {
        EVER_CURRENT.store(true, Ordering::Relaxed);
        let previous = CURRENT.with(|c| c.replace(Some(self.clone())));
        Entered { previous }
    }

    /// `metadata` with a `traceparent` for a call made in this context (a
    /// child span's), and its `tracestate`; unchanged if it has one.
    pub(crate) fn inject(&self, metadata: Metadata) -> Metadata {
        if metadata.get(TRACEPARENT).is_some() {
            return metadata;
        }
        let mut b = metadata.to_builder();
        let child = self.child();
        // The keys and values are valid ASCII metadata by construction.
        let _ = b.ascii(TRACEPARENT, &child.traceparent());
        if let Some(state) = &self.state {
            let _ = b.ascii(TRACESTATE, state);
        }
        b.build()
    }
}

impl std::fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceContext")
            .field("traceparent", &self.traceparent())
            .field("tracestate", &self.state)
            .finish()
    }
}

#[inline(never)]
fn current_slow() -> Option<TraceContext> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Restores the context that was current before [`TraceContext::enter`].
pub(crate) struct Entered {
    previous: Option<TraceContext>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Metadata for a call made now: with the current trace context's
/// `traceparent` when there is one. Costs one relaxed load otherwise.
#[inline]
pub(crate) fn propagate(metadata: Metadata) -> Metadata {
    match TraceContext::current() {
        Some(ctx) => ctx.inject(metadata),
        None => metadata,
    }
}

/// Metadata for a client call whose observation is `observed`: with the
/// call span's OpenTelemetry context as the parent, when there is one
/// (feature `opentelemetry`), else as [`propagate`].
#[inline]
pub(crate) fn propagate_for(
    metadata: Metadata,
    observed: Option<&super::observers::Observed>,
) -> Metadata {
    #[cfg(feature = "opentelemetry")]
    if let Some(t) = observed.and_then(|o| o.otel_trace()) {
        return t.inject_as_parent(metadata);
    }
    #[cfg(not(feature = "opentelemetry"))]
    let _ = observed;
    propagate(metadata)
}

/// `fut`, run with `ctx` current (if any) whenever it is polled.
pub(crate) fn scoped<F: Future>(ctx: Option<TraceContext>, fut: F) -> Scoped<F> {
    Scoped { ctx, fut }
}

pin_project_lite::pin_project! {
    /// A future run with a trace context current: see
    /// [`TraceContext::scope`].
    #[derive(Debug)]
    pub struct Scoped<F> {
        ctx: Option<TraceContext>,
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.ctx.as_ref().map(TraceContext::enter);
        this.fut.poll(cx)
    }
}

fn hex_array<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.as_bytes();
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

/// A lowercase hex digit's value (the spec allows no uppercase).
fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn push_hex(s: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
}

/// A random non-zero id. Trace ids need uniqueness, not secrecy: a
/// per-thread xorshift seeded from std's random hasher keys.
fn random_nonzero() -> u64 {
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new({
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(std::process::id().into());
            h.finish() | 1
        });
    }
    STATE.with(|s| {
        loop {
            let mut x = s.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.set(x);
            if x != 0 {
                return x;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_and_formats_the_spec_example() {
        let ctx = TraceContext::parse(EXAMPLE).expect("valid");
        assert_eq!(ctx.traceparent(), EXAMPLE);
        assert_eq!(ctx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.span_id(), "00f067aa0ba902b7");
        assert!(ctx.is_sampled());
    }

    #[test]
    fn rejects_what_the_spec_rejects() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(TraceContext::parse(bad).is_none(), "{bad:?}");
        }
        // A later version may add fields after the four it shares.
        assert!(TraceContext::parse(&format!("01{}-more", &EXAMPLE[2..])).is_some());
    }

    #[test]
    fn a_child_keeps_the_trace_and_gets_a_new_span() {
        let root = TraceContext::new_root();
        let child = root.child();
        assert_eq!(child.trace_id(), root.trace_id());
        assert_ne!(child.span_id(), root.span_id());
    }

    #[test]
    fn the_current_context_is_scoped_and_injected_into_calls() {
        assert!(TraceContext::current().is_none() || !EVER_CURRENT.load(Ordering::Relaxed));
        let root = TraceContext::new_root();
        let metadata = {
            let _entered = root.enter();
            propagate(Metadata::new())
        };
        assert!(CURRENT.with(|c| c.borrow().is_none()));
        let sent = TraceContext::from_metadata(&metadata).expect("injected");
        assert_eq!(sent.trace_id(), root.trace_id());
        assert_ne!(sent.span_id(), root.span_id());
        // A traceparent set by the caller is left alone.
        let own = Metadata::builder()
            .ascii(TRACEPARENT, EXAMPLE)
            .expect("valid")
            .build();
        let kept = root.inject(own);
        assert_eq!(kept.get(TRACEPARENT), Some(EXAMPLE.as_bytes()));
    }
}
