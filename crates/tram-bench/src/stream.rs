//! Message-stream echo: one loopback connection, a client that keeps
//! `window` messages in flight, a server that echoes every message back.
//!
//! Systems:
//! - `tram`: tram's `conn` layer with the length-delimited codec, both ends:
//!   messages are handled in place (`Inbound::recv_with`) and queued in runs
//!   (`Sender::try_send_iter` / `send_all`).
//! - `tram-owned`: the same, but each message is an owned `Bytes` handle
//!   (`Inbound::recv_many`), as most applications receive them.
//! - `floor`: a minimal hand-written tokio echo of the same wire format
//!   (4-byte big-endian length, then the payload): the server writes back
//!   each read's complete frames straight from its read buffer, the client
//!   writes 256 frames per `write`. Nothing can do the same work with less.
//!
//! Server streaming (one call, the server sends messages as fast as the
//! client takes them; one direction only):
//! - `tram-rpc`: a tram server-streaming RPC (prost `EchoMessage`s with a
//!   16-byte payload), with tram's credit flow control.
//! - `protosocket`: protosocket-rpc 2.0.2's server streaming, the same
//!   message shape (its `Msg`, which also carries its request id and control
//!   code).
//! - `floor-push`: a hand-written server writing 256 length-prefixed frames
//!   per `write`, and a client counting them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::bail;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tram::conn::{self, Config, Connection, LengthDelimited, TcpConfig};

use crate::compare::pb::EchoMessage;
use crate::harness::{
    Machine, ProcArgs, Server, Summary, client_runtime, measure_window, si, write_json,
};
use crate::ps;

/// Options of `tram-bench stream`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Systems to measure, interleaved in each round.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tram,tram-owned,floor,tram-rpc,protosocket,floor-push"
    )]
    systems: Vec<String>,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 16)]
    size: usize,
    /// Messages in flight.
    #[arg(long, default_value_t = 4096)]
    window: u64,
    /// `tram-rpc`: the stream credit the client grants (messages the server
    /// may send ahead; tram's default is 64).
    #[arg(long, default_value_t = 64)]
    credit: u32,
    /// Rounds (each system once per round).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds measured per system per round.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// Seconds of warm-up before each measurement.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    #[command(flatten)]
    proc: ProcArgs,
}

const SYSTEMS: [&str; 6] = [
    "tram",
    "tram-owned",
    "floor",
    "tram-rpc",
    "protosocket",
    "floor-push",
];

/// The floor each system is held against: the echo floor for the echo
/// systems, the one-way floor for the server-streaming ones.
fn floor_of(system: &str) -> &'static str {
    match system {
        "tram-rpc" | "protosocket" | "floor-push" => "floor-push",
        _ => "floor",
    }
}

const STREAM_PATH: &str = "/bench.Echo/Stream";

/// One measurement of one system.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rate: f64,
    client_us: f64,
    server_us: f64,
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
        .map(|s| Server::start("stream", s, &args.proc))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let rt = client_runtime(&args.proc)?;
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); args.systems.len()];
    println!(
        "stream echo: {} B payload, {} in flight, {} rounds x {}s, {}",
        args.size,
        args.window,
        args.rounds,
        args.secs,
        args.proc.describe()
    );
    for round in 0..args.rounds {
        for (i, (system, server)) in args.systems.iter().zip(&servers).enumerate() {
            let addr = SocketAddr::from(([127, 0, 0, 1], server.port));
            let s = rt.block_on(measure(system, addr, server, args))?;
            eprintln!(
                "  round {} {:>6}: {:>8} msg/s  client {:.3} µs/msg  server {:.3} µs/msg",
                round + 1,
                system,
                si(s.rate),
                s.client_us,
                s.server_us
            );
            samples[i].push(s);
        }
    }
    let rows = rows(args, &samples);
    print_table(&rows);
    let report = Report {
        bench: "stream",
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::this(),
        proc: args.proc.clone(),
        size: args.size,
        window: args.window,
        rounds: args.rounds,
        secs: args.secs,
        systems: rows,
    };
    let json = write_json(&args.proc.out, "stream.json", &report)?;
    println!("\nwrote {}", json.display());
    Ok(())
}

/// The result file of `stream`.
#[derive(Debug, serde::Serialize)]
struct Report {
    bench: &'static str,
    command: String,
    machine: Machine,
    proc: ProcArgs,
    size: usize,
    window: u64,
    rounds: usize,
    secs: f64,
    systems: Vec<Row>,
}

