//! Call spans over loopback TCP: names and the conventions' fields,
//! status codes recorded at the end, the trace id of a traced call.
//!
//! Alone in its binary: the subscriber is this thread's default, and
//! tracing caches whether a span is enabled per call site, process-wide,
//! which tests running beside it on other threads would disturb.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};

use tram::observe::TraceContext;
use tram::{Channel, Request, Response, Server, Status};

#[derive(Clone, PartialEq, prost::Message)]
struct Hop {}

const FRONT: &str = "/obs.Chain/Front";
const BACK: &str = "/obs.Chain/Back";

/// Collects the call spans' names and fields.
#[derive(Default, Clone)]
struct Spans(Arc<Mutex<Vec<Span>>>);

/// A span's name and fields.
type Span = (String, Vec<(String, String)>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Vec::new();
        attrs.record(&mut Fields(&mut fields));
        let mut spans = self.0.lock().unwrap();
        fields.push(("id".into(), id.into_u64().to_string()));
        spans.push((attrs.metadata().name().to_owned(), fields));
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut spans = self.0.lock().unwrap();
        let key = id.into_u64().to_string();
        if let Some((_, fields)) = spans
            .iter_mut()
            .find(|(_, f)| f.iter().any(|(k, v)| k == "id" && *v == key))
        {
            values.record(&mut Fields(fields));
        }
    }
}

impl Spans {
    fn find(&self, name: &str, method: &str) -> Vec<(String, String)> {
        let spans = self.0.lock().unwrap().clone();
        spans
            .iter()
            .find(|(n, f)| n == name && f.iter().any(|(k, v)| k == "rpc.method" && v == method))
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("no span {name} for {method}: {spans:?}"))
    }
}

fn field<'a>(fields: &'a [(String, String)], key: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

// One thread: the subscriber is this thread's default, and the server's
// connections and handlers run here too.
#[tokio::test(flavor = "current_thread")]
async fn calls_have_spans_with_the_conventions_fields() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone()).with(
        tracing_subscriber::filter::Targets::new().with_target("tram::call", tracing::Level::DEBUG),
    );
    let _default = tracing::subscriber::set_default(subscriber);

    let server = Server::builder()
        .unary(BACK, |_: Request<Hop>| async move {
            Ok(Response::new(Hop::default()))
        })
        .unary(FRONT, |_: Request<Hop>| async move {
            Err::<Response<Hop>, _>(Status::permission_denied("no"))
        })
        .build();
    let (addr, _stop, _task) = support::serve(server).await;
    let channel = Channel::new(addr.to_string());
    TraceContext::new_root()
        .scope(channel.unary::<_, Hop>(BACK, Request::new(Hop::default())))
        .await
        .unwrap();
    let _ = channel
        .unary::<_, Hop>(FRONT, Request::new(Hop::default()))
        .await;

    let server_ok = spans.find("tram.server.call", BACK);
    assert_eq!(field(&server_ok, "rpc.system.name"), Some("tram"));
    assert_eq!(field(&server_ok, "rpc.response.status_code"), Some("OK"));
    assert_eq!(field(&server_ok, "otel.kind"), Some("server"));
    assert_eq!(field(&server_ok, "trace_id").map(str::len), Some(32));
    let client_ok = spans.find("tram.client.call", BACK);
    assert_eq!(field(&client_ok, "rpc.response.status_code"), Some("OK"));
    assert_eq!(field(&client_ok, "trace_id"), field(&server_ok, "trace_id"));
    let denied = spans.find("tram.server.call", FRONT);
    assert_eq!(
        field(&denied, "rpc.response.status_code"),
        Some("PERMISSION_DENIED")
    );
    assert_eq!(field(&denied, "error.type"), Some("PERMISSION_DENIED"));
    assert_eq!(field(&denied, "trace_id"), None);
}
