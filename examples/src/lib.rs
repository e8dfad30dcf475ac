//! Helpers shared by the examples in `src/bin/`.
//!
//! Each example runs its own server on an ephemeral loopback port and a
//! client against it, in one process, so it works with a plain
//! `cargo run -p tram-examples --bin NAME`.

use std::net::SocketAddr;

use tram::conn::{Config, Connection, Decoder, Encoder, Listener, TcpConfig};

/// Starts a server that echoes every message back with `codec`, and returns
/// its address. Each connection is served by one task until the peer closes
/// or sends something the codec rejects.
///
/// # Errors
///
/// If binding the loopback port fails.
pub async fn spawn_echo_server<C>(codec: C) -> anyhow::Result<SocketAddr>
where
    C: Decoder + Encoder<<C as Decoder>::Item> + Clone + Send + Sync + 'static,
    C::Item: Send,
{
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default()).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let (mut inbound, sender) = Connection::new(stream, codec.clone(), Config::default());
            tokio::spawn(async move {
                while let Some(msg) = inbound.recv().await {
                    match msg {
                        Ok(msg) => {
                            if sender.send(msg).await.is_err() {
                                break;
                            }
                        }
                        Err(e) => {
                            eprintln!("closing {peer}: {e}");
                            break;
                        }
                    }
                }
            });
        }
    });
    Ok(addr)
}
