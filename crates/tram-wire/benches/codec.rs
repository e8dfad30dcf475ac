//! Nanoseconds per frame to encode and decode tram's hot frames.
//!
//! `cargo bench -p tram-wire --bench codec`
//!
//! Each benchmark handles a batch of 1,024 frames (as a connection does per
//! read or write under load), so divan's per-iteration figure divided by
//! 1,024 is the cost of one frame; divan prints throughput in items/s too.

use bytes::{Bytes, BytesMut};
use divan::{Bencher, black_box, counter::ItemsCount};
use tram_wire::{
    Call, Code, End, Frame, FrameDecoder, Message, Metadata, encode_call_header,
    encode_message_header,
};

const BATCH: usize = 1024;

fn main() {
    divan::main();
}

fn payload() -> Bytes {
    // A 16-byte payload inside a small protobuf message: id + bytes.
    Bytes::from_static(b"\x08\x2a\x12\x10abcdefghijklmnop")
}

fn sample_frames() -> [(&'static str, Frame); 3] {
    let md = Metadata::builder()
        .ascii("retry-after", "10")
        .and_then(|b| b.binary("cost-bin", &[1, 2, 3]))
        .map(|b| b.build())
        .expect("valid metadata");
    [
        (
            "unary_call",
            Frame::Call(Call {
                call: 5,
                method: 0,
                end_stream: true,
                message: Some(payload()),
                ..Call::default()
            }),
        ),
        (
            "unary_response",
            Frame::Message(Message {
                call: 5,
                end_stream: true,
                metadata: None,
                payload: payload(),
            }),
        ),
        (
            "end_with_trailers",
            Frame::End(End {
                call: 5,
                code: Code::NotFound,
                message: Some("no such key".into()),
                details: None,
                trailers: Some(md),
            }),
        ),
    ]
}

fn frame(name: &str) -> Frame {
    sample_frames()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| f)
        .expect("known frame")
}

const NAMES: [&str; 3] = ["unary_call", "unary_response", "end_with_trailers"];

/// `Frame::encode` of an owned frame into a reused buffer.
#[divan::bench(args = NAMES)]
fn encode(bencher: Bencher<'_, '_>, name: &str) {
    let f = frame(name);
    let mut buf = BytesMut::with_capacity(BATCH * 64);
    bencher.counter(ItemsCount::new(BATCH)).bench_local(|| {
        buf.clear();
        for _ in 0..BATCH {
            black_box(&f).encode(&mut buf);
        }
        black_box(buf.len())
    });
}

/// The hot path: header-only encoders, the message bytes appended after.
#[divan::bench]
fn encode_header_then_payload(bencher: Bencher<'_, '_>) {
    let p = payload();
    let head = Call {
        call: 5,
        method: 0,
        end_stream: true,
        ..Call::default()
    };
    let mut buf = BytesMut::with_capacity(BATCH * 64);
    bencher.counter(ItemsCount::new(BATCH * 2)).bench_local(|| {
        buf.clear();
        for _ in 0..BATCH {
            encode_call_header(&mut buf, black_box(&head), Some(p.len()));
            buf.extend_from_slice(&p);
            encode_message_header(&mut buf, black_box(5), true, p.len());
            buf.extend_from_slice(&p);
        }
        black_box(buf.len())
    });
}

/// Decoding a read buffer holding 1,024 frames of one kind.
#[divan::bench(args = NAMES)]
fn decode(bencher: Bencher<'_, '_>, name: &str) {
    let f = frame(name);
    let mut wire = BytesMut::new();
    for _ in 0..BATCH {
        f.encode(&mut wire);
    }
    let wire = wire.freeze();
    let mut dec = FrameDecoder::new(1 << 20);
    bencher
        .counter(ItemsCount::new(BATCH))
        .with_inputs(|| BytesMut::from(&wire[..]))
        .bench_local_refs(|buf| {
            let mut n = 0;
            while let Ok(Some(frame)) = dec.decode(buf) {
                black_box(frame);
                n += 1;
            }
            assert_eq!(n, BATCH);
        });
}

/// A stream's messages: 1,024 plain MESSAGE frames of one call (no
/// END_STREAM), each handed out as an owned payload. `frame_by_frame`
/// decodes each as a `Frame`; `as_a_run` takes them all with
/// `decode_run` and then takes each payload off the run, as tram's client
/// and server receive a stream.
#[divan::bench(args = ["frame_by_frame", "as_a_run"])]
fn decode_stream_messages(bencher: Bencher<'_, '_>, how: &str) {
    let f = Frame::Message(Message {
        call: 5,
        end_stream: false,
        metadata: None,
        payload: payload(),
    });
    let mut wire = BytesMut::new();
    for _ in 0..BATCH {
        f.encode(&mut wire);
    }
    let wire = wire.freeze();
    let mut dec = FrameDecoder::new(1 << 20);
    let runs = how == "as_a_run";
    bencher
        .counter(ItemsCount::new(BATCH))
        .with_inputs(|| BytesMut::from(&wire[..]))
        .bench_local_refs(|buf| {
            let mut n = 0;
            if runs {
                while let Some(run) = dec.decode_run(buf) {
                    for payload in run {
                        black_box(payload);
                        n += 1;
                    }
                }
            } else {
                while let Ok(Some(frame)) = dec.decode(buf) {
                    black_box(frame);
                    n += 1;
                }
            }
            assert_eq!(n, BATCH);
        });
}
