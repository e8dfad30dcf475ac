//! Counts heap allocations per unary call, client and server together, over
//! real loopback TCP, for a `unary` handler and a `unary_sync` one. Prints
//! the figures; asserts a generous ceiling, so that a regression to "a
//! dozen allocations per call" cannot slip in, and that a `unary_sync`
//! call allocates at least one less (it has no future to box).
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tram::conn::{Listener, TcpConfig};
use tram::rpc::{Channel, Request, Response, Server};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static SIZES: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

fn record(size: usize) {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    // Buckets by powers of 8: <8, <64, <512, <4K, <32K, <256K, ...
    let bucket = ((usize::BITS - size.leading_zeros()) as usize / 3).min(7);
    SIZES[bucket].fetch_add(1, Ordering::Relaxed);
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

#[derive(Clone, PartialEq, prost::Message)]
struct Echo {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    payload: Bytes,
}

#[tokio::test(flavor = "current_thread")]
async fn allocations_per_unary_call() {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .unary("/test.Echo/Say", |req: Request<Echo>| async move {
            Ok(Response::new(req.into_inner()))
        })
        .unary_sync("/test.Echo/SaySync", |req: Request<Echo>| {
            Ok(Response::new(req.into_inner()))
        })
        .build();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    let ch = Channel::new(addr.to_string());
    let payload = Bytes::from_static(b"0123456789abcdef");
    let call = |path: &'static str, id| {
        ch.unary::<_, Echo>(
            path,
            Request::new(Echo {
                id,
                payload: payload.clone(),
            }),
        )
    };
    println!(
        "unary call future: {} bytes",
        std::mem::size_of_val(&call("/test.Echo/Say", 0))
    );
    let mut per_call = Vec::new();
    for path in ["/test.Echo/Say", "/test.Echo/SaySync"] {
        for id in 0..1000 {
            call(path, id).await.unwrap();
        }
        const N: u64 = 1000;
        let before = ALLOCS.load(Ordering::Relaxed);
        let sizes_before: Vec<u64> = SIZES.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        for id in 0..N {
            let r = call(path, id).await.unwrap();
            assert_eq!(r.get_ref().id, id);
        }
        let n = (ALLOCS.load(Ordering::Relaxed) - before) as f64 / N as f64;
        println!("allocations per unary call to {path} (client + server): {n:.2}");
        for (i, (a, b)) in SIZES.iter().zip(sizes_before).enumerate() {
            let n = a.load(Ordering::Relaxed) - b;
            if n > 0 {
                println!("  {n} allocations of < {} bytes", 1usize << (3 * (i + 1)));
            }
        }
        assert!(n < 8.0, "{n} allocations per call to {path}");
        per_call.push(n);
    }
    // A `unary_sync` handler has no future to box.
    assert!(
        per_call[1] <= per_call[0] - 0.9,
        "unary_sync: {} allocations per call, unary: {}",
        per_call[1],
        per_call[0]
    );
}
