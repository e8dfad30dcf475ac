//! The floors: hand-written raw-TCP programs doing the least work a
//! loopback round trip or stream can take. Frames are a 4-byte big-endian
//! length, then the payload.
//!
//! - Echo (`floor`): the server writes back each read's complete frames
//!   straight from its read buffer; the unary client keeps `C` frames in
//!   flight with one writer and one reader task (no correlation, no task
//!   per call); the stream client writes 256 frames per `write`.
//! - One way (`floor-push`): the server writes 256 frames per `write`, the
//!   client counts them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::runner::clock::Stamp;
use crate::runner::flow::Window;
use crate::runner::latency::{Hist, new_hist};
use crate::runner::load::Load;

/// The length of the frame `buf` begins with (prefix included), if all of
/// it is there.
#[inline]
pub(super) fn whole_frame(buf: &[u8]) -> Option<usize> {
    let prefix = buf.first_chunk::<4>()?;
    let len = 4 + u32::from_be_bytes(*prefix) as usize;
    (buf.len() >= len).then_some(len)
}

/// Serves the echo floor until aborted.
pub(super) async fn serve_echo(listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(floor_echo(stream));
    }
}

/// Serves the one-way floor until aborted. The payload size is the
/// default's: the server process is not told the client's flags.
pub(super) async fn serve_push(listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(floor_push(stream, 16));
    }
}

/// The unary floor: `load.c` frames kept in flight on one connection, each
/// carrying its send time for the latency histogram.
pub(crate) async fn floor_closed_loop(load: Load, addr: SocketAddr) -> anyhow::Result<Hist> {
    // Frames: u32 length, u64 send time (ns since `epoch`), payload.
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let epoch = Stamp::now();
    let in_flight = Arc::new(AtomicU64::new(0));
    let room = Arc::new(Notify::new());
    let writer = tokio::spawn({
        let (this, in_flight, room) = (load.clone(), in_flight.clone(), room.clone());
        async move {
            let mut buf = BytesMut::new();
            while !this.stop.load(Ordering::Relaxed) {
                let free = this.c as u64 - in_flight.load(Ordering::Acquire).min(this.c as u64);
                if free == 0 {
                    let _ = tokio::time::timeout(Duration::from_millis(1), room.notified()).await;
                    continue;
                }
                buf.clear();
                let now = epoch.elapsed();
                for _ in 0..free {
                    buf.put_u32((8 + this.payload.len()) as u32);
                    buf.put_u64(now);
                    buf.put_slice(&this.payload);
                }
                in_flight.fetch_add(free, Ordering::AcqRel);
                if wr.write_all(&buf).await.is_err() {
                    return;
                }
            }
        }
    });
    let mut hist = new_hist();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    while !load.stop.load(Ordering::Relaxed) {
        if rd.read_buf(&mut buf).await? == 0 {
            break;
        }
        let now = epoch.elapsed();
        let mut n = 0;
        while let Some(len) = whole_frame(&buf) {
            let sent = (&buf[4..12]).get_u64();
            buf.advance(len);
            if load.recording.load(Ordering::Relaxed) {
                hist.record(now.saturating_sub(sent).max(1))?;
            }
            n += 1;
        }
        in_flight.fetch_sub(n, Ordering::AcqRel);
        load.done.add(0, n);
        room.notify_one();
        buf.reserve(64 * 1024);
    }
    writer.abort();
    Ok(hist)
}

/// Keeps `window` frames of `size` bytes in flight, counting the echoes
/// into `received`.
pub(crate) async fn floor_stream_client(
    addr: SocketAddr,
    size: usize,
    window: u64,
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let win = Window::new(window);
    let writer = tokio::spawn({
        let win = win.clone();
        async move {
            let payload = vec![0xab; size];
            let mut buf = BytesMut::with_capacity(256 * (4 + size));
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = win.room(sent).await.min(256);
                buf.clear();
                for _ in 0..n {
                    buf.put_u32(size as u32);
                    buf.put_slice(&payload);
                }
                if wr.write_all(&buf).await.is_err() {
                    return;
                }
                sent += n;
            }
        }
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        if rd.read_buf(&mut buf).await? == 0 {
            break;
        }
        let mut frames = 0;
        while let Some(len) = whole_frame(&buf) {
            buf.advance(len);
            frames += 1;
        }
        win.arrived(frames, &received);
        buf.reserve(64 * 1024);
    }
    writer.abort();
    Ok(())
}

