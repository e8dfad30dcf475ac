//! `fanin`: one server, many client connections — the load of a storage
//! node behind a fleet of routers, which one connection hides. Every
//! connection is a client of its own (its own channel, HTTP/2 connection
//! or protosocket-rpc client) with `--per-connection` calls in flight, and
//! the connections are spread over `--client-threads` client threads, each
//! running a single-threaded runtime (as that many router processes
//! would). The figures are taken at each number of connections, systems
//! interleaved in every round; the server's CPU per call shows how the
//! server scales with its clients.
//!
//! The open-loop variant of this load is `rate --connections N`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::closed::{self, Sample};
use crate::report::results::{FaninReport, FaninSetting};
use crate::report::{Machine, si, write_json};
use crate::runner::latency::{Hist, new_hist};
use crate::runner::load::{Load, static_payload};
use crate::runner::{Counts, ProcArgs, Server, client_runtime, measure_window};
use crate::systems::{System, UnaryClient, Workload};

/// What `fanin` runs.
const SYSTEMS: [System; 7] = [
    System::Tram,
    System::TramCores,
    System::TramCubic,
    System::TramSync,
    System::TramObserved,
    System::Tonic,
    System::Protosocket,
];

/// Options of `tram-bench fanin`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Systems to measure, interleaved in each round.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "tram,tram-cores,protosocket,tonic"
    )]
    systems: Vec<System>,
    /// Numbers of client connections, one setting each.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64,512")]
    connections: Vec<usize>,
    /// Calls in flight on each connection.
    #[arg(long, default_value_t = 16)]
    per_connection: usize,
    /// Client threads the connections are spread over, each with a
    /// single-threaded runtime.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    client_threads: u16,
    /// Payload bytes per call.
    #[arg(long, default_value_t = 16)]
    payload: usize,
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
    proc: ProcArgs,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let setup = crate::runner::setup(
        "fanin",
        &args.systems,
        &SYSTEMS,
        Workload::Unary,
        &args.proc,
    )?;
    let servers = &setup.servers;
    // The measuring window runs here; the callers on the client threads.
    let control = client_runtime(&args.proc)?;
    let threads = ClientThreads::start(args.client_threads.into())?;
    println!(
        "fan-in: unary echo, {} B, {} calls in flight per connection, connections over {} client threads, {} rounds x {}s, {}",
        args.payload,
        args.per_connection,
        args.client_threads,
        args.rounds,
        args.secs,
        args.proc.banner()
    );
    let mut settings = Vec::new();
    for &connections in &args.connections {
        let mut samples: Vec<Vec<Sample>> = args.systems.iter().map(|_| Vec::new()).collect();
        let mut probes = Vec::new();
        for round in 0..args.rounds {
            probes.push(crate::runner::guest::probe());
            for (i, (&system, server)) in args.systems.iter().zip(servers).enumerate() {
                let s = control.block_on(measure(system, server, connections, &threads, args))?;
                eprintln!(
                    "  {connections} connections, round {}: {system:>11} {:>8} calls/s  server {:.2} µs/call",
                    round + 1,
                    si(s.rate),
                    s.server_us
                );
                samples[i].push(s);
            }
        }
        println!(
            "\n{connections} connections, {} calls in flight each:\n",
            args.per_connection
        );
        let systems = closed::results(&args.systems, &samples);
        closed::print_table(&systems, &probes);
        settings.push(FaninSetting {
            connections,
            systems,
        });
    }
    let report = FaninReport {
        bench: "fanin",
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::this(),
        proc: args.proc.clone(),
        client_threads: args.client_threads.into(),
        per_connection: args.per_connection,
        payload: args.payload,
        rounds: args.rounds,
        secs: args.secs,
        settings,
    };
    let json = write_json(&args.proc.out, "fanin.json", &report)?;
    crate::runner::guest::print_range();
    println!("\nwrote {}", json.display());
    Ok(())
}

/// The client threads: each runs a single-threaded runtime until dropped.
struct ClientThreads {
    handles: Vec<tokio::runtime::Handle>,
    _stop: tokio::sync::watch::Sender<()>,
}

impl ClientThreads {
    fn start(n: usize) -> anyhow::Result<ClientThreads> {
        let (stop, stopped) = tokio::sync::watch::channel(());
        let mut handles = Vec::new();
        for i in 0..n {
            let (tx, rx) = std::sync::mpsc::channel();
            let mut stopped = stopped.clone();
            std::thread::Builder::new()
                .name(format!("client-{i}"))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    match rt {
                        Ok(rt) => {
                            let _ = tx.send(Ok(rt.handle().clone()));
                            rt.block_on(async { while stopped.changed().await.is_ok() {} });
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    }
                })?;
            handles.push(rx.recv()??);
        }
        Ok(ClientThreads {
            handles,
            _stop: stop,
        })
    }

    /// The runtime of connection `i`.
    fn of(&self, i: usize) -> &tokio::runtime::Handle {
        &self.handles[i % self.handles.len()]
    }
}

/// One round of one system: `connections` clients, each on its thread's
/// runtime, with `per_connection` callers each.
async fn measure(
    system: System,
    server: &Server,
    connections: usize,
    threads: &ClientThreads,
    args: &Args,
) -> anyhow::Result<Sample> {
    let addr = server.addr();
    // Each client is made on its own thread's runtime: tonic and
    // protosocket-rpc spawn their connection's tasks where they connect.
    let mut clients = Vec::with_capacity(connections);
    for i in 0..connections {
        let client = threads
            .of(i)
            .spawn(UnaryClient::connect(system, addr))
            .await??;
        clients.push(client);
    }
    let per = args.per_connection.max(1);
    let c = connections * per;
    let done = Arc::new(Counts::new(c));
    let moved = Arc::new(Counts::new(c));
    let recording = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let load = Load {
        c,
        per_task: 1,
        payload: static_payload(args.payload),
        done: done.clone(),
        moved: moved.clone(),
        recording: recording.clone(),
        stop: stop.clone(),
    };
    let hist = Arc::new(parking_lot::Mutex::new(new_hist()));
    let mut callers = Vec::with_capacity(c);
    for (i, client) in clients.iter().enumerate() {
        for k in 0..per {
            let me = load.caller(i * per + k, hist.clone());
            callers.push(threads.of(i).spawn(client.caller(me)));
        }
    }
    let window = measure_window(
        || done.total(),
        Some(&moved),
        Some(&recording),
        server,
        args.warmup,
        args.secs,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let finished = tokio::time::timeout(Duration::from_secs(20), async {
        for caller in callers {
            caller.await??;
        }
        Ok::<_, anyhow::Error>(())
    })
    .await;
    finished
        .map_err(|_| anyhow::anyhow!("{system}: callers did not stop"))?
        .map_err(|e| anyhow::anyhow!("{system}: {e}"))?;
    drop(clients);
    let w = window.map_err(|e| anyhow::anyhow!("{system}: {e}"))?;
    let latency: Hist = std::mem::replace(&mut *hist.lock(), new_hist());
    Ok(Sample::of(&w, latency))
}
