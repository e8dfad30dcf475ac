//! A tram RPC server against hostile and broken peers, and clients against
//! a stalled network, over real loopback TCP: protocol violations, silent
//! and trickling peers, idle connections, keepalive, crashes, connection
//! limits. Each test also checks that a well-behaved client on another
//! connection is unharmed.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use support::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tram::rpc::{Channel, Code, Keepalive, Request, Response, Server, ServerBuilder};
use tram::wire::{self, Frame, FrameDecoder, Reason, Settings};

#[derive(Clone, PartialEq, prost::Message)]
struct Echo {
    #[prost(uint64, tag = "1")]
    id: u64,
}

const SAY: &str = "/test.Echo/Say";
const SLEEP: &str = "/test.Echo/Sleep";

/// Counts sleeping handlers that were dropped before they finished.
#[derive(Default)]
struct Dropped(AtomicUsize);

fn service(dropped: Arc<Dropped>) -> ServerBuilder {
    Server::builder()
        .unary(SAY, |req: Request<Echo>| async move {
            Ok(Response::new(req.into_inner()))
        })
        .unary(SLEEP, move |req: Request<Echo>| {
            let dropped = dropped.clone();
            async move {
                // Counts itself as dropped unless it runs to the end.
                struct Guard(Arc<Dropped>, bool);
                impl Drop for Guard {
                    fn drop(&mut self) {
                        if !self.1 {
                            self.0.0.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                let mut guard = Guard(dropped, false);
                tokio::time::sleep(Duration::from_millis(req.get_ref().id)).await;
                guard.1 = true;
                Ok(Response::new(req.into_inner()))
            }
        })
}

async fn start(server: Server) -> (SocketAddr, oneshot::Sender<()>) {
    let (addr, stop, _task) = support::serve(server).await;
    (addr, stop)
}

/// A call from a fresh, well-behaved client succeeds.
async fn healthy(addr: SocketAddr) {
    let ch = Channel::new(addr.to_string());
    let r: Response<Echo> = within(
        5,
        "a healthy call",
        ch.unary(SAY, Request::new(Echo { id: 7 })),
    )
    .await
    .unwrap();
    assert_eq!(r.get_ref().id, 7);
}

/// The preface and our SETTINGS, as a client opens.
fn hello() -> BytesMut {
    let mut b = BytesMut::new();
    b.extend_from_slice(&wire::preface::PREFACE);
    Frame::Settings(Settings::DEFAULT).encode(&mut b);
    b
}

fn frames(fs: &[Frame]) -> BytesMut {
    let mut b = hello();
    for f in fs {
        f.encode(&mut b);
    }
    b
}

/// Reads until the server closes; returns the frames it sent after its
/// preface (an abrupt reset ends the read like a close).
async fn until_closed(s: &mut TcpStream) -> Vec<Frame> {
    let mut buf = BytesMut::new();
    within(10, "the server closes the connection", async {
        loop {
            match s.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    if buf.len() < wire::preface::PREFACE.len() {
        return Vec::new();
    }
    let mut rest = buf.split_off(wire::preface::PREFACE.len());
    let mut dec = FrameDecoder::new(Settings::DEFAULT.max_frame_size);
    let mut out = Vec::new();
    while let Ok(Some(f)) = dec.decode(&mut rest) {
        out.push(f);
    }
    out
}

fn goaway_reason(frames: &[Frame]) -> Option<Reason> {
    frames.iter().find_map(|f| match f {
        Frame::GoAway(g) => Some(g.reason),
        _ => None,
    })
}

fn call(id: u32, method: u32) -> Frame {
    Frame::Call(wire::Call {
        call: id,
        method,
        end_stream: true,
        timeout_micros: None,
        metadata: None,
        message: Some(Bytes::new()),
    })
}

/// Opens call `id` on `method` with no message yet: a streaming request.
fn open_stream(id: u32, method: u32) -> Frame {
    Frame::Call(wire::Call {
        call: id,
        method,
        end_stream: false,
        timeout_micros: None,
        metadata: None,
        message: None,
    })
}

fn bind(method: u32, name: &str) -> Frame {
    Frame::Bind(wire::Bind {
        method,
        name: name.into(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_violations_get_goaway_and_close_only_their_connection() {
    let (addr, _stop) = start(service(Arc::default()).build()).await;
    let cases: Vec<(&str, BytesMut, Reason)> = vec![
        (
            "garbage instead of the preface",
            BytesMut::from(&[0xffu8; 64][..]),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "a frame before the preface",
            {
                let mut b = BytesMut::new();
                Frame::Settings(Settings::DEFAULT).encode(&mut b);
                b
            },
            Reason::PROTOCOL_ERROR,
        ),
        (
            "a first frame other than SETTINGS",
            {
                let mut b = BytesMut::new();
                b.extend_from_slice(&wire::preface::PREFACE);
                bind(1, SAY).encode(&mut b);
                b
            },
            Reason::PROTOCOL_ERROR,
        ),
        (
            "plain data as the first frame",
            {
                let mut b = BytesMut::new();
                b.extend_from_slice(&wire::preface::PREFACE);
                Frame::Message(wire::Message {
                    call: 1,
                    end_stream: false,
                    metadata: None,
                    payload: Bytes::from_static(b"x"),
                })
                .encode(&mut b);
                b
            },
            Reason::PROTOCOL_ERROR,
        ),
        (
            "a second SETTINGS",
            frames(&[Frame::Settings(Settings::DEFAULT)]),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "data on an unknown call",
            frames(&[Frame::Message(wire::Message {
                call: 9,
                end_stream: false,
                metadata: None,
                payload: Bytes::from_static(b"x"),
            })]),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "leading metadata on a client's MESSAGE",
            frames(&[
                bind(1, SLEEP),
                open_stream(1, 1),
                Frame::Message(wire::Message {
                    call: 1,
                    end_stream: true,
                    metadata: Some(wire::Metadata::builder().ascii("k", "v").unwrap().build()),
                    payload: Bytes::new(),
                }),
            ]),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "plain data after the client closed its call",
            {
                let plain = |n: u8| {
                    Frame::Message(wire::Message {
                        call: 1,
                        end_stream: false,
                        metadata: None,
                        payload: Bytes::from(vec![n]),
                    })
                };
                frames(&[bind(1, SLEEP), call(1, 1), plain(1), plain(2)])
            },
            Reason::PROTOCOL_ERROR,
        ),
        (
            "a CALL on an unbound method",
            frames(&[call(1, 5)]),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "a duplicate call id",
            frames(&[bind(1, SLEEP), call(1, 1), call(1, 1)]),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "a method bound twice",
            frames(&[bind(1, SAY), bind(1, SAY)]),
            Reason::PROTOCOL_ERROR,
        ),
        (
            "a frame over the size limit",
            {
                let mut b = hello();
                // A MESSAGE header (type 3, high nibble) announcing 64 MiB.
                b.extend_from_slice(&[0x30]);
                let mut len = Vec::new();
                wire::varint::put(&mut len, 64 << 20);
                b.extend_from_slice(&len);
                b
            },
            Reason::FRAME_TOO_LARGE,
        ),
    ];
    for (what, bytes, reason) in cases {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        let got = until_closed(&mut s).await;
        assert_eq!(goaway_reason(&got), Some(reason), "{what}: got {got:?}");
        healthy(addr).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_overflow_is_a_protocol_error() {
    let (addr, _stop) = start(
        service(Arc::default())
            .bidi_streaming(
                "/test.Echo/Chat",
                |req: Request<tram::rpc::Streaming<Echo>>| async move {
                    let mut r = req.into_inner();
                    while r.message().await?.is_some() {}
                    Ok(Response::new(Empty))
                },
            )
            .build(),
    )
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let credit = |n| Frame::Credit(wire::Credit { call: 1, n });
    let bytes = frames(&[
        bind(1, "/test.Echo/Chat"),
        open_stream(1, 1),
        credit(wire::MAX_CREDIT),
        credit(wire::MAX_CREDIT),
    ]);
    s.write_all(&bytes).await.unwrap();
    let got = until_closed(&mut s).await;
    assert_eq!(goaway_reason(&got), Some(Reason::PROTOCOL_ERROR), "{got:?}");
    healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_messages_beyond_the_credit_are_a_protocol_error() {
    // The server grants a request stream 8 messages; the client sends 9 in
    // one write, which the server reads as one run.
    let (addr, _stop) = start(
        service(Arc::default())
            .initial_credit(8)
            .client_streaming(
                "/test.Echo/Sum",
                |req: Request<tram::rpc::Streaming<Echo>>| async move {
                    let mut r = req.into_inner();
                    // Reads nothing until the client is done, so nothing
                    // is credited back meanwhile.
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    while r.message().await?.is_some() {}
                    Ok(Response::new(Echo { id: 0 }))
                },
            )
            .build(),
    )
    .await;
    let mut all = vec![bind(1, "/test.Echo/Sum"), open_stream(1, 1)];
    all.extend((0..9u8).map(|n| {
        Frame::Message(wire::Message {
            call: 1,
            end_stream: false,
            metadata: None,
            payload: Bytes::from(vec![8, n]),
        })
    }));
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&frames(&all)).await.unwrap();
    let got = until_closed(&mut s).await;
    assert_eq!(goaway_reason(&got), Some(Reason::PROTOCOL_ERROR), "{got:?}");
    let message = got.iter().find_map(|f| match f {
        Frame::GoAway(g) => Some(g.message.clone()),
        _ => None,
    });
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("without credit")),
        "{message:?}"
    );
    healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_trickling_peers_are_cut_by_the_handshake_timeout() {
    let (addr, _stop) = start(
        service(Arc::default())
            .handshake_timeout(Duration::from_millis(300))
            .build(),
    )
    .await;
    // Says nothing at all.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // Slowloris: the preface one byte at a time, slower than the timeout.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let trickle = tokio::spawn(async move {
        for b in hello() {
            if slow.write_all(&[b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        until_closed(&mut slow).await
    });
    let got = until_closed(&mut silent).await;
    assert_eq!(goaway_reason(&got), Some(Reason::TIMEOUT), "{got:?}");
    let got = within(10, "slowloris cut", trickle).await.unwrap();
    assert_eq!(goaway_reason(&got), Some(Reason::TIMEOUT), "{got:?}");
    healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_the_client_reconnects() {
    let (addr, _stop) = start(
        service(Arc::default())
            .idle_timeout(Some(Duration::from_millis(200)))
            .build(),
    )
    .await;
    // A raw peer that handshakes and then idles gets a clean GOAWAY.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hello()).await.unwrap();
    let got = until_closed(&mut s).await;
    assert_eq!(goaway_reason(&got), Some(Reason::NO_ERROR), "{got:?}");
    // A channel whose connection was closed while idle just reconnects.
    let ch = Channel::new(addr.to_string());
    for id in 0..3 {
        let r: Response<Echo> = ch.unary(SAY, Request::new(Echo { id })).await.unwrap();
        assert_eq!(r.get_ref().id, id);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    // A call open longer than the idle timeout is not cut.
    let r: Response<Echo> = ch
        .unary(SLEEP, Request::new(Echo { id: 500 }))
        .await
        .unwrap();
    assert_eq!(r.get_ref().id, 500);
}

/// A TCP proxy that forwards both ways until `stall` is set, then stops
/// forwarding (keeping both sockets open): a network that silently drops
/// everything.
async fn stall_proxy(target: SocketAddr) -> (SocketAddr, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stall = Arc::new(AtomicBool::new(false));
    let flag = stall.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(target).await.unwrap();
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            for (mut from, mut to) in [(cr, sw), (sr, cw)] {
                let flag = flag.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match from.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if flag.load(Ordering::SeqCst) {
                            // Swallow it, and hold the sockets open.
                            continue;
                        }
                        if to.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    (addr, stall)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_network_fires_deadlines_and_keepalive_closes_both_ends() {
    let dropped = Arc::new(Dropped::default());
    let keepalive = Keepalive {
        interval: Duration::from_millis(200),
        timeout: Duration::from_millis(200),
    };
    let (addr, _stop) = start(service(dropped.clone()).keepalive(Some(keepalive)).build()).await;
    let (proxy, stall) = stall_proxy(addr).await;
    let ch = Channel::builder(proxy.to_string())
        .keepalive(Some(keepalive))
        .build();
    let r: Response<Echo> = ch.unary(SAY, Request::new(Echo { id: 1 })).await.unwrap();
    assert_eq!(r.get_ref().id, 1);
    // A long call is in flight when the network stalls.
    let long = tokio::spawn({
        let ch = ch.clone();
        async move {
            ch.unary::<_, Echo>(SLEEP, Request::new(Echo { id: 60_000 }))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    stall.store(true, Ordering::SeqCst);
    // A call with a deadline fails by its deadline.
    let err = within(
        5,
        "the deadline fires",
        ch.unary::<_, Echo>(
            SAY,
            Request::new(Echo { id: 2 }).with_timeout(Duration::from_millis(300)),
        ),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Unavailable),
        "{err:?}"
    );
    // The call without one fails when the client's keepalive gives up.
    let err = within(5, "keepalive fails the call", long)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    // The server's keepalive closes its side and cancels the handler.
    within(5, "the server cancels the stranded handler", async {
        while dropped.0.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_crash_cancels_its_handlers() {
    let dropped = Arc::new(Dropped::default());
    let (addr, _stop) = start(service(dropped.clone()).build()).await;
    // A "client process" on its own runtime, with calls in flight, killed.
    let crashed = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let ch = Channel::new(addr.to_string());
            for _ in 0..5 {
                let ch = ch.clone();
                tokio::spawn(async move {
                    let _ = ch
                        .unary::<_, Echo>(SLEEP, Request::new(Echo { id: 60_000 }))
                        .await;
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        });
        // Dropping the runtime drops every task and socket at once.
        drop(rt);
    });
    crashed.join().unwrap();
    within(5, "all five handlers cancelled", async {
        while dropped.0.load(Ordering::SeqCst) < 5 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_refused_without_harming_others() {
    let (addr, _stop) = start(service(Arc::default()).max_connections(2).build()).await;
    let a = Channel::new(addr.to_string());
    let b = Channel::new(addr.to_string());
    for ch in [&a, &b] {
        let _: Response<Echo> = ch.unary(SAY, Request::new(Echo { id: 1 })).await.unwrap();
    }
    // A third connection is closed right after accept.
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let _ = extra.write_all(&hello()).await;
    let got = until_closed(&mut extra).await;
    assert!(got.is_empty(), "{got:?}");
    // The first two are unharmed.
    for ch in [&a, &b] {
        let r: Response<Echo> = ch.unary(SAY, Request::new(Echo { id: 2 })).await.unwrap();
        assert_eq!(r.get_ref().id, 2);
    }
}

/// A response stream with nothing in it.
struct Empty;

impl futures_core::Stream for Empty {
    type Item = Result<Echo, tram::rpc::Status>;
    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(None)
    }
}
