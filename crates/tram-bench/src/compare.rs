//! `compare`: the same unary echo service (`uint64 id = 1; bytes payload =
//! 2;`) on tram, tonic (gRPC over HTTP/2) and protosocket-rpc, plus a
//! pipelined raw-TCP floor; each server in its own process, one TCP
//! connection, `C` calls in flight, systems interleaved in every round.
//!
//! How the peers are configured, following their own examples and docs:
//! - tonic 0.14: generated client and server (tonic-prost-build), default
//!   `Server` and `Endpoint` settings (TCP_NODELAY on, one HTTP/2
//!   connection multiplexing every call).
//! - protosocket-rpc 2.0.2: `SocketRpcServer` over `TcpSocketListener`, a
//!   `PooledEncoder<ProstSerializer>` + `ProstDecoder` codec, 4 MiB max
//!   buffer, 1 MiB allocation increment, 512 queued outbound messages (its
//!   example server's values); the client's connection future spawned on the
//!   runtime, `send_unary` per call.
//! - tram-grpc (not in the default set): tram's echo server behind its
//!   gRPC gateway (`tram-grpc`), called by the same tonic client as
//!   `tonic`: the gateway against tonic's own server.
//! - floor: a length-prefixed echo with `C` frames kept in flight by one
//!   writer and one reader task: no correlation, no per-call task, the least
//!   work a loopback round trip can take.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::harness::{
    Counts, Hist, Machine, Percentiles, ProcArgs, Recorder, Server, Summary, client_runtime,
    measure_window, new_hist, si, static_payload, write_json,
};

/// tonic's generated code.
#[allow(clippy::all, missing_docs, unreachable_pub)]
pub(crate) mod pb {
    tonic::include_proto!("bench");
}

use crate::ps;
use pb::EchoMessage;

const PATH: &str = "/bench.Echo/Say";
const SYSTEMS: [&str; 5] = ["tram", "tonic", "protosocket", "floor", "tram-grpc"];

/// Options of `tram-bench compare`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Systems to measure, interleaved in each round.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tram,tonic,protosocket,floor"
    )]
    pub(crate) systems: Vec<String>,
    /// Calls in flight.
    #[arg(long, value_delimiter = ',', default_value = "1,32,256")]
    pub(crate) concurrency: Vec<usize>,
    /// Payload bytes per call.
    #[arg(long, value_delimiter = ',', default_value = "16")]
    pub(crate) payload: Vec<usize>,
    /// Rounds (each system once per round, per setting).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds measured per system per round.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// Seconds of warm-up before each measurement.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    #[command(flatten)]
    pub(crate) proc: ProcArgs,
}

struct Sample {
    rate: f64,
    client_us: f64,
    server_us: f64,
    latency: Hist,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    for s in &args.systems {
        if !SYSTEMS.contains(&s.as_str()) {
            bail!("unknown system {s:?}; known: {}", SYSTEMS.join(", "));
        }
    }
    let servers = args
        .systems
        .iter()
        .map(|s| Server::start("compare", s, &args.proc))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let rt = client_runtime(&args.proc)?;
    println!(
        "unary echo: {} rounds x {}s per system, {}, systems interleaved",
        args.rounds,
        args.secs,
        args.proc.describe()
    );
    let mut results = Vec::new();
    for &payload in &args.payload {
        for &c in &args.concurrency {
            let mut samples: Vec<Vec<Sample>> = args.systems.iter().map(|_| Vec::new()).collect();
            for round in 0..args.rounds {
                for (i, (system, server)) in args.systems.iter().zip(&servers).enumerate() {
                    let addr = SocketAddr::from(([127, 0, 0, 1], server.port));
                    let s = rt.block_on(measure(system, addr, server, c, payload, args))?;
                    eprintln!(
                        "  {payload} B, C={c}, round {}: {system:>11} {:>8} calls/s  p99 {:>8.1} µs",
                        round + 1,
                        si(s.rate),
                        s.latency.value_at_quantile(0.99) as f64 / 1e3
                    );
                    samples[i].push(s);
                }
            }
            print_table(args, payload, c, &samples);
            results.push(Setting::of(args, payload, c, &samples));
        }
    }
    let report = Report {
        bench: "compare",
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::this(),
        proc: args.proc.clone(),
        rounds: args.rounds,
        secs: args.secs,
        settings: results,
    };
    let json = write_json(&args.proc.out, "compare.json", &report)?;
    let svg = args.proc.out.join("compare.svg");
    crate::chart::compare(&svg, &report)?;
    println!("\nwrote {} and {}", json.display(), svg.display());
    Ok(())
}

