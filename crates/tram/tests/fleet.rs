//! One client over a fleet of servers on this machine (127.0.0.2,
//! 127.0.0.3, ...): spreading, slow and failing servers, servers killed,
//! added, drained and restarted, over real loopback TCP.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use support::within;
use tokio::sync::oneshot;
use tram::balance::{OutlierDetection, Policy};
use tram::conn::{Listener, TcpConfig};
use tram::observe::EndpointState;
use tram::{Channel, Code, Request, Response, Server, Status};

#[derive(Clone, PartialEq, prost::Message)]
struct Job {
    #[prost(uint64, tag = "1")]
    id: u64,
    /// Which server answered (its index).
    #[prost(uint64, tag = "2")]
    server: u64,
}

const WORK: &str = "/fleet.Fleet/Work";

/// One server of the fleet, and its knobs.
struct Member {
    addr: SocketAddr,
    calls: Arc<AtomicU64>,
    delay_us: Arc<AtomicU64>,
    failing: Arc<AtomicBool>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    index: u64,
}

impl Member {
    /// A server on 127.0.0.`2 + index` (port `port`, or any).
    async fn start(index: u64, port: u16) -> Member {
        let calls = Arc::new(AtomicU64::new(0));
        let delay_us = Arc::new(AtomicU64::new(0));
        let failing = Arc::new(AtomicBool::new(false));
        let mut m = Member {
            addr: SocketAddr::from(([127, 0, 0, 2 + index as u8], port)),
            calls,
            delay_us,
            failing,
            stop: None,
            task: None,
            index,
        };
        m.serve().await;
        m
    }

