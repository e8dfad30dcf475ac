//! Process plumbing shared by every benchmark: the server runs in a child
//! process of this same binary, so client and server never share a runtime
//! or an allocator, and each one's CPU time is measured on its own.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// How the client and server processes run: the same for every system.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct ProcArgs {
    /// Runtime worker threads in each process (client and server).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) workers: u16,
    /// Runtime worker threads in the client process only, overriding
    /// `--workers` there (the servers keep `--workers`): shows what a
    /// client's callers cost when the scheduler spreads them over threads.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) client_workers: Option<u16>,
    /// Pin the client process to CPU 0 and every server process to CPU 1
    /// (all of each process's threads). Off by default: the scheduler
    /// places threads.
    #[arg(long)]
    pub(crate) pin: bool,
    /// Directory for the JSON results and SVG charts.
    #[arg(long, default_value = "target/tram-bench")]
    #[serde(skip)]
    pub(crate) out: std::path::PathBuf,
}

impl ProcArgs {
    /// How the processes run, for a run's banner: "2 workers per process",
    /// "1 client worker, 2 per server", with ", pinned" when pinned.
    pub(crate) fn describe(&self) -> String {
        let workers = match self.client_workers {
            Some(c) if c != self.workers => format!(
                "{c} client worker{}, {} per server",
                if c == 1 { "" } else { "s" },
                self.workers
            ),
            _ => format!(
                "{} worker{} per process",
                self.workers,
                if self.workers == 1 { "" } else { "s" }
            ),
        };
        if self.pin {
            workers + ", pinned"
        } else {
            workers
        }
    }
}

/// The CPU the client process is pinned to with `--pin`; servers take the
/// next one.
const CLIENT_CPU: usize = 0;
const SERVER_CPU: usize = 1;

/// Pins this process's current thread, and so every thread it starts
/// afterwards (Linux threads inherit their creator's affinity), to `cpu`.
pub(crate) fn pin_to(cpu: usize) -> anyhow::Result<()> {
    let cores = core_affinity::get_core_ids().context("listing CPUs")?;
    let core = cores
        .into_iter()
        .find(|c| c.id == cpu)
        .with_context(|| format!("no CPU {cpu} to pin to"))?;
    if !core_affinity::set_for_current(core) {
        bail!("pinning to CPU {cpu} failed");
    }
    Ok(())
}

/// The client's runtime, pinned first if asked.
pub(crate) fn client_runtime(p: &ProcArgs) -> anyhow::Result<tokio::runtime::Runtime> {
    if p.pin {
        pin_to(CLIENT_CPU)?;
    }
    runtime(p.client_workers.unwrap_or(p.workers).into())
}

/// Arguments of the hidden `serve` subcommand.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ServeArgs {
    /// Which benchmark's server.
    #[arg(long)]
    pub(crate) bench: String,
    /// Which system.
    #[arg(long)]
    pub(crate) system: String,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    pub(crate) workers: usize,
    /// Pin the process to this CPU.
    #[arg(long)]
    pub(crate) cpu: Option<usize>,
}

/// Runs a server in this process: binds an ephemeral loopback port, prints
/// `PORT <n>`, and serves until stdin closes.
pub(crate) fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    if let Some(cpu) = args.cpu {
        pin_to(cpu)?;
    }
    let rt = runtime(args.workers)?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        println!("PORT {port}");
        std::io::stdout().flush()?;
        let server = match args.bench.as_str() {
            "stream" => tokio::spawn(crate::stream::serve(args.system.clone(), listener)),
            "compare" | "rate" => {
                tokio::spawn(crate::compare::serve(args.system.clone(), listener))
            }
            other => bail!("unknown bench {other}"),
        };
        // The parent closes our stdin when it is done (or dies).
        tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin()
                .read_line(&mut sink)
                .map(|n| n > 0)
                .unwrap_or(false)
            {}
        })
        .await?;
        server.abort();
        Ok(())
    })
}

/// A multi-threaded tokio runtime with `workers` threads.
pub(crate) fn runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .enable_all()
        .build()?)
}

/// A server child process.
pub(crate) struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The port it listens on.
    pub(crate) port: u16,
}

