//! The server: [`Server`], built with [`ServerBuilder`].
//!
//! # Layout
//!
//! - `builder`: [`ServerBuilder`] (methods and settings) and [`Service`].
//! - `handler`: how a method's handler answers a call ([`MethodKind`]).
//! - `accept`: the accept loop, telling tram from a gateway's protocol by
//!   the first byte, and graceful shutdown.
//! - `cores`: thread per core: connections spread over threads of their
//!   own, each with a single-threaded runtime.
//! - `driver`: one connection's task: frames in, handlers polled, timers.
//! - `lifecycle`: a connection's graceful close in two steps, and its
//!   maximum age.
//! - `calls`: the call table as pure code (frames in, actions out).
//! - `local`: one unary call run in the caller's task, for gateways.

mod accept;
mod builder;
mod calls;
mod cores;
mod driver;
mod handler;
mod lifecycle;
mod local;
mod turn;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::ToSocketAddrs;
use tokio::sync::watch;

pub use builder::{ServerBuilder, Service};
pub use handler::MethodKind;
pub use local::call_unary;

use super::transport;
use crate::conn::Listener;
use crate::gateway;
use crate::observe::{ConnectionInfo, TRAM};
use builder::ServerConfig;
use handler::Route;

/// A tram RPC server. Cloning is cheap and shares the routes.
#[derive(Clone)]
pub struct Server {
    routes: Arc<Routes>,
    config: Arc<ServerConfig>,
    /// Serves connections that do not open with tram's preface.
    gateway: Option<Arc<dyn gateway::Protocol>>,
}

/// Tells whether a server has begun its graceful shutdown (its
/// `serve_with_shutdown` signal fired): from then on it takes no new
/// connections and lets the calls in flight finish. Get one from
/// [`Server::draining`] or [`ServerBuilder::draining`].
#[derive(Debug, Clone)]
pub struct Draining(watch::Receiver<bool>);

impl Draining {
    /// Whether the server is draining now.
    pub fn is_draining(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the server starts draining.
    pub async fn wait(&mut self) {
        // An error: the server is gone, which is as good as drained.
        let _ = self.0.wait_for(|d| *d).await;
    }
}

/// The methods of a server, by path.
pub(crate) struct Routes(HashMap<String, Arc<Route>>);

impl Server {
    /// Starts a builder.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::new()
    }

    /// The kind of the method at `path` (`/package.Service/Method`), if
    /// this server has it.
    pub fn method_kind(&self, path: &str) -> Option<MethodKind> {
        self.routes.0.get(path).map(|r| r.kind)
    }

    /// Every method path this server has.
    pub fn method_paths(&self) -> impl Iterator<Item = &str> {
        self.routes.0.keys().map(String::as_str)
    }

    /// Whether this server has begun its graceful shutdown (for health
    /// checks that should report not serving while it drains).
    pub fn draining(&self) -> Draining {
        Draining(self.config.drain.subscribe())
    }

    /// A snapshot of the tram connections this server (and its clones)
    /// serve now, oldest first: peer, age, calls in flight, queued and
    /// moved bytes.
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        self.config.registry.snapshot()
    }

    /// Hands the connections that do not start with tram's preface (by
    /// their first byte) to `gateway`, instead of closing them.
    pub fn with_gateway(mut self, gateway: Arc<dyn gateway::Protocol>) -> Server {
        self.gateway = Some(gateway);
        self
    }

    /// Serves on `addr` until an error of the listener.
    ///
    /// # Errors
    ///
    /// If binding fails.
    pub async fn serve(self, addr: impl ToSocketAddrs) -> io::Result<()> {
        self.serve_with_shutdown(addr, std::future::pending()).await
    }

    /// Serves on `addr` until `signal` completes, then shuts down
    /// gracefully: stops accepting, sends GOAWAY on every connection, lets
    /// calls in flight finish (up to the drain timeout), and returns.
    ///
    /// # Errors
    ///
    /// If binding fails.
    pub async fn serve_with_shutdown(
        self,
        addr: impl ToSocketAddrs,
        signal: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let listener = Listener::bind(addr, self.config.tcp).await?;
        self.serve_listener(listener, signal).await
    }

    /// Like [`Server::serve_with_shutdown`], on a listener already bound
    /// (for example to learn an ephemeral port first).
    ///
    /// # Errors
    ///
    /// None so far; accept errors are retried.
    pub async fn serve_listener(
        self,
        listener: Listener,
        signal: impl Future<Output = ()>,
    ) -> io::Result<()> {
        accept::serve_listener(self, listener, signal).await
    }

    /// Serves one connection that was accepted elsewhere, over any
    /// transport (a Unix socket, an in-memory pipe, a TLS stream accepted
    /// by your own code), until it closes. `peer` is what interceptors see
    /// as the client's address. The server's TLS setting does not apply:
    /// `io` is used as it is.
    ///
    /// # Errors
    ///
    /// Only a failure to queue the opening SETTINGS; the connection's own
    /// failures close it and are logged.
    pub async fn serve_connection<IO>(&self, io: IO, peer: SocketAddr) -> io::Result<()>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        self.serve_connection_as(io, peer, TRAM).await
    }

    /// [`Server::serve_connection`], its calls observed as `system`'s.
    pub(crate) async fn serve_connection_as<IO>(
        &self,
        io: IO,
        peer: SocketAddr,
        system: &'static str,
    ) -> io::Result<()>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        // Never stopped from outside: the connection's own end ends it.
        let (_keep, stop) = watch::channel(false);
        let peer = calls::Peer {
            addr: peer,
            certificates: None,
        };
        driver::serve(
            transport::split(io),
            peer,
            self.routes.clone(),
            self.config.clone(),
            stop,
            system,
        )
        .await
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut methods: Vec<_> = self.routes.0.keys().collect();
        methods.sort();
        f.debug_struct("Server")
            .field("methods", &methods)
            .finish_non_exhaustive()
    }
}
