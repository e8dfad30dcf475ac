//! [`ChannelBuilder`]: how a [`Channel`] connects and behaves, the one way
//! to configure it (the server's [`ServerBuilder`](crate::ServerBuilder) is
//! its counterpart).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tram_wire::Settings;
use tram_wire::metadata::MetadataBuilder;

use super::super::Status;
use super::super::intercept::ClientInterceptor;
use super::super::timers::Keepalive;
use super::super::transport::{self, ClientTls, Halves};
use super::Channel;
use crate::balance::discover::Discovery;
use crate::balance::{OutlierDetection, Policy};
use crate::conn::{self, TcpConfig};
use crate::observe::{Observer, Observers, Side};

/// A channel connection's outbound queue bound: eight times a server's,
/// so that a client's calls in flight (256 of 16 KiB: 4 MiB) are queued
/// at once rather than woken in herds as the queue drains (the bench log
/// has the measurements). It bounds what the caller's own requests hold.
const CLIENT_MAX_QUEUED: usize = 8 << 20;

/// Opens one transport for a channel's connection.
pub(crate) type Connector =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = std::io::Result<Halves>> + Send>> + Send + Sync>;

/// A channel's settings, as its builder set them.
#[derive(Clone)]
pub(crate) struct ChannelConfig {
    /// `host:port`, or the name of a custom transport.
    pub(crate) target: String,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) retries: u32,
    pub(crate) wait_for_capacity: bool,
    pub(crate) keepalive: Option<Keepalive>,
    pub(crate) interceptor: Option<ClientInterceptor>,
    pub(crate) tls: Option<ClientTls>,
    /// Limits this client announces (its receive side).
    pub(crate) settings: Settings,
    pub(crate) tcp: TcpConfig,
    pub(crate) conn: conn::Config,
    /// Opens connections other than by TCP to `target`.
    pub(crate) connector: Option<Connector>,
    pub(crate) observers: Arc<Observers>,
    /// Where the endpoints come from (`Single`: `target` itself).
    pub(crate) discovery: Discovery,
    pub(crate) policy: Policy,
    pub(crate) outlier: Option<OutlierDetection>,
    pub(crate) subset: Option<usize>,
    pub(crate) ewma_decay: Duration,
}

/// Builds a [`Channel`]: `Channel::builder("cache-1:7000").pool_size(4).build()`.
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` or `connect`"]
pub struct ChannelBuilder {
    pub(super) config: ChannelConfig,
    observers: Vec<Arc<dyn Observer>>,
    metrics: crate::observe::MetricsConfig,
}

impl ChannelBuilder {
    pub(crate) fn new(target: String) -> ChannelBuilder {
        ChannelBuilder {
            config: ChannelConfig {
                target,
                pool_size: 1,
                connect_timeout: Duration::from_secs(5),
                backoff_base: Duration::from_millis(100),
                backoff_max: Duration::from_secs(10),
                retries: 0,
                wait_for_capacity: true,
                keepalive: Some(Keepalive::default()),
                interceptor: None,
                tls: None,
                settings: Settings::DEFAULT,
                tcp: TcpConfig::default(),
                conn: conn::Config::default().max_queued_bytes(CLIENT_MAX_QUEUED),
                connector: None,
                observers: Arc::new(Observers::new(
                    Side::Client,
                    crate::observe::MetricsConfig::OFF,
                    Vec::new(),
                )),
                discovery: Discovery::Single,
                policy: Policy::default(),
                outlier: Some(OutlierDetection::default()),
                subset: None,
                ewma_decay: Duration::from_secs(1),
            },
            observers: Vec::new(),
            metrics: crate::observe::MetricsConfig::default(),
        }
    }

    super::super::settings::observe_setters!();

    /// Connections to open and spread calls over, least loaded first
    /// (default 1).
    pub fn pool_size(mut self, n: usize) -> Self {
        self.config.pool_size = n.max(1);
        self
    }

    /// Limit for one connection attempt, name resolution and handshake
    /// included (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.config.connect_timeout = d;
        self
    }

    /// Reconnection backoff: `base` after the first failed attempt,
    /// doubling per failure up to `max`, with ±20% jitter (default 100 ms
    /// and 10 s). Calls made while waiting to retry fail at once with
    /// `UNAVAILABLE`.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.config.backoff_base = base;
        self.config.backoff_max = max.max(base);
        self
    }

    /// Extra attempts for calls marked [`Request::idempotent`] that fail
    /// with a local `UNAVAILABLE` (default 0: no retries). Attempts are
    /// spaced like reconnections and share the call's one deadline.
    ///
    /// [`Request::idempotent`]: crate::Request::idempotent
    pub fn retries(mut self, n: u32) -> Self {
        self.config.retries = n;
        self
    }

    /// When a connection is at the server's `max_concurrent_calls`: wait
    /// for a slot (`true`, default) or fail with `RESOURCE_EXHAUSTED`.
    pub fn wait_for_capacity(mut self, wait: bool) -> Self {
        self.config.wait_for_capacity = wait;
        self
    }

    /// Runs `f` as each call opens, with the method's path and a builder
    /// holding the request's metadata (and the channel's
    /// [`header`](ChannelBuilder::header)s), to add to it (a trace id, a
    /// token that changes) or refuse the call locally with a status. A
    /// channel has one such function: a second replaces the first.
    pub fn interceptor(
        mut self,
        f: impl Fn(&str, &mut MetadataBuilder) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        let interceptor = self.config.interceptor.take().unwrap_or_default();
        self.config.interceptor = Some(interceptor.with_fn(f));
        self
    }

    /// Adds `key: value` (an ASCII entry) to every call's metadata, after
    /// the request's own entries and the headers added before: the usual
    /// bearer token is `.header("authorization", "Bearer ...")`. Checked
    /// and encoded once, here, and copied into each call as it is.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` when the key or value breaks metadata rules.
    pub fn header(mut self, key: &str, value: &str) -> Result<Self, Status> {
        let interceptor = self.config.interceptor.take().unwrap_or_default();
        self.config.interceptor = Some(interceptor.with_header(key, value)?);
        Ok(self)
    }

    /// TLS for every connection (feature `tls`; default plain TCP).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::ClientTls) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// Opens connections with `connect` instead of by TCP to the target:
    /// over a Unix socket, an in-memory pipe to a
    /// [`Server::serve_connection`](crate::Server::serve_connection), a
    /// tunnel. The target then only names the channel in errors.
    /// Reconnection, pooling and every other setting work as for TCP
    /// (`tcp` and `tls` are not used).
    pub fn connector<F, Fut, IO>(mut self, connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::io::Result<IO>> + Send + 'static,
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        self.config.connector = Some(Arc::new(move || {
            let fut = connect();
            Box::pin(async move { Ok(transport::split(fut.await?)) })
        }));
        self
    }

    super::super::settings::connection_setters!();

    /// The channel; it connects on its first call.
    pub fn build(mut self) -> Channel {
        self.config.observers = Arc::new(Observers::new(
            Side::Client,
            self.metrics,
            std::mem::take(&mut self.observers),
        ));
        Channel::from_config(self.config)
    }

    /// The channel, connected: its first connection is opened now.
    ///
    /// # Errors
    ///
    /// `UNAVAILABLE` with the reason when the connection cannot be made.
    pub async fn connect(self) -> Result<Channel, Status> {
        let channel = self.build();
        channel.ready().await?;
        Ok(channel)
    }
}

impl std::fmt::Debug for ChannelBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelBuilder")
            .field("target", &self.config.target)
            .field("pool_size", &self.config.pool_size)
            .finish_non_exhaustive()
    }
}
