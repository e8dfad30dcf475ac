//! Drives a tram RPC client's connection state machine with an arbitrary
//! server: the fuzz input is everything the "server" writes on an in-memory
//! pipe (its preface, frames drawn from small ranges so that they hit the
//! client's calls, raw bytes), while the client runs one call of each kind,
//! one of them with a deadline, the clock paused. Checks: no panic; every
//! call ends once the server's input has ended (whatever it said, no call
//! hangs); everything the client writes is a well-formed preface and
//! frames, and it closes its side while the channel is still alive.
#![no_main]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::{Bytes, BytesMut};
use common::{Num, metadata};
use libfuzzer_sys::fuzz_target;
use tokio::io::DuplexStream;
use tram::wire::{self, Frame, Settings};
use tram::{Channel, Request, Status};

const METHODS: [&str; 5] = [
    "/f.S/Unary",
    "/f.S/Timed",
    "/f.S/Count",
    "/f.S/Sum",
    "/f.S/Chat",
];

/// A server frame with its fields drawn from small ranges.
#[derive(Arbitrary, Debug)]
enum Step {
    Settings {
        max_calls: u8,
        credit: u8,
    },
    Message {
        call: u8,
        end: bool,
        md: bool,
        n: u64,
        garbage: bool,
    },
    End {
        call: u8,
        code: u8,
        trailers: bool,
    },
    Credit {
        call: u8,
        n: u32,
    },
    Ping {
        ack: bool,
    },
    GoAway {
        last: u8,
    },
    /// Frames only a client sends: a protocol error from a server.
    Call {
        call: u8,
    },
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    preface: bool,
    steps: Vec<Step>,
}

fn encode(input: &Input) -> BytesMut {
    let mut b = common::hello(input.preface);
    for step in &input.steps {
        let frame = match step {
            Step::Settings { max_calls, credit } => Frame::Settings(Settings {
                max_concurrent_calls: u32::from(*max_calls).max(1),
                initial_credit: u32::from(*credit).max(1),
                ..Settings::DEFAULT
            }),
            Step::Message {
                call,
                end,
                md,
                n,
                garbage,
            } => Frame::Message(wire::Message {
                call: u32::from(call % 8),
                end_stream: *end,
                metadata: md.then(metadata),
                payload: if *garbage {
                    // Not a `Num`: the call fails to decode it.
                    Bytes::from_static(&[0xff, 0xff, 0xff])
                } else {
                    Bytes::from(prost::Message::encode_to_vec(&Num { n: *n }))
                },
            }),
            Step::End {
                call,
                code,
                trailers,
            } => {
                let mut end = wire::End::new(
                    u32::from(call % 8),
                    wire::Code::from_u64(u64::from(code % 17)).unwrap_or(wire::Code::Unknown),
                );
                end.trailers = trailers.then(metadata);
                Frame::End(end)
            }
            Step::Credit { call, n } => Frame::Credit(wire::Credit {
                call: u32::from(call % 8),
                n: *n,
            }),
            Step::Ping { ack } => Frame::Ping(wire::Ping {
                ack: *ack,
                payload: [7; 8],
            }),
            Step::GoAway { last } => Frame::GoAway(wire::GoAway {
                last_call_seq: u64::from(*last % 8),
                reason: wire::Reason::NO_ERROR,
                message: String::new(),
            }),
            Step::Call { call } => Frame::Call(wire::Call {
                call: u32::from(call % 8),
                method: 0,
                end_stream: true,
                timeout_micros: None,
                metadata: None,
                message: None,
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

/// One call of each kind on `ch`; each ends with any outcome.
async fn workload(ch: Channel) {
    let unary = async {
        ch.unary::<_, Num>(METHODS[0], Request::new(Num { n: 1 }))
            .await
            .map(drop)
    };
    let timed = async {
        let r = Request::new(Num { n: 2 }).with_timeout(Duration::from_millis(50));
        ch.unary::<_, Num>(METHODS[1], r).await.map(drop)
    };
    let stream = async {
        let mut s = ch
            .server_streaming::<_, Num>(METHODS[2], Request::new(Num { n: 3 }))
            .await?;
        while s.message().await?.is_some() {}
        Ok::<(), Status>(())
    };
    let sink = async {
        let mut k = ch
            .client_stream_sink::<Num, Num>(METHODS[3], Request::new(()))
            .await?;
        for n in 0..3 {
            k.send(Num { n }).await?;
        }
        k.finish().await.map(drop)
    };
    let bidi = async {
        let (mut tx, mut rx) = ch
            .bidi_stream_sink::<Num, Num>(METHODS[4], Request::new(()))
            .await?;
        tx.send(Num { n: 1 }).await?;
        tx.close();
        while rx.message().await?.is_some() {}
        Ok::<(), Status>(())
    };
    let _ = tokio::join!(unary, timed, stream, sink, bidi);
}

fuzz_target!(|input: Input| {
    let bytes = encode(&input);
    let rt = common::paused_runtime();
    rt.block_on(async move {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        // One connection: a reconnect attempt fails at once.
        let pipe: Arc<Mutex<Option<DuplexStream>>> = Arc::new(Mutex::new(Some(client_io)));
        let ch = Channel::builder("fuzz")
            .connector(move || {
                let io = pipe.lock().expect("lock").take();
                async move { io.ok_or_else(|| std::io::Error::other("one connection only")) }
            })
            .build();
        // The channel stays alive throughout: the client must close the
        // connection on its own once the server's side has ended or
        // misbehaved, not only when it is dropped.
        let work = tokio::spawn(workload(ch.clone()));
        let out = common::exchange(server_io, &bytes).await;
        drop(ch);
        tokio::time::timeout(Duration::from_secs(24 * 3600), work)
            .await
            .expect("every call ends after the server's input ends")
            .expect("no panic");
        // What the client wrote, and then closed.
        common::assert_well_formed(&out, "client");
    });
});
