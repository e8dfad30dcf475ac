//! tonic 0.14: generated client and server (tonic-prost-build), default
//! `Server` and `Endpoint` settings (TCP_NODELAY on, one HTTP/2
//! connection multiplexing every call).

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use super::echo::EchoMessage;
use super::echo::pb::{echo_client::EchoClient, echo_server};

/// Serves the echo service until aborted.
pub(super) async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
        s.and_then(|s| {
            s.set_nodelay(true)?;
            Ok(s)
        })
    });
    tonic::transport::Server::builder()
        .add_service(echo_server::EchoServer::new(Echo))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

/// Serves the `fleet` echo (answered after the process's delay) until
/// aborted.
pub(super) async fn serve_fleet(listener: TcpListener) -> anyhow::Result<()> {
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
        s.and_then(|s| {
            s.set_nodelay(true)?;
            Ok(s)
        })
    });
    tonic::transport::Server::builder()
        .add_service(echo_server::EchoServer::new(SlowEcho))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

/// A client balancing over `addrs` with tonic's `balance_list` (one HTTP/2
/// connection each, power of two choices).
pub(super) fn balanced_client(
    addrs: &[SocketAddr],
) -> anyhow::Result<EchoClient<tonic::transport::Channel>> {
    let endpoints = addrs
        .iter()
        .map(|a| tonic::transport::Endpoint::from_shared(format!("http://{a}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(EchoClient::new(tonic::transport::Channel::balance_list(
        endpoints.into_iter(),
    )))
}

/// A client over one HTTP/2 connection to `addr`.
pub(super) async fn client(
    addr: SocketAddr,
) -> anyhow::Result<EchoClient<tonic::transport::Channel>> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    Ok(EchoClient::new(channel))
}

/// tonic's echo handler, answering after the process's delay.
struct SlowEcho;

#[tonic::async_trait]
impl echo_server::Echo for SlowEcho {
    async fn say(
        &self,
        request: tonic::Request<EchoMessage>,
    ) -> Result<tonic::Response<EchoMessage>, tonic::Status> {
        super::fleet_delay().await;
        Ok(tonic::Response::new(request.into_inner()))
    }
}

/// tonic's echo handler.
struct Echo;

#[tonic::async_trait]
impl echo_server::Echo for Echo {
    async fn say(
        &self,
        request: tonic::Request<EchoMessage>,
    ) -> Result<tonic::Response<EchoMessage>, tonic::Status> {
        Ok(tonic::Response::new(request.into_inner()))
    }
}
