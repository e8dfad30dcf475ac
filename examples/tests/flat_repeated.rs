//! tram-build's codec for flat messages with repeated numbers and strings
//! (`Listed`, and `ListHolder` one level up) and with repeated `bytes` and
//! messages (`Batch`): it writes prost-build's bytes, reads a number
//! packed or not whichever the bytes are, and reads whatever bytes it is
//! given as prost does, a fallback to prost included.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use proptest::prelude::*;
use prost::Message;

mod flat;

use flat::{
    check_wire, codec_is_tram_builds, decode_alike, encoded_alike, or_zero, prost_pb, tram_pb,
};

/// The fields of a `Listed`, in their order.
type ListedValues = (
    Vec<u64>,
    Vec<i32>,
    Vec<bool>,
    Vec<f64>,
    Vec<u32>,
    Vec<String>,
    Vec<i64>,
    Vec<f32>,
    u32,
    Vec<u8>,
);

/// `fn $name(...) -> $module::$ty`: one builder for `Listed` and its twin,
/// in both crates.
macro_rules! listed_builder {
    ($name:ident, $module:ident, $ty:ident) => {
        fn $name(v: &ListedValues) -> $module::$ty {
            $module::$ty {
                ids: v.0.clone(),
                deltas: v.1.clone(),
                flags: v.2.clone(),
                reals: v.3.clone(),
                checks: v.4.clone(),
                names: v.5.clone(),
                loose: v.6.clone(),
                floats: v.7.clone(),
                plain: v.8,
                tail: Bytes::from(v.9.clone()),
            }
        }
    };
}

listed_builder!(tram_listed, tram_pb, Listed);
listed_builder!(prost_listed, prost_pb, Listed);
listed_builder!(prost_twin, prost_pb, ListedTwin);

/// Up to four elements, often none (a field left out).
fn few<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Vec<T>> {
    prop_oneof![1 => Just(Vec::new()), 2 => proptest::collection::vec(s, 1..5)].boxed()
}

prop_compose! {
    fn listed_values()(
        ids in few(any::<u64>()),
        deltas in few(any::<i32>()),
        flags in few(any::<bool>()),
        reals in few(any::<f64>()),
        checks in few(any::<u32>()),
        names in few("\\PC{0,6}"),
        loose in few(any::<i64>()),
        floats in few(any::<f32>()),
        plain in or_zero(any::<u32>()),
        tail in proptest::collection::vec(any::<u8>(), 0..6),
    ) -> ListedValues {
        (ids, deltas, flags, reals, checks, names, loose, floats, plain, tail)
    }
}

/// Some of every field, to merge into: what is read is appended.
fn some_listed() -> ListedValues {
    (
        vec![1],
        vec![-2],
        vec![true],
        vec![0.5],
        vec![3],
        vec!["x".into()],
        vec![-4],
        vec![1.5],
        5,
        b"t".to_vec(),
    )
}

/// `decode_alike` for `Listed`, strict: a fallback to prost after some
/// elements were read must leave what prost leaves, after an error too.
fn decode_listed_alike(wire: &[u8]) -> Result<(), TestCaseError> {
    let some = some_listed();
    decode_alike(wire, (tram_listed(&some), prost_listed(&some)), true)
}

