//! The systems measured: each one's server and clients, named by
//! [`System`].
//!
//! - `echo`: the unary echo service every unary system serves.
//! - `tram`: tram RPC, its gRPC gateway, and tram's message streams.
//! - `tonic`: tonic 0.14 (gRPC over HTTP/2), generated client and server.
//! - `protosocket`: protosocket-rpc 2.0.2.
//! - `json`: Connect unary JSON over HTTP/1.1 (tram's gateway), and axum
//!   with serde as its reference, and their HTTP/1.1 client.
//! - `floor`: hand-written raw-TCP floors: no correlation, no task per
//!   call, the least work a loopback round trip or stream can take (and,
//!   for `rate`, the same floor with a task per call).

mod echo;
mod floor;
mod floor_tasks;
mod json;
mod protosocket;
mod tonic;
mod tram;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;

use crate::runner::load::Caller;

pub(crate) use echo::tram_pb::EchoMessage as TramEchoMessage;
pub(crate) use echo::{EchoMessage, STREAM_PATH};
pub(crate) use floor::{FloorOpenLoop, floor_closed_loop, floor_push_client, floor_stream_client};
pub(crate) use protosocket::protosocket_stream_client;
use tram::Unary;
pub(crate) use tram::{tram_rpc_stream_client, tram_stream_client};

/// A system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum System {
    /// tram: RPC for unary benchmarks; its `conn` message streams (each
    /// message handled in place) for `stream`.
    Tram,
    /// tram's message streams, each message an owned `Bytes` (`stream`).
    TramOwned,
    /// A tram server-streaming RPC (`stream`).
    TramRpc,
    /// tram's server behind its gRPC gateway, called by tonic's client.
    TramGrpc,
    /// tram observed: a Prometheus metrics recorder installed and call
    /// spans recorded (into a tracing registry that writes nothing), on
    /// both sides.
    TramObserved,
    /// tram's server behind its gateway, called with Connect unary JSON
    /// over HTTP/1.1 (hyper's pooled client).
    TramConnect,
    /// axum 0.8 answering the same JSON with a serde handler, called as
    /// `tram-connect` is: the reference for Connect JSON.
    AxumJson,
    /// tram with its echo handler registered with `unary_sync` (it never
    /// awaits): answered on the connection's task, without a future.
    TramSync,
    /// tram with its server in thread-per-core mode (`ServerBuilder::threads`
    /// with as many threads as the server's `--workers`).
    TramCores,
    /// tram with its connections' TCP congestion control set to cubic at
    /// both ends (`TcpConfig::congestion_control`), as a service on a host
    /// whose default is BBR can choose for them.
    TramCubic,
    /// tonic 0.14, gRPC over HTTP/2.
    Tonic,
    /// protosocket-rpc 2.0.2 (unary, or server streaming for `stream`).
    Protosocket,
    /// A raw-TCP echo: length-prefixed frames, pipelined.
    Floor,
    /// The floor with a task per call: each call a task of its own that
    /// waits for its echo on a oneshot channel, which the floor's reader
    /// completes, as an RPC client's caller waits for its reader. What a
    /// task per call costs on the runtime, with nothing of an RPC
    /// system's (`rate`: the open-loop floor's batches; `compare`: the
    /// least RPC client, `floor_tasks`).
    FloorTasks,
    /// A raw-TCP one-way stream: 256 frames per write.
    FloorPush,
}

/// Which kind of server a benchmark runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Workload {
    /// The unary echo service (`compare`, `rate`).
    Unary,
    /// Streams (`stream`).
    Stream,
    /// The unary echo, answered after a delay set at run time (`fleet`).
    Fleet,
}

impl System {
    /// Its name on the command line and in result files.
    pub(crate) fn name(self) -> &'static str {
        match self {
            System::Tram => "tram",
            System::TramOwned => "tram-owned",
            System::TramRpc => "tram-rpc",
            System::TramGrpc => "tram-grpc",
            System::TramConnect => "tram-connect",
            System::AxumJson => "axum-json",
            System::TramCores => "tram-cores",
            System::TramCubic => "tram-cubic",
            System::TramSync => "tram-sync",
            System::TramObserved => "tram-observed",
            System::Tonic => "tonic",
            System::Protosocket => "protosocket",
            System::Floor => "floor",
            System::FloorTasks => "floor-tasks",
            System::FloorPush => "floor-push",
        }
    }
}

impl std::fmt::Display for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Workload {
    /// Its name on the `serve` command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::Unary => "unary",
            Workload::Stream => "stream",
            Workload::Fleet => "fleet",
        }
    }
}

