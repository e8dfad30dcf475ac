//! A server fed garbage on one connection and a 4 GiB frame header on
//! another closes both with a decode error, quickly and without allocating
//! anything near the announced size, while a third, healthy connection goes
//! on being served.
#![allow(clippy::unwrap_used)]

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use support::{Ended, echo_server, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tram::conn::{Config, Connection, ErrorKind, FrameCodec, LengthDelimited, TcpConfig, connect};

struct Counting;
static LARGEST: AtomicUsize = AtomicUsize::new(0);

#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Writes `bytes` and waits for the server to close the connection
/// (EOF or reset); returns how long that took from the write.
async fn send_and_wait_for_close(addr: std::net::SocketAddr, bytes: &[u8]) -> std::time::Duration {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let start = Instant::now();
    s.write_all(bytes).await.unwrap();
    let mut sink = [0u8; 64];
    within(5, "server closes the hostile connection", async {
        loop {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    start.elapsed()
}

async fn hostile_inputs_close_only_their_connection<C>(
    codec: C,
    four_gib_header: &[u8],
    sample: C::Item,
) where
    C: tram::conn::Decoder
        + tram::conn::Encoder<<C as tram::conn::Decoder>::Item>
        + Clone
        + Send
        + Sync
        + Unpin
        + 'static,
    C::Item: Send + Clone + PartialEq + std::fmt::Debug,
{
    let (addr, mut ended) = echo_server(codec.clone(), Config::default()).await;

    // The healthy connection is served before, between and after the attacks.
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let (mut inbound, sender) = Connection::new(stream, codec, Config::default()).into_split();
    let mut echo = async |what: &str| {
        sender.send(sample.clone()).await.unwrap();
        let got = within(5, what, inbound.recv())
            .await
            .expect("healthy stream open")
            .unwrap();
        assert_eq!(got, sample, "{what}");
    };
    echo("healthy echo before").await;

    LARGEST.store(0, Ordering::Relaxed);
    let garbage = send_and_wait_for_close(addr, &[0xff; 64 * 1024]).await;
    echo("healthy echo between").await;
    let big = send_and_wait_for_close(addr, four_gib_header).await;
    let largest = LARGEST.load(Ordering::Relaxed);
    println!(
        "closed after: garbage {garbage:?}, 4 GiB header {big:?}; largest allocation {largest} B"
    );
    echo("healthy echo after").await;

    for _ in 0..2 {
        let end = within(5, "server reports the closed connection", ended.recv()).await;
        assert_eq!(end, Some(Ended::Error(ErrorKind::Decode)));
    }
    assert!(largest < 16 << 20, "largest allocation was {largest} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn length_delimited_server_survives_hostile_peers() {
    // u32 length prefix of 4 GiB - 1.
    hostile_inputs_close_only_their_connection(
        LengthDelimited::new(),
        &[0xff, 0xff, 0xff, 0xff, 0x00],
        Bytes::from_static(b"healthy"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tram_frame_server_survives_hostile_peers() {
    // A MESSAGE frame header announcing a 4 GiB body.
    let mut header = vec![0x30];
    tram::wire::varint::put(&mut header, 4 << 30);
    let sample = tram::wire::Frame::Message(tram::wire::Message {
        call: 1,
        end_stream: false,
        metadata: None,
        payload: Bytes::from_static(b"healthy"),
    });
    hostile_inputs_close_only_their_connection(FrameCodec::default(), &header, sample).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codec_that_never_completes_is_bounded_by_the_connection() {
    // A decoder that always wants more: the connection's own bound stops it.
    #[derive(Clone)]
    struct Greedy;
    impl tram::conn::Decoder for Greedy {
        type Item = Bytes;
        type Error = std::io::Error;
        fn decode(&mut self, _: &mut bytes::BytesMut) -> Result<Option<Bytes>, std::io::Error> {
            Ok(None)
        }
    }
    impl tram::conn::Encoder<Bytes> for Greedy {
        type Error = std::io::Error;
        fn encode(&mut self, _: Bytes, _: &mut tram::conn::WriteBuf) -> Result<(), std::io::Error> {
            Ok(())
        }
    }
    let (addr, mut ended) = echo_server(Greedy, Config::default().max_frame_len(64 * 1024)).await;
    send_and_wait_for_close(addr, &vec![0u8; 256 * 1024]).await;
    let end = within(5, "server reports", ended.recv()).await;
    assert_eq!(end, Some(Ended::Error(ErrorKind::TooLarge)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_closing_mid_message_is_truncated() {
    let (addr, mut ended) = echo_server(LengthDelimited::new(), Config::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0, 0, 0, 10, b'a', b'b']).await.unwrap();
    s.shutdown().await.unwrap();
    let end = within(5, "server reports", ended.recv()).await;
    assert_eq!(end, Some(Ended::Error(ErrorKind::Truncated)));
}
