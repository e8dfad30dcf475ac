//! tram-build's codec for flat messages with proto3 `optional` fields
//! (`Present`) and with message fields one level deep (`Holder`): it
//! writes prost-build's bytes and reads whatever bytes it is given as
//! prost does.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use proptest::prelude::*;
use prost::Message;

mod flat;

use flat::{
    check_wire, codec_is_tram_builds, decode_alike, encoded_alike, or_zero, prost_pb, tram_pb,
};

/// `fn $name(...) -> $module::Present`: one builder for both crates'.
macro_rules! present_builder {
    ($name:ident, $module:ident) => {
        fn $name(v: &PresentValues) -> $module::Present {
            $module::Present {
                id: v.0,
                delta: v.1,
                flag: v.2,
                real: v.3,
                check: v.4,
                name: v.5.clone(),
                blob: v.6.clone().map(Bytes::from),
                plain: v.7,
            }
        }
    };
}

/// The fields of a `Present`, in their order.
type PresentValues = (
    Option<u64>,
    Option<i32>,
    Option<bool>,
    Option<f64>,
    Option<u32>,
    Option<String>,
    Option<Vec<u8>>,
    u32,
);

present_builder!(tram_present, tram_pb);
present_builder!(prost_present, prost_pb);

/// Zeros and `None` often: a set zero is written, an unset field is not.
fn maybe<T: Default + std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop_oneof![1 => Just(None), 1 => Just(Some(T::default())), 2 => s.prop_map(Some)].boxed()
}

prop_compose! {
    fn present_values()(
        id in maybe(any::<u64>()),
        delta in maybe(any::<i32>()),
        flag in maybe(any::<bool>()),
        real in maybe(any::<f64>()),
        check in maybe(any::<u32>()),
        name in maybe("\\PC{0,8}"),
        blob in maybe(proptest::collection::vec(any::<u8>(), 0..12)),
        plain in or_zero(any::<u32>()),
    ) -> PresentValues {
        (id, delta, flag, real, check, name, blob, plain)
    }
}

/// Every field of a `Present` set, to merge into.
fn full_present() -> PresentValues {
    (
        Some(1),
        Some(-2),
        Some(true),
        Some(0.5),
        Some(3),
        Some("x".into()),
        Some(b"y".to_vec()),
        4,
    )
}

/// `decode_alike` for `Present`, strict.
fn decode_present_alike(wire: &[u8]) -> Result<(), TestCaseError> {
    let full = full_present();
    decode_alike(wire, (tram_present(&full), prost_present(&full)), true)
}

proptest! {
    #[test]
    fn optional_fields_write_and_read_as_prosts(
        v in present_values(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let (ours, theirs) = (tram_present(&v), prost_present(&v));
        check_wire(encoded_alike(&ours, &theirs)?, false, at, byte, decode_present_alike)?;
    }

    #[test]
    fn optional_fields_read_any_bytes_as_prost_does(
        wire in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        decode_present_alike(&wire)?;
    }
}

#[test]
fn optional_fields_are_tram_builds() {
    assert!(codec_is_tram_builds("Present"));
    // A zero that is set is written; an unset field is not.
    let zero = tram_pb::Present {
        id: Some(0),
        ..Default::default()
    };
    assert_eq!(zero.encode_to_vec(), [0x08, 0x00]);
    assert!(tram_pb::Present::default().encode_to_vec().is_empty());
}

/// The fields of a `Holder`: a `Keyed`'s, a count, a `Present`'s, a tail.
type HolderValues = (Option<(u64, Vec<u8>)>, u64, Option<PresentValues>, Vec<u8>);

/// `fn $name(...) -> $module::Holder`: one builder for both crates'.
macro_rules! holder_builder {
    ($name:ident, $module:ident, $present:ident) => {
        fn $name(v: &HolderValues) -> $module::Holder {
            $module::Holder {
                key: v.0.clone().map(|(id, value)| $module::Keyed {
                    id,
                    value: Bytes::from(value),
                }),
                n: v.1,
                present: v.2.as_ref().map($present),
                tail: Bytes::from(v.3.clone()),
            }
        }
    };
}

holder_builder!(tram_holder, tram_pb, tram_present);
holder_builder!(prost_holder, prost_pb, prost_present);

prop_compose! {
    fn holder_values()(
        key in prop_oneof![
            1 => Just(None),
            3 => (or_zero(any::<u64>()), proptest::collection::vec(any::<u8>(), 0..8)).prop_map(Some),
        ],
        n in or_zero(any::<u64>()),
        present in prop_oneof![1 => Just(None), 3 => present_values().prop_map(Some)],
        tail in proptest::collection::vec(any::<u8>(), 0..6),
    ) -> HolderValues {
        (key, n, present, tail)
    }
}

/// `decode_alike` for `Holder`, merged into one with every field set.
fn decode_holder_alike(wire: &[u8]) -> Result<(), TestCaseError> {
    let full: HolderValues = (
        Some((7, b"k".to_vec())),
        8,
        Some(full_present()),
        b"t".to_vec(),
    );
    decode_alike(wire, (tram_holder(&full), prost_holder(&full)), false)
}

proptest! {
    #[test]
    fn message_fields_write_and_read_as_prosts(
        v in holder_values(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        twice in any::<bool>(),
    ) {
        let (ours, theirs) = (tram_holder(&v), prost_holder(&v));
        // A message field seen twice is merged twice, as prost does.
        check_wire(encoded_alike(&ours, &theirs)?, twice, at, byte, decode_holder_alike)?;
    }

    #[test]
    fn message_fields_read_any_bytes_as_prost_does(
        wire in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        decode_holder_alike(&wire)?;
    }
}

#[test]
fn a_message_field_is_tram_builds_one_level_deep_only() {
    assert!(codec_is_tram_builds("Holder"));
    assert!(!codec_is_tram_builds("Deeper"));
    // An inner message's `bytes` are a slice of the buffer decoded from.
    let wire = prost_holder(&(Some((1, b"inner".to_vec())), 0, None, Vec::new())).encode_to_vec();
    let buf = Bytes::from(wire);
    let msg = tram_pb::Holder::decode(buf.clone()).unwrap();
    let value = msg.key.unwrap().value;
    let (start, at) = (buf.as_ptr() as usize, value.as_ptr() as usize);
    assert!(at >= start && at < start + buf.len());
}
