//! One endpoint of a channel: an address, its `pool_size` connection
//! slots (each a connection or the backoff of the next attempt to make
//! one), its load (calls in flight weighted by Peak-EWMA latency) and its
//! health (outlier ejection, removal by discovery).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::time::Instant;

use super::discover::EndpointSet;
pub(crate) use super::ewma::nanos;
use super::ewma::{FAILURE_PENALTY_NS, PeakEwma};
use crate::observe::{EndpointInfo, EndpointState};
use crate::rpc::Status;
use crate::rpc::client::{ChannelConfig, ConnRef, Shares, connect};

/// What an endpoint's connections report of their calls: latency samples
/// and outcomes. Shared by the endpoint and its connections' readers.
#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) latency: PeakEwma,
    /// Calls that ended since the last outlier check, and those of them
    /// that failed (the server's or the network's fault).
    pub(crate) ended: AtomicU32,
    pub(crate) failed: AtomicU32,
}

impl Stats {
    /// A call ended after `rtt_ns` (seen at `now_ns`, see [`nanos`]),
    /// failed or not.
    pub(crate) fn observe(&self, rtt_ns: u64, failed: bool, now_ns: u64) {
        let sample = if failed {
            rtt_ns.max(FAILURE_PENALTY_NS)
        } else {
            rtt_ns
        };
        self.latency.observe(sample, now_ns);
        self.ended.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One connection slot.
struct Slot {
    /// Read by every call: an `ArcSwap`'s load writes nothing the callers
    /// share, where a lock's read takes and gives back a count on a line
    /// every caller's thread writes.
    conn: ArcSwapOption<Shares>,
    connecting: tokio::sync::Mutex<Backoff>,
}

/// When a slot may next try to connect.
#[derive(Default)]
struct Backoff {
    failures: u32,
    next_attempt: Option<Instant>,
    seed: u64,
    last_error: Option<String>,
}

impl Backoff {
    /// The attempt failed: the wait before the next.
    fn failed(&mut self, base: Duration, max: Duration) -> Duration {
        let exp = base.saturating_mul(1u32 << self.failures.min(20));
        let delay = exp.min(max);
        // xorshift: jitter needs spread, not cryptographic quality.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let factor = 0.8 + (self.seed % 1000) as f64 / 2500.0;
        let wait = delay.mul_f64(factor);
        self.next_attempt = Some(Instant::now() + wait);
        self.failures += 1;
        wait
    }
}

/// An address calls may go to.
pub(crate) struct Endpoint {
    /// The discovery key it is known by.
    pub(crate) key: String,
    /// What it connects to (`host:port`).
    pub(crate) target: String,
    slots: Vec<Slot>,
    pub(crate) stats: Arc<Stats>,
    /// Ejected by outlier detection until this time (nanoseconds since
    /// the stats' epoch; 0: not ejected).
    ejected_until: AtomicU64,
    pub(crate) times_ejected: AtomicU32,
    /// Removed by discovery: no new calls; its connections close as their
    /// calls end.
    removed: AtomicBool,
    /// Its connections report latency (the channel picks among endpoints).
    track: bool,
}

impl Endpoint {
    pub(crate) fn new(key: String, target: String, config: &ChannelConfig, track: bool) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            ^ (target.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            | 1;
        let slots = (0..config.pool_size.max(1))
            .map(|i| Slot {
                conn: ArcSwapOption::empty(),
                connecting: tokio::sync::Mutex::new(Backoff {
                    seed: seed.wrapping_mul(i as u64 + 1),
                    ..Backoff::default()
                }),
            })
            .collect();
        Endpoint {
            key,
            target,
            slots,
            stats: Arc::new(Stats {
                latency: PeakEwma::new(
                    Duration::from_micros(100),
                    config.ewma_decay,
                    Instant::now(),
                ),
                ended: AtomicU32::new(0),
                failed: AtomicU32::new(0),
            }),
            ejected_until: AtomicU64::new(0),
            times_ejected: AtomicU32::new(0),
            removed: AtomicBool::new(false),
            track,
        }
    }

    /// A connection to use now, without waiting: the least loaded of its
    /// slots', or an idle one. `None` while a slot is still to be
    /// connected (the general path connects it).
    #[inline]
    pub(crate) fn ready_connection(&self) -> Option<ConnRef> {
        if let [slot] = self.slots.as_slice() {
            return slot
                .conn
                .load()
                .as_ref()
                .filter(|c| c.usable())
                .map(|c| c.get());
        }
        match self.survey() {
            (Some((0, c)), _) => Some(c),
            (best, empty) if empty.is_empty() => best.map(|(_, c)| c),
            _ => None,
        }
    }

    /// Whether it may take new calls as of `now_ns` (see [`nanos`]): not
    /// ejected, not removed.
    #[inline]
    pub(crate) fn admitted(&self, now_ns: u64) -> bool {
        if self.removed.load(Ordering::Relaxed) {
            return false;
        }
        let until = self.ejected_until.load(Ordering::Relaxed);
        until == 0 || now_ns >= until
    }

    /// Its cost for a new call as of `now_ns`: the Peak-EWMA latency
    /// times the calls in flight (on its least loaded connection) plus
    /// one. `None` if it has no usable connection or is not admitted.
    #[inline]
    pub(crate) fn cost(&self, now_ns: u64) -> Option<f64> {
        if !self.admitted(now_ns) {
            return None;
        }
        let load = self.least_load()?;
        Some(self.stats.latency.get(now_ns) * (load + 1) as f64)
    }

    /// The calls in flight on its least loaded usable connection.
    #[inline]
    fn least_load(&self) -> Option<usize> {
        let usable = |s: &Slot| {
            let conn = s.conn.load();
            let c = conn.as_ref().filter(|c| c.usable())?;
            Some(c.in_flight.load(Ordering::Relaxed))
        };
        self.slots.iter().filter_map(usable).min()
    }

    /// Its least loaded usable connection (with its load), and the slots
    /// without one.
    fn survey(&self) -> (Option<(usize, ConnRef)>, Vec<usize>) {
        let mut best: Option<(usize, ConnRef)> = None;
        let mut empty = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            match slot.conn.load().as_ref() {
                Some(c) if c.usable() => {
                    let load = c.in_flight.load(Ordering::Relaxed);
                    if best.as_ref().is_none_or(|(l, _)| load < *l) {
                        best = Some((load, c.get()));
                    }
                }
                _ => empty.push(i),
            }
        }
        (best, empty)
    }

    /// The least loaded usable connection, connecting in the caller if
    /// needed.
    ///
    /// An idle connection is used as is. Otherwise an empty slot is
    /// connected, by the first caller to claim it: callers that find a slot
    /// already connecting move on to the next one, so that a burst of first
    /// calls opens the pool rather than queueing on one connection.
    pub(crate) async fn connection(&self, config: &ChannelConfig) -> Result<ConnRef, Status> {
        let (best, empty) = self.survey();
        if let Some((0, c)) = best {
            return Ok(c);
        }
        // Connecting is rare and its future large (TCP, TLS): boxed, so
        // that every call's future does not carry its state.
        for &i in &empty {
            if let Ok(backoff) = self.slots[i].connecting.try_lock() {
                return Box::pin(self.connect_slot(i, backoff, config)).await;
            }
        }
        match (best, empty.first()) {
            (Some((_, c)), _) => Ok(c),
            // Every empty slot is being connected by someone: wait for one.
            (None, Some(&i)) => {
                Box::pin(async {
                    let backoff = self.slots[i].connecting.lock().await;
                    self.connect_slot(i, backoff, config).await
                })
                .await
            }
            (None, None) => Err(Status::unavailable("no connection")),
        }
    }

    /// Connects every empty slot that is not backing off or being
    /// connected, each in a task of its own; the set's callers waiting for
    /// an endpoint are told of each outcome, and a failure asks discovery
    /// to look again. For channels that pick among endpoints: callers use
    /// the endpoints that are ready meanwhile.
    pub(crate) fn connect_in_background(
        self: &Arc<Self>,
        config: &Arc<ChannelConfig>,
        set: &Arc<EndpointSet>,
    ) {
        let now = Instant::now();
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.conn.load().as_ref().is_some_and(|c| c.usable()) {
                continue;
            }
            let Ok(backoff) = slot.connecting.try_lock() else {
                continue;
            };
            if backoff.next_attempt.is_some_and(|at| now < at) {
                continue;
            }
            drop(backoff);
            let (endpoint, config, set) = (self.clone(), config.clone(), set.clone());
            tokio::spawn(async move {
                let Ok(backoff) = endpoint.slots[i].connecting.try_lock() else {
                    return;
                };
                if endpoint.connect_slot(i, backoff, &config).await.is_err() {
                    set.resolve_now.notify_one();
                }
                // Success or failure, callers waiting for an endpoint look
                // again (a failure may leave none to wait for).
                set.ready.notify_waiters();
            });
        }
    }

