//! Writes sized for a kernel that paces a connection's sends itself.
//!
//! BBR paces every connection it runs with timers of the TCP stack's own
//! wherever no `fq` qdisc does the pacing (loopback has none). A write the
//! kernel cuts into more than one segment (64 KiB with segmentation
//! offload) sends its first segment at once and arms a timer for the
//! rest, whose arming, firing and the send from its softirq then cost the
//! writer microseconds on a virtual machine. So on such a connection a
//! batch of large messages is written a segment's worth at a time, cut
//! only between the slices a vectored write is made of (a large message's
//! header and its payload are two), never inside one. Under a congestion
//! control that does not pace (cubic, the usual default) the same cut
//! only adds system calls, so it is made on BBR connections alone.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

/// The largest segment the kernel builds with segmentation offload,
/// loopback's included.
pub(crate) const SEGMENT_BYTES: usize = 64 * 1024;

/// Whether `stream`'s congestion control paces its sends (BBR, by name).
/// A system without the `TCP_CONGESTION` option, or one that refuses to
/// say, counts as one that does not.
pub(crate) fn paces(stream: &TcpStream) -> bool {
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    {
        socket2::SockRef::from(stream)
            .tcp_congestion()
            .is_ok_and(|name| name.starts_with(b"bbr"))
    }
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    {
        let _ = stream;
        false
    }
}

/// A write half whose vectored writes stop short of a second segment (see
/// [`within_segment`]). Plain writes, of one contiguous buffer, go through
/// whole: they hold only messages under [`SPLICE_MIN`](super::SPLICE_MIN)
/// (larger payloads are written from their own buffers, as slices of a
/// vectored write), and a cut there would fall inside a message, which
/// made a busy connection of 2 KiB calls slower.
#[derive(Debug)]
pub(crate) struct SegmentWrites<W>(pub(crate) W);

