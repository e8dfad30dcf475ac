//! The receiving half: reads into one reused buffer and decodes in place.
//!
//! There is no reader task: whoever awaits [`Inbound::recv`] does the read
//! system call, so a message costs no hand-off between tasks. Messages
//! already in the buffer are decoded without any I/O.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::AsyncRead;

use super::codec::{DecodeRef, Decoder};
use super::error::{Error, ErrorKind};
use super::readpool::{self, PAGE, to_read_phase};

/// A message's start up to this size is copied to a new buffer rather
/// than completed where it is with a read of its own.
const COPY_AT_MOST: usize = 4096;

/// The receiving half of a message-stream connection.
///
/// Also a [`Stream`](futures_core::Stream) of `Result<D::Item, Error>`.
/// After an error or the end of the stream, it yields nothing more.
pub struct Inbound<R, D> {
    io: R,
    decoder: D,
    buf: BytesMut,
    /// `buf`'s room when it was made or taken, empty: its allocation's
    /// size, which its retired remains no longer tell the pool.
    buf_room: usize,
    /// The room a read is given when the buffer needs more.
    read_chunk: usize,
    /// What `read_chunk` may grow to.
    max_read_chunk: usize,
    max_buffered: usize,
    state: ReadState,
    /// A decode error found while draining a batch, returned next.
    pending_error: Option<Error>,
    /// Bytes read from the transport so far.
    received: u64,
    /// The last read took less than it had room for: the socket was most
    /// likely empty after it.
    short_read: bool,
    /// Refill the buffer before reading when less room than this is left:
    /// a quarter of the read chunk, or more once a message larger than
    /// that was read across the end of a buffer (see `needs_room`).
    refill_below: usize,
    /// Bytes copied from a full buffer to the next (the start of a message
    /// read across its end): what the tests look at.
    #[cfg(test)]
    copied: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadState {
    Open,
    Eof,
    Done,
}

impl<R, D> Inbound<R, D>
where
    R: AsyncRead + Unpin,
    D: Decoder,
{
    pub(crate) fn new(
        io: R,
        decoder: D,
        read_chunk: usize,
        max_read_chunk: usize,
        max_buffered: usize,
    ) -> Self {
        let buf = readpool::with_room(read_chunk);
        Inbound {
            io,
            decoder,
            buf_room: buf.capacity(),
            buf,
            read_chunk,
            max_read_chunk: max_read_chunk.max(read_chunk),
            max_buffered,
            state: ReadState::Open,
            pending_error: None,
            received: 0,
            short_read: false,
            refill_below: read_chunk / 4,
            #[cfg(test)]
            copied: 0,
        }
    }

    /// The next message, or `None` once the peer has closed cleanly.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Decode`] for bytes the codec rejects,
    /// [`ErrorKind::TooLarge`] when more than the maximum is buffered without
    /// a whole message, [`ErrorKind::Truncated`] when the peer closes in the
    /// middle of a message, [`ErrorKind::Io`] when reading fails. After an
    /// error the stream is finished.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: bytes read before the future is dropped stay buffered
    /// for the next call.
    pub async fn recv(&mut self) -> Option<Result<D::Item, Error>> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Waits for at least one message, then appends to `out` every further
    /// message already buffered, up to `max` in all, without more I/O.
    /// Returns how many were appended, or `None` once the stream has ended.
    ///
    /// Handling messages in batches lets a consumer pass them on with one
    /// [`Sender::send_all`](super::Sender::send_all), one lock for the lot.
    ///
    /// # Errors
    ///
    /// As [`Inbound::recv`]. An error is returned on the call after the
    /// messages that preceded it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Inbound::recv`].
    pub async fn recv_many(
        &mut self,
        out: &mut Vec<D::Item>,
        max: usize,
    ) -> Option<Result<usize, Error>> {
        let first = match self.recv().await? {
            Ok(item) => item,
            Err(e) => return Some(Err(e)),
        };
        out.push(first);
        let mut n = 1;
        while n < max {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(item)) => {
                    out.push(item);
                    n += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    // Deliver what came before the bad bytes; the error
                    // is returned by the next call.
                    self.pending_error = Some(Error::decode(e));
                    break;
                }
            }
        }
        Some(Ok(n))
    }

    /// Waits until at least one whole message is buffered, then calls `f`
    /// with a [`Batch`]: an iterator over the buffered messages, borrowed in
    /// place (no copy, no allocation, no reference count). The messages `f`
    /// takes from the batch are consumed; the rest stay buffered for the
    /// next call, so `f` may stop early (for example when an outbound queue
    /// is full) without losing anything. Returns what `f` returns, or
    /// `None` once the stream has ended.
    ///
    /// # Errors
    ///
    /// As [`Inbound::recv`]; an error found inside a batch ends that batch
    /// and is returned by the next call.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: `f` runs only once messages are there, synchronously.
    pub async fn recv_with<T, F>(&mut self, f: F) -> Option<Result<T, Error>>
    where
        D: DecodeRef,
        F: FnOnce(&mut Batch<'_, D>) -> T,
    {
        if let Err(e) = std::future::poll_fn(|cx| self.poll_buffered(cx)).await? {
            return Some(Err(e));
        }
        let mut batch = Batch {
            buf: &self.buf[..],
            pos: 0,
            decoder: &mut self.decoder,
            error: None,
        };
        let out = f(&mut batch);
        let (pos, error) = (batch.pos, batch.error);
        self.buf.advance(pos);
        if let Some(e) = error {
            self.pending_error = Some(e);
        }
        Some(Ok(out))
    }

    /// Reads until a whole message is buffered (`Some(Ok)`), the stream ends
    /// (`None`), or an error.
    fn poll_buffered(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<(), Error>>>
    where
        D: DecodeRef,
    {
        loop {
            if self.state == ReadState::Done {
                return Poll::Ready(None);
            }
            if let Some(e) = self.pending_error.take() {
                self.state = ReadState::Done;
                return Poll::Ready(Some(Err(e)));
            }
            match self.decoder.decode_ref(&self.buf) {
                Ok(Some(_)) => return Poll::Ready(Some(Ok(()))),
                Ok(None) => {}
                Err(e) => {
                    self.state = ReadState::Done;
                    return Poll::Ready(Some(Err(Error::decode(e))));
                }
            }
            if let Some(end) = ready!(self.poll_fill(cx)) {
                return Poll::Ready(end.map(Err));
            }
        }
    }

    /// The next message if one is already buffered, without reading.
    ///
    /// # Errors
    ///
    /// As [`Inbound::recv`], for the buffered bytes.
    pub fn try_recv(&mut self) -> Option<Result<D::Item, Error>> {
        if self.state == ReadState::Done {
            return None;
        }
        if let Some(e) = self.pending_error.take() {
            self.state = ReadState::Done;
            return Some(Err(e));
        }
        // No bytes, no message (the decoder's contract): most reads end
        // with a look at an empty buffer.
        if self.buf.is_empty() {
            return None;
        }
        match self.decoder.decode(&mut self.buf) {
            Ok(Some(item)) => Some(Ok(item)),
            Ok(None) => None,
            Err(e) => {
                self.state = ReadState::Done;
                Some(Err(Error::decode(e)))
            }
        }
    }

    /// Polls for the next message; see [`Inbound::recv`].
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<D::Item, Error>>> {
        loop {
            if self.state == ReadState::Done {
                return Poll::Ready(None);
            }
            if let Some(result) = self.try_recv() {
                return Poll::Ready(Some(result));
            }
            if let Some(end) = ready!(self.poll_fill(cx)) {
                return Poll::Ready(end.map(Err));
            }
        }
    }

    /// Reads more bytes into the buffer. `Ready(None)`: bytes were read (or
    /// the end was noted), try decoding again. `Ready(Some(end))`: the
    /// stream is over, cleanly (`None`) or with an error.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Option<Option<Error>>> {
        if self.buf.len() >= self.max_buffered {
            self.state = ReadState::Done;
            return Poll::Ready(Some(Some(Error::new(ErrorKind::TooLarge, None))));
        }
        if self.state == ReadState::Eof {
            self.state = ReadState::Done;
            return Poll::Ready(Some(if self.buf.is_empty() {
                None
            } else {
                Some(Error::new(ErrorKind::Truncated, None))
            }));
        }
        if self.needs_room() {
            // Never read past the bound: at most what completes it.
            let room = self.read_chunk.min(self.max_buffered - self.buf.len());
            self.make_room(room);
        }
        let room = self.buf.capacity() - self.buf.len();
        let n = match ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.io),
            cx,
            &mut self.buf
        )) {
            Ok(n) => n,
            Err(e) => {
                self.state = ReadState::Done;
                return Poll::Ready(Some(Some(e.into())));
            }
        };
        if n == 0 {
            self.state = ReadState::Eof;
        }
        if n > 0 && n == room && self.read_chunk < self.max_read_chunk {
            // The socket held more than the read could take: read more at
            // a time from now on.
            self.read_chunk = (self.read_chunk * 2).min(self.max_read_chunk);
            self.refill_below = self.refill_below.max(self.read_chunk / 4);
        }
        self.received += n as u64;
        self.short_read = n < room;
        Poll::Ready(None)
    }

    /// Whether to move to a buffer with more room before reading on.
    ///
    /// A large message whose start is buffered and whose rest fits is read
    /// to its end where it is: moving it would copy what is there (a peer
    /// whose send buffer is smaller than its message writes it in two
    /// parts, so the first read of each message ends inside it). Otherwise
    /// the buffer is kept at least `refill_below` bytes roomy; and if the
    /// message it ends with is larger than that, the bar is raised to that
    /// size (up to half a read chunk), so that messages that large are not
    /// read across a buffer's end from then on.
    fn needs_room(&mut self) -> bool {
        let (buffered, room) = (self.buf.len(), self.buf.capacity() - self.buf.len());
        match self.decoder.frame_len(&self.buf).filter(|&n| n > buffered) {
            // The message begun is being read across the end of the
            // buffer: its start is copied to the next.
            Some(n) if room < n - buffered => {
                self.refill_below = self.refill_below.max(n.min(self.read_chunk / 2));
                true
            }
            Some(_) if buffered >= COPY_AT_MOST => false,
            _ => room < self.refill_below,
        }
    }

    /// Makes room for `room` more bytes: in the buffer itself if its
    /// messages are all gone, else in a pooled buffer whose messages are
    /// (the current one, still referenced, goes to the pool), else in a new
    /// one.
    fn make_room(&mut self, room: usize) {
        // Reclaiming moves what is left unread to the front, as the other
        // two ways copy it.
        #[cfg(test)]
        {
            self.copied += self.buf.len() as u64;
        }
        if self.buf.try_reclaim(room + PAGE) {
            // Moved to the front of its allocation, at the allocator's
            // offset into a page: moved on to the read phase, when what is
            // left is small enough to copy aside.
            let left = self.buf.len();
            if left <= COPY_AT_MOST {
                let mut aside = [0u8; COPY_AT_MOST];
                aside[..left].copy_from_slice(&self.buf);
                self.buf.clear();
                to_read_phase(&mut self.buf);
                self.buf.extend_from_slice(&aside[..left]);
            }
            return;
        }
        // What is left unread is the start of a frame, copied to the next
        // buffer; when much of a large frame is in already, the buffer
        // grows to take the rest instead.
        if self.buf.len() > self.read_chunk / 4 {
            self.buf.reserve(room);
            self.buf_room = self.buf_room.max(self.buf.capacity());
            return;
        }
        let mut next = match readpool::take(self.buf.len() + room + PAGE) {
            Some(mut pooled) => {
                to_read_phase(&mut pooled);
                pooled
            }
            None => readpool::with_room((self.buf.len() + room).max(self.read_chunk)),
        };
        let next_room = next.capacity();
        next.extend_from_slice(&self.buf);
        let retired = std::mem::replace(&mut self.buf, next);
        readpool::give(retired, std::mem::replace(&mut self.buf_room, next_room));
    }

    /// Whether the last read took less than it had room for, so that the
    /// transport most likely has nothing more now (tokio then clears the
    /// socket's readiness, and the next read only registers a wake-up).
    pub fn read_was_short(&self) -> bool {
        self.short_read
    }

    /// Bytes read and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Bytes read from the transport so far.
    pub fn bytes_received(&self) -> u64 {
        self.received
    }

    /// Bytes decoded so far: read, and handed out in messages.
    pub fn bytes_decoded(&self) -> u64 {
        self.received - self.buf.len() as u64
    }

    /// The transport's read half.
    pub fn get_ref(&self) -> &R {
        &self.io
    }
}

