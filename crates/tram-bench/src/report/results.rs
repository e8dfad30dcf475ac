//! The result files' contents, one type per benchmark: what `compare`,
//! `rate` and `stream` write as JSON and what the charts draw.

use super::{Machine, Percentiles, Summary};
use crate::runner::ProcArgs;
use crate::systems::System;

/// The result file of `compare`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct CompareReport {
    pub(crate) bench: &'static str,
    pub(crate) command: String,
    pub(crate) machine: Machine,
    pub(crate) proc: ProcArgs,
    pub(crate) rounds: usize,
    pub(crate) secs: f64,
    /// Calls each client task kept in flight (1: a task per call).
    pub(crate) calls_per_task: usize,
    /// The timeout every call of tram and tonic carried, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_ms: Option<u64>,
    /// Every call of tram and tonic carried a bearer token.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) bearer: bool,
    pub(crate) settings: Vec<Setting>,
}

/// One payload size and concurrency: every system's figures, and tram's
/// ratios to each of them.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Setting {
    pub(crate) payload: usize,
    pub(crate) concurrency: usize,
    pub(crate) systems: Vec<SystemResult>,
}

/// One system at one setting, over the rounds.
#[derive(Debug, serde::Serialize)]
pub(crate) struct SystemResult {
    pub(crate) system: System,
    /// Calls per second, one per round.
    pub(crate) rates: Vec<f64>,
    pub(crate) rate: Summary,
    /// Latency over every call of every round (the histograms merged).
    pub(crate) latency: Percentiles,
    /// Each round's p50 (µs). Their median counts each round once, as the
    /// ratios do: in the merged histogram a round that made several times
    /// the calls of the others (a client and server that happened to share
    /// one vCPU, at one call in flight) decides the p50 alone.
    pub(crate) p50_rounds_us: Vec<f64>,
    pub(crate) client_cpu_us: Summary,
    pub(crate) server_cpu_us: Summary,
    /// Context switches of each process per thousand calls: the threads
    /// that slept and were woken (or were preempted).
    pub(crate) client_switches_per_kcall: Summary,
    pub(crate) server_switches_per_kcall: Summary,
    /// The client's context switches per thousand calls, one per round
    /// (beside `rates`: a two-worker client's round in its slow state
    /// shows here, where the guest's probe may not).
    pub(crate) client_switches_rounds: Vec<f64>,
    /// Calls per thousand whose caller ran on another thread than for its
    /// call before (the client's runtime moved its task between workers);
    /// absent for the floor, which has no callers.
    pub(crate) moved_per_kcall: Option<Summary>,
    /// The same, one per round.
    pub(crate) moved_rounds: Option<Vec<f64>>,
    /// tram's calls/s over this system's, per round then summarised
    /// (absent for tram itself, or without tram in the run).
    pub(crate) tram_ratio: Option<Summary>,
}

/// The result file of `rate`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct RateReport {
    pub(crate) bench: &'static str,
    pub(crate) command: String,
    pub(crate) machine: Machine,
    pub(crate) proc: ProcArgs,
    pub(crate) connections: usize,
    pub(crate) payload: usize,
    pub(crate) secs: f64,
    pub(crate) rounds: usize,
    /// The guest's stalls, probed before the sweep and after it
    /// (`runner::stalls`): what bounds every system's tail there.
    pub(crate) guest_stalls: Vec<crate::runner::stalls::Stalls>,
    pub(crate) systems: Vec<SystemSweep>,
}

/// One system's sweep.
#[derive(Debug, serde::Serialize)]
pub(crate) struct SystemSweep {
    pub(crate) system: System,
    pub(crate) steps: Vec<Step>,
    /// Highest offered rate it kept up with at p99.9 under 1 ms / 5 ms.
    pub(crate) max_rate_p999_under_1ms: Option<u64>,
    pub(crate) max_rate_p999_under_5ms: Option<u64>,
    /// Highest offered rate such that it and every rate below it passed
    /// (a step over the limit between two under it ends the run here).
    pub(crate) every_rate_p999_under_1ms_to: Option<u64>,
    pub(crate) every_rate_p999_under_5ms_to: Option<u64>,
}

