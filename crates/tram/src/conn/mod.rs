//! Message streams: a connection that carries your messages, in your format.
//!
//! This is the layer under tram's RPC, usable on its own when you want your
//! own semantics (the protosocket layer): give it any transport and a codec,
//! and get an [`Inbound`] stream of decoded messages and a cloneable
//! [`Sender`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tram::conn::{self, Config, LengthDelimited, TcpConfig};
//!
//! let stream = conn::connect("127.0.0.1:7000", &TcpConfig::default()).await?;
//! let mut connection = conn::Connection::new(stream, LengthDelimited::new(), Config::default());
//! connection.send(&b"ping"[..]).await?;
//! while let Some(msg) = connection.recv().await {
//!     println!("got {:?}", msg?);
//! }
//! # Ok(()) }
//! ```
//!
//! # Data path
//!
//! - Reading: the task that awaits [`Inbound::recv`] reads into one reused
//!   buffer and decodes in place; byte payloads are slices of that buffer.
//!   Bytes buffered for one message are bounded by
//!   [`Config::max_frame_len`].
//! - Writing: [`Sender::send`] encodes into one shared buffer bounded by
//!   [`Config::max_queued_bytes`]; a writer task (one per connection) writes
//!   all that is queued with one `write`, when the [`FlushPolicy`] says so.
//!   Payloads of [`SPLICE_MIN`] bytes or more put as `Bytes` are written by
//!   reference ([`WriteBuf`]), with `writev`.

mod codec;
mod error;
mod inbound;
mod net;
mod outbound;
pub(crate) mod paced;
mod readpool;
mod writebuf;

use tokio::io::{AsyncRead, AsyncWrite};

pub use codec::{DecodeRef, Decoder, Encoder, FrameCodec, LengthDelimited, LengthError};
#[cfg(feature = "json")]
pub use codec::{JsonError, JsonLines};
pub use codec::{ProstCodec, ProstError};
pub use error::{Error, ErrorKind, TrySendError};
pub use inbound::{Batch, Inbound};
pub use net::{CongestionControl, Listener, TcpConfig, connect};
pub use outbound::{Cork, FlushPolicy, Sender};
pub(crate) use outbound::{Locked, channel as outbound_channel};
pub use writebuf::{SPLICE_MIN, WriteBuf};

/// [`Config::max_read_size`]'s default.
const DEFAULT_MAX_READ_SIZE: usize = 256 << 10;

/// Buffer sizes, bounds and the flush policy of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    max_frame_len: usize,
    max_queued_bytes: usize,
    buffer_size: usize,
    max_read_size: usize,
    flush: FlushPolicy,
    inline_writes: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_frame_len: 4 << 20,
            max_queued_bytes: 1 << 20,
            buffer_size: 64 << 10,
            max_read_size: DEFAULT_MAX_READ_SIZE,
            flush: FlushPolicy::Immediate,
            inline_writes: true,
        }
    }
}

impl Config {
    /// The most bytes buffered while waiting for one whole message (default
    /// 4 MiB); past it, [`Inbound::recv`] fails with
    /// [`ErrorKind::TooLarge`]. A backstop for codecs that do not bound
    /// themselves; the shipped codecs also reject oversized lengths as soon
    /// as they read them.
    pub fn max_frame_len(mut self, n: usize) -> Self {
        self.max_frame_len = n.max(1);
        self
    }

    /// The outbound queue's bound in bytes (default 1 MiB; an RPC channel's
    /// connections use 8 MiB). A sender that finds it full waits; one
    /// message may overshoot it.
    pub fn max_queued_bytes(mut self, n: usize) -> Self {
        self.max_queued_bytes = n.max(1);
        self
    }

    /// The size of the first reads, and the initial capacity of the read
    /// and write buffers (default 64 KiB).
    pub fn buffer_size(mut self, n: usize) -> Self {
        self.buffer_size = n.max(64);
        self
    }

    /// The largest read (default 256 KiB). Reads start at
    /// [`buffer_size`](Config::buffer_size) and double, up to this, each
    /// time one fills all the room it had: a connection that carries bulk
    /// drains its socket in fewer reads (and fewer wake-ups), one that
    /// does not keeps its buffer small. Below `buffer_size`, reads stay at
    /// `buffer_size`.
    pub fn max_read_size(mut self, n: usize) -> Self {
        self.max_read_size = n;
        self
    }

    /// Under [`FlushPolicy::Immediate`], whether a sender that finds nobody
    /// writing writes the queue itself (default `true`). Best when one task
    /// produces most messages (it writes right after it produced, with no
    /// hand-off). With many independent tasks each sending one message,
    /// turn it off: they then only queue, and the writer task sends what
    /// all of them queued in one write.
    pub fn inline_writes(mut self, on: bool) -> Self {
        self.inline_writes = on;
        self
    }

