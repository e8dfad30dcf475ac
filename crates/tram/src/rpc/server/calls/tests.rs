//! The server's call table, driven by frames and checked against a
//! recorder of its effects.

use std::collections::HashMap;

use tram_wire::{Bind, Cancel, End};

use super::*;
use crate::rpc::exec::BoxFuture;
use crate::rpc::server::handler::IncomingCall;

/// Records what the table asks for; handlers "run" until told.
#[derive(Default)]
struct Recorder {
    started: Vec<(Box<str>, CallId)>,
    sent: Vec<Frame>,
    cancelled: Vec<usize>,
    /// Whether started handlers keep running (get a task key).
    running: bool,
}

impl Effects for Recorder {
    fn start(&mut self, route: &Route, call: Accepted) -> Option<usize> {
        self.started.push((route.name.clone(), call.call));
        self.running.then_some(call.call as usize + 100)
    }
    fn send(&mut self, frame: Frame) {
        self.sent.push(frame);
    }
    fn cancel(&mut self, task: usize) {
        self.cancelled.push(task);
    }
}

fn route(name: &str, kind: MethodKind) -> Arc<Route> {
    let handler = |_: IncomingCall| -> BoxFuture { Box::pin(async {}) };
    Arc::new(Route {
        name: name.into(),
        kind,
        handler: Box::new(handler),
        inline: None,
        observed: std::sync::OnceLock::new(),
    })
}

fn table(max_calls: u32) -> ServerCalls {
    let mut routes = HashMap::new();
    routes.insert(
        "/t.T/Unary".to_owned(),
        route("/t.T/Unary", MethodKind::Unary),
    );
    routes.insert("/t.T/Bidi".to_owned(), route("/t.T/Bidi", MethodKind::Bidi));
    let settings = Settings {
        max_concurrent_calls: max_calls,
        ..Settings::DEFAULT
    };
    let peer = Peer {
        addr: "127.0.0.1:1".parse().expect("address"),
        certificates: None,
    };
    let mut calls = ServerCalls::new(Arc::new(Routes(routes)), settings, false, None, peer);
    calls.peer_settings = Some(Settings::DEFAULT);
    calls
}

fn bind(calls: &mut ServerCalls, fx: &mut Recorder, method: u32, name: &str) {
    let bind = Frame::Bind(Bind {
        method,
        name: name.into(),
    });
    calls.frame(bind, fx).expect("binds");
}

fn call(id: CallId, method: u32, end_stream: bool) -> Frame {
    Frame::Call(Call {
        call: id,
        method,
        end_stream,
        timeout_micros: None,
        metadata: None,
        message: end_stream.then(|| Bytes::from_static(b"x")),
    })
}

#[test]
fn a_unary_call_answered_at_once_never_enters_the_table() {
    let (mut calls, mut fx) = (table(8), Recorder::default());
    bind(&mut calls, &mut fx, 0, "/t.T/Unary");
    calls.frame(call(1, 0, true), &mut fx).unwrap();
    assert_eq!(fx.started, vec![("/t.T/Unary".into(), 1)]);
    assert!(calls.is_empty());
    // So its id may come again at once.
    calls.frame(call(1, 0, true), &mut fx).unwrap();
    assert_eq!(fx.started.len(), 2);
}

#[test]
fn unknown_methods_and_the_call_limit_are_refused_with_end() {
    let (mut calls, mut fx) = (table(1), Recorder::default());
    fx.running = true;
    bind(&mut calls, &mut fx, 0, "/t.T/Unary");
    bind(&mut calls, &mut fx, 1, "/t.T/Nope");
    calls.frame(call(1, 1, true), &mut fx).unwrap();
    calls.frame(call(2, 0, true), &mut fx).unwrap();
    calls.frame(call(3, 0, true), &mut fx).unwrap();
    let codes: Vec<_> = fx
        .sent
        .iter()
        .map(|f| match f {
            Frame::End(e) => (e.call, e.code),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        codes,
        vec![(1, Code::Unimplemented), (3, Code::ResourceExhausted)]
    );
    assert_eq!(fx.started, vec![("/t.T/Unary".into(), 2)]);
}

#[test]
fn protocol_violations_are_errors() {
    let (mut calls, mut fx) = (table(8), Recorder::default());
    fx.running = true;
    assert!(calls.frame(call(1, 0, true), &mut fx).is_err(), "unbound");
    bind(&mut calls, &mut fx, 0, "/t.T/Unary");
    let twice = Frame::Bind(Bind {
        method: 0,
        name: "/t.T/Unary".into(),
    });
    assert!(calls.frame(twice, &mut fx).is_err(), "bound twice");
    calls.frame(call(1, 0, true), &mut fx).unwrap();
    assert!(
        calls.frame(call(1, 0, true), &mut fx).is_err(),
        "duplicate id"
    );
    let end = Frame::End(End::new(7, Code::Ok));
    assert!(calls.frame(end, &mut fx).is_err(), "END on no call");
}

#[test]
fn a_cancel_drops_the_handler_and_ends_the_call() {
    let (mut calls, mut fx) = (table(8), Recorder::default());
    fx.running = true;
    bind(&mut calls, &mut fx, 0, "/t.T/Bidi");
    calls.frame(call(4, 0, false), &mut fx).unwrap();
    let cancel = Frame::Cancel(Cancel {
        call: 4,
        code: Code::Cancelled,
    });
    calls.frame(cancel.clone(), &mut fx).unwrap();
    assert_eq!(fx.cancelled, vec![104]);
    assert!(matches!(fx.sent.as_slice(), [Frame::End(e)] if e.call == 4));
    assert!(calls.is_empty());
    // A CANCEL that crossed the call's end is ignored.
    calls.frame(cancel, &mut fx).unwrap();
    assert_eq!(fx.sent.len(), 1);
}

#[test]
fn going_away_accepts_no_new_calls() {
    let (mut calls, mut fx) = (table(8), Recorder::default());
    bind(&mut calls, &mut fx, 0, "/t.T/Unary");
    let goaway = calls.go_away(Reason::NO_ERROR, "bye");
    assert!(matches!(goaway, Some(Frame::GoAway(g)) if g.last_call_seq == 0));
    assert!(calls.go_away(Reason::NO_ERROR, "again").is_none());
    calls.frame(call(1, 0, true), &mut fx).unwrap();
    assert!(fx.started.is_empty() && fx.sent.is_empty());
}
