//! Telling HTTP/2 from HTTP/1.1 by a connection's first bytes, and handing
//! the connection on with those bytes still to be read.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};

/// HTTP/2's client preface starts with these bytes; no HTTP/1.1 request
/// line does (`PRI` is no method anyone serves).
const H2_START: &[u8; 4] = b"PRI ";

/// How long a client may take to send its first bytes.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);

/// Which HTTP a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Http {
    H2,
    H1,
}

/// Reads enough of `io` to tell its HTTP, and gives it back with what was
/// read put in front.
pub(crate) async fn sniff<IO>(mut io: IO) -> io::Result<(Http, Prefixed<IO>)>
where
    IO: AsyncRead + Unpin,
{
    let mut start = [0u8; 4];
    let mut got = 0;
    let read = async {
        while got < start.len() {
            let n = io.read(&mut start[got..]).await?;
            if n == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            got += n;
            // An HTTP/1.1 request line is known by its first byte.
            if start[0] != H2_START[0] {
                break;
            }
        }
        Ok(())
    };
    tokio::time::timeout(FIRST_BYTES_TIMEOUT, read)
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
    let http = if start[..got] == H2_START[..] {
        Http::H2
    } else {
        Http::H1
    };
    Ok((
        http,
        Prefixed {
            prefix: start,
            at: 0,
            len: got,
            io,
        },
    ))
}

/// A connection whose first bytes were read already: they come first.
pub(crate) struct Prefixed<IO> {
    prefix: [u8; 4],
    at: usize,
    len: usize,
    io: IO,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.len {
            let n = (self.len - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    async fn sniffed(bytes: &'static [u8]) -> (Http, Vec<u8>) {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(bytes).await.unwrap();
        drop(a);
        let (http, mut io) = sniff(b).await.unwrap();
        let mut all = Vec::new();
        io.read_to_end(&mut all).await.unwrap();
        (http, all)
    }

    #[tokio::test]
    async fn tells_h2_from_h1_and_keeps_every_byte() {
        let pri = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert_eq!(sniffed(pri).await, (Http::H2, pri.to_vec()));
        let post = b"POST /a.B/C HTTP/1.1\r\n\r\n";
        assert_eq!(sniffed(post).await, (Http::H1, post.to_vec()));
        let put = b"PUT / HTTP/1.1\r\n\r\n";
        assert_eq!(sniffed(put).await, (Http::H1, put.to_vec()));
        assert_eq!(sniffed(b"G").await, (Http::H1, b"G".to_vec()));
    }

    #[tokio::test]
    async fn a_connection_closed_at_once_is_an_error() {
        let (a, b) = tokio::io::duplex(64);
        drop(a);
        assert!(sniff(b).await.is_err());
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b"PR").await.unwrap();
        drop(a);
        assert!(sniff(b).await.is_err());
    }
}
