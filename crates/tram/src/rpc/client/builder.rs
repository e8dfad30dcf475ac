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
use crate::conn::{self, TcpConfig};

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
}

/// Builds a [`Channel`]: `Channel::builder("cache-1:7000").pool_size(4).build()`.
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` or `connect`"]
pub struct ChannelBuilder {
    config: ChannelConfig,
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
                conn: conn::Config::default(),
                connector: None,
            },
        }
    }

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

    /// Keepalive pings on each connection (default: after 30 s without a
    /// frame from the server, answered within 10 s; `None`: off). A
    /// connection whose server stops answering fails its calls with
    /// `UNAVAILABLE` and is replaced.
    pub fn keepalive(mut self, k: Option<Keepalive>) -> Self {
        self.config.keepalive = k;
        self
    }

    /// Runs `f` as each call opens, with the method's path and a builder
    /// holding the request's metadata, to add to it (a bearer token, a
    /// trace id) or refuse the call locally with a status.
    pub fn interceptor(
        mut self,
        f: impl Fn(&str, &mut MetadataBuilder) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        self.config.interceptor = Some(ClientInterceptor::new(f));
        self
    }

    /// Adds `key: value` (an ASCII entry) to every call's metadata: the
    /// usual bearer token is `.header("authorization", "Bearer ...")`.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` when the key or value breaks metadata rules.
    pub fn header(mut self, key: &str, value: &str) -> Result<Self, Status> {
        self.config.interceptor = Some(ClientInterceptor::header(key, value)?);
        Ok(self)
    }

    /// TLS for every connection (feature `tls`; default plain TCP).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::ClientTls) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// Largest frame this client accepts, in bytes (default 4 MiB;
    /// 16 KiB ..= 1 GiB): bounds every response message.
    pub fn max_frame_size(mut self, n: u32) -> Self {
        self.config.settings.max_frame_size =
            n.clamp(tram_wire::MIN_MAX_FRAME_SIZE, tram_wire::MAX_MAX_FRAME_SIZE);
        self
    }

    /// Largest response metadata (headers or trailers) accepted, in bytes
    /// (default 16 KiB).
    pub fn max_metadata_size(mut self, n: u32) -> Self {
        self.config.settings.max_metadata_size = n;
        self
    }

    /// Messages a server may send on a stream before this client grants
    /// more (default 64; at least 1). The window grows for small messages.
    pub fn initial_credit(mut self, n: u32) -> Self {
        self.config.settings.initial_credit = n.clamp(1, tram_wire::MAX_CREDIT);
        self
    }

    /// Socket options.
    pub fn tcp(mut self, tcp: TcpConfig) -> Self {
        self.config.tcp = tcp;
        self
    }

    /// Message-stream options (buffer sizes, outbound bound, inline
    /// writes). With [`conn::Config::inline_writes`] on (the default), a
    /// caller alone on its connection writes its call itself: the lowest
    /// latency for one call at a time. Calls made while others are in
    /// flight are always queued for the connection's writer task, which
    /// sends everything the callers runnable at that moment queued in one
    /// write.
    pub fn connection(mut self, config: conn::Config) -> Self {
        self.config.conn = config;
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

    /// The channel; it connects on its first call.
    pub fn build(self) -> Channel {
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