/// Fails unless every one of `systems` is among `supported`.
pub(crate) fn check(bench: &str, systems: &[System], supported: &[System]) -> anyhow::Result<()> {
    if let Some(s) = systems.iter().find(|s| !supported.contains(s)) {
        let known: Vec<_> = supported.iter().map(|s| s.name()).collect();
        anyhow::bail!("{bench} does not run {s}; it runs {}", known.join(", "));
    }
    Ok(())
}

/// Sets up what the clients of `systems` need process-wide, before any is
/// measured (so that every system runs under the same conditions in every
/// round).
pub(crate) fn prepare(systems: &[System]) {
    if systems.contains(&System::TramObserved) {
        tram::install_observability(false);
    }
}

/// Serves `system`'s `workload` on `listener` until aborted; `threads` is
/// the server process's share of threads (its runtime's workers).
pub(crate) async fn serve(
    workload: Workload,
    system: System,
    listener: TcpListener,
    threads: usize,
) -> anyhow::Result<()> {
    match (workload, system) {
        (Workload::Unary, System::Tram) => tram::serve_unary(listener, Unary::default()).await,
        (Workload::Unary, System::TramSync) => {
            let how = Unary {
                sync: true,
                ..Unary::default()
            };
            tram::serve_unary(listener, how).await
        }
        (Workload::Unary, System::TramObserved) => {
            tram::install_observability(true);
            tram::serve_unary(listener, Unary::default()).await
        }
        (Workload::Unary, System::TramGrpc | System::TramConnect) => {
            let how = Unary {
                gateway: true,
                ..Unary::default()
            };
            tram::serve_unary(listener, how).await
        }
        (Workload::Unary, System::AxumJson) => json::serve_axum(listener).await,
        (Workload::Unary, System::TramCores) => {
            let how = Unary {
                cores: Some(threads),
                ..Unary::default()
            };
            tram::serve_unary(listener, how).await
        }
        (Workload::Unary, System::TramCubic) => {
            let how = Unary {
                congestion: Some(tram::cubic()?),
                ..Unary::default()
            };
            tram::serve_unary(listener, how).await
        }
        (Workload::Unary, System::Tonic) => tonic::serve(listener).await,
        (Workload::Unary | Workload::Stream, System::Protosocket) => {
            protosocket::serve(listener).await
        }
        (Workload::Unary, System::Floor | System::FloorTasks) => floor::serve_echo(listener).await,
        (Workload::Fleet, System::Tram) => tram::serve_fleet(listener).await,
        (Workload::Fleet, System::Tonic) => tonic::serve_fleet(listener).await,
        (Workload::Stream, System::Tram) => tram::serve_stream(listener, false).await,
        (Workload::Stream, System::TramOwned) => tram::serve_stream(listener, true).await,
        (Workload::Stream, System::TramRpc) => tram::serve_rpc_stream(listener).await,
        (Workload::Stream, System::Floor) => floor::serve_echo(listener).await,
        (Workload::Stream, System::FloorPush) => floor::serve_push(listener).await,
        (workload, system) => anyhow::bail!("no {} server for {system}", workload.name()),
    }
}

/// The delay a `fleet` server answers after, in microseconds: set by
/// its parent through its standard input (`delay <µs>`).
static FLEET_DELAY_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sets the delay of this process's `fleet` server.
pub(crate) fn set_fleet_delay(us: u64) {
    FLEET_DELAY_US.store(us, std::sync::atomic::Ordering::Relaxed);
}

/// Waits out the `fleet` server's delay, if any.
async fn fleet_delay() {
    let us = FLEET_DELAY_US.load(std::sync::atomic::Ordering::Relaxed);
    if us > 0 {
        tokio::time::sleep(std::time::Duration::from_micros(us)).await;
    }
}

/// A connected unary echo client of one system; each caller clones its
/// own.
#[derive(Clone)]
pub(crate) enum UnaryClient {
    Tram(::tram::Channel),
    TramShaped(Shaped<::tram::Channel>),
    Tonic(echo::pb::echo_client::EchoClient<::tonic::transport::Channel>),
    TonicShaped(Shaped<echo::pb::echo_client::EchoClient<::tonic::transport::Channel>>),
    Protosocket(protosocket::Client),
    Json(Box<json::JsonClient>),
    FloorTasks(floor_tasks::TaskClient),
}

