//! `rate`: open-loop load. Calls leave on a constant schedule (call `i`
//! at `i / rate` seconds) whether or not earlier ones have returned, and
//! each call's latency is measured from its *intended* send time, so a
//! stall on either side shows up in the percentiles instead of quietly
//! slowing the load down (coordinated omission).
//!
//! The schedule is kept by a dedicated OS thread, which wakes (with
//! `thread::sleep`) at most every 50 µs and hands every call due by then to
//! the runtime in one batch; each call then runs as its own task, whose
//! bookkeeping shares nothing with the others' (`tally`). Those costs are
//! the same for every system. Waking for every call instead would
//! make the dispatcher a fifth busy thread on a two-vCPU machine, and the
//! stalls it caused the client and server threads would dominate every
//! system's p99. The floor takes the same batches but writes each in one
//! `write`, and one reader takes the echoes (no task per call): the least
//! an open-loop round trip costs on the guest, so that a tail every system
//! shares shows as the machine's. `floor-tasks` is that floor with a task
//! per call, woken by the floor's reader as an RPC caller is by its
//! connection's: the floor's work plus what a task per call costs on the
//! runtime. The rates are swept upwards, the systems interleaved at each
//! rate; a system leaves the sweep once it falls behind its schedule or
//! its p99.9 passes 100 ms.
//!
//! Reported for each system: the highest rate at which p99.9 stayed under
//! 1 ms and under 5 ms (the Momento criterion), and the highest up to
//! which every rate did, and latency percentiles against achieved
//! throughput on one SVG chart. The guest's own stalls are probed before
//! the sweep and after it (`runner::stalls`): where they pass 0.1% of a
//! CPU's time, they decide the 1 ms criterion as much as the systems do.
//! Each step also gives how late its calls began (p99.9 of the time from
//! a call's intended send time to the first run of its batch's task on
//! the client's runtime): where that is milliseconds, the tail was made
//! before any system under test saw the call, by the dispatcher or the
//! runtime waiting for a CPU, and a burst of late calls then queues
//! behind it.

use std::time::Duration;

use anyhow::bail;

use crate::report::results::{RateReport, Step, SystemSweep};
use crate::report::{Machine, Percentiles, Summary, si, write_json};
use crate::runner::latency::{Hist, new_hist};
use crate::runner::stalls::Stalls;
use crate::runner::{ProcArgs, client_runtime};
use crate::systems::{System, Workload};

/// What `rate` runs.
const SYSTEMS: [System; 9] = [
    System::Tram,
    System::TramCores,
    System::TramCubic,
    System::TramSync,
    System::TramObserved,
    System::Tonic,
    System::Protosocket,
    System::Floor,
    System::FloorTasks,
];

/// Options of `tram-bench rate`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Systems to measure, interleaved at each rate.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "tram,tonic,protosocket"
    )]
    pub(crate) systems: Vec<System>,
    /// Offered rates in calls/s, swept in order (`k` and `M` suffixes).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = parse_rate,
        default_value = "10k,25k,50k,100k,200k,300k,400k,500k,650k,800k,1M"
    )]
    pub(crate) rates: Vec<u64>,
    /// Payload bytes per call.
    #[arg(long, default_value_t = 16)]
    pub(crate) payload: usize,
    /// Seconds measured per system per rate.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) secs: f64,
    /// Seconds of load before each measurement (on a fresh connection).
    #[arg(long, default_value_t = 0.3)]
    pub(crate) warmup: f64,
    /// Rounds of the whole sweep; each point is the median over rounds.
    #[arg(long, default_value_t = 3)]
    pub(crate) rounds: usize,
    /// Client connections the calls are spread over, in turn (the
    /// open-loop form of `fanin`): each its own client, all on the client
    /// runtime.
    #[arg(long, default_value_t = 1)]
    pub(crate) connections: usize,
    /// Most calls one client keeps outstanding; calls due beyond it wait
    /// (and that wait counts in their latency).
    #[arg(long, default_value_t = 32_768)]
    pub(crate) max_in_flight: usize,
    #[command(flatten)]
    pub(crate) proc: ProcArgs,
}

/// Parses `250000`, `250k`, `1.5M`.
pub(crate) fn parse_rate(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1e3),
        Some((i, 'm' | 'M')) => (&s[..i], 1e6),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("not a rate: {s:?}"))?;
    let rate = (v * mult).round();
    if !(1.0..=1e9).contains(&rate) {
        return Err(format!("rate out of range (1 to 1G calls/s): {s:?}"));
    }
    Ok(rate as u64)
}

