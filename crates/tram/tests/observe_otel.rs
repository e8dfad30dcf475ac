//! Feature `opentelemetry`: call spans recorded by tracing-opentelemetry
//! into OpenTelemetry's SDK (an in-memory exporter) form one trace across
//! a client → server → client → server chain over loopback TCP: each
//! server span's parent is its caller's client span, each client span's
//! the span it was called in.
//!
//! Alone in its binary, on one thread: the subscriber is this thread's
//! default.
#![allow(clippy::unwrap_used)]

mod support;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tram::{Channel, Request, Response, Server};

#[derive(Clone, PartialEq, prost::Message)]
struct Hop {}

const FRONT: &str = "/otel.Chain/Front";
const BACK: &str = "/otel.Chain/Back";

fn named<'a>(spans: &'a [SpanData], name: &str, method: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|s| {
            s.name == name
                && s.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == "rpc.method" && kv.value.as_str() == method)
        })
        .unwrap_or_else(|| panic!("no span {name} of {method}: {spans:#?}"))
}

#[tokio::test(flavor = "current_thread")]
async fn spans_form_one_opentelemetry_trace_across_calls() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")))
        .with(
            tracing_subscriber::filter::Targets::new()
                .with_target("tram::call", tracing::Level::DEBUG)
                .with_target("observe_otel", tracing::Level::INFO),
        );
    let _default = tracing::subscriber::set_default(subscriber);

    // FRONT calls BACK on the same server, from inside its handler.
    let back_channel: std::sync::Arc<std::sync::OnceLock<Channel>> = Default::default();
    let inner = back_channel.clone();
    let server = Server::builder()
        .unary(BACK, |_: Request<Hop>| async move {
            Ok(Response::new(Hop::default()))
        })
        .unary(FRONT, move |_: Request<Hop>| {
            let channel = inner.get().unwrap().clone();
            async move {
                channel
                    .unary::<_, Hop>(BACK, Request::new(Hop::default()))
                    .await?;
                Ok(Response::new(Hop::default()))
            }
        })
        .build();
    let (addr, _stop, _task) = support::serve(server).await;
    back_channel.set(Channel::new(addr.to_string())).unwrap();
    let channel = Channel::new(addr.to_string());

    channel
        .unary::<_, Hop>(FRONT, Request::new(Hop::default()))
        .instrument(tracing::info_span!("request"))
        .await
        .unwrap();
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    let root = spans.iter().find(|s| s.name == "request").unwrap();
    let client_front = named(&spans, "tram.client.call", FRONT);
    let server_front = named(&spans, "tram.server.call", FRONT);
    let client_back = named(&spans, "tram.client.call", BACK);
    let server_back = named(&spans, "tram.server.call", BACK);
    let trace = root.span_context.trace_id();
    for s in [client_front, server_front, client_back, server_back] {
        assert_eq!(
            s.span_context.trace_id(),
            trace,
            "{} is in the trace",
            s.name
        );
    }
    assert_eq!(client_front.parent_span_id, root.span_context.span_id());
    assert_eq!(
        server_front.parent_span_id,
        client_front.span_context.span_id()
    );
    assert_eq!(
        client_back.parent_span_id,
        server_front.span_context.span_id()
    );
    assert_eq!(
        server_back.parent_span_id,
        client_back.span_context.span_id()
    );
}
