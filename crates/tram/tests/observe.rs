//! Observability over loopback TCP, without a metrics recorder: W3C trace
//! context through a client → server → client chain, observers of the
//! user's, and connection snapshots. (Call spans are in `observe_spans`.)
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::within;
use tram::observe::{
    CallEnd, CallStart, CloseReason, ConnectionEvent, EndpointState, Observer, TRACEPARENT,
    TraceContext,
};
use tram::{Channel, Code, Request, Response, Server};

#[derive(Clone, PartialEq, prost::Message)]
struct Hop {
    /// `traceparent` as each server saw it, and its own context, in order.
    #[prost(string, repeated, tag = "1")]
    seen: Vec<String>,
}

const FRONT: &str = "/obs.Chain/Front";
const BACK: &str = "/obs.Chain/Back";
const SLOW: &str = "/obs.Chain/Slow";

/// What a handler sees of the trace: the `traceparent` it was sent, and
/// the context current while it runs.
fn seen(req: &Request<Hop>) -> [String; 2] {
    let sent = req
        .metadata()
        .get(TRACEPARENT)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default();
    let current = TraceContext::current()
        .map(|c| c.traceparent())
        .unwrap_or_default();
    [sent, current]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_crosses_a_client_server_client_chain() {
    // The back end's handler does not await: answered on the connection's
    // task (`unary_sync`), it sees the call's context as a `unary` one does.
    let back = Server::builder()
        .unary_sync(BACK, |req: Request<Hop>| {
            let mut hop = Hop::default();
            hop.seen.extend(seen(&req));
            Ok(Response::new(hop))
        })
        .build();
    let (back_addr, _stop_back, _t) = support::serve(back).await;
    let onward = Channel::new(back_addr.to_string());
    let front = Server::builder()
        .unary(FRONT, move |req: Request<Hop>| {
            let onward = onward.clone();
            async move {
                let mut hop = Hop::default();
                hop.seen.extend(seen(&req));
                // A call made while handling one carries the trace on.
                let back: Response<Hop> = onward.unary(BACK, Request::new(Hop::default())).await?;
                hop.seen.extend(back.into_inner().seen);
                Ok(Response::new(hop))
            }
        })
        .build();
    let (front_addr, _stop_front, _t) = support::serve(front).await;
    let channel = Channel::new(front_addr.to_string());

    // Outside any trace, nothing is added.
    let plain: Response<Hop> = channel
        .unary(FRONT, Request::new(Hop::default()))
        .await
        .unwrap();
    assert!(
        plain.get_ref().seen.iter().all(String::is_empty),
        "{plain:?}"
    );

    let root = TraceContext::new_root();
    let traced: Response<Hop> = root
        .clone()
        .scope(channel.unary(FRONT, Request::new(Hop::default())))
        .await
        .unwrap();
    let contexts: Vec<TraceContext> = traced
        .get_ref()
        .seen
        .iter()
        .map(|s| TraceContext::parse(s).unwrap_or_else(|| panic!("not a traceparent: {s:?}")))
        .collect();
    let [front_sent, front_own, back_sent, back_own] = contexts.as_slice() else {
        panic!("four contexts: {contexts:?}");
    };
    for c in &contexts {
        assert_eq!(c.trace_id(), root.trace_id(), "one trace throughout");
    }
    // Each hop is a new span: the client call's, the front handler's, its
    // call's, the back handler's.
    let spans: std::collections::HashSet<String> =
        [&root, front_sent, front_own, back_sent, back_own]
            .iter()
            .map(|c| c.span_id())
            .collect();
    assert_eq!(spans.len(), 5, "{contexts:?}");
    // The scope ended with the call.
    assert!(TraceContext::current().is_none());
}

/// Records what it is told.
#[derive(Default, Clone)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    fn has(&self, line: &str) -> bool {
        self.lines().iter().any(|l| l == line)
    }
}

impl Observer for Log {
    fn call_start(&self, call: &CallStart<'_>) {
        let side = format!("{:?}", call.side);
        self.0
            .lock()
            .unwrap()
            .push(format!("start {side} {} {}", call.system, call.method));
    }

    fn call_end(&self, call: &CallEnd<'_>) {
        let side = format!("{:?}", call.side);
        self.0
            .lock()
            .unwrap()
            .push(format!("end {side} {} {}", call.method, call.code.as_str()));
    }

    fn connection(&self, event: &ConnectionEvent<'_>) {
        let line = match event {
            ConnectionEvent::Opened { side, .. } => format!("opened {side:?}"),
            ConnectionEvent::Closed { side, reason, .. } => {
                format!("closed {side:?} {}", reason.as_str())
            }
            ConnectionEvent::ConnectFailed { failures, .. } => format!("connect failed {failures}"),
            _ => "other".to_owned(),
        };
        self.0.lock().unwrap().push(line);
    }
}

