//! `compare`: the same unary echo service on tram, tonic (gRPC over
//! HTTP/2) and protosocket-rpc, plus the raw-TCP floor and tram behind its
//! gRPC gateway; each server in its own process, one TCP connection, `C`
//! calls in flight, systems interleaved in every round.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::report::results::{CompareReport, Setting, SystemResult};
use crate::report::{Machine, Percentiles, Summary, si, write_json};
use crate::runner::latency::{Hist, new_hist};
use crate::runner::load::{Load, static_payload};
use crate::runner::{Counts, ProcArgs, Server, client_runtime, measure_window};
use crate::systems::{self, System, UnaryClient, Workload};

/// What `compare` runs.
const SYSTEMS: [System; 5] = [
    System::Tram,
    System::Tonic,
    System::Protosocket,
    System::Floor,
    System::TramGrpc,
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
    systems::check("compare", &args.systems, &SYSTEMS)?;
    let servers = args
        .systems
        .iter()
        .map(|s| Server::start(Workload::Unary.name(), s.name(), &args.proc))
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
                for (i, (&system, server)) in args.systems.iter().zip(&servers).enumerate() {
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
            print_table(args, payload, c, &samples);
            results.push(setting(args, payload, c, &samples));
        }
    }
    let report = CompareReport {
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
    crate::report::chart::compare(&svg, &report)?;
    println!("\nwrote {} and {}", json.display(), svg.display());
    Ok(())
}

/// The figures of one setting, from every system's samples.
fn setting(args: &Args, payload: usize, c: usize, samples: &[Vec<Sample>]) -> Setting {
    let tram = args.systems.iter().position(|&s| s == System::Tram);
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
                system: *system,
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
    let Some(tram) = args.systems.iter().position(|&s| s == System::Tram) else {
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
    system: System,
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
    let addr = server.addr();
    let task = match system {
        System::Floor => tokio::spawn(systems::floor_closed_loop(load, addr)),
        _ => {
            let client = UnaryClient::connect(system, addr).await?;
            tokio::spawn(callers(load, client))
        }
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

/// Runs the load's callers, each with its own clone of `client`.
async fn callers(load: Load, client: UnaryClient) -> anyhow::Result<Hist> {
    load.callers(|mut me| {
        let mut client = client.clone();
        async move {
            while let Some((id, payload)) = me.next() {
                me.done(client.call(id, payload).await?)?;
            }
            Ok(())
        }
    })
    .await
}