impl Server {
    /// Starts `tram-bench serve` for one system and waits for its port.
    pub(crate) fn start(bench: &str, system: &str, p: &ProcArgs) -> anyhow::Result<Server> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.args(["serve", "--bench", bench, "--system", system])
            .args(["--workers", &p.workers.to_string()]);
        if p.pin {
            cmd.args(["--cpu", &SERVER_CPU.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning the server process")?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let port = line
            .strip_prefix("PORT ")
            .and_then(|p| p.trim().parse().ok())
            .with_context(|| format!("server said {line:?}"))?;
        let stdin = child.stdin.take();
        Ok(Server { child, stdin, port })
    }

    /// CPU time (user + system) the server process has used so far.
    pub(crate) fn cpu(&self) -> anyhow::Result<Duration> {
        pid_cpu(self.child.id())
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        // Give it a moment to exit by itself, then make sure.
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one measuring window saw.
pub(crate) struct Window {
    /// Operations per second.
    pub(crate) rate: f64,
    /// This process's CPU per operation, in microseconds.
    pub(crate) client_us: f64,
    /// The server process's CPU per operation, in microseconds.
    pub(crate) server_us: f64,
}

/// Waits out the warm-up, then counts `done` and both processes' CPU over
/// `secs`; `recording` is set for the duration of the window.
pub(crate) async fn measure_window(
    done: impl Fn() -> u64,
    recording: Option<&std::sync::atomic::AtomicBool>,
    server: &Server,
    warmup: f64,
    secs: f64,
) -> anyhow::Result<Window> {
    use std::sync::atomic::Ordering;
    tokio::time::sleep(Duration::from_secs_f64(warmup)).await;
    if let Some(r) = recording {
        r.store(true, Ordering::Relaxed);
    }
    let (n0, t0, c0, s0) = (
        done(),
        std::time::Instant::now(),
        self_cpu()?,
        server.cpu()?,
    );
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (n1, t1, c1, s1) = (
        done(),
        std::time::Instant::now(),
        self_cpu()?,
        server.cpu()?,
    );
    if let Some(r) = recording {
        r.store(false, Ordering::Relaxed);
    }
    let ops = (n1 - n0) as f64;
    if ops == 0.0 {
        bail!("nothing completed in the measuring window");
    }
    Ok(Window {
        rate: ops / (t1 - t0).as_secs_f64(),
        client_us: (c1 - c0).as_secs_f64() * 1e6 / ops,
        server_us: (s1 - s0).as_secs_f64() * 1e6 / ops,
    })
}

/// CPU time (user + system) this process has used so far.
pub(crate) fn self_cpu() -> anyhow::Result<Duration> {
    proc_cpu("/proc/self/stat")
}

/// CPU time (user + system) process `pid` has used so far.
pub(crate) fn pid_cpu(pid: u32) -> anyhow::Result<Duration> {
    proc_cpu(&format!("/proc/{pid}/stat"))
}

fn proc_cpu(path: &str) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(path)?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: utime and stime are fields 14 and 15 (1-based) of the line.
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // USER_HZ is 100 on Linux.
    Ok(Duration::from_millis(ticks * 10))
}

/// The machine a run was taken on, for the result files.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Machine {
    pub(crate) cpu: String,
    pub(crate) cpus: usize,
    pub(crate) kernel: String,
}

impl Machine {
    pub(crate) fn this() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".into(), |(_, m)| m.trim().to_string());
        Machine {
            cpu,
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |k| k.trim().to_string()),
        }
    }
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

/// Completed operations, counted per caller, each counter on a cache line
/// of its own: with one shared counter, every call on every thread would
/// write the same line, and the bench would measure that line moving
/// between cores as much as the system under test.
pub(crate) struct Counts(Box<[Padded]>);

#[repr(align(128))]
struct Padded(std::sync::atomic::AtomicU64);

impl Counts {
    pub(crate) fn new(callers: usize) -> Counts {
        Counts(
            (0..callers.max(1))
                .map(|_| Padded(std::sync::atomic::AtomicU64::new(0)))
                .collect(),
        )
    }

    /// Counts `n` more for caller `i`.
    pub(crate) fn add(&self, i: usize, n: u64) {
        let c = &self.0[i % self.0.len()].0;
        // Only caller `i` writes its counter: a load and a store, no locked
        // read-modify-write.
        c.store(
            c.load(std::sync::atomic::Ordering::Relaxed) + n,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    pub(crate) fn total(&self) -> u64 {
        self.0
            .iter()
            .map(|c| c.0.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }
}

/// A payload of `len` bytes whose clones share no reference count: a
/// `Bytes` over a leaked buffer (one per size, for the life of the process),
/// so that handing every call its own copy costs no write to a line that
/// every caller shares.
pub(crate) fn static_payload(len: usize) -> bytes::Bytes {
    static CACHE: std::sync::Mutex<Vec<(usize, &'static [u8])>> = std::sync::Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let buf = match cache.iter().find(|(n, _)| *n == len) {
        Some((_, b)) => *b,
        None => {
            let b: &'static [u8] = Box::leak(vec![0xab; len].into_boxed_slice());
            cache.push((len, b));
            b
        }
    };
    bytes::Bytes::from_static(buf)
}

/// A latency histogram in nanoseconds, 1 ns to 60 s, 3 significant digits.
pub(crate) type Hist = hdrhistogram::Histogram<u64>;

pub(crate) fn new_hist() -> Hist {
    Hist::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
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

/// Records latencies into a shared histogram a run at a time: one lock per
/// 256 samples, and one histogram in the cache rather than one per caller.
/// Every system's client records through it, so its cost is the same for
/// all.
pub(crate) struct Recorder {
    shared: std::sync::Arc<parking_lot::Mutex<Hist>>,
    buf: Vec<u64>,
}

impl Recorder {
    pub(crate) fn new(shared: std::sync::Arc<parking_lot::Mutex<Hist>>) -> Recorder {
        Recorder {
            shared,
            buf: Vec::with_capacity(256),
        }
    }

    pub(crate) fn record(&mut self, nanos: u64) {
        self.buf.push(nanos.max(1));
        if self.buf.len() == self.buf.capacity() {
            self.flush();
        }
    }

    pub(crate) fn flush(&mut self) {
        let mut h = self.shared.lock();
        for v in self.buf.drain(..) {
            // Out of range only past 60 s: saturate rather than lose it.
            h.saturating_record(v);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
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
    fn si_formats() {
        assert_eq!(si(8_310_000.0), "8.31M");
        assert_eq!(si(412_400.0), "412k");
        assert_eq!(si(950.0), "950");
    }
}
