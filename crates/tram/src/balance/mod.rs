//! One client over a fleet: discovery, load balancing, ejection.
//!
//! A [`Channel`](crate::Channel) built with
//! [`ChannelBuilder::endpoints`](crate::ChannelBuilder::endpoints) (a
//! fixed list), [`ChannelBuilder::dns`](crate::ChannelBuilder::dns) (every
//! address of a name, resolved again periodically and when connections
//! fail) or [`ChannelBuilder::discover`](crate::ChannelBuilder::discover)
//! (a stream of [`Change`]s, the shape of `tower::discover::Change`)
//! spreads its calls over every endpoint it knows:
//!
//! - **Picking** ([`Policy`]): by default the power of two choices over
//!   each endpoint's cost, its calls in flight weighted by a Peak-EWMA of
//!   its latency (a failure counts as a slow call, so fast failures do not
//!   attract calls); or round robin, or the first endpoint that is ready.
//! - **Connecting**: endpoints connect in the background; calls go to
//!   those that are ready. An endpoint whose connection fails backs off
//!   (exponentially, with jitter) and takes no calls meanwhile; its next
//!   attempt is its probe.
//! - **Ejection** ([`OutlierDetection`], gRFC A50): an endpoint whose calls
//!   fail at a high rate is ejected for a while, never more than a share
//!   of them at once.
//! - **Draining**: a server's GOAWAY takes its connection out of the pick
//!   at once; its calls in flight finish there, calls it did not accept
//!   are retried elsewhere (as is any call refused before it was sent),
//!   within the call's deadline.
//! - **Subsetting** ([`ChannelBuilder::subset`](crate::ChannelBuilder::subset)):
//!   each client keeps `k` endpoints of a large fleet, chosen by rendezvous
//!   hashing, so that the fleet's connections grow with clients × k.
//!
//! A channel to a single `host:port` works as before (one endpoint, no
//! task, no latency tracking). The servers' side is
//! [`ServerBuilder::max_connection_age`](crate::ServerBuilder::max_connection_age):
//! long-lived clients reconnect, and so rebalance after the fleet grows.
//!
//! # Layout
//!
//! - this file: the settings ([`Policy`], [`OutlierDetection`], [`Change`]).
//! - `endpoint`: one endpoint's connections, load and health.
//! - `ewma`: the Peak-EWMA latency estimate.
//! - `pick`: choosing an endpoint for a call.
//! - `discover`: where endpoints come from, and the task keeping them current.
//! - `outlier`: ejection of endpoints whose calls fail.
//! - `subset`: rendezvous subsetting.

pub(crate) mod discover;
pub(crate) mod endpoint;
mod ewma;
mod outlier;
pub(crate) mod pick;
mod subset;

use std::time::Duration;

/// How a channel picks the endpoint for each call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Policy {
    /// The power of two choices: of two endpoints drawn at random, the one
    /// with the lower cost (Peak-EWMA latency × (calls in flight + 1)).
    /// Sends little to a slow or failing endpoint, spreads evenly over
    /// equal ones, and costs the same whatever the fleet's size.
    #[default]
    PeakEwma,
    /// Each endpoint in turn.
    RoundRobin,
    /// The first endpoint (in the order discovered) that is ready; the
    /// next only when it is not.
    PickFirst,
}

/// Outlier detection: ejects endpoints whose calls fail (gRFC A50's
/// failure-percentage ejection). A call fails, for this, when it ends
/// with `UNAVAILABLE`, `INTERNAL`, `UNKNOWN`, `DATA_LOSS`,
/// `DEADLINE_EXCEEDED` or `RESOURCE_EXHAUSTED`, or its connection is lost;
/// other codes are the application's answers.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OutlierDetection {
    /// How often endpoints are judged (default 10 s).
    pub interval: Duration,
    /// How long a first ejection lasts; the n-th lasts n times as long, at
    /// most 5 minutes (default 30 s).
    pub base_ejection_time: Duration,
    /// The share of failed calls, in percent, that ejects (default 50).
    pub failure_percentage: u32,
    /// Calls an endpoint must have ended in the interval to be judged
    /// (default 20).
    pub minimum_calls: u32,
    /// The most endpoints ejected at once, in percent (default 50).
    pub max_ejection_percent: u32,
}

impl Default for OutlierDetection {
    fn default() -> Self {
        OutlierDetection {
            interval: Duration::from_secs(10),
            base_ejection_time: Duration::from_secs(30),
            failure_percentage: 50,
            minimum_calls: 20,
            max_ejection_percent: 50,
        }
    }
}

impl OutlierDetection {
    /// Judged every `interval`.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// A first ejection lasts `time`.
    pub fn base_ejection_time(mut self, time: Duration) -> Self {
        self.base_ejection_time = time;
        self
    }

    /// `percent` of calls failing ejects.
    pub fn failure_percentage(mut self, percent: u32) -> Self {
        self.failure_percentage = percent.min(100);
        self
    }

    /// At least `calls` calls in an interval to be judged.
    pub fn minimum_calls(mut self, calls: u32) -> Self {
        self.minimum_calls = calls;
        self
    }

    /// At most `percent` of the endpoints ejected at once.
    pub fn max_ejection_percent(mut self, percent: u32) -> Self {
        self.max_ejection_percent = percent.min(100);
        self
    }
}

/// A change to a channel's endpoints, from a stream given to
/// [`ChannelBuilder::discover`](crate::ChannelBuilder::discover): the
/// shape of `tower::discover::Change`, keyed by a name of your choosing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An endpoint `key` at `target` (`host:port`) is there (again, or at
    /// a new target).
    Insert(String, String),
    /// The endpoint `key` is gone.
    Remove(String),
}
