//! `targets`: sets the result files of one or more suites of runs against
//! the performance targets tram holds itself to (issue 19), and says of
//! each whether it was met, run by run.
//!
//! A directory is searched, and the directories in it (a suite's runs,
//! one each; `--deep` goes further down), for the files `compare`,
//! `stream` and `rate` write (`compare.json`, `stream.json`, `rate.json`).
//! Only runs on the default setting count (two workers a process,
//! unpinned, no neighbours) and only from the release build: what a user
//! who reruns the bench gets. Every other run, and a file that is not
//! JSON, is listed as left out, with why. Given several directories
//! (several sessions, say), it ends with how many readings met each
//! target and the lowest and highest of their figures.
//!
//! Each directory's table is headed by its guest, named by the floors'
//! figures in its runs (the floor's calls/s at 256 in flight and p50 at
//! one, floor-push's messages/s) and the core-to-core probe: what tells
//! two guests of one kind apart.
//!
//! The readings are those the bench prints itself: ratios taken round by
//! round, then their median; CPU a call as the medians of client and
//! server; a p50 as the median of the rounds' p50s (the merged
//! histogram's in files from before those were recorded, where a round
//! several times quicker than the others could set it alone). Where a run has the
//! floor or the least RPC client (`floor-tasks`) beside tram, their own
//! figures follow tram's reading (the floor's spread; the least client's
//! spread, client CPU and p50 over the floor's), as context that never
//! changes a verdict; so does, in the open loop's readings of every rate
//! up to a limit, the bench dispatcher's own p99.9 lateness at the rate
//! where tram's run of rates under it ended (files that record it).

mod read;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Context;

pub(crate) use read::{Guest, readings};

/// Options of `tram-bench targets`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Directories of result files (searched recursively), one suite or
    /// session each.
    #[arg(required = true)]
    pub(crate) dirs: Vec<PathBuf>,
    /// Read result files at every depth below each directory, not only
    /// in it and the directories in it (where a suite's runs are; deeper
    /// ones are usually a session's experiments).
    #[arg(long)]
    pub(crate) deep: bool,
}

/// One of the targets, in the order they are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Target {
    C256Protosocket,
    C256Tonic,
    C256Cpu,
    C256Spread,
    C1Latency,
    StreamFloor,
    StreamProtosocket,
    Payload16k,
    Open5ms,
    Open5msEvery,
    Open1ms,
    Open1msEvery,
}

impl Target {
    const ALL: [Target; 12] = [
        Target::C256Protosocket,
        Target::C256Tonic,
        Target::C256Cpu,
        Target::C256Spread,
        Target::C1Latency,
        Target::StreamFloor,
        Target::StreamProtosocket,
        Target::Payload16k,
        Target::Open5ms,
        Target::Open5msEvery,
        Target::Open1ms,
        Target::Open1msEvery,
    ];
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Target::C256Protosocket => "C=256: ≥ 3x protosocket-rpc",
            Target::C256Tonic => "C=256: ≥ 30x tonic",
            Target::C256Cpu => "C=256: ≤ 1.2 µs CPU a call",
            Target::C256Spread => "C=256: rounds within ±10%",
            Target::C1Latency => "C=1: p50 ≤ 1.1x the floor's",
            Target::StreamFloor => "streams: ≥ 25% of floor-push",
            Target::StreamProtosocket => "streams: ≥ 5x protosocket-rpc",
            Target::Payload16k => "16 KiB: ≥ 1.5x protosocket-rpc",
            Target::Open5ms => "open loop < 5 ms: highest rate ≥ 3x",
            Target::Open5msEvery => "open loop < 5 ms: every rate up to ≥ 3x",
            Target::Open1ms => "open loop < 1 ms: highest rate ≥ 3x",
            Target::Open1msEvery => "open loop < 1 ms: every rate up to ≥ 3x",
        })
    }
}

/// Whether a reading meets its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Met,
    NotMet,
    /// The run cannot tell: in the open loop, when protosocket-rpc held no
    /// rate and tram only rates too low to be 3x any rate below the sweep's
    /// first, or when neither held any.
    Undecided,
}

