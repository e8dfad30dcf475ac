//! The accept loop: a task per connection, tram or the gateway's protocol
//! told apart by the first byte, at most `max_connections` at once, and a
//! graceful shutdown that drains them.

use std::io;
use std::pin::pin;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;

use super::super::transport::{self, Accepted};
use super::Server;
use super::calls::Peer;
use super::cores::Cores;
use super::driver::{self, AbortOnDrop};
use crate::conn::Listener;
use crate::observe::TRAM;

pub(super) async fn serve_listener(
    server: Server,
    listener: Listener,
    signal: impl Future<Output = ()>,
) -> io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let mut signal = pin!(signal);
    let config = server.config.clone();
    let cores = config.threads.map(Cores::start).transpose()?;
    loop {
        tokio::select! {
            () = &mut signal => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    while conns.try_join_next().is_some() {}
                    if conns.len() >= config.max_connections {
                        tracing::warn!(%peer, "refusing connection: at max_connections");
                        drop(stream);
                        continue;
                    }
                    let (server, stop) = (server.clone(), stop_rx.clone());
                    match &cores {
                        None => {
                            conns.spawn(serve_tcp(server, stream, peer, stop));
                        }
                        Some(cores) => {
                            // Moved to the core's runtime: registered there
                            // anew, and waited for (or aborted) from here.
                            let stream = match stream.into_std() {
                                Ok(s) => s,
                                Err(e) => {
                                    tracing::warn!(%peer, error = %e, "handing a connection over failed");
                                    continue;
                                }
                            };
                            let task = cores.spawn(async move {
                                match TcpStream::from_std(stream) {
                                    Ok(stream) => serve_tcp(server, stream, peer, stop).await,
                                    Err(e) => tracing::warn!(%peer, error = %e, "taking a connection over failed"),
                                }
                            });
                            conns.spawn(async move {
                                let _ = AbortOnDrop(task).await;
                            });
                        }
                    }
                }
                Err(e) => {
                    // EMFILE and friends: back off briefly, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
    drop(listener);
    config.drain.send_replace(true);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(config.drain_timeout, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        conns.abort_all();
    }
    // The connections on the cores are done or aborted: stop the threads.
    drop(cores);
    Ok(())
}

/// Serves one accepted TCP connection: tram, or the gateway's protocol.
async fn serve_tcp(
    server: Server,
    stream: TcpStream,
    addr: std::net::SocketAddr,
    stop: watch::Receiver<bool>,
) {
    if let Err(e) = serve_tcp_inner(server, stream, addr, stop).await {
        tracing::debug!(peer = %addr, error = %e, "connection closed");
    }
}

async fn serve_tcp_inner(
    server: Server,
    stream: TcpStream,
    addr: std::net::SocketAddr,
    stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let config = &server.config;
    if let Some(gateway) = &server.gateway {
        if !opens_with_tram(&stream, config.handshake_timeout).await {
            gateway.serve(Box::new(stream), addr).await;
            return Ok(());
        }
    }
    let accepted = transport::server(
        stream,
        config.tls.as_ref(),
        config.handshake_timeout,
        server.gateway.is_some(),
    )
    .await;
    let (halves, certificates) = match accepted {
        Ok(Accepted::Tram(halves, certs)) => (halves, certs),
        Ok(Accepted::Gateway(io)) => {
            if let Some(gateway) = &server.gateway {
                gateway.serve(io, addr).await;
            }
            return Ok(());
        }
        Err(e) => {
            tracing::info!(peer = %addr, error = %e, "closing connection: handshake failed");
            return Ok(());
        }
    };
    let peer = Peer { addr, certificates };
    let (routes, config) = (server.routes.clone(), config.clone());
    driver::serve(halves, peer, routes, config, stop, TRAM).await
}

/// Whether a connection's first byte is tram's (or TLS's, which the tram
/// side handles); peeked, not read. A peer that sends nothing within the
/// handshake timeout is left to the tram side, which times it out.
async fn opens_with_tram(stream: &TcpStream, timeout: Duration) -> bool {
    let mut first = [0u8; 1];
    match tokio::time::timeout(timeout, stream.peek(&mut first)).await {
        Ok(Ok(1)) => first[0] == tram_wire::preface::PREFACE[0] || first[0] == 0x16,
        _ => true,
    }
}