    /// When queued messages are written (default [`FlushPolicy::Immediate`]).
    pub fn flush(mut self, policy: FlushPolicy) -> Self {
        self.flush = policy;
        self
    }
}

/// A transport that splits into independently owned read and write halves.
///
/// Implemented without locks for TCP and Unix streams; wrap any other
/// `AsyncRead + AsyncWrite` (TLS, in-memory pipes) in [`Split`].
pub trait IntoSplit {
    /// The read half.
    type Read: AsyncRead + Unpin + Send + 'static;
    /// The write half.
    type Write: AsyncWrite + Unpin + Send + 'static;
    /// Splits the transport.
    fn into_split(self) -> (Self::Read, Self::Write);
}

impl IntoSplit for tokio::net::TcpStream {
    type Read = tokio::net::tcp::OwnedReadHalf;
    type Write = tokio::net::tcp::OwnedWriteHalf;
    fn into_split(self) -> (Self::Read, Self::Write) {
        tokio::net::TcpStream::into_split(self)
    }
}

#[cfg(unix)]
impl IntoSplit for tokio::net::UnixStream {
    type Read = tokio::net::unix::OwnedReadHalf;
    type Write = tokio::net::unix::OwnedWriteHalf;
    fn into_split(self) -> (Self::Read, Self::Write) {
        tokio::net::UnixStream::into_split(self)
    }
}

/// Adapts any `AsyncRead + AsyncWrite` to [`IntoSplit`] with
/// [`tokio::io::split`] (which takes a lock per operation).
#[derive(Debug)]
pub struct Split<T>(pub T);

impl<T: AsyncRead + AsyncWrite + Send + 'static> IntoSplit for Split<T> {
    type Read = tokio::io::ReadHalf<T>;
    type Write = tokio::io::WriteHalf<T>;
    fn into_split(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self.0)
    }
}

/// A message-stream connection: the [`Inbound`] half that receives and the
/// [`Sender`] half that sends, with its writer task running on the tokio
/// runtime. Use it whole ([`Connection::recv`], [`Connection::send`]) or
/// split it to receive and send from different tasks.
pub struct Connection<R, D, E = D> {
    inbound: Inbound<R, D>,
    sender: Sender<E>,
}

impl<R, C> Connection<R, C, C>
where
    R: AsyncRead + Unpin,
    C: Decoder + Clone + Send + 'static,
{
    /// Splits `io` and spawns its writer task on the current tokio runtime.
    /// The codec is cloned: one copy decodes, the other encodes.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn new<IO: IntoSplit<Read = R>>(io: IO, codec: C, config: Config) -> Self {
        let (read, write) = io.into_split();
        Connection::from_parts(read, write, codec.clone(), codec, config)
    }
}

impl<R, D, E> Connection<R, D, E>
where
    R: AsyncRead + Unpin,
    D: Decoder,
    E: Send + 'static,
{
    /// Like [`Connection::new`], from separate halves and separate decoder
    /// and encoder.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn from_parts<W>(read: R, write: W, decoder: D, encoder: E, config: Config) -> Self
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let inbound = Inbound::new(
            read,
            decoder,
            config.buffer_size,
            config.max_read_size,
            config.max_frame_len,
        );
        let (sender, writer) = outbound::channel(encoder, write, config);
        tokio::spawn(async move {
            if let Err(e) = writer.await {
                tracing::debug!(error = %e, "message stream writer stopped");
            }
        });
        Connection { inbound, sender }
    }

    /// The next message; see [`Inbound::recv`].
    pub async fn recv(&mut self) -> Option<Result<D::Item, Error>> {
        self.inbound.recv().await
    }

    /// Queues a message; see [`Sender::send`].
    ///
    /// # Errors
    ///
    /// As [`Sender::send`].
    pub async fn send<T>(&self, item: T) -> Result<(), Error>
    where
        E: Encoder<T>,
    {
        self.sender.send(item).await
    }

    /// The sending half (clone it to send from other tasks).
    pub fn sender(&self) -> &Sender<E> {
        &self.sender
    }

    /// The receiving half.
    pub fn inbound(&mut self) -> &mut Inbound<R, D> {
        &mut self.inbound
    }

    /// The two halves, to receive and send from different tasks.
    pub fn into_split(self) -> (Inbound<R, D>, Sender<E>) {
        (self.inbound, self.sender)
    }
}

impl<R, D, E> std::fmt::Debug for Connection<R, D, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}
