//! RPC over real loopback TCP: every call kind, status, metadata,
//! deadlines, cancellation, unknown methods, large payloads.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use support::echo::{DropSignal, Echo, echo, echo_service, start, with_hang};
use support::within;
use tokio::sync::{mpsc, oneshot};
use tram::rpc::{Channel, Code, Metadata, Request, Response, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_round_trip_with_metadata_and_trailers() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::new(addr.to_string());
    let resp = say_hello(&ch, "/test.Echo/Say", 7).await.unwrap();
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

/// With one message of credit at a time, the server's stream waits for a
/// CREDIT before every message; the connection's own task reads it and
/// polls the stream in the same turn. None of those wake-ups may be lost,
/// on either kind of runtime.
async fn stream_one_credit_at_a_time() {
    let (addr, _stop, _task) = start(echo_service().build()).await;
    let ch = Channel::builder(addr.to_string()).initial_credit(1).build();
    let req = Echo {
        id: 2_000,
        payload: Bytes::new(),
    };
    let mut stream = ch
        .server_streaming::<_, Echo>("/test.Echo/Burst", Request::new(req))
        .await
        .unwrap();
    let got = within(10, "a stream at one message of credit", async {
        let mut got = 0;
        while let Some(m) = stream.message().await.unwrap() {
            assert_eq!(m, echo(got));
            got += 1;
        }
        got
    })
    .await;
    assert_eq!(got, 2_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_at_one_message_of_credit_ends_multi_thread() {
    stream_one_credit_at_a_time().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_stream_at_one_message_of_credit_ends_current_thread() {
    stream_one_credit_at_a_time().await;
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
    let (builder, dropped_rx) = with_hang(echo_service());
    let server = builder.build();
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

/// A server's request passed on to another call carries the time left
/// until its own deadline, not the timeout its client first set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_passed_on_carries_the_time_left() {
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    let inner = Server::builder()
        .unary("/test.Echo/Say", move |req: Request<Echo>| {
            let _ = seen_tx.send(req.time_left());
            async move { Ok(Response::new(req.into_inner())) }
        })
        .build();
    let (inner_addr, _inner_stop, _inner_task) = start(inner).await;
    let onward = Channel::new(inner_addr.to_string());
    let outer = Server::builder()
        .unary("/test.Echo/Say", move |req: Request<Echo>| {
            let onward = onward.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                onward.unary::<_, Echo>("/test.Echo/Say", req).await
            }
        })
        .build();
    let (outer_addr, _outer_stop, _outer_task) = start(outer).await;
    let ch = Channel::new(outer_addr.to_string());
    let r: Response<Echo> = within(
        10,
        "call passed on",
        ch.unary(
            "/test.Echo/Say",
            Request::new(echo(7)).with_timeout(Duration::from_secs(5)),
        ),
    )
    .await
    .unwrap();
    assert_eq!(r.get_ref().id, 7);
    let left = seen_rx
        .recv()
        .await
        .unwrap()
        .expect("the inner server sees a deadline");
    // 200 ms went by at the outer server before it passed the call on.
    assert!(
        left <= Duration::from_millis(4800) && left > Duration::ZERO,
        "time left at the inner server {left:?}"
    );
}

/// A channel connected (one call answered) to an echo server whose
/// `/test.Echo/Hang` never answers; the second item keeps the server up.
async fn connected_to_hang() -> (Channel, impl Sized) {
    let (builder, dropped) = with_hang(echo_service());
    let (addr, stop, task) = start(builder.build()).await;
    let ch = Channel::new(addr.to_string());
    let ok: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(0)))
        .await
        .unwrap();
    assert_eq!(ok.get_ref().id, 0);
    (ch, (dropped, stop, task))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_one_connection_each_end_at_their_own_deadline() {
    // The client's connection keeps one timer, for the earliest deadline
    // of its calls: after each ring it is set for the next, and a call
    // answered in time is not ended by it.
    let (ch, _server) = connected_to_hang().await;
    let started = Instant::now();
    let hang = |ms: u64| {
        let ch = ch.clone();
        tokio::spawn(async move {
            let request = Request::new(echo(ms)).with_timeout(Duration::from_millis(ms));
            let err = ch
                .unary::<_, Echo>("/test.Echo/Hang", request)
                .await
                .unwrap_err();
            (err.code(), started.elapsed())
        })
    };
    // Opened out of deadline order: the second comes first.
    let calls = [hang(300), hang(100), hang(200)];
    let answered: Response<Echo> = ch
        .unary(
            "/test.Echo/Say",
            Request::new(echo(7)).with_timeout(Duration::from_millis(150)),
        )
        .await
        .unwrap();
    assert_eq!(answered.get_ref().id, 7, "answered in time");
    for (call, ms) in calls.into_iter().zip([300, 100, 200]) {
        let (code, after) = within(5, "a deadline", call).await.unwrap();
        assert_eq!(code, Code::DeadlineExceeded);
        assert!(
            after >= Duration::from_millis(ms),
            "{ms} ms call ended after {after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_passed_at_the_start_leaves_the_next_call_its_own() {
    // A call whose deadline has passed as it opens sets the connection's
    // timer to ring at once (which wakes the reader itself; the server's
    // answer to the call's CANCEL would too); the call after it must
    // still end at its own.
    let (ch, _server) = connected_to_hang().await;
    for ms in [0, 100] {
        let request = Request::new(echo(ms)).with_timeout(Duration::from_millis(ms));
        let call = ch.unary::<_, Echo>("/test.Echo/Hang", request);
        let err = within(5, "a deadline", call).await.unwrap_err();
        assert_eq!(err.code(), Code::DeadlineExceeded, "{ms} ms");
    }
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

/// Field 1 as bytes, where `Echo` has a number.
#[derive(Clone, PartialEq, prost::Message)]
struct NotEcho {
    #[prost(bytes = "vec", tag = "1")]
    id: Vec<u8>,
}

/// Calls `path` with `echo(n)` and the metadata `x-echo: hello`.
async fn say_hello(ch: &Channel, path: &str, n: u64) -> Result<Response<Echo>, tram::rpc::Status> {
    let md = Metadata::builder()
        .ascii("x-echo", "hello")
        .unwrap()
        .build();
    within(
        5,
        path,
        ch.unary(path, Request::new(echo(n)).with_metadata(md)),
    )
    .await
}

/// The echo's methods as `unary_sync` handlers: answered on the
/// connection's task, or (with `spawn_handlers`) as `unary` ones.
fn sync_service(spawned: bool) -> tram::rpc::ServerBuilder {
    Server::builder()
        .spawn_handlers(spawned)
        .unary_sync("/test.Sync/Say", |req: Request<Echo>| {
            let md = req.metadata().clone();
            let mut headers = Metadata::builder();
            let mut trailers = Metadata::builder();
            if let Some(v) = md.get("x-echo") {
                let v = std::str::from_utf8(v).unwrap();
                headers.ascii("x-initial", v).unwrap();
                trailers.ascii("x-echoed", v).unwrap();
            }
            Ok(Response::new(req.into_inner())
                .with_metadata(headers.build())
                .with_trailers(trailers.build()))
        })
        .unary_sync("/test.Sync/Fail", |req: Request<Echo>| {
            let code = Code::from_u64(req.get_ref().id).unwrap();
            Err::<Response<Echo>, _>(tram::rpc::Status::new(code, "refused"))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_sync_answers_like_unary() {
    for spawned in [false, true] {
        let (addr, _stop, _task) = start(sync_service(spawned).build()).await;
        let ch = Channel::new(addr.to_string());
        let r = say_hello(&ch, "/test.Sync/Say", 3).await.unwrap();
        assert_eq!(r.get_ref(), &echo(3), "spawned: {spawned}");
        assert_eq!(r.metadata().get("x-initial"), Some(&b"hello"[..]));
        assert_eq!(r.trailers().get("x-echoed"), Some(&b"hello"[..]));
        // Without metadata: the one-frame answer.
        let r: Response<Echo> = ch
            .unary("/test.Sync/Say", Request::new(echo(4)))
            .await
            .unwrap();
        assert_eq!(r.into_inner(), echo(4));
        let err = ch
            .unary::<_, Echo>("/test.Sync/Fail", Request::new(echo(5)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::from_u64(5).unwrap());
        assert_eq!(err.message(), "refused");
        assert!(err.is_remote());
        // A request that does not decode as the handler's type.
        let err = ch
            .unary::<_, Echo>("/test.Sync/Say", Request::new(NotEcho { id: vec![1] }))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Internal, "{err}");
        assert!(err.message().contains("does not decode"), "{err}");
        // Many at once, on one connection.
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..500 {
            let ch = ch.clone();
            calls.spawn(async move {
                let r = ch
                    .unary::<_, Echo>("/test.Sync/Say", Request::new(echo(i)))
                    .await;
                (i, r.unwrap().into_inner().id)
            });
        }
        while let Some(answer) = calls.join_next().await {
            let (sent, got) = answer.unwrap();
            assert_eq!(sent, got);
        }
    }
}
