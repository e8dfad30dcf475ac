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
//! - `tram-rpc`: a tram server-streaming RPC (tram-build's `EchoMessage`s
//!   with a 16-byte payload), with tram's credit flow control.
//! - `protosocket`: protosocket-rpc 2.0.2's server streaming, the same
//!   message shape (its `Msg`, which also carries its request id and control
//!   code).
//! - `floor-push`: a hand-written server writing 256 length-prefixed frames
//!   per `write`, and a client counting them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::report::results::{StreamReport, StreamRow};
use crate::report::{Machine, Summary, si, write_json};
use crate::runner::{ProcArgs, Server, client_runtime, measure_window};
use crate::systems::{self, System, Workload};

/// What `stream` runs.
const SYSTEMS: [System; 6] = [
    System::Tram,
    System::TramOwned,
    System::Floor,
    System::TramRpc,
    System::Protosocket,
    System::FloorPush,
];

/// The floor each system is held against: the echo floor for the echo
/// systems, the one-way floor for the server-streaming ones.
fn floor_of(system: System) -> System {
    match system {
        System::TramRpc | System::Protosocket | System::FloorPush => System::FloorPush,
        _ => System::Floor,
    }
}

/// Options of `tram-bench stream`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Systems to measure, interleaved in each round.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "tram,tram-owned,floor,tram-rpc,protosocket,floor-push"
    )]
    systems: Vec<System>,
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

/// One measurement of one system.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rate: f64,
    client_us: f64,
    server_us: f64,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let setup = crate::runner::setup(
        "stream",
        &args.systems,
        &SYSTEMS,
        Workload::Stream,
        &args.proc,
    )?;
    let servers = &setup.servers;
    let rt = client_runtime(&args.proc)?;
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); args.systems.len()];
    println!(
        "stream echo: {} B payload, {} in flight, {} rounds x {}s, {}",
        args.size,
        args.window,
        args.rounds,
        args.secs,
        args.proc.banner()
    );
    for round in 0..args.rounds {
        let _ = crate::runner::guest::probe();
        for (i, (&system, server)) in args.systems.iter().zip(servers).enumerate() {
            let s = rt.block_on(measure(system, server, args))?;
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
    let report = StreamReport {
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
    crate::runner::guest::print_range();
    println!("\nwrote {}", json.display());
    Ok(())
}

fn rows(args: &Args, samples: &[Vec<Sample>]) -> Vec<StreamRow> {
    let over = |i: usize, j: usize| {
        let rates = |k: usize| samples[k].iter().map(|s| s.rate);
        Summary::of_ratios(rates(i), rates(j))
    };
    let protosocket = args.systems.iter().position(|&s| s == System::Protosocket);
    args.systems
        .iter()
        .enumerate()
        .map(|(i, &system)| {
            let floor = floor_of(system);
            let of_floor = args
                .systems
                .iter()
                .position(|&s| s == floor)
                .map(|f| over(i, f));
            let is_tram = matches!(system, System::Tram | System::TramOwned | System::TramRpc);
            let over_protosocket = protosocket.filter(|_| is_tram).map(|p| over(i, p));
            let rates: Vec<f64> = samples[i].iter().map(|s| s.rate).collect();
            StreamRow {
                system,
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
                over_protosocket,
            }
        })
        .collect()
}

fn print_table(rows: &[StreamRow]) {
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
    for r in rows {
        if let Some(q) = r.over_protosocket {
            println!(
                "\n{} / protosocket (per round, then median): {:.2}x ({:.2}–{:.2}x)",
                r.system, q.median, q.min, q.max
            );
        }
    }
}

async fn measure(system: System, server: &Server, args: &Args) -> anyhow::Result<Sample> {
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let addr = server.addr();
    let client = match system {
        System::Tram | System::TramOwned => tokio::spawn(systems::tram_stream_client(
            addr,
            args.size,
            args.window,
            system == System::TramOwned,
            stop.clone(),
            received.clone(),
        )),
        System::TramRpc => tokio::spawn(systems::tram_rpc_stream_client(
            addr,
            args.size,
            args.credit,
            received.clone(),
        )),
        System::Protosocket => tokio::spawn(systems::protosocket_stream_client(
            addr,
            args.size,
            received.clone(),
        )),
        System::FloorPush => tokio::spawn(systems::floor_push_client(addr, received.clone())),
        _ => tokio::spawn(systems::floor_stream_client(
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
