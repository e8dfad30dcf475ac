//! The clock every load reads once per call: the CPU's time-stamp counter,
//! scaled to nanoseconds (`quanta`), where the TSC is usable, and the
//! monotonic clock where it is not.
//!
//! A call's latency needs one clock read, and the fastest systems make
//! millions of calls a second: on a guest where the vDSO's
//! `clock_gettime` costs 20 ns, that read is a visible share of a
//! 0.4 µs call's client CPU. Every system's client reads this same clock,
//! so what it costs is still the same for all.

use std::sync::OnceLock;

fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

/// A point in time, for latencies in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp(quanta::Instant);

impl Stamp {
    pub(crate) fn now() -> Stamp {
        Stamp(clock().now())
    }

    /// Nanoseconds from `self` to now.
    pub(crate) fn elapsed(self) -> u64 {
        Stamp::now().nanos_since(self)
    }

    /// Nanoseconds from `earlier` to `self`, 0 if `earlier` is later.
    pub(crate) fn nanos_since(self, earlier: Stamp) -> u64 {
        self.0.saturating_duration_since(earlier.0).as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::Stamp;

    #[test]
    fn stamps_follow_the_monotonic_clock() {
        let (a, std_a) = (Stamp::now(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (b, std_b) = (Stamp::now(), std::time::Instant::now());
        let ours = b.nanos_since(a) as f64;
        let theirs = (std_b - std_a).as_nanos() as f64;
        assert!(b >= a);
        assert_eq!(a.nanos_since(b), 0);
        assert!(
            (ours / theirs - 1.0).abs() < 0.05,
            "{ours} ns against {theirs} ns"
        );
    }
}
