//! `floor-tasks` in `compare` and `instructions`: the least an RPC client
//! can be on a multi-threaded runtime, against the echo floor's server.
//! Each call is a step of its caller's own task: it takes a slot in a
//! shared table, puts its frame in one shared buffer, and waits on a
//! oneshot channel; one writer task writes whatever the buffer holds when
//! woken, one reader task reads the echoes and completes their slots. No
//! codec, status, deadline, flow control or cancellation: what a task per
//! call and its hand-offs between tasks cost, next to tram's client doing
//! the same with all of an RPC system's work besides. Least, not best: on
//! a one-worker runtime each caller's wake-up puts the writer in the
//! worker's LIFO slot, so it writes about one call at a time.
//!
//! A frame is a 4-byte big-endian length, the slot's key (4 bytes), the
//! caller's id (8 bytes), then the payload; the server echoes it whole.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use slab::Slab;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, oneshot};
use tokio::task::AbortHandle;

use super::Echo;

/// Key and id after the length prefix.
const HEADER: usize = 4 + 8;

/// A connected client; each caller clones its own handle.
#[derive(Clone)]
pub(crate) struct TaskClient(Arc<Inner>);

struct Inner {
    outbox: Arc<Outbox>,
    waiting: Arc<Mutex<Waiting>>,
    tasks: [AbortHandle; 2],
}

/// The calls waiting for their echoes, by slot key.
#[derive(Default)]
struct Waiting {
    calls: Slab<oneshot::Sender<u64>>,
    /// The reader has stopped: a call now would wait forever.
    closed: bool,
}

/// The frames queued for the writer task.
struct Outbox {
    frames: Mutex<BytesMut>,
    wake: Notify,
}

impl TaskClient {
    /// Connects to the echo floor at `addr` and starts its two tasks.
    pub(crate) async fn connect(addr: SocketAddr) -> anyhow::Result<TaskClient> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (rd, wr) = stream.into_split();
        let outbox = Arc::new(Outbox {
            frames: Mutex::new(BytesMut::with_capacity(64 * 1024)),
            wake: Notify::new(),
        });
        let waiting = Arc::new(Mutex::new(Waiting::default()));
        let writer = tokio::spawn(write_loop(wr, outbox.clone()));
        let reader = tokio::spawn(read_loop(rd, waiting.clone()));
        Ok(TaskClient(Arc::new(Inner {
            outbox,
            waiting,
            tasks: [writer.abort_handle(), reader.abort_handle()],
        })))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.tasks.iter().for_each(AbortHandle::abort);
    }
}

impl Echo for TaskClient {
    async fn echo(&mut self, id: u64, payload: Bytes) -> anyhow::Result<u64> {
        let (tx, rx) = oneshot::channel();
        let key = {
            let mut waiting = self.0.waiting.lock();
            anyhow::ensure!(!waiting.closed, "floor-tasks: the connection is closed");
            u32::try_from(waiting.calls.insert(tx))?
        };
        let outbox = &self.0.outbox;
        let idle = {
            let mut frames = outbox.frames.lock();
            // A buffer with frames in it has woken the writer already.
            let idle = frames.is_empty();
            frames.put_u32((HEADER + payload.len()) as u32);
            frames.put_u32(key);
            frames.put_u64(id);
            frames.put_slice(&payload);
            idle
        };
        if idle {
            outbox.wake.notify_one();
        }
        Ok(rx.await?)
    }
}

/// Writes what the outbox holds each time it is woken, swapping buffers so
/// that callers queue into one while the other is written.
async fn write_loop(mut wr: tokio::net::tcp::OwnedWriteHalf, outbox: Arc<Outbox>) {
    let mut batch = BytesMut::with_capacity(64 * 1024);
    loop {
        outbox.wake.notified().await;
        std::mem::swap(&mut *outbox.frames.lock(), &mut batch);
        if batch.is_empty() {
            continue;
        }
        if wr.write_all(&batch).await.is_err() {
            return;
        }
        batch.clear();
    }
}

/// Reads echoes and completes each one's slot; when the connection ends,
/// every call still waiting fails.
async fn read_loop(rd: tokio::net::tcp::OwnedReadHalf, waiting: Arc<Mutex<Waiting>>) {
    read_echoes(rd, &waiting).await;
    let mut waiting = waiting.lock();
    waiting.closed = true;
    waiting.calls.clear();
}

/// The reader's loop; the senders are taken under the table's lock and
/// completed after it is released.
async fn read_echoes(mut rd: tokio::net::tcp::OwnedReadHalf, waiting: &Mutex<Waiting>) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut answers = Vec::with_capacity(256);
    while matches!(rd.read_buf(&mut buf).await, Ok(n) if n > 0) {
        let mut table = waiting.lock();
        while let Some(len) = super::floor::whole_frame(&buf) {
            if len < 4 + HEADER {
                // Not a frame of ours: the echo is broken.
                return;
            }
            let mut frame = &buf[4..4 + HEADER];
            let key = frame.get_u32() as usize;
            let id = frame.get_u64();
            buf.advance(len);
            if let Some(tx) = table.calls.try_remove(key) {
                answers.push((tx, id));
            }
        }
        drop(table);
        for (tx, id) in answers.drain(..) {
            let _ = tx.send(id);
        }
        buf.reserve(64 * 1024);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::TcpListener;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_caller_gets_its_own_answer_over_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(super::super::floor::serve_echo(listener));
        let client = TaskClient::connect(addr).await.unwrap();
        let callers: Vec<_> = (0..64u64)
            .map(|c| {
                let mut client = client.clone();
                tokio::spawn(async move {
                    for k in 0..100 {
                        let id = c * 1_000 + k;
                        let payload = Bytes::from(vec![c as u8; 1 + (k as usize % 40)]);
                        assert_eq!(client.echo(id, payload).await.unwrap(), id);
                    }
                })
            })
            .collect();
        for caller in callers {
            tokio::time::timeout(Duration::from_secs(30), caller)
                .await
                .expect("callers finish")
                .unwrap();
        }
        assert!(
            client.0.waiting.lock().calls.is_empty(),
            "every slot was freed"
        );
    }

    #[tokio::test]
    async fn a_call_fails_when_the_server_goes_away() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            // Accepts, reads the first call, and closes without answering.
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await.unwrap();
        });
        let mut client = TaskClient::connect(addr).await.unwrap();
        let call = client.echo(7, Bytes::from_static(b"x"));
        let result = tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect("the call ends");
        assert!(result.is_err(), "no answer, so an error: {result:?}");
        server.await.unwrap();
        // Once the reader has seen the end, a new call fails at once.
        let late = tokio::time::timeout(
            Duration::from_secs(30),
            client.echo(8, Bytes::from_static(b"y")),
        )
        .await
        .expect("a call on a closed connection ends");
        assert!(late.is_err(), "closed, so an error: {late:?}");
    }
}
