//! Nanoseconds to decode and encode a message with tram-build's codec for
//! flat messages and with prost-build's derive, message shape by shape:
//! `Keyed` (the shape of most requests: a number and `bytes`), `Flat`
//! (every kind of singular field), `Present` (`optional` fields),
//! `Holder` (flat messages as fields), `Listed` (repeated numbers and
//! strings), `Batch` (repeated messages and `bytes`) and `Choice` (two
//! oneofs, one holding a message).
//!
//! `cargo bench -p tram-examples --bench flat_codec`
//!
//! Each figure is one message, decoded from a `Bytes` as tram's reader
//! hands it over, or encoded into a reused buffer.

use bytes::{Bytes, BytesMut};
use divan::{Bencher, black_box};
use prost::Message;

#[allow(missing_docs, unreachable_pub, dead_code, clippy::all)]
mod tram_pb {
    include!(concat!(env!("OUT_DIR"), "/fields/fields.rs"));
}

#[allow(missing_docs, unreachable_pub, dead_code, clippy::all)]
mod prost_pb {
    include!(concat!(env!("OUT_DIR"), "/prost/fields.rs"));
}

fn main() {
    divan::main();
}

/// The wire bytes of each shape, as prost-build writes them.
fn wire(shape: &str) -> Bytes {
    let keyed = prost_pb::Keyed {
        id: 42,
        value: Bytes::from_static(b"abcdefghijklmnop"),
    };
    let present = prost_pb::Present {
        id: Some(7),
        delta: Some(-3),
        flag: Some(true),
        real: None,
        check: Some(9),
        name: Some("name".into()),
        blob: Some(Bytes::from_static(b"blob")),
        plain: 5,
    };
    let bytes = match shape {
        "keyed" => keyed.encode_to_vec(),
        "flat" => prost_pb::Flat {
            u64: 1,
            i32: -2,
            s64: -3,
            flag: true,
            f64: 4,
            real: 0.5,
            text: "text".into(),
            blob: Bytes::from_static(b"blob"),
            shade: 1,
            ..Default::default()
        }
        .encode_to_vec(),
        "present" => present.encode_to_vec(),
        "holder" => prost_pb::Holder {
            key: Some(keyed),
            n: 3,
            present: Some(present),
            tail: Bytes::from_static(b"tail"),
        }
        .encode_to_vec(),
        "listed" => prost_pb::Listed {
            ids: vec![1, 2, 300, 40_000, 5_000_000],
            deltas: vec![-1, 2, -3],
            reals: vec![0.5, 1.5],
            names: vec!["alpha".into(), "beta".into(), "gamma".into()],
            loose: vec![7, 8],
            plain: 9,
            tail: Bytes::from_static(b"tail"),
            ..Default::default()
        }
        .encode_to_vec(),
        "batch" => prost_pb::Batch {
            keys: (1..=4)
                .map(|id| prost_pb::Keyed {
                    id,
                    value: Bytes::from_static(b"abcdefghijklmnop"),
                })
                .collect(),
            blobs: vec![Bytes::from_static(b"blob"); 3],
            n: 5,
            ..Default::default()
        }
        .encode_to_vec(),
        "choice" => prost_pb::Choice {
            id: 9,
            pick: Some(prost_pb::choice::Pick::Key(keyed)),
            tail: Bytes::from_static(b"tail"),
            other: Some(prost_pb::choice::Other::Check(7)),
        }
        .encode_to_vec(),
        other => unreachable!("no shape {other}"),
    };
    Bytes::from(bytes)
}

const SHAPES: [&str; 7] = [
    "keyed", "flat", "present", "holder", "listed", "batch", "choice",
];

/// Decodes `shape` as `M` from a fresh `Bytes` (a clone of one buffer).
fn decode<M: Message + Default>(bencher: Bencher<'_, '_>, shape: &str) {
    let wire = wire(shape);
    bencher.bench_local(|| M::decode(black_box(wire.clone())).map(black_box));
}

/// Encodes `shape` as `M` into a reused buffer.
fn encode<M: Message + Default>(bencher: Bencher<'_, '_>, shape: &str) {
    let msg = M::decode(wire(shape)).unwrap_or_default();
    let mut buf = BytesMut::with_capacity(256);
    bencher.bench_local(|| {
        buf.clear();
        black_box(&msg).encode_raw(&mut buf);
        black_box(buf.len())
    });
}

/// `$run::<$module::M>(bencher, shape)` for the message `M` of `shape`.
macro_rules! by_shape {
    ($run:ident, $module:ident, $bencher:expr, $shape:expr) => {
        match $shape {
            "keyed" => $run::<$module::Keyed>($bencher, $shape),
            "flat" => $run::<$module::Flat>($bencher, $shape),
            "present" => $run::<$module::Present>($bencher, $shape),
            "holder" => $run::<$module::Holder>($bencher, $shape),
            "listed" => $run::<$module::Listed>($bencher, $shape),
            "batch" => $run::<$module::Batch>($bencher, $shape),
            _ => $run::<$module::Choice>($bencher, $shape),
        }
    };
}

#[divan::bench(args = SHAPES)]
fn decode_tram(bencher: Bencher<'_, '_>, shape: &str) {
    by_shape!(decode, tram_pb, bencher, shape)
}

#[divan::bench(args = SHAPES)]
fn decode_prost(bencher: Bencher<'_, '_>, shape: &str) {
    by_shape!(decode, prost_pb, bencher, shape)
}

#[divan::bench(args = SHAPES)]
fn encode_tram(bencher: Bencher<'_, '_>, shape: &str) {
    by_shape!(encode, tram_pb, bencher, shape)
}

#[divan::bench(args = SHAPES)]
fn encode_prost(bencher: Bencher<'_, '_>, shape: &str) {
    by_shape!(encode, prost_pb, bencher, shape)
}
