//! A channel's endpoints and the connection each call takes: one fixed
//! endpoint (a `host:port` target: its slots, no balancing), or a set kept
//! by discovery and picked from per call (see [`crate::balance`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::time::Instant;

use super::super::Status;
use super::builder::ChannelConfig;
use super::share::ConnRef;
use crate::balance::discover::{self, Discovery, EndpointSet};
use crate::balance::endpoint::{Endpoint, nanos};
use crate::balance::pick;
use crate::observe::EndpointInfo;

/// The endpoints of one channel.
pub(super) struct Pool {
    pub(super) config: Arc<ChannelConfig>,
    /// A channel to one fixed target: its endpoint, picked without a lock.
    single: Option<Arc<Endpoint>>,
    /// Otherwise, the endpoints discovery found.
    set: Arc<EndpointSet>,
    /// The discovery task, started by the first call (it needs the
    /// runtime), aborted when the channel is dropped.
    manager: OnceLock<Option<tokio::task::JoinHandle<()>>>,
    /// Round robin's turn.
    turn: AtomicUsize,
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Some(Some(task)) = self.manager.get() {
            task.abort();
        }
        // The last handle to the channel is gone: its connections close as
        // their calls end, rather than idling on with their reader tasks.
        if let Some(e) = &self.single {
            e.abandon();
        }
        for e in self.set.snapshot().iter() {
            e.abandon();
        }
    }
}

impl Pool {
    pub(super) fn new(config: ChannelConfig) -> Pool {
        let single = matches!(config.discovery, Discovery::Single).then(|| {
            let target = config.target.clone();
            Arc::new(Endpoint::new(target.clone(), target, &config, false))
        });
        let set = Arc::new(EndpointSet::new());
        if let Discovery::Static(targets) = &config.discovery {
            // Known now: the first call need not wait for the task.
            let list = targets.iter().map(|t| (t.clone(), t.clone())).collect();
            set.update(&list, &config);
        }
        Pool {
            config: Arc::new(config),
            single,
            set,
            manager: OnceLock::new(),
            turn: AtomicUsize::new(0),
        }
    }

    /// Starts the discovery task, once, on the current runtime.
    fn start(&self) {
        self.manager.get_or_init(|| {
            let handle = tokio::runtime::Handle::try_current().ok()?;
            let (set, config) = (self.set.clone(), self.config.clone());
            let discovery = config.discovery.clone();
            Some(handle.spawn(discover::run(set, config, discovery)))
        });
    }

    /// A connection to use now, without waiting, and (when the call is to
    /// be timed: the channel picks among endpoints) the time it was
    /// picked at, on the balancer's clock (0: not timed). `None` when none is ready (the general path waits for
    /// one, or connects it).
    #[inline]
    pub(super) fn ready_connection(&self) -> Option<(ConnRef, u64)> {
        match &self.single {
            Some(e) => e.ready_connection().map(|c| (c, 0)),
            None => self.pick(),
        }
    }

    /// The connection a balanced call takes, if one is ready; endpoints
    /// seen without a connection start connecting.
    fn pick(&self) -> Option<(ConnRef, u64)> {
        self.start();
        let endpoints = self.set.endpoints.read();
        if let [only] = &endpoints[..] {
            // No choice to make: no clock, no timing.
            let now = Instant::now();
            return match only.ready_connection() {
                Some(c) if only.admitted(nanos(now)) => Some((c, 0)),
                _ => {
                    only.connect_in_background(&self.config, &self.set);
                    None
                }
            };
        }
        let now = nanos(Instant::now());
        let conn = pick::pick(self.config.policy, &endpoints, now, &self.turn, |e| {
            e.connect_in_background(&self.config, &self.set);
        })?;
        Some((conn, now))
    }

    /// A connection, connecting (or waiting for one) if needed.
    ///
    /// # Errors
    ///
    /// `UNAVAILABLE`: no endpoint can be reached now (each failed and is
    /// backing off), or none became ready within the connect timeout.
    pub(super) async fn connection(&self) -> Result<ConnRef, Status> {
        match &self.single {
            Some(e) => e.connection(&self.config).await,
            None => Box::pin(self.balanced_connection()).await,
        }
    }

    async fn balanced_connection(&self) -> Result<ConnRef, Status> {
        self.start();
        let give_up = Instant::now() + self.config.connect_timeout;
        loop {
            // Registered before looking, so that a connection made between
            // the look and the wait is not missed.
            let ready = self.set.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            if let Some((conn, _)) = self.pick() {
                return Ok(conn);
            }
            let endpoints = self.set.snapshot();
            let discovered = self.set.discovered.load(Ordering::Acquire);
            if discovered && endpoints.is_empty() {
                return Err(
                    Status::unavailable(format!("{}: no endpoints", self.config.target)).not_sent(),
                );
            }
            if discovered && !endpoints.iter().any(|e| self.may_come(e)) {
                self.set.resolve_now.notify_one();
                return Err(self.unreachable(&endpoints));
            }
            if tokio::time::timeout_at(give_up, ready).await.is_err() {
                return Err(Status::unavailable(format!(
                    "{}: no endpoint became ready within {:?}",
                    self.config.target, self.config.connect_timeout
                ))
                .not_sent());
            }
        }
    }

    /// Whether `e` may take calls soon: it is admitted and connecting or
    /// free to connect (not backing off).
    fn may_come(&self, e: &Arc<Endpoint>) -> bool {
        let now = Instant::now();
        if !e.admitted(nanos(now)) {
            return false;
        }
        e.connect_in_background(&self.config, &self.set);
        e.info(now).iter().any(|s| {
            !matches!(
                s.state,
                crate::observe::EndpointState::BackingOff | crate::observe::EndpointState::Ejected
            )
        })
    }

    /// The status of a call no endpoint can take: the last failure seen.
    fn unreachable(&self, endpoints: &[Arc<Endpoint>]) -> Status {
        let now = Instant::now();
        let why = endpoints
            .iter()
            .flat_map(|e| e.info(now))
            .find_map(|s| s.last_error)
            .unwrap_or_else(|| "every endpoint is ejected".to_owned());
        Status::unavailable(format!(
            "{}: no endpoint reachable ({} known; last error: {why})",
            self.config.target,
            endpoints.len()
        ))
        .not_sent()
    }

    /// A snapshot of every endpoint's slots.
    pub(super) fn endpoints(&self) -> Vec<EndpointInfo> {
        let now = Instant::now();
        match &self.single {
            Some(e) => e.info(now),
            None => self
                .set
                .snapshot()
                .iter()
                .flat_map(|e| e.info(now))
                .collect(),
        }
    }
}
