//! Peak-EWMA: an endpoint's latency as a moving average that jumps to any
//! sample above it at once and decays toward newer, lower ones with time
//! (Finagle's and Linkerd's load metric). Read, it decays toward zero
//! since the last sample, so that an endpoint penalised for failing, or
//! slow once, is tried again after a while rather than starved of the
//! samples that would clear it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Nanoseconds since the process's first use of this clock: one
/// subtraction per pick, shared by every endpoint.
pub(crate) fn nanos(now: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| Instant::now() - Duration::from_secs(1));
    now.saturating_duration_since(epoch).as_nanos() as u64
}

/// A failed call counts as a sample this slow at least: fast failures must
/// not make an endpoint look attractive.
pub(crate) const FAILURE_PENALTY_NS: u64 = 250_000_000;

/// The average, in nanoseconds, and when it was last updated. Updated by
/// the connections' readers, read by every caller picking an endpoint;
/// the two words are not updated together, which only blurs a sample.
#[derive(Debug)]
pub(crate) struct PeakEwma {
    /// Nanoseconds, as `f64` bits.
    nanos: AtomicU64,
    /// When it was last updated (see [`nanos`]).
    stamp: AtomicU64,
    /// The decay's time constant, in nanoseconds.
    tau: f64,
    /// A sample has been taken: until then the value is the prior.
    measured: AtomicBool,
}

impl PeakEwma {
    /// Starts at `initial` (an endpoint nothing is known about is assumed
    /// this fast), decaying with time constant `tau`.
    pub(crate) fn new(initial: Duration, tau: Duration, now: Instant) -> PeakEwma {
        PeakEwma {
            nanos: AtomicU64::new((initial.as_nanos() as f64).to_bits()),
            stamp: AtomicU64::new(nanos(now)),
            tau: tau.as_nanos().max(1) as f64,
            measured: AtomicBool::new(false),
        }
    }

    /// The average as of `now_ns` (see [`nanos`]), decayed since the last
    /// sample.
    #[inline]
    pub(crate) fn get(&self, now_ns: u64) -> f64 {
        let value = f64::from_bits(self.nanos.load(Ordering::Relaxed));
        let elapsed = now_ns.saturating_sub(self.stamp.load(Ordering::Relaxed));
        value * decay(elapsed as f64 / self.tau)
    }

    /// A call took `rtt_ns`, seen at `now_ns` (see [`nanos`]).
    pub(crate) fn observe(&self, rtt_ns: u64, now_ns: u64) {
        let sample = rtt_ns as f64;
        let last = self.stamp.swap(now_ns, Ordering::Relaxed);
        let current = f64::from_bits(self.nanos.load(Ordering::Relaxed));
        // The prior is a guess, not a sample: the first sample replaces it.
        // Blended in, a prior slower than the fleet would keep a new
        // endpoint looking slow for a time constant (a second by default),
        // starved of the calls that would correct it.
        let first = !self.measured.swap(true, Ordering::Relaxed);
        let next = if first || sample > current {
            sample
        } else {
            let w = decay(now_ns.saturating_sub(last) as f64 / self.tau);
            current * w + sample * (1.0 - w)
        };
        self.nanos.store(next.to_bits(), Ordering::Relaxed);
    }
}

/// The weight left after `x` time constants: `1 / (1 + x + x²/2)`, which
/// follows `e^-x` closely where samples come often (small `x`) and costs a
/// division where `exp` costs a call; past a few time constants it decays
/// more slowly than `e^-x`, which only means an idle endpoint's estimate
/// keeps a trace of its past a little longer.
#[inline]
fn decay(x: f64) -> f64 {
    1.0 / (1.0 + x + 0.5 * x * x)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn jumps_to_a_peak_and_decays_toward_lower_samples() {
        let t0 = Instant::now();
        let at = |d: Duration| nanos(t0 + d);
        let e = PeakEwma::new(MS, Duration::from_secs(1), t0);
        e.observe(100_000_000, at(Duration::ZERO));
        assert!(
            (e.get(at(Duration::ZERO)) - 100e6).abs() < 1.0,
            "a peak is taken at once"
        );
        // Lower samples pull it down with time, not at once.
        e.observe(1_000_000, at(10 * MS));
        let after_10ms = e.get(at(10 * MS));
        assert!(after_10ms > 90e6, "{after_10ms}");
        for i in 1..=50 {
            e.observe(1_000_000, at(10 * MS + i * 100 * MS));
        }
        let later = e.get(at(5010 * MS));
        assert!(later < 2e6, "{later}");
    }

    #[test]
    fn the_first_sample_replaces_the_prior() {
        let t0 = Instant::now();
        let at = |d: Duration| nanos(t0 + d);
        let e = PeakEwma::new(MS, Duration::from_secs(1), t0);
        e.observe(40_000, at(MS));
        assert!((e.get(at(MS)) - 40e3).abs() < 1.0, "{}", e.get(at(MS)));
        // From then on lower samples are blended in with time.
        e.observe(10_000, at(2 * MS));
        let blended = e.get(at(2 * MS));
        assert!(blended > 39e3, "{blended}");
    }

    #[test]
    fn unread_it_decays_toward_zero() {
        let t0 = Instant::now();
        let e = PeakEwma::new(MS, Duration::from_secs(1), t0);
        e.observe(FAILURE_PENALTY_NS, nanos(t0));
        let soon = e.get(nanos(t0 + 100 * MS));
        let later = e.get(nanos(t0 + 3000 * MS));
        assert!(soon > 200e6 && later < 0.15 * 250e6, "{soon} {later}");
    }
}
