//! The sending half: a byte-bounded queue encoded in place, written by
//! whoever is free to write.
//!
//! Senders encode straight into one shared buffer under a short lock (no
//! allocation or queue node per message); a large payload is kept by
//! reference and written in its place (see [`WriteBuf`]). The transport's write half
//! and the batch being written travel together as a [`Pipe`]; whoever holds
//! the pipe is the one writer. Under [`FlushPolicy::Immediate`], a sender
//! that finds the pipe idle takes it and writes the queue itself with a
//! non-blocking write: no task hand-off and no wake-up per batch, the way a
//! hand-written echo writes right after it reads. Senders that arrive while
//! someone is writing only queue; their bytes go out in the writer's next
//! round, all in one `write`. When the socket would block, the rest goes
//! to a writer task (one per connection), which waits for the socket and
//! carries on. Two buffers ping-pong and keep their capacity; the queue is
//! bounded in bytes, and a sender that finds it full waits (or gets
//! [`TrySendError::Full`]).

mod locked;
mod state;
mod writer;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::codec::Encoder;
use super::error::{Error, TrySendError};
pub(crate) use locked::Locked;
use state::{AfterPush, Shared, State};
pub(crate) use writer::channel;

/// When queued bytes are written to the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FlushPolicy {
    /// At once: by the sender itself when nobody is writing, otherwise in
    /// the current writer's next round, together with everything else
    /// queued meanwhile. Batching without added latency.
    #[default]
    Immediate,
    /// Wait up to `max_delay` after the first queued byte, or until
    /// `max_bytes` are queued, whichever comes first (snail's "train
    /// station"): fewer, larger writes at a bounded latency cost.
    Linger {
        /// The longest a queued byte waits.
        max_delay: Duration,
        /// Write as soon as this many bytes are queued.
        max_bytes: usize,
    },
    /// Only on [`Sender::flush`], or when the queue reaches its byte limit.
    Explicit,
}

/// The cloneable sending half of a message-stream connection.
///
/// When every clone is dropped, or one calls [`Sender::close`], what is
/// queued is written and then the transport's write side is shut down (a
/// TCP FIN).
pub struct Sender<E> {
    shared: Arc<Shared<E>>,
    /// Counted among the senders that keep the connection open (every
    /// public handle is; see [`Sender::uncounted`]).
    counted: bool,
}

impl<E> Sender<E> {
    /// Queues `item`, waiting while the queue is at its byte limit.
    ///
    /// Under [`FlushPolicy::Immediate`], if nobody is writing, this call
    /// writes the queue to the transport itself, without blocking.
    /// Otherwise it returns once the message is queued: use
    /// [`Sender::flush`] to wait until it is written.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Encode`](super::ErrorKind::Encode) if the codec rejects the message,
    /// [`ErrorKind::Closed`](super::ErrorKind::Closed) if the connection is closed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes queues nothing.
    pub async fn send<T>(&self, item: T) -> Result<(), Error>
    where
        E: Encoder<T>,
    {
        self.send_hinted(item, true).await
    }

