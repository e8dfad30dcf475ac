//! tram: RPC (the unary echo, its gRPC gateway, a server stream) and the
//! `conn` message streams it is built on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use tokio::net::{TcpListener, TcpStream};
use tram::conn::{self, Config, Connection, LengthDelimited, Listener, TcpConfig};
use tram::{Request, Response, Server};

use super::echo::tram_pb::EchoMessage;
use super::echo::{PATH, STREAM_PATH};
use crate::runner::flow::{Counter, Window};

/// How the unary echo is served (`serve_unary`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Unary {
    /// Behind the gRPC gateway too.
    pub(super) gateway: bool,
    /// On threads of its own (thread per core), this many.
    pub(super) cores: Option<usize>,
    /// With a handler that does not await (`unary_sync`).
    pub(super) sync: bool,
    /// Its connections' TCP congestion control, if not the system's.
    pub(super) congestion: Option<conn::CongestionControl>,
}

/// The congestion control `tram-cubic` sets on both ends.
pub(super) fn cubic() -> anyhow::Result<conn::CongestionControl> {
    Ok(conn::CongestionControl::new("cubic")?)
}

/// Serves the unary echo as `how` says until aborted.
pub(super) async fn serve_unary(listener: TcpListener, how: Unary) -> anyhow::Result<()> {
    let Unary {
        gateway,
        cores,
        sync,
        congestion,
    } = how;
    let builder = Server::builder().max_concurrent_calls(65_536);
    let mut builder = if sync {
        builder.unary_sync(PATH, |req: Request<EchoMessage>| {
            Ok(Response::new(req.into_inner()))
        })
    } else {
        builder.unary(PATH, |req: Request<EchoMessage>| async move {
            Ok(Response::new(req.into_inner()))
        })
    };
    if let Some(n) = cores {
        builder = builder.threads(n);
    }
    let server = builder.build();
    let server = if gateway {
        let config = tram_grpc::GatewayConfig::default()
            .with_descriptors(&[include_bytes!(concat!(env!("OUT_DIR"), "/echo_fds.bin"))]);
        tram_grpc::with_gateway_config(server, config)
    } else {
        server
    };
    let tcp = TcpConfig {
        congestion_control: congestion,
        ..TcpConfig::default()
    };
    let listener = Listener::from_tokio(listener, tcp);
    server
        .serve_listener(listener, std::future::pending())
        .await?;
    Ok(())
}

/// Whether this process records tram's call spans now (`tram-observed`'s
/// windows in a client process; always in its server's).
static OBSERVING: AtomicBool = AtomicBool::new(false);

/// Installs what `tram-observed` measures, process-wide: a Prometheus
/// recorder (as a service exporting metrics has), and a subscriber that
/// keeps tram's call spans in a registry (as an exporter would find them)
/// and writes nothing. In a client process, which measures other systems
/// too, spans are kept only while [`observing`] says so; every system then
/// pays for the filter's check.
pub(super) fn install_observability(always: bool) {
    use tracing_subscriber::layer::SubscriberExt as _;
    OBSERVING.store(always, Ordering::Relaxed);
    // `TRAM_BENCH_OBSERVE=metrics` or `=spans` measures one alone.
    let only = std::env::var("TRAM_BENCH_OBSERVE").unwrap_or_default();
    if only != "spans" {
        install_recorder();
    }
    if only == "metrics" {
        return;
    }
    let spans = tracing_subscriber::filter::filter_fn(|meta| {
        meta.target() == "tram::call" && OBSERVING.load(Ordering::Relaxed)
    });
    let subscriber = tracing_subscriber::registry().with(spans);
    if let Err(e) = tracing::subscriber::set_global_default(subscriber) {
        eprintln!("tram-observed: no span subscriber: {e}");
    }
}

/// Installs a Prometheus recorder, with histogram buckets as a service
/// exporting to Prometheus configures them (the default, summaries with
/// rolling quantiles, costs several times as much per value).
fn install_recorder() {
    let buckets = [
        1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25,
        0.5, 1.0, 2.5, 5.0, 10.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 1048576.0,
    ];
    let builder = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&buckets)
        .expect("non-empty buckets");
    match builder.install_recorder() {
        // Histograms gather samples until upkeep folds them in: as a
        // scraped service's exporter does, every few seconds.
        Ok(handle) => drop(std::thread::spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(5));
                handle.run_upkeep();
            }
        })),
        Err(e) => eprintln!("tram-observed: no metrics recorder: {e}"),
    }
}

