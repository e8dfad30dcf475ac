//! TCP connect and accept with the socket options tram needs.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket, TcpStream, ToSocketAddrs, lookup_host};

/// Socket options for TCP connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpConfig {
    /// Disable Nagle's algorithm (default on): tram batches writes itself,
    /// and Nagle would add up to 40 ms to a lone small message.
    pub nodelay: bool,
    /// `SO_SNDBUF` in bytes, or the system default.
    pub send_buffer: Option<u32>,
    /// `SO_RCVBUF` in bytes, or the system default. Set before connecting
    /// (and on the listener) so that TCP window scaling can use it.
    pub recv_buffer: Option<u32>,
    /// The listener's accept backlog.
    pub backlog: u32,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            nodelay: true,
            send_buffer: None,
            recv_buffer: None,
            backlog: 1024,
        }
    }
}

impl TcpConfig {
    fn socket_for(&self, addr: &SocketAddr) -> io::Result<TcpSocket> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(n) = self.send_buffer {
            socket.set_send_buffer_size(n)?;
        }
        if let Some(n) = self.recv_buffer {
            socket.set_recv_buffer_size(n)?;
        }
        Ok(socket)
    }
}

/// Connects to `addr`, trying each address a host name resolves to in turn,
/// and applies `config`.
///
/// # Errors
///
/// The last connection error, or `NotFound` if the name resolves to nothing.
pub async fn connect(addr: impl ToSocketAddrs, config: &TcpConfig) -> io::Result<TcpStream> {
    let mut last = None;
    for addr in lookup_host(addr).await? {
        match connect_one(addr, config).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no addresses to connect to")))
}

async fn connect_one(addr: SocketAddr, config: &TcpConfig) -> io::Result<TcpStream> {
    let stream = config.socket_for(&addr)?.connect(addr).await?;
    stream.set_nodelay(config.nodelay)?;
    Ok(stream)
}

/// A TCP listener whose accepted connections get the [`TcpConfig`].
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    config: TcpConfig,
}

impl Listener {
    /// Binds to the first address `addr` resolves to (`SO_REUSEADDR` set).
    ///
    /// # Errors
    ///
    /// If the address does not resolve, or binding or listening fails.
    pub async fn bind(addr: impl ToSocketAddrs, config: TcpConfig) -> io::Result<Listener> {
        let addr = lookup_host(addr)
            .await?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address to bind"))?;
        let socket = config.socket_for(&addr)?;
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let inner = socket.listen(config.backlog)?;
        Ok(Listener { inner, config })
    }

    /// Wraps a tokio listener that is already bound (the config's buffer
    /// sizes then apply only to sockets created here, not to `inner`).
    pub fn from_tokio(inner: TcpListener, config: TcpConfig) -> Listener {
        Listener { inner, config }
    }

    /// Accepts the next connection.
    ///
    /// # Errors
    ///
    /// As `accept(2)`; errors such as `EMFILE` are per attempt, and the
    /// listener stays usable.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (stream, peer) = self.inner.accept().await?;
        stream.set_nodelay(self.config.nodelay)?;
        Ok((stream, peer))
    }

    /// The address the listener is bound to.
    ///
    /// # Errors
    ///
    /// As `getsockname(2)`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}
