//! `fleet`: one client balancing over `N` servers (each its own process),
//! open loop at a fixed rate, through five phases: steady; one server
//! slowed; that one restored and another killed (SIGKILL); the killed one
//! restarted on its port; steady again. tram's channel over the list
//! (power of two choices over Peak-EWMA) and tonic's `balance_list` run
//! the same scenario in turn, each against servers of its own. Latency is
//! measured from each call's intended send time, so a stall shows instead
//! of slowing the load down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::report::{Machine, Percentiles, write_json};
use crate::runner::latency::{Hist, new_hist};
use crate::runner::{ProcArgs, Server, client_runtime};
use crate::systems::{System, UnaryClient, Workload};

/// The phases, in order.
const PHASES: [&str; 5] = [
    "steady",
    "one slowed",
    "one killed",
    "restarted",
    "steady again",
];

/// Options of `tram-bench fleet`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Systems to run the scenario on, in turn.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tram,tonic")]
    systems: Vec<System>,
    /// Servers in the fleet.
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Calls per second, open loop.
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// Seconds per phase.
    #[arg(long, default_value_t = 3.0)]
    phase_secs: f64,
    /// The slowed server's delay per call, in microseconds (the others
    /// answer at once).
    #[arg(long, default_value_t = 2_000)]
    slow_us: u64,
    /// Payload bytes per call.
    #[arg(long, default_value_t = 16)]
    payload: usize,
    /// Seconds of load before the first phase, not measured.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Calls in flight at most; calls due beyond it count as errors.
    #[arg(long, default_value_t = 20_000)]
    max_in_flight: u64,
    #[command(flatten)]
    proc: ProcArgs,
}

/// The result file of `fleet`.
#[derive(Debug, serde::Serialize)]
struct FleetReport {
    bench: &'static str,
    command: String,
    machine: Machine,
    proc: ProcArgs,
    servers: usize,
    rate: u64,
    phase_secs: f64,
    slow_us: u64,
    systems: Vec<SystemRun>,
}

/// One system's run of the scenario.
#[derive(Debug, serde::Serialize)]
struct SystemRun {
    system: System,
    phases: Vec<PhaseResult>,
    /// p99 in µs per 100 ms of the run (for the chart).
    p99_timeline_us: Vec<f64>,
}

#[derive(Debug, serde::Serialize)]
struct PhaseResult {
    phase: &'static str,
    calls: u64,
    errors: u64,
    latency: Percentiles,
}

/// The timeline's bucket.
const BUCKET: Duration = Duration::from_millis(100);

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    crate::systems::check("fleet", &args.systems, &[System::Tram, System::Tonic])?;
    let _neighbours = crate::runner::neighbours::Neighbours::start(&args.proc)?;
    let rt = client_runtime(&args.proc)?;
    println!(
        "fleet: {} servers, {} calls/s open loop, {} s per phase ({}), the slowed server {} µs per call, {}",
        args.servers,
        args.rate,
        args.phase_secs,
        PHASES.join(" → "),
        args.slow_us,
        args.proc.banner()
    );
    let mut runs = Vec::new();
    for &system in &args.systems {
        let run = rt.block_on(scenario(system, args))?;
        print_run(&run);
        runs.push(run);
    }
    let report = FleetReport {
        bench: "fleet",
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::this(),
        proc: args.proc.clone(),
        servers: args.servers,
        rate: args.rate,
        phase_secs: args.phase_secs,
        slow_us: args.slow_us,
        systems: runs,
    };
    let json = write_json(&args.proc.out, "fleet.json", &report)?;
    let svg = args.proc.out.join("fleet.svg");
    chart(&svg, &report)?;
    println!("wrote {} and {}", json.display(), svg.display());
    Ok(())
}

/// What the calls of one run record into.
struct Record {
    /// When the first phase starts; calls due before are the warm-up's.
    start: Instant,
    warmup: Duration,
    phase_len: Duration,
    phases: Vec<Mutex<(Hist, u64, u64)>>,
    timeline: Mutex<Vec<Hist>>,
    in_flight: AtomicU64,
}

impl Record {
    fn phase_of(&self, due: Instant) -> usize {
        let i = due.saturating_duration_since(self.start).as_nanos() / self.phase_len.as_nanos();
        (i as usize).min(PHASES.len() - 1)
    }

    fn done(&self, due: Instant, ok: bool) {
        if due < self.start {
            return;
        }
        let now = Instant::now();
        let latency = now.saturating_duration_since(due).as_nanos() as u64;
        let mut phase = self.phases[self.phase_of(due)].lock();
        phase.1 += 1;
        if ok {
            let _ = phase.0.record(latency.max(1));
        } else {
            phase.2 += 1;
        }
        drop(phase);
        let bucket =
            (due.saturating_duration_since(self.start).as_nanos() / BUCKET.as_nanos()) as usize;
        let mut timeline = self.timeline.lock();
        if let Some(h) = timeline.get_mut(bucket) {
            let _ = h.record(latency.max(1));
        }
    }
}