/// Records call spans in this process from now on, or stops.
pub(super) fn observing(on: bool) {
    OBSERVING.store(on, Ordering::Relaxed);
}

/// Serves the `fleet` echo (answered after the process's delay) until
/// aborted.
pub(super) async fn serve_fleet(listener: TcpListener) -> anyhow::Result<()> {
    let server = Server::builder()
        .max_concurrent_calls(65_536)
        .unary(PATH, |req: Request<EchoMessage>| async move {
            super::fleet_delay().await;
            Ok(Response::new(req.into_inner()))
        })
        .build();
    let listener = Listener::from_tokio(listener, TcpConfig::default());
    server
        .serve_listener(listener, std::future::pending())
        .await?;
    Ok(())
}

/// Serves a server stream of copies of the request until aborted.
pub(super) async fn serve_rpc_stream(listener: TcpListener) -> anyhow::Result<()> {
    let server = Server::builder()
        .server_streaming(STREAM_PATH, |req: Request<EchoMessage>| async move {
            let msg = req.into_inner();
            let copies = futures::stream::repeat_with(move || Ok(msg.clone()));
            Ok(Response::new(copies))
        })
        .build();
    let listener = Listener::from_tokio(listener, TcpConfig::default());
    server
        .serve_listener(listener, std::future::pending())
        .await?;
    Ok(())
}

/// Serves a message-stream echo (each message an owned `Bytes`, with
/// `owned`) until aborted.
pub(super) async fn serve_stream(listener: TcpListener, owned: bool) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        if owned {
            tokio::spawn(tram_echo_owned(stream));
        } else {
            tokio::spawn(tram_echo(stream));
        }
    }
}

async fn tram_echo(stream: TcpStream) -> anyhow::Result<()> {
    let (mut inbound, sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
    // Everything a read brought in is echoed in place, under one queue
    // lock; what does not fit stays buffered until the queue has room.
    while let Some(queued) = inbound.recv_with(|batch| sender.try_send_iter(batch)).await {
        queued??;
        sender.ready().await?;
    }
    Ok(())
}

async fn tram_echo_owned(stream: TcpStream) -> anyhow::Result<()> {
    let (mut inbound, sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
    // One owned `Bytes` per message, echoed in runs under one queue lock.
    let mut batch = Vec::with_capacity(1024);
    while let Some(n) = inbound.recv_many(&mut batch, 1024).await {
        n?;
        sender.send_all(batch.drain(..)).await?;
    }
    Ok(())
}

/// Keeps `window` messages of `size` bytes in flight on a message-stream
/// connection, counting the echoes into `received`.
pub(crate) async fn tram_stream_client(
    addr: SocketAddr,
    size: usize,
    window: u64,
    owned: bool,
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let stream = conn::connect(addr, &TcpConfig::default()).await?;
    let (mut inbound, sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
    let win = Window::new(window);
    let writer = tokio::spawn({
        let win = win.clone();
        let stop = stop.clone();
        async move {
            let payload = Bytes::from(vec![0xab; size]);
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // As the floor client writes 256 frames per write, queue up
                // to 256 messages per lock.
                let room = win.room(sent).await.min(256);
                let batch = std::iter::repeat_n(&payload[..], room as usize);
                match sender.send_all(batch).await {
                    Ok(n) => sent += n as u64,
                    Err(_) => return,
                }
            }
        }
    });
    if owned {
        let mut batch = Vec::with_capacity(1024);
        while let Some(n) = inbound.recv_many(&mut batch, 1024).await {
            batch.clear();
            win.arrived(n? as u64, &received);
        }
    } else {
        while let Some(n) = inbound.recv_with(|batch| batch.count()).await {
            win.arrived(n? as u64, &received);
        }
    }
    writer.abort();
    Ok(())
}

/// Reads one server stream of `size`-byte messages, granting `credit`,
/// counting them into `received`.
pub(crate) async fn tram_rpc_stream_client(
    addr: SocketAddr,
    size: usize,
    credit: u32,
    received: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let ch = tram::Channel::builder(addr.to_string())
        .initial_credit(credit)
        .build();
    let req = EchoMessage {
        id: 0,
        payload: Bytes::from(vec![0xab; size]),
    };
    let mut stream = ch
        .server_streaming::<_, EchoMessage>(STREAM_PATH, Request::new(req))
        .await?;
    let mut count = Counter::new(&received);
    while stream.message().await?.is_some() {
        count.one();
    }
    Ok(())
}
