//! The queue every sender of a connection shares, under one lock: the
//! encoded bytes, the encoder, and who holds the write half. Deciding who
//! writes what is queued (the sender inline, the writer task, or nobody
//! yet, by flush policy) happens here; the writing in `writer`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::io::AsyncWrite;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::FlushPolicy;
use crate::conn::codec::Encoder;
use crate::conn::error::{Error, ErrorKind, TrySendError};
use crate::conn::writebuf::WriteBuf;

pub(super) type Io = Box<dyn AsyncWrite + Send + Unpin>;

/// The write half and the batch in flight: whoever holds it is the writer.
pub(super) struct Pipe {
    pub(super) io: Io,
    /// Bytes taken from the queue and not yet written.
    pub(super) out: WriteBuf,
}

pub(crate) struct Shared<E> {
    pub(super) state: Mutex<State<E>>,
    /// Wakes the writer task.
    pub(super) wake_writer: Notify,
    /// Wakes senders waiting for queue space, and flushers.
    pub(super) progress: Notify,
    /// Total bytes handed to the transport.
    pub(super) written: AtomicU64,
    pub(super) senders: AtomicUsize,
    pub(super) policy: FlushPolicy,
    /// Senders may write inline (Immediate only).
    pub(super) inline: bool,
    pub(super) max_queued: usize,
}

pub(super) struct State<E> {
    pub(super) queue: WriteBuf,
    pub(super) encoder: E,
    /// Total bytes ever queued.
    pub(super) queued_total: u64,
    /// The pipe, while nobody is writing. Boxed: it moves out and back at
    /// every inline write and through the guard that carries it out of the
    /// lock, where a pointer is cheaper to move (and an empty slot to drop)
    /// than the write half with its buffer.
    pub(super) pipe: Option<Box<Pipe>>,
    /// The writer task is parked and must be woken to do anything.
    pub(super) writer_idle: bool,
    /// When the oldest queued byte was queued (for Linger).
    pub(super) oldest: Option<Instant>,
    /// A flush was requested and not yet served.
    pub(super) flush_requested: bool,
    /// Someone waits on `progress`.
    pub(super) waiters: bool,
    /// The connection can no longer send.
    pub(super) closed: Option<ErrorKind>,
    /// [`Sender::close`] was called: nothing more is queued; the writer
    /// writes what is and then shuts the write side down.
    pub(super) closing: bool,
    /// Live [`Cork`] guards: while any, senders only queue.
    pub(super) corked: usize,
}

impl<E> State<E> {
    /// Whether senders are turned away: closed, or closing.
    pub(super) fn refuses(&self) -> bool {
        self.closed.is_some() || self.closing
    }

    /// Stops queueing (see `Sender::close`): a parked writer must wake to
    /// finish up; a busy one (or an inline writer, which hands the pipe
    /// back to it) sees the flag next.
    pub(super) fn close(&mut self) -> AfterPush {
        if self.refuses() {
            return AfterPush::Nothing;
        }
        self.closing = true;
        if std::mem::replace(&mut self.writer_idle, false) {
            AfterPush::WakeWriter
        } else {
            AfterPush::Nothing
        }
    }
}

/// The error of a push that ignored the queue's bound.
pub(super) fn unbounded<T>(e: TrySendError<T>) -> Error {
    match e {
        TrySendError::Encode(e) => e,
        TrySendError::Closed(_) | TrySendError::Full(_) => Error::closed(),
    }
}

/// What a sender does after queueing, once the lock is released.
pub(super) enum AfterPush {
    Nothing,
    WakeWriter,
    WriteInline(Box<Pipe>),
}

/// What the writer task waits for before its next look at the queue.
pub(super) enum Wait {
    /// Let the tasks runnable now queue their messages first.
    Yield,
    For(WriteDue),
}

/// When the writer task should next write.
pub(super) enum WriteDue {
    Now,
    At(Instant),
    Never,
}

impl<E> Shared<E> {
    /// Encodes `item` onto the queue under the lock (refused when closed,
    /// or, if `bounded`, when the queue is at its byte bound), and decides
    /// who writes it.
    pub(super) fn push<T>(
        &self,
        st: &mut State<E>,
        item: T,
        inline: bool,
        bounded: bool,
    ) -> Result<AfterPush, TrySendError<T>>
    where
        E: Encoder<T>,
    {
        if st.refuses() {
            return Err(TrySendError::Closed(item));
        }
        if bounded && st.queue.len() >= self.max_queued {
            st.waiters = true;
            return Err(TrySendError::Full(item));
        }
        let before = st.queue.len();
        let mark = st.queue.mark();
        let State { queue, encoder, .. } = st;
        if let Err(e) = encoder.encode(item, queue) {
            st.queue.rollback(mark);
            return Err(TrySendError::Encode(Error::encode(e)));
        }
        let after = st.queue.len();
        Ok(self.pushed(st, before, after, inline))
    }

