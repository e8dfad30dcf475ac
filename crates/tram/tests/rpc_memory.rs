//! A server streams 2,000,000 messages to a client that reads slowly; credit
//! flow control must keep memory bounded on both sides. Client and server
//! share this process, so the live heap measured here covers both.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tram::conn::{Listener, TcpConfig};
use tram::rpc::{Channel, Request, Response, Server, Status};

struct Counting;
static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

fn grew(n: i64) {
    let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as i64);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        grew(-(layout.size() as i64));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as i64 - layout.size() as i64);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[derive(Clone, PartialEq, prost::Message)]
struct Item {
    #[prost(uint64, tag = "1")]
    seq: u64,
    #[prost(bytes = "bytes", tag = "2")]
    payload: Bytes,
}

/// Produces `n` items as fast as it is polled: only credit holds it back.
struct Producer {
    next: u64,
    n: u64,
}

impl futures_core::Stream for Producer {
    type Item = Result<Item, Status>;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.next == self.n {
            return Poll::Ready(None);
        }
        self.next += 1;
        Poll::Ready(Some(Ok(Item {
            seq: self.next - 1,
            payload: Bytes::from_static(b"0123456789abcdef"),
        })))
    }
}

const N: u64 = 2_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_of_two_million_messages_keeps_memory_bounded() {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .server_streaming("/test.Feed/All", |_req: Request<Item>| async move {
            Ok(Response::new(Producer { next: 0, n: N }))
        })
        .build();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    let ch = Channel::new(addr.to_string());
    let mut stream = ch
        .server_streaming::<_, Item>("/test.Feed/All", Request::new(Item::default()))
        .await
        .unwrap();
    let baseline = LIVE.load(Ordering::Relaxed);
    PEAK.store(baseline, Ordering::Relaxed);
    let mut expected = 0;
    let read = async {
        while let Some(item) = stream.message().await.unwrap() {
            assert_eq!(item.seq, expected, "in order, none lost");
            expected += 1;
            if expected % 20_000 == 0 {
                // The slow reader: the producer is far faster than this.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), read)
        .await
        .expect("stream finished");
    assert_eq!(expected, N);
    let peak = PEAK.load(Ordering::Relaxed) - baseline;
    println!(
        "{N} streamed messages ({} MB of payload): peak live heap above baseline {:.2} MiB",
        N * 16 / 1_000_000,
        peak as f64 / (1 << 20) as f64
    );
    // Unbounded buffering would hold every frame the reader has not got to:
    // up to 2,000,000 of 22 bytes, 42 MiB. Credit holds it to what the
    // limits allow: the client's window (65,536 frames, 1.4 MB) in the
    // 256 KiB read buffers it arrived in, the process's pool of retired
    // read buffers (at most 32 of 320 KiB; a run like this retires a
    // few), and the server's outbound queue and the batch being written
    // (1 MiB each, in buffers that grow by doubling). Typical runs peak at
    // 5–6 MiB; some retire more buffers to the pool first and reach 8–9
    // MiB.
    assert!(peak < 12 << 20, "peak live heap {peak} bytes");
}
