//! A tram client against a scripted server over real loopback TCP: a
//! server that writes thousands of frames at once, and servers that break
//! the protocol, send garbage or hang up mid-call. The client must deliver
//! everything in order in the first case, and otherwise fail its calls with
//! a clear status (and tell the server why with GOAWAY) rather than hang.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;

use bytes::BytesMut;
use prost::Message as _;
use support::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tram::wire::{self, Frame, FrameDecoder, Reason, Settings};
use tram::{Channel, Code, Request, Response, Status};

#[derive(Clone, PartialEq, prost::Message)]
struct Echo {
    #[prost(uint64, tag = "1")]
    id: u64,
}

const COUNT: &str = "/test.Echo/Count";
const SAY: &str = "/test.Echo/Say";

/// A connection accepted by the scripted server, with the client's frames
/// read so far.
struct Peer {
    stream: TcpStream,
    buf: BytesMut,
    dec: FrameDecoder,
}

impl Peer {
    /// Accepts one client, answers its handshake with ours, and reads up to
    /// its first CALL; returns the connection and that call's id.
    async fn accept(listener: &TcpListener) -> (Peer, u32) {
        let (mut stream, _) = within(10, "the client connects", listener.accept())
            .await
            .unwrap();
        let mut hello = BytesMut::new();
        hello.extend_from_slice(&wire::preface::PREFACE);
        Frame::Settings(Settings::DEFAULT).encode(&mut hello);
        stream.write_all(&hello).await.unwrap();
        let mut peer = Peer {
            stream,
            buf: BytesMut::new(),
            dec: FrameDecoder::new(Settings::DEFAULT.max_frame_size),
        };
        while peer.buf.len() < wire::preface::PREFACE.len() {
            peer.read().await;
        }
        assert_eq!(
            &peer.buf[..wire::preface::PREFACE.len()],
            &wire::preface::PREFACE
        );
        let _ = peer.buf.split_to(wire::preface::PREFACE.len());
        let call = peer.next_call().await;
        (peer, call)
    }

    /// Reads up to the client's next CALL; returns its id.
    async fn next_call(&mut self) -> u32 {
        loop {
            if let Frame::Call(c) = self.next_frame().await {
                return c.call;
            }
        }
    }

    async fn read(&mut self) {
        let n = within(10, "the client sends", self.stream.read_buf(&mut self.buf))
            .await
            .unwrap();
        assert!(n > 0, "the client closed early");
    }

    async fn next_frame(&mut self) -> Frame {
        loop {
            if let Some(f) = self.dec.decode(&mut self.buf).unwrap() {
                return f;
            }
            self.read().await;
        }
    }