/// A constant schedule: call `i` is due `i / rate` seconds after the start.
/// Integer nanoseconds throughout, so no drift over long runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    rate: u64,
}

impl Schedule {
    pub(crate) fn new(rate: u64) -> Schedule {
        Schedule { rate: rate.max(1) }
    }

    /// When call `i` is due, in nanoseconds from the start.
    pub(crate) fn intended(&self, i: u64) -> u64 {
        (u128::from(i) * 1_000_000_000 / u128::from(self.rate)) as u64
    }

    /// How many calls are due by `t` nanoseconds: calls `0..n` have
    /// `intended(i) <= t`.
    pub(crate) fn due_by(&self, t: u64) -> u64 {
        let mut n = (u128::from(t) * u128::from(self.rate) / 1_000_000_000) as u64 + 1;
        // Integer division rounds both ways; settle the boundary exactly.
        while n > 0 && self.intended(n - 1) > t {
            n -= 1;
        }
        while self.intended(n) <= t {
            n += 1;
        }
        n
    }
}

/// What one round of one step saw.
struct RoundResult {
    achieved: f64,
    hist: Hist,
    /// How late the window's calls began on the client's runtime.
    started_late: Hist,
    /// How late the dispatcher handed them over (part of `started_late`).
    dispatched_late: Hist,
    client_us: f64,
    server_us: f64,
    errors: u64,
}

impl RoundResult {
    /// The share of the machine's CPUs client and server kept busy.
    fn cpus_busy(&self) -> f64 {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        (self.client_us + self.server_us) * self.achieved / 1e6 / cpus
    }
}

mod step;
mod tally;
use step::step;

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.rates.is_empty() {
        bail!("no rates to sweep");
    }
    let setup = crate::runner::setup("rate", &args.systems, &SYSTEMS, Workload::Unary, &args.proc)?;
    let servers = &setup.servers;
    let rt = client_runtime(&args.proc)?;
    println!(
        "open-loop unary echo: {} B, {} connection(s), rates {}, {}s per point, {} round(s), {}",
        args.payload,
        args.connections.max(1),
        args.rates
            .iter()
            .map(|r| si(*r as f64))
            .collect::<Vec<_>>()
            .join(" "),
        args.secs,
        args.rounds,
        args.proc.banner()
    );
    let mut guest_stalls = Vec::new();
    stall_probe(&mut guest_stalls);
    let mut steps: Vec<Vec<Step>> = args.systems.iter().map(|_| Vec::new()).collect();
    let mut alive = vec![true; args.systems.len()];
    for &rate in &args.rates {
        if !alive.iter().any(|&a| a) {
            break;
        }
        let mut rounds: Vec<Vec<RoundResult>> = args.systems.iter().map(|_| Vec::new()).collect();
        for _ in 0..args.rounds {
            let _ = crate::runner::guest::probe();
            for (i, (&system, server)) in args.systems.iter().zip(servers).enumerate() {
                if !alive[i] {
                    continue;
                }
                let r = rt.block_on(step(system, server, rate, args))?;
                eprintln!(
                    "  {:>6}/s {system:>11}: achieved {:>6}/s  p50 {:>8.1} µs  p99.9 {:>9.1} µs  started late p99.9 {:>8.1} µs (dispatched {:>8.1})  errors {}",
                    si(rate as f64),
                    si(r.achieved),
                    r.hist.value_at_quantile(0.5) as f64 / 1e3,
                    r.hist.value_at_quantile(0.999) as f64 / 1e3,
                    r.started_late.value_at_quantile(0.999) as f64 / 1e3,
                    r.dispatched_late.value_at_quantile(0.999) as f64 / 1e3,
                    r.errors
                );
                rounds[i].push(r);
            }
        }
        for i in 0..args.systems.len() {
            if rounds[i].is_empty() {
                continue;
            }
            let s = summarise(rate, &rounds[i]);
            if !s.kept_up {
                alive[i] = false;
            }
            steps[i].push(s);
        }
    }
    let systems: Vec<SystemSweep> = args
        .systems
        .iter()
        .zip(steps)
        .map(|(&system, steps)| SystemSweep {
            system,
            max_rate_p999_under_1ms: max_rate_under(&steps, 1_000.0),
            max_rate_p999_under_5ms: max_rate_under(&steps, 5_000.0),
            every_rate_p999_under_1ms_to: every_rate_under(&steps, 1_000.0),
            every_rate_p999_under_5ms_to: every_rate_under(&steps, 5_000.0),
            steps,
        })
        .collect();
    stall_probe(&mut guest_stalls);
    print_tables(&systems);
    print_stall_verdict(&guest_stalls);
    let report = RateReport {
        bench: "rate",
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::this(),
        proc: args.proc.clone(),
        connections: args.connections.max(1),
        payload: args.payload,
        secs: args.secs,
        rounds: args.rounds,
        guest_stalls,
        systems,
    };
    let json = write_json(&args.proc.out, "rate.json", &report)?;
    let svg = args.proc.out.join("rate.svg");
    crate::report::chart::rate(&svg, &report)?;
    crate::runner::guest::print_range();
    println!("\nwrote {} and {}", json.display(), svg.display());
    Ok(())
}

