//! [`ChannelBuilder`]'s fleet settings: where endpoints come from and how
//! calls are spread over them (see [`crate::balance`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use parking_lot::Mutex;

use super::builder::ChannelBuilder;
use crate::balance::discover::{Discovery, system_resolver};
use crate::balance::{Change, OutlierDetection, Policy};

impl ChannelBuilder {
    /// Spreads calls over a fixed list of `host:port` targets (the
    /// channel's own target then only names it).
    pub fn endpoints<I, S>(mut self, targets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.discovery = Discovery::Static(targets.into_iter().map(Into::into).collect());
        self
    }

    /// Spreads calls over every address the target (`host:port`) resolves
    /// to, A and AAAA records alike, resolved again every 30 seconds
    /// (see [`ChannelBuilder::resolve_interval`]) and when connections
    /// fail.
    pub fn dns(mut self) -> Self {
        self.config.discovery = Discovery::Dns {
            name: self.config.target.clone(),
            interval: Duration::from_secs(30),
            floor: Duration::from_secs(1),
            resolver: system_resolver(),
        };
        self
    }

    /// With [`ChannelBuilder::dns`]: resolves again every `interval`, and
    /// after a connection failure no sooner than `floor` after the last
    /// resolution (defaults 30 s and 1 s).
    pub fn resolve_interval(mut self, interval: Duration, floor: Duration) -> Self {
        if let Discovery::Dns {
            interval: i,
            floor: f,
            ..
        } = &mut self.config.discovery
        {
            (*i, *f) = (interval, floor.min(interval));
        }
        self
    }

    /// With [`ChannelBuilder::dns`]: resolves names with `resolve` instead
    /// of the system's resolver (a service registry's client, a fake for
    /// tests).
    pub fn resolver<F, Fut>(mut self, resolve: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'static,
    {
        if let Discovery::Dns { resolver, .. } = &mut self.config.discovery {
            *resolver = Arc::new(move |name| Box::pin(resolve(name)));
        }
        self
    }

    /// Spreads calls over the endpoints `changes` inserts and removes (the
    /// shape of `tower::discover::Change`: map yours with `Change::Insert`
    /// and `Change::Remove`). The stream is taken by the first channel
    /// built from this builder.
    pub fn discover(mut self, changes: impl Stream<Item = Change> + Send + 'static) -> Self {
        self.config.discovery = Discovery::Changes(Arc::new(Mutex::new(Some(Box::pin(changes)))));
        self
    }

    /// How each call picks its endpoint (default [`Policy::PeakEwma`]).
    pub fn balance(mut self, policy: Policy) -> Self {
        self.config.policy = policy;
        self
    }

    /// Ejects endpoints whose calls fail (default on, with
    /// [`OutlierDetection::default`]); `None` turns it off.
    pub fn outlier_detection(mut self, detection: Option<OutlierDetection>) -> Self {
        self.config.outlier = detection;
        self
    }

    /// Keeps `k` of the fleet's endpoints, chosen by rendezvous hashing
    /// with a seed of this channel's (default: all of them).
    pub fn subset(mut self, k: usize) -> Self {
        self.config.subset = Some(k.max(1));
        self
    }

    /// How fast an endpoint's latency estimate forgets a slow call or a
    /// failure (the Peak-EWMA's time constant, default 1 s: at tram's call
    /// rates samples come by the thousand, and a one-off stall should not
    /// starve an endpoint for long).
    pub fn ewma_decay(mut self, tau: Duration) -> Self {
        self.config.ewma_decay = tau.max(Duration::from_millis(1));
        self
    }
}
