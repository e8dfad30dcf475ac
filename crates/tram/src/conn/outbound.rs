//! The sending half: a byte-bounded queue encoded in place, written by
//! whoever is free to write.
//!
//! Senders encode straight into one shared [`BytesMut`] under a short lock
//! (no allocation or queue node per message). The transport's write half
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

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::codec::Encoder;
use super::error::{Error, ErrorKind, TrySendError};

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
}

type Io = Box<dyn AsyncWrite + Send + Unpin>;

/// The write half and the batch in flight: whoever holds it is the writer.
struct Pipe {
    io: Io,
    /// Bytes taken from the queue and not yet written.
    out: BytesMut,
}

pub(crate) struct Shared<E> {
    state: Mutex<State<E>>,
    /// Wakes the writer task.
    wake_writer: Notify,
    /// Wakes senders waiting for queue space, and flushers.
    progress: Notify,
    /// Total bytes handed to the transport.
    written: AtomicU64,
    senders: AtomicUsize,
    policy: FlushPolicy,
    /// Senders may write inline (Immediate only).
    inline: bool,
    max_queued: usize,
}

struct State<E> {
    queue: BytesMut,
    encoder: E,
    /// Total bytes ever queued.
    queued_total: u64,
    /// The pipe, while nobody is writing.
    pipe: Option<Pipe>,
    /// The writer task is parked and must be woken to do anything.
    writer_idle: bool,
    /// When the oldest queued byte was queued (for Linger).
    oldest: Option<Instant>,
    /// A flush was requested and not yet served.
    flush_requested: bool,
    /// Someone waits on `progress`.
    waiters: bool,
    /// The connection can no longer send.
    closed: Option<ErrorKind>,
    /// [`Sender::close`] was called: nothing more is queued; the writer
    /// writes what is and then shuts the write side down.
    closing: bool,
    /// Live [`Cork`] guards: while any, senders only queue.
    corked: usize,
}

impl<E> State<E> {
    /// Whether senders are turned away: closed, or closing.
    fn refuses(&self) -> bool {
        self.closed.is_some() || self.closing
    }
}