/// Takes a two-second stall probe of the guest (`runner::stalls`), prints
/// it and keeps it.
fn stall_probe(into: &mut Vec<Stalls>) {
    if let Some(s) = Stalls::probe(Duration::from_secs(2)) {
        eprintln!("  {}", s.line());
        into.push(s);
    }
}

/// Says how much of the 1 ms criterion the guest's own stalls may decide:
/// a CPU that spent more than 0.1% of a probe stalled past 1 ms leaves a
/// p99.9 under 1 ms to where its stalls fall (which thread they stop), for
/// every system alike.
fn print_stall_verdict(probes: &[Stalls]) {
    let Some(worst) = probes.iter().map(Stalls::worst_share).reduce(f64::max) else {
        return;
    };
    if worst > 0.001 {
        println!(
            "guest stalls: a CPU spent {:.2}% of a probe stalled past 1 ms, over the 0.1% a p99.9 leaves: p99.9 < 1 ms is decided here by where the guest's stalls fall as much as by the systems",
            worst * 100.0
        );
    } else {
        println!(
            "guest stalls: at most {:.3}% of a probe's time past 1 ms, under the 0.1% a p99.9 leaves",
            worst * 100.0
        );
    }
}

fn summarise(rate: u64, rounds: &[RoundResult]) -> Step {
    let (mut all, mut dispatched) = (new_hist(), new_hist());
    for r in rounds {
        let _ = all.add(&r.hist);
        let _ = dispatched.add(&r.dispatched_late);
    }
    let p999: Vec<f64> = rounds
        .iter()
        .map(|r| r.hist.value_at_quantile(0.999) as f64 / 1e3)
        .collect();
    let achieved = Summary::of(&rounds.iter().map(|r| r.achieved).collect::<Vec<_>>()).median;
    let p999_median = Summary::of(&p999).median;
    Step {
        rate,
        achieved,
        latency: Percentiles::of(&all),
        kept_up: kept_up(rate, achieved, p999_median),
        p999_rounds_us: p999,
        client_cpu_us: Summary::of(&rounds.iter().map(|r| r.client_us).collect::<Vec<_>>()),
        server_cpu_us: Summary::of(&rounds.iter().map(|r| r.server_us).collect::<Vec<_>>()),
        cpus_busy: Summary::of(&rounds.iter().map(|r| r.cpus_busy()).collect::<Vec<_>>()),
        started_late_p999_us: Summary::of(
            &rounds
                .iter()
                .map(|r| r.started_late.value_at_quantile(0.999) as f64 / 1e3)
                .collect::<Vec<_>>(),
        ),
        dispatched_late: Percentiles::of(&dispatched),
        dispatched_late_p999_us: Summary::of(
            &rounds
                .iter()
                .map(|r| r.dispatched_late.value_at_quantile(0.999) as f64 / 1e3)
                .collect::<Vec<_>>(),
        ),
        errors: rounds.iter().map(|r| r.errors).sum(),
    }
}

/// Whether a point counts as sustained: at least 90% of the offered rate
/// completed, and p99.9 under 100 ms.
pub(crate) fn kept_up(rate: u64, achieved: f64, p999_us: f64) -> bool {
    achieved >= 0.9 * rate as f64 && p999_us < 100_000.0
}

