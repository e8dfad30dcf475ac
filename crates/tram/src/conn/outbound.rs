//! The sending half: a byte-bounded queue encoded in place, and the writer
//! task that drains it.
//!
//! Senders encode straight into one shared [`BytesMut`] under a short lock
//! (no allocation or queue node per message). The writer swaps that buffer
//! for its empty one and writes everything in one `write` call, so all that
//! was queued while it was busy goes out together. Two buffers ping-pong and
//! keep their capacity; the queue is bounded in bytes, and a sender that
//! finds it full waits (or gets [`TrySendError::Full`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use super::codec::Encoder;
use super::error::{Error, ErrorKind, TrySendError};

/// When queued bytes are written to the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FlushPolicy {
    /// As soon as the writer is free. Messages queued while it is busy are
    /// batched into its next write: batching without added latency.
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
/// When every clone is dropped, the writer sends what is queued and then
/// shuts down the transport's write side (a TCP FIN).
pub struct Sender<E> {
    shared: Arc<Shared<E>>,
}

pub(crate) struct Shared<E> {
    state: Mutex<State<E>>,
    /// Wakes the writer.
    wake_writer: Notify,
    /// Wakes senders waiting for queue space, and flushers.
    progress: Notify,
    /// Total bytes handed to the transport.
    written: AtomicU64,
    senders: AtomicUsize,
    policy: FlushPolicy,
    max_queued: usize,
}

struct State<E> {
    queue: BytesMut,
    encoder: E,
    /// Total bytes ever queued (written + queue.len() + in the writer).
    queued_total: u64,
    /// The writer is parked waiting for bytes or a flush.
    writer_idle: bool,
    /// A flush was requested and not yet served.
    flush_requested: bool,
    /// Someone waits on `progress`.
    waiters: bool,
    /// The writer failed or stopped: nothing more is sent.
    closed: Option<ErrorKind>,
}

impl<E> Sender<E> {
    /// Queues `item`, waiting while the queue is at its byte limit.
    ///
    /// Returns once the message is encoded into the queue, not when it is
    /// written: use [`Sender::flush`] for that.
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
        let mut item = item;
        loop {
            let progress = self.shared.progress.notified();
            match self.try_send(item) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(back)) => item = back,
                Err(TrySendError::Closed(_)) => return Err(Error::closed()),
                Err(TrySendError::Encode(e)) => return Err(e),
            }
            progress.await;
        }
    }

    /// Queues `item` if the queue is below its byte limit.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] or [`TrySendError::Closed`] with the item
    /// handed back, or [`TrySendError::Encode`].
    pub fn try_send<T>(&self, item: T) -> Result<(), TrySendError<T>>
    where
        E: Encoder<T>,
    {
        let shared = &*self.shared;
        let mut st = shared.state.lock();
        if st.closed.is_some() {
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
        st.queued_total += (after - before) as u64;
        let wake = st.writer_idle
            && match shared.policy {
                // Wake on the first byte; the writer batches the rest.
                FlushPolicy::Immediate | FlushPolicy::Linger { .. } => true,
                FlushPolicy::Explicit => after >= shared.max_queued,
            };
        if wake {
            st.writer_idle = false;
        }
        drop(st);
        if wake {
            shared.wake_writer.notify_one();
        } else if let FlushPolicy::Linger { max_bytes, .. } = shared.policy {
            if before < max_bytes && after >= max_bytes {
                // Cut the linger short: the train is full.
                shared.wake_writer.notify_one();
            }
        }
        Ok(())
    }

    /// Waits until everything queued before this call has been written to
    /// the transport. Under [`FlushPolicy::Explicit`] this is what triggers
    /// the write.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Closed`] if the writer stops before that.
    pub async fn flush(&self) -> Result<(), Error> {
        let shared = &*self.shared;
        let target = {
            let mut st = shared.state.lock();
            if st.closed.is_some() {
                return Err(Error::closed());
            }
            st.flush_requested = true;
            st.writer_idle = false;
            st.queued_total
        };
        shared.wake_writer.notify_one();
        loop {
            let progress = shared.progress.notified();
            {
                let mut st = shared.state.lock();
                if shared.written.load(Ordering::Acquire) >= target {
                    return Ok(());
                }
                if st.closed.is_some() {
                    return Err(Error::closed());
                }
                st.waiters = true;
            }
            progress.await;
        }
    }

    /// Bytes queued and not yet handed to the writer.
    pub fn queued_bytes(&self) -> usize {
        self.shared.state.lock().queue.len()
    }

    /// Whether the connection can no longer send.
    pub fn is_closed(&self) -> bool {
        self.shared.state.lock().closed.is_some()
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

/// Creates the shared queue: the sender handle and the writer future that
/// drives `io`.
pub(crate) fn channel<E, W>(
    encoder: E,
    io: W,
    policy: FlushPolicy,
    max_queued: usize,
    buffer: usize,
) -> (
    Sender<E>,
    impl Future<Output = Result<(), Error>> + Send + 'static,
)
where
    E: Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: BytesMut::with_capacity(buffer),
            encoder,
            queued_total: 0,
            writer_idle: true,
            flush_requested: false,
            waiters: false,
            closed: None,
        }),
        wake_writer: Notify::new(),
        progress: Notify::new(),
        written: AtomicU64::new(0),
        senders: AtomicUsize::new(1),
        policy,
        max_queued: max_queued.max(1),
    });
    let writer = write_loop(shared.clone(), io, buffer);
    (Sender { shared }, writer)
}

