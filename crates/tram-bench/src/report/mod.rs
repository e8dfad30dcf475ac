//! What the benchmarks report: statistics over rounds, latency
//! percentiles, the machine, result files (`results`) and their SVG charts
//! (`chart`).

pub(crate) mod chart;
pub(crate) mod results;

use anyhow::Context;

use crate::runner::latency::Hist;

/// The machine a run was taken on, for the result files.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Machine {
    pub(crate) cpu: String,
    /// The CPU's family and model as `/proc/cpuinfo` gives them: a
    /// hypervisor may name every EPYC `AMD EPYC`, and two models of one
    /// family (guests of "the same kind") differ in what their copies and
    /// wake-ups cost.
    pub(crate) cpu_family: Option<u32>,
    pub(crate) cpu_model: Option<u32>,
    pub(crate) cpus: usize,
    pub(crate) kernel: String,
    /// The kernel's TCP congestion control for new connections: BBR paces
    /// its sends with timers (on loopback, with no `fq` qdisc to do it), which
    /// bounds how fast large messages move; see `runner::congestion_control`.
    pub(crate) congestion_control: String,
    /// What idle CPUs do (`runner::idle`): on a guest whose vCPUs halt at
    /// once, a wake-up goes through the host, and one call in flight
    /// measures that more than any system.
    pub(crate) cpuidle: crate::runner::idle::Idle,
    /// The cargo profile the bench was built with: `release` (the
    /// default), `lto` (`cargo run --profile lto`), or `debug` in tests.
    pub(crate) build: &'static str,
    /// The commit the bench and the systems it measures were built from,
    /// `-modified` when their sources differed from it (`build.rs`).
    pub(crate) source: &'static str,
    /// Round trips of a cache line between CPUs 0 and 1, in ns, one per
    /// round as the run went (`runner::guest`): what tells two guests of
    /// the same kind apart.
    pub(crate) core_to_core_ns: Vec<f64>,
    /// How much slower the CPU's `rep movsb` (the kernel's copy to and
    /// from user memory) copies 16 KiB to 16 bytes past its source modulo
    /// 4 KiB than to 2 KiB past it (`runner::movsb`): about 1, or 25 and
    /// more on CPUs whose large-message figures depend on where buffers
    /// fall in their pages.
    pub(crate) movsb_short_distance_slowdown: Option<f64>,
    /// The same at 8 bytes past: the family-25 EPYC of model 17 is 20 to 30
    /// times slower from 1 to 15 bytes and 2 to 4 times from 16 to 31, so
    /// the field above understates its quirk (`runner::movsb`).
    pub(crate) movsb_8_byte_distance_slowdown: Option<f64>,
}

impl Machine {
    pub(crate) fn this() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo_field(&cpuinfo, "model name").unwrap_or("unknown");
        let movsb = crate::runner::movsb::slowdown();
        Machine {
            cpu: cpu.to_string(),
            cpu_family: cpuinfo_field(&cpuinfo, "cpu family").and_then(|v| v.parse().ok()),
            cpu_model: cpuinfo_field(&cpuinfo, "model").and_then(|v| v.parse().ok()),
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |k| k.trim().to_string()),
            congestion_control: crate::runner::congestion_control(),
            cpuidle: crate::runner::idle::Idle::this(),
            build: env!("TRAM_BENCH_PROFILE"),
            source: env!("TRAM_BENCH_SOURCE"),
            core_to_core_ns: crate::runner::guest::probes(),
            movsb_short_distance_slowdown: movsb.map(|s| s.at_16),
            movsb_8_byte_distance_slowdown: movsb.map(|s| s.at_8),
        }
    }
}

/// The value of `key` in the first processor's block of `/proc/cpuinfo`
/// (`key\t: value`), the key matched whole: `model` is not `model name`.
fn cpuinfo_field<'a>(cpuinfo: &'a str, key: &str) -> Option<&'a str> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// Writes `value` as pretty JSON to `dir/name`, creating `dir`; returns
/// the path written.
pub(crate) fn write_json<T: serde::Serialize>(
    dir: &std::path::Path,
    name: &str,
    value: &T,
) -> anyhow::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    let json = serde_json::to_string_pretty(value)?;
    std::fs::write(&path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Latency percentiles of a histogram, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub(crate) struct Percentiles {
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
    pub(crate) max_us: f64,
    pub(crate) count: u64,
}

impl Percentiles {
    pub(crate) fn of(h: &Hist) -> Percentiles {
        let us = |v: u64| v as f64 / 1e3;
        Percentiles {
            p50_us: us(h.value_at_quantile(0.5)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
            count: h.len(),
        }
    }
}

/// Median and range of a set of measurements.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Summary {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Summary {
    pub(crate) fn of(values: &[f64]) -> Summary {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Summary {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len().is_multiple_of(2) {
            (v[mid - 1] + v[mid]) / 2.0
        } else {
            v[mid]
        };
        Summary {
            median,
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// The ratio of two systems' rates taken round by round (the same
    /// round, the closest conditions), summarised.
    pub(crate) fn of_ratios(a: impl Iterator<Item = f64>, b: impl Iterator<Item = f64>) -> Summary {
        Summary::of(&a.zip(b).map(|(a, b)| a / b).collect::<Vec<_>>())
    }
}

/// Formats a rate compactly: 8.31M, 412k, 950.
pub(crate) fn si(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.0}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_median_and_range() {
        let s = Summary::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]);
        assert_eq!(s.median, 2.5);
        assert!(Summary::of(&[]).median.is_nan());
    }

    #[test]
    fn cpuinfo_fields_match_whole_keys() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\
                       model\t\t: 17\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\nmodel\t\t: 99\n";
        assert_eq!(cpuinfo_field(cpuinfo, "model name"), Some("AMD EPYC"));
        assert_eq!(cpuinfo_field(cpuinfo, "model"), Some("17"));
        assert_eq!(cpuinfo_field(cpuinfo, "cpu family"), Some("25"));
        assert_eq!(cpuinfo_field(cpuinfo, "stepping"), None);
        assert_eq!(cpuinfo_field("", "model"), None);
    }

    #[test]
    fn si_formats() {
        assert_eq!(si(8_310_000.0), "8.31M");
        assert_eq!(si(412_400.0), "412k");
        assert_eq!(si(950.0), "950");
    }
}
