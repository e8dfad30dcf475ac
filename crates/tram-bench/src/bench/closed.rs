//! What the closed-loop benchmarks (`compare`, `fanin`) share: a round's
//! sample of one system, and the figures and table of a setting over the
//! rounds, with tram's ratio to each system taken per round.

use crate::report::results::SystemResult;
use crate::report::{Percentiles, Summary, si};
use crate::runner::latency::{Hist, new_hist};
use crate::systems::System;

/// One round of one system.
pub(crate) struct Sample {
    pub(crate) rate: f64,
    pub(crate) client_us: f64,
    pub(crate) server_us: f64,
    /// Context switches per thousand calls, each process.
    pub(crate) client_switches: f64,
    pub(crate) server_switches: f64,
    /// Calls per thousand whose caller had moved to another thread.
    pub(crate) moved: Option<f64>,
    pub(crate) latency: Hist,
}

impl Sample {
    /// A round's sample: what the window saw, and the latencies.
    pub(crate) fn of(w: &crate::runner::Window, latency: Hist) -> Sample {
        Sample {
            rate: w.rate,
            client_us: w.client_us,
            server_us: w.server_us,
            client_switches: w.client_switches,
            server_switches: w.server_switches,
            moved: w.moved,
            latency,
        }
    }
}

/// Every system's figures over the rounds (`samples[i]` are `systems[i]`'s).
pub(crate) fn results(systems: &[System], samples: &[Vec<Sample>]) -> Vec<SystemResult> {
    let tram = systems.iter().position(|&s| s == System::Tram);
    systems
        .iter()
        .enumerate()
        .map(|(i, &system)| {
            let rates: Vec<f64> = samples[i].iter().map(|s| s.rate).collect();
            let mut all = new_hist();
            for s in &samples[i] {
                let _ = all.add(&s.latency);
            }
            let rates_of = |k: usize| samples[k].iter().map(|s| s.rate);
            let tram_ratio = tram
                .filter(|&t| t != i)
                .map(|t| Summary::of_ratios(rates_of(t), rates_of(i)));
            let moved: Option<Vec<f64>> = samples[i].iter().map(|s| s.moved).collect();
            let of =
                |f: fn(&Sample) -> f64| Summary::of(&samples[i].iter().map(f).collect::<Vec<_>>());
            SystemResult {
                system,
                rate: Summary::of(&rates),
                rates,
                latency: Percentiles::of(&all),
                p50_rounds_us: samples[i]
                    .iter()
                    .map(|s| Percentiles::of(&s.latency).p50_us)
                    .collect(),
                client_cpu_us: of(|s| s.client_us),
                server_cpu_us: of(|s| s.server_us),
                client_switches_per_kcall: of(|s| s.client_switches),
                server_switches_per_kcall: of(|s| s.server_switches),
                client_switches_rounds: samples[i].iter().map(|s| s.client_switches).collect(),
                moved_per_kcall: moved.as_deref().map(Summary::of),
                moved_rounds: moved,
                tram_ratio,
            }
        })
        .collect()
}

/// Prints a setting's figures, then tram's ratios, then its rounds beside
/// the guest's probe taken before each (`probes`, one a round).
pub(crate) fn print_table(results: &[SystemResult], probes: &[Option<f64>]) {
    println!(
        "| system | calls/s (median) | range | p50 µs | p99 µs | p99.9 µs | max µs | client CPU µs/call | server CPU µs/call | switches per 1k calls (client + server) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        let l = &r.latency;
        println!(
            "| {} | {} | {}–{} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.1} + {:.1} |",
            r.system,
            si(r.rate.median),
            si(r.rate.min),
            si(r.rate.max),
            l.p50_us,
            l.p99_us,
            l.p999_us,
            l.max_us,
            r.client_cpu_us.median,
            r.server_cpu_us.median,
            r.client_switches_per_kcall.median,
            r.server_switches_per_kcall.median
        );
    }
    print_moved(results);
    print_round_p50s(results);
    if !results.iter().any(|r| r.tram_ratio.is_some()) {
        return;
    }
    println!("\n| ratio (per round, then median) | calls/s | range |\n|---|---|---|");
    for r in results {
        if let Some(q) = r.tram_ratio {
            println!(
                "| tram / {} | {:.2}x | {:.2}–{:.2}x |",
                r.system, q.median, q.min, q.max
            );
        }
    }
    print_rounds(results, probes);
}

/// How often each client's callers moved between threads: a call answered
/// on another thread than the caller's call before pulls the caller's
/// state over to that thread's cache (a multi-threaded runtime moves the
/// task that a waker on another worker woke, or that a worker with nothing
/// to do stole).
fn print_moved(results: &[SystemResult]) {
    let moved: Vec<String> = results
        .iter()
        .filter_map(|r| {
            let m = r.moved_per_kcall.as_ref()?;
            Some(format!("{} {:.0}", r.system, m.median))
        })
        .collect();
    if !moved.is_empty() {
        println!(
            "\ncalls per 1k whose caller ran on another thread than for its call before: {}",
            moved.join(", ")
        );
    }
}

/// Each system's p50 as the median of its rounds' (and their range), where
/// it differs from the merged histogram's by more than a tenth: a round far
/// quicker than the others (a client and server that shared one vCPU) makes
/// most of the calls and sets the merged p50 alone.
fn print_round_p50s(results: &[SystemResult]) {
    let apart = results.iter().any(|r| {
        let m = Summary::of(&r.p50_rounds_us).median;
        (m / r.latency.p50_us - 1.0).abs() > 0.1
    });
    if !apart {
        return;
    }
    let each: Vec<String> = results
        .iter()
        .map(|r| {
            let s = Summary::of(&r.p50_rounds_us);
            format!("{} {:.1} ({:.1}–{:.1})", r.system, s.median, s.min, s.max)
        })
        .collect();
    println!(
        "\np50 µs as the median of the rounds' (range), the merged histograms' set by a quicker round: {}",
        each.join(", ")
    );
}

/// Each round of a setting beside the guest's probe taken before it:
/// tram's rate, its client's context switches and callers moved, and its
/// ratios. A round in which the host had moved the vCPUs apart, or tram's
/// two-worker client was in its slow state, stands out here, where the
/// medians hide it.
fn print_rounds(results: &[SystemResult], probes: &[Option<f64>]) {
    let Some(tram) = results.iter().find(|r| r.system == System::Tram) else {
        return;
    };
    let rounds = tram.rates.len();
    if rounds < 2 {
        return;
    }
    let others: Vec<&SystemResult> = results
        .iter()
        .filter(|r| r.system != System::Tram)
        .collect();
    let header: String = others
        .iter()
        .map(|r| format!(" tram / {} |", r.system))
        .collect();
    println!(
        "\n| round | probe ns | tram calls/s | tram client switches per 1k calls | tram callers moved per 1k calls |{header}\n|---|---|---|---|---|{}",
        "---|".repeat(others.len())
    );
    for i in 0..rounds {
        let probe = probes
            .get(i)
            .copied()
            .flatten()
            .map_or("-".into(), |ns| format!("{ns:.0}"));
        let ratios: String = others
            .iter()
            .map(|r| format!(" {:.2}x |", tram.rates[i] / r.rates[i]))
            .collect();
        let moved = tram
            .moved_rounds
            .as_ref()
            .and_then(|m| m.get(i))
            .map_or("-".into(), |m| format!("{m:.0}"));
        println!(
            "| {} | {probe} | {} | {:.1} | {moved} |{ratios}",
            i + 1,
            si(tram.rates[i]),
            tram.client_switches_rounds[i]
        );
    }
}