    /// [`Sender::send`], or with `inline` false never written inline: then
    /// the writer task writes it after letting every task that is runnable
    /// now queue its own messages, so that a burst of senders (callers woken
    /// by one read, say) shares one `write`, for one task wake-up per batch
    /// instead of one system call per message.
    pub(crate) async fn send_hinted<T>(&self, item: T, inline: bool) -> Result<(), Error>
    where
        E: Encoder<T>,
    {
        // Fast path: room in the queue, no waiter registration at all.
        let mut item = match self.try_push(item, inline) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(back)) => back,
            Err(TrySendError::Closed(_)) => return Err(Error::closed()),
            Err(TrySendError::Encode(e)) => return Err(e),
        };
        loop {
            // Register before re-checking, so that a drain between the
            // check and the await still wakes us.
            let progress = self.shared.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            match self.try_push(item, inline) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(back)) => item = back,
                Err(TrySendError::Closed(_)) => return Err(Error::closed()),
                Err(TrySendError::Encode(e)) => return Err(e),
            }
            progress.await;
        }
    }

    /// Queues `item` if the queue is below its byte limit (and, like
    /// [`Sender::send`], may write it at once without blocking).
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] or [`TrySendError::Closed`] with the item
    /// handed back, or [`TrySendError::Encode`].
    pub fn try_send<T>(&self, item: T) -> Result<(), TrySendError<T>>
    where
        E: Encoder<T>,
    {
        self.try_push(item, true)
    }

    /// [`Sender::try_send`], with `inline` as in [`Sender::send_hinted`].
    pub(crate) fn try_push<T>(&self, item: T, inline: bool) -> Result<(), TrySendError<T>>
    where
        E: Encoder<T>,
    {
        self.lock().try_push(item, inline)
    }

    /// Queues every item of `items` in order, taking the queue's lock once
    /// per run of items that fit rather than once per item, and waiting
    /// whenever the queue is full. Returns how many were queued.
    ///
    /// # Errors
    ///
    /// As [`Sender::send`]; items before the failing one stay queued.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave a prefix of `items` queued.
    pub async fn send_all<T, I>(&self, items: I) -> Result<usize, Error>
    where
        E: Encoder<T>,
        I: IntoIterator<Item = T>,
    {
        let mut items = items.into_iter().peekable();
        let mut sent = 0;
        loop {
            sent += self.try_send_iter(&mut items)?;
            if items.peek().is_none() {
                return Ok(sent);
            }
            self.ready().await?;
        }
    }

    /// Queues items from `items` under one lock until the iterator ends or
    /// the queue is full, and returns how many were queued. It never takes
    /// an item from the iterator that it cannot queue, so with a
    /// [`Batch`](super::Batch) the messages left unsent stay buffered.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Closed`](super::ErrorKind::Closed), or [`ErrorKind::Encode`](super::ErrorKind::Encode) for an item the codec
    /// rejects (that item is consumed; those before it stay queued).
    pub fn try_send_iter<T, I>(&self, items: &mut I) -> Result<usize, Error>
    where
        E: Encoder<T>,
        I: Iterator<Item = T>,
    {
        let mut locked = self.lock();
        let (shared, st) = locked.parts();
        if st.refuses() {
            return Err(Error::closed());
        }
        let start = st.queue.len();
        let mut n = 0;
        let mut failed = None;
        while st.queue.len() < shared.max_queued {
            let Some(item) = items.next() else { break };
            let mark = st.queue.mark();
            let State { queue, encoder, .. } = &mut *st;
            if let Err(e) = encoder.encode(item, queue) {
                st.queue.rollback(mark);
                failed = Some(Error::encode(e));
                break;
            }
            n += 1;
        }
        if st.queue.len() >= shared.max_queued {
            st.waiters = true;
        }
        let end = st.queue.len();
        let then = shared.pushed(st, start, end, true);
        locked.after(then);
        drop(locked);
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Waits until the queue has room for at least one more message.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Closed`](super::ErrorKind::Closed) if the connection closes.
    pub async fn ready(&self) -> Result<(), Error> {
        let shared = &*self.shared;
        loop {
            let progress = shared.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            {
                let mut st = shared.state.lock();
                if st.refuses() {
                    return Err(Error::closed());
                }
                if st.queue.len() < shared.max_queued {
                    return Ok(());
                }
                st.waiters = true;
            }
            progress.await;
        }
    }

    /// Waits until everything queued before this call has been written to
    /// the transport. Under [`FlushPolicy::Explicit`] this is what triggers
    /// the write.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Closed`](super::ErrorKind::Closed) if the connection closes before that.
    pub async fn flush(&self) -> Result<(), Error> {
        let shared = &*self.shared;
        let target = {
            let mut st = shared.state.lock();
            if st.refuses() {
                return Err(Error::closed());
            }
            st.flush_requested = true;
            st.writer_idle = false;
            st.queued_total
        };
        shared.wake_writer.notify_one();
        loop {
            let progress = shared.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            {
                let mut st = shared.state.lock();
                if shared.written.load(Ordering::Acquire) >= target {
                    return Ok(());
                }
                if st.refuses() {
                    return Err(Error::closed());
                }
                st.waiters = true;
            }
            progress.await;
        }
    }

    /// Holds writes back until the guard drops: messages queued meanwhile,
    /// by this task or any other, go out together in one write when the
    /// last guard is dropped. For a task that produces many messages in a
    /// burst (answering every request of one read, say), so that the burst
    /// costs one system call instead of one per message. Only
    /// [`FlushPolicy::Immediate`] writes early, so only it is affected;
    /// a queue at its byte bound is written regardless.
    pub fn cork(&self) -> Cork<'_, E> {
        self.hold();
        Cork { sender: self }
    }

    /// [`Sender::cork`] without a guard, for a task whose borrows of its
    /// own state a guard would tie up (a connection's driver, which would
    /// otherwise clone its sender every turn: two reference counts up and
    /// down on lines a sleeping worker no longer has in cache). Every call
    /// must be matched by one of [`Sender::release`].
    pub(crate) fn hold(&self) {
        self.shared.state.lock().corked += 1;
    }

    /// Ends a [`Sender::hold`]: when it was the last, what was queued
    /// meanwhile is written.
    pub(crate) fn release(&self) {
        let mut locked = self.lock();
        let (shared, st) = locked.parts();
        st.corked -= 1;
        let then = if st.corked == 0 && shared.policy == FlushPolicy::Immediate && shared.inline {
            shared.take_for_inline(st)
        } else if st.corked == 0
            && shared.policy == FlushPolicy::Immediate
            && !st.queue.is_empty()
            && std::mem::replace(&mut st.writer_idle, false)
        {
            AfterPush::WakeWriter
        } else {
            AfterPush::Nothing
        };
        locked.after(then);
    }

    /// Runs `f` on the encoder, under the queue lock (for state the encoder
    /// keeps, such as limits learned from the peer).
    pub(crate) fn with_encoder<R>(&self, f: impl FnOnce(&mut E) -> R) -> R {
        f(&mut self.shared.state.lock().encoder)
    }

    /// Queues `item` even past the byte bound: for small control frames
    /// (cancel, end, credit) that must not wait behind the data they govern.
    pub(crate) fn force_send<T>(&self, item: T) -> Result<(), Error>
    where
        E: Encoder<T>,
    {
        self.lock().force_send(item)
    }

    /// Bytes queued and not yet taken by a writer.
    pub fn queued_bytes(&self) -> usize {
        self.shared.state.lock().queue.len()
    }

    /// Bytes written to the transport so far.
    pub fn bytes_written(&self) -> u64 {
        self.shared.written.load(Ordering::Acquire)
    }

    /// Whether the connection can no longer send (it failed, or
    /// [`Sender::close`] was called).
    pub fn is_closed(&self) -> bool {
        self.shared.state.lock().refuses()
    }

    /// Stops sending, for every clone of this sender: what is queued is
    /// still written, then the transport's write side is shut down (a TCP
    /// FIN), as when the last sender is dropped. Later sends fail with
    /// [`ErrorKind::Closed`](super::ErrorKind::Closed).
    pub fn close(&self) {
        self.lock().close();
    }

    /// Holds the queue's lock until the guard drops, for several steps
    /// under it (see [`Locked`]).
    pub(crate) fn lock(&self) -> Locked<'_, E> {
        Locked::new(self)
    }
}