fn chain_server(log: &Log) -> Server {
    Server::builder()
        .observer(log.clone())
        .unary(BACK, |_: Request<Hop>| async move {
            Ok(Response::new(Hop::default()))
        })
        .unary(SLOW, |_: Request<Hop>| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(Response::new(Hop::default()))
        })
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_every_call_and_connection() {
    let server_log = Log::default();
    let client_log = Log::default();
    let (addr, stop, task) = support::serve(chain_server(&server_log)).await;
    let channel = Channel::builder(addr.to_string())
        .observer(client_log.clone())
        .build();

    channel
        .unary::<_, Hop>(BACK, Request::new(Hop::default()))
        .await
        .unwrap();
    let err = channel
        .unary::<_, Hop>("/obs.Chain/Missing", Request::new(Hop::default()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    let err = channel
        .unary::<_, Hop>(
            SLOW,
            Request::new(Hop::default()).with_timeout(Duration::from_millis(30)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);

    // A batch: each of its calls is observed.
    let batch = channel
        .unary_batch::<Hop, Hop, _>(BACK, vec![Request::new(Hop::default()); 2])
        .await;
    assert!(batch.iter().all(Result::is_ok));
    let batch_ends = client_log
        .lines()
        .iter()
        .filter(|l| *l == "end Client /obs.Chain/Back OK")
        .count();
    assert_eq!(batch_ends, 3);

    within(10, "the server sees every call end", async {
        while !(server_log.has("end Server /obs.Chain/Back OK")
            && server_log.has("end Server _OTHER UNIMPLEMENTED")
            && server_log
                .lines()
                .iter()
                .any(|l| l.starts_with("end Server /obs.Chain/Slow")))
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(server_log.has("opened Server"));
    assert!(server_log.has("start Server tram /obs.Chain/Back"));
    for line in [
        "opened Client",
        "start Client tram /obs.Chain/Back",
        "end Client /obs.Chain/Back OK",
        "end Client /obs.Chain/Missing UNIMPLEMENTED",
        "end Client /obs.Chain/Slow DEADLINE_EXCEEDED",
    ] {
        assert!(client_log.has(line), "{line}: {:?}", client_log.lines());
    }
    // Every call that started ended, once.
    for log in [&server_log, &client_log] {
        let lines = log.lines();
        let starts = lines.iter().filter(|l| l.starts_with("start")).count();
        let ends = lines.iter().filter(|l| l.starts_with("end")).count();
        assert_eq!(starts, ends, "{lines:?}");
    }

    // The server goes away: the client's connection closes, and its
    // attempts to reconnect fail and back off.
    drop(stop);
    task.await.unwrap();
    within(10, "the client sees its connection close", async {
        while !client_log
            .lines()
            .iter()
            .any(|l| l.starts_with("closed Client"))
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(server_log.has(&format!("closed Server {}", CloseReason::Shutdown.as_str())));
    let err = channel
        .unary::<_, Hop>(BACK, Request::new(Hop::default()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(
        client_log.has("connect failed 1"),
        "{:?}",
        client_log.lines()
    );
    let endpoints = channel.endpoints();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0].state, EndpointState::BackingOff);
    assert_eq!(endpoints[0].failures, 1);
    assert!(endpoints[0].retry_in.is_some());
    assert!(endpoints[0].last_error.is_some());
    assert!(endpoints[0].connection.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_show_live_connections_and_their_calls() {
    let server = chain_server(&Log::default());
    let (addr, _stop, _task) = support::serve(server.clone()).await;
    assert!(server.connections().is_empty());
    let channel = Channel::connect(addr.to_string()).await.unwrap();
    let endpoints = channel.endpoints();
    assert_eq!(endpoints[0].state, EndpointState::Ready);
    assert_eq!(endpoints[0].target, addr.to_string());

    let ch = channel.clone();
    let slow =
        tokio::spawn(async move { ch.unary::<_, Hop>(SLOW, Request::new(Hop::default())).await });
    within(10, "the slow call shows on the server", async {
        loop {
            let conns = server.connections();
            if conns.len() == 1 && conns[0].calls_in_flight == 1 {
                let c = &conns[0];
                assert!(c.bytes_received > 0 && c.bytes_sent > 0, "{c:?}");
                assert_eq!(c.calls_started, 1);
                assert!(!c.going_away);
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let conn = channel.endpoints()[0].connection.clone().unwrap();
    assert_eq!(conn.calls_in_flight, 1);
    assert_eq!(conn.peer, Some(addr));
    assert!(conn.bytes_sent > 0);
    slow.abort();
    drop(channel);
    within(10, "the connection leaves the snapshot", async {
        while !server.connections().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}