/// The result file of `compare`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Report {
    pub(crate) bench: &'static str,
    pub(crate) command: String,
    pub(crate) machine: Machine,
    pub(crate) proc: ProcArgs,
    pub(crate) rounds: usize,
    pub(crate) secs: f64,
    pub(crate) settings: Vec<Setting>,
}

/// One payload size and concurrency: every system's figures, and tram's
/// ratios to each of them.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Setting {
    pub(crate) payload: usize,
    pub(crate) concurrency: usize,
    pub(crate) systems: Vec<SystemResult>,
}

#[derive(Debug, serde::Serialize)]
pub(crate) struct SystemResult {
    pub(crate) system: String,
    /// Calls per second, one per round.
    pub(crate) rates: Vec<f64>,
    pub(crate) rate: Summary,
    pub(crate) latency: Percentiles,
    pub(crate) client_cpu_us: Summary,
    pub(crate) server_cpu_us: Summary,
    /// tram's calls/s over this system's, per round then summarised
    /// (absent for tram itself, or without tram in the run).
    pub(crate) tram_ratio: Option<Summary>,
}

impl Setting {
    fn of(args: &Args, payload: usize, c: usize, samples: &[Vec<Sample>]) -> Setting {
        let tram = args.systems.iter().position(|s| s == "tram");
        let systems = args
            .systems
            .iter()
            .enumerate()
            .map(|(i, system)| {
                let rates: Vec<f64> = samples[i].iter().map(|s| s.rate).collect();
                let mut all = new_hist();
                for s in &samples[i] {
                    let _ = all.add(&s.latency);
                }
                let tram_ratio = tram.filter(|&t| t != i).map(|t| {
                    let r: Vec<f64> = samples[t]
                        .iter()
                        .zip(&samples[i])
                        .map(|(a, b)| a.rate / b.rate)
                        .collect();
                    Summary::of(&r)
                });
                SystemResult {
                    system: system.clone(),
                    rate: Summary::of(&rates),
                    rates,
                    latency: Percentiles::of(&all),
                    client_cpu_us: Summary::of(
                        &samples[i].iter().map(|s| s.client_us).collect::<Vec<_>>(),
                    ),
                    server_cpu_us: Summary::of(
                        &samples[i].iter().map(|s| s.server_us).collect::<Vec<_>>(),
                    ),
                    tram_ratio,
                }
            })
            .collect();
        Setting {
            payload,
            concurrency: c,
            systems,
        }
    }
}

fn print_table(args: &Args, payload: usize, c: usize, samples: &[Vec<Sample>]) {
    println!("\n{payload}-byte payload, {c} calls in flight:\n");
    println!(
        "| system | calls/s (median) | range | p50 µs | p99 µs | p99.9 µs | max µs | client CPU µs/call | server CPU µs/call |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (i, system) in args.systems.iter().enumerate() {
        let rate = Summary::of(&samples[i].iter().map(|s| s.rate).collect::<Vec<_>>());
        let cu = Summary::of(&samples[i].iter().map(|s| s.client_us).collect::<Vec<_>>());
        let su = Summary::of(&samples[i].iter().map(|s| s.server_us).collect::<Vec<_>>());
        let mut all = new_hist();
        for s in &samples[i] {
            let _ = all.add(&s.latency);
        }
        let us = |q: f64| all.value_at_quantile(q) as f64 / 1e3;
        println!(
            "| {system} | {} | {}–{} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
            si(rate.median),
            si(rate.min),
            si(rate.max),
            us(0.5),
            us(0.99),
            us(0.999),
            all.max() as f64 / 1e3,
            cu.median,
            su.median
        );
    }
    let Some(tram) = args.systems.iter().position(|s| s == "tram") else {
        return;
    };
    println!("\n| ratio (per round, then median) | calls/s | range |\n|---|---|---|");
    for (i, system) in args.systems.iter().enumerate() {
        if i == tram {
            continue;
        }
        let r: Vec<f64> = samples[tram]
            .iter()
            .zip(&samples[i])
            .map(|(a, b)| a.rate / b.rate)
            .collect();
        let q = Summary::of(&r);
        println!(
            "| tram / {system} | {:.2}x | {:.2}–{:.2}x |",
            q.median, q.min, q.max
        );
    }
}