impl Verdict {
    /// Met when `value` is at least `limit`.
    pub(crate) fn at_least(value: f64, limit: f64) -> Verdict {
        if value >= limit {
            Verdict::Met
        } else {
            Verdict::NotMet
        }
    }

    /// Met when `value` is at most `limit`.
    pub(crate) fn at_most(value: f64, limit: f64) -> Verdict {
        Verdict::at_least(limit, value)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Met => "**met**",
            Verdict::NotMet => "not met",
            Verdict::Undecided => "not decided",
        })
    }
}

/// One target as one run read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reading {
    pub(crate) target: Target,
    /// What in the run it was read from, when a run reads a target more
    /// than once (`C=32` of a 16 KiB run).
    pub(crate) detail: Option<String>,
    /// The figure, as a table cell.
    pub(crate) text: String,
    /// The figure the verdict was taken on, on the target's own scale
    /// (a ratio, µs, a fraction of the median or of floor-push), for the
    /// range over many directories; `None` where a run cannot tell.
    pub(crate) value: Option<f64>,
    pub(crate) verdict: Verdict,
}

/// What one result file gave: readings, or why it was left out.
#[derive(Debug)]
pub(crate) enum FileReadings {
    Counted(Vec<Reading>),
    LeftOut(String),
}

/// Runs `tram-bench targets`.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let report = report(args)?;
    // Read through `head`: stop quietly when the reader does.
    match std::io::Write::write_all(&mut std::io::stdout().lock(), report.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// The report, as Markdown: a table of readings per directory, and the
/// tally over all of them when there are several.
fn report(args: &Args) -> anyhow::Result<String> {
    use std::fmt::Write;
    let mut out = String::new();
    let mut tally: BTreeMap<Target, Tally> = BTreeMap::new();
    for dir in &args.dirs {
        let files = result_files(dir, args.deep)?;
        writeln!(out, "## {}\n", dir.display())?;
        if files.is_empty() {
            writeln!(
                out,
                "No compare.json, stream.json or rate.json here or in the directories in it.\n"
            )?;
            continue;
        }
        let mut rows = Vec::new();
        let mut left_out = Vec::new();
        let mut guest = Guest::default();
        for file in &files {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let run = file
                .parent()
                .and_then(|p| p.strip_prefix(dir).ok())
                .map(|p| format!("`{}/`", p.display()))
                .filter(|p| p != "`/`")
                .unwrap_or_else(|| "`./`".into());
            // One file that does not parse leaves the rest of the
            // directory to read.
            let json: serde_json::Value = match serde_json::from_str(&text) {
                Ok(json) => json,
                Err(e) => {
                    left_out.push(format!("{run}: not JSON ({e})"));
                    continue;
                }
            };
            match readings(&json) {
                FileReadings::Counted(r) => {
                    guest.add(&json);
                    rows.extend(r.into_iter().map(|r| (run.clone(), r)));
                }
                FileReadings::LeftOut(why) => left_out.push(format!("{run}: {why}")),
            }
        }
        rows.sort_by_key(|(_, r)| r.target);
        if let Some(line) = guest.line() {
            writeln!(out, "{line}\n")?;
        }
        writeln!(out, "| target | run | reading | verdict |")?;
        writeln!(out, "|---|---|---|---|")?;
        for (run, r) in &rows {
            let detail = r
                .detail
                .as_deref()
                .map_or(String::new(), |d| format!(" {d}"));
            writeln!(
                out,
                "| {} | {run}{detail} | {} | {} |",
                r.target, r.text, r.verdict
            )?;
            tally.entry(r.target).or_default().add(r);
        }
        for why in &left_out {
            writeln!(out, "\nleft out: {why}")?;
        }
        writeln!(out)?;
    }
    if args.dirs.len() > 1 {
        writeln!(out, "## Over every directory\n")?;
        writeln!(out, "| target | met in | readings, lowest to highest |")?;
        writeln!(out, "|---|---|---|")?;
        for target in Target::ALL {
            match tally.get(&target) {
                Some(t) => writeln!(
                    out,
                    "| {target} | {} of {} readings | {} |",
                    t.met,
                    t.readings,
                    t.range(target)
                )?,
                None => writeln!(out, "| {target} | not measured | |")?,
            }
        }
    }
    Ok(out)
}

/// One target's readings over every directory.
#[derive(Debug, Default)]
struct Tally {
    readings: usize,
    met: usize,
    /// The lowest and highest figure of the readings that have one.
    range: Option<(f64, f64)>,
}

impl Tally {
    fn add(&mut self, r: &Reading) {
        self.readings += 1;
        self.met += usize::from(r.verdict == Verdict::Met);
        if let Some(v) = r.value {
            self.range = Some(match self.range {
                Some((lo, hi)) => (lo.min(v), hi.max(v)),
                None => (v, v),
            });
        }
    }

    /// The range as the target's unit reads it.
    fn range(&self, target: Target) -> String {
        let Some((lo, hi)) = self.range else {
            return "none with a figure".into();
        };
        let figure = |v: f64| match target {
            Target::C256Cpu => format!("{v:.2} µs"),
            Target::C256Spread => format!("{:.1}%", v * 100.0),
            Target::StreamFloor => format!("{:.0}%", v * 100.0),
            Target::C1Latency => format!("{v:.3}x"),
            _ => format!("{v:.2}x"),
        };
        let range = if lo == hi {
            figure(lo)
        } else {
            format!("{}–{}", figure(lo), figure(hi))
        };
        match target {
            Target::C256Spread => format!("the farther side {range} off the median"),
            Target::Open5ms | Target::Open5msEvery | Target::Open1ms | Target::Open1msEvery => {
                format!("{range} (where a ratio was read)")
            }
            _ => range,
        }
    }
}

/// The result files in `dir` and the directories in it (every level
/// below with `deep`), in path order.
fn result_files(dir: &Path, deep: bool) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = pending.pop() {
        let entries = std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))?;
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                if deep || depth == 0 {
                    pending.push((path, depth + 1));
                }
            } else if path
                .file_name()
                .is_some_and(|n| n == "compare.json" || n == "stream.json" || n == "rate.json")
            {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the system's temporary one, removed
    /// when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir =
                std::env::temp_dir().join(format!("tram-targets-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn write(&self, path: &str, json: &serde_json::Value) {
            let path = self.0.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, json.to_string()).unwrap();
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn stream_run(of_floor: f64, workers: u64) -> serde_json::Value {
        serde_json::json!({"bench": "stream",
        "proc": {"workers": workers, "client_workers": null, "pin": false, "neighbours": 0},
        "systems": [
            {"system": "tram-rpc", "of_floor": {"median": of_floor, "min": of_floor, "max": of_floor}},
            {"system": "floor-push"},
        ]})
    }

    #[test]
    fn a_suites_runs_are_read_one_level_down_and_tallied_across_directories() {
        let a = TempDir::new("a");
        a.write("stream/stream.json", &stream_run(0.30, 2));
        a.write("one-worker/stream.json", &stream_run(0.50, 1));
        // An experiment two levels down: read only with --deep.
        a.write("ab/pair-1/stream.json", &stream_run(0.10, 2));
        a.write("stream/notes.json", &serde_json::json!({}));
        let cut = TempDir::new("cut");
        std::fs::create_dir_all(cut.0.join("rate")).unwrap();
        std::fs::write(cut.0.join("rate/rate.json"), "{\"bench\": \"rate\", \"sys").unwrap();
        cut.write("stream/stream.json", &stream_run(0.26, 2));
        let b = TempDir::new("b");
        b.write("stream.json", &stream_run(0.20, 2));

        let args = Args {
            dirs: vec![a.0.clone(), b.0.clone()],
            deep: false,
        };
        let report = report(&args).unwrap();
        assert!(
            report
                .contains("| streams: ≥ 25% of floor-push | `stream/` | 30% (30–30%) | **met** |"),
            "{report}"
        );
        assert!(
            report.contains("| streams: ≥ 25% of floor-push | `./` | 20% (20–20%) | not met |"),
            "{report}"
        );
        assert!(
            report.contains("left out: `one-worker/`: not the default setting (workers 1"),
            "{report}"
        );
        assert!(!report.contains("`ab/pair-1/`"), "{report}");
        assert!(
            report.contains("| streams: ≥ 25% of floor-push | 1 of 2 readings | 20%–30% |"),
            "{report}"
        );
        assert!(
            report.contains("| C=256: ≥ 3x protosocket-rpc | not measured | |"),
            "{report}"
        );

        let deep = report_of(&a, true);
        assert!(
            deep.contains("`ab/pair-1/` | 10% (10–10%) | not met |"),
            "{deep}"
        );
        let partial = report_of(&cut, false);
        assert!(
            partial.contains("left out: `rate/`: not JSON (EOF while parsing"),
            "{partial}"
        );
        assert!(
            partial.contains("`stream/` | 26% (26–26%) | **met** |"),
            "{partial}"
        );
        let empty = TempDir::new("empty");
        assert!(report_of(&empty, false).contains("No compare.json"));
    }

    /// The suites committed under `docs/bench/` read as they did when
    /// their session wrote its figures down: a change to the result
    /// files' shape must not leave the old ones unread.
    #[test]
    fn a_committed_suite_reads_as_its_session_reported_it() {
        let dir =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/bench/2026-11-29/session43");
        let report = report(&Args {
            dirs: vec![dir],
            deep: false,
        })
        .unwrap();
        for row in [
            "| C=256: ≥ 3x protosocket-rpc | `compare/` | 4.02x (2.89–5.30x) | **met** |",
            "| C=256: ≥ 30x tonic | `compare-2/` | 26.44x (21.15–32.73x) | not met |",
            "| C=256: ≤ 1.2 µs CPU a call | `compare/` | 1.73 µs (1.08 + 0.65) | not met |",
            "| C=1: p50 ≤ 1.1x the floor's | `compare/` | 1.140x (21.7 against 19.1 µs) | not met |",
            "| streams: ≥ 5x protosocket-rpc | `stream/` | 5.03x (4.73–7.01x) | **met** |",
            "| 16 KiB: ≥ 1.5x protosocket-rpc | `payload-16k/` C=256 | 1.56x (1.38–1.84x) | **met** |",
            "| open loop < 5 ms: highest rate ≥ 3x | `rate/` | 6.00x (300k/s against 50k/s) | **met** |",
        ] {
            assert!(report.contains(row), "{row} not in\n{report}");
        }
        assert!(
            report.contains("Guest: Intel(R) Xeon(R) Processor"),
            "{report}"
        );
    }

    /// Over several directories, each target's readings are counted and
    /// their lowest and highest figures given in the target's own unit.
    #[test]
    fn committed_suites_are_tallied_with_their_range() {
        let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/bench/2026-11-29");
        let report = report(&Args {
            dirs: vec![bench.join("session43"), bench.join("session44")],
            deep: false,
        })
        .unwrap();
        for row in [
            "| C=256: ≥ 3x protosocket-rpc | 4 of 4 readings | 3.07x–4.02x |",
            "| C=256: ≤ 1.2 µs CPU a call | 0 of 4 readings | 1.73 µs–2.48 µs |",
            "| C=256: rounds within ±10% | 0 of 4 readings | the farther side 17.8%–38.4% off the median |",
            "| C=1: p50 ≤ 1.1x the floor's | 0 of 4 readings | 1.123x–1.167x |",
            "| streams: ≥ 25% of floor-push | 0 of 2 readings | 23%–24% |",
            "| open loop < 5 ms: every rate up to ≥ 3x | 0 of 3 readings | 2.50x (where a ratio was read) |",
            "| open loop < 1 ms: every rate up to ≥ 3x | 0 of 3 readings | none with a figure |",
        ] {
            assert!(report.contains(row), "{row} not in\n{report}");
        }
    }

    fn report_of(dir: &TempDir, deep: bool) -> String {
        report(&Args {
            dirs: vec![dir.0.clone()],
            deep,
        })
        .unwrap()
    }
}
