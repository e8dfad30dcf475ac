//! Process plumbing shared by every benchmark: the server runs in a child
//! process of this same binary, so client and server never share a runtime
//! or an allocator, and each one's CPU time is measured on its own.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

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
}

/// Runs a server in this process: binds an ephemeral loopback port, prints
/// `PORT <n>`, and serves until stdin closes.
pub(crate) fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let rt = runtime(args.workers)?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        println!("PORT {port}");
        std::io::stdout().flush()?;
        let server = match args.bench.as_str() {
            "stream" => tokio::spawn(crate::stream::serve(args.system.clone(), listener)),
            "compare" => tokio::spawn(crate::compare::serve(args.system.clone(), listener)),
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
    pub(crate) fn start(bench: &str, system: &str, workers: usize) -> anyhow::Result<Server> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .args(["serve", "--bench", bench, "--system", system])
            .args(["--workers", &workers.to_string()])
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
        proc_cpu(&format!("/proc/{}/stat", self.child.id()))
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
    done: &std::sync::atomic::AtomicU64,
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
        done.load(Ordering::Relaxed),
        std::time::Instant::now(),
        self_cpu()?,
        server.cpu()?,
    );
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (n1, t1, c1, s1) = (
        done.load(Ordering::Relaxed),
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

/// Median and range of a set of measurements.
#[derive(Debug, Clone, Copy)]
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