async fn measure(
    system: &str,
    addr: SocketAddr,
    server: &Server,
    c: usize,
    payload: usize,
    args: &Args,
) -> anyhow::Result<Sample> {
    let done = Arc::new(Counts::new(c));
    let recording = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let load = Load {
        c,
        payload: static_payload(payload),
        done: done.clone(),
        recording: recording.clone(),
        stop: stop.clone(),
    };
    let task = match system {
        "tram" => tokio::spawn(load.tram(addr)),
        // tram-grpc: the same tonic client, against a tram server's gRPC
        // gateway.
        "tonic" | "tram-grpc" => tokio::spawn(load.tonic(addr)),
        "protosocket" => tokio::spawn(load.protosocket(addr)),
        _ => tokio::spawn(load.floor(addr)),
    };
    let window = measure_window(
        || done.total(),
        Some(&recording),
        server,
        args.warmup,
        args.secs,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let latency = tokio::time::timeout(Duration::from_secs(10), task)
        .await??
        .map_err(|e| anyhow::anyhow!("{system}: {e}"))?;
    let w = window.map_err(|e| anyhow::anyhow!("{system}: {e}"))?;
    Ok(Sample {
        rate: w.rate,
        client_us: w.client_us,
        server_us: w.server_us,
        latency,
    })
}

/// A closed-loop load: `c` callers, each calling again as soon as its call
/// returns. Latency is recorded while `recording` is set.
#[derive(Clone)]
struct Load {
    c: usize,
    payload: Bytes,
    done: Arc<Counts>,
    recording: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

/// One caller's bookkeeping, the same for every system: its own latency
/// buffer and completion counter, so callers share nothing but the client
/// under test.
struct Caller {
    index: usize,
    load: Load,
    rec: Recorder,
    /// The id of the call in flight (unique across callers).
    id: u64,
    began: Instant,
}

impl Caller {
    /// The next request while the load runs. Its clock started when the
    /// previous call was answered (every caller sends its next request
    /// straight after [`Caller::done`]), so a call costs one clock read.
    fn next(&mut self) -> Option<EchoMessage> {
        if self.load.stop.load(Ordering::Relaxed) {
            return None;
        }
        self.id += 1;
        Some(EchoMessage {
            id: self.id,
            payload: self.load.payload.clone(),
        })
    }

    /// The call in flight was answered with id `got`.
    fn done(&mut self, got: u64) -> anyhow::Result<()> {
        anyhow::ensure!(got == self.id, "response {got} for request {}", self.id);
        let now = Instant::now();
        if self.load.recording.load(Ordering::Relaxed) {
            self.rec.record((now - self.began).as_nanos() as u64);
        }
        self.began = now;
        self.load.done.add(self.index, 1);
        Ok(())
    }
}

impl Load {
    /// Runs `c` callers until stopped and merges their histograms. `caller`
    /// builds each one's loop: it takes its own client handle once, then
    /// calls through [`Caller`].
    async fn callers<F, Fut>(&self, caller: F) -> anyhow::Result<Hist>
    where
        F: Fn(Caller) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let hist = Arc::new(parking_lot::Mutex::new(new_hist()));
        let mut tasks = Vec::new();
        for t in 0..self.c {
            tasks.push(tokio::spawn(caller(Caller {
                index: t,
                load: self.clone(),
                rec: Recorder::new(hist.clone()),
                id: (t as u64) << 40,
                began: Instant::now(),
            })));
        }
        for t in tasks {
            t.await??;
        }
        let all = std::mem::replace(&mut *hist.lock(), new_hist());
        Ok(all)
    }

    async fn tram(self, addr: SocketAddr) -> anyhow::Result<Hist> {
        let ch = tram::rpc::Channel::new(addr.to_string());
        self.callers(|mut me| {
            let ch = ch.clone();
            async move {
                while let Some(request) = me.next() {
                    let r: tram::rpc::Response<EchoMessage> =
                        ch.unary(PATH, tram::rpc::Request::new(request)).await?;
                    me.done(r.get_ref().id)?;
                }
                Ok(())
            }
        })
        .await
    }

    async fn tonic(self, addr: SocketAddr) -> anyhow::Result<Hist> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        let client = pb::echo_client::EchoClient::new(channel);
        self.callers(|mut me| {
            let mut client = client.clone();
            async move {
                while let Some(request) = me.next() {
                    me.done(client.say(request).await?.get_ref().id)?;
                }
                Ok(())
            }
        })
        .await
    }

    async fn protosocket(self, addr: SocketAddr) -> anyhow::Result<Hist> {
        let config = protosocket_rpc::client::Configuration::new(
            protosocket_rpc::client::TcpStreamConnector,
        );
        let (client, connection) =
            protosocket_rpc::client::connect::<ps::ClientCodec, _>(addr, &config).await?;
        let driver = tokio::spawn(connection);
        let hist = self
            .callers(|mut me| {
                let client = client.clone();
                async move {
                    while let Some(request) = me.next() {
                        // protosocket-rpc 2.0.2 takes the message id from
                        // the caller: it must be unique per call in flight.
                        let completion = client.send_unary(ps::Msg {
                            request_id: request.id,
                            code: 0,
                            id: request.id,
                            payload: request.payload,
                        })?;
                        me.done(completion.await?.id)?;
                    }
                    Ok(())
                }
            })
            .await;
        driver.abort();
        hist
    }

    async fn floor(self, addr: SocketAddr) -> anyhow::Result<Hist> {
        // Frames: u32 length, u64 send time (ns since `epoch`), payload.
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (mut rd, mut wr) = stream.into_split();
        let epoch = Instant::now();
        let in_flight = Arc::new(AtomicU64::new(0));
        let room = Arc::new(Notify::new());
        let writer = tokio::spawn({
            let (this, in_flight, room) = (self.clone(), in_flight.clone(), room.clone());
            async move {
                let mut buf = BytesMut::new();
                while !this.stop.load(Ordering::Relaxed) {
                    let free = this.c as u64 - in_flight.load(Ordering::Acquire).min(this.c as u64);
                    if free == 0 {
                        let _ =
                            tokio::time::timeout(Duration::from_millis(1), room.notified()).await;
                        continue;
                    }
                    buf.clear();
                    let now = epoch.elapsed().as_nanos() as u64;
                    for _ in 0..free {
                        buf.put_u32((8 + this.payload.len()) as u32);
                        buf.put_u64(now);
                        buf.put_slice(&this.payload);
                    }
                    in_flight.fetch_add(free, Ordering::AcqRel);
                    if wr.write_all(&buf).await.is_err() {
                        return;
                    }
                }
            }
        });
        let mut hist = new_hist();
        let mut buf = BytesMut::with_capacity(64 * 1024);
        while !self.stop.load(Ordering::Relaxed) {
            if rd.read_buf(&mut buf).await? == 0 {
                break;
            }
            let now = epoch.elapsed().as_nanos() as u64;
            let mut n = 0;
            while buf.len() >= 4 {
                let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if buf.len() < 4 + len {
                    break;
                }
                let sent = (&buf[4..12]).get_u64();
                buf.advance(4 + len);
                if self.recording.load(Ordering::Relaxed) {
                    hist.record(now.saturating_sub(sent).max(1))?;
                }
                n += 1;
            }
            in_flight.fetch_sub(n, Ordering::AcqRel);
            self.done.add(0, n);
            room.notify_one();
            buf.reserve(64 * 1024);
        }
        writer.abort();
        Ok(hist)
    }
}

