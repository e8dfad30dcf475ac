//! tram-build writes the codec of a flat message itself
//! (`tram::codegen::flat`): for every kind of field a flat message may
//! have, it writes prost-build's bytes and length, and reads whatever bytes
//! it is given as prost does: the same message, or an error where prost
//! has one.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use proptest::prelude::*;
use prost::Message;

mod flat;

use flat::{Buf2, codec_is_tram_builds, or_zero, prost_pb, tram_pb};

/// `fn $name(...) -> $module::Flat`: one builder for both crates' messages.
macro_rules! flat_builder {
    ($name:ident, $module:ident) => {
        #[allow(clippy::too_many_arguments)]
        fn $name(
            ints: Ints,
            fixed: Fixed,
            text: &str,
            blob: &[u8],
            tail: &[u8],
            kind: &str,
            shade: i32,
        ) -> $module::Flat {
            $module::Flat {
                u64: ints.0,
                u32: ints.1,
                i64: ints.2,
                i32: ints.3,
                s64: ints.4,
                s32: ints.5,
                flag: ints.6,
                f64: fixed.0,
                f32: fixed.1,
                sf64: fixed.2,
                sf32: fixed.3,
                real: fixed.4,
                small: fixed.5,
                text: text.to_owned(),
                blob: Bytes::copy_from_slice(blob),
                tail: Bytes::copy_from_slice(tail),
                r#type: kind.to_owned(),
                shade,
            }
        }
    };
}

flat_builder!(tram_flat, tram_pb);
flat_builder!(prost_flat, prost_pb);

prop_compose! {
    fn flat_values()(
        ints in (
            or_zero(any::<u64>()),
            or_zero(any::<u32>()),
            or_zero(any::<i64>()),
            or_zero(any::<i32>()),
            or_zero(any::<i64>()),
            or_zero(any::<i32>()),
            any::<bool>(),
        ),
        fixed in (
            or_zero(any::<u64>()),
            or_zero(any::<u32>()),
            or_zero(any::<i64>()),
            or_zero(any::<i32>()),
            or_zero(any::<f64>()),
            prop_oneof![Just(-0.0f32), Just(f32::NAN), any::<f32>()],
        ),
        text in "\\PC{0,12}",
        blob in proptest::collection::vec(any::<u8>(), 0..40),
        tail in proptest::collection::vec(any::<u8>(), 0..3),
        kind in "[a-z]{0,4}",
    ) -> (Ints, Fixed, String, Vec<u8>, Vec<u8>, String) {
        (ints, fixed, text, blob, tail, kind)
    }
}

/// Equal as prost's messages are, but with NaN equal to itself.
fn same(ours: &tram_pb::Flat, theirs: &prost_pb::Flat) -> bool {
    let bits = |a: f64, b: f64| a.to_bits() == b.to_bits() || a == b;
    ours.u64 == theirs.u64
        && ours.u32 == theirs.u32
        && ours.i64 == theirs.i64
        && ours.i32 == theirs.i32
        && ours.s64 == theirs.s64
        && ours.s32 == theirs.s32
        && ours.flag == theirs.flag
        && ours.f64 == theirs.f64
        && ours.f32 == theirs.f32
        && ours.sf64 == theirs.sf64
        && ours.sf32 == theirs.sf32
        && bits(ours.real, theirs.real)
        && bits(f64::from(ours.small), f64::from(theirs.small))
        && ours.text == theirs.text
        && ours.blob == theirs.blob
        && ours.tail == theirs.tail
        && ours.r#type == theirs.r#type
        && ours.shade == theirs.shade
}

/// The varint fields of a `Flat`, in their order.
type Ints = (u64, u32, i64, i32, i64, i32, bool);
/// The fixed-width fields of a `Flat`, in their order.
type Fixed = (u64, u32, i64, i32, f64, f32);

/// Every field set, to merge into.
const FULL: (Ints, Fixed) = ((1, 2, -3, -4, -5, -6, true), (7, 8, -9, -10, 1.5, -2.5));

