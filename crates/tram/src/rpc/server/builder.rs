//! [`ServerBuilder`]: methods and settings, the one way to configure a
//! server.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use tram_wire::Settings;

use super::super::intercept::{CallInfo, ServerInterceptor};
use super::super::timers::Keepalive;
use super::super::transport::ServerTls;
use super::super::{Request, Response, Status, Streaming};
use super::handler::{
    Handler, IncomingCall, Inline, MethodKind, Route, answer_now, request_stream, respond_one,
    respond_stream, single_request,
};
use super::{Routes, Server};
use crate::conn::{self, TcpConfig};
use crate::observe::{Observer, Observers, Registry, Side};

/// Builds a [`Server`] from methods, each registered under its full path
/// `/package.Service/Method`, and its settings.
pub struct ServerBuilder {
    routes: HashMap<String, Arc<Route>>,
    config: ServerConfig,
    observers: Vec<Arc<dyn Observer>>,
    metrics: crate::observe::MetricsConfig,
}

/// A set of methods registered together: what `tram-build` generates for
/// each `.proto` service (`<Service>Server<T>`).
pub trait Service {
    /// Adds the service's methods to `builder`.
    fn register(self, builder: ServerBuilder) -> ServerBuilder;
}

/// Limits and timeouts of a server, as its builder set them.
#[derive(Debug, Clone)]
pub(crate) struct ServerConfig {
    pub(crate) settings: Settings,
    pub(crate) max_connections: usize,
    pub(crate) drain_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) keepalive: Option<Keepalive>,
    pub(crate) interceptor: Option<ServerInterceptor>,
    pub(crate) tls: Option<ServerTls>,
    pub(crate) spawn_handlers: bool,
    /// Thread per core: connections run on this many threads of their own.
    pub(crate) threads: Option<usize>,
    /// Connections close gracefully after this age, with this grace.
    pub(crate) max_connection_age: Option<(Duration, Duration)>,
    pub(crate) tcp: TcpConfig,
    pub(crate) conn: conn::Config,
    pub(crate) observers: Arc<Observers>,
    pub(crate) registry: Arc<Registry>,
    /// Set when a graceful shutdown begins.
    pub(crate) drain: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            settings: Settings::DEFAULT,
            max_connections: 10_000,
            drain_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(300)),
            keepalive: Some(Keepalive::default()),
            interceptor: None,
            tls: None,
            spawn_handlers: false,
            threads: None,
            max_connection_age: None,
            tcp: TcpConfig::default(),
            conn: conn::Config::default(),
            observers: Arc::new(Observers::new(
                Side::Server,
                crate::observe::MetricsConfig::OFF,
                Vec::new(),
            )),
            registry: Arc::default(),
            drain: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }
}

impl ServerBuilder {
    pub(crate) fn new() -> ServerBuilder {
        ServerBuilder {
            routes: HashMap::new(),
            config: ServerConfig::default(),
            observers: Vec::new(),
            metrics: crate::observe::MetricsConfig::default(),
        }
    }

    /// Adds every method of `service`.
    pub fn add_service(self, service: impl Service) -> Self {
        service.register(self)
    }