    async fn serve(&mut self) {
        let (calls, delay, failing, index) = (
            self.calls.clone(),
            self.delay_us.clone(),
            self.failing.clone(),
            self.index,
        );
        let server = Server::builder()
            .unary(WORK, move |req: Request<Job>| {
                let (calls, delay, failing) = (calls.clone(), delay.clone(), failing.clone());
                async move {
                    calls.fetch_add(1, Ordering::Relaxed);
                    let us = delay.load(Ordering::Relaxed);
                    if us > 0 {
                        tokio::time::sleep(Duration::from_micros(us)).await;
                    }
                    if failing.load(Ordering::Relaxed) {
                        return Err(Status::unavailable("failing on purpose"));
                    }
                    Ok(Response::new(Job {
                        id: req.get_ref().id,
                        server: index,
                    }))
                }
            })
            .drain_timeout(Duration::from_secs(5))
            .build();
        let listener = Listener::bind(self.addr, TcpConfig::default())
            .await
            .unwrap();
        self.addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        self.stop = Some(stop);
        self.task = Some(tokio::spawn(async move {
            server
                .serve_listener(listener, async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        }));
    }

    /// Kills it: the task is aborted, its connections dropped.
    fn kill(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.stop = None;
    }

    /// Starts a graceful shutdown; the task ends when it has drained.
    fn drain(&mut self) -> tokio::task::JoinHandle<()> {
        drop(self.stop.take());
        self.task.take().unwrap()
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

/// The tests here measure how load spreads, and time it: they run one at a
/// time, not competing for the machine's cores with each other.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn fleet(n: u64) -> Vec<Member> {
    let mut members = Vec::new();
    for i in 0..n {
        members.push(Member::start(i, 0).await);
    }
    members
}

fn targets(members: &[Member]) -> Vec<String> {
    members.iter().map(|m| m.addr.to_string()).collect()
}

/// Makes `n` calls with `c` callers; the results (ids checked).
async fn load(channel: &Channel, n: u64, c: u64, idempotent: bool) -> Vec<Result<Job, Status>> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (channel, next) = (channel.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::new();
            loop {
                let id = next.fetch_add(1, Ordering::Relaxed);
                if id >= n {
                    return results;
                }
                let mut req =
                    Request::new(Job { id, server: 0 }).with_timeout(Duration::from_secs(5));
                if idempotent {
                    req = req.idempotent();
                }
                let r = channel
                    .unary::<_, Job>(WORK, req)
                    .await
                    .map(Response::into_inner);
                if let Ok(job) = &r {
                    assert_eq!(job.id, id, "a response for another request");
                }
                results.push(r);
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

fn failures(results: &[Result<Job, Status>]) -> Vec<&Status> {
    results.iter().filter_map(|r| r.as_ref().err()).collect()
}

/// Runs `n` calls, `c` at a time, with none failing: how many each member
/// served.
async fn shares(channel: &Channel, members: &[Member], n: u64, c: u64) -> Vec<u64> {
    let before: Vec<u64> = members.iter().map(Member::calls).collect();
    let results = within(60, "the load", load(channel, n, c, false)).await;
    assert!(failures(&results).is_empty());
    members
        .iter()
        .zip(&before)
        .map(|(m, b)| m.calls() - b)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_spreads_evenly_over_equal_servers() {
    let _serial = SERIAL.lock().await;
    let members = fleet(4).await;
    // Equal servers: each takes a millisecond per call (more than this
    // machine's scheduling noise, as a real server's work would be).
    for m in &members {
        m.delay_us.store(1_000, Ordering::Relaxed);
    }
    let channel = Channel::builder("fleet")
        .endpoints(targets(&members))
        .ewma_decay(Duration::from_millis(100))
        .build();
    // Warm up: every endpoint connected and timed.
    load(&channel, 400, 16, false).await;
    // Peak-EWMA follows latency, and on a shared machine one server's
    // millisecond timer can run late for a while (the servers share the
    // test's runtime). With the default time constant (1 s) one such
    // stall skews the next two or three windows of 8,000 calls (one
    // server at 1,477 on a CI machine); at 100 ms it is forgotten within
    // a window, as it would be over the longer windows a dashboard shows.
    // A balancer that is uneven by design is uneven in every window; up
    // to three are measured, and one must be within 15% of even (each
    // within 25%).
    let mut windows = Vec::new();
    for _ in 0..3 {
        let shares = shares(&channel, &members, 8000, 32).await;
        assert!(
            shares.iter().all(|s| (1500..=2500).contains(s)),
            "uneven beyond any noise: {shares:?}"
        );
        let even = shares.iter().all(|s| (1700..=2300).contains(s));
        windows.push(shares);
        if even {
            return;
        }
    }
    panic!("no window within 15% of even: {windows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_server_gets_a_small_share() {
    let _serial = SERIAL.lock().await;
    let members = fleet(3).await;
    for m in &members {
        m.delay_us.store(1_000, Ordering::Relaxed);
    }
    members[0].delay_us.store(10_000, Ordering::Relaxed);
    let channel = Channel::builder("fleet")
        .endpoints(targets(&members))
        .build();
    // Warm up: every endpoint connected and timed.
    load(&channel, 300, 24, false).await;
    // As above, a window may be skewed by the machine's noise (late timers
    // make the fast servers look slower): up to three windows, one where
    // the slow server takes under 15% (a third is even), each under 25%.
    let mut windows = Vec::new();
    for _ in 0..3 {
        let shares = shares(&channel, &members, 3000, 24).await;
        let (slow, total) = (shares[0], shares.iter().sum::<u64>());
        assert!(
            slow * 100 < total * 25,
            "the slow server took {slow} of {total}"
        );
        windows.push(shares);
        if slow * 100 < total * 15 {
            return;
        }
    }
    panic!("the slow server took 15% or more in every window: {windows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_server_mid_load_fails_no_call_that_can_be_retried() {
    let _serial = SERIAL.lock().await;
    let mut members = fleet(3).await;
    for m in &members {
        m.delay_us.store(2_000, Ordering::Relaxed);
    }
    let channel = Channel::builder("fleet")
        .endpoints(targets(&members))
        .retries(2)
        .build();
    load(&channel, 100, 8, true).await;
    // Idempotent calls: every one succeeds, retried elsewhere if it was
    // on the killed server.
    let running = {
        let channel = channel.clone();
        tokio::spawn(async move { load(&channel, 3000, 24, true).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    members[0].kill();
    let results = within(60, "the load", running).await.unwrap();
    assert!(failures(&results).is_empty(), "{:?}", failures(&results));
    // Calls that are not idempotent: only those in flight on the killed
    // server may fail (at most the callers' number), never one that had
    // not reached it.
    let mut members2 = fleet(3).await;
    for m in &members2 {
        m.delay_us.store(2_000, Ordering::Relaxed);
    }
    let channel = Channel::builder("fleet2")
        .endpoints(targets(&members2))
        .build();
    load(&channel, 100, 8, false).await;
    let running = {
        let channel = channel.clone();
        tokio::spawn(async move { load(&channel, 3000, 24, false).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    members2[1].kill();
    let results = within(60, "the load", running).await.unwrap();
    let failed = failures(&results);
    assert!(failed.len() <= 24, "{} failed", failed.len());
    assert!(
        failed.iter().all(|s| s.code() == Code::Unavailable),
        "{failed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_added_to_dns_takes_load_within_one_resolution() {
    let _serial = SERIAL.lock().await;
    let members = fleet(3).await;
    // Each call takes a millisecond, as in the tests above: with calls of
    // a few microseconds, the new server's first (cold) call alone decides
    // its latency estimate against the others' for the whole short load.
    for m in &members {
        m.delay_us.store(1_000, Ordering::Relaxed);
    }
    let known = Arc::new(parking_lot::Mutex::new(vec![
        members[0].addr,
        members[1].addr,
    ]));
    let resolver_view = known.clone();
    let channel = Channel::builder("fleet.internal:7000")
        .dns()
        .resolve_interval(Duration::from_millis(200), Duration::from_millis(50))
        .resolver(move |_name| {
            let addrs = resolver_view.lock().clone();
            async move { Ok(addrs) }
        })
        .build();
    let results = load(&channel, 500, 8, false).await;
    assert!(failures(&results).is_empty());
    assert_eq!(members[2].calls(), 0);
    known.lock().push(members[2].addr);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let results = load(&channel, 1500, 8, false).await;
    assert!(failures(&results).is_empty());
    assert!(
        members[2].calls() > 200,
        "the new server took {}",
        members[2].calls()
    );
    // And one removed takes no more.
    known.lock().retain(|a| *a != members[0].addr);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before = members[0].calls();
    let results = load(&channel, 500, 8, false).await;
    assert!(failures(&results).is_empty());
    assert_eq!(members[0].calls(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_finishes_its_calls_and_gets_no_new_ones() {
    let _serial = SERIAL.lock().await;
    let mut members = fleet(2).await;
    for m in &members {
        m.delay_us.store(50_000, Ordering::Relaxed);
    }
    let channel = Channel::builder("fleet")
        .endpoints(targets(&members))
        .build();
    load(&channel, 20, 4, false).await;
    let running = {
        let channel = channel.clone();
        tokio::spawn(async move { load(&channel, 400, 16, false).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let drained = members[0].drain();
    within(10, "the server drains", drained).await.unwrap();
    let after_drain = members[0].calls();
    let results = within(60, "the load", running).await.unwrap();
    // Not one call failed: those in flight on the draining server
    // finished there, the rest went to the other.
    assert!(failures(&results).is_empty(), "{:?}", failures(&results));
    assert_eq!(members[0].calls(), after_drain);
    assert!(members[1].calls() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_server_is_ejected_and_readmitted() {
    let _serial = SERIAL.lock().await;
    let members = fleet(3).await;
    let detection = OutlierDetection::default()
        .interval(Duration::from_millis(200))
        .base_ejection_time(Duration::from_millis(800))
        .minimum_calls(10);
    let channel = Channel::builder("fleet")
        .endpoints(targets(&members))
        .balance(Policy::RoundRobin)
        .outlier_detection(Some(detection))
        .build();
    members[2].failing.store(true, Ordering::Relaxed);
    let bad = members[2].addr.to_string();
    // Calls that fail there are answered (UNAVAILABLE from the server):
    // after the next judgement it is ejected and takes none.
    within(10, "the failing server ejected", async {
        loop {
            let _ = load(&channel, 60, 4, false).await;
            let ejected = channel
                .endpoints()
                .iter()
                .any(|e| e.target == bad && e.state == EndpointState::Ejected);
            if ejected {
                break;
            }
        }
    })
    .await;
    let before = members[2].calls();
    let results = load(&channel, 300, 4, false).await;
    assert!(
        failures(&results).is_empty(),
        "an ejected server took calls"
    );
    assert_eq!(members[2].calls(), before);
    // It recovers; after its ejection time it takes calls again.
    members[2].failing.store(false, Ordering::Relaxed);
    within(10, "the server readmitted", async {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = load(&channel, 30, 2, false).await;
            if members[2].calls() > before {
                break;
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_restarted_at_random_lose_and_misroute_nothing() {
    let _serial = SERIAL.lock().await;
    let mut members = fleet(3).await;
    for m in &members {
        m.delay_us.store(500, Ordering::Relaxed);
    }
    let ports: Vec<u16> = members.iter().map(|m| m.addr.port()).collect();
    let channel = Channel::builder("fleet")
        .endpoints(targets(&members))
        .retries(3)
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .build();
    let running = {
        let channel = channel.clone();
        tokio::spawn(async move { load(&channel, 20_000, 16, true).await })
    };
    // Restart one server at a time, each down for a moment.
    for round in 0..6u64 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let i = (round * 7 % 3) as usize;
        if round % 2 == 0 {
            members[i].kill();
        } else {
            within(10, "a drain", members[i].drain()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        members[i] = Member::start(i as u64, ports[i]).await;
    }
    let results = within(120, "the load", running).await.unwrap();
    // Every response matched its request (checked in `load`), and no call
    // was lost.
    assert_eq!(results.len(), 20_000);
    assert!(
        failures(&results).is_empty(),
        "{:?}",
        &failures(&results)[..failures(&results).len().min(5)]
    );
}

/// Counts connections opened.
#[derive(Default, Clone)]
struct Opened(Arc<AtomicU64>);

impl tram::observe::Observer for Opened {
    fn connection(&self, event: &tram::observe::ConnectionEvent<'_>) {
        if matches!(event, tram::observe::ConnectionEvent::Opened { .. }) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_their_max_age_rotate_without_failing_a_call() {
    let _serial = SERIAL.lock().await;
    let opened = Opened::default();
    let server = Server::builder()
        .observer(opened.clone())
        .max_connection_age(Duration::from_millis(200), Duration::from_secs(5))
        .unary(WORK, |req: Request<Job>| async move {
            tokio::time::sleep(Duration::from_micros(300)).await;
            Ok(Response::new(req.into_inner()))
        })
        .build();
    let (addr, _stop, _task) = support::serve(server).await;
    let channel = Channel::new(addr.to_string());
    // Not idempotent, no retries: a call refused as a connection closes
    // would fail.
    let results = within(60, "the load", load(&channel, 6000, 16, false)).await;
    assert!(
        failures(&results).is_empty(),
        "{:?}",
        failures(&results).first()
    );
    let n = opened.0.load(Ordering::Relaxed);
    assert!(n >= 3, "only {n} connections: none rotated");
}
