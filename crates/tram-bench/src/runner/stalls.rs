//! The guest's own stalls: one thread per CPU, pinned, reads the clock in
//! a loop and notes every gap over a millisecond, when the host ran
//! something else on that vCPU (or the guest's kernel did). No system's
//! tail can be shorter than the guest's stalls: a call waiting on a
//! thread of a stopped vCPU waits out the stall. If the time past a
//! millisecond of such gaps is over 0.1% of a CPU's, a p99.9 under 1 ms
//! depends on which threads the stalls stop, whatever runs there, and
//! `rate` says so.

use std::time::{Duration, Instant};

/// Gaps longer than this count as stalls.
const STALL: Duration = Duration::from_millis(1);

/// One CPU's stalls over a probe.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct CpuStalls {
    pub(crate) cpu: usize,
    /// Gaps over a millisecond.
    pub(crate) stalls: u64,
    /// The longest gap, in milliseconds.
    pub(crate) longest_ms: f64,
    /// The time past the first millisecond of each stall, as a share of
    /// the probe's (a call arriving in that part waits over 1 ms).
    pub(crate) past_1ms_share: f64,
}

/// Every CPU's stalls over one probe of `secs`.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Stalls {
    pub(crate) secs: f64,
    pub(crate) cpus: Vec<CpuStalls>,
}

impl Stalls {
    /// Spins a pinned thread on every CPU for `window`; `None` where the
    /// CPUs cannot be listed or pinned to.
    pub(crate) fn probe(window: Duration) -> Option<Stalls> {
        let cores = core_affinity::get_core_ids()?;
        let cpus = std::thread::scope(|s| {
            let threads: Vec<_> = cores
                .iter()
                .map(|&core| {
                    s.spawn(move || {
                        core_affinity::set_for_current(core).then(|| watch(core.id, window))
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().ok().flatten())
                .collect::<Option<Vec<_>>>()
        })?;
        Some(Stalls {
            secs: window.as_secs_f64(),
            cpus,
        })
    }

    /// The largest share of any CPU's time spent past a millisecond of a
    /// stall.
    pub(crate) fn worst_share(&self) -> f64 {
        self.cpus
            .iter()
            .map(|c| c.past_1ms_share)
            .fold(0.0, f64::max)
    }

    /// One line for the run's log.
    pub(crate) fn line(&self) -> String {
        let cpus: Vec<String> = self
            .cpus
            .iter()
            .map(|c| {
                format!(
                    "CPU {} {} over 1 ms (longest {:.1} ms, {:.2}% of the time past 1 ms)",
                    c.cpu,
                    c.stalls,
                    c.longest_ms,
                    c.past_1ms_share * 100.0
                )
            })
            .collect();
        format!(
            "guest stalls ({:.0} s, every CPU busy): {}",
            self.secs,
            cpus.join("; ")
        )
    }
}

/// Reads the clock on `cpu` until `window` has passed, noting the gaps.
fn watch(cpu: usize, window: Duration) -> CpuStalls {
    let start = Instant::now();
    let mut last = start;
    let (mut stalls, mut longest, mut past) = (0, Duration::ZERO, Duration::ZERO);
    while last - start < window {
        let now = Instant::now();
        let gap = now - last;
        if gap > STALL {
            stalls += 1;
            longest = longest.max(gap);
            past += gap - STALL;
        }
        last = now;
    }
    CpuStalls {
        cpu,
        stalls,
        longest_ms: longest.as_secs_f64() * 1e3,
        past_1ms_share: past.as_secs_f64() / (last - start).as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_covers_every_cpu_and_its_shares_are_fractions() {
        let Some(s) = Stalls::probe(Duration::from_millis(50)) else {
            return;
        };
        assert_eq!(s.cpus.len(), core_affinity::get_core_ids().unwrap().len());
        for c in &s.cpus {
            assert!((0.0..=1.0).contains(&c.past_1ms_share), "{c:?}");
            assert_eq!(c.stalls == 0, c.longest_ms == 0.0, "{c:?}");
        }
        assert!(s.line().starts_with("guest stalls"));
    }
}