    /// Registers a unary method.
    pub fn unary<Req, Resp, F, Fut>(self, path: &str, f: F) -> Self
    where
        Req: prost::Message + Default + 'static,
        Resp: prost::Message + 'static,
        F: Fn(Request<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
    {
        self.route(path, MethodKind::Unary, move |mut call: IncomingCall| {
            let fut = single_request(&mut call).map(&f);
            respond_one(call, fut)
        })
    }

    /// Registers a unary method whose handler answers without awaiting (a
    /// lookup in memory, a computation): it runs on the connection's task
    /// as soon as the request is decoded, with no future to allocate and
    /// poll. While it runs, the connection's other calls wait, so it must
    /// not block; a handler that waits for anything belongs in
    /// [`ServerBuilder::unary`]. (With
    /// [`spawn_handlers`](ServerBuilder::spawn_handlers), and behind the
    /// gateway, it runs as a `unary` handler would.)
    pub fn unary_sync<Req, Resp, F>(self, path: &str, f: F) -> Self
    where
        Req: prost::Message + Default + 'static,
        Resp: prost::Message + Send + 'static,
        F: Fn(Request<Req>) -> Result<Response<Resp>, Status> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        let g = f.clone();
        let handler = move |mut call: IncomingCall| {
            let outcome = single_request(&mut call).map(|req| std::future::ready(g(req)));
            respond_one(call, outcome)
        };
        let inline: Inline = Box::new(move |call: &mut IncomingCall| answer_now(call, &*f));
        self.add_route(path, MethodKind::Unary, Box::new(handler), Some(inline))
    }

