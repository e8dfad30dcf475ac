//! How the benchmarks run their systems: server child processes (so that
//! client and server never share a runtime or an allocator, and each one's
//! CPU time is measured on its own), pinning, the measuring window, and the
//! loads every system's client runs under: closed-loop calls (`load`) and
//! a window of streamed messages (`flow`); and the guest's own figures,
//! its core-to-core round trip (`guest`), its stalls (`stalls`) and what
//! its idle CPUs do (`idle`).

pub(crate) mod clock;
pub(crate) mod flow;
pub(crate) mod guest;
pub(crate) mod idle;
pub(crate) mod latency;
pub(crate) mod load;
pub(crate) mod movsb;
pub(crate) mod neighbours;
pub(crate) mod stalls;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::systems::{System, Workload};

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
    /// Pin the client process and every server process to CPU 0
    /// together: every wake-up between them is on one CPU, so a run at
    /// one call in flight shows each system's own path without the cost
    /// of waking a halted CPU, which on a small guest can decide it.
    #[arg(long, conflicts_with = "pin")]
    pub(crate) one_cpu: bool,
    /// Busy threads, in a process of their own, competing for the CPUs
    /// for the whole run: noisy neighbours on the same machine.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=64))]
    pub(crate) neighbours: u16,
    /// Directory for the JSON results and SVG charts.
    #[arg(long, default_value = "target/tram-bench")]
    #[serde(skip)]
    pub(crate) out: std::path::PathBuf,
}

impl ProcArgs {
    /// A run's banner: [`ProcArgs::describe`], the kernel's TCP congestion
    /// control when it is not the usual cubic, idle CPUs that poll before
    /// they halt, and the commit the bench was built from.
    pub(crate) fn banner(&self) -> String {
        let mut parts = vec![self.describe()];
        match congestion_control().as_str() {
            "cubic" => {}
            cc => parts.push(format!("TCP congestion control {cc}")),
        }
        parts.extend(idle::Idle::this().polling());
        parts.push(format!("built from {}", env!("TRAM_BENCH_SOURCE")));
        parts.join(", ")
    }

    /// How the processes run: "2 workers per process", "1 client worker, 2
    /// per server", with ", pinned" or ", all on CPU 0" when pinned.
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
        let workers = if self.pin {
            workers + ", pinned"
        } else if self.one_cpu {
            workers + ", all on CPU 0"
        } else {
            workers
        };
        match self.neighbours {
            0 => workers,
            1 => workers + ", 1 busy neighbour thread",
            n => format!("{workers}, {n} busy neighbour threads"),
        }
    }

    /// The CPU the client process is pinned to, if any.
    fn client_cpu(&self) -> Option<usize> {
        (self.pin || self.one_cpu).then_some(CLIENT_CPU)
    }

    /// The CPU every server process is pinned to, if any.
    fn server_cpu(&self) -> Option<usize> {
        match (self.pin, self.one_cpu) {
            (true, _) => Some(SERVER_CPU),
            (false, true) => Some(CLIENT_CPU),
            (false, false) => None,
        }
    }
}

/// The kernel's TCP congestion control for new connections
/// (`net.ipv4.tcp_congestion_control`), which every system in a run shares.
/// It names the guest as much as the floor's figures do: a kernel that
/// paces (BBR, without an `fq` qdisc) holds back the large-message runs.
pub(crate) fn congestion_control() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map_or_else(|_| "unknown".into(), |cc| cc.trim().to_string())
}

/// The CPU the client process is pinned to with `--pin` or `--one-cpu`;
/// servers take the next one with `--pin`, the same with `--one-cpu`.
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

/// What every benchmark starts with: its busy neighbours (if asked for)
/// and one server process per system, all stopped when it drops.
pub(crate) struct Setup {
    _neighbours: Option<neighbours::Neighbours>,
    pub(crate) servers: Vec<Server>,
}

