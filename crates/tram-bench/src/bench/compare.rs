//! `compare`: the same unary echo service on tram, tonic (gRPC over
//! HTTP/2) and protosocket-rpc, plus the raw-TCP floor and tram behind its
//! gRPC gateway; each server in its own process, one TCP connection, `C`
//! calls in flight, systems interleaved in every round.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::closed::{self, Sample};
use crate::report::results::{CompareReport, Setting};
use crate::report::{Machine, si, write_json};
use crate::runner::latency::Hist;
use crate::runner::load::{Load, static_payload};
use crate::runner::{Counts, ProcArgs, Server, client_runtime, measure_window};
use crate::systems::{self, System, UnaryClient, Workload};

/// What `compare` runs.
const SYSTEMS: [System; 12] = [
    System::Tram,
    System::TramCores,
    System::TramCubic,
    System::TramSync,
    System::TramObserved,
    System::Tonic,
    System::Protosocket,
    System::Floor,
    System::FloorTasks,
    System::TramGrpc,
    System::TramConnect,
    System::AxumJson,
];

/// Options of `tram-bench compare`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Systems to measure, interleaved in each round.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "tram,tonic,protosocket,floor"
    )]
    pub(crate) systems: Vec<System>,
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
    /// Calls each client task keeps in flight, polled together
    /// (`join_all`), as a service that fans out from one task does: 1 is
    /// a task per call. The floor keeps its own pipelined loop.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    calls_per_task: u16,
    /// Every call of a system that has deadlines (tram's, tonic) carries
    /// this timeout, as a service's calls usually do; protosocket-rpc and
    /// the floors have none and run as without. `targets` leaves such a
    /// run out.
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Every call of a system that has metadata (tram's, tonic) carries a
    /// 48-byte bearer token (`authorization`), as an authenticated
    /// service's calls do: tram's set on the channel
    /// (`ChannelBuilder::header`), tonic's inserted into each request;
    /// protosocket-rpc and the floors have none and run as without.
    /// `targets` leaves such a run out.
    #[arg(long)]
    bearer: bool,
    #[command(flatten)]
    pub(crate) proc: ProcArgs,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let setup = crate::runner::setup(
        "compare",
        &args.systems,
        &SYSTEMS,
        Workload::Unary,
        &args.proc,
    )?;
    let servers = &setup.servers;
    let rt = client_runtime(&args.proc)?;
    let mut per_task = match args.calls_per_task {
        1 => String::new(),
        k => format!(", {k} calls in flight per client task"),
    };
    if let Some(ms) = args.timeout_ms {
        per_task += &format!(", every call with a {ms} ms timeout (tram, tonic)");
    }
    if args.bearer {
        per_task += ", every call with a bearer token (tram, tonic)";
    }
    println!(
        "unary echo: {} rounds x {}s per system, {}{per_task}, systems interleaved",
        args.rounds,
        args.secs,
        args.proc.banner()
    );
    let mut results = Vec::new();
    for &payload in &args.payload {
        for &c in &args.concurrency {
            let mut samples: Vec<Vec<Sample>> = args.systems.iter().map(|_| Vec::new()).collect();
            let mut probes = Vec::new();
            for round in 0..args.rounds {
                probes.push(crate::runner::guest::probe());
                for (i, (&system, server)) in args.systems.iter().zip(servers).enumerate() {
                    let s = rt.block_on(measure(system, server, c, payload, args))?;
                    eprintln!(
                        "  {payload} B, C={c}, round {}: {system:>11} {:>8} calls/s  p99 {:>8.1} µs",
                        round + 1,
                        si(s.rate),
                        s.latency.value_at_quantile(0.99) as f64 / 1e3
                    );
                    samples[i].push(s);
                }
            }
            println!("\n{payload}-byte payload, {c} calls in flight:\n");
            let systems = closed::results(&args.systems, &samples);
            closed::print_table(&systems, &probes);
            results.push(Setting {
                payload,
                concurrency: c,
                systems,
            });
        }
    }
    let report = CompareReport {
        bench: "compare",
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::this(),
        proc: args.proc.clone(),
        rounds: args.rounds,
        secs: args.secs,
        calls_per_task: usize::from(args.calls_per_task),
        timeout_ms: args.timeout_ms,
        bearer: args.bearer,
        settings: results,
    };
    let json = write_json(&args.proc.out, "compare.json", &report)?;
    let svg = args.proc.out.join("compare.svg");
    crate::report::chart::compare(&svg, &report)?;
    crate::runner::guest::print_range();
    println!("\nwrote {} and {}", json.display(), svg.display());
    Ok(())
}

async fn measure(
    system: System,
    server: &Server,
    c: usize,
    payload: usize,
    args: &Args,
) -> anyhow::Result<Sample> {
    let done = Arc::new(Counts::new(c));
    let moved = Arc::new(Counts::new(c));
    let recording = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let load = Load {
        c,
        per_task: usize::from(args.calls_per_task),
        payload: static_payload(payload),
        done: done.clone(),
        moved: moved.clone(),
        recording: recording.clone(),
        stop: stop.clone(),
    };
    let addr = server.addr();
    // The floor's closed loop has no callers to move.
    let moved = (system != System::Floor).then_some(&*moved);
    let task = match system {
        System::Floor => tokio::spawn(systems::floor_closed_loop(load, addr)),
        _ => {
            let timeout = args.timeout_ms.map(Duration::from_millis);
            let client = UnaryClient::connect_with(system, addr, args.bearer)
                .await?
                .shaped(timeout, args.bearer);
            tokio::spawn(callers(load, client))
        }
    };
    let window = measure_window(
        || done.total(),
        moved,
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
    Ok(Sample::of(&w, latency))
}

/// Runs the load's callers, each with its own clone of `client`.
async fn callers(load: Load, client: UnaryClient) -> anyhow::Result<Hist> {
    load.callers(|me| client.caller(me)).await
}