/// Decodes `wire` with both crates' messages, from a contiguous `Bytes`
/// and from a buffer in two pieces, and checks they agree.
fn decode_alike(wire: &[u8]) -> Result<(), TestCaseError> {
    let theirs = prost_pb::Flat::decode(wire);
    let ours = tram_pb::Flat::decode(Bytes::copy_from_slice(wire));
    match (&ours, &theirs) {
        (Ok(o), Ok(t)) => prop_assert!(same(o, t), "{o:?} against {t:?}"),
        (Err(_), Err(_)) => {}
        _ => prop_assert!(false, "{ours:?} against {theirs:?} for {wire:?}"),
    }
    // Through `&mut` a buffer, which is left as prost leaves it: all read.
    let mut ours_buf = Bytes::copy_from_slice(wire);
    let mut theirs_buf = wire;
    let by_ref = (
        tram_pb::Flat::decode(&mut ours_buf),
        prost_pb::Flat::decode(&mut theirs_buf),
    );
    prop_assert_eq!(by_ref.0.is_ok(), by_ref.1.is_ok());
    if by_ref.1.is_ok() {
        prop_assert_eq!(ours_buf.len(), 0);
        prop_assert_eq!(theirs_buf.len(), 0);
    }
    // Merged into a message that has every field set, as prost merges.
    let mut ours_full = tram_flat(FULL.0, FULL.1, "x", b"y", b"z", "w", 2);
    let mut theirs_full = prost_flat(FULL.0, FULL.1, "x", b"y", b"z", "w", 2);
    let merged = (
        ours_full.merge(Bytes::copy_from_slice(wire)),
        theirs_full.merge(wire),
    );
    prop_assert_eq!(merged.0.is_ok(), merged.1.is_ok());
    prop_assert!(
        same(&ours_full, &theirs_full),
        "{ours_full:?} against {theirs_full:?}"
    );
    let half = wire.len() / 2;
    let split = Buf2(&wire[..half], &wire[half..]);
    let pieces = tram_pb::Flat::decode(split);
    prop_assert_eq!(pieces.is_ok(), theirs.is_ok());
    if let (Ok(p), Ok(t)) = (&pieces, &theirs) {
        prop_assert!(same(p, t));
    }
    Ok(())
}

