//! Soak: many connections with pipelined calls, random cancellations,
//! deadlines and connection kills (a proxy that resets connections at
//! random), all over loopback. Every response is checked against its
//! request; afterwards no handler, task or file descriptor is left over and
//! memory is back near its baseline.
//!
//! The CI run is short. The long run:
//!
//! ```text
//! TRAM_SOAK_SECS=60 TRAM_SOAK_CONNS=1000 cargo test --release -p tram --test soak -- --nocapture
//! ```
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use support::within;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tram::rpc::{Channel, Code, Request, Response, Server, Status};

#[derive(Clone, PartialEq, prost::Message)]
struct Echo {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    payload: Bytes,
    /// Milliseconds the server sleeps before answering.
    #[prost(uint64, tag = "3")]
    sleep_ms: u64,
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Handlers alive right now (created and not yet dropped).
static LIVE_HANDLERS: AtomicUsize = AtomicUsize::new(0);

struct Live;
impl Live {
    fn new() -> Live {
        LIVE_HANDLERS.fetch_add(1, Ordering::SeqCst);
        Live
    }
}
impl Drop for Live {
    fn drop(&mut self) {
        LIVE_HANDLERS.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn start_server() -> (SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let server = Server::builder()
        .max_concurrent_calls(4096)
        .unary("/soak.Echo/Say", |req: Request<Echo>| async move {
            let _live = Live::new();
            let ms = req.get_ref().sleep_ms;
            if ms > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Ok(Response::new(req.into_inner()))
        })
        .build();
    support::serve(server).await
}

/// A proxy in front of the server that resets a random live connection
/// every `every`: both sockets closed with SO_LINGER 0 (an RST), calls in
/// flight on it lost, as when a peer crashes or a middlebox drops state.
struct KillProxy {
    addr: SocketAddr,
    kills: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

async fn kill_proxy(target: SocketAddr, every: Duration) -> KillProxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let live: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
    let (kills, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    tokio::spawn({
        let live = live.clone();
        async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let pair = tokio::spawn(async move {
                    let (mut client, mut server) = (client, server);
                    // Dropped at the end or on abort: with linger 0, an RST.
                    // (Deprecated because a non-zero linger blocks on drop;
                    // zero never does.)
                    #[allow(deprecated)]
                    {
                        let _ = client.set_linger(Some(Duration::ZERO));
                        let _ = server.set_linger(Some(Duration::ZERO));
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                let mut l = live.lock();
                l.retain(|h| !h.is_finished());
                l.push(pair.abort_handle());
            }
        }
    });
    tokio::spawn({
        let (kills, stop) = (kills.clone(), stop.clone());
        async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(every).await;
                let victim = {
                    let mut l = live.lock();
                    l.retain(|h| !h.is_finished());
                    if l.is_empty() {
                        continue;
                    }
                    n = n.wrapping_mul(31).wrapping_add(17);
                    let i = n % l.len();
                    l.swap_remove(i)
                };
                victim.abort();
                kills.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    KillProxy { addr, kills, stop }
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    deadline: AtomicU64,
    cancelled: AtomicU64,
    unavailable: AtomicU64,
    /// Responses that did not match their request: must stay 0.
    misrouted: AtomicU64,
    /// Calls that neither answered nor failed within 30 s: must stay 0.
    hung: AtomicU64,
    /// Any other outcome: must stay 0.
    unexpected: AtomicU64,
}

/// A small deterministic generator per worker (no dependency needed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

async fn one_call(ch: &Channel, rng: &mut Rng, tally: &Tally) {
    let id = rng.next();
    let payload = Bytes::from(id.to_le_bytes().repeat((id % 8) as usize + 1));
    let kind = rng.next() % 100;
    let (sleep_ms, timeout, cancel_after) = match kind {
        // A deadline shorter than the handler's sleep.
        0..=9 => (50, Some(Duration::from_millis(10)), None),
        // Abandoned by the caller (the call future dropped).
        10..=19 => (50, None, Some(Duration::from_millis(rng.next() % 20))),
        // Slow but in time.
        20..=24 => (5, Some(Duration::from_secs(5)), None),
        _ => (0, None, None),
    };
    let mut req = Request::new(Echo {
        id,
        payload: payload.clone(),
        sleep_ms,
    });
    if let Some(t) = timeout {
        req = req.with_timeout(t);
    }
    let call = ch.unary::<_, Echo>("/soak.Echo/Say", req);
    let outcome = match cancel_after {
        Some(after) => match tokio::time::timeout(after, call).await {
            Ok(r) => r,
            Err(_) => {
                tally.cancelled.fetch_add(1, Ordering::Relaxed);
                return;
            }
        },
        None => match tokio::time::timeout(Duration::from_secs(30), call).await {
            Ok(r) => r,
            Err(_) => {
                tally.hung.fetch_add(1, Ordering::Relaxed);
                return;
            }
        },
    };
    match outcome {
        Ok(r) => {
            let got = r.get_ref();
            if got.id == id && got.payload == payload {
                tally.ok.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.misrouted.fetch_add(1, Ordering::Relaxed);
            }
        }
        Err(s) => {
            classify(&s, timeout.is_some(), tally);
            if s.code() == Code::Unavailable {
                // Reconnecting after a kill: do not spin on fast failures.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

fn classify(s: &Status, had_deadline: bool, tally: &Tally) {
    match s.code() {
        Code::DeadlineExceeded if had_deadline => {
            tally.deadline.fetch_add(1, Ordering::Relaxed);
        }
        // Lost with a killed connection: in flight, or while reconnecting.
        Code::Unavailable => {
            tally.unavailable.fetch_add(1, Ordering::Relaxed);
        }
        _ => {
            eprintln!("unexpected outcome: {s:?}");
            tally.unexpected.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_with_cancellations_deadlines_and_connection_kills() {
    let secs = env("TRAM_SOAK_SECS", 3);
    let conns = env("TRAM_SOAK_CONNS", 100) as usize;
    let pipeline = env("TRAM_SOAK_PIPELINE", 4) as usize;
    let (fds0, rss0) = (open_fds(), rss_mib());
    let tasks0 = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();

    let (server, stop_server, server_task) = start_server().await;
    // About one kill per connection every five seconds.
    let every = Duration::from_millis((5_000 / conns.max(1) as u64).max(5));
    let proxy = kill_proxy(server, every).await;
    let tally = Arc::new(Tally::default());
    let until = Instant::now() + Duration::from_secs(secs);
    let mut workers = tokio::task::JoinSet::new();
    for c in 0..conns {
        let ch = Channel::new(proxy.addr.to_string());
        // Several callers per connection: calls pipelined on it.
        for p in 0..pipeline {
            let (ch, tally) = (ch.clone(), tally.clone());
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((c * pipeline + p) as u64 + 1));
            workers.spawn(async move {
                while Instant::now() < until {
                    one_call(&ch, &mut rng, &tally).await;
                }
            });
        }
    }
    within(secs + 60, "the soak's callers finish", async {
        while let Some(r) = workers.join_next().await {
            r.unwrap();
        }
    })
    .await;
    let peak_rss = rss_mib();
    proxy.stop.store(true, Ordering::Relaxed);

    let t = &*tally;
    let total: u64 = [&t.ok, &t.deadline, &t.cancelled, &t.unavailable]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum();
    println!(
        "soak: {conns} connections x {pipeline} callers, {secs}s: {total} calls; ok {}, deadline {}, \
         cancelled {}, unavailable {} ({} connections killed); misrouted {}, hung {}, unexpected {}",
        t.ok.load(Ordering::Relaxed),
        t.deadline.load(Ordering::Relaxed),
        t.cancelled.load(Ordering::Relaxed),
        t.unavailable.load(Ordering::Relaxed),
        proxy.kills.load(Ordering::Relaxed),
        t.misrouted.load(Ordering::Relaxed),
        t.hung.load(Ordering::Relaxed),
        t.unexpected.load(Ordering::Relaxed),
    );
    assert_eq!(
        t.misrouted.load(Ordering::Relaxed),
        0,
        "a response reached the wrong call"
    );
    assert_eq!(t.hung.load(Ordering::Relaxed), 0, "a call hung");
    assert_eq!(
        t.unexpected.load(Ordering::Relaxed),
        0,
        "unexpected outcomes"
    );
    assert!(t.ok.load(Ordering::Relaxed) > 0);
    assert!(
        t.deadline.load(Ordering::Relaxed) > 0,
        "deadlines were exercised"
    );
    assert!(
        proxy.kills.load(Ordering::Relaxed) > 0,
        "connections were killed"
    );

    // Afterwards: the server is stopped; every handler, connection task and
    // socket is gone.
    let _ = stop_server.send(());
    within(30, "the server stops", server_task).await.unwrap();
    within(30, "no handler left running", async {
        while LIVE_HANDLERS.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The proxy's accept loop and the channels' idle sockets go when their
    // owners do; give the runtime a moment to reap them.
    drop(proxy);
    let settled = within(30, "file descriptors and tasks return to baseline", async {
        loop {
            let fds = open_fds();
            let tasks = tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks();
            // The proxy's listener and killer tasks stay (they are leaked on
            // purpose by this test); everything per connection must go.
            if fds <= fds0 + 2 && tasks <= tasks0 + 2 {
                return (fds, tasks);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let rss1 = rss_mib();
    release_free_memory();
    let rss2 = rss_mib();
    println!(
        "fds: {fds0} before, {} after; tasks: {tasks0} before, {} after; RSS MiB: {rss0:.1} before, \
         {peak_rss:.1} at the end of load, {rss1:.1} after, {rss2:.1} after malloc_trim",
        settled.0, settled.1
    );
    // Generous: the allocator keeps some pages; unbounded growth would
    // show as far more.
    assert!(
        rss2 < rss0 + 64.0,
        "memory did not come back: {rss0:.1} -> {rss2:.1} MiB"
    );
}

/// Hands the allocator's free pages back to the system, so that RSS shows
/// what is still in use rather than what glibc keeps cached.
#[allow(unsafe_code)]
fn release_free_memory() {
    // SAFETY: malloc_trim only releases free heap memory; it touches no
    // live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}