proptest! {
    #[test]
    fn repeated_fields_write_and_read_as_prosts(
        v in listed_values(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        twice in any::<bool>(),
    ) {
        let (ours, theirs) = (tram_listed(&v), prost_listed(&v));
        // A repeated field seen twice is appended to twice.
        check_wire(encoded_alike(&ours, &theirs)?, twice, at, byte, decode_listed_alike)?;
    }

    #[test]
    fn repeated_numbers_read_packed_or_not(v in listed_values(), cut in any::<prop::sample::Index>()) {
        // The twin writes each number field with the other packing.
        let wire = prost_twin(&v).encode_to_vec();
        let ours = tram_pb::Listed::decode(&wire[..]).unwrap();
        prop_assert_eq!(format!("{ours:?}"), format!("{:?}", prost_listed(&v)));
        decode_listed_alike(&wire)?;
        // Cut anywhere, inside a packed record or not.
        decode_listed_alike(&wire[..cut.index(wire.len() + 1)])?;
    }

    #[test]
    fn repeated_fields_read_any_bytes_as_prost_does(
        wire in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        decode_listed_alike(&wire)?;
    }

    #[test]
    fn a_held_message_with_repeated_fields_reads_as_prosts(
        v in listed_values(),
        n in or_zero(any::<u64>()),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let ours = tram_pb::ListHolder { listed: Some(tram_listed(&v)), n };
        let theirs = prost_pb::ListHolder { listed: Some(prost_listed(&v)), n };
        let wire = encoded_alike(&ours, &theirs)?;
        let some = some_listed();
        let filled = || {
            (
                tram_pb::ListHolder { listed: Some(tram_listed(&some)), n: 1 },
                prost_pb::ListHolder { listed: Some(prost_listed(&some)), n: 1 },
            )
        };
        check_wire(wire, false, at, byte, |wire| decode_alike(wire, filled(), false))?;
    }
}

#[test]
fn repeated_numbers_and_strings_are_tram_builds() {
    assert!(codec_is_tram_builds("Listed"));
    assert!(codec_is_tram_builds("ListedTwin"));
    assert!(codec_is_tram_builds("ListHolder"));
}

#[test]
fn numbers_are_packed_unless_the_field_says_not() {
    let msg = tram_pb::Listed {
        ids: vec![1, 300],
        loose: vec![1, 2],
        ..Default::default()
    };
    // ids: one record of three bytes; loose: a key before each.
    assert_eq!(
        msg.encode_to_vec(),
        [0x0a, 0x03, 0x01, 0xac, 0x02, 0x38, 0x01, 0x38, 0x02]
    );
    // An empty repeated field is not written at all.
    assert!(tram_pb::Listed::default().encode_to_vec().is_empty());
}

#[test]
fn a_fallback_to_prost_does_not_read_elements_twice() {
    // Two packed ids, then a field the flat reader does not expect
    // (field 11, unknown): prost reads the message again from the start,
    // after the ids read so far are taken off.
    let wire = [0x0a, 0x02, 0x01, 0x02, 0x58, 0x07];
    let mut msg = tram_pb::Listed {
        ids: vec![9],
        ..Default::default()
    };
    msg.merge(&wire[..]).unwrap();
    assert_eq!(msg.ids, [9, 1, 2]);
}

/// The fields of a `Batch`: its `Keyed`s, blobs, first `Keyed`, tail, count
/// and names.
type BatchValues = (
    Vec<(u64, Vec<u8>)>,
    Vec<Vec<u8>>,
    Option<(u64, Vec<u8>)>,
    Vec<u8>,
    u64,
    Vec<String>,
);

/// `fn $name(...) -> $module::Batch`: one builder for both crates'.
macro_rules! batch_builder {
    ($name:ident, $module:ident) => {
        fn $name(v: &BatchValues) -> $module::Batch {
            let keyed = |(id, value): &(u64, Vec<u8>)| $module::Keyed {
                id: *id,
                value: Bytes::from(value.clone()),
            };
            $module::Batch {
                keys: v.0.iter().map(keyed).collect(),
                blobs: v.1.iter().cloned().map(Bytes::from).collect(),
                first: v.2.as_ref().map(keyed),
                tail: Bytes::from(v.3.clone()),
                n: v.4,
                names: v.5.clone(),
            }
        }
    };
}

batch_builder!(tram_batch, tram_pb);
batch_builder!(prost_batch, prost_pb);

fn keyed_values() -> impl Strategy<Value = (u64, Vec<u8>)> {
    (
        or_zero(any::<u64>()),
        proptest::collection::vec(any::<u8>(), 0..6),
    )
}

prop_compose! {
    fn batch_values()(
        keys in few(keyed_values()),
        blobs in few(proptest::collection::vec(any::<u8>(), 0..6)),
        first in prop_oneof![1 => Just(None), 2 => keyed_values().prop_map(Some)],
        tail in proptest::collection::vec(any::<u8>(), 0..6),
        n in or_zero(any::<u64>()),
        names in few("\\PC{0,4}"),
    ) -> BatchValues {
        (keys, blobs, first, tail, n, names)
    }
}

/// `decode_alike` for `Batch`, merged into one holding an element of each.
fn decode_batch_alike(wire: &[u8]) -> Result<(), TestCaseError> {
    let some: BatchValues = (
        vec![(1, b"k".to_vec())],
        vec![b"b".to_vec()],
        Some((2, b"f".to_vec())),
        b"t".to_vec(),
        3,
        vec!["x".into()],
    );
    decode_alike(wire, (tram_batch(&some), prost_batch(&some)), false)
}

proptest! {
    #[test]
    fn repeated_bytes_and_messages_write_and_read_as_prosts(
        v in batch_values(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        twice in any::<bool>(),
    ) {
        let (ours, theirs) = (tram_batch(&v), prost_batch(&v));
        check_wire(encoded_alike(&ours, &theirs)?, twice, at, byte, decode_batch_alike)?;
    }

    #[test]
    fn repeated_bytes_and_messages_read_any_bytes_as_prost_does(
        wire in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        decode_batch_alike(&wire)?;
    }
}

#[test]
fn repeated_bytes_and_messages_are_slices_of_the_buffer() {
    assert!(codec_is_tram_builds("Batch"));
    assert!(!codec_is_tram_builds("Holders"));
    let v: BatchValues = (
        vec![(1, b"one".to_vec()), (2, b"two".to_vec())],
        vec![b"blob".to_vec(), Vec::new()],
        None,
        Vec::new(),
        0,
        Vec::new(),
    );
    let buf = Bytes::from(prost_batch(&v).encode_to_vec());
    let msg = tram_pb::Batch::decode(buf.clone()).unwrap();
    let inside = |b: &Bytes| {
        let (start, at) = (buf.as_ptr() as usize, b.as_ptr() as usize);
        b.is_empty() || at >= start && at < start + buf.len()
    };
    assert_eq!(msg.keys.len(), 2);
    assert!(msg.keys.iter().all(|k| inside(&k.value)));
    assert_eq!(msg.blobs, [&b"blob"[..], &b""[..]]);
    assert!(msg.blobs.iter().all(inside));
}
