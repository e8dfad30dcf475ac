//! Reading one result file against the targets.
//!
//! Files are read as JSON values rather than into the report types, so
//! that files written by earlier versions of the bench (before a field
//! existed) still read: a missing figure leaves its target unread.

use serde_json::Value;

use crate::report::{Summary, si};

use super::{FileReadings, Reading, Target, Verdict};

/// The readings of one result file of `compare`, `stream` or `rate`.
pub(crate) fn readings(json: &Value) -> FileReadings {
    if let Some(why) = not_default(json) {
        return FileReadings::LeftOut(why);
    }
    let readings = match json.get("bench").and_then(Value::as_str) {
        Some("compare") => compare(json),
        Some("stream") => stream(json),
        Some("rate") => rate(json),
        _ => return FileReadings::LeftOut("not a result file of compare, stream or rate".into()),
    };
    if readings.is_empty() {
        return FileReadings::LeftOut("reads none of the targets".into());
    }
    FileReadings::Counted(readings)
}

/// Why a run is not on the default setting, or not from the release
/// build; `None` when it is both. A file from before the bench recorded
/// its build counts as release, the only build it had.
fn not_default(json: &Value) -> Option<String> {
    let Some(proc) = json.get("proc") else {
        return Some("no process setting recorded".into());
    };
    let workers = proc.get("workers").and_then(Value::as_u64);
    let client_workers = proc.get("client_workers").and_then(Value::as_u64);
    let flag = |name| proc.get(name).and_then(Value::as_bool).unwrap_or(false);
    let (pinned, one_cpu) = (flag("pin"), flag("one_cpu"));
    let neighbours = proc.get("neighbours").and_then(Value::as_u64).unwrap_or(0);
    if workers != Some(2) || client_workers.is_some() || pinned || one_cpu || neighbours > 0 {
        return Some(format!(
            "not the default setting (workers {}, client workers {}, pinned {pinned}, one CPU {one_cpu}, neighbours {neighbours})",
            workers.map_or("?".into(), |w| w.to_string()),
            client_workers.map_or("as the server's".into(), |w| w.to_string()),
        ));
    }
    if let Some(ms) = json.get("timeout_ms").and_then(Value::as_u64) {
        return Some(format!(
            "not the default setting (every call with a {ms} ms timeout)"
        ));
    }
    if json.get("bearer").and_then(Value::as_bool) == Some(true) {
        return Some("not the default setting (every call with a bearer token)".into());
    }
    match json.pointer("/machine/build").and_then(Value::as_str) {
        None | Some("release") => None,
        Some(build) => Some(format!("the {build} build")),
    }
}

/// What names a guest, gathered over a directory's counted runs: the
/// floors' figures (2-vCPU guests of one kind differ most in them) and
/// what the machine said of itself.
#[derive(Debug, Default)]
pub(crate) struct Guest {
    machine: Option<String>,
    floor_256: Vec<f64>,
    floor_p50_1: Vec<f64>,
    floor_push: Vec<f64>,
    probe_ns: Vec<f64>,
}

impl Guest {
    /// Adds what `json`, a counted run's file, says of the guest.
    pub(crate) fn add(&mut self, json: &Value) {
        if self.machine.is_none() {
            let field = |k: &str| json.pointer(&format!("/machine/{k}"));
            let text = |k: &str| field(k).and_then(Value::as_str);
            if let (Some(cpu), Some(kernel)) = (text("cpu"), text("kernel")) {
                let cc = text("congestion_control").unwrap_or("?");
                // Older result files name the CPU only by its model name.
                let id = |k: &str| field(k).and_then(Value::as_u64);
                let model = match (id("cpu_family"), id("cpu_model")) {
                    (Some(family), Some(model)) => format!(" (family {family}, model {model})"),
                    _ => String::new(),
                };
                let idle = match (
                    text("cpuidle/driver"),
                    field("cpuidle/halt_poll_ns").and_then(Value::as_u64),
                ) {
                    (Some(driver), Some(0)) => format!(", {driver} idle halting at once"),
                    (Some(driver), Some(ns)) => {
                        format!(", {driver} idle polling {} µs", ns.div_ceil(1000))
                    }
                    (Some(driver), None) => format!(", {driver} idle"),
                    (None, _) => String::new(),
                };
                self.machine = Some(format!("{cpu}{model}, kernel {kernel}, {cc}{idle}"));
            }
        }
        if let Some(probes) = json
            .pointer("/machine/core_to_core_ns")
            .and_then(Value::as_array)
        {
            self.probe_ns
                .extend(probes.iter().filter_map(Value::as_f64));
        }
        let settings = json.get("settings").and_then(Value::as_array);
        for setting in settings.into_iter().flatten() {
            let floor = setting.get("systems").and_then(|s| system(s, "floor"));
            let (payload, c) = (num(setting, "/payload"), num(setting, "/concurrency"));
            match (floor, payload, c) {
                (Some(f), Some(16.0), Some(256.0)) => self.floor_256.extend(num(f, "/rate/median")),
                (Some(f), Some(16.0), Some(1.0)) => self.floor_p50_1.extend(p50(f)),
                _ => {}
            }
        }
        if json.get("bench").and_then(Value::as_str) == Some("stream") {
            let push = json.get("systems").and_then(|s| system(s, "floor-push"));
            self.floor_push
                .extend(push.and_then(|p| num(p, "/rate/median")));
        }
    }

