//! tram-build's codec for flat messages with oneofs (`Choice`): it writes
//! prost-build's bytes and reads whatever bytes it is given as prost
//! does, a variant seen twice (which prost replaces or merges into)
//! included.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use proptest::prelude::*;
use prost::Message;

mod flat;

use flat::{codec_is_tram_builds, decode_alike, encoded_alike, or_zero, prost_pb, tram_pb};

/// A `pick` variant's value, for either crate's enum.
#[derive(Debug, Clone)]
enum Pick {
    Number(u32),
    Text(String),
    Blob(Vec<u8>),
    Key(u64, Vec<u8>),
    Shade(i32),
    Delta(i64),
    Real(f64),
}

/// The fields of a `Choice`: its id, pick, tail and other (a bool or a
/// fixed32).
type ChoiceValues = (u64, Option<Pick>, Vec<u8>, Option<Result<bool, u32>>);

/// `fn $name(...) -> $module::Choice`: one builder for both crates'.
macro_rules! choice_builder {
    ($name:ident, $module:ident) => {
        fn $name(v: &ChoiceValues) -> $module::Choice {
            use $module::choice::{Other, Pick as P};
            $module::Choice {
                id: v.0,
                pick: v.1.clone().map(|pick| match pick {
                    Pick::Number(n) => P::Number(n),
                    Pick::Text(t) => P::Text(t),
                    Pick::Blob(b) => P::Blob(Bytes::from(b)),
                    Pick::Key(id, value) => P::Key($module::Keyed {
                        id,
                        value: Bytes::from(value),
                    }),
                    Pick::Shade(s) => P::Shade(s),
                    Pick::Delta(d) => P::Delta(d),
                    Pick::Real(r) => P::Real(r),
                }),
                tail: Bytes::from(v.2.clone()),
                other: v.3.map(|other| match other {
                    Ok(flag) => Other::Flag(flag),
                    Err(check) => Other::Check(check),
                }),
            }
        }
    };
}

choice_builder!(tram_choice, tram_pb);
choice_builder!(prost_choice, prost_pb);

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        any::<u32>().prop_map(Pick::Number),
        "\\PC{0,6}".prop_map(Pick::Text),
        proptest::collection::vec(any::<u8>(), 0..6).prop_map(Pick::Blob),
        (
            or_zero(any::<u64>()),
            proptest::collection::vec(any::<u8>(), 0..6)
        )
            .prop_map(|(id, value)| Pick::Key(id, value)),
        (-1i32..4).prop_map(Pick::Shade),
        any::<i64>().prop_map(Pick::Delta),
        any::<f64>().prop_map(Pick::Real),
    ]
}

prop_compose! {
    fn choice_values()(
        id in or_zero(any::<u64>()),
        pick in prop_oneof![1 => Just(None), 4 => pick().prop_map(Some)],
        tail in proptest::collection::vec(any::<u8>(), 0..6),
        other in prop_oneof![
            1 => Just(None),
            1 => any::<bool>().prop_map(|b| Some(Ok(b))),
            1 => any::<u32>().prop_map(|c| Some(Err(c))),
        ],
    ) -> ChoiceValues {
        (id, pick, tail, other)
    }
}

/// `decode_alike` for `Choice`, merged into one holding `filled`'s
/// variants: a message variant merges into the one held, as prost's does.
fn decode_choice_alike(wire: &[u8], filled: &ChoiceValues) -> Result<(), TestCaseError> {
    decode_alike(wire, (tram_choice(filled), prost_choice(filled)), false)
}

/// Filled with a `Keyed` variant, and with a number.
fn fillings() -> [ChoiceValues; 2] {
    [
        (
            1,
            Some(Pick::Key(2, b"k".to_vec())),
            b"t".to_vec(),
            Some(Ok(true)),
        ),
        (1, Some(Pick::Number(3)), Vec::new(), Some(Err(4))),
    ]
}

proptest! {
    #[test]
    fn oneofs_write_and_read_as_prosts(
        v in choice_values(),
        more in choice_values(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let (ours, theirs) = (tram_choice(&v), prost_choice(&v));
        let mut wire = encoded_alike(&ours, &theirs)?;
        for filled in fillings() {
            decode_choice_alike(&wire, &filled)?;
        }
        // Another message after it: a oneof seen twice, another variant
        // or the same one (a `Keyed` merged into the first).
        wire.extend_from_slice(&prost_choice(&more).encode_to_vec());
        for filled in fillings() {
            decode_choice_alike(&wire, &filled)?;
        }
        if !wire.is_empty() {
            let i = at.index(wire.len());
            wire[i] = byte;
            for filled in fillings() {
                decode_choice_alike(&wire, &filled)?;
            }
        }
    }

    #[test]
    fn oneofs_read_any_bytes_as_prost_does(
        wire in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        for filled in fillings() {
            decode_choice_alike(&wire, &filled)?;
        }
    }
}

#[test]
fn a_oneof_is_tram_builds_one_level_deep_only() {
    assert!(codec_is_tram_builds("Choice"));
    assert!(!codec_is_tram_builds("DeepChoice"));
    // A variant set to its zero is written: a oneof says which it holds.
    let zero = tram_choice(&(0, Some(Pick::Number(0)), Vec::new(), None));
    assert_eq!(zero.encode_to_vec(), [0x10, 0x00]);
}

#[test]
fn a_message_variant_merges_into_the_one_held() {
    // A `Keyed` with an id over one held with a value: prost keeps both.
    let held = (0, Some(Pick::Key(0, b"v".to_vec())), Vec::new(), None);
    let mut msg = tram_choice(&held);
    let wire = prost_choice(&(0, Some(Pick::Key(7, Vec::new())), Vec::new(), None)).encode_to_vec();
    msg.merge(&wire[..]).unwrap();
    let Some(tram_pb::choice::Pick::Key(key)) = msg.pick else {
        panic!("{:?}", msg.pick)
    };
    assert_eq!((key.id, &key.value[..]), (7, &b"v"[..]));
    // Its bytes are a slice of the buffer decoded from.
    let buf = Bytes::from(
        prost_choice(&(0, Some(Pick::Blob(b"blob".to_vec())), Vec::new(), None)).encode_to_vec(),
    );
    let Some(tram_pb::choice::Pick::Blob(blob)) =
        tram_pb::Choice::decode(buf.clone()).unwrap().pick
    else {
        panic!("not a blob")
    };
    let (start, at) = (buf.as_ptr() as usize, blob.as_ptr() as usize);
    assert!(at >= start && at < start + buf.len());
}