/// Serves one system on `listener` until aborted.
pub(crate) async fn serve(system: String, listener: TcpListener) -> anyhow::Result<()> {
    match system.as_str() {
        "tram" => {
            let server = tram::rpc::Server::builder()
                .max_concurrent_calls(65_536)
                .unary(PATH, |req: tram::rpc::Request<EchoMessage>| async move {
                    Ok(tram::rpc::Response::new(req.into_inner()))
                })
                .build();
            let listener =
                tram::conn::Listener::from_tokio(listener, tram::conn::TcpConfig::default());
            server
                .serve_listener(listener, std::future::pending())
                .await?;
        }
        "tram-grpc" => {
            // The tram echo server, answering gRPC through its gateway.
            let server = tram_grpc::with_gateway(
                tram::rpc::Server::builder()
                    .max_concurrent_calls(65_536)
                    .unary(PATH, |req: tram::rpc::Request<EchoMessage>| async move {
                        Ok(tram::rpc::Response::new(req.into_inner()))
                    })
                    .build(),
            );
            let listener =
                tram::conn::Listener::from_tokio(listener, tram::conn::TcpConfig::default());
            server
                .serve_listener(listener, std::future::pending())
                .await?;
        }
        "tonic" => {
            use tokio_stream::StreamExt;
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
                s.and_then(|s| {
                    s.set_nodelay(true)?;
                    Ok(s)
                })
            });
            tonic::transport::Server::builder()
                .add_service(pb::echo_server::EchoServer::new(TonicEcho))
                .serve_with_incoming(incoming)
                .await?;
        }
        "protosocket" => {
            // protosocket binds its own listener: hand the port over.
            let addr = listener.local_addr()?;
            drop(listener);
            let listener = protosocket::TcpSocketListener::listen(addr, 1024, None)?;
            let mut server = protosocket_rpc::server::SocketRpcServer::new(
                listener,
                ps::Service,
                4 << 20,
                1 << 20,
                128,
            )?;
            // As protosocket's own example server sets it.
            server.set_max_queued_outbound_messages(512);
            server.await?;
        }
        _ => loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            // The same floor server as `stream`'s: frames have the same shape.
            tokio::spawn(crate::stream::floor_echo(stream));
        },
    }
    Ok(())
}

/// tonic's echo handler.
struct TonicEcho;

#[tonic::async_trait]
impl pb::echo_server::Echo for TonicEcho {
    async fn say(
        &self,
        request: tonic::Request<EchoMessage>,
    ) -> Result<tonic::Response<EchoMessage>, tonic::Status> {
        Ok(tonic::Response::new(request.into_inner()))
    }
}
