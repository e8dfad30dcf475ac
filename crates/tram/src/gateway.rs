//! Plumbing for gateways: other protocols served on a tram server's port,
//! calling the same handlers (how `tram-grpc` serves gRPC, gRPC-Web and
//! Connect). Applications do not need this module.
//!
//! - [`Protocol`]: serves the connections that do not speak tram; install
//!   one with [`Server::with_gateway`](crate::Server::with_gateway).
//! - [`call_unary`]: runs one unary call through the server's interceptor,
//!   limits and handler, in the calling task, without a connection.
//! - [`RawMessage`]: a message passed through as its encoded bytes.
//!
//! Streaming calls reach handlers over an in-memory tram connection
//! ([`Server::serve_connection`](crate::Server::serve_connection) on one end,
//! [`Channel::with_connector`](crate::Channel) on the other).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

pub use crate::rpc::server::call_unary;

/// Serves one in-memory tram connection that carries a gateway's streaming
/// calls: [`Server::serve_connection`](crate::Server::serve_connection),
/// with the calls observed as `system`'s (`grpc`, `connectrpc`) rather
/// than tram's.
///
/// # Errors
///
/// As `serve_connection`.
pub async fn serve_connection<IO>(
    server: &crate::Server,
    io: IO,
    peer: SocketAddr,
    system: &'static str,
) -> std::io::Result<()>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    server.serve_connection_as(io, peer, system).await
}

/// Serves connections on a tram server's port that speak another protocol.
/// A plain connection is handed over when its first byte is not tram's
/// (the server only peeks at it); under TLS, when the client negotiated
/// ALPN `h2`.
pub trait Protocol: Send + Sync + 'static {
    /// Serves `io`, from `peer`, until it closes.
    fn serve(&self, io: Io, peer: SocketAddr) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// A connection handed to a [`Protocol`]: TCP, or TLS after the handshake.
pub type Io = Box<dyn ReadWrite>;

/// `AsyncRead + AsyncWrite`, as one object.
pub trait ReadWrite: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> ReadWrite for T {}

/// A message passed through as its encoded bytes, never decoded: for
/// proxies and gateways that forward calls (use it as both the request and
/// the response type of a [`Channel`](crate::Channel) call).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawMessage(pub bytes::Bytes);

impl prost::Message for RawMessage {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        // Not reached through `merge`, which takes the bytes whole.
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn merge(&mut self, mut buf: impl bytes::Buf) -> Result<(), prost::DecodeError> {
        // Zero-copy when `buf` is `Bytes` (as tram's decoders pass).
        self.0 = buf.copy_to_bytes(buf.remaining());
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = bytes::Bytes::new();
    }
}