/// Counts the one-way floor's frames into `received`.
pub(crate) async fn floor_push_client(
    addr: SocketAddr,
    received: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        let mut frames = 0;
        while let Some(len) = whole_frame(&buf) {
            buf.advance(len);
            frames += 1;
        }
        received.fetch_add(frames, Ordering::Relaxed);
        buf.reserve(64 * 1024);
    }
}

/// The one-way floor's server: 256 frames of `size` bytes per `write`,
/// for as long as the client reads.
async fn floor_push(mut stream: TcpStream, size: usize) -> anyhow::Result<()> {
    let mut buf = BytesMut::with_capacity(256 * (4 + size));
    for _ in 0..256 {
        buf.put_u32(size as u32);
        buf.put_bytes(0xab, size);
    }
    loop {
        stream.write_all(&buf).await?;
    }
}

/// The floor's server: echoes each read's complete length-prefixed frames
/// straight from the read buffer.
async fn floor_echo(stream: TcpStream) -> anyhow::Result<()> {
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        if rd.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        // Echo every complete frame straight from the read buffer.
        let mut complete = 0;
        while let Some(len) = whole_frame(&buf[complete..]) {
            complete += len;
        }
        wr.write_all(&buf[..complete]).await?;
        buf.advance(complete);
        buf.reserve(64 * 1024);
    }
}

/// The open-loop floor (`rate`): calls written in the batches the
/// schedule hands out, one `write` per batch, each frame carrying its
/// call's intended send time; one reader hands every echo's intended time
/// to `on_echo`. No correlation and no task per call: the least an
/// open-loop round trip costs at a given rate on this guest.
pub(crate) struct FloorOpenLoop {
    wr: tokio::sync::Mutex<tokio::net::tcp::OwnedWriteHalf>,
    payload: bytes::Bytes,
    reader: tokio::task::JoinHandle<()>,
}

impl FloorOpenLoop {
    /// Connects to the echo floor at `addr`; `on_echo` gets the intended
    /// send times of each read's echoed frames.
    pub(crate) async fn connect(
        addr: SocketAddr,
        payload: bytes::Bytes,
        mut on_echo: impl FnMut(&[u64]) + Send + 'static,
    ) -> anyhow::Result<FloorOpenLoop> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (mut rd, wr) = stream.into_split();
        let reader = tokio::spawn(async move {
            let mut buf = BytesMut::with_capacity(64 * 1024);
            let mut sent = Vec::new();
            while matches!(rd.read_buf(&mut buf).await, Ok(n) if n > 0) {
                sent.clear();
                while let Some(len) = whole_frame(&buf) {
                    sent.push((&buf[4..12]).get_u64());
                    buf.advance(len);
                }
                on_echo(&sent);
                buf.reserve(64 * 1024);
            }
        });
        Ok(FloorOpenLoop {
            wr: tokio::sync::Mutex::new(wr),
            payload,
            reader,
        })
    }

    /// Writes one frame per intended send time (nanoseconds), in one
    /// `write`.
    pub(crate) async fn send(&self, intended: impl Iterator<Item = u64>) -> std::io::Result<()> {
        let mut buf = BytesMut::new();
        for t in intended {
            buf.put_u32((8 + self.payload.len()) as u32);
            buf.put_u64(t);
            buf.put_slice(&self.payload);
        }
        self.wr.lock().await.write_all(&buf).await
    }
}

impl Drop for FloorOpenLoop {
    fn drop(&mut self) {
        self.reader.abort();
    }
}