impl UnaryClient {
    /// Connects to `system`'s unary echo server at `addr` (`tram-grpc` is
    /// tonic's client against tram's gateway).
    pub(crate) async fn connect(system: System, addr: SocketAddr) -> anyhow::Result<UnaryClient> {
        UnaryClient::connect_with(system, addr, false).await
    }

    /// [`UnaryClient::connect`], with a tram channel that adds
    /// [`BEARER`] to every call when `bearer` (the other systems get theirs
    /// from [`UnaryClient::shaped`]).
    pub(crate) async fn connect_with(
        system: System,
        addr: SocketAddr,
        bearer: bool,
    ) -> anyhow::Result<UnaryClient> {
        Ok(match system {
            // Connected now, as the others are: a first call must not
            // wait for its connection inside the measured window.
            System::Tram
            | System::TramCores
            | System::TramSync
            | System::TramObserved
            | System::TramCubic => {
                let observed = system == System::TramObserved;
                tram::observing(observed);
                let congestion = match system {
                    System::TramCubic => Some(tram::cubic()?),
                    _ => None,
                };
                let tcp = ::tram::conn::TcpConfig {
                    congestion_control: congestion,
                    ..Default::default()
                };
                let mut builder = ::tram::Channel::builder(addr.to_string())
                    .metrics(observed)
                    .tcp(tcp);
                if bearer {
                    builder = builder.header("authorization", BEARER)?;
                }
                UnaryClient::Tram(builder.connect().await?)
            }
            System::Tonic | System::TramGrpc => UnaryClient::Tonic(tonic::client(addr).await?),
            System::Protosocket => {
                UnaryClient::Protosocket(protosocket::Client::connect(addr).await?)
            }
            System::TramConnect | System::AxumJson => {
                let client = json::JsonClient::new(addr)?;
                // A first call, so that the pool has a connection.
                client.call(0, b"").await?;
                UnaryClient::Json(Box::new(client))
            }
            System::FloorTasks => {
                UnaryClient::FloorTasks(floor_tasks::TaskClient::connect(addr).await?)
            }
            other => anyhow::bail!("{other} has no unary client"),
        })
    }

    /// A client of `system` balancing over the `fleet` servers at `addrs`:
    /// tram's channel over the list (power of two choices over Peak-EWMA),
    /// or tonic's `balance_list`.
    pub(crate) async fn connect_fleet(
        system: System,
        addrs: &[SocketAddr],
    ) -> anyhow::Result<UnaryClient> {
        Ok(match system {
            System::Tram => {
                let channel = ::tram::Channel::builder("tram-bench fleet")
                    .endpoints(addrs.iter().map(ToString::to_string))
                    .metrics(false)
                    .build();
                channel.ready().await?;
                UnaryClient::Tram(channel)
            }
            System::Tonic => UnaryClient::Tonic(tonic::balanced_client(addrs)?),
            other => anyhow::bail!("{other} has no balancing client"),
        })
    }

    /// One echo call: the id the answer carries.
    pub(crate) async fn call(&mut self, id: u64, payload: Bytes) -> anyhow::Result<u64> {
        match self {
            UnaryClient::Tram(c) => c.echo(id, payload).await,
            UnaryClient::TramShaped(c) => c.echo(id, payload).await,
            UnaryClient::Tonic(c) => c.echo(id, payload).await,
            UnaryClient::TonicShaped(c) => c.echo(id, payload).await,
            UnaryClient::Protosocket(c) => c.echo(id, payload).await,
            UnaryClient::Json(c) => c.echo(id, payload).await,
            UnaryClient::FloorTasks(c) => c.echo(id, payload).await,
        }
    }

    /// Hands the client, with its own type, to `w`.
    pub(crate) fn with<W: WithEcho>(self, w: W) -> W::Output {
        match self {
            UnaryClient::Tram(c) => w.with(c),
            UnaryClient::TramShaped(c) => w.with(c),
            UnaryClient::Tonic(c) => w.with(c),
            UnaryClient::TonicShaped(c) => w.with(c),
            UnaryClient::Protosocket(c) => w.with(c),
            UnaryClient::Json(c) => w.with(c),
            UnaryClient::FloorTasks(c) => w.with(c),
        }
    }

    /// The client whose every call carries `timeout` and, with `bearer`,
    /// [`BEARER`], for a system that has deadlines and metadata (tram's,
    /// whose channel must have been made with the token by
    /// [`UnaryClient::connect_with`], and tonic's); the others, and neither,
    /// as they are.
    pub(crate) fn shaped(self, timeout: Option<Duration>, bearer: bool) -> UnaryClient {
        match self {
            UnaryClient::Tram(client) if timeout.is_some() => UnaryClient::TramShaped(Shaped {
                client,
                timeout,
                bearer,
            }),
            UnaryClient::Tonic(client) if timeout.is_some() || bearer => {
                UnaryClient::TonicShaped(Shaped {
                    client,
                    timeout,
                    bearer,
                })
            }
            c => c,
        }
    }

