//! Drives a tram RPC server's connection state machine with arbitrary frame
//! sequences over an in-memory pipe, the clock paused (so deadlines and
//! handler sleeps run instantly). Checks: no panic; everything the server
//! writes is a well-formed preface and frames; once the input ends the
//! connection finishes (no hang, whatever state the calls were left in).
#![no_main]

mod common;

use std::net::SocketAddr;
use std::sync::LazyLock;
use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::{Bytes, BytesMut};
use common::{Count, Num};
use libfuzzer_sys::fuzz_target;
use tram::rpc::{Request, Response, Server, Streaming};
use tram::wire::{self, Frame, Settings};

const METHODS: [&str; 5] = [
    "/f.S/Unary",
    "/f.S/Sleep",
    "/f.S/Count",
    "/f.S/Sum",
    "/f.S/Chat",
];

static SERVER: LazyLock<Server> = LazyLock::new(|| {
    Server::builder()
        .max_concurrent_calls(8)
        .unary(METHODS[0], |r: Request<Num>| async move {
            Ok(Response::new(r.into_inner()))
        })
        .unary(METHODS[1], |r: Request<Num>| async move {
            tokio::time::sleep(Duration::from_millis(r.get_ref().n % 10_000)).await;
            Ok(Response::new(r.into_inner()))
        })
        .server_streaming(METHODS[2], |r: Request<Num>| async move {
            Ok(Response::new(Count(r.get_ref().n % 200)))
        })
        .client_streaming(METHODS[3], |r: Request<Streaming<Num>>| async move {
            let mut s = r.into_inner();
            let mut sum = 0u64;
            while let Some(m) = s.message().await? {
                sum = sum.wrapping_add(m.n);
            }
            Ok(Response::new(Num { n: sum }))
        })
        .bidi_streaming(METHODS[4], |r: Request<Streaming<Num>>| async move {
            let mut s = r.into_inner();
            let mut n = 0;
            while s.message().await?.is_some() {
                n += 1;
            }
            Ok(Response::new(Count(n)))
        })
        .build()
});

/// A frame with its fields drawn from small ranges, so that sequences hit
/// the same calls and methods often.
#[derive(Arbitrary, Debug)]
enum Step {
    Settings,
    Bind {
        method: u8,
        route: u8,
    },
    Call {
        call: u8,
        method: u8,
        end: bool,
        timeout_ms: Option<u16>,
        n: Option<u64>,
        metadata: bool,
    },
    Message {
        call: u8,
        end: bool,
        md: bool,
        n: u64,
    },
    End {
        call: u8,
    },
    Cancel {
        call: u8,
    },
    Credit {
        call: u8,
        n: u32,
    },
    Ping {
        ack: bool,
    },
    GoAway,
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    preface: bool,
    steps: Vec<Step>,
}

fn encode_num(n: u64) -> Bytes {
    Bytes::from(prost::Message::encode_to_vec(&Num { n }))
}

fn encode(input: &Input) -> BytesMut {
    let mut b = common::hello(input.preface);
    for step in &input.steps {
        let frame = match step {
            Step::Settings => Frame::Settings(Settings::DEFAULT),
            Step::Bind { method, route } => Frame::Bind(wire::Bind {
                method: u32::from(method % 8),
                name: METHODS[usize::from(*route) % METHODS.len()].to_owned(),
            }),
            Step::Call {
                call,
                method,
                end,
                timeout_ms,
                n,
                metadata,
            } => Frame::Call(wire::Call {
                call: u32::from(call % 16),
                method: u32::from(method % 8),
                end_stream: *end,
                timeout_micros: timeout_ms.map(|t| u64::from(t) * 1000),
                metadata: metadata.then(common::metadata),
                message: n.map(encode_num),
            }),
            Step::Message { call, end, md, n } => Frame::Message(wire::Message {
                call: u32::from(call % 16),
                end_stream: *end,
                // Leading metadata is the server's: from a client it is a
                // protocol error the server must survive.
                metadata: md.then(common::metadata),
                payload: encode_num(*n),
            }),
            Step::End { call } => Frame::End(wire::End::new(u32::from(call % 16), wire::Code::Ok)),
            Step::Cancel { call } => Frame::Cancel(wire::Cancel {
                call: u32::from(call % 16),
                code: wire::Code::Cancelled,
            }),
            Step::Credit { call, n } => Frame::Credit(wire::Credit {
                call: u32::from(call % 16),
                n: *n,
            }),
            Step::Ping { ack } => Frame::Ping(wire::Ping {
                ack: *ack,
                payload: [7; 8],
            }),
            Step::GoAway => Frame::GoAway(wire::GoAway {
                last_call_seq: 0,
                reason: wire::Reason::NO_ERROR,
                message: String::new(),
            }),
            Step::Raw(bytes) => {
                b.extend_from_slice(bytes);
                continue;
            }
        };
        frame.encode(&mut b);
    }
    b
}

fuzz_target!(|input: Input| {
    let bytes = encode(&input);
    let rt = common::paused_runtime();
    rt.block_on(async move {
        let (mut client, server_io) = tokio::io::duplex(16 * 1024);
        let peer = SocketAddr::from(([127, 0, 0, 1], 1));
        let serve = tokio::spawn(async move { SERVER.serve_connection(server_io, peer).await });
        let out = common::exchange(&mut client, &bytes).await;
        // The server finishes once the input has ended.
        tokio::time::timeout(Duration::from_secs(24 * 3600), serve)
            .await
            .expect("the connection finishes after the input ends")
            .expect("no panic")
            .ok();
        common::assert_well_formed(&out, "server");
    });
});
