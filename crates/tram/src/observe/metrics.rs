//! The built-in metrics, through the `metrics` facade, named after
//! OpenTelemetry's RPC conventions. A method's handles are registered with
//! the recorder once (the first call of the method on a server or
//! channel) and kept: a call then records into them without building a key
//! or looking one up.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label, Unit};
use tram_wire::Code;

use super::Side;

/// The metric handles of one method, on one side, for one system.
pub(crate) struct MethodMetrics {
    side: Side,
    system: &'static str,
    method: String,
    started: Counter,
    active: Gauge,
    /// The request and response size histograms, when recorded.
    sizes: Option<(Histogram, Histogram)>,
    /// Duration histograms by status code (each code has its own
    /// attributes), registered on first use.
    duration: [OnceLock<Histogram>; 17],
}

fn name(side: Side, what: &str) -> String {
    match side {
        Side::Server => format!("rpc.server.{what}"),
        Side::Client => format!("rpc.client.{what}"),
    }
}

fn describe() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for side in [Side::Server, Side::Client] {
            metrics::describe_histogram!(
                name(side, "call.duration"),
                Unit::Seconds,
                "Duration of RPC calls"
            );
            metrics::describe_histogram!(
                name(side, "request.size"),
                Unit::Bytes,
                "Size of RPC request messages"
            );
            metrics::describe_histogram!(
                name(side, "response.size"),
                Unit::Bytes,
                "Size of RPC response messages"
            );
            metrics::describe_counter!(name(side, "calls.started"), "RPC calls started");
            metrics::describe_gauge!(name(side, "calls.active"), "RPC calls in flight");
        }
    });
}

impl MethodMetrics {
    /// Registers the method's handles with the recorder installed now, the
    /// message size histograms with `sizes`.
    pub(crate) fn new(
        side: Side,
        system: &'static str,
        method: &str,
        sizes: bool,
    ) -> MethodMetrics {
        describe();
        let labels = base_labels(system, method);
        let started = metrics::counter!(name(side, "calls.started"), labels.clone());
        let active = metrics::gauge!(name(side, "calls.active"), labels.clone());
        let sizes = sizes.then(|| {
            (
                metrics::histogram!(name(side, "request.size"), labels.clone()),
                metrics::histogram!(name(side, "response.size"), labels),
            )
        });
        MethodMetrics {
            side,
            system,
            method: method.to_owned(),
            started,
            active,
            sizes,
            duration: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// A call of the method starts.
    pub(crate) fn start(&self) {
        self.started.increment(1);
        self.active.increment(1.0);
    }

    /// A request (`request`) or response message of the length `len`
    /// gives, if sizes are recorded.
    #[inline]
    pub(crate) fn message_size(&self, request: bool, len: impl FnOnce() -> usize) {
        if let Some((req, resp)) = &self.sizes {
            let h = if request { req } else { resp };
            h.record(len() as f64);
        }
    }

    /// The call ended with `code` after `elapsed`.
    pub(crate) fn end(&self, code: Code, elapsed: Duration) {
        self.duration(code).record(elapsed.as_secs_f64());
        self.active.decrement(1.0);
    }

    fn duration(&self, code: Code) -> &Histogram {
        let i = (code as usize).min(16);
        self.duration[i].get_or_init(|| {
            let mut labels = base_labels(self.system, &self.method);
            labels.push(Label::new(
                "rpc.response.status_code",
                code.as_str().to_owned(),
            ));
            if code != Code::Ok {
                labels.push(Label::new("error.type", code.as_str().to_owned()));
            }
            metrics::histogram!(name(self.side, "call.duration"), labels)
        })
    }
}

fn base_labels(system: &'static str, method: &str) -> Vec<Label> {
    vec![
        Label::from_static_parts("rpc.system.name", system),
        Label::new("rpc.method", method.to_owned()),
    ]
}

/// The connection-level handles of one side, registered once.
pub(crate) struct ConnectionMetrics {
    pub(crate) opened: Counter,
    pub(crate) open: Gauge,
    pub(crate) bytes_received: Counter,
    pub(crate) bytes_sent: Counter,
    pub(crate) queued: Gauge,
    pub(crate) connect_attempts: Counter,
    pub(crate) connect_failures: Counter,
    side: Side,
}

impl ConnectionMetrics {
    pub(crate) fn new(side: Side) -> ConnectionMetrics {
        describe_connections();
        let s = side_label(side);
        ConnectionMetrics {
            opened: metrics::counter!("tram.connections.opened", "side" => s),
            open: metrics::gauge!("tram.connections.open", "side" => s),
            bytes_received: metrics::counter!("tram.connection.bytes.received", "side" => s),
            bytes_sent: metrics::counter!("tram.connection.bytes.sent", "side" => s),
            queued: metrics::gauge!("tram.connection.queued.bytes", "side" => s),
            connect_attempts: metrics::counter!("tram.client.connect.attempts"),
            connect_failures: metrics::counter!("tram.client.connect.failures"),
            side,
        }
    }

    /// A connection closed for `reason` (the counter by reason is looked up
    /// here: closing is rare next to calls).
    pub(crate) fn closed(&self, reason: super::CloseReason) {
        self.open.decrement(1.0);
        metrics::counter!(
            "tram.connections.closed",
            "side" => side_label(self.side),
            "reason" => reason.as_str()
        )
        .increment(1);
    }
}

fn describe_connections() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        metrics::describe_counter!("tram.connections.opened", "Connections opened");
        metrics::describe_gauge!("tram.connections.open", "Connections open");
        metrics::describe_counter!("tram.connections.closed", "Connections closed, by reason");
        metrics::describe_counter!(
            "tram.connection.bytes.received",
            Unit::Bytes,
            "Bytes read from connections"
        );
        metrics::describe_counter!(
            "tram.connection.bytes.sent",
            Unit::Bytes,
            "Bytes written to connections"
        );
        metrics::describe_gauge!(
            "tram.connection.queued.bytes",
            Unit::Bytes,
            "Bytes waiting in connections' outbound queues"
        );
        metrics::describe_counter!("tram.client.connect.attempts", "Connection attempts");
        metrics::describe_counter!("tram.client.connect.failures", "Failed connection attempts");
    });
}

fn side_label(side: Side) -> &'static str {
    match side {
        Side::Client => "client",
        Side::Server => "server",
    }
}
