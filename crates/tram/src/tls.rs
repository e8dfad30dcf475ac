//! TLS with rustls (feature `tls`), for message streams and RPC.
//!
//! - RPC server: [`ServerBuilder::tls`](crate::ServerBuilder::tls)
//!   with a `rustls::ServerConfig`; for mutual TLS, give it a client
//!   certificate verifier. The client's certificate chain then reaches
//!   server interceptors as [`CallInfo::peer_certificates`](crate::CallInfo).
//! - RPC client: [`ChannelBuilder::tls`](crate::ChannelBuilder::tls) with a
//!   [`ClientTls`].
//! - Message streams: [`accept`] and [`connect`] return a TLS stream;
//!   wrap it in [`Split`](crate::conn::Split) for
//!   [`Connection::new`](crate::conn::Connection::new).
//!
//! The handshake runs under the server's handshake timeout. rustls uses
//! the `ring` provider here.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
pub use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;
pub use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

/// How a [`Channel`](crate::Channel) speaks TLS.
#[derive(Clone, Debug)]
pub struct ClientTls {
    /// Roots to trust, and for mutual TLS the client's own certificate.
    pub config: Arc<rustls::ClientConfig>,
    /// The name the server's certificate must carry; by default the host
    /// part of the channel's target.
    pub server_name: Option<String>,
}

impl ClientTls {
    /// TLS with `config`, checking the server's certificate against the
    /// target's host name.
    pub fn new(config: Arc<rustls::ClientConfig>) -> ClientTls {
        ClientTls {
            config,
            server_name: None,
        }
    }
}

/// Accepts a TLS connection on `tcp`.
///
/// # Errors
///
/// The handshake's failure.
pub async fn accept(
    config: Arc<rustls::ServerConfig>,
    tcp: TcpStream,
) -> io::Result<server::TlsStream<TcpStream>> {
    TlsAcceptor::from(config).accept(tcp).await
}

/// Opens TLS on `tcp`, checking the server's certificate for `name`.
///
/// # Errors
///
/// An invalid name, or the handshake's failure.
pub async fn connect<IO>(
    config: Arc<rustls::ClientConfig>,
    name: &str,
    tcp: IO,
) -> io::Result<client::TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let name = ServerName::try_from(name.to_owned())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    TlsConnector::from(config).connect(name, tcp).await
}

/// The certificate chain the client presented (leaf first, DER), if any.
pub fn peer_certificates<IO>(stream: &server::TlsStream<IO>) -> Option<Vec<Bytes>> {
    let certs = stream.get_ref().1.peer_certificates()?;
    Some(certs.iter().map(|c| Bytes::copy_from_slice(c)).collect())
}

/// The host part of `host:port` (IPv6 brackets removed).
pub(crate) fn host_of(target: &str) -> &str {
    let host = match target.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => target,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn host_of_targets() {
        assert_eq!(host_of("example.com:443"), "example.com");
        assert_eq!(host_of("127.0.0.1:80"), "127.0.0.1");
        assert_eq!(host_of("[::1]:80"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }
}