    async fn connect_slot(
        &self,
        i: usize,
        mut backoff: tokio::sync::MutexGuard<'_, Backoff>,
        cfg: &ChannelConfig,
    ) -> Result<ConnRef, Status> {
        let slot = &self.slots[i];
        if let Some(c) = slot.conn.load().as_ref().filter(|c| c.usable()) {
            return Ok(c.get());
        }
        if let Some(at) = backoff.next_attempt {
            let now = Instant::now();
            if now < at {
                return Err(Status::unavailable(format!(
                    "{}: connection lost, next attempt in {:?}",
                    self.target,
                    at - now
                ))
                .not_sent());
            }
        }
        let publish_load = self.slots.len() > 1 || self.track;
        let stats = self.track.then(|| self.stats.clone());
        cfg.observers.connect_attempt();
        let attempt = tokio::time::timeout(
            cfg.connect_timeout,
            connect(cfg, &self.target, publish_load, stats),
        )
        .await;
        let why = match attempt {
            Ok(Ok(conn)) => {
                *backoff = Backoff {
                    seed: backoff.seed,
                    ..Backoff::default()
                };
                if self.removed.load(Ordering::Relaxed) {
                    conn.abandon();
                }
                let shares = Arc::new(Shares::new(conn));
                let share = shares.get();
                slot.conn.store(Some(shares));
                return Ok(share);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_owned(),
        };
        let wait = backoff.failed(cfg.backoff_base, cfg.backoff_max);
        cfg.observers
            .connect_failed(&self.target, backoff.failures, wait);
        tracing::debug!(target = %self.target, failures = backoff.failures, "connect failed: {why}");
        let status =
            Status::unavailable(format!("connecting to {}: {why}", self.target)).not_sent();
        backoff.last_error = Some(why);
        Err(status)
    }

    /// Ejects it until `until`.
    pub(crate) fn eject(&self, until: Instant) {
        self.ejected_until
            .store(nanos(until).max(1), Ordering::Relaxed);
    }

    /// Whether it is ejected as of `now`.
    pub(crate) fn is_ejected(&self, now: Instant) -> bool {
        let until = self.ejected_until.load(Ordering::Relaxed);
        until != 0 && nanos(now) < until
    }

    /// Readmits it (its ejection time is over).
    pub(crate) fn readmit(&self) {
        self.ejected_until.store(0, Ordering::Relaxed);
    }

    /// Discovery removed it: its connections close once their calls end.
    pub(crate) fn remove(&self) {
        self.removed.store(true, Ordering::Relaxed);
        self.abandon();
    }

    /// The channel is gone: its connections close once their calls end.
    pub(crate) fn abandon(&self) {
        for slot in &self.slots {
            if let Some(conn) = slot.conn.load().as_ref() {
                conn.abandon();
            }
        }
    }

    /// A snapshot of each of its slots.
    pub(crate) fn info(&self, now: Instant) -> Vec<EndpointInfo> {
        let ejected = self.is_ejected(now);
        self.slots
            .iter()
            .map(|slot| {
                let conn = slot.conn.load_full();
                let usable = conn.as_ref().is_some_and(|c| c.usable());
                let connection = conn.filter(|_| usable).map(|c| c.info());
                let (state, failures, retry_in, last_error) = match slot.connecting.try_lock() {
                    Err(_) => (EndpointState::Connecting, 0, None, None),
                    Ok(b) => {
                        let retry_in = b.next_attempt.filter(|at| *at > now).map(|at| at - now);
                        let state = if retry_in.is_some() {
                            EndpointState::BackingOff
                        } else {
                            EndpointState::Idle
                        };
                        (state, b.failures, retry_in, b.last_error.clone())
                    }
                };
                let state = match (usable, ejected) {
                    (_, true) => EndpointState::Ejected,
                    (true, false) => EndpointState::Ready,
                    (false, false) => state,
                };
                EndpointInfo::new(
                    self.target.clone(),
                    state,
                    connection,
                    failures,
                    retry_in,
                    last_error,
                    self.stats.latency.get(nanos(now)),
                )
            })
            .collect()
    }
}