    /// One line, or `None` when no run said anything of the guest.
    pub(crate) fn line(&self) -> Option<String> {
        fn range(v: &[f64], f: impl Fn(f64) -> String) -> Option<String> {
            let lo = v.iter().copied().reduce(f64::min)?;
            let hi = v.iter().copied().reduce(f64::max)?;
            Some(if lo == hi {
                f(lo)
            } else {
                format!("{}–{}", f(lo), f(hi))
            })
        }
        let mut parts = Vec::new();
        parts.extend(self.machine.clone());
        parts.extend(
            range(&self.floor_256, si).map(|r| format!("the floor {r} calls/s at 256 in flight")),
        );
        parts.extend(
            range(&self.floor_p50_1, |x| format!("{x:.1}")).map(|r| format!("p50 {r} µs at one")),
        );
        parts.extend(range(&self.floor_push, si).map(|r| format!("floor-push {r} messages/s")));
        parts.extend(
            range(&self.probe_ns, |x| format!("{x:.0}")).map(|r| format!("core-to-core {r} ns")),
        );
        (!parts.is_empty()).then(|| format!("Guest: {}.", parts.join("; ")))
    }
}

fn num(v: &Value, pointer: &str) -> Option<f64> {
    v.pointer(pointer).and_then(Value::as_f64)
}

/// A system's p50 at one setting: the median of its rounds' p50s, or in
/// files written before they were recorded, the merged histogram's.
fn p50(system: &Value) -> Option<f64> {
    let rounds: Vec<f64> = system
        .get("p50_rounds_us")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    if rounds.is_empty() {
        return num(system, "/latency/p50_us");
    }
    Some(Summary::of(&rounds).median)
}

/// A summary's median, minimum and maximum.
fn summary_of(summary: &Value) -> Option<(f64, f64, f64)> {
    Some((
        num(summary, "/median")?,
        num(summary, "/min")?,
        num(summary, "/max")?,
    ))
}

/// A summary's median and range, as `4.02x (2.89–5.30x)`.
fn ratio_text(summary: &Value) -> Option<(f64, String)> {
    let (median, min, max) = summary_of(summary)?;
    Some((median, format!("{median:.2}x ({min:.2}–{max:.2}x)")))
}

/// The entry of `system` in a list of systems' results.
fn system<'a>(systems: &'a Value, name: &str) -> Option<&'a Value> {
    systems
        .as_array()?
        .iter()
        .find(|s| s.get("system").and_then(Value::as_str) == Some(name))
}

