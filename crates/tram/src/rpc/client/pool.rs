//! A channel's connections: `pool_size` slots, each holding a connection
//! or the backoff state of the next attempt to make one. Calls go to the
//! least loaded usable connection; a slot is connected by the first call
//! that needs it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::time::Instant;

use super::super::Status;
use super::builder::ChannelConfig;
use super::conn::ClientConn;
use super::reader;
use crate::observe::{EndpointInfo, EndpointState};

/// The connections of one channel.
pub(super) struct Pool {
    pub(super) config: ChannelConfig,
    slots: Vec<Slot>,
}

struct Slot {
    conn: RwLock<Option<Arc<ClientConn>>>,
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

impl Drop for Pool {
    fn drop(&mut self) {
        // The last handle to the channel is gone: its connections close as
        // their calls end, rather than idling on with their reader tasks.
        for slot in &self.slots {
            if let Some(conn) = slot.conn.read().as_ref() {
                conn.abandon();
            }
        }
    }
}

impl Pool {
    pub(super) fn new(config: ChannelConfig) -> Pool {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            | 1;
        let slots = (0..config.pool_size.max(1))
            .map(|i| Slot {
                conn: RwLock::new(None),
                connecting: tokio::sync::Mutex::new(Backoff {
                    seed: seed.wrapping_mul(i as u64 + 1),
                    ..Backoff::default()
                }),
            })
            .collect();
        Pool { config, slots }
    }

    /// A connection to use now, without waiting: the least loaded, or an
    /// idle one. `None` while a slot is still to be connected (the general
    /// path connects it).
    pub(super) fn ready_connection(&self) -> Option<Arc<ClientConn>> {
        if let [slot] = self.slots.as_slice() {
            return slot.conn.read().as_ref().filter(|c| c.usable()).cloned();
        }
        match self.survey() {
            (Some((0, c)), _) => Some(c),
            (best, empty) if empty.is_empty() => best.map(|(_, c)| c),
            _ => None,
        }
    }

    /// The pool as it is: its least loaded usable connection (with its
    /// load), and the slots without one.
    fn survey(&self) -> (Option<(usize, Arc<ClientConn>)>, Vec<usize>) {
        let mut best: Option<(usize, Arc<ClientConn>)> = None;
        let mut empty = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            match slot.conn.read().as_ref() {
                Some(c) if c.usable() => {
                    let load = c.in_flight.load(Ordering::Relaxed);
                    if best.as_ref().is_none_or(|(l, _)| load < *l) {
                        best = Some((load, c.clone()));
                    }
                }
                _ => empty.push(i),
            }
        }
        (best, empty)
    }

    /// The least loaded usable connection, connecting if needed.
    ///
    /// An idle connection is used as is. Otherwise an empty slot is
    /// connected, by the first caller to claim it: callers that find a slot
    /// already connecting move on to the next one, so that a burst of first
    /// calls opens the pool rather than queueing on one connection.
    pub(super) async fn connection(&self) -> Result<Arc<ClientConn>, Status> {
        let (best, empty) = self.survey();
        if let Some((0, c)) = best {
            return Ok(c);
        }
        // Connecting is rare and its future large (TCP, TLS): boxed, so
        // that every call's future does not carry its state.
        for &i in &empty {
            if let Ok(backoff) = self.slots[i].connecting.try_lock() {
                return Box::pin(self.connect_slot(i, backoff)).await;
            }
        }
        match (best, empty.first()) {
            (Some((_, c)), _) => Ok(c),
            // Every empty slot is being connected by someone: wait for one.
            (None, Some(&i)) => {
                Box::pin(async {
                    let backoff = self.slots[i].connecting.lock().await;
                    self.connect_slot(i, backoff).await
                })
                .await
            }
            (None, None) => Err(Status::unavailable("no connection")),
        }
    }

    async fn connect_slot(
        &self,
        i: usize,
        mut backoff: tokio::sync::MutexGuard<'_, Backoff>,
    ) -> Result<Arc<ClientConn>, Status> {
        let slot = &self.slots[i];
        let cfg = &self.config;
        if let Some(c) = slot.conn.read().as_ref().filter(|c| c.usable()) {
            return Ok(c.clone());
        }
        if let Some(at) = backoff.next_attempt {
            if Instant::now() < at {
                return Err(Status::unavailable(format!(
                    "{}: connection lost, next attempt in {:?}",
                    cfg.target,
                    at - Instant::now()
                )));
            }
        }
        let publish_load = self.slots.len() > 1;
        cfg.observers.connect_attempt();
        let attempt =
            tokio::time::timeout(cfg.connect_timeout, reader::connect(cfg, publish_load)).await;
        let why = match attempt {
            Ok(Ok(conn)) => {
                *backoff = Backoff {
                    seed: backoff.seed,
                    ..Backoff::default()
                };
                *slot.conn.write() = Some(conn.clone());
                return Ok(conn);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_owned(),
        };
        let wait = backoff.failed(cfg.backoff_base, cfg.backoff_max);
        cfg.observers
            .connect_failed(&cfg.target, backoff.failures, wait);
        tracing::debug!(target = %cfg.target, failures = backoff.failures, "connect failed: {why}");
        let status = Status::unavailable(format!("connecting to {}: {why}", cfg.target));
        backoff.last_error = Some(why);
        Err(status)
    }

    /// A snapshot of every slot.
    pub(super) fn endpoints(&self) -> Vec<EndpointInfo> {
        let now = Instant::now();
        self.slots
            .iter()
            .map(|slot| {
                let conn = slot.conn.read().clone();
                let connection = conn.as_ref().map(|c| c.info());
                let usable = conn.as_ref().is_some_and(|c| c.usable());
                let (state, failures, retry_in, last_error) = match slot.connecting.try_lock() {
                    Err(_) => (EndpointState::Connecting, 0, None, None),
                    Ok(b) => {
                        let retry_in = b.next_attempt.filter(|at| *at > now).map(|at| at - now);
                        let state = if usable {
                            EndpointState::Ready
                        } else if retry_in.is_some() {
                            EndpointState::BackingOff
                        } else {
                            EndpointState::Idle
                        };
                        (state, b.failures, retry_in, b.last_error.clone())
                    }
                };
                let state = if usable { EndpointState::Ready } else { state };
                EndpointInfo {
                    target: self.config.target.clone(),
                    state,
                    connection: connection.filter(|_| usable),
                    failures,
                    retry_in,
                    last_error,
                }
            })
            .collect()
    }
}