async fn write_loop<E, W>(shared: Arc<Shared<E>>, mut io: W, buffer: usize) -> Result<(), Error>
where
    W: AsyncWrite + Unpin,
{
    let mut out = BytesMut::with_capacity(buffer);
    let result: Result<(), Error> = async {
        loop {
            match take_batch(&shared, &mut out).await {
                Batch::Write => {
                    io.write_all(&out).await?;
                    shared
                        .written
                        .fetch_add(out.len() as u64, Ordering::Release);
                    out.clear();
                    wake_waiters(&shared);
                }
                Batch::Done => {
                    io.shutdown().await?;
                    return Ok(());
                }
            }
        }
    }
    .await;
    let kind = match &result {
        Ok(()) => ErrorKind::Closed,
        Err(e) => e.kind(),
    };
    shared.state.lock().closed = Some(kind);
    shared.progress.notify_waiters();
    result
}

enum Batch {
    Write,
    Done,
}

/// Waits until the policy says to write, then swaps the queue into `out`.
async fn take_batch<E>(shared: &Shared<E>, out: &mut BytesMut) -> Batch {
    loop {
        let ready = {
            let mut st = shared.state.lock();
            let force = st.flush_requested
                || st.queue.len() >= shared.max_queued
                // The last sender is gone: send what is left, whatever the policy.
                || shared.senders.load(Ordering::Acquire) == 0;
            let go = !st.queue.is_empty() && (force || shared.policy != FlushPolicy::Explicit);
            if go {
                if let FlushPolicy::Linger { max_bytes, .. } = shared.policy {
                    if !force && st.queue.len() < max_bytes {
                        Some(false)
                    } else {
                        Some(true)
                    }
                } else {
                    Some(true)
                }
            } else {
                if st.queue.is_empty() {
                    st.flush_requested = false;
                    if st.waiters {
                        // A flush may be waiting on bytes already written.
                        drop(st);
                        wake_waiters(shared);
                        st = shared.state.lock();
                    }
                }
                if st.queue.is_empty() && shared.senders.load(Ordering::Acquire) == 0 {
                    return Batch::Done;
                }
                st.writer_idle = true;
                None
            }
        };
        match ready {
            Some(true) => {
                let mut st = shared.state.lock();
                std::mem::swap(&mut st.queue, out);
                st.flush_requested = false;
                st.writer_idle = false;
                return Batch::Write;
            }
            Some(false) => {
                // Linger: wait for the delay, a full train or a flush.
                let FlushPolicy::Linger { max_delay, .. } = shared.policy else {
                    unreachable!("only Linger lingers")
                };
                let _ = tokio::time::timeout(max_delay, shared.wake_writer.notified()).await;
                let mut st = shared.state.lock();
                std::mem::swap(&mut st.queue, out);
                st.flush_requested = false;
                st.writer_idle = false;
                if out.is_empty() {
                    continue;
                }
                return Batch::Write;
            }
            None => shared.wake_writer.notified().await,
        }
    }
}

fn wake_waiters<E>(shared: &Shared<E>) {
    let mut st = shared.state.lock();
    if st.waiters {
        st.waiters = false;
        drop(st);
        shared.progress.notify_waiters();
    }
}