/// Checks that `bench` runs every one of `systems` (`supported`), starts
/// the neighbours, prepares the clients and starts each system's
/// `workload` server.
pub(crate) fn setup(
    bench: &str,
    systems: &[System],
    supported: &[System],
    workload: Workload,
    p: &ProcArgs,
) -> anyhow::Result<Setup> {
    crate::systems::check(bench, systems, supported)?;
    let neighbours = neighbours::Neighbours::start(p)?;
    crate::systems::prepare(systems);
    let servers = systems
        .iter()
        .map(|s| Server::start(workload.name(), s.name(), p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Setup {
        _neighbours: neighbours,
        servers,
    })
}

/// The client's runtime, pinned first if asked.
pub(crate) fn client_runtime(p: &ProcArgs) -> anyhow::Result<tokio::runtime::Runtime> {
    if let Some(cpu) = p.client_cpu() {
        pin_to(cpu)?;
    }
    runtime(p.client_workers.unwrap_or(p.workers).into())
}

/// Runs a server child process (the `serve` subcommand): pinned to `cpu`
/// if given, on `workers` threads; binds an ephemeral loopback port, prints
/// `PORT <n>`, and serves with `serve` until stdin closes.
pub(crate) fn serve_child<F, Fut>(
    cpu: Option<usize>,
    workers: usize,
    port: u16,
    serve: F,
) -> anyhow::Result<()>
where
    F: FnOnce(tokio::net::TcpListener) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    if let Some(cpu) = cpu {
        pin_to(cpu)?;
    }
    let rt = runtime(workers)?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let port = listener.local_addr()?.port();
        println!("PORT {port}");
        std::io::stdout().flush()?;
        let server = tokio::spawn(serve(listener));
        // The parent closes our stdin when it is done (or dies); until
        // then it may set the `fleet` server's delay (`delay <µs>`).
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            while std::io::stdin()
                .read_line(&mut line)
                .map(|n| n > 0)
                .unwrap_or(false)
            {
                if let Some(us) = line.trim().strip_prefix("delay ") {
                    crate::systems::set_fleet_delay(us.parse().unwrap_or(0));
                }
                line.clear();
            }
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
    /// Starts `tram-bench serve --workload <workload> --system <system>`
    /// and waits for its port.
    pub(crate) fn start(workload: &str, system: &str, p: &ProcArgs) -> anyhow::Result<Server> {
        Server::start_on(workload, system, 0, p)
    }

    /// [`Server::start`] on loopback port `port` (0: any).
    pub(crate) fn start_on(
        workload: &str,
        system: &str,
        port: u16,
        p: &ProcArgs,
    ) -> anyhow::Result<Server> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.args(["serve", "--workload", workload, "--system", system])
            .args(["--workers", &p.workers.to_string()])
            .args(["--port", &port.to_string()]);
        if let Some(cpu) = p.server_cpu() {
            cmd.args(["--cpu", &cpu.to_string()]);
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

    /// Sends the server a line on its standard input (`delay <µs>`).
    pub(crate) fn tell(&mut self, line: &str) -> anyhow::Result<()> {
        use std::io::Write as _;
        let stdin = self
            .stdin
            .as_mut()
            .context("the server's stdin is closed")?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    /// Kills the server at once (SIGKILL): its connections are reset, as a
    /// crashed machine's would be after the kernel notices.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// CPU time (user + system) the server process has used so far.
    pub(crate) fn cpu(&self) -> anyhow::Result<Duration> {
        pid_cpu(self.child.id())
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its loopback address.
    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
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
    /// This process's context switches per thousand operations.
    pub(crate) client_switches: f64,
    /// The server process's context switches per thousand operations.
    pub(crate) server_switches: f64,
    /// Operations per thousand whose caller ran on another thread than
    /// for its operation before, where callers are counted.
    pub(crate) moved: Option<f64>,
}

/// Waits out the warm-up, then counts `done` (and `moved`, if given) and
/// both processes' CPU over `secs`; `recording` is set for the duration of
/// the window.
pub(crate) async fn measure_window(
    done: impl Fn() -> u64,
    moved: Option<&Counts>,
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
    let moved0 = moved.map(Counts::total);
    let (n0, t0, c0, s0) = (
        done(),
        std::time::Instant::now(),
        self_cpu()?,
        server.cpu()?,
    );
    let (client_sw0, server_sw0) = (
        pid_switches(std::process::id())?,
        pid_switches(server.pid())?,
    );
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (n1, t1, c1, s1) = (
        done(),
        std::time::Instant::now(),
        self_cpu()?,
        server.cpu()?,
    );
    let (client_sw1, server_sw1) = (
        pid_switches(std::process::id())?,
        pid_switches(server.pid())?,
    );
    let moved1 = moved.map(Counts::total);
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
        client_switches: client_sw1.saturating_sub(client_sw0) as f64 * 1e3 / ops,
        server_switches: server_sw1.saturating_sub(server_sw0) as f64 * 1e3 / ops,
        moved: moved0
            .zip(moved1)
            .map(|(m0, m1)| m1.saturating_sub(m0) as f64 * 1e3 / ops),
    })
}

/// Context switches so far of every thread of process `pid`, voluntary
/// (a thread that went to sleep: each costs a wake-up later) and not (a
/// thread preempted). A thread that exits takes its count with it, so
/// only long-lived threads (a runtime's workers) are counted reliably.
pub(crate) fn pid_switches(pid: u32) -> anyhow::Result<u64> {
    let mut n = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        // A thread may exit between the listing and the read.
        let Ok(status) = std::fs::read_to_string(task?.path().join("status")) else {
            continue;
        };
        n += status_switches(&status)?;
    }
    Ok(n)
}

/// The context switches, voluntary and not, that one thread's
/// `/proc/.../status` counts.
fn status_switches(status: &str) -> anyhow::Result<u64> {
    let mut n = 0;
    for line in status.lines() {
        let count = line
            .strip_prefix("voluntary_ctxt_switches:")
            .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"));
        if let Some(count) = count {
            n += count.trim().parse::<u64>()?;
        }
    }
    Ok(n)
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

/// Sets this thread's timer slack to 1 ns (Linux's default is 50 µs).
#[allow(unsafe_code)]
pub(crate) fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument, touches no
    // memory of ours and affects only the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

#[cfg(test)]
mod tests {
    use super::{pid_switches, status_switches};

    /// This thread's switches so far. The process's total would not do:
    /// it also loses the counts of the test threads that exit meanwhile.
    fn mine() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status_switches(&status).unwrap()
    }

    #[test]
    fn a_thread_that_sleeps_counts_its_switches() {
        let before = mine();
        // Each sleep gives up the CPU: a voluntary switch of this thread.
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let after = mine();
        assert!(after >= before + 3, "{before} then {after}");
        // The process's total counts this thread's among the others'.
        let total = pid_switches(std::process::id()).unwrap();
        assert!(total >= after, "{total} in all, {after} in this thread");
    }

    #[test]
    fn a_process_that_is_gone_is_an_error() {
        // Pids are below 2^22 on Linux; this one cannot exist.
        assert!(pid_switches(u32::MAX).is_err());
    }
}
