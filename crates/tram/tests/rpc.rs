//! RPC over real loopback TCP: every call kind, status, metadata, deadlines,
//! cancellation, limits, and connection failures.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use support::within;
use tokio::sync::{mpsc, oneshot};
use tram::conn::{Listener, TcpConfig};
use tram::rpc::{Channel, Code, Metadata, Request, Response, Server, ServerBuilder, Status};

#[derive(Clone, PartialEq, prost::Message)]
struct Echo {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    payload: Bytes,
}

fn echo(id: u64) -> Echo {
    Echo {
        id,
        payload: Bytes::from(format!("payload {id}")),
    }
}

/// Starts `server` on an ephemeral port; returns its address and a handle
/// that stops it (gracefully) when dropped or sent to.
async fn start(server: Server) -> (SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    support::serve(server).await
}

/// A stream over an mpsc receiver (what handlers commonly return).
struct Rx<T>(mpsc::Receiver<Result<T, Status>>);

impl<T> futures_core::Stream for Rx<T> {
    type Item = Result<T, Status>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// `n` messages, every one ready at once, then the end, or `fail` if set.
struct Burst {
    next: u64,
    n: u64,
    fail: Option<Status>,
}

impl futures_core::Stream for Burst {
    type Item = Result<Echo, Status>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.next < self.n {
            self.next += 1;
            return std::task::Poll::Ready(Some(Ok(echo(self.next - 1))));
        }
        std::task::Poll::Ready(self.fail.take().map(Err))
    }
}

/// Signals when dropped: how tests observe a handler being cancelled.
struct DropSignal(Option<oneshot::Sender<Instant>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(Instant::now());
        }
    }
}

