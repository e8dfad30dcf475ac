//! The settings both builders share: the limits this side announces to its
//! peer (what it accepts), keepalive, socket and message-stream options.
//! Written once, expanded into [`ChannelBuilder`](crate::ChannelBuilder)
//! and [`ServerBuilder`](crate::ServerBuilder), whose configurations both
//! keep them as `settings`, `keepalive`, `tcp` and `conn`.

/// The shared setters, for a builder whose `config` has the fields above.
macro_rules! connection_setters {
    () => {
        /// Largest frame this side accepts, in bytes (default 4 MiB;
        /// 16 KiB ..= 1 GiB): it bounds every message the peer sends.
        /// Announced to the peer.
        pub fn max_frame_size(mut self, n: u32) -> Self {
            self.config.settings.max_frame_size =
                n.clamp(tram_wire::MIN_MAX_FRAME_SIZE, tram_wire::MAX_MAX_FRAME_SIZE);
            self
        }

        /// Largest metadata block this side accepts from the peer, in bytes
        /// (default 16 KiB): request metadata on a server, response headers
        /// and trailers on a client. Announced to the peer.
        pub fn max_metadata_size(mut self, n: u32) -> Self {
            self.config.settings.max_metadata_size = n;
            self
        }

        /// Messages the peer may send on a stream before this side grants
        /// more (default 64; at least 1). The window grows past it while
        /// messages are small. Announced to the peer.
        pub fn initial_credit(mut self, n: u32) -> Self {
            self.config.settings.initial_credit = n.clamp(1, tram_wire::MAX_CREDIT);
            self
        }

        /// Keepalive pings on each connection (default: after 30 s without
        /// a frame from the peer, answered within 10 s; `None`: off). A
        /// connection whose peer stops answering is closed, and its calls
        /// fail with `UNAVAILABLE`.
        pub fn keepalive(mut self, k: Option<$crate::Keepalive>) -> Self {
            self.config.keepalive = k;
            self
        }

        /// Socket options.
        pub fn tcp(mut self, tcp: $crate::conn::TcpConfig) -> Self {
            self.config.tcp = tcp;
            self
        }

        /// Message-stream options of every connection (buffer sizes, the
        /// outbound queue's bound in bytes, inline writes). By default a
        /// server's connections use [`Config::default`]($crate::conn::Config)
        /// and a channel's the same with an 8 MiB outbound queue; a config
        /// given here replaces either whole.
        pub fn connection(mut self, config: $crate::conn::Config) -> Self {
            self.config.conn = config;
            self
        }
    };
}

pub(crate) use connection_setters;

/// The observability setters both builders share, for a builder with
/// `observers` (the user's) and `metrics` (a `MetricsConfig`) fields.
macro_rules! observe_setters {
    () => {
        /// Adds an observer of every call and connection (see
        /// [`crate::observe`]); observers see events in the order added.
        pub fn observer(mut self, observer: impl crate::observe::Observer) -> Self {
            self.observers.push(std::sync::Arc::new(observer));
            self
        }

        /// Records the built-in metrics or not (by default, when a
        /// `metrics` recorder is installed by the time this is built; see
        /// [`crate::observe`]).
        pub fn metrics(mut self, on: bool) -> Self {
            self.metrics.on = Some(on);
            self
        }

        /// Records every message's size too, in `rpc.{server,client}.
        /// request.size` and `.response.size`, when metrics are recorded
        /// (off by default: OpenTelemetry's RPC conventions made them
        /// optional, and their current draft drops them; each is one more
        /// histogram value per message, which a recorder such as
        /// `metrics-exporter-prometheus` stamps with a clock read).
        pub fn message_size_metrics(mut self, on: bool) -> Self {
            self.metrics.sizes = on;
            self
        }
    };
}
pub(crate) use observe_setters;
