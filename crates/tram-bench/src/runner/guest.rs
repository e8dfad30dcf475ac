//! The guest's core-to-core latency: two threads, pinned to CPUs 0 and 1,
//! pass a cache line back and forth. Guests of the same kind differ here
//! more than anywhere else (the host may place two vCPUs on cores sharing
//! a cache, or far apart), and this moves a multi-threaded client's cost
//! per call while the floor's hardly moves. So every run measures it
//! before each round, prints it and records it with the machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Round trips per probe: some 20 to 100 ms.
const TRIPS: u64 = 200_000;

/// Probes taken in this process, in order.
static PROBES: parking_lot::Mutex<Vec<f64>> = parking_lot::Mutex::new(Vec::new());

/// One line of its own, so that the two threads share nothing else.
#[repr(align(128))]
struct Line(AtomicU64);

/// Measures the round trip once, prints it, records it and returns it.
/// Nothing is measured on a machine with fewer than two CPUs to pin to.
pub(crate) fn probe() -> Option<f64> {
    let ns = round_trip_ns()?;
    eprintln!("  core-to-core round trip (CPU 0 to 1 and back): {ns:.0} ns");
    PROBES.lock().push(ns);
    Some(ns)
}

/// Prints the range of the probes taken over the run, after its tables.
pub(crate) fn print_range() {
    let probes = probes();
    let min = probes.iter().copied().fold(f64::INFINITY, f64::min);
    let max = probes.iter().copied().fold(0.0, f64::max);
    if !probes.is_empty() {
        println!(
            "\ncore-to-core round trip over the run: {min:.0}–{max:.0} ns ({} probes)",
            probes.len()
        );
    }
}

/// The probes taken so far, rounded to the nanosecond.
pub(crate) fn probes() -> Vec<f64> {
    PROBES.lock().iter().map(|ns| ns.round()).collect()
}

/// Given up on past this (two threads sharing one CPU would pass the line
/// once per time slice).
const LIMIT: Duration = Duration::from_millis(500);

/// Tells the responder to stop.
const STOP: u64 = u64::MAX;

/// Nanoseconds per round trip of a cache line between CPUs 0 and 1.
fn round_trip_ns() -> Option<f64> {
    let cores = core_affinity::get_core_ids()?;
    let (&a, &b) = (cores.first()?, cores.get(1)?);
    let line = Line(AtomicU64::new(0));
    std::thread::scope(|s| {
        let line = &line;
        s.spawn(move || {
            core_affinity::set_for_current(b);
            for i in 0..TRIPS {
                loop {
                    match line.0.load(Ordering::Acquire) {
                        STOP => return,
                        n if n == 2 * i + 1 => break,
                        _ => std::hint::spin_loop(),
                    }
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        });
        let pinned = s.spawn(move || {
            core_affinity::set_for_current(a);
            let start = Instant::now();
            for i in 0..TRIPS {
                line.0.store(2 * i + 1, Ordering::Release);
                while line.0.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
                if i % 1024 == 0 && start.elapsed() > LIMIT {
                    line.0.store(STOP, Ordering::Release);
                    return None;
                }
            }
            Some(start.elapsed())
        });
        pinned
            .join()
            .ok()
            .flatten()
            .map(|t| t.as_nanos() as f64 / TRIPS as f64)
    })
}
