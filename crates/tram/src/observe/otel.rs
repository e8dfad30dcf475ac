//! OpenTelemetry's context for call spans (feature `opentelemetry`, through
//! `tracing-opentelemetry`): a server's call span takes the caller's
//! `traceparent` as its remote parent, and a client call carries its own
//! call span as the parent of the server's. Without an OpenTelemetry layer
//! on the subscriber, spans have no OpenTelemetry context and tram's own
//! propagation applies.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::trace::TraceContext;

/// Makes `parent` (a caller's context, from its metadata) the remote
/// parent of `span`.
pub(crate) fn set_remote_parent(span: &tracing::Span, parent: &TraceContext) {
    let (trace_id, span_id, flags) = parent.ids();
    let context = SpanContext::new(
        TraceId::from_bytes(trace_id),
        SpanId::from_bytes(span_id),
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    // Fails only for a span already started elsewhere; a fresh call span
    // is not.
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(context));
}

/// `span`'s OpenTelemetry context as a trace context, if it has a valid
/// one (an OpenTelemetry layer records it).
pub(crate) fn span_trace(span: &tracing::Span) -> Option<TraceContext> {
    let context = span.context();
    let otel = context.span();
    let sc = otel.span_context();
    sc.is_valid().then(|| {
        TraceContext::from_ids(
            sc.trace_id().to_bytes(),
            sc.span_id().to_bytes(),
            sc.trace_flags().to_u8(),
        )
    })
}