proptest! {
    #[test]
    fn writes_what_prost_writes(v in flat_values()) {
        let (ints, fixed, text, blob, tail, kind) = v;
        let ours = tram_flat(ints, fixed, &text, &blob, &tail, &kind, ints.3 % 4);
        let theirs = prost_flat(ints, fixed, &text, &blob, &tail, &kind, ints.3 % 4);
        let wire = ours.encode_to_vec();
        prop_assert_eq!(&wire, &theirs.encode_to_vec());
        prop_assert_eq!(ours.encoded_len(), theirs.encoded_len());
        decode_alike(&wire)?;
        let mut room = [0u8; 512];
        let mut slice = &mut room[..];
        ours.encode_raw(&mut slice);
        let used = 512 - slice.len();
        prop_assert_eq!(&room[..used], wire.as_slice());
    }

    #[test]
    fn reads_any_bytes_as_prost_does(wire in proptest::collection::vec(any::<u8>(), 0..64)) {
        decode_alike(&wire)?;
    }

    #[test]
    fn a_message_of_one_bytes_field_reads_as_prosts(
        id in or_zero(any::<u64>()),
        value in proptest::collection::vec(any::<u8>(), 0..20),
        noise in proptest::collection::vec(any::<u8>(), 0..8),
        before in any::<bool>(),
    ) {
        let theirs = prost_pb::Keyed { id, value: Bytes::from(value.clone()) };
        let ours = tram_pb::Keyed { id, value: Bytes::from(value) };
        let mut wire = theirs.encode_to_vec();
        prop_assert_eq!(&wire, &ours.encode_to_vec());
        if before {
            wire.splice(0..0, noise.iter().copied());
        } else {
            wire.extend_from_slice(&noise);
        }
        let mut o = tram_pb::Keyed { id: 7, value: Bytes::from_static(b"old") };
        let mut t = prost_pb::Keyed { id: 7, value: Bytes::from_static(b"old") };
        let mut rest = Bytes::from(wire.clone());
        let merged = (o.merge(&mut rest), t.merge(wire.as_slice()));
        prop_assert_eq!(merged.0.is_ok(), merged.1.is_ok());
        if merged.0.is_ok() {
            prop_assert!(rest.is_empty());
        }
        prop_assert_eq!((o.id, &o.value[..]), (t.id, &t.value[..]));
    }

    #[test]
    fn reads_damaged_messages_as_prost_does(
        v in flat_values(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let (ints, fixed, text, blob, tail, kind) = v;
        let mut wire = prost_flat(ints, fixed, &text, &blob, &tail, &kind, ints.3 % 4).encode_to_vec();
        if !wire.is_empty() {
            let i = at.index(wire.len());
            wire[i] = byte;
            decode_alike(&wire)?;
            wire.truncate(cut.index(wire.len()));
        }
        decode_alike(&wire)?;
        // Unknown fields, repeated fields and other wire types go to prost.
        let mut more = wire.clone();
        more.extend_from_slice(&[0xf8, 0x01, 0x05, 0x10, 0x07, 0x0a, 0x00]);
        decode_alike(&more)?;
    }
}

#[test]
fn the_codec_is_tram_builds_for_flat_messages_only() {
    assert!(codec_is_tram_builds("Flat"));
    // Blob has repeated, map, optional, oneof and message fields: prost's.
    assert!(!codec_is_tram_builds("Blob"));
}

#[test]
fn a_field_seen_twice_keeps_its_last_value_and_bytes_are_sliced() {
    let mut wire = prost_flat(
        (1, 0, 0, 0, 0, 0, false),
        (0, 0, 0, 0, 0.0, 0.0),
        "",
        b"first",
        b"",
        "",
        0,
    )
    .encode_to_vec();
    wire.extend_from_slice(&[0x08, 0x02, 0x7a, 0x03, b'e', b'n', b'd']);
    let buf = Bytes::from(wire);
    let msg = tram_pb::Flat::decode(buf.clone()).unwrap();
    assert_eq!(msg.u64, 2);
    assert_eq!(&msg.blob[..], b"end");
    // A slice of the buffer decoded from, not a copy.
    let start = buf.as_ptr() as usize;
    let at = msg.blob.as_ptr() as usize;
    assert!(at >= start && at < start + buf.len());
}

#[test]
fn an_empty_field_on_the_wire_empties_a_filled_one_as_prost_does() {
    static WIRE: [u8; 4] = [0x7a, 0x00, 0x72, 0x00];
    let wire = &WIRE;
    let mut ours = tram_flat(FULL.0, FULL.1, "x", b"y", b"z", "w", 2);
    let mut theirs = prost_flat(FULL.0, FULL.1, "x", b"y", b"z", "w", 2);
    ours.merge(Bytes::from_static(wire)).unwrap();
    theirs.merge(&wire[..]).unwrap();
    assert!(ours.blob.is_empty() && ours.text.is_empty());
    assert!(same(&ours, &theirs));
}

#[test]
fn an_enum_field_has_prosts_accessors_and_debug() {
    let mut ours = tram_pb::Flat::default();
    let mut theirs = prost_pb::Flat::default();
    ours.set_shade(tram_pb::Shade::Dark);
    theirs.set_shade(prost_pb::Shade::Dark);
    assert_eq!(ours.shade(), tram_pb::Shade::Dark);
    assert_eq!(ours.encode_to_vec(), theirs.encode_to_vec());
    assert!(format!("{ours:?}").contains("shade: Dark"), "{ours:?}");
    ours.shade = 9;
    theirs.shade = 9;
    assert_eq!(ours.shade(), tram_pb::Shade::Unspecified);
    assert_eq!(theirs.shade(), prost_pb::Shade::Unspecified);
    assert!(format!("{ours:?}").contains("shade: 9"), "{ours:?}");
    assert!(format!("{theirs:?}").contains("shade: 9"), "{theirs:?}");
}
