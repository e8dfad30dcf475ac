//! HTTP/1.1 connections on the tram port (hyper): keep-alive, requests
//! one after another (pipelined ones answered in order), bounded headers
//! and a timeout for them, each request a Connect or gRPC-Web call.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tram::Channel;

use super::Web;

/// How long a client may take to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of a request's head (request line and headers).
const MAX_HEAD: usize = 64 * 1024;

/// Serves one HTTP/1.1 connection until it closes.
pub(crate) async fn serve<IO>(web: Arc<Web>, io: IO, peer: SocketAddr, channel: Channel)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let (web, channel) = (web.clone(), channel.clone());
        async move { Ok::<_, Infallible>(web.handle(req, peer, &channel).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "HTTP/1.1 connection closed");
    }
}
