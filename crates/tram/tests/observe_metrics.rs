//! The built-in metrics, captured by a recorder, after known calls over
//! loopback TCP: names, attributes and values for calls that succeed, fail,
//! are cancelled, miss their deadline, or name a method the server does not
//! have (from a raw peer), and the number of series under a flood of random
//! method names.
//!
//! One test in its own binary: the recorder is process-wide, and reading
//! it drains it.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tram::wire::{self, Frame, FrameDecoder, Settings};
use tram::{Channel, Code, Request, Response, Server, Status};

#[derive(Clone, PartialEq, prost::Message)]
struct Echo {
    #[prost(string, tag = "1")]
    text: String,
}

const OK: &str = "/obs.Test/Ok";
const FAIL: &str = "/obs.Test/Fail";
const SLOW: &str = "/obs.Test/Slow";
const STREAM: &str = "/obs.Test/Stream";

/// Every value recorded so far, summed over snapshots (a snapshot drains
/// the recorder).
struct Recorded {
    snapshotter: Snapshotter,
    counters: HashMap<Series, u64>,
    gauges: HashMap<Series, f64>,
    histograms: HashMap<Series, Vec<f64>>,
}

/// A metric's name and its attributes, sorted.
type Series = (String, Vec<(String, String)>);

impl Recorded {
    fn refresh(&mut self) {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<_> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let series = (key.name().to_owned(), labels);
            match value {
                DebugValue::Counter(n) => *self.counters.entry(series).or_default() += n,
                DebugValue::Gauge(g) => *self.gauges.entry(series).or_default() += g.0,
                DebugValue::Histogram(vs) => self
                    .histograms
                    .entry(series)
                    .or_default()
                    .extend(vs.into_iter().map(|v| v.0)),
            }
        }
    }

    /// The series of `name` whose attributes include all of `with`.
    fn matching<'a, V>(
        map: &'a HashMap<Series, V>,
        name: &str,
        with: &[(&str, &str)],
    ) -> Vec<(&'a Series, &'a V)> {
        map.iter()
            .filter(|((n, labels), _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .collect()
    }

    fn counter(&self, name: &str, with: &[(&str, &str)]) -> u64 {
        Self::matching(&self.counters, name, with)
            .into_iter()
            .map(|(_, v)| *v)
            .sum()
    }

    fn gauge(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        Self::matching(&self.gauges, name, with)
            .into_iter()
            .map(|(_, v)| *v)
            .sum()
    }

    fn histogram(&self, name: &str, with: &[(&str, &str)]) -> Vec<f64> {
        Self::matching(&self.histograms, name, with)
            .into_iter()
            .flat_map(|(_, v)| v.iter().copied())
            .collect()
    }

    /// The values of attribute `attr` across every series of `name`.
    fn attribute_values(&self, name: &str, attr: &str) -> BTreeSet<String> {
        let names = self
            .counters
            .keys()
            .chain(self.gauges.keys())
            .chain(self.histograms.keys());
        names
            .filter(|(n, _)| n == name)
            .flat_map(|(_, labels)| labels.iter().filter(|(k, _)| k == attr))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Waits (refreshing) until `done` holds: the server records a call's
    /// end as it answers, a moment after the client may have seen it.
    async fn until(&mut self, what: &str, done: impl Fn(&Recorded) -> bool) {
        within(10, what, async {
            loop {
                self.refresh();
                if done(self) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }
}

/// The test server, recording message sizes with `sizes`.
fn server(sizes: bool) -> Server {
    Server::builder()
        .message_size_metrics(sizes)
        .unary(OK, |req: Request<Echo>| async move {
            Ok(Response::new(req.into_inner()))
        })
        .unary(FAIL, |_: Request<Echo>| async move {
            Err::<Response<Echo>, _>(Status::not_found("no such thing"))
        })
        .unary(SLOW, |req: Request<Echo>| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(Response::new(req.into_inner()))
        })
        .server_streaming(STREAM, |req: Request<Echo>| async move {
            let text = req.into_inner().text;
            let items = (0..3).map(move |i| {
                Ok(Echo {
                    text: format!("{text}{i}"),
                })
            });
            Ok(Response::new(tokio_stream_iter(items)))
        })
        .build()
}

/// A stream of the iterator's items, ready at once.
fn tokio_stream_iter<I: Iterator + Unpin>(items: I) -> impl futures_core::Stream<Item = I::Item> {
    struct Iter<I>(I);
    impl<I: Iterator + Unpin> futures_core::Stream for Iter<I> {
        type Item = I::Item;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<I::Item>> {
            std::task::Poll::Ready(self.0.next())
        }
    }
    Iter(items)
}

const SERVER: (&str, &str) = ("rpc.system.name", "tram");

fn method(m: &str) -> (&str, &str) {
    ("rpc.method", m)
}

fn status(code: Code) -> (&'static str, &'static str) {
    ("rpc.response.status_code", code.as_str())
}

/// Opens a raw tram connection: preface and SETTINGS sent, nothing read.
async fn raw(addr: std::net::SocketAddr, frames: &[Frame]) -> TcpStream {
    let mut b = BytesMut::new();
    b.extend_from_slice(&wire::preface::PREFACE);
    Frame::Settings(Settings::DEFAULT).encode(&mut b);
    for f in frames {
        f.encode(&mut b);
    }
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&b).await.unwrap();
    s
}

/// Reads frames until `n` END frames have arrived; their codes.
async fn ends(s: &mut TcpStream, n: usize) -> Vec<Code> {
    let mut buf = BytesMut::new();
    let mut dec = FrameDecoder::new(Settings::DEFAULT.max_frame_size);
    let mut skipped_preface = false;
    let mut codes = Vec::new();
    within(10, "the server's END frames", async {
        while codes.len() < n {
            assert!(s.read_buf(&mut buf).await.unwrap() > 0, "closed early");
            if !skipped_preface && buf.len() >= wire::preface::PREFACE.len() {
                let _ = buf.split_to(wire::preface::PREFACE.len());
                skipped_preface = true;
            }
            if !skipped_preface {
                continue;
            }
            while let Some(frame) = dec.decode(&mut buf).unwrap() {
                if let Frame::End(e) = frame {
                    codes.push(e.code);
                }
            }
        }
    })
    .await;
    codes
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

fn bind(method: u32, name: &str) -> Frame {
    Frame::Bind(wire::Bind {
        method,
        name: name.into(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_name_and_count_every_kind_of_call() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let mut rec = Recorded {
        snapshotter,
        counters: HashMap::new(),
        gauges: HashMap::new(),
        histograms: HashMap::new(),
    };
    let (addr, _stop, _task) = support::serve(server(true)).await;
    let channel = Channel::builder(addr.to_string())
        .message_size_metrics(true)
        .connect()
        .await
        .unwrap();
    let hello = Echo {
        text: "hello".into(),
    };
    let hello_len = prost::Message::encoded_len(&hello) as f64;

    // Three calls that succeed.
    for _ in 0..3 {
        let r: Response<Echo> = channel
            .unary(OK, Request::new(hello.clone()))
            .await
            .unwrap();
        assert_eq!(r.get_ref().text, "hello");
    }
    let ok = [SERVER, method(OK), status(Code::Ok)];
    rec.until("three OK calls on the server", |r| {
        r.histogram("rpc.server.call.duration", &ok).len() == 3
    })
    .await;
    assert_eq!(
        rec.counter("rpc.server.calls.started", &[SERVER, method(OK)]),
        3
    );
    assert_eq!(rec.counter("rpc.client.calls.started", &[method(OK)]), 3);
    let client_ok = rec.histogram("rpc.client.call.duration", &[method(OK), status(Code::Ok)]);
    assert_eq!(client_ok.len(), 3);
    let server_ok = rec.histogram("rpc.server.call.duration", &ok);
    assert!(
        server_ok.iter().all(|d| *d > 0.0 && *d < 10.0),
        "{server_ok:?}"
    );
    for side in ["server", "client"] {
        for what in ["request", "response"] {
            let sizes = rec.histogram(&format!("rpc.{side}.{what}.size"), &[method(OK)]);
            assert_eq!(sizes, vec![hello_len; 3], "{side} {what} sizes");
        }
    }
    // No error attribute on success.
    assert!(
        rec.attribute_values("rpc.server.call.duration", "error.type")
            .is_empty()
    );

    // A call that fails: its code, and the error type.
    let err = channel
        .unary::<_, Echo>(FAIL, Request::new(hello.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let failed = [
        method(FAIL),
        status(Code::NotFound),
        ("error.type", "NOT_FOUND"),
    ];
    rec.until("the failed call on the server", |r| {
        r.histogram("rpc.server.call.duration", &failed).len() == 1
    })
    .await;
    assert_eq!(rec.histogram("rpc.client.call.duration", &failed).len(), 1);

    // A call whose deadline passes: the client says DEADLINE_EXCEEDED; the
    // server, whichever of its own deadline and the client's CANCEL comes
    // first.
    let err = channel
        .unary::<_, Echo>(
            SLOW,
            Request::new(hello.clone()).with_timeout(Duration::from_millis(50)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
    rec.until("the late call's end on the server", |r| {
        r.histogram("rpc.server.call.duration", &[method(SLOW)])
            .len()
            == 1
    })
    .await;
    let exceeded = [method(SLOW), status(Code::DeadlineExceeded)];
    assert_eq!(
        rec.histogram("rpc.client.call.duration", &exceeded).len(),
        1
    );
    let server_codes = rec.attribute_values("rpc.server.call.duration", "rpc.response.status_code");
    assert!(
        server_codes.contains("DEADLINE_EXCEEDED") || server_codes.contains("CANCELLED"),
        "{server_codes:?}"
    );

    // A call the client abandons: CANCELLED on both sides.
    let ch = channel.clone();
    let req = hello.clone();
    let abandoned = tokio::spawn(async move {
        let _ = ch.unary::<_, Echo>(SLOW, Request::new(req)).await;
    });
    rec.until("the abandoned call running on the server", |r| {
        r.gauge("rpc.server.calls.active", &[method(SLOW)]) == 1.0
    })
    .await;
    abandoned.abort();
    let cancelled = [method(SLOW), status(Code::Cancelled)];
    rec.until("the abandoned call cancelled on the server", |r| {
        r.gauge("rpc.server.calls.active", &[method(SLOW)]) == 0.0
            && r.histogram("rpc.client.call.duration", &cancelled).len() == 1
            && !r
                .histogram("rpc.server.call.duration", &cancelled)
                .is_empty()
    })
    .await;

    // A server stream: each response message's size.
    let mut stream = channel
        .server_streaming::<_, Echo>(STREAM, Request::new(hello.clone()))
        .await
        .unwrap();
    let mut got = 0;
    while let Some(m) = stream.message().await.unwrap() {
        assert!(m.text.starts_with("hello"));
        got += 1;
    }
    assert_eq!(got, 3);
    rec.until("the stream's end on the server", |r| {
        r.histogram("rpc.server.call.duration", &[method(STREAM)])
            .len()
            == 1
    })
    .await;
    assert_eq!(
        rec.histogram("rpc.server.response.size", &[method(STREAM)])
            .len(),
        3
    );
    assert_eq!(
        rec.histogram("rpc.client.response.size", &[method(STREAM)])
            .len(),
        3
    );
    assert_eq!(
        rec.histogram(
            "rpc.client.call.duration",
            &[method(STREAM), status(Code::Ok)]
        )
        .len(),
        1
    );

    // An unknown method, from a raw peer: counted as `_OTHER`.
    let mut peer = raw(addr, &[bind(1, "/no.Such/Method"), call(1, 1)]).await;
    assert_eq!(ends(&mut peer, 1).await, vec![Code::Unimplemented]);
    let other = [method("_OTHER"), status(Code::Unimplemented)];
    rec.until("the unknown method counted", |r| {
        r.histogram("rpc.server.call.duration", &other).len() == 1
    })
    .await;

    // A flood of random method names from a raw peer: still `_OTHER`.
    let mut frames = Vec::new();
    for i in 1..=500u32 {
        frames.push(bind(
            i,
            &format!("/flood.F{:x}/M{i}", i.wrapping_mul(2_654_435_761)),
        ));
        frames.push(call(i, i));
    }
    let mut flood = raw(addr, &frames).await;
    let codes = ends(&mut flood, 500).await;
    assert!(codes.iter().all(|c| *c == Code::Unimplemented));
    rec.until("the flood counted", |r| {
        r.histogram("rpc.server.call.duration", &other).len() == 501
    })
    .await;
    let methods = rec.attribute_values("rpc.server.calls.started", "rpc.method");
    let expected: BTreeSet<String> = [OK, FAIL, SLOW, STREAM, "_OTHER"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(methods, expected);
    let series = rec
        .histograms
        .keys()
        .filter(|(n, _)| n == "rpc.server.call.duration")
        .count();
    assert!(series <= 12, "{series} duration series");

    // Nothing is left in flight; connections and their bytes are counted.
    rec.refresh();
    for m in [OK, FAIL, SLOW, STREAM, "_OTHER"] {
        assert_eq!(
            rec.gauge("rpc.server.calls.active", &[method(m)]),
            0.0,
            "{m}"
        );
        assert_eq!(
            rec.gauge("rpc.client.calls.active", &[method(m)]),
            0.0,
            "{m}"
        );
    }
    let server_side = [("side", "server")];
    assert!(rec.counter("tram.connections.opened", &server_side) >= 3);
    assert!(rec.counter("tram.connection.bytes.received", &server_side) > 0);
    assert!(rec.counter("tram.connection.bytes.sent", &server_side) > 0);
    assert_eq!(
        rec.counter("tram.connections.opened", &[("side", "client")]),
        1
    );
    assert_eq!(rec.counter("tram.client.connect.attempts", &[]), 1);
    drop((peer, flood));
    rec.until("the raw peers' connections closed", |r| {
        r.counter(
            "tram.connections.closed",
            &[("side", "server"), ("reason", "normal")],
        ) >= 2
    })
    .await;

    // By default, message sizes are not recorded: a call between a server
    // and a channel built without `message_size_metrics` adds a duration
    // on each side and no size.
    let (addr, _stop, _task) = support::serve(server(false)).await;
    let plain = Channel::connect(addr.to_string()).await.unwrap();
    let _: Response<Echo> = plain.unary(OK, Request::new(hello.clone())).await.unwrap();
    rec.until("the default pair's call on both sides", |r| {
        r.histogram("rpc.server.call.duration", &ok).len() == 4
            && r.histogram("rpc.client.call.duration", &[method(OK), status(Code::Ok)])
                .len()
                == 4
    })
    .await;
    for side in ["server", "client"] {
        for what in ["request", "response"] {
            let sizes = rec.histogram(&format!("rpc.{side}.{what}.size"), &[method(OK)]);
            assert_eq!(sizes.len(), 3, "{side} {what} sizes");
        }
    }
}