/// One system's figures over the rounds.
#[derive(Debug, serde::Serialize)]
struct Row {
    system: String,
    /// Messages per second, one per round.
    rates: Vec<f64>,
    rate: Summary,
    client_cpu_us: Summary,
    server_cpu_us: Summary,
    /// Which floor it is held against, and its rate over the floor's
    /// (per round, then summarised).
    floor: &'static str,
    of_floor: Option<Summary>,
}

fn rows(args: &Args, samples: &[Vec<Sample>]) -> Vec<Row> {
    args.systems
        .iter()
        .enumerate()
        .map(|(i, system)| {
            let floor = floor_of(system);
            let of_floor = args.systems.iter().position(|s| s == floor).map(|f| {
                // Ratio per round (same round = closest conditions).
                let per_round: Vec<f64> = samples[i]
                    .iter()
                    .zip(&samples[f])
                    .map(|(a, b)| a.rate / b.rate)
                    .collect();
                Summary::of(&per_round)
            });
            let rates: Vec<f64> = samples[i].iter().map(|s| s.rate).collect();
            Row {
                system: system.clone(),
                rate: Summary::of(&rates),
                rates,
                client_cpu_us: Summary::of(
                    &samples[i].iter().map(|s| s.client_us).collect::<Vec<_>>(),
                ),
                server_cpu_us: Summary::of(
                    &samples[i].iter().map(|s| s.server_us).collect::<Vec<_>>(),
                ),
                floor,
                of_floor,
            }
        })
        .collect()
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "| system | msg/s median | msg/s range | client CPU µs/msg | server CPU µs/msg | of its floor (median, range) |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {}–{} | {:.3} | {:.3} | {} |",
            r.system,
            si(r.rate.median),
            si(r.rate.min),
            si(r.rate.max),
            r.client_cpu_us.median,
            r.server_cpu_us.median,
            r.of_floor.map_or("-".into(), |q| format!(
                "{:.0}% ({:.0}–{:.0}%) of {}",
                q.median * 100.0,
                q.min * 100.0,
                q.max * 100.0,
                r.floor
            )),
        );
    }
}

async fn measure(
    system: &str,
    addr: SocketAddr,
    server: &Server,
    args: &Args,
) -> anyhow::Result<Sample> {
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let client = match system {
        "tram" | "tram-owned" => tokio::spawn(tram_client(
            addr,
            args.size,
            args.window,
            system == "tram-owned",
            stop.clone(),
            received.clone(),
        )),
        "tram-rpc" => tokio::spawn(tram_rpc_client(
            addr,
            args.size,
            args.credit,
            received.clone(),
        )),
        "protosocket" => tokio::spawn(protosocket_client(addr, args.size, received.clone())),
        "floor-push" => tokio::spawn(floor_push_client(addr, received.clone())),
        _ => tokio::spawn(floor_client(
            addr,
            args.size,
            args.window,
            stop.clone(),
            received.clone(),
        )),
    };
    let window = measure_window(
        || received.load(Ordering::Relaxed),
        None,
        server,
        args.warmup,
        args.secs,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    client.abort();
    let _ = client.await;
    let w = window.map_err(|e| anyhow::anyhow!("{system}: {e}"))?;
    Ok(Sample {
        rate: w.rate,
        client_us: w.client_us,
        server_us: w.server_us,
    })
}

/// Keeps at most `size` messages in flight between a client's writer and
/// reader. Shared by both clients so their overhead is the same.
struct Window {
    size: u64,
    received: AtomicU64,
    waiting: AtomicBool,
    notify: Notify,
}

impl Window {
    fn new(size: u64) -> Arc<Window> {
        Arc::new(Window {
            size,
            received: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            notify: Notify::new(),
        })
    }

    /// How many more may be sent, waiting until at least one may.
    async fn room(&self, sent: u64) -> u64 {
        loop {
            let in_flight = sent - self.received.load(Ordering::Acquire);
            if in_flight < self.size {
                return self.size - in_flight;
            }
            let notified = self.notify.notified();
            self.waiting.store(true, Ordering::SeqCst);
            if sent - self.received.load(Ordering::SeqCst) < self.size {
                continue;
            }
            notified.await;
        }
    }

    fn arrived(&self, n: u64, total: &AtomicU64) {
        self.received.fetch_add(n, Ordering::AcqRel);
        total.fetch_add(n, Ordering::Relaxed);
        if self.waiting.load(Ordering::SeqCst) && self.waiting.swap(false, Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }
}

async fn tram_client(
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

async fn floor_client(
    addr: SocketAddr,
    size: usize,
    window: u64,
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let win = Window::new(window);
    let writer = tokio::spawn({
        let win = win.clone();
        async move {
            let payload = vec![0xab; size];
            let mut buf = BytesMut::with_capacity(256 * (4 + size));
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = win.room(sent).await.min(256);
                buf.clear();
                for _ in 0..n {
                    buf.put_u32(size as u32);
                    buf.put_slice(&payload);
                }
                if wr.write_all(&buf).await.is_err() {
                    return;
                }
                sent += n;
            }
        }
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        if rd.read_buf(&mut buf).await? == 0 {
            break;
        }
        let mut frames = 0;
        while buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + len {
                break;
            }
            buf.advance(4 + len);
            frames += 1;
        }
        win.arrived(frames, &received);
        buf.reserve(64 * 1024);
    }
    writer.abort();
    Ok(())
}

/// Counts received messages into `received` in runs, not one atomic
/// add per message (the same for every client).
struct Counter<'a> {
    received: &'a AtomicU64,
    pending: u64,
}

impl Counter<'_> {
    fn one(&mut self) {
        self.pending += 1;
        if self.pending == 256 {
            self.received.fetch_add(256, Ordering::Relaxed);
            self.pending = 0;
        }
    }
}