    /// Registers a server-streaming method: the handler returns a stream of
    /// responses.
    pub fn server_streaming<Req, Resp, S, F, Fut>(self, path: &str, f: F) -> Self
    where
        Req: prost::Message + Default + 'static,
        Resp: prost::Message + 'static,
        S: Stream<Item = Result<Resp, Status>> + Send + 'static,
        F: Fn(Request<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
    {
        self.route(
            path,
            MethodKind::ServerStreaming,
            move |mut call: IncomingCall| {
                let fut = single_request(&mut call).map(&f);
                respond_stream(call, fut)
            },
        )
    }

    /// Registers a client-streaming method: the handler reads a stream of
    /// requests and returns one response.
    pub fn client_streaming<Req, Resp, F, Fut>(self, path: &str, f: F) -> Self
    where
        Req: prost::Message + Default + 'static,
        Resp: prost::Message + 'static,
        F: Fn(Request<Streaming<Req>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
    {
        self.route(
            path,
            MethodKind::ClientStreaming,
            move |call: IncomingCall| {
                let fut = f(request_stream(&call));
                respond_one(call, Ok(fut))
            },
        )
    }

    /// Registers a bidirectional-streaming method.
    pub fn bidi_streaming<Req, Resp, S, F, Fut>(self, path: &str, f: F) -> Self
    where
        Req: prost::Message + Default + 'static,
        Resp: prost::Message + 'static,
        S: Stream<Item = Result<Resp, Status>> + Send + 'static,
        F: Fn(Request<Streaming<Req>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
    {
        self.route(path, MethodKind::Bidi, move |call: IncomingCall| {
            let fut = f(request_stream(&call));
            respond_stream(call, Ok(fut))
        })
    }

    fn route(
        self,
        path: &str,
        kind: MethodKind,
        handler: impl Fn(IncomingCall) -> super::super::exec::BoxFuture + Send + Sync + 'static,
    ) -> Self {
        self.add_route(path, kind, Box::new(handler), None)
    }

    fn add_route(
        mut self,
        path: &str,
        kind: MethodKind,
        handler: Handler,
        inline: Option<Inline>,
    ) -> Self {
        self.routes.insert(
            path.to_owned(),
            Arc::new(Route {
                name: path.into(),
                kind,
                handler,
                inline,
                observed: std::sync::OnceLock::new(),
            }),
        );
        self
    }

    /// Most calls served at once per connection (default 1024), advertised
    /// to clients; further calls get `RESOURCE_EXHAUSTED`.
    pub fn max_concurrent_calls(mut self, n: u32) -> Self {
        self.config.settings.max_concurrent_calls = n;
        self
    }

    /// Most connections served at once (default 10,000); more are closed
    /// right after accept.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.config.max_connections = n;
        self
    }

    /// How long a graceful shutdown waits for calls in flight (default 30 s).
    pub fn drain_timeout(mut self, d: Duration) -> Self {
        self.config.drain_timeout = d;
        self
    }

    /// How long a new connection may take to send the preface and its
    /// SETTINGS (default 10 s). Cuts off peers that connect and say
    /// nothing, or trickle bytes (slowloris).
    pub fn handshake_timeout(mut self, d: Duration) -> Self {
        self.config.handshake_timeout = d;
        self
    }

    /// Closes a connection (GOAWAY, no error) after this long with no call
    /// open and no frame received (default 5 minutes; `None`: never).
    pub fn idle_timeout(mut self, d: Option<Duration>) -> Self {
        self.config.idle_timeout = d;
        self
    }

    /// Runs `f` as each call opens, before its handler: to authenticate
    /// and authorise from the metadata and the peer's identity. An error
    /// ends the call with that status (`UNAUTHENTICATED`,
    /// `PERMISSION_DENIED`, ...) and the handler never runs.
    pub fn interceptor(
        mut self,
        f: impl Fn(&CallInfo<'_>) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        self.config.interceptor = Some(ServerInterceptor::new(f));
        self
    }

    /// Serves TLS only (feature `tls`): every connection's handshake must
    /// finish within the handshake timeout. For mutual TLS, build `config`
    /// with a client certificate verifier; the client's chain then reaches
    /// interceptors as [`CallInfo::peer_certificates`].
    #[cfg(feature = "tls")]
    pub fn tls(mut self, config: Arc<crate::tls::rustls::ServerConfig>) -> Self {
        self.config.tls = Some(config);
        self
    }

    /// Closes each connection gracefully once it is `age` old (give or
    /// take a tenth, so that connections opened together do not close
    /// together): the client is told to go elsewhere (it reconnects,
    /// picking anew among the fleet, so that long-lived clients rebalance
    /// onto servers added since), its calls in flight get `grace` to
    /// finish, then the connection is closed (gRFC A9; default: no
    /// maximum age).
    pub fn max_connection_age(mut self, age: Duration, grace: Duration) -> Self {
        self.config.max_connection_age = Some((age, grace));
        self
    }

    /// Runs each handler as a task of its own instead of in its
    /// connection's task (default off). For CPU-heavy handlers: they then
    /// spread over the runtime's threads instead of holding up the
    /// connection. Costs a task spawn per call. Cancelling a call still
    /// stops its handler (the task is aborted).
    pub fn spawn_handlers(mut self, on: bool) -> Self {
        self.config.spawn_handlers = on;
        self
    }

    /// Runs connections on `n` threads of the server's own, each with a
    /// single-threaded tokio runtime (thread per core; `n` is usually the
    /// number of cores), instead of on the runtime that serves (default).
    /// Each accepted connection goes to the thread with the fewest; it,
    /// its handlers and its writer then stay on that thread, so that
    /// nothing a call does moves between threads. Handlers that
    /// `tokio::spawn` spawn onto their connection's thread; CPU-heavy work
    /// belongs on `spawn_blocking` or another runtime. Applies to
    /// [`Server::serve`] and its variants, not to
    /// [`Server::serve_connection`].
    pub fn threads(mut self, n: usize) -> Self {
        self.config.threads = Some(n.max(1));
        self
    }

    super::super::settings::observe_setters!();

    super::super::settings::connection_setters!();

    /// Tells when the server being built begins its graceful shutdown
    /// (as [`Server::draining`], for services added before `build`).
    pub fn draining(&self) -> super::Draining {
        super::Draining(self.config.drain.subscribe())
    }

    /// Every method path registered so far.
    pub fn method_paths(&self) -> impl Iterator<Item = &str> {
        self.routes.keys().map(String::as_str)
    }

    /// Finishes the server.
    pub fn build(mut self) -> Server {
        self.config.observers = Arc::new(Observers::new(
            Side::Server,
            self.metrics,
            std::mem::take(&mut self.observers),
        ));
        Server {
            routes: Arc::new(Routes(self.routes)),
            config: Arc::new(self.config),
            gateway: None,
        }
    }
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("methods", &self.routes.len())
            .finish_non_exhaustive()
    }
}