/// The highest offered rate that was sustained without errors and with
/// p99.9 (median of rounds) under `limit_us`. Points past the first one
/// the system fell behind at do not count, however they look.
pub(crate) fn max_rate_under(steps: &[Step], limit_us: f64) -> Option<u64> {
    steps
        .iter()
        .take_while(|s| s.kept_up)
        .filter(|s| passed(s, limit_us))
        .map(|s| s.rate)
        .max()
}

/// Whether a step passed at `limit_us`: sustained, without errors, its
/// rounds' median p99.9 under the limit.
fn passed(step: &Step, limit_us: f64) -> bool {
    step.kept_up && step.errors == 0 && Summary::of(&step.p999_rounds_us).median < limit_us
}

/// The highest offered rate up to which every step passed at `limit_us`:
/// the stricter reading of [`max_rate_under`], which a step over the limit
/// between two under it does not break.
pub(crate) fn every_rate_under(steps: &[Step], limit_us: f64) -> Option<u64> {
    steps
        .iter()
        .take_while(|s| passed(s, limit_us))
        .map(|s| s.rate)
        .last()
}

fn print_tables(systems: &[SystemSweep]) {
    for s in systems {
        println!("\n{}:\n", s.system);
        println!(
            "| offered/s | achieved/s | p50 µs | p99 µs | p99.9 µs | p99.9 µs, median of rounds | calls started late, p99.9 µs, median of rounds | of it the dispatcher's: p50 µs, p99.9 µs median of rounds | max µs | client CPU µs/call | server CPU µs/call | CPUs busy | errors |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for p in &s.steps {
            println!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} / {:.1} | {:.1} | {:.2} | {:.2} | {:.0}% | {}{} |",
                si(p.rate as f64),
                si(p.achieved),
                p.latency.p50_us,
                p.latency.p99_us,
                p.latency.p999_us,
                Summary::of(&p.p999_rounds_us).median,
                p.started_late_p999_us.median,
                p.dispatched_late.p50_us,
                p.dispatched_late_p999_us.median,
                p.latency.max_us,
                p.client_cpu_us.median,
                p.server_cpu_us.median,
                p.cpus_busy.median * 100.0,
                p.errors,
                if p.kept_up { "" } else { " (fell behind)" }
            );
        }
    }
    let fmt = |r: Option<u64>| r.map_or("none".to_string(), |r| format!("{}/s", si(r as f64)));
    println!(
        "\n| system | highest rate, p99.9 < 1 ms | every rate up to, p99.9 < 1 ms | highest rate, p99.9 < 5 ms | every rate up to, p99.9 < 5 ms |"
    );
    println!("|---|---|---|---|---|");
    for s in systems {
        println!(
            "| {} | {} | {} | {} | {} |",
            s.system,
            fmt(s.max_rate_p999_under_1ms),
            fmt(s.every_rate_p999_under_1ms_to),
            fmt(s.max_rate_p999_under_5ms),
            fmt(s.every_rate_p999_under_5ms_to)
        );
    }
    let Some(tram) = systems.iter().find(|s| s.system == System::Tram) else {
        return;
    };
    for other in systems.iter().filter(|s| s.system != System::Tram) {
        for (name, a, b) in [
            (
                "p99.9 < 1 ms, highest rate",
                tram.max_rate_p999_under_1ms,
                other.max_rate_p999_under_1ms,
            ),
            (
                "p99.9 < 1 ms, every rate up to",
                tram.every_rate_p999_under_1ms_to,
                other.every_rate_p999_under_1ms_to,
            ),
            (
                "p99.9 < 5 ms, highest rate",
                tram.max_rate_p999_under_5ms,
                other.max_rate_p999_under_5ms,
            ),
            (
                "p99.9 < 5 ms, every rate up to",
                tram.every_rate_p999_under_5ms_to,
                other.every_rate_p999_under_5ms_to,
            ),
        ] {
            if let (Some(a), Some(b)) = (a, b) {
                println!(
                    "tram / {} at {name}: {:.2}x (at the sweep's rate steps)",
                    other.system,
                    a as f64 / b as f64
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_busy_is_both_sides_cpu_times_the_rate_over_the_cpus() {
        let round = RoundResult {
            achieved: 100_000.0,
            hist: new_hist(),
            started_late: new_hist(),
            dispatched_late: new_hist(),
            client_us: 3.0,
            server_us: 1.0,
            errors: 0,
        };
        let cpus = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        // 4 µs a call at 100k calls/s is 0.4 of one CPU.
        assert!((round.cpus_busy() * cpus - 0.4).abs() < 1e-9);
    }

    #[test]
    fn rates_parse_with_suffixes() {
        assert_eq!(parse_rate("250000"), Ok(250_000));
        assert_eq!(parse_rate("250k"), Ok(250_000));
        assert_eq!(parse_rate("1.5M"), Ok(1_500_000));
        assert_eq!(parse_rate(" 10K "), Ok(10_000));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("-5k").is_err());
    }

    #[test]
    fn schedule_spaces_calls_evenly() {
        let s = Schedule::new(1_000);
        assert_eq!(s.intended(0), 0);
        assert_eq!(s.intended(1), 1_000_000);
        assert_eq!(s.intended(1_000), 1_000_000_000);
        // Calls 0..=10 are due by 10.5 ms.
        assert_eq!(s.due_by(10_500_000), 11);
        assert_eq!(s.due_by(0), 1);
        // A rate that does not divide a second: 3 calls/s.
        let s = Schedule::new(3);
        assert_eq!(s.intended(1), 333_333_333);
        assert_eq!(s.intended(3), 1_000_000_000);
        // No drift: call 3·10⁶ of a 3/s schedule is due at exactly 10⁶ s.
        assert_eq!(s.intended(3_000_000), 1_000_000_000_000_000);
    }

    #[test]
    fn due_by_is_the_inverse_of_intended() {
        for rate in [1, 3, 7, 1_000, 333_333, 1_000_000, 999_999_937] {
            let s = Schedule::new(rate);
            for t in [0, 1, 999, 1_000_000, 123_456_789, 10_000_000_000] {
                let n = s.due_by(t);
                assert!(n >= 1);
                assert!(s.intended(n - 1) <= t, "rate {rate} t {t}");
                assert!(s.intended(n) > t, "rate {rate} t {t}");
            }
        }
    }

    fn point(rate: u64, achieved: f64, p999_us: f64) -> Step {
        Step {
            rate,
            achieved,
            latency: Percentiles {
                p50_us: 1.0,
                p99_us: p999_us,
                p999_us,
                max_us: p999_us,
                count: 1,
            },
            p999_rounds_us: vec![p999_us],
            client_cpu_us: Summary::of(&[1.0]),
            server_cpu_us: Summary::of(&[1.0]),
            cpus_busy: Summary::of(&[0.5]),
            started_late_p999_us: Summary::of(&[100.0]),
            dispatched_late: Percentiles::of(&new_hist()),
            dispatched_late_p999_us: Summary::of(&[1.0]),
            errors: 0,
            kept_up: kept_up(rate, achieved, p999_us),
        }
    }

    #[test]
    fn highest_rate_counts_only_the_unbroken_run() {
        let steps = vec![
            point(10_000, 10_000.0, 200.0),
            point(20_000, 19_900.0, 800.0),
            point(40_000, 39_000.0, 3_000.0),
            // Fell behind: not sustained, whatever its latency.
            point(80_000, 50_000.0, 400.0),
            point(160_000, 160_000.0, 300.0),
        ];
        assert_eq!(max_rate_under(&steps, 1_000.0), Some(20_000));
        assert_eq!(max_rate_under(&steps, 5_000.0), Some(40_000));
        assert_eq!(max_rate_under(&steps, 100.0), None);
        assert_eq!(every_rate_under(&steps, 5_000.0), Some(40_000));
        assert!(!steps[3].kept_up);
        // A noisy low point does not hide a good one above it, but ends
        // the unbroken run.
        let steps = vec![
            point(10_000, 10_000.0, 1_500.0),
            point(20_000, 20_000.0, 900.0),
        ];
        assert_eq!(max_rate_under(&steps, 1_000.0), Some(20_000));
        assert_eq!(every_rate_under(&steps, 1_000.0), None);
        // A step over the limit between two under it.
        let steps = vec![
            point(10_000, 10_000.0, 400.0),
            point(20_000, 20_000.0, 8_000.0),
            point(40_000, 40_000.0, 3_000.0),
        ];
        assert_eq!(max_rate_under(&steps, 5_000.0), Some(40_000));
        assert_eq!(every_rate_under(&steps, 5_000.0), Some(10_000));
        // Errors disqualify a point.
        let mut failing = point(30_000, 30_000.0, 500.0);
        failing.errors = 3;
        assert_eq!(max_rate_under(&[failing], 1_000.0), None);
    }
}
