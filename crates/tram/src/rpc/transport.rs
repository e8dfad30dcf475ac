//! From a socket to an RPC connection, for both sides: plain TCP or TLS
//! into boxed read and write halves, then the message-stream connection
//! with tram's codec and this side's preface and SETTINGS queued first.

use std::io;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tram_wire::Settings;

use super::codec::{Hello, RpcEncoder, RunDecoder};
use crate::conn::{self, Connection, Inbound, Sender, paced};

/// The read half of a connection, whatever the transport (TCP or TLS):
/// one virtual call per read.
pub(crate) type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The write half, likewise.
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// TLS settings of a client: [`crate::tls::ClientTls`] with feature `tls`;
/// without it a type with no values, so that `Option<ClientTls>` is always
/// `None`.
#[cfg(feature = "tls")]
pub(crate) type ClientTls = crate::tls::ClientTls;
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub(crate) enum ClientTls {}

/// TLS settings of a server, likewise.
#[cfg(feature = "tls")]
pub(crate) type ServerTls = std::sync::Arc<crate::tls::rustls::ServerConfig>;
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub(crate) enum ServerTls {}

/// A transport's two halves.
pub(crate) type Halves = (BoxRead, BoxWrite);

/// An RPC connection's two ends, as the driver of either side holds them.
pub(crate) type RpcConnection = (Inbound<BoxRead, RunDecoder>, Sender<RpcEncoder>);

/// Splits any transport (a TLS stream, a Unix socket, an in-memory pipe);
/// the halves share a lock.
pub(crate) fn split<IO>(io: IO) -> Halves
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(io);
    (Box::new(read), Box::new(write))
}

/// Splits a TCP stream, without a lock between the halves; on a
/// connection whose kernel paces its sends, the write half writes large
/// messages a segment's worth at a time ([`paced`]).
pub(crate) fn split_tcp(stream: TcpStream) -> Halves {
    let paces = paced::paces(&stream);
    let (read, write) = stream.into_split();
    if paces {
        (Box::new(read), Box::new(paced::SegmentWrites(write)))
    } else {
        (Box::new(read), Box::new(write))
    }
}

/// The client's transport to `target`: TLS after its handshake when
/// configured, plain TCP otherwise.
pub(crate) async fn client(
    stream: TcpStream,
    target: &str,
    tls: Option<&ClientTls>,
) -> io::Result<Halves> {
    #[cfg(feature = "tls")]
    if let Some(tls) = tls {
        let name = tls
            .server_name
            .as_deref()
            .unwrap_or_else(|| crate::tls::host_of(target));
        return Ok(split(
            crate::tls::connect(tls.config.clone(), name, stream).await?,
        ));
    }
    #[cfg(not(feature = "tls"))]
    let _ = (target, tls);
    Ok(split_tcp(stream))
}

/// What an accepted connection turned out to be.
pub(crate) enum Accepted {
    /// tram, over TCP or TLS (with the client's certificate chain if it
    /// sent one).
    Tram(Halves, Option<Vec<bytes::Bytes>>),
    /// TLS whose client chose ALPN `h2`: for the server's gateway.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Gateway(crate::gateway::Io),
}

/// The server's transport for an accepted connection: TLS after its
/// handshake (within `handshake_timeout`) when configured, plain TCP
/// otherwise. With `gateway`, a TLS client that negotiated ALPN `h2` is
/// handed over to it.
pub(crate) async fn server(
    stream: TcpStream,
    tls: Option<&ServerTls>,
    handshake_timeout: std::time::Duration,
    gateway: bool,
) -> io::Result<Accepted> {
    #[cfg(feature = "tls")]
    if let Some(tls) = tls {
        let handshake = crate::tls::accept(tls.clone(), stream);
        let tls = tokio::time::timeout(handshake_timeout, handshake)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timeout"))??;
        if gateway && tls.get_ref().1.alpn_protocol() == Some(b"h2") {
            return Ok(Accepted::Gateway(Box::new(tls)));
        }
        let certs = crate::tls::peer_certificates(&tls);
        return Ok(Accepted::Tram(split(tls), certs));
    }
    #[cfg(not(feature = "tls"))]
    let _ = (tls, handshake_timeout, gateway);
    Ok(Accepted::Tram(split_tcp(stream), None))
}

/// Opens the RPC protocol over `halves`: a message-stream connection with
/// tram's codec (frames up to `settings.max_frame_size`), this side's
/// preface and SETTINGS queued as its first bytes.
///
/// # Errors
///
/// The connection closed before the SETTINGS could be queued.
pub(crate) fn open(
    halves: Halves,
    settings: Settings,
    config: conn::Config,
) -> Result<RpcConnection, conn::Error> {
    let (read, write) = halves;
    let max_frame = settings.max_frame_size;
    let (inbound, out) = Connection::from_parts(
        read,
        write,
        RunDecoder::new(max_frame),
        RpcEncoder::new(),
        config.max_frame_len(max_frame as usize + tram_wire::MAX_HEADER_LEN),
    )
    .into_split();
    out.force_send(Hello(settings))?;
    Ok((inbound, out))
}
