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
    /// The congestion control of these connections (`TCP_CONGESTION`, on
    /// Linux and FreeBSD), or the system's (on Linux
    /// `net.ipv4.tcp_congestion_control`). Set on a listener, its accepted
    /// connections inherit it.
    ///
    /// A host that runs BBR for its traffic at large paces every
    /// connection's sends with kernel timers where no `fq` qdisc does
    /// (loopback has none), which costs CPU on every large message, and
    /// on loopback BBR's bandwidth estimate can settle far below what the
    /// link carries and hold large messages back (a third of the rate at
    /// 16 KiB on one guest; docs/performance.md has the figures). An RPC
    /// connection under BBR writes its large messages a segment's worth
    /// at a time, which spares it most of the timers' cost, not the
    /// estimate's.
    /// Connections inside a data centre, or to a peer on the same host, can
    /// have an algorithm of their own here. Setting one the
    /// system does not allow (`net.ipv4.tcp_allowed_congestion_control`)
    /// needs `CAP_NET_ADMIN`; an unknown or refused name fails the connect
    /// or bind, and so does any name on a system without the option.
    pub congestion_control: Option<CongestionControl>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            nodelay: true,
            send_buffer: None,
            recv_buffer: None,
            backlog: 1024,
            congestion_control: None,
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
        if let Some(cc) = &self.congestion_control {
            cc.apply(&socket)?;
        }
        Ok(socket)
    }
}

/// A TCP congestion control algorithm, by the name the kernel knows it by
/// (`cubic`, `reno`, `bbr`, `dctcp`, ...): see
/// [`TcpConfig::congestion_control`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CongestionControl {
    /// The name's bytes; kept inline (the kernel's names are at most 15
    /// bytes) so that [`TcpConfig`] stays `Copy`.
    name: [u8; CongestionControl::MAX_LEN],
    len: u8,
}

impl CongestionControl {
    /// The longest name the kernel accepts (`TCP_CA_NAME_MAX` less its
    /// terminating zero).
    pub const MAX_LEN: usize = 15;

    /// The algorithm called `name`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if `name` is empty, longer than [`Self::MAX_LEN`]
    /// bytes, or not printable ASCII. Whether the kernel has it is known
    /// only when a socket is made.
    pub fn new(name: &str) -> io::Result<CongestionControl> {
        let bytes = name.as_bytes();
        if bytes.is_empty()
            || bytes.len() > Self::MAX_LEN
            || !bytes.iter().all(u8::is_ascii_graphic)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a congestion control name: {name:?}"),
            ));
        }
        let mut inline = [0; Self::MAX_LEN];
        inline[..bytes.len()].copy_from_slice(bytes);
        Ok(CongestionControl {
            name: inline,
            len: bytes.len() as u8,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only printable ASCII is let in.
        std::str::from_utf8(&self.name[..usize::from(self.len)]).unwrap_or_default()
    }

    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    fn apply(&self, socket: &impl std::os::fd::AsFd) -> io::Result<()> {
        socket2::SockRef::from(socket)
            .set_tcp_congestion(self.as_str().as_bytes())
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("setting TCP congestion control {:?}: {e}", self.as_str()),
                )
            })
    }

    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    fn apply<S>(&self, _socket: &S) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "TCP congestion control cannot be set on this system",
        ))
    }
}

impl std::fmt::Debug for CongestionControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CongestionControl")
            .field(&self.as_str())
            .finish()
    }
}

impl std::fmt::Display for CongestionControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CongestionControl {
    type Err = io::Error;

    fn from_str(s: &str) -> io::Result<CongestionControl> {
        CongestionControl::new(s)
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
    /// The listener was bound elsewhere: its accepted connections take
    /// the congestion control one by one rather than from it.
    set_on_accept: bool,
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
        Ok(Listener {
            inner,
            config,
            set_on_accept: false,
        })
    }

    /// Wraps a tokio listener that is already bound (the config's buffer
    /// sizes then apply only to sockets created here, not to `inner`; its
    /// congestion control is set on each connection accepted).
    pub fn from_tokio(inner: TcpListener, config: TcpConfig) -> Listener {
        Listener {
            inner,
            config,
            set_on_accept: true,
        }
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
        if let (true, Some(cc)) = (self.set_on_accept, &self.config.congestion_control) {
            cc.apply(&stream)?;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn congestion_control_names_are_checked() {
        let cc = CongestionControl::new("cubic").expect("a plain name");
        assert_eq!(cc.as_str(), "cubic");
        assert_eq!(cc.to_string(), "cubic");
        assert_eq!(format!("{cc:?}"), "CongestionControl(\"cubic\")");
        assert_eq!(
            "reno".parse::<CongestionControl>().ok(),
            CongestionControl::new("reno").ok()
        );
        let longest = "x".repeat(CongestionControl::MAX_LEN);
        assert_eq!(
            CongestionControl::new(&longest).expect("15 bytes").as_str(),
            longest
        );
        for bad in ["", "sixteen-bytes-xx", "has space", "nul\0", "caf\u{e9}"] {
            let err = CongestionControl::new(bad).expect_err(bad);
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }
}
