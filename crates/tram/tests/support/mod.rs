//! Shared setup for the loopback tests: echo servers over real TCP.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

pub mod echo;

use tokio::sync::mpsc;
use tram::conn::{Config, Connection, Decoder, Encoder, ErrorKind, Listener, TcpConfig};

/// How a server-side connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The peer closed cleanly after this many messages.
    Clean(usize),
    /// An error of this kind closed it.
    Error(ErrorKind),
}

/// Starts an echo server for `codec` on an ephemeral loopback port; every
/// connection's end is reported on the returned channel.
pub async fn echo_server<C>(
    codec: C,
    config: Config,
) -> (SocketAddr, mpsc::UnboundedReceiver<Ended>)
where
    C: Decoder + Encoder<<C as Decoder>::Item> + Clone + Send + Sync + Unpin + 'static,
    C::Item: Send,
{
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (mut inbound, sender) = Connection::new(stream, codec.clone(), config).into_split();
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut n = 0;
                let ended = loop {
                    match inbound.recv().await {
                        None => break Ended::Clean(n),
                        Some(Err(e)) => break Ended::Error(e.kind()),
                        Some(Ok(msg)) => {
                            n += 1;
                            if sender.send(msg).await.is_err() {
                                break Ended::Error(ErrorKind::Closed);
                            }
                        }
                    }
                };
                let _ = tx.send(ended);
            });
        }
    });
    (addr, rx)
}

/// Guards against hangs: fails the test if `fut` takes longer than `secs`.
pub async fn within<T>(secs: u64, what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Runs `server` on an ephemeral loopback port; returns its address, a
/// sender that stops it gracefully (when sent to or dropped), and its task.
pub async fn serve(
    server: tram::rpc::Server,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .serve_listener(listener, async move {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
    });
    (addr, stop, task)
}