/// One measured point of a sweep.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Step {
    /// Offered calls/s.
    pub(crate) rate: u64,
    /// Calls/s completed inside the measuring window (median of rounds).
    pub(crate) achieved: f64,
    /// Latency from intended send time, all rounds merged.
    pub(crate) latency: Percentiles,
    /// p99.9 per round, µs.
    pub(crate) p999_rounds_us: Vec<f64>,
    pub(crate) client_cpu_us: Summary,
    pub(crate) server_cpu_us: Summary,
    /// How busy client and server kept the machine's CPUs together, as a
    /// share of all of them: (client + server CPU a call) x achieved
    /// calls/s, per round. On two vCPUs the open loop's tail follows it.
    pub(crate) cpus_busy: Summary,
    /// How late the calls began, p99.9 per round in µs, summarised: how
    /// long after its intended send time each call's batch first ran on
    /// the client's runtime. Part of every call's latency that no system
    /// under test has touched yet: the dispatcher's lateness and the
    /// runtime's, both waiting for a CPU.
    pub(crate) started_late_p999_us: Summary,
    /// How late the dispatcher handed the calls over, all rounds merged:
    /// the share of `started_late` that is the bench's own schedule
    /// keeper waking from its sleep, before any runtime or system is
    /// involved. Its p50 is in every call's latency, its p99.9 under
    /// every p99.9.
    pub(crate) dispatched_late: Percentiles,
    /// The same, p99.9 per round in µs, summarised (as
    /// `started_late_p999_us` is).
    pub(crate) dispatched_late_p999_us: Summary,
    /// Calls that failed, all rounds.
    pub(crate) errors: u64,
    /// Whether the system kept up: achieved at least 90% of the offered
    /// rate and p99.9 under 100 ms, in the median round.
    pub(crate) kept_up: bool,
}

/// The result file of `stream`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct StreamReport {
    pub(crate) bench: &'static str,
    pub(crate) command: String,
    pub(crate) machine: Machine,
    pub(crate) proc: ProcArgs,
    pub(crate) size: usize,
    pub(crate) window: u64,
    pub(crate) rounds: usize,
    pub(crate) secs: f64,
    pub(crate) systems: Vec<StreamRow>,
}

/// One system's streaming figures over the rounds.
#[derive(Debug, serde::Serialize)]
pub(crate) struct StreamRow {
    pub(crate) system: System,
    /// Messages per second, one per round.
    pub(crate) rates: Vec<f64>,
    pub(crate) rate: Summary,
    pub(crate) client_cpu_us: Summary,
    pub(crate) server_cpu_us: Summary,
    /// Which floor it is held against, and its rate over the floor's
    /// (per round, then summarised).
    pub(crate) floor: System,
    pub(crate) of_floor: Option<Summary>,
    /// A tram system's rate over protosocket-rpc's, when both ran (per
    /// round, then summarised).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) over_protosocket: Option<Summary>,
}

/// The result file of `fanin`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct FaninReport {
    pub(crate) bench: &'static str,
    pub(crate) command: String,
    pub(crate) machine: Machine,
    pub(crate) proc: ProcArgs,
    pub(crate) client_threads: usize,
    pub(crate) per_connection: usize,
    pub(crate) payload: usize,
    pub(crate) rounds: usize,
    pub(crate) secs: f64,
    pub(crate) settings: Vec<FaninSetting>,
}

/// One number of client connections: every system's figures.
#[derive(Debug, serde::Serialize)]
pub(crate) struct FaninSetting {
    pub(crate) connections: usize,
    pub(crate) systems: Vec<SystemResult>,
}