    /// Reads what the client sends until it closes; returns the GOAWAY
    /// reason if it sent one.
    async fn goaway(&mut self) -> Option<Reason> {
        let mut reason = None;
        within(10, "the client closes", async {
            loop {
                while let Ok(Some(f)) = self.dec.decode(&mut self.buf) {
                    if let Frame::GoAway(g) = f {
                        reason = Some(g.reason);
                    }
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        reason
    }
}

async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// A channel to `addr` that grants each stream `credit` messages.
fn channel_with_credit(addr: SocketAddr, credit: u32) -> Channel {
    Channel::builder(addr.to_string())
        .initial_credit(credit)
        .build()
}

fn message(call: u32, id: u64, end_stream: bool) -> Frame {
    Frame::Message(wire::Message {
        call,
        end_stream,
        metadata: None,
        payload: Echo { id }.encode_to_vec().into(),
    })
}

/// A unary call on its own task, so that the scripted server can answer it.
fn say(ch: &Channel) -> tokio::task::JoinHandle<Result<Response<Echo>, Status>> {
    let ch = ch.clone();
    tokio::spawn(async move { ch.unary::<_, Echo>(SAY, Request::new(Echo { id: 1 })).await })
}

/// The status of a call expected to fail.
async fn fails(pending: tokio::task::JoinHandle<Result<Response<Echo>, Status>>) -> Status {
    within(10, "the call fails", pending)
        .await
        .unwrap()
        .unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_frames_in_one_write_arrive_whole_and_in_order() {
    // More frames than the client handles per run of its reader
    // (`READ_RUN`, 32), all in one write: they reach the client's buffer
    // together.
    const N: u64 = 5_000;
    let (listener, addr) = listener().await;
    let ch = channel_with_credit(addr, N as u32);
    let client = tokio::spawn(async move {
        let mut stream = ch
            .server_streaming::<_, Echo>(COUNT, Request::new(Echo { id: N }))
            .await?;
        let mut got = Vec::new();
        while let Some(m) = stream.message().await? {
            got.push(m.id);
        }
        Ok::<_, Status>(got)
    });
    let (mut peer, call) = Peer::accept(&listener).await;
    let mut burst = BytesMut::new();
    for i in 0..N {
        message(call, i, false).encode(&mut burst);
    }
    end_ok(call).encode(&mut burst);
    peer.stream.write_all(&burst).await.unwrap();
    let got = within(10, "the stream", client).await.unwrap().unwrap();
    assert_eq!(got, (0..N).collect::<Vec<_>>());
}

/// Opens a server stream of `Echo`s on its own task, which reads it to the
/// end once `go` fires: the ids received, then how it ended.
fn counting_stream(
    ch: &Channel,
    go: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<(Vec<u64>, Result<(), Status>)> {
    let ch = ch.clone();
    tokio::spawn(async move {
        let mut got = Vec::new();
        let mut stream = match ch
            .server_streaming::<_, Echo>(COUNT, Request::new(Echo { id: 0 }))
            .await
        {
            Ok(s) => s,
            Err(e) => return (got, Err(e)),
        };
        let _ = go.await;
        loop {
            match stream.message().await {
                Ok(Some(m)) => got.push(m.id),
                Ok(None) => return (got, Ok(())),
                Err(e) => return (got, Err(e)),
            }
        }
    })
}

fn end_ok(call: u32) -> Frame {
    Frame::End(wire::End {
        call,
        code: Code::Ok,
        message: None,
        details: None,
        trailers: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_runs_of_two_streams_each_arrive_in_order() {
    // The client queues consecutive messages of one call together: runs of
    // different lengths, alternating between two calls, in one write.
    let (listener, addr) = listener().await;
    let ch = channel_with_credit(addr, 4096);
    let (go, wait) = tokio::sync::oneshot::channel();
    let first = counting_stream(&ch, wait);
    let (mut peer, a) = Peer::accept(&listener).await;
    let (go_b, wait_b) = tokio::sync::oneshot::channel();
    let second = counting_stream(&ch, wait_b);
    let b = peer.next_call().await;
    let mut burst = BytesMut::new();
    let (mut next_a, mut next_b) = (0, 0);
    for run in 0..400u64 {
        for _ in 0..run % 5 + 1 {
            message(a, next_a, false).encode(&mut burst);
            next_a += 1;
        }
        for _ in 0..run % 3 + 1 {
            message(b, next_b, false).encode(&mut burst);
            next_b += 1;
        }
    }
    end_ok(a).encode(&mut burst);
    end_ok(b).encode(&mut burst);
    peer.stream.write_all(&burst).await.unwrap();
    let _ = (go.send(()), go_b.send(()));
    let (got_a, end_a) = within(10, "the first stream", first).await.unwrap();
    let (got_b, end_b) = within(10, "the second stream", second).await.unwrap();
    assert!(end_a.is_ok() && end_b.is_ok(), "{end_a:?} {end_b:?}");
    assert_eq!(got_a, (0..next_a).collect::<Vec<_>>());
    assert_eq!(got_b, (0..next_b).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_beyond_the_credit_fail_the_stream_and_get_goaway() {
    // The client grants 8 and reads nothing until the server has sent 9
    // (in one write) and the client has answered with GOAWAY, so no credit
    // can have been returned meanwhile.
    let (listener, addr) = listener().await;
    let ch = channel_with_credit(addr, 8);
    let (go, wait) = tokio::sync::oneshot::channel();
    let stream = counting_stream(&ch, wait);
    let (mut peer, call) = Peer::accept(&listener).await;
    let mut burst = BytesMut::new();
    for i in 0..9 {
        message(call, i, false).encode(&mut burst);
    }
    peer.stream.write_all(&burst).await.unwrap();
    assert_eq!(peer.goaway().await, Some(Reason::PROTOCOL_ERROR));
    let _ = go.send(());
    let (got, end) = within(10, "the stream", stream).await.unwrap();
    // Whatever came within the credit may be delivered, never the excess.
    assert!(got.len() <= 8, "{got:?}");
    let status = end.unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("without credit"), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_breaking_the_protocol_fails_the_call_and_gets_goaway() {
    let (listener, addr) = listener().await;
    let ch = Channel::new(addr.to_string());
    let pending = say(&ch);
    let (mut peer, call) = Peer::accept(&listener).await;
    // A response to a call that was never made, then the real one.
    let mut bad = BytesMut::new();
    message(call + 1000, 7, true).encode(&mut bad);
    message(call, 1, true).encode(&mut bad);
    peer.stream.write_all(&bad).await.unwrap();
    let status = fails(pending).await;
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("protocol error"), "{status:?}");
    assert_eq!(peer.goaway().await, Some(Reason::PROTOCOL_ERROR));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_message_that_does_not_decode_fails_the_stream_as_internal() {
    let (listener, addr) = listener().await;
    let ch = Channel::new(addr.to_string());
    let client = tokio::spawn(async move {
        let mut stream = ch
            .server_streaming::<_, Echo>(COUNT, Request::new(Echo { id: 2 }))
            .await?;
        let first = stream.message().await;
        // The second through the `Stream` interface: the other way in.
        let second = std::future::poll_fn(|cx| {
            futures_core::Stream::poll_next(std::pin::Pin::new(&mut stream), cx)
        })
        .await;
        Ok::<_, Status>((first, second))
    });
    let (mut peer, call) = Peer::accept(&listener).await;
    // One good message, then one whose body is a field tag without its
    // value, in one write (so one run), then the end.
    let mut burst = BytesMut::new();
    message(call, 7, false).encode(&mut burst);
    Frame::Message(wire::Message {
        call,
        end_stream: false,
        metadata: None,
        payload: bytes::Bytes::from_static(&[0x08]),
    })
    .encode(&mut burst);
    end_ok(call).encode(&mut burst);
    peer.stream.write_all(&burst).await.unwrap();
    let (first, second) = within(10, "the stream", client).await.unwrap().unwrap();
    assert_eq!(first.unwrap().map(|m| m.id), Some(7));
    let status = second.expect("an item").unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("does not decode"), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_the_server_fails_the_call() {
    let (listener, addr) = listener().await;
    let ch = Channel::new(addr.to_string());
    let pending = say(&ch);
    let (mut peer, _) = Peer::accept(&listener).await;
    // A frame of type 0xF (none such) with a body.
    peer.stream
        .write_all(&[0xf0, 0x04, 1, 2, 3, 4])
        .await
        .unwrap();
    let status = fails(pending).await;
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("bad frame"), "{status:?}");
    assert_eq!(peer.goaway().await, Some(Reason::PROTOCOL_ERROR));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_hanging_up_mid_call_fails_it_as_unavailable() {
    let (listener, addr) = listener().await;
    let ch = Channel::new(addr.to_string());
    let pending = say(&ch);
    let (peer, _) = Peer::accept(&listener).await;
    drop(peer);
    let status = fails(pending).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    // The channel stays usable: a later call connects again (and is
    // answered here by the scripted server).
    let next = say(&ch);
    let (mut peer, call) = Peer::accept(&listener).await;
    let mut answer = BytesMut::new();
    message(call, 1, true).encode(&mut answer);
    peer.stream.write_all(&answer).await.unwrap();
    let r = within(10, "the next call", next).await.unwrap().unwrap();
    assert_eq!(r.get_ref().id, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_woken_that_does_not_poll_its_call_holds_up_no_other_call() {
    // Three answers in one read: the reader wakes the first two callers,
    // and each that takes its answer wakes the next. These two do not:
    // each polled its call once, then waits for the third caller, whose
    // answer came last. Without the reader's flush this never ends.
    let (listener, addr) = listener().await;
    let ch = channel_with_credit(addr, 16);
    // Connected first, so that one poll sends a call.
    let warm = say(&ch);
    let (mut peer, w) = Peer::accept(&listener).await;
    let mut answer = BytesMut::new();
    message(w, 0, true).encode(&mut answer);
    peer.stream.write_all(&answer).await.unwrap();
    within(10, "the first call", warm).await.unwrap().unwrap();
    let (tx, rx) = tokio::sync::watch::channel(None::<u64>);
    let stuck = |id: u64| {
        let (ch, mut rx) = (ch.clone(), rx.clone());
        tokio::spawn(async move {
            let mut call = std::pin::pin!(ch.unary::<_, Echo>(SAY, Request::new(Echo { id })));
            std::future::poll_fn(|cx| {
                assert!(call.as_mut().poll(cx).is_pending(), "not answered yet");
                std::task::Poll::Ready(())
            })
            .await;
            let other = *rx.wait_for(Option::is_some).await.unwrap();
            (call.await.unwrap().into_inner().id, other)
        })
    };
    let first = stuck(1);
    let a = peer.next_call().await;
    let second = stuck(2);
    let b = peer.next_call().await;
    let third = {
        let ch = ch.clone();
        tokio::spawn(async move {
            let r = ch.unary::<_, Echo>(SAY, Request::new(Echo { id: 3 })).await;
            let _ = tx.send(Some(r.unwrap().into_inner().id));
        })
    };
    let c = peer.next_call().await;
    let mut all = BytesMut::new();
    message(a, 1, true).encode(&mut all);
    message(b, 2, true).encode(&mut all);
    message(c, 3, true).encode(&mut all);
    peer.stream.write_all(&all).await.unwrap();
    assert_eq!(
        within(10, "the first call", first).await.unwrap(),
        (1, Some(3))
    );
    assert_eq!(
        within(10, "the second call", second).await.unwrap(),
        (2, Some(3))
    );
    third.await.unwrap();
}