impl<R, D> futures_core::Stream for Inbound<R, D>
where
    R: AsyncRead + Unpin,
    D: Decoder + Unpin,
{
    type Item = Result<D::Item, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_recv(cx)
    }
}

impl<R, D> std::fmt::Debug for Inbound<R, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbound")
            .field("buffered", &self.buf.len())
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// The messages buffered in an [`Inbound`], borrowed in place; see
/// [`Inbound::recv_with`]. Each message taken from the iterator is consumed.
pub struct Batch<'a, D: DecodeRef> {
    buf: &'a [u8],
    pos: usize,
    decoder: &'a mut D,
    error: Option<Error>,
}

impl<'a, D: DecodeRef> Iterator for Batch<'a, D> {
    type Item = D::Ref<'a>;

    fn next(&mut self) -> Option<D::Ref<'a>> {
        if self.error.is_some() {
            return None;
        }
        let buf: &'a [u8] = self.buf;
        match self.decoder.decode_ref(&buf[self.pos..]) {
            Ok(Some((msg, len))) => {
                self.pos += len;
                Some(msg)
            }
            Ok(None) => None,
            Err(e) => {
                self.error = Some(Error::decode(e));
                None
            }
        }
    }
}

impl<D: DecodeRef> std::fmt::Debug for Batch<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("consumed", &self.pos)
            .field("buffered", &self.buf.len())
            .finish()
    }
}

#[cfg(test)]
mod tests;