impl<W: AsyncWrite + Unpin> AsyncWrite for SegmentWrites<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let n = within_segment(bufs);
        Pin::new(&mut self.0).poll_write_vectored(cx, &bufs[..n])
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// How many of `bufs`, from the first, to write at once: as many as fit in
/// one segment, when they fill at least half of it. A slice that would
/// take a write of less than half a segment past a whole one (a message
/// of 48 KiB or more) gets no cut: the kernel arms its timer for that
/// write whatever is cut, and the rest might as well go with it.
pub(crate) fn within_segment(bufs: &[IoSlice<'_>]) -> usize {
    let mut total = 0;
    for (i, buf) in bufs.iter().enumerate() {
        if total + buf.len() > SEGMENT_BYTES {
            return if total >= SEGMENT_BYTES / 2 {
                i
            } else {
                bufs.len()
            };
        }
        total += buf.len();
    }
    bufs.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lens(lens: &[usize]) -> Vec<Vec<u8>> {
        lens.iter().map(|&n| vec![0; n]).collect()
    }

    fn cut(bufs: &[Vec<u8>]) -> usize {
        let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        within_segment(&slices)
    }

    #[test]
    fn messages_of_16_kib_go_three_to_a_write() {
        // A frame header, then the payload written from its own buffer.
        // The cut falls between slices: the fourth header goes with the
        // first three messages, its payload with the rest.
        let bufs = lens(&[5, 16384, 5, 16384, 5, 16384, 5, 16384, 5, 16384]);
        assert_eq!(cut(&bufs), 7);
        assert_eq!(cut(&bufs[7..]), 3);
    }

    #[test]
    fn a_message_of_a_segment_or_more_goes_with_what_follows() {
        let bufs = lens(&[5, 65536, 5, 65536]);
        assert_eq!(cut(&bufs), 4);
        let bufs = lens(&[5, 49152, 5, 49152]);
        assert_eq!(cut(&bufs), 3);
    }

    #[test]
    fn small_writes_are_not_cut() {
        assert_eq!(cut(&lens(&[100, 4096, 100, 4096])), 4);
        assert_eq!(cut(&lens(&[])), 0);
        assert_eq!(cut(&lens(&[SEGMENT_BYTES])), 1);
    }

    #[test]
    fn a_cut_write_never_passes_a_segment_nor_takes_less_than_half() {
        // Every mix of slice sizes around the thresholds.
        let sizes = [5, 4096, 16384, 20000, 32767, 32768, 40000, 65536, 70000];
        for &a in &sizes {
            for &b in &sizes {
                for &c in &sizes {
                    let bufs = lens(&[a, b, c, a, b, c]);
                    let n = cut(&bufs);
                    assert!(n >= 1, "{a} {b} {c}");
                    let total: usize = bufs[..n].iter().map(Vec::len).sum();
                    if n < bufs.len() {
                        assert!(total <= SEGMENT_BYTES, "{a} {b} {c}: {total}");
                        assert!(total >= SEGMENT_BYTES / 2, "{a} {b} {c}: {total}");
                    }
                }
            }
        }
    }

    /// What a [`SegmentWrites`] write half was asked to write, call by
    /// call; it takes up to `max` bytes a call, as a socket with little
    /// room would.
    struct Recorder {
        got: std::sync::Arc<std::sync::Mutex<(Vec<u8>, Vec<usize>)>>,
        max: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(buf)])
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut got = self.got.lock().unwrap();
            let asked: usize = bufs.iter().map(|b| b.len()).sum();
            got.1.push(asked);
            let mut left = self.max;
            for b in bufs {
                let n = b.len().min(left);
                got.0.extend_from_slice(&b[..n]);
                left -= n;
            }
            Poll::Ready(Ok(self.max.min(asked)))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A length and the payload by reference, as tram's RPC codec puts a
    /// large `bytes` field.
    struct Spliced;

    impl crate::conn::Encoder<bytes::Bytes> for Spliced {
        type Error = std::convert::Infallible;
        fn encode(
            &mut self,
            item: bytes::Bytes,
            dst: &mut crate::conn::WriteBuf,
        ) -> Result<(), Self::Error> {
            use bytes::BufMut;
            dst.put_u32(item.len() as u32);
            dst.splice(item);
            Ok(())
        }
    }

    /// Messages of many sizes through a connection's queue and a write
    /// half that takes partial writes: every byte arrives, in order, and
    /// a cut write never passes a segment.
    #[tokio::test]
    async fn a_queue_of_large_messages_arrives_whole_in_segments() {
        for max in [usize::MAX, 100_000, 7_000] {
            let got = std::sync::Arc::default();
            let io = SegmentWrites(Recorder {
                got: std::sync::Arc::clone(&got),
                max,
            });
            let (sender, writer) =
                crate::conn::outbound_channel(Spliced, io, crate::conn::Config::default());
            let writer = tokio::spawn(writer);
            let mut want = Vec::new();
            for (i, len) in [16384, 5000, 70000, 16384, 16384, 40000, 4096, 16384, 16384]
                .into_iter()
                .cycle()
                .take(60)
                .enumerate()
            {
                let msg = bytes::Bytes::from(vec![i as u8; len]);
                want.extend_from_slice(&(len as u32).to_be_bytes());
                want.extend_from_slice(&msg);
                sender.send(msg).await.unwrap();
            }
            sender.flush().await.unwrap();
            sender.close();
            drop(sender);
            writer.await.unwrap().unwrap();
            let got = got.lock().unwrap();
            assert!(got.0 == want, "bytes differ with writes of at most {max}");
            // A write asked for more than a segment only when what fit in
            // one was less than half of one.
            let cut = got.1.iter().filter(|&&n| n <= SEGMENT_BYTES).count();
            assert!(cut > got.1.len() / 2, "{:?}", got.1);
        }
    }

    /// The loopback socket's congestion control is read as the kernel
    /// reports it for new connections.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn paces_reads_the_sockets_congestion_control() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let name = socket2::SockRef::from(&stream).tcp_congestion().unwrap();
        assert_eq!(paces(&stream), name.starts_with(b"bbr"));
        let system = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .unwrap_or_default();
        let name = String::from_utf8_lossy(&name);
        assert_eq!(name.trim_end_matches('\0'), system.trim());
    }
}
