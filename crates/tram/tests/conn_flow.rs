//! Backpressure and flush policies over real loopback sockets.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::within;
use tokio::io::AsyncReadExt;
use tram::conn::{
    Config, Connection, ErrorKind, FlushPolicy, LengthDelimited, Listener, TcpConfig, TrySendError,
    connect,
};

/// A listener whose accepted socket is handed back unread.
async fn silent_peer() -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<tokio::net::TcpStream>,
) {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = tokio::spawn(async move { listener.accept().await.unwrap().0 });
    (addr, accept)
}

/// Reads the ten one-byte frames the cork and flush tests send (0 to 9,
/// each with its 4-byte length) and checks they arrived whole and in order.
async fn expect_ten_frames(peer: &mut tokio::net::TcpStream, what: &str) {
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < 50 {
        let n = within(5, what, peer.read(&mut buf)).await.unwrap();
        got.extend_from_slice(&buf[..n]);
    }
    let expected: Vec<u8> = (0..10u8).flat_map(|i| [0, 0, 0, 1, i]).collect();
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_makes_senders_wait_and_memory_stays_bounded() {
    let (addr, accept) = silent_peer().await;
    // Small kernel buffers so that the socket fills quickly.
    let tcp = TcpConfig {
        send_buffer: Some(16 * 1024),
        ..TcpConfig::default()
    };
    let stream = connect(addr, &tcp).await.unwrap();
    let mut peer = accept.await.unwrap();
    let max_queued = 64 * 1024;
    let config = Config::default().max_queued_bytes(max_queued);
    let (_inbound, sender) = Connection::new(stream, LengthDelimited::new(), config).into_split();

    let msg = Bytes::from(vec![7u8; 1000]);
    let mut queued = 0usize;
    // Fill until the queue stays full after a pause: the writer is then
    // blocked on the socket, not just between two writes.
    let mut pending_full = false;
    let full = loop {
        match sender.try_send(msg.clone()) {
            Ok(()) => {
                queued += 1;
                pending_full = false;
            }
            Err(TrySendError::Full(back)) if pending_full => break back,
            Err(TrySendError::Full(_)) => {
                pending_full = true;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            Err(e) => panic!("unexpected {e}"),
        }
        assert!(queued < 100_000, "the queue never filled");
        if queued % 64 == 0 {
            tokio::task::yield_now().await;
        }
    };
    assert_eq!(full, msg, "a full queue hands the message back");
    // Bound: the limit plus at most one message of overshoot.
    assert!(
        sender.queued_bytes() <= max_queued + 1004,
        "{} queued",
        sender.queued_bytes()
    );

    // `send` waits while full and completes once the peer reads.
    let waiting = tokio::spawn({
        let sender = sender.clone();
        let msg = msg.clone();
        async move { sender.send(msg).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiting.is_finished(),
        "send must wait while the queue is full"
    );
    let drain = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0usize;
        while let Ok(n) = peer.read(&mut buf).await {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    within(10, "waiting send completes", waiting)
        .await
        .unwrap()
        .unwrap();
    drop(sender);
    let total = within(10, "peer drains everything", drain).await.unwrap();
    assert_eq!(total, (queued + 1) * 1004, "every queued byte arrives");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_flush_holds_bytes_until_flushed() {
    let (addr, accept) = silent_peer().await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let mut peer = accept.await.unwrap();
    let config = Config::default().flush(FlushPolicy::Explicit);
    let (_inbound, sender) = Connection::new(stream, LengthDelimited::new(), config).into_split();
    for i in 0..10u8 {
        sender.send([i]).await.unwrap();
    }
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(100), peer.read(&mut buf)).await;
    assert!(early.is_err(), "nothing may be written before flush");
    assert_eq!(sender.queued_bytes(), 50);
    within(5, "flush", sender.flush()).await.unwrap();
    expect_ten_frames(&mut peer, "read flushed bytes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linger_batches_until_size_or_delay() {
    let (addr, accept) = silent_peer().await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let mut peer = accept.await.unwrap();
    let config = Config::default().flush(FlushPolicy::Linger {
        max_delay: Duration::from_millis(20),
        max_bytes: 100,
    });
    let (_inbound, sender) = Connection::new(stream, LengthDelimited::new(), config).into_split();
    // Below max_bytes: written once the delay passes, not before it.
    sender.send([1u8]).await.unwrap();
    let mut buf = [0u8; 256];
    let n = within(5, "lingered write", peer.read(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf[..n], &[0, 0, 0, 1, 1]);
    // A full train (100 bytes) leaves without waiting for the delay.
    sender.send(vec![2u8; 96]).await.unwrap();
    let mut got = 0;
    while got < 100 {
        got += within(5, "train write", peer.read(&mut buf)).await.unwrap();
    }
    assert_eq!(got, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_sender_closes_the_write_side() {
    let (addr, accept) = silent_peer().await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let peer = accept.await.unwrap();
    let (_inbound, sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
    let (mut peer_in, _peer_out) =
        Connection::new(peer, LengthDelimited::new(), Config::default()).into_split();
    let second = sender.clone();
    sender.send(&b"one"[..]).await.unwrap();
    drop(sender);
    second.send(&b"two"[..]).await.unwrap();
    drop(second);
    assert_eq!(
        &within(5, "one", peer_in.recv()).await.unwrap().unwrap()[..],
        b"one"
    );
    assert_eq!(
        &within(5, "two", peer_in.recv()).await.unwrap().unwrap()[..],
        b"two"
    );
    assert!(within(5, "end of stream", peer_in.recv()).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_writes_what_is_queued_then_ends_the_stream_for_every_clone() {
    for policy in [FlushPolicy::Immediate, FlushPolicy::Explicit] {
        let (addr, accept) = silent_peer().await;
        let stream = connect(addr, &TcpConfig::default()).await.unwrap();
        let peer = accept.await.unwrap();
        let config = Config::default().flush(policy);
        let (_inbound, sender) =
            Connection::new(stream, LengthDelimited::new(), config).into_split();
        let (mut peer_in, _peer_out) =
            Connection::new(peer, LengthDelimited::new(), Config::default()).into_split();
        let clone = sender.clone();
        sender.send(&b"one"[..]).await.unwrap();
        {
            // Queued under a cork: close still writes it.
            let _cork = clone.cork();
            clone.send(&b"two"[..]).await.unwrap();
            sender.close();
        }
        for s in [&sender, &clone] {
            assert!(s.is_closed());
            let err = s.send(&b"late"[..]).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Closed);
            assert!(matches!(
                s.try_send(&b"late"[..]),
                Err(TrySendError::Closed(_))
            ));
        }
        for want in [&b"one"[..], &b"two"[..]] {
            let got = within(5, "a queued message", peer_in.recv()).await;
            assert_eq!(&got.unwrap().unwrap()[..], want, "{policy:?}");
        }
        // The FIN arrives although both senders are still alive.
        assert!(within(5, "end of stream", peer_in.recv()).await.is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encode_errors_queue_nothing_and_closed_connections_refuse() {
    let (addr, accept) = silent_peer().await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let peer = accept.await.unwrap();
    let (_inbound, sender) =
        Connection::new(stream, LengthDelimited::with_max_len(4), Config::default()).into_split();
    let err = sender.send(&b"too long"[..]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Encode);
    assert_eq!(sender.queued_bytes(), 0);
    // Kill the peer; the writer's next write fails and the sender reports
    // the connection closed instead of queueing forever.
    drop(peer);
    let closed = within(10, "sender notices the dead peer", async {
        loop {
            match sender.send(&b"x"[..]).await {
                Ok(()) => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(e) => break e,
            }
        }
    })
    .await;
    assert_eq!(closed.kind(), ErrorKind::Closed);
    assert!(sender.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recv_with_consumes_only_what_is_taken() {
    let (addr, accept) = silent_peer().await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let peer = accept.await.unwrap();
    let (_peer_in, peer_out) =
        Connection::new(peer, LengthDelimited::new(), Config::default()).into_split();
    let (mut inbound, _sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
    for i in 0..10u8 {
        peer_out.send([i; 3]).await.unwrap();
    }
    peer_out.flush().await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let got = within(
            5,
            "first batch",
            inbound.recv_with(|b| {
                b.take(3 - seen.len())
                    .map(|m| m.to_vec())
                    .collect::<Vec<_>>()
            }),
        )
        .await
        .unwrap()
        .unwrap();
        seen.extend(got);
    }
    // The rest is still there, for recv_with and recv alike.
    let next = within(5, "owned recv", inbound.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&next[..], &[3, 3, 3]);
    while seen.len() < 9 {
        let got = within(
            5,
            "later batch",
            inbound.recv_with(|b| b.map(<[u8]>::to_vec).collect::<Vec<_>>()),
        )
        .await
        .unwrap()
        .unwrap();
        seen.extend(got);
    }
    let expected: Vec<Vec<u8>> = (0..10u8).filter(|&i| i != 3).map(|i| vec![i; 3]).collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recv_with_delivers_messages_before_bad_bytes_then_the_error() {
    use tokio::io::AsyncWriteExt;
    let (addr, accept) = silent_peer().await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let mut peer = accept.await.unwrap();
    // Two good messages, then a length over the maximum, in one write.
    peer.write_all(b"\0\0\0\x01a\0\0\0\x01b\xff\xff\xff\xff")
        .await
        .unwrap();
    let (mut inbound, _sender) = Connection::new(
        stream,
        LengthDelimited::with_max_len(1024),
        Config::default(),
    )
    .into_split();
    let mut good = Vec::new();
    let err = loop {
        match within(
            5,
            "batch",
            inbound.recv_with(|b| b.map(<[u8]>::to_vec).collect::<Vec<_>>()),
        )
        .await
        {
            Some(Ok(msgs)) => good.extend(msgs),
            Some(Err(e)) => break e,
            None => panic!("ended without the error"),
        }
    };
    assert_eq!(good, vec![b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(err.kind(), ErrorKind::Decode);
    assert!(inbound.recv().await.is_none(), "finished after the error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_send_iter_never_takes_an_item_it_cannot_queue() {
    let (addr, accept) = silent_peer().await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let _peer = accept.await.unwrap();
    // Explicit flush: nothing leaves the queue, so it fills for sure.
    let config = Config::default()
        .flush(FlushPolicy::Explicit)
        .max_queued_bytes(20);
    let (_inbound, sender) = Connection::new(stream, LengthDelimited::new(), config).into_split();
    let items: Vec<[u8; 6]> = (0..10u8).map(|i| [i; 6]).collect();
    let mut iter = items.iter();
    // 10 bytes each: two fit below 20, the second reaches the bound.
    let n = sender.try_send_iter(&mut iter).unwrap();
    assert_eq!(n, 2);
    assert_eq!(iter.len(), 8, "no item taken beyond those queued");
    // Reaching the bound triggers a write even under Explicit, so room comes
    // back; `ready` waits for it, and the rest goes through in runs.
    within(5, "room again", sender.ready()).await.unwrap();
    let rest = within(5, "rest", sender.send_all(iter)).await.unwrap();
    assert_eq!(rest, 8);
    within(5, "flush", sender.flush()).await.unwrap();
    assert_eq!(sender.queued_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cork_holds_writes_until_the_last_guard_drops() {
    let (addr, accept) = silent_peer().await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let mut peer = accept.await.unwrap();
    let (_inbound, sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
    let outer = sender.cork();
    let inner = sender.cork();
    for i in 0..10u8 {
        sender.send([i]).await.unwrap();
    }
    // Under Immediate these would have been written at once; corked, they wait.
    assert_eq!(sender.queued_bytes(), 50);
    drop(inner);
    assert_eq!(sender.queued_bytes(), 50, "still corked by the outer guard");
    drop(outer);
    assert_eq!(sender.queued_bytes(), 0, "uncorking writes the queue");
    expect_ten_frames(&mut peer, "corked bytes arrive").await;
}

/// The writer task, woken while a cork holds bytes back, leaves them
/// queued: on one thread the order of events is fixed, and the writer task
/// gets its turns while the cork is held.
#[tokio::test(flavor = "current_thread")]
async fn cork_holds_writes_while_the_writer_task_runs() {
    let (addr, accept) = silent_peer().await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let mut peer = accept.await.unwrap();
    let (_inbound, sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
    let cork = sender.cork();
    for i in 0..10u8 {
        sender.send([i]).await.unwrap();
        // The writer task runs between the sends, with bytes queued.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(sender.queued_bytes(), 50, "nothing written while corked");
    assert_eq!(sender.bytes_written(), 0);
    drop(cork);
    within(5, "flush", sender.flush()).await.unwrap();
    assert_eq!(sender.bytes_written(), 50);
    expect_ten_frames(&mut peer, "corked bytes arrive").await;
}

/// A write half that counts the writes it is given.
struct CountingWrite {
    writes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    bytes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl tokio::io::AsyncWrite for CountingWrite {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::sync::atomic::Ordering::Relaxed;
        self.writes.fetch_add(1, Relaxed);
        self.bytes.fetch_add(buf.len(), Relaxed);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// With inline writes off, messages sent by tasks that are runnable
/// together go out in one write: the writer task lets them all run before
/// it writes (on a multi-thread runtime the tasks spread over the workers
/// and the count of writes depends on timing).
async fn senders_runnable_together_share_a_write() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let (writes, bytes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let write = CountingWrite {
        writes: writes.clone(),
        bytes: bytes.clone(),
    };
    let codec = LengthDelimited::new();
    let config = Config::default().inline_writes(false);
    let (_inbound, sender) =
        Connection::from_parts(tokio::io::empty(), write, codec, codec, config).into_split();
    let gate = Arc::new(tokio::sync::Barrier::new(33));
    let tasks: Vec<_> = (0..32u8)
        .map(|i| {
            let (sender, gate) = (sender.clone(), gate.clone());
            tokio::spawn(async move {
                gate.wait().await;
                sender.send([i]).await.unwrap();
            })
        })
        .collect();
    gate.wait().await;
    for t in tasks {
        within(5, "sender", t).await.unwrap();
    }
    within(5, "everything written", async {
        while bytes.load(Relaxed) < 32 * 5 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert_eq!(bytes.load(Relaxed), 32 * 5);
    assert_eq!(
        writes.load(Relaxed),
        1,
        "32 messages queued together, in one write"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn senders_runnable_together_share_a_write_on_a_current_thread_runtime() {
    senders_runnable_together_share_a_write().await;
}
