//! Where a channel's endpoints come from, and the task that keeps them
//! current: a fixed list, a DNS name re-resolved periodically and when
//! connections fail, or a stream of changes; with subsetting applied, and
//! outlier detection run at its interval.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::endpoint::Endpoint;
use super::{Change, outlier, subset};
use crate::rpc::client::ChannelConfig;

/// A stream of endpoint changes, boxed.
pub(crate) type Changes = Pin<Box<dyn Stream<Item = Change> + Send>>;

/// Resolves a name to addresses.
pub(crate) type Resolver = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>
        + Send
        + Sync,
>;

/// How a channel learns its endpoints.
#[derive(Clone)]
pub(crate) enum Discovery {
    /// The channel's one target (possibly a name its connections resolve
    /// each time): no balancing, no task.
    Single,
    /// A fixed list of `host:port` targets.
    Static(Vec<String>),
    /// Every address a name (`host:port`) resolves to, resolved again
    /// every `interval` and, no more often than `floor`, when connections
    /// fail.
    Dns {
        name: String,
        interval: Duration,
        floor: Duration,
        resolver: Resolver,
    },
    /// Changes from a stream, taken by the first channel built.
    Changes(Arc<Mutex<Option<Changes>>>),
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Discovery::Single => f.write_str("Single"),
            Discovery::Static(l) => f.debug_tuple("Static").field(l).finish(),
            Discovery::Dns { name, interval, .. } => f
                .debug_struct("Dns")
                .field("name", name)
                .field("interval", interval)
                .finish_non_exhaustive(),
            Discovery::Changes(_) => f.write_str("Changes"),
        }
    }
}

/// The system resolver (`getaddrinfo`, through tokio).
pub(crate) fn system_resolver() -> Resolver {
    Arc::new(|name: String| {
        Box::pin(async move { Ok(tokio::net::lookup_host(name).await?.collect()) })
    })
}

/// The endpoints of a channel that picks among several, shared by its
/// callers and its discovery task.
pub(crate) struct EndpointSet {
    pub(crate) endpoints: RwLock<Arc<[Arc<Endpoint>]>>,
    /// Told when an endpoint may have become ready, or the set changed.
    pub(crate) ready: Arc<Notify>,
    /// Told when a connection failed: resolve again (if by DNS).
    pub(crate) resolve_now: Notify,
    /// The subset's seed, this channel's own.
    seed: u64,
    /// Discovery has run once (an empty set before means "not yet").
    pub(crate) discovered: std::sync::atomic::AtomicBool,
}