async fn tram_rpc_client(
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
        .server_streaming::<_, EchoMessage>(STREAM_PATH, tram::rpc::Request::new(req))
        .await?;
    let mut count = Counter {
        received: &received,
        pending: 0,
    };
    while stream.message().await?.is_some() {
        count.one();
    }
    Ok(())
}

async fn protosocket_client(
    addr: SocketAddr,
    size: usize,
    received: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    use futures::StreamExt;
    let config =
        protosocket_rpc::client::Configuration::new(protosocket_rpc::client::TcpStreamConnector);
    let (client, connection) =
        protosocket_rpc::client::connect::<ps::ClientCodec, _>(addr, &config).await?;
    let driver = tokio::spawn(connection);
    let mut stream = client.send_streaming(ps::Msg {
        request_id: 1,
        code: 0,
        id: ps::STREAM,
        payload: Bytes::from(vec![0xab; size]),
    })?;
    let mut count = Counter {
        received: &received,
        pending: 0,
    };
    while let Some(m) = stream.next().await {
        m?;
        count.one();
    }
    driver.abort();
    Ok(())
}

async fn floor_push_client(addr: SocketAddr, received: Arc<AtomicU64>) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        let mut frames = 0;
        while buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + len {
                break;
            }
            buf.advance(4 + len);
            frames += 1;
        }
        received.fetch_add(frames, Ordering::Relaxed);
        buf.reserve(64 * 1024);
    }
}

/// The one-way floor's server: 256 frames of `size` bytes per `write`,
/// for as long as the client reads.
async fn floor_push(mut stream: TcpStream, size: usize) -> anyhow::Result<()> {
    let mut buf = BytesMut::with_capacity(256 * (4 + size));
    for _ in 0..256 {
        buf.put_u32(size as u32);
        buf.put_bytes(0xab, size);
    }
    loop {
        stream.write_all(&buf).await?;
    }
}

/// Serves one system on `listener` until aborted.
pub(crate) async fn serve(system: String, listener: TcpListener) -> anyhow::Result<()> {
    if system == "tram-rpc" {
        let server = tram::rpc::Server::builder()
            .server_streaming(
                STREAM_PATH,
                |req: tram::rpc::Request<EchoMessage>| async move {
                    let msg = req.into_inner();
                    let copies = futures::stream::repeat_with(move || Ok(msg.clone()));
                    Ok(tram::rpc::Response::new(copies))
                },
            )
            .build();
        let listener = tram::conn::Listener::from_tokio(listener, TcpConfig::default());
        server
            .serve_listener(listener, std::future::pending())
            .await?;
        return Ok(());
    }
    if system == "protosocket" {
        return crate::compare::serve(system, listener).await;
    }
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        match system.as_str() {
            "tram" => tokio::spawn(tram_echo(stream)),
            "tram-owned" => tokio::spawn(tram_echo_owned(stream)),
            // The payload size is the default's: the server process is not
            // told the client's flags.
            "floor-push" => tokio::spawn(floor_push(stream, 16)),
            _ => tokio::spawn(floor_echo(stream)),
        };
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

/// The floor's server: echoes each read's complete length-prefixed frames
/// straight from the read buffer.
pub(crate) async fn floor_echo(stream: TcpStream) -> anyhow::Result<()> {
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        if rd.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        // Echo every complete frame straight from the read buffer.
        let mut complete = 0;
        while buf.len() - complete >= 4 {
            let at = &buf[complete..];
            let len = u32::from_be_bytes([at[0], at[1], at[2], at[3]]) as usize;
            if at.len() < 4 + len {
                break;
            }
            complete += 4 + len;
        }
        wr.write_all(&buf[..complete]).await?;
        buf.advance(complete);
        buf.reserve(64 * 1024);
    }
}