    /// Accounts for the queue growing from `before` to `after` bytes, under
    /// the lock, and decides who writes it.
    pub(super) fn pushed(
        &self,
        st: &mut State<E>,
        before: usize,
        after: usize,
        inline: bool,
    ) -> AfterPush {
        if after == before {
            return AfterPush::Nothing;
        }
        st.queued_total += (after - before) as u64;
        if before == 0 && matches!(self.policy, FlushPolicy::Linger { .. }) {
            // Only Linger needs the age of the oldest byte (a clock read).
            st.oldest = Some(Instant::now());
        }
        match self.policy {
            FlushPolicy::Immediate if st.corked > 0 => {
                // Corked: hold the bytes for the uncork, unless the queue is
                // at its bound, which the writer task relieves.
                if after >= self.max_queued && std::mem::replace(&mut st.writer_idle, false) {
                    AfterPush::WakeWriter
                } else {
                    AfterPush::Nothing
                }
            }
            FlushPolicy::Immediate if self.inline && inline => self.take_for_inline(st),
            FlushPolicy::Immediate => {
                if std::mem::replace(&mut st.writer_idle, false) {
                    AfterPush::WakeWriter
                } else {
                    AfterPush::Nothing
                }
            }
            FlushPolicy::Linger { max_bytes, .. } => {
                let train_full = before < max_bytes && after >= max_bytes;
                if st.writer_idle && (before == 0 || train_full) {
                    st.writer_idle = false;
                    AfterPush::WakeWriter
                } else if train_full {
                    AfterPush::WakeWriter
                } else {
                    AfterPush::Nothing
                }
            }
            FlushPolicy::Explicit => {
                if st.writer_idle && after >= self.max_queued {
                    st.writer_idle = false;
                    AfterPush::WakeWriter
                } else {
                    AfterPush::Nothing
                }
            }
        }
    }

    /// Under the lock: if nobody is writing and nothing is left over, takes
    /// the pipe with the queue in it, for the caller to write inline.
    /// Otherwise whoever holds the pipe picks the queued bytes up.
    pub(super) fn take_for_inline(&self, st: &mut State<E>) -> AfterPush {
        if st.queue.is_empty() {
            return AfterPush::Nothing;
        }
        match st.pipe.take_if(|p| p.out.is_empty()) {
            Some(mut pipe) => {
                std::mem::swap(&mut st.queue, &mut pipe.out);
                st.oldest = None;
                AfterPush::WriteInline(pipe)
            }
            None => AfterPush::Nothing,
        }
    }

    /// No more will be queued: the last sender is gone or it closed.
    pub(super) fn finishing(&self, st: &State<E>) -> bool {
        st.closing || self.senders.load(Ordering::Acquire) == 0
    }

    /// When the writer task should write the queue, by policy.
    pub(super) fn due(&self, st: &State<E>) -> WriteDue {
        if st.queue.is_empty() {
            return WriteDue::Never;
        }
        let force = st.flush_requested
            || st.queue.len() >= self.max_queued
            // The last sender is gone, or the sender closed: send what is
            // left, whatever the policy.
            || self.finishing(st);
        match self.policy {
            _ if force => WriteDue::Now,
            // Held for the uncork, which writes the queue or wakes us.
            FlushPolicy::Immediate if st.corked > 0 => WriteDue::Never,
            FlushPolicy::Immediate => WriteDue::Now,
            FlushPolicy::Linger {
                max_delay,
                max_bytes,
            } => {
                if st.queue.len() >= max_bytes {
                    WriteDue::Now
                } else {
                    let at = st.oldest.unwrap_or_else(Instant::now) + max_delay;
                    if at <= Instant::now() {
                        WriteDue::Now
                    } else {
                        WriteDue::At(at)
                    }
                }
            }
            FlushPolicy::Explicit => WriteDue::Never,
        }
    }
}

impl Pipe {
    /// Writes from the batch: the one buffer with `write`, or its pieces
    /// (large payloads spliced in) with `writev`; consumes what was written.
    pub(super) fn poll_write_some(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::pin::Pin;
        use std::task::{Poll, ready};
        let n = if self.out.is_contiguous() {
            ready!(Pin::new(&mut self.io).poll_write(cx, self.out.contiguous()))?
        } else {
            let mut slices = [std::io::IoSlice::new(&[]); 64];
            let k = self.out.chunks(&mut slices);
            ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &slices[..k]))?
        };
        self.out.advance(n);
        Poll::Ready(Ok(n))
    }
}