/// Runs the scenario on `system`: servers up, client connected, the load
/// through every phase.
async fn scenario(system: System, args: &Args) -> anyhow::Result<SystemRun> {
    let workload = Workload::Fleet.name();
    let mut servers = (0..args.servers)
        .map(|_| Server::start(workload, system.name(), &args.proc).map(Some))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let addrs: Vec<SocketAddr> = servers.iter().flatten().map(Server::addr).collect();
    let client = UnaryClient::connect_fleet(system, &addrs).await?;
    // Warm up: connections made, estimates settled.
    let payload = Bytes::from(vec![0xab; args.payload]);
    for i in 0..200u64 {
        client.clone().call(i, payload.clone()).await?;
    }
    let phase_len = Duration::from_secs_f64(args.phase_secs);
    let total = phase_len * PHASES.len() as u32;
    let warmup = Duration::from_secs_f64(args.warmup);
    let record = Arc::new(Record {
        start: Instant::now() + warmup,
        warmup,
        phase_len,
        phases: PHASES
            .iter()
            .map(|_| Mutex::new((new_hist(), 0, 0)))
            .collect(),
        timeline: Mutex::new(
            (0..=(total.as_nanos() / BUCKET.as_nanos()))
                .map(|_| new_hist())
                .collect(),
        ),
        in_flight: AtomicU64::new(0),
    });
    let load = tokio::spawn(open_loop(
        client,
        record.clone(),
        args.rate,
        total,
        payload,
        args.max_in_flight,
    ));
    // The scenario's events, at the phases' starts.
    let (slow, killed) = (0, 1.min(args.servers - 1));
    for phase in 1..PHASES.len() {
        tokio::time::sleep_until((record.start + phase_len * phase as u32).into()).await;
        match phase {
            1 => tell(&mut servers[slow], &format!("delay {}", args.slow_us))?,
            2 => {
                tell(&mut servers[slow], "delay 0")?;
                if let Some(s) = servers[killed].take() {
                    s.kill();
                }
            }
            3 => {
                let port = addrs[killed].port();
                servers[killed] =
                    Some(Server::start_on(workload, system.name(), port, &args.proc)?);
            }
            _ => {}
        }
    }
    load.await??;
    // The calls still in flight get a moment, then count as lost.
    let grace = Instant::now() + Duration::from_secs(5);
    while record.in_flight.load(Ordering::Acquire) > 0 && Instant::now() < grace {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let lost = record.in_flight.load(Ordering::Acquire);
    let phases = PHASES
        .iter()
        .zip(&record.phases)
        .enumerate()
        .map(|(i, (name, p))| {
            let p = p.lock();
            PhaseResult {
                phase: name,
                calls: p.1,
                errors: p.2 + if i == PHASES.len() - 1 { lost } else { 0 },
                latency: Percentiles::of(&p.0),
            }
        })
        .collect();
    let p99_timeline_us = record
        .timeline
        .lock()
        .iter()
        .map(|h| h.value_at_quantile(0.99) as f64 / 1e3)
        .collect();
    Ok(SystemRun {
        system,
        phases,
        p99_timeline_us,
    })
}

fn tell(server: &mut Option<Server>, line: &str) -> anyhow::Result<()> {
    match server {
        Some(s) => s.tell(line),
        None => Ok(()),
    }
}

/// Issues `rate` calls a second for `total` from a thread of its own (a
/// runtime's timer is a millisecond coarse), each call a task of its own,
/// each timed from when it was due.
async fn open_loop(
    client: UnaryClient,
    record: Arc<Record>,
    rate: u64,
    total: Duration,
    payload: Bytes,
    max_in_flight: u64,
) -> anyhow::Result<()> {
    let handle = tokio::runtime::Handle::current();
    let dispatcher = std::thread::Builder::new()
        .name("dispatcher".into())
        .spawn(move || {
            crate::runner::tight_timer_slack();
            let interval = Duration::from_nanos(1_000_000_000 / rate.max(1));
            let calls = ((total + record.warmup).as_nanos() / interval.as_nanos()) as u64;
            let first = record.start - record.warmup;
            for i in 0..calls {
                let due = first + interval * i as u32;
                let now = Instant::now();
                if due > now + Duration::from_micros(20) {
                    std::thread::sleep(due - now);
                }
                if record.in_flight.load(Ordering::Relaxed) >= max_in_flight {
                    record.done(due, false);
                    continue;
                }
                record.in_flight.fetch_add(1, Ordering::Relaxed);
                let (mut client, record, payload) =
                    (client.clone(), record.clone(), payload.clone());
                handle.spawn(async move {
                    let ok = matches!(client.call(i, payload).await, Ok(id) if id == i);
                    record.done(due, ok);
                    record.in_flight.fetch_sub(1, Ordering::Release);
                });
            }
        })?;
    tokio::task::spawn_blocking(move || dispatcher.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the dispatcher panicked"))
}

fn print_run(run: &SystemRun) {
    println!();
    println!("{}:", run.system);
    println!();
    println!("| phase | calls | errors | p50 µs | p99 µs | p99.9 µs | max µs |");
    println!("|---|---|---|---|---|---|---|");
    for p in &run.phases {
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            p.phase,
            p.calls,
            p.errors,
            p.latency.p50_us,
            p.latency.p99_us,
            p.latency.p999_us,
            p.latency.max_us
        );
    }
}

/// The p99 of every 100 ms of each run, on a log scale, the phases marked.
fn chart(path: &std::path::Path, report: &FleetReport) -> anyhow::Result<()> {
    crate::report::chart::fleet(
        path,
        report.phase_secs,
        &PHASES,
        &report
            .systems
            .iter()
            .map(|r| (r.system, r.p99_timeline_us.clone()))
            .collect::<Vec<_>>(),
    )
}