/// What a sender does after queueing, once the lock is released.
enum Then {
    Nothing,
    WakeWriter,
    WriteInline(Pipe),
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
    /// [`ErrorKind::Encode`] if the codec rejects the message,
    /// [`ErrorKind::Closed`] if the connection is closed.
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
        let shared = &*self.shared;
        let mut st = shared.state.lock();
        if st.refuses() {
            return Err(TrySendError::Closed(item));
        }
        if st.queue.len() >= shared.max_queued {
            st.waiters = true;
            return Err(TrySendError::Full(item));
        }
        let before = st.queue.len();
        let State { queue, encoder, .. } = &mut *st;
        if let Err(e) = encoder.encode(item, queue) {
            st.queue.truncate(before);
            return Err(TrySendError::Encode(Error::encode(e)));
        }
        let after = st.queue.len();
        let then = shared.pushed(&mut st, before, after, inline);
        drop(st);
        self.then(then);
        Ok(())
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
    /// [`ErrorKind::Closed`], or [`ErrorKind::Encode`] for an item the codec
    /// rejects (that item is consumed; those before it stay queued).
    pub fn try_send_iter<T, I>(&self, items: &mut I) -> Result<usize, Error>
    where
        E: Encoder<T>,
        I: Iterator<Item = T>,
    {
        let shared = &*self.shared;
        let mut st = shared.state.lock();
        if st.refuses() {
            return Err(Error::closed());
        }
        let start = st.queue.len();
        let mut n = 0;
        let mut failed = None;
        while st.queue.len() < shared.max_queued {
            let Some(item) = items.next() else { break };
            let before = st.queue.len();
            let State { queue, encoder, .. } = &mut *st;
            if let Err(e) = encoder.encode(item, queue) {
                st.queue.truncate(before);
                failed = Some(Error::encode(e));
                break;
            }
            n += 1;
        }
        if st.queue.len() >= shared.max_queued {
            st.waiters = true;
        }
        let end = st.queue.len();
        let then = shared.pushed(&mut st, start, end, true);
        drop(st);
        self.then(then);
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Waits until the queue has room for at least one more message.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Closed`] if the connection closes.
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
    /// [`ErrorKind::Closed`] if the connection closes before that.
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
        self.shared.state.lock().corked += 1;
        Cork { sender: self }
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
        let shared = &*self.shared;
        let mut st = shared.state.lock();
        if st.refuses() {
            return Err(Error::closed());
        }
        let before = st.queue.len();
        let State { queue, encoder, .. } = &mut *st;
        if let Err(e) = encoder.encode(item, queue) {
            st.queue.truncate(before);
            return Err(Error::encode(e));
        }
        let after = st.queue.len();
        let then = shared.pushed(&mut st, before, after, true);
        drop(st);
        self.then(then);
        Ok(())
    }

    /// Bytes queued and not yet taken by a writer.
    pub fn queued_bytes(&self) -> usize {
        self.shared.state.lock().queue.len()
    }

    /// Whether the connection can no longer send (it failed, or
    /// [`Sender::close`] was called).
    pub fn is_closed(&self) -> bool {
        self.shared.state.lock().refuses()
    }

    /// Stops sending, for every clone of this sender: what is queued is
    /// still written, then the transport's write side is shut down (a TCP
    /// FIN), as when the last sender is dropped. Later sends fail with
    /// [`ErrorKind::Closed`].
    pub fn close(&self) {
        let mut st = self.shared.state.lock();
        if st.refuses() {
            return;
        }
        st.closing = true;
        // A parked writer must wake to finish up; a busy one (or an inline
        // writer, which hands the pipe back to it) sees the flag next.
        let wake = std::mem::replace(&mut st.writer_idle, false);
        drop(st);
        if wake {
            self.shared.wake_writer.notify_one();
        }
    }

    fn then(&self, then: Then) {
        match then {
            Then::Nothing => {}
            Then::WakeWriter => self.shared.wake_writer.notify_one(),
            Then::WriteInline(pipe) => self.shared.write_inline(pipe),
        }
    }
}

/// Holds a [`Sender`]'s writes back while alive; see [`Sender::cork`].
#[must_use = "writes are held back only while the guard lives"]
pub struct Cork<'a, E> {
    sender: &'a Sender<E>,
}

impl<E> Drop for Cork<'_, E> {
    fn drop(&mut self) {
        let shared = &*self.sender.shared;
        let mut st = shared.state.lock();
        st.corked -= 1;
        let then = if st.corked == 0 && shared.policy == FlushPolicy::Immediate && shared.inline {
            shared.take_for_inline(&mut st)
        } else if st.corked == 0
            && shared.policy == FlushPolicy::Immediate
            && !st.queue.is_empty()
            && std::mem::replace(&mut st.writer_idle, false)
        {
            Then::WakeWriter
        } else {
            Then::Nothing
        };
        drop(st);
        self.sender.then(then);
    }
}

impl<E> std::fmt::Debug for Cork<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cork").finish_non_exhaustive()
    }
}

impl<E> Clone for Sender<E> {
    fn clone(&self) -> Self {
        self.shared.senders.fetch_add(1, Ordering::Relaxed);
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<E> Drop for Sender<E> {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
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

/// What the writer task waits for before its next look at the queue.
enum Wait {
    /// Let the tasks runnable now queue their messages first.
    Yield,
    For(Due),
}

/// When the writer task should next write.
enum Due {
    Now,
    At(Instant),
    Never,
}

impl<E> Shared<E> {
    /// Accounts for the queue growing from `before` to `after` bytes, under
    /// the lock, and decides who writes it.
    fn pushed(&self, st: &mut State<E>, before: usize, after: usize, inline: bool) -> Then {
        if after == before {
            return Then::Nothing;
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
                    Then::WakeWriter
                } else {
                    Then::Nothing
                }
            }
            FlushPolicy::Immediate if self.inline && inline => self.take_for_inline(st),
            FlushPolicy::Immediate => {
                if std::mem::replace(&mut st.writer_idle, false) {
                    Then::WakeWriter
                } else {
                    Then::Nothing
                }
            }
            FlushPolicy::Linger { max_bytes, .. } => {
                let train_full = before < max_bytes && after >= max_bytes;
                if st.writer_idle && (before == 0 || train_full) {
                    st.writer_idle = false;
                    Then::WakeWriter
                } else if train_full {
                    Then::WakeWriter
                } else {
                    Then::Nothing
                }
            }
            FlushPolicy::Explicit => {
                if st.writer_idle && after >= self.max_queued {
                    st.writer_idle = false;
                    Then::WakeWriter
                } else {
                    Then::Nothing
                }
            }
        }
    }

    /// Under the lock: if nobody is writing and nothing is left over, takes
    /// the pipe with the queue in it, for the caller to write inline.
    /// Otherwise whoever holds the pipe picks the queued bytes up.
    fn take_for_inline(&self, st: &mut State<E>) -> Then {
        if st.queue.is_empty() {
            return Then::Nothing;
        }
        match st.pipe.take_if(|p| p.out.is_empty()) {
            Some(mut pipe) => {
                std::mem::swap(&mut st.queue, &mut pipe.out);
                st.oldest = None;
                Then::WriteInline(pipe)
            }
            None => Then::Nothing,
        }
    }

    /// Writes what `pipe` holds without blocking, on the sender's own time,
    /// then once more for what was queued meanwhile. Whatever is left (the
    /// socket would block, or senders keep queueing) goes to the writer
    /// task with the pipe.
    fn write_inline(&self, mut pipe: Pipe) {
        let mut cx = Context::from_waker(Waker::noop());
        for round in 0.. {
            let mut wrote = 0;
            let mut failed = None;
            while !pipe.out.is_empty() {
                match Pin::new(&mut pipe.io).poll_write(&mut cx, &pipe.out) {
                    Poll::Ready(Ok(0)) => {
                        failed = Some(ErrorKind::Io);
                        break;
                    }
                    Poll::Ready(Ok(n)) => {
                        pipe.out.advance(n);
                        wrote += n;
                    }
                    Poll::Ready(Err(_)) => {
                        failed = Some(ErrorKind::Io);
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            self.written.fetch_add(wrote as u64, Ordering::Release);
            let mut st = self.state.lock();
            if let Some(kind) = failed {
                // The transport is broken: nothing more can be sent. The
                // pipe is dropped (closing the write half); the writer task
                // sees `closed` and stops.
                st.closed = Some(kind);
                drop(st);
                self.wake_writer.notify_one();
                self.progress.notify_waiters();
                return;
            }
            if pipe.out.is_empty() && round == 0 && !st.queue.is_empty() {
                // One more round for what arrived while we wrote.
                std::mem::swap(&mut st.queue, &mut pipe.out);
                st.oldest = None;
                let waiters = std::mem::take(&mut st.waiters);
                drop(st);
                if waiters {
                    self.progress.notify_waiters();
                }
                continue;
            }
            // Hand back: the writer task takes over if work is left.
            let work = !pipe.out.is_empty() || !st.queue.is_empty() || st.closing;
            st.pipe = Some(pipe);
            let wake = work && std::mem::replace(&mut st.writer_idle, false);
            let waiters = std::mem::take(&mut st.waiters);
            drop(st);
            if wake {
                self.wake_writer.notify_one();
            }
            if waiters {
                self.progress.notify_waiters();
            }
            return;
        }
    }

    /// No more will be queued: the last sender is gone or it closed.
    fn finishing(&self, st: &State<E>) -> bool {
        st.closing || self.senders.load(Ordering::Acquire) == 0
    }

    /// When the writer task should write the queue, by policy.
    fn due(&self, st: &State<E>) -> Due {
        if st.queue.is_empty() {
            return Due::Never;
        }
        let force = st.flush_requested
            || st.queue.len() >= self.max_queued
            // The last sender is gone, or the sender closed: send what is
            // left, whatever the policy.
            || self.finishing(st);
        match self.policy {
            _ if force => Due::Now,
            FlushPolicy::Immediate => Due::Now,
            FlushPolicy::Linger {
                max_delay,
                max_bytes,
            } => {
                if st.queue.len() >= max_bytes {
                    Due::Now
                } else {
                    let at = st.oldest.unwrap_or_else(Instant::now) + max_delay;
                    if at <= Instant::now() {
                        Due::Now
                    } else {
                        Due::At(at)
                    }
                }
            }
            FlushPolicy::Explicit => Due::Never,
        }
    }
}

/// Creates the shared queue over `io`: the sender handle and the writer
/// task's future.
pub(crate) fn channel<E, W>(
    encoder: E,
    io: W,
    config: super::Config,
) -> (
    Sender<E>,
    impl Future<Output = Result<(), Error>> + Send + 'static,
)
where
    E: Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (policy, max_queued, buffer) = (config.flush, config.max_queued_bytes, config.buffer_size);
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: BytesMut::with_capacity(buffer),
            encoder,
            queued_total: 0,
            pipe: Some(Pipe {
                io: Box::new(io),
                out: BytesMut::with_capacity(buffer),
            }),
            writer_idle: true,
            oldest: None,
            flush_requested: false,
            waiters: false,
            closed: None,
            closing: false,
            corked: 0,
        }),
        wake_writer: Notify::new(),
        progress: Notify::new(),
        written: AtomicU64::new(0),
        senders: AtomicUsize::new(1),
        policy,
        inline: config.inline_writes,
        max_queued: max_queued.max(1),
    });
    let writer = write_loop(shared.clone());
    (Sender { shared }, writer)
}

/// The writer task: waits for work the policy says is due, takes the pipe,
/// and writes with blocking (async) writes until nothing is due.
async fn write_loop<E>(shared: Arc<Shared<E>>) -> Result<(), Error> {
    let result = write_until_done(&shared).await;
    let kind = match &result {
        Ok(()) => ErrorKind::Closed,
        Err(e) => e.kind(),
    };
    {
        let mut st = shared.state.lock();
        st.closed.get_or_insert(kind);
        // Drop the transport now: the connection is over for sending.
        st.pipe = None;
    }
    shared.progress.notify_waiters();
    result
}

async fn write_until_done<E>(shared: &Shared<E>) -> Result<(), Error> {
    loop {
        let mut pipe = match next_batch(shared).await {
            Some(pipe) => pipe,
            None => return Ok(()),
        };
        if pipe.out.is_empty() {
            // Nothing left and no sender: close the write side.
            pipe.io.shutdown().await?;
            return Ok(());
        }
        let n = pipe.out.len();
        pipe.io.write_all(&pipe.out).await?;
        pipe.out.clear();
        shared.written.fetch_add(n as u64, Ordering::Release);
        let waiters = {
            let mut st = shared.state.lock();
            st.pipe = Some(pipe);
            std::mem::take(&mut st.waiters)
        };
        if waiters {
            shared.progress.notify_waiters();
        }
    }
}

/// Waits until there is something to write and the pipe is free; returns
/// the pipe holding the batch (empty when it is time to shut down), or
/// `None` when the connection closed meanwhile.
async fn next_batch<E>(shared: &Shared<E>) -> Option<Pipe> {
    // Under Immediate, the writer lets the tasks runnable when it woke run
    // first (one yield), so that everything they queue goes in this batch.
    let mut yielded = shared.policy != FlushPolicy::Immediate;
    loop {
        let notified = shared.wake_writer.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let wait = {
            let mut st = shared.state.lock();
            if st.closed.is_some() {
                return None;
            }
            if st.pipe.is_some() {
                let leftover = st.pipe.as_ref().is_some_and(|p| !p.out.is_empty());
                let due = shared.due(&st);
                if !leftover && !yielded && matches!(due, Due::Now) {
                    // Stay marked busy: senders meanwhile only queue.
                    st.writer_idle = false;
                    Wait::Yield
                } else if leftover || matches!(due, Due::Now) {
                    let mut pipe = st.pipe.take()?;
                    if pipe.out.is_empty() {
                        std::mem::swap(&mut st.queue, &mut pipe.out);
                        st.oldest = None;
                        st.flush_requested = false;
                    }
                    st.writer_idle = false;
                    let waiters = std::mem::take(&mut st.waiters);
                    drop(st);
                    if waiters {
                        shared.progress.notify_waiters();
                    }
                    return Some(pipe);
                } else {
                    if st.queue.is_empty() {
                        st.flush_requested = false;
                        if shared.finishing(&st) {
                            // Shut down: hand out the pipe with nothing in it.
                            return st.pipe.take();
                        }
                        if std::mem::take(&mut st.waiters) {
                            // A flush may be waiting on bytes already written.
                            shared.progress.notify_waiters();
                        }
                    }
                    // Idle from here, under the same lock as the check: a
                    // push after it sees the flag and wakes us.
                    st.writer_idle = true;
                    Wait::For(due)
                }
            } else {
                // An inline writer holds the pipe; it wakes us if it leaves
                // work behind.
                st.writer_idle = true;
                Wait::For(Due::Never)
            }
        };
        match wait {
            Wait::Yield => {
                yielded = true;
                tokio::task::yield_now().await;
            }
            Wait::For(Due::At(t)) => {
                let _ = tokio::time::timeout_at(t, notified).await;
            }
            Wait::For(_) => notified.await,
        }
    }
}
