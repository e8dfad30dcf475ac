//! RPC over real loopback TCP under load and through a connection's life:
//! many calls at once, limits, pools, retries, servers killed and shut
//! down, spawned handlers, the thread-per-core server.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use support::echo::{Echo, connected, echo, echo_service, start, with_hang};
use support::within;
use tram::conn::{Listener, TcpConfig};
use tram::rpc::{Channel, Code, Request, Response, Status};

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
    let ch = connected(addr).await;
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
    let ch = connected(addr).await;
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
    let ch = connected(addr).await;
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

/// A connection looks at the server's stop signal only when it may have
/// come, after registering for it once: one that has been idle since and
/// one busy with calls all along both see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_reaches_idle_and_busy_connections() {
    // Far longer than the test waits: connections must close on their own.
    let (addr, stop, task) = start(
        echo_service()
            .drain_timeout(Duration::from_secs(60))
            .build(),
    )
    .await;
    let idle = connected(addr).await;
    let busy = Channel::new(addr.to_string());
    let calls = Arc::new(AtomicUsize::new(0));
    let caller = tokio::spawn({
        let (busy, calls) = (busy.clone(), calls.clone());
        async move {
            loop {
                let r = busy
                    .unary::<_, Echo>("/test.Echo/Say", Request::new(echo(1)))
                    .await;
                match r {
                    Ok(_) => calls.fetch_add(1, Ordering::Relaxed),
                    Err(e) => return e,
                };
            }
        }
    });
    while calls.load(Ordering::Relaxed) < 1_000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = stop.send(());
    within(5, "server returns after its connections close", task)
        .await
        .unwrap();
    let err = within(5, "the busy connection's calls end", caller)
        .await
        .unwrap();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    let err = idle
        .unary::<_, Echo>("/test.Echo/Say", Request::new(echo(2)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_handlers_answer_and_are_cancelled() {
    let (builder, dropped_rx) = with_hang(echo_service().spawn_handlers(true));
    let server = builder.build();
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