    /// A closed-loop caller: calls through its own clone of the client
    /// until the load stops.
    pub(crate) fn caller(
        &self,
        me: Caller,
    ) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>> {
        struct Loop(Caller);
        impl WithEcho for Loop {
            type Output = std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;
            fn with<C: Echo>(self, mut client: C) -> Self::Output {
                let mut me = self.0;
                Box::pin(async move {
                    while let Some((id, payload)) = me.next() {
                        me.done(client.echo(id, payload).await?)?;
                    }
                    Ok(())
                })
            }
        }
        self.clone().with(Loop(me))
    }
}

/// One system's unary echo client, as its own type. The harness builds
/// each call's future from it, so that a call's future is that system's
/// alone: through [`UnaryClient::call`] every system's would be as large
/// as the largest (tonic's, 1,240 bytes), and built and copied at every
/// call, a cost the bench would charge to the system's client.
pub(crate) trait Echo: Clone + Send + Sync + 'static {
    /// One echo call: the id the answer carries.
    fn echo(&mut self, id: u64, payload: Bytes)
    -> impl Future<Output = anyhow::Result<u64>> + Send;
}

/// What is done with a client of any system's own type (see [`Echo`]).
pub(crate) trait WithEcho {
    type Output;
    fn with<C: Echo>(self, client: C) -> Self::Output;
}

impl Echo for ::tram::Channel {
    async fn echo(&mut self, id: u64, payload: Bytes) -> anyhow::Result<u64> {
        let message = TramEchoMessage { id, payload };
        let r: ::tram::Response<TramEchoMessage> = self
            .unary(echo::PATH, ::tram::Request::new(message))
            .await?;
        Ok(r.get_ref().id)
    }
}

/// The bearer token of `--bearer` runs: 48 bytes, as a service's
/// `authorization` header often is.
pub(crate) const BEARER: &str = "Bearer 0123456789abcdef0123456789abcdef0123456789ab";

/// A client whose every call carries a timeout (`compare --timeout-ms`),
/// a bearer token (`--bearer`) or both, each the way its system's users
/// give one. tram's token is a header of the channel, set as it was made
/// ([`UnaryClient::connect_with`]); tonic's is inserted into each request,
/// as a tonic interceptor does.
#[derive(Clone)]
pub(crate) struct Shaped<C> {
    client: C,
    timeout: Option<Duration>,
    bearer: bool,
}

impl Echo for Shaped<::tram::Channel> {
    async fn echo(&mut self, id: u64, payload: Bytes) -> anyhow::Result<u64> {
        let mut request = ::tram::Request::new(TramEchoMessage { id, payload });
        if let Some(t) = self.timeout {
            request = request.with_timeout(t);
        }
        let r: ::tram::Response<TramEchoMessage> = self.client.unary(echo::PATH, request).await?;
        Ok(r.get_ref().id)
    }
}

impl Echo for Shaped<echo::pb::echo_client::EchoClient<::tonic::transport::Channel>> {
    async fn echo(&mut self, id: u64, payload: Bytes) -> anyhow::Result<u64> {
        let mut request = ::tonic::Request::new(EchoMessage { id, payload });
        if let Some(t) = self.timeout {
            request.set_timeout(t);
        }
        if self.bearer {
            let token = ::tonic::metadata::MetadataValue::from_static(BEARER);
            request.metadata_mut().insert("authorization", token);
        }
        Ok(self.client.say(request).await?.get_ref().id)
    }
}

impl Echo for echo::pb::echo_client::EchoClient<::tonic::transport::Channel> {
    async fn echo(&mut self, id: u64, payload: Bytes) -> anyhow::Result<u64> {
        Ok(self.say(EchoMessage { id, payload }).await?.get_ref().id)
    }
}

impl Echo for protosocket::Client {
    async fn echo(&mut self, id: u64, payload: Bytes) -> anyhow::Result<u64> {
        self.call(EchoMessage { id, payload }).await
    }
}

impl Echo for Box<json::JsonClient> {
    async fn echo(&mut self, id: u64, payload: Bytes) -> anyhow::Result<u64> {
        self.call(id, &payload).await
    }
}