impl EndpointSet {
    pub(crate) fn new() -> EndpointSet {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.as_nanos() as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        EndpointSet {
            endpoints: RwLock::new(Arc::from(Vec::new())),
            ready: Arc::new(Notify::new()),
            resolve_now: Notify::new(),
            seed,
            discovered: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes the endpoints those of `discovered` (key and target), or a
    /// subset of them: endpoints kept keep their connections, new ones
    /// start without, and those gone are removed (their connections close
    /// once their calls end).
    pub(crate) fn update(&self, discovered: &BTreeMap<String, String>, config: &ChannelConfig) {
        let keys: Vec<&str> = discovered.keys().map(String::as_str).collect();
        let kept = match config.subset {
            Some(k) => subset::subset(&keys, k, self.seed),
            None => keys,
        };
        let mut endpoints = self.endpoints.write();
        let old: BTreeMap<&str, &Arc<Endpoint>> =
            endpoints.iter().map(|e| (e.key.as_str(), e)).collect();
        let mut next = Vec::with_capacity(kept.len());
        for key in &kept {
            let target = &discovered[*key];
            match old.get(key) {
                Some(e) if &e.target == target => next.push(Arc::clone(e)),
                _ => next.push(Arc::new(Endpoint::new(
                    (*key).to_owned(),
                    target.clone(),
                    config,
                    true,
                ))),
            }
        }
        for e in endpoints.iter() {
            if !next.iter().any(|n| Arc::ptr_eq(n, e)) {
                e.remove();
            }
        }
        if next.len() != endpoints.len()
            || !next
                .iter()
                .zip(endpoints.iter())
                .all(|(a, b)| Arc::ptr_eq(a, b))
        {
            tracing::debug!(endpoints = next.len(), "endpoints changed");
        }
        *endpoints = Arc::from(next);
        drop(endpoints);
        self.discovered
            .store(true, std::sync::atomic::Ordering::Release);
        self.ready.notify_waiters();
    }

    /// The endpoints now.
    pub(crate) fn snapshot(&self) -> Arc<[Arc<Endpoint>]> {
        self.endpoints.read().clone()
    }
}

/// Keeps `set` current from `discovery`, and runs outlier detection, until
/// aborted (the channel is dropped).
pub(crate) async fn run(set: Arc<EndpointSet>, config: Arc<ChannelConfig>, discovery: Discovery) {
    let outlier_every = config
        .outlier
        .as_ref()
        .map_or(Duration::from_secs(3600), |o| o.interval);
    let mut outlier_tick = tokio::time::interval(outlier_every);
    outlier_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut discovered = BTreeMap::new();
    match discovery {
        Discovery::Single => {}
        Discovery::Static(targets) => {
            for t in targets {
                discovered.insert(t.clone(), t);
            }
            set.update(&discovered, &config);
            loop {
                outlier_tick.tick().await;
                check_outliers(&set, &config);
            }
        }
        Discovery::Dns {
            name,
            interval,
            floor,
            resolver,
        } => {
            let mut last = None::<Instant>;
            let mut due = tokio::time::interval(interval);
            due.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = due.tick() => {}
                    () = set.resolve_now.notified() => {
                        // Not more often than the floor.
                        if let Some(at) = last {
                            tokio::time::sleep_until(at + floor).await;
                        }
                    }
                    _ = outlier_tick.tick() => {
                        check_outliers(&set, &config);
                        continue;
                    }
                }
                last = Some(Instant::now());
                match resolver(name.clone()).await {
                    Ok(addrs) if !addrs.is_empty() => {
                        discovered = addrs
                            .iter()
                            .map(|a| (a.to_string(), a.to_string()))
                            .collect();
                        set.update(&discovered, &config);
                    }
                    // Keep what there is: a failed lookup is no reason to
                    // drop endpoints that may still serve.
                    Ok(_) => tracing::warn!(%name, "name resolved to no address"),
                    Err(e) => tracing::warn!(%name, error = %e, "resolving failed"),
                }
                if !set.discovered.load(std::sync::atomic::Ordering::Acquire) {
                    // Callers wait for a first answer: say there is none.
                    set.discovered
                        .store(true, std::sync::atomic::Ordering::Release);
                    set.ready.notify_waiters();
                }
            }
        }
        Discovery::Changes(changes) => {
            let Some(mut changes) = changes.lock().take() else {
                tracing::warn!("the stream of endpoint changes was taken by another channel");
                return;
            };
            set.update(&discovered, &config);
            loop {
                tokio::select! {
                    change = std::future::poll_fn(|cx| changes.as_mut().poll_next(cx)) => {
                        match change {
                            Some(Change::Insert(key, target)) => {
                                discovered.insert(key, target);
                            }
                            Some(Change::Remove(key)) => {
                                discovered.remove(&key);
                            }
                            // The stream ended: the set stays as it is.
                            None => break,
                        }
                        set.update(&discovered, &config);
                    }
                    _ = outlier_tick.tick() => check_outliers(&set, &config),
                }
            }
            loop {
                outlier_tick.tick().await;
                check_outliers(&set, &config);
            }
        }
    }
}

fn check_outliers(set: &EndpointSet, config: &ChannelConfig) {
    if let Some(cfg) = &config.outlier {
        let endpoints = set.snapshot();
        let now = Instant::now();
        let before = endpoints.iter().filter(|e| e.is_ejected(now)).count();
        outlier::evaluate(&endpoints, cfg, now);
        if endpoints.iter().filter(|e| e.is_ejected(now)).count() < before {
            // Readmitted endpoints may serve callers that wait.
            set.ready.notify_waiters();
        }
    }
}