fn echo_service() -> ServerBuilder {
    Server::builder()
        .unary("/test.Echo/Say", |req: Request<Echo>| async move {
            let md = req.metadata().clone();
            let mut trailers = Metadata::builder();
            if let Some(v) = md.get("x-echo") {
                trailers
                    .ascii("x-echoed", std::str::from_utf8(v).unwrap())
                    .unwrap();
            }
            let mut headers = Metadata::builder();
            if let Some(v) = md.get("x-echo-initial") {
                headers
                    .ascii("x-initial", std::str::from_utf8(v).unwrap())
                    .unwrap();
            }
            Ok(Response::new(req.into_inner())
                .with_metadata(headers.build())
                .with_trailers(trailers.build()))
        })
        .unary("/test.Echo/Sleep", |req: Request<Echo>| async move {
            // Sleeps `id` milliseconds, then answers.
            tokio::time::sleep(Duration::from_millis(req.get_ref().id)).await;
            Ok(Response::new(req.into_inner()))
        })
        .unary("/test.Echo/Fail", |req: Request<Echo>| async move {
            let code = Code::from_u64(req.get_ref().id).unwrap();
            let trailers = Metadata::builder()
                .binary("why-bin", &[1, 2, 3])
                .unwrap()
                .build();
            Err::<Response<Echo>, _>(
                Status::new(code, format!("failed with {code}"))
                    .with_details(Bytes::from_static(b"\x08\x01"))
                    .with_trailers(trailers),
            )
        })
        .server_streaming("/test.Echo/Count", |req: Request<Echo>| async move {
            let n = req.get_ref().id;
            let (tx, rx) = mpsc::channel(16);
            tokio::spawn(async move {
                for i in 0..n {
                    if tx.send(Ok(echo(i))).await.is_err() {
                        return;
                    }
                }
            });
            let headers = Metadata::builder()
                .ascii("x-count", &n.to_string())
                .unwrap()
                .build();
            Ok(Response::new(Rx(rx)).with_metadata(headers))
        })
        .server_streaming("/test.Echo/Burst", |req: Request<Echo>| async move {
            // `id` messages; a payload of "fail" ends the stream with an
            // error after them.
            let fail = (&req.get_ref().payload[..] == b"fail").then(|| Status::aborted("enough"));
            Ok(Response::new(Burst {
                next: 0,
                n: req.get_ref().id,
                fail,
            }))
        })
        .client_streaming(
            "/test.Echo/Sum",
            |req: Request<tram::rpc::Streaming<Echo>>| async move {
                let mut requests = req.into_inner();
                let mut sum = 0;
                while let Some(m) = requests.message().await? {
                    sum += m.id;
                }
                Ok(Response::new(echo(sum)))
            },
        )
        .bidi_streaming(
            "/test.Echo/Chat",
            |req: Request<tram::rpc::Streaming<Echo>>| async move {
                let mut requests = req.into_inner();
                let (tx, rx) = mpsc::channel(16);
                tokio::spawn(async move {
                    while let Ok(Some(m)) = requests.message().await {
                        if tx
                            .send(Ok(Echo {
                                id: m.id * 2,
                                payload: m.payload,
                            }))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                });
                Ok(Response::new(Rx(rx)))
            },
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_round_trip_with_metadata_and_trailers() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());
    let md = Metadata::builder()
        .ascii("x-echo", "hello")
        .unwrap()
        .build();
    let resp: Response<Echo> = within(
        5,
        "unary",
        ch.unary("/test.Echo/Say", Request::new(echo(7)).with_metadata(md)),
    )
    .await
    .unwrap();
    assert_eq!(resp.get_ref(), &echo(7));
    assert_eq!(resp.trailers().get("x-echoed"), Some(&b"hello"[..]));
    // Without trailers: the one-frame fast path.
    let resp: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(8)))
        .await
        .unwrap();
    assert_eq!(resp.into_inner(), echo(8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_status_code_round_trips() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());
    for code in Code::ALL.into_iter().skip(1) {
        let err = ch
            .unary::<_, Echo>("/test.Echo/Fail", Request::new(echo(code.as_u8().into())))
            .await
            .unwrap_err();
        assert_eq!(err.code(), code);
        assert_eq!(err.message(), format!("failed with {code}"));
        assert_eq!(&err.details()[..], b"\x08\x01");
        assert_eq!(err.trailers().get("why-bin"), Some(&[1u8, 2, 3][..]));
        assert!(err.is_remote());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_streaming_client_streaming_and_bidi() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());

    let mut stream = ch
        .server_streaming::<_, Echo>("/test.Echo/Count", Request::new(echo(500)))
        .await
        .unwrap();
    for i in 0..500 {
        assert_eq!(
            within(5, "stream item", stream.message()).await.unwrap(),
            Some(echo(i))
        );
    }
    assert_eq!(stream.message().await.unwrap(), None);

    let mut sink = ch
        .client_stream_sink::<Echo, Echo>("/test.Echo/Sum", Request::new(()))
        .await
        .unwrap();
    for i in 1..=300 {
        sink.send(echo(i)).await.unwrap();
    }
    let total = within(5, "sum", sink.finish()).await.unwrap();
    assert_eq!(total.get_ref().id, 300 * 301 / 2);

    let (mut tx, mut rx) = ch
        .bidi_stream_sink::<Echo, Echo>("/test.Echo/Chat", Request::new(()))
        .await
        .unwrap();
    for i in 0..200 {
        tx.send(echo(i)).await.unwrap();
        let back = within(5, "chat reply", rx.message())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back.id, i * 2);
    }
    tx.close();
    assert_eq!(within(5, "chat end", rx.message()).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_always_ready_goes_out_in_order_within_credit_then_its_end() {
    // The server takes ready messages a run at a time; each run is held to
    // the client's credit (64 to start), and an error after the messages
    // still comes after all of them.
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());
    for fail in [false, true] {
        let req = Echo {
            id: 10_000,
            payload: Bytes::from_static(if fail { b"fail" } else { b"" }),
        };
        let mut stream = ch
            .server_streaming::<_, Echo>("/test.Echo/Burst", Request::new(req))
            .await
            .unwrap();
        let mut got = 0;
        let end = within(10, "the burst", async {
            loop {
                match stream.message().await {
                    Ok(Some(m)) => {
                        assert_eq!(m, echo(got));
                        got += 1;
                    }
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        })
        .await;
        assert_eq!(got, 10_000);
        match end {
            Ok(()) => assert!(!fail),
            Err(e) => {
                assert!(fail, "{e:?}");
                assert_eq!(e.code(), Code::Aborted);
                assert_eq!(e.message(), "enough");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_complete_out_of_order() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());
    let slow = tokio::spawn({
        let ch = ch.clone();
        async move {
            ch.unary::<_, Echo>("/test.Echo/Sleep", Request::new(echo(300)))
                .await
                .map(|_| Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let fast: Response<Echo> = ch
        .unary("/test.Echo/Sleep", Request::new(echo(1)))
        .await
        .unwrap();
    let fast_done = Instant::now();
    assert_eq!(fast.get_ref().id, 1);
    let slow_done = within(5, "slow call", slow).await.unwrap().unwrap();
    assert!(
        fast_done < slow_done,
        "the fast call finished first on the same connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_cancels_the_handler() {
    let (dropped_tx, dropped_rx) = oneshot::channel();
    let dropped_tx = Arc::new(parking_lot::Mutex::new(Some(dropped_tx)));
    let server = echo_service()
        .unary("/test.Echo/Hang", move |_req: Request<Echo>| {
            let signal = DropSignal(dropped_tx.lock().take());
            async move {
                let _signal = signal;
                std::future::pending::<()>().await;
                Ok(Response::new(echo(0)))
            }
        })
        .build();
    let (addr, _stop, _task) = start(server).await;
    let ch = Channel::new(addr.to_string());
    let call = tokio::spawn({
        let ch = ch.clone();
        async move {
            ch.unary::<_, Echo>("/test.Echo/Hang", Request::new(echo(1)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cancelled_at = Instant::now();
    call.abort();
    let observed = within(5, "handler sees the cancel", dropped_rx)
        .await
        .unwrap();
    println!(
        "handler dropped {:?} after the client dropped the call",
        observed - cancelled_at
    );
    // The connection is still good.
    let r: Response<Echo> = within(
        5,
        "next call",
        ch.unary("/test.Echo/Say", Request::new(echo(2))),
    )
    .await
    .unwrap();
    assert_eq!(r.get_ref().id, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_fire_on_both_sides() {
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    let (dropped_tx, dropped_rx) = oneshot::channel();
    let dropped_tx = Arc::new(parking_lot::Mutex::new(Some(dropped_tx)));
    let server = Server::builder()
        .unary("/test.Echo/Slow", move |req: Request<Echo>| {
            let _ = seen_tx.send(req.time_left());
            let signal = DropSignal(dropped_tx.lock().take());
            async move {
                let _signal = signal;
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok(Response::new(req.into_inner()))
            }
        })
        .build();
    let (addr, _stop, _task) = start(server).await;
    let ch = Channel::new(addr.to_string());
    let err = within(
        5,
        "deadline",
        ch.unary::<_, Echo>(
            "/test.Echo/Slow",
            Request::new(echo(1)).with_timeout(Duration::from_millis(100)),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
    let left = seen_rx
        .recv()
        .await
        .unwrap()
        .expect("the handler sees the deadline");
    assert!(
        left <= Duration::from_millis(100) && left > Duration::ZERO,
        "time left {left:?}"
    );
    // The server stops the handler too, at its own deadline.
    within(5, "server drops the handler", dropped_rx)
        .await
        .unwrap();
    // Again on the connection now open (the first poll registers and sends
    // the call, a timer runs beside it).
    let err = within(
        5,
        "deadline on an open connection",
        ch.unary::<_, Echo>(
            "/test.Echo/Slow",
            Request::new(echo(2)).with_timeout(Duration::from_millis(50)),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_methods_are_unimplemented_and_the_connection_stays_up() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());
    for path in ["/test.Echo/Nope", "/other.Service/Say"] {
        let err = ch
            .unary::<_, Echo>(path, Request::new(echo(1)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{path}");
    }
    let ok: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(3)))
        .await
        .unwrap();
    assert_eq!(ok.get_ref().id, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_calls_on_one_connection() {
    let (addr, _stop, _task) = start(echo_service().max_concurrent_calls(20_000).build()).await;
    let ch = Channel::new(addr.to_string());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..10_000u64 {
        let ch = ch.clone();
        tasks.spawn(async move {
            let r: Response<Echo> = ch
                .unary(
                    "/test.Echo/Sleep",
                    Request::new(Echo {
                        id: i % 5,
                        payload: Bytes::from(i.to_string()),
                    }),
                )
                .await?;
            assert_eq!(
                r.get_ref().payload,
                Bytes::from(i.to_string()),
                "response routed to its own call"
            );
            Ok::<_, Status>(())
        });
    }
    let mut ok = 0;
    within(60, "10k calls", async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap().unwrap();
            ok += 1;
        }
    })
    .await;
    assert_eq!(ok, 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_fails_or_waits_as_configured() {
    let server = || echo_service().max_concurrent_calls(2).build();
    let (addr, _stop, _task) = start(server()).await;
    // Fail fast: a third concurrent call is refused locally.
    let ch = Channel::builder(addr.to_string())
        .wait_for_capacity(false)
        .build();
    // Learn the server's settings first.
    let _: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(0)))
        .await
        .unwrap();
    let slow = |ch: &Channel| {
        let ch = ch.clone();
        tokio::spawn(async move {
            ch.unary::<_, Echo>("/test.Echo/Sleep", Request::new(echo(300)))
                .await
        })
    };
    let (a, b) = (slow(&ch), slow(&ch));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let err = ch
        .unary::<_, Echo>("/test.Echo/Sleep", Request::new(echo(1)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();

    // Wait: all of them complete, two at a time.
    let ch = Channel::new(addr.to_string());
    let _: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(0)))
        .await
        .unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let (ch, done) = (ch.clone(), done.clone());
        tasks.spawn(async move {
            ch.unary::<_, Echo>("/test.Echo/Sleep", Request::new(echo(20)))
                .await
                .unwrap();
            done.fetch_add(1, Ordering::Relaxed);
        });
    }
    within(10, "queued calls", async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    assert_eq!(done.load(Ordering::Relaxed), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_server_fails_pending_calls_and_the_client_reconnects() {
    let (addr, stop, task) = start(
        echo_service()
            .drain_timeout(Duration::from_millis(10))
            .build(),
    )
    .await;
    let ch = Channel::new(addr.to_string());
    let _: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(0)))
        .await
        .unwrap();
    let pending: Vec<_> = (0..20)
        .map(|_| {
            let ch = ch.clone();
            tokio::spawn(async move {
                ch.unary::<_, Echo>("/test.Echo/Sleep", Request::new(echo(10_000)))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Kill: stop with a tiny drain timeout, so connections are aborted.
    let _ = stop.send(());
    task.await.unwrap();
    for p in pending {
        let err = within(5, "pending call fails", p)
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err}");
    }
    // Restart on the same port; the channel reconnects.
    let listener = Listener::bind(addr, TcpConfig::default()).await.unwrap();
    tokio::spawn(
        echo_service()
            .build()
            .serve_listener(listener, std::future::pending()),
    );
    let ok = within(10, "reconnect", async {
        loop {
            match ch
                .unary::<_, Echo>("/test.Echo/Say", Request::new(echo(9)))
                .await
            {
                Ok(r) => break r,
                Err(e) => {
                    assert_eq!(e.code(), Code::Unavailable, "{e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    })
    .await;
    assert_eq!(ok.get_ref().id, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_drains_calls_in_flight_and_refuses_new_ones() {
    let (addr, stop, task) =
        start(echo_service().drain_timeout(Duration::from_secs(5)).build()).await;
    let ch = Channel::new(addr.to_string());
    let _: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(0)))
        .await
        .unwrap();
    // Calls that take 300 ms are in flight when the shutdown starts.
    let in_flight: Vec<_> = (0..10)
        .map(|i| {
            let ch = ch.clone();
            tokio::spawn(async move {
                ch.unary::<_, Echo>("/test.Echo/Sleep", Request::new(echo(300 + i)))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = stop.send(());
    // Every call in flight completes normally.
    for (i, call) in in_flight.into_iter().enumerate() {
        let r = within(5, "drained call", call).await.unwrap().unwrap();
        assert_eq!(r.get_ref().id, 300 + i as u64);
    }
    // The server returns once drained, well before the drain timeout.
    within(5, "server returns after draining", task)
        .await
        .unwrap();
    // And it no longer accepts calls.
    let err = ch
        .unary::<_, Echo>("/test.Echo/Say", Request::new(echo(1)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_handlers_answer_and_are_cancelled() {
    let (dropped_tx, dropped_rx) = oneshot::channel();
    let dropped_tx = Arc::new(parking_lot::Mutex::new(Some(dropped_tx)));
    let server = echo_service()
        .spawn_handlers(true)
        .unary("/test.Echo/Hang", move |_req: Request<Echo>| {
            let signal = DropSignal(dropped_tx.lock().take());
            async move {
                let _signal = signal;
                std::future::pending::<()>().await;
                Ok(Response::new(echo(0)))
            }
        })
        .build();
    let (addr, _stop, _task) = start(server).await;
    let ch = Channel::new(addr.to_string());
    // Answers as usual, including streams.
    let r: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(5)))
        .await
        .unwrap();
    assert_eq!(r.get_ref().id, 5);
    let mut s = ch
        .server_streaming::<_, Echo>("/test.Echo/Count", Request::new(echo(3)))
        .await
        .unwrap();
    for i in 0..3 {
        assert_eq!(s.message().await.unwrap(), Some(echo(i)));
    }
    // Cancelling the call aborts the handler's task.
    let call = tokio::spawn({
        let ch = ch.clone();
        async move {
            ch.unary::<_, Echo>("/test.Echo/Hang", Request::new(echo(1)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    call.abort();
    within(5, "spawned handler is aborted", dropped_rx)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_calls_from_one_task() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());
    // Mixed outcomes, completing out of order, returned in request order.
    let requests = (0..500u64).map(|i| {
        Request::new(Echo {
            id: if i % 100 == 7 { 99 } else { i % 4 },
            payload: Bytes::from(i.to_string()),
        })
    });
    let results = within(
        10,
        "batch",
        ch.unary_batch::<_, Echo, _>("/test.Echo/Sleep", requests),
    )
    .await;
    assert_eq!(results.len(), 500);
    for (i, r) in results.into_iter().enumerate() {
        let r = r.unwrap();
        assert_eq!(
            r.get_ref().payload,
            Bytes::from(i.to_string()),
            "result {i} in request order"
        );
    }
    let failing = ch
        .unary_batch::<_, Echo, _>("/test.Echo/Fail", (1..=3u64).map(|c| Request::new(echo(c))))
        .await;
    let codes: Vec<Code> = failing.into_iter().map(|r| r.unwrap_err().code()).collect();
    assert_eq!(
        codes,
        vec![Code::Cancelled, Code::Unknown, Code::InvalidArgument]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_calls_retry_only_when_asked() {
    // A port with nothing listening yet.
    let addr = {
        let l = Listener::bind("127.0.0.1:0", TcpConfig::default())
            .await
            .unwrap();
        l.local_addr().unwrap()
    };
    let ch = Channel::builder(addr.to_string())
        .retries(8)
        .backoff(Duration::from_millis(20), Duration::from_secs(10))
        .build();
    // Not marked idempotent: fails at once, no retry.
    let err = ch
        .unary::<_, Echo>("/test.Echo/Say", Request::new(echo(1)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(!err.is_remote());
    // Marked idempotent: retried until the server comes up.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let listener = Listener::bind(addr, TcpConfig::default()).await.unwrap();
        echo_service()
            .build()
            .serve_listener(listener, std::future::pending())
            .await
            .unwrap();
    });
    let ok: Response<Echo> = within(
        10,
        "retried call",
        ch.unary("/test.Echo/Say", Request::new(echo(2)).idempotent()),
    )
    .await
    .unwrap();
    assert_eq!(ok.get_ref().id, 2);
    // A server's own error status is never retried.
    let err = ch
        .unary::<_, Echo>("/test.Echo/Fail", Request::new(echo(14)).idempotent())
        .await
        .unwrap_err();
    assert!(err.is_remote() && err.code() == Code::Unavailable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_names_and_connection_pools() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    // A host name, resolved by DNS (the resolver's "localhost").
    let ch = Channel::builder(format!("localhost:{}", addr.port()))
        .pool_size(3)
        .build();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..300u64 {
        let ch = ch.clone();
        tasks.spawn(async move {
            ch.unary::<_, Echo>("/test.Echo/Sleep", Request::new(echo(i % 3)))
                .await
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    // The pool opened several connections (checked with `ss` where present).
    let established = std::process::Command::new("ss")
        .args([
            "-Htn",
            "state",
            "established",
            &format!("( sport = :{} )", addr.port()),
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count());
    match established {
        Some(n) => assert!(
            n >= 2,
            "expected the pool to open several connections, saw {n}"
        ),
        None => println!("ss not available: connection count not checked"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_handlers_survive_immediate_id_reuse() {
    // Callers reuse ids as soon as answers arrive, racing the spawned tasks'
    // completion: many at once, so that the connection often reads a reused
    // id in the same turn as it learns the previous task finished.
    let (addr, _stop, _task) = start(echo_service().spawn_handlers(true).build()).await;
    let ch = Channel::new(addr.to_string());
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..32u64 {
        let ch = ch.clone();
        tasks.spawn(async move {
            for i in 0..300 {
                let id = t * 1000 + i;
                let r: Response<Echo> = ch.unary("/test.Echo/Say", Request::new(echo(id))).await?;
                assert_eq!(r.get_ref().id, id);
            }
            Ok::<_, Status>(())
        });
    }
    within(30, "spawned calls", async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap().unwrap();
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_past_the_default_concurrency_limit() {
    // More callers than the default max_concurrent_calls (1024), each
    // calling again as soon as its call returns: slots freed by one call are
    // taken by the next, and every caller finishes.
    let (addr, _stop, _task) = start(echo_service().max_concurrent_calls(65_536).build()).await;
    let ch = Channel::new(addr.to_string());
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..1_500u64 {
        let ch = ch.clone();
        tasks.spawn(async move {
            for i in 0..100u64 {
                let id = t * 1_000 + i;
                let r: Response<Echo> = ch.unary("/test.Echo/Say", Request::new(echo(id))).await?;
                assert_eq!(r.get_ref().id, id, "response routed to its own call");
            }
            Ok::<_, Status>(())
        });
    }
    within(60, "150k calls from 1500 callers", async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap().unwrap();
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_first_message_waits_for_the_servers_settings() {
    // Until the server's SETTINGS arrive, a client only knows the smallest
    // frame limit (16 KiB); a fresh channel's first call must not be
    // refused for being larger than that.
    let (addr, _stop, _task) = start(echo_service().build()).await;
    for i in 0..20u64 {
        let ch = Channel::new(addr.to_string());
        let payload = Bytes::from(vec![7u8; 200_000]);
        let r: Response<Echo> = within(
            10,
            "a large first call",
            ch.unary(
                "/test.Echo/Say",
                Request::new(Echo {
                    id: i,
                    payload: payload.clone(),
                }),
            ),
        )
        .await
        .unwrap();
        assert_eq!(r.get_ref().payload, payload);
    }
}

/// Leading metadata (response headers) reaches the client: on a unary
/// response with and without trailers, and on a response stream with its
/// first message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leading_metadata_reaches_the_client() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());
    for with_trailers in [false, true] {
        let mut md = Metadata::builder();
        md.ascii("x-echo-initial", "hello").unwrap();
        if with_trailers {
            md.ascii("x-echo", "bye").unwrap();
        }
        let r: Response<Echo> = within(
            5,
            "unary with headers",
            ch.unary(
                "/test.Echo/Say",
                Request::new(echo(4)).with_metadata(md.build()),
            ),
        )
        .await
        .unwrap();
        assert_eq!(r.metadata().get("x-initial"), Some(&b"hello"[..]));
        assert_eq!(r.trailers().get("x-initial"), None);
        assert_eq!(r.trailers().get("x-echoed").is_some(), with_trailers);
    }
    // No headers set: none arrive.
    let r: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(5)))
        .await
        .unwrap();
    assert!(r.metadata().is_empty());
    let mut stream = ch
        .server_streaming::<_, Echo>("/test.Echo/Count", Request::new(echo(3)))
        .await
        .unwrap();
    let first = within(5, "first message", stream.message()).await.unwrap();
    assert_eq!(first.map(|m| m.id), Some(0));
    let headers = stream.metadata().expect("headers with the first message");
    assert_eq!(headers.get("x-count"), Some(&b"3"[..]));
    let mut rest = 0;
    while within(5, "the rest", stream.message())
        .await
        .unwrap()
        .is_some()
    {
        rest += 1;
    }
    assert_eq!(rest, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_per_core_serves_every_connection_and_drains() {
    let (addr, stop, task) = start(echo_service().threads(2).build()).await;
    // Connections of their own, spread over the server's two threads.
    let mut callers = tokio::task::JoinSet::new();
    for c in 0..6u64 {
        let ch = Channel::new(addr.to_string());
        callers.spawn(async move {
            for i in 0..50 {
                let r: Response<Echo> = ch
                    .unary("/test.Echo/Say", Request::new(echo(c * 1000 + i)))
                    .await
                    .unwrap();
                assert_eq!(r.get_ref().id, c * 1000 + i);
            }
        });
    }
    within(20, "calls on every connection", async {
        while let Some(r) = callers.join_next().await {
            r.unwrap();
        }
    })
    .await;
    // A graceful stop lets a call in flight finish.
    let ch = Channel::new(addr.to_string());
    ch.ready().await.unwrap();
    let slow = tokio::spawn(async move {
        ch.unary::<_, Echo>("/test.Echo/Sleep", Request::new(echo(200)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(stop);
    let answered = within(10, "the call in flight", slow).await.unwrap();
    assert_eq!(answered.unwrap().get_ref().id, 200);
    within(10, "the server's end", task).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_payloads_are_written_by_reference_and_arrive_whole() {
    // Sizes around the splice threshold and far past it, interleaved with
    // small ones, many calls at once: every byte must come back in place.
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());
    let sizes = [0, 100, 4095, 4096, 4097, 70_000, 1 << 20];
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..140u64 {
        let ch = ch.clone();
        let size = sizes[i as usize % sizes.len()];
        calls.spawn(async move {
            let payload: Bytes = (0..size).map(|k| (k as u64 * 31 + i) as u8).collect();
            let r: Response<Echo> = ch
                .unary(
                    "/test.Echo/Say",
                    Request::new(Echo {
                        id: i,
                        payload: payload.clone(),
                    }),
                )
                .await
                .unwrap();
            assert_eq!(r.get_ref().id, i);
            assert_eq!(r.get_ref().payload, payload, "call {i}, {size} bytes");
        });
    }
    within(30, "large calls", async {
        while let Some(r) = calls.join_next().await {
            r.unwrap();
        }
    })
    .await;
}