/// Holds a [`Sender`]'s writes back while alive; see [`Sender::cork`].
#[must_use = "writes are held back only while the guard lives"]
pub struct Cork<'a, E> {
    sender: &'a Sender<E>,
}

impl<E> Drop for Cork<'_, E> {
    fn drop(&mut self) {
        self.sender.release();
    }
}

impl<E> std::fmt::Debug for Cork<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cork").finish_non_exhaustive()
    }
}

impl<E> Sender<E> {
    /// A handle that sends like this one but does not keep the connection
    /// open: when the counted senders are gone, the writer drains and shuts
    /// down regardless, and sends through this handle fail. For handles
    /// made per call (a handler's way back to its connection), which then
    /// cost one reference count rather than two.
    pub(crate) fn uncounted(&self) -> Sender<E> {
        Sender {
            shared: self.shared.clone(),
            counted: false,
        }
    }
}

impl<E> Clone for Sender<E> {
    fn clone(&self) -> Self {
        if self.counted {
            self.shared.senders.fetch_add(1, Ordering::Relaxed);
        }
        Sender {
            shared: self.shared.clone(),
            counted: self.counted,
        }
    }
}

impl<E> Drop for Sender<E> {
    fn drop(&mut self) {
        if self.counted && self.shared.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last sender: let the writer drain and shut down.
            self.shared.wake_writer.notify_one();
        }
    }
}

impl<E> std::fmt::Debug for Sender<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("queued_bytes", &self.queued_bytes())
            .finish_non_exhaustive()
    }
}
