//! Writing the queue: inline by the sender that found nobody writing (a
//! non-blocking write on its own time), or by the connection's writer task,
//! which waits for the socket and for work the flush policy says is due.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use super::state::{Pipe, Shared, State, Wait, WriteDue};
use super::{FlushPolicy, Sender};
use crate::conn::error::{Error, ErrorKind};
use crate::conn::writebuf::WriteBuf;

impl<E> Shared<E> {
    /// Writes what `pipe` holds without blocking, on the sender's own time,
    /// then once more for what was queued meanwhile. Whatever is left (the
    /// socket would block, or senders keep queueing) goes to the writer
    /// task with the pipe.
    pub(super) fn write_inline(&self, mut pipe: Box<Pipe>) {
        let mut cx = Context::from_waker(Waker::noop());
        for round in 0.. {
            let mut wrote = 0;
            let mut failed = None;
            while !pipe.out.is_empty() {
                match pipe.poll_write_some(&mut cx) {
                    Poll::Ready(Ok(0)) => {
                        failed = Some(ErrorKind::Io);
                        break;
                    }
                    Poll::Ready(Ok(n)) => {
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
            if pipe.out.is_empty() && round == 0 && matches!(self.due(&st), WriteDue::Now) {
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
}

/// Creates the shared queue over `io`: the sender handle and the writer
/// task's future.
pub(crate) fn channel<E, W>(
    encoder: E,
    io: W,
    config: crate::conn::Config,
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
            queue: WriteBuf::with_capacity(buffer),
            encoder,
            queued_total: 0,
            pipe: Some(Box::new(Pipe {
                io: Box::new(io),
                out: WriteBuf::with_capacity(buffer),
            })),
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
    (
        Sender {
            shared,
            counted: true,
        },
        writer,
    )
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
        while !pipe.out.is_empty() {
            let wrote = std::future::poll_fn(|cx| pipe.poll_write_some(cx)).await?;
            if wrote == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
            }
        }
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
async fn next_batch<E>(shared: &Shared<E>) -> Option<Box<Pipe>> {
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
                if !leftover && !yielded && matches!(due, WriteDue::Now) {
                    // Stay marked busy: senders meanwhile only queue.
                    st.writer_idle = false;
                    Wait::Yield
                } else if leftover || matches!(due, WriteDue::Now) {
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
                Wait::For(WriteDue::Never)
            }
        };
        match wait {
            Wait::Yield => {
                yielded = true;
                let_others_run().await;
            }
            Wait::For(WriteDue::At(t)) => {
                let _ = tokio::time::timeout_at(t, notified).await;
            }
            Wait::For(_) => notified.await,
        }
    }
}

/// Lets the tasks runnable now run before this one goes on.
///
/// A task that wakes itself while it is polled goes to the back of its
/// worker's run queue, on either kind of runtime, which is all that is
/// wanted. `yield_now` would instead hold the wake-up until the worker
/// next polls its I/O driver: on a current-thread runtime that is an
/// `epoll_wait` per batch, and on a multi-thread one the writer, woken
/// just after the driver, lands in the worker's LIFO slot and pushes out
/// whatever the driver woke there, most often the connection's reader,
/// to the back of the queue. Behind a backlog of thousands of tasks the
/// reader then waits milliseconds to read the answers that would drain
/// it.
async fn let_others_run() {
    let mut woken = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut woken, true) {
            return std::task::Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}