fn compare(json: &Value) -> Vec<Reading> {
    let mut out = Vec::new();
    let Some(settings) = json.get("settings").and_then(Value::as_array) else {
        return out;
    };
    for setting in settings {
        let payload = num(setting, "/payload").unwrap_or(0.0) as u64;
        let c = num(setting, "/concurrency").unwrap_or(0.0) as u64;
        let Some(systems) = setting.get("systems") else {
            continue;
        };
        let Some(tram) = system(systems, "tram") else {
            continue;
        };
        match (payload, c) {
            (16, 256) => closed_256(systems, tram, &mut out),
            (16, 1) => {
                if let (Some(t), Some(f)) = (p50(tram), system(systems, "floor").and_then(p50)) {
                    let least = least_client(systems, |l| Some(format!("{:.3}x", p50(l)? / f)));
                    out.push(Reading {
                        target: Target::C1Latency,
                        detail: None,
                        text: format!("{:.3}x ({t:.1} against {f:.1} µs){least}", t / f),
                        value: Some(t / f),
                        verdict: Verdict::at_most(t / f, 1.1),
                    });
                }
            }
            (16384, c) => {
                if let Some((median, text)) = system(systems, "protosocket")
                    .and_then(|p| p.get("tram_ratio"))
                    .and_then(ratio_text)
                {
                    out.push(Reading {
                        target: Target::Payload16k,
                        detail: Some(format!("C={c}")),
                        text,
                        value: Some(median),
                        verdict: Verdict::at_least(median, 1.5),
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// The four targets at 256 calls in flight.
fn closed_256(systems: &Value, tram: &Value, out: &mut Vec<Reading>) {
    for (peer, target, at_least) in [
        ("protosocket", Target::C256Protosocket, 3.0),
        ("tonic", Target::C256Tonic, 30.0),
    ] {
        if let Some((median, text)) = system(systems, peer)
            .and_then(|p| p.get("tram_ratio"))
            .and_then(ratio_text)
        {
            out.push(Reading {
                target,
                detail: None,
                text,
                value: Some(median),
                verdict: Verdict::at_least(median, at_least),
            });
        }
    }
    if let (Some(client), Some(server)) = (
        num(tram, "/client_cpu_us/median"),
        num(tram, "/server_cpu_us/median"),
    ) {
        let cpu = client + server;
        let least = least_client(systems, |l| {
            Some(format!("client {:.2} µs", num(l, "/client_cpu_us/median")?))
        });
        out.push(Reading {
            target: Target::C256Cpu,
            detail: None,
            text: format!("{cpu:.2} µs ({client:.2} + {server:.2}){least}"),
            value: Some(cpu),
            verdict: Verdict::at_most(cpu, 1.2),
        });
    }
    if let Some((median, below, above, rounds)) = spread(tram) {
        let within = below >= -0.10 && above <= 0.10;
        // The floor's own rounds say whether the guest held steady: where
        // they spread as far, the rounds measured the machine.
        let floor = system(systems, "floor")
            .and_then(spread)
            .map(|(_, b, a, _)| format!("; the floor's {}", percents(b, a)))
            .unwrap_or_default();
        let least = least_client(systems, |l| {
            let (_, b, a, _) = spread(l)?;
            Some(percents(b, a))
        });
        out.push(Reading {
            target: Target::C256Spread,
            detail: None,
            text: format!(
                "{} of {:.0}k ({rounds} rounds){floor}{least}",
                percents(below, above),
                median / 1e3,
            ),
            // The farther side: what decides the verdict.
            value: Some(above.max(-below)),
            verdict: if within {
                Verdict::Met
            } else {
                Verdict::NotMet
            },
        });
    }
}

/// A spread's two ends as percentages: "-5.0% / +8.0%".
fn percents(below: f64, above: f64) -> String {
    format!("{:+.1}% / {:+.1}%", below * 100.0, above * 100.0)
}

/// What the least RPC client (`floor-tasks`), when the run has it, read
/// by `read` says beside tram's reading: how much of it any client whose
/// calls are tasks would pay. Never part of the verdict.
fn least_client(systems: &Value, read: impl Fn(&Value) -> Option<String>) -> String {
    system(systems, "floor-tasks")
        .and_then(read)
        .map(|text| format!("; floor-tasks {text}"))
        .unwrap_or_default()
}

/// A system's median rate, its slowest and quickest rounds' distance from
/// it (fractions: -0.1 is 10% below) and how many rounds there were.
fn spread(system: &Value) -> Option<(f64, f64, f64, usize)> {
    let rates: Vec<f64> = system
        .get("rates")?
        .as_array()?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let median = num(system, "/rate/median")?;
    let lo = rates.iter().copied().reduce(f64::min)?;
    let hi = rates.iter().copied().reduce(f64::max)?;
    Some((median, lo / median - 1.0, hi / median - 1.0, rates.len()))
}

fn stream(json: &Value) -> Vec<Reading> {
    let mut out = Vec::new();
    let Some(rpc) = json.get("systems").and_then(|s| system(s, "tram-rpc")) else {
        return out;
    };
    let floor_push = json
        .get("systems")
        .and_then(|s| system(s, "floor-push"))
        .is_some();
    let of_floor = rpc.get("of_floor").filter(|_| floor_push);
    if let Some((median, min, max)) = of_floor.and_then(summary_of) {
        out.push(Reading {
            target: Target::StreamFloor,
            detail: None,
            text: format!(
                "{:.0}% ({:.0}–{:.0}%)",
                median * 100.0,
                min * 100.0,
                max * 100.0
            ),
            value: Some(median),
            verdict: Verdict::at_least(median, 0.25),
        });
    }
    if let Some((median, text)) = rpc.get("over_protosocket").and_then(ratio_text) {
        out.push(Reading {
            target: Target::StreamProtosocket,
            detail: None,
            text,
            value: Some(median),
            verdict: Verdict::at_least(median, 5.0),
        });
    }
    out
}

fn rate(json: &Value) -> Vec<Reading> {
    let mut out = Vec::new();
    let Some(systems) = json.get("systems") else {
        return out;
    };
    let (Some(tram), Some(peer)) = (system(systems, "tram"), system(systems, "protosocket")) else {
        return out;
    };
    for (field, target, every_below) in [
        ("max_rate_p999_under_5ms", Target::Open5ms, None),
        (
            "every_rate_p999_under_5ms_to",
            Target::Open5msEvery,
            Some(5_000.0),
        ),
        ("max_rate_p999_under_1ms", Target::Open1ms, None),
        (
            "every_rate_p999_under_1ms_to",
            Target::Open1msEvery,
            Some(1_000.0),
        ),
    ] {
        let Some((mut text, value, verdict)) = open_loop(tram, peer, field) else {
            continue;
        };
        if let Some(note) = every_below.and_then(|limit| dispatcher_at_first_miss(tram, limit)) {
            text.push_str(&note);
        }
        out.push(Reading {
            target,
            detail: None,
            text,
            value,
            verdict,
        });
    }
    out
}

/// Where tram's run of rates under `limit_us` ended, the bench's own share
/// of that step's tail: the dispatcher's p99.9 lateness (median of rounds,
/// as the step's p99.9 is), when the file records it. A dispatcher late by as much as the limit leaves no system
/// the criterion there. Context: never part of the verdict.
fn dispatcher_at_first_miss(tram: &Value, limit_us: f64) -> Option<String> {
    let missed = tram.get("steps")?.as_array()?.iter().find(|step| {
        let rounds: Vec<f64> = step
            .get("p999_rounds_us")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        // The median the sweep itself judged the step by.
        Summary::of(&rounds).median >= limit_us
    })?;
    let rate = num(missed, "/rate")?;
    let late = num(missed, "/dispatched_late_p999_us/median")?;
    Some(format!(
        "; at {:.0}k/s, where tram first missed it, the dispatcher's own p99.9 {late:.0} µs",
        rate / 1e3
    ))
}

/// One open-loop criterion: tram's rate against protosocket-rpc's. When
/// protosocket-rpc held no rate, it held less than the sweep's first, so
/// tram's lead is at least its own rate over that one (the figure given
/// for the tally's range is then that least lead).
fn open_loop(tram: &Value, peer: &Value, field: &str) -> Option<(String, Option<f64>, Verdict)> {
    // Absent from files written before the field was: nothing to read.
    let (t, p) = (tram.get(field)?, peer.get(field)?);
    let first = peer.pointer("/steps/0/rate").and_then(Value::as_f64);
    let k = |r: f64| format!("{:.0}k/s", r / 1e3);
    Some(match (t.as_f64(), p.as_f64()) {
        (Some(t), Some(p)) => (
            format!("{:.2}x ({} against {})", t / p, k(t), k(p)),
            Some(t / p),
            Verdict::at_least(t / p, 3.0),
        ),
        (Some(t), None) => match first {
            Some(first) if t / first >= 3.0 => (
                format!(
                    "at least {:.0}x ({} against none from {})",
                    t / first,
                    k(t),
                    k(first)
                ),
                Some(t / first),
                Verdict::Met,
            ),
            _ => (format!("{} against none", k(t)), None, Verdict::Undecided),
        },
        (None, Some(p)) => (format!("none against {}", k(p)), None, Verdict::NotMet),
        (None, None) => ("neither held a rate".into(), None, Verdict::Undecided),
    })
}

#[cfg(test)]
mod tests;
