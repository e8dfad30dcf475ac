//! Observability: Prometheus metrics, call spans, a trace carried across
//! two hops, and snapshots of connections.
//!
//! A front server answers each call by calling a back server. A client
//! makes calls (some traced, one that fails), and the example prints the
//! call spans as they close, then the Prometheus scrape, then what
//! `Server::connections` and `Channel::endpoints` show.
//!
//! `cargo run -p tram-examples --bin observe`

use bytes::Bytes;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::{self, format::FmtSpan};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tram::conn::{Listener, TcpConfig};
use tram::observe::TraceContext;
use tram::rpc::{Channel, Request, Response, Server, Status};
use tram_examples::proto::echo::{EchoMessage, echo_client::EchoClient, echo_server};

/// Answers by asking the back server (or fails, for id 13).
struct Front {
    back: EchoClient,
}

impl echo_server::Echo for Front {
    async fn say(&self, request: Request<EchoMessage>) -> Result<Response<EchoMessage>, Status> {
        if request.get_ref().id == 13 {
            return Err(Status::invalid_argument("unlucky id"));
        }
        // This call carries the caller's trace on: the handler runs with
        // the caller's trace context current.
        let reply = self.back.say(request.into_inner()).await?;
        Ok(Response::new(reply.into_inner()))
    }
}

/// Answers with the request.
struct Back;

impl echo_server::Echo for Back {
    async fn say(&self, request: Request<EchoMessage>) -> Result<Response<EchoMessage>, Status> {
        Ok(Response::new(request.into_inner()))
    }
}

async fn serve(server: Server) -> anyhow::Result<std::net::SocketAddr> {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default()).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    Ok(addr)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Metrics: a Prometheus recorder, installed before servers and
    // channels are built (they record when one is installed). A service
    // would serve `handle.render()` on its metrics port.
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    // Spans: tram's call spans are at DEBUG under the target `tram::call`;
    // print each as it closes.
    let spans = Targets::new()
        .with_default(Level::INFO)
        .with_target("tram::call", Level::DEBUG);
    tracing_subscriber::registry()
        .with(
            fmt::layer()
                .with_target(false)
                .with_span_events(FmtSpan::CLOSE),
        )
        .with(spans)
        .init();

    let back_addr = serve(
        Server::builder()
            .add_service(echo_server::EchoServer::new(Back))
            .build(),
    )
    .await?;
    let front = Server::builder()
        .add_service(echo_server::EchoServer::new(Front {
            back: EchoClient::connect_lazy(back_addr.to_string()),
        }))
        .build();
    let front_addr = serve(front.clone()).await?;

    let channel = Channel::connect(front_addr.to_string()).await?;
    let client = EchoClient::new(channel.clone());
    let hello = |id| EchoMessage {
        id,
        payload: Bytes::from_static(b"hello"),
    };
    client.say(hello(1)).await?;
    // A traced call: the trace id shows on all four spans (client, front,
    // front's call, back).
    let trace = TraceContext::new_root();
    println!("\n# a traced call, trace id {}", trace.trace_id());
    trace.scope(client.say(hello(2))).await?;
    let failed = client.say(hello(13)).await.expect_err("id 13 fails");
    println!("\n# a failed call: {failed}\n");

    println!("# the Prometheus scrape: tram's series, quantiles left out\n");
    for line in handle.render().lines() {
        let tram = line.starts_with("rpc_") || line.starts_with("tram_");
        if tram && !line.contains("quantile=") {
            println!("{line}");
        }
    }

    println!("\n# Server::connections() of the front server");
    for c in front.connections() {
        println!("{c:?}");
    }
    println!("\n# Channel::endpoints() of the client");
    for e in channel.endpoints() {
        println!("{e:?}");
    }
    Ok(())
}
