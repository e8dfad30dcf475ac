//! What the guest's idle CPUs do: halt at once, or poll for a while first.
//!
//! At one call in flight nearly all of a call's latency is the wake-up of
//! the thread that waits for it, and a wake-up on a CPU that has halted
//! goes through the host: on the 2-vCPU guests of issue 19 that took every
//! system's p50 from about 20 µs (idle CPUs polling for 200 µs first) to
//! about 60 (halting at once; bench log, the ninety-third session). Like
//! the congestion control, it names the guest, so every run records it.

use std::path::Path;

/// The kernel's idle policy, as sysfs gives it (`None` where it does not).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Idle {
    /// The cpuidle driver (`haltpoll` on KVM-style guests, `intel_idle` or
    /// `acpi_idle` on most hosts).
    pub(crate) driver: Option<String>,
    /// The cpuidle governor.
    pub(crate) governor: Option<String>,
    /// How long an idle vCPU polls before it halts, under `haltpoll`
    /// (`guest_halt_poll_ns`; 0: it halts at once).
    pub(crate) halt_poll_ns: Option<u64>,
}

impl Idle {
    /// This machine's.
    pub(crate) fn this() -> Idle {
        Idle::under(Path::new("/sys"))
    }

    /// The policy described by a sysfs tree rooted at `sys`.
    fn under(sys: &Path) -> Idle {
        let read = |rel: &str| {
            std::fs::read_to_string(sys.join(rel))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        Idle {
            driver: read("devices/system/cpu/cpuidle/current_driver"),
            governor: read("devices/system/cpu/cpuidle/current_governor")
                .or_else(|| read("devices/system/cpu/cpuidle/current_governor_ro")),
            halt_poll_ns: read("module/haltpoll/parameters/guest_halt_poll_ns")
                .and_then(|s| s.parse().ok()),
        }
    }

    /// For a run's banner: set only when idle CPUs poll before halting,
    /// which is not how the guests of the docs' figures run.
    pub(crate) fn polling(&self) -> Option<String> {
        match self.halt_poll_ns {
            Some(ns) if ns > 0 => Some(format!(
                "idle CPUs poll {} µs before halting",
                ns.div_ceil(1000)
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (rel, content) in files {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        dir
    }

    #[test]
    fn a_haltpoll_guest_that_halts_at_once() {
        let sys = tree(&[
            ("devices/system/cpu/cpuidle/current_driver", "haltpoll\n"),
            ("devices/system/cpu/cpuidle/current_governor", "haltpoll\n"),
            ("module/haltpoll/parameters/guest_halt_poll_ns", "0\n"),
        ]);
        let idle = Idle::under(sys.path());
        assert_eq!(
            idle,
            Idle {
                driver: Some("haltpoll".into()),
                governor: Some("haltpoll".into()),
                halt_poll_ns: Some(0),
            }
        );
        assert_eq!(idle.polling(), None);
    }

    #[test]
    fn a_guest_that_polls_says_so_in_the_banner() {
        let sys = tree(&[("module/haltpoll/parameters/guest_halt_poll_ns", "200000\n")]);
        let idle = Idle::under(sys.path());
        assert_eq!(idle.halt_poll_ns, Some(200_000));
        assert_eq!(
            idle.polling().as_deref(),
            Some("idle CPUs poll 200 µs before halting")
        );
    }

    #[test]
    fn a_host_without_cpuidle_records_nothing() {
        let sys = tree(&[("devices/system/cpu/cpuidle/current_governor_ro", "menu\n")]);
        let idle = Idle::under(sys.path());
        assert_eq!(
            idle,
            Idle {
                driver: None,
                governor: Some("menu".into()),
                halt_poll_ns: None,
            }
        );
        assert_eq!(idle.polling(), None);
    }
}
