//! Large messages are slices of the read buffer; while some are alive the
//! buffer cannot grow in place. The reader must then reuse an earlier
//! buffer whose messages are gone, not allocate (and fault in) a fresh one
//! read after read. Counts the large allocations of the reading thread over
//! real loopback TCP while it holds the last few 16 KiB messages.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tram::conn::{Config, Connection, LengthDelimited, Listener, TcpConfig, connect};

struct Counting;

/// Allocations of at least 32 KiB made by a thread that counts.
static LARGE: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn record(size: usize) {
    if size >= 32 * 1024 && COUNTING.with(Cell::get) {
        LARGE.fetch_add(1, Ordering::Relaxed);
    }
}

#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MESSAGES: usize = 3000;
const SIZE: usize = 16 * 1024;
/// Messages the reader keeps alive: they span two or three read buffers.
const HELD: usize = 6;

#[test]
fn large_messages_reuse_read_buffers() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(Listener::bind("127.0.0.1:0", TcpConfig::default()))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    // The writer runs on a thread (and runtime) of its own, which does not
    // count.
    let writer = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let stream = connect(addr, &TcpConfig::default()).await.unwrap();
            let connection = Connection::new(stream, LengthDelimited::new(), Config::default());
            let payload = Bytes::from(vec![7u8; SIZE]);
            for _ in 0..MESSAGES {
                connection.send(payload.clone()).await.unwrap();
            }
            connection.sender().flush().await.unwrap();
        });
    });
    let (large, received) = rt.block_on(async {
        let (stream, _) = listener.accept().await.unwrap();
        let mut connection = Connection::new(stream, LengthDelimited::new(), Config::default());
        let mut held = VecDeque::new();
        let mut received = 0;
        while let Some(msg) = connection.recv().await {
            let msg = msg.unwrap();
            assert_eq!(msg.len(), SIZE);
            received += 1;
            // Past the first buffers, the reader should need no new ones.
            if received == 200 {
                COUNTING.with(|c| c.set(true));
            }
            held.push_back(msg);
            if held.len() > HELD {
                held.pop_front();
            }
        }
        COUNTING.with(|c| c.set(false));
        (LARGE.load(Ordering::Relaxed), received)
    });
    writer.join().unwrap();
    assert_eq!(received, MESSAGES);
    println!(
        "large allocations while reading {} messages of 16 KiB: {large}",
        MESSAGES - 200
    );
    // Each read brings about four messages: one fresh buffer per read would
    // be hundreds of allocations.
    assert!(large <= 4, "{large} large allocations");
}
