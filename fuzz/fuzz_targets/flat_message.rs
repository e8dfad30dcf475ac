//! Decodes arbitrary bytes with the codec tram-build writes for a flat
//! message and with prost-build's derive, and checks they agree: the same
//! message or both an error, decoding from a contiguous `Bytes`, from a
//! buffer in two pieces (the first byte picks the split) and merging into
//! a message whose fields are all set, and through `&mut` a buffer, which
//! must be left all read; what decodes re-encodes to prost's bytes. The
//! same bytes then go to `Present`, a flat message of `optional` fields,
//! `Holder`, one of flat messages, `Listed`, one of repeated numbers and
//! strings, `Batch`, one of repeated `bytes` and messages, `Choice`, one
//! of oneofs, and `PresentShade`, one of optional and repeated enums.
#![no_main]

use bytes::{Buf, Bytes};
use libfuzzer_sys::fuzz_target;
use prost::Message;

#[allow(dead_code, missing_docs, unreachable_pub, clippy::all)]
mod tram_pb {
    include!(concat!(env!("OUT_DIR"), "/tram/fields.rs"));
}

#[allow(dead_code, missing_docs, unreachable_pub, clippy::all)]
mod prost_pb {
    include!(concat!(env!("OUT_DIR"), "/prost/fields.rs"));
}

/// The two messages hold the same values (NaN equal to itself).
fn same(o: &tram_pb::Flat, t: &prost_pb::Flat) -> bool {
    let float = |a: f64, b: f64| a.to_bits() == b.to_bits() || a == b;
    o.u64 == t.u64
        && o.u32 == t.u32
        && o.i64 == t.i64
        && o.i32 == t.i32
        && o.s64 == t.s64
        && o.s32 == t.s32
        && o.flag == t.flag
        && o.f64 == t.f64
        && o.f32 == t.f32
        && o.sf64 == t.sf64
        && o.sf32 == t.sf32
        && float(o.real, t.real)
        && float(f64::from(o.small), f64::from(t.small))
        && o.text == t.text
        && o.blob == t.blob
        && o.tail == t.tail
        && o.r#type == t.r#type
        && o.shade == t.shade
}

/// A `Flat` of `$module` with every field set, to merge into.
macro_rules! filled {
    ($module:ident) => {
        $module::Flat {
            u64: 1,
            u32: 2,
            i64: -3,
            i32: -4,
            s64: -5,
            s32: -6,
            flag: true,
            f64: 7,
            f32: 8,
            sf64: -9,
            sf32: -10,
            real: 1.5,
            small: -2.5,
            text: "x".into(),
            blob: Bytes::from_static(b"y"),
            tail: Bytes::from_static(b"z"),
            r#type: "w".into(),
            shade: 2,
        }
    };
}

/// A `Buf` in two pieces.
struct Pieces<'a>(&'a [u8], &'a [u8]);

impl Buf for Pieces<'_> {
    fn remaining(&self) -> usize {
        self.0.len() + self.1.len()
    }
    fn chunk(&self) -> &[u8] {
        if self.0.is_empty() { self.1 } else { self.0 }
    }
    fn advance(&mut self, cnt: usize) {
        let first = cnt.min(self.0.len());
        self.0 = &self.0[first..];
        self.1 = &self.1[cnt - first..];
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, wire)) = data.split_first() else {
        return;
    };
    let theirs = prost_pb::Flat::decode(wire);
    let ours = tram_pb::Flat::decode(Bytes::copy_from_slice(wire));
    match (&ours, &theirs) {
        (Ok(o), Ok(t)) => assert!(same(o, t), "{o:?} against {t:?}"),
        (Err(_), Err(_)) => {}
        _ => panic!("{ours:?} against {theirs:?}"),
    }
    let at = usize::from(split).min(wire.len());
    let pieces = tram_pb::Flat::decode(Pieces(&wire[..at], &wire[at..]));
    assert_eq!(pieces.is_ok(), theirs.is_ok());
    if let (Ok(p), Ok(t)) = (&pieces, &theirs) {
        assert!(same(p, t));
    }
    // Through `&mut` a buffer: all of it read, as prost reads it.
    let mut rest = Bytes::copy_from_slice(wire);
    if tram_pb::Flat::decode(&mut rest).is_ok() {
        assert!(rest.is_empty());
    }
    let (mut o, mut t) = (filled!(tram_pb), filled!(prost_pb));
    let merged = (o.merge(Bytes::copy_from_slice(wire)), t.merge(wire));
    assert_eq!(merged.0.is_ok(), merged.1.is_ok());
    assert!(same(&o, &t), "{o:?} against {t:?}");
    if let (Ok(o), Ok(t)) = (ours, theirs) {
        let again = o.encode_to_vec();
        assert_eq!(again, t.encode_to_vec());
        assert_eq!(again.len(), o.encoded_len());
    }
    let keyed = (
        tram_pb::Keyed::decode(Bytes::copy_from_slice(wire)),
        prost_pb::Keyed::decode(wire),
    );
    match keyed {
        (Ok(o), Ok(t)) => assert_eq!((o.id, o.value), (t.id, t.value)),
        (Err(_), Err(_)) => {}
        (o, t) => panic!("{o:?} against {t:?}"),
    }
    shapes(wire);
});

/// The same bytes as the other shapes, compared by `Debug` (prost's for
/// both): `Present` (`optional` fields), `Listed` (repeated numbers and
/// strings) and `PresentShade` (optional and repeated enums) also after an
/// error and merged into a message with every field set; `Choice` (oneofs) merged into one holding a message variant, which
/// a second one merges into; `Holder` (flat messages as fields) and
/// `Batch` (repeated `bytes` and messages) decoded fresh.
fn shapes(wire: &[u8]) {
    macro_rules! filled_present {
        ($module:ident) => {
            $module::Present {
                id: Some(1),
                delta: Some(-2),
                flag: Some(true),
                real: Some(0.5),
                check: Some(3),
                name: Some("x".into()),
                blob: Some(Bytes::from_static(b"y")),
                plain: 4,
            }
        };
    }
    macro_rules! filled_listed {
        ($module:ident) => {
            $module::Listed {
                ids: vec![1],
                deltas: vec![-2],
                flags: vec![true],
                reals: vec![0.5],
                checks: vec![3],
                names: vec!["x".into()],
                loose: vec![-4],
                floats: vec![1.5],
                plain: 5,
                tail: Bytes::from_static(b"t"),
            }
        };
    }
    macro_rules! filled_choice {
        ($module:ident) => {
            $module::Choice {
                id: 1,
                pick: Some($module::choice::Pick::Key($module::Keyed {
                    id: 2,
                    value: Bytes::from_static(b"k"),
                })),
                tail: Bytes::from_static(b"t"),
                other: Some($module::choice::Other::Flag(true)),
            }
        };
    }
    alike(
        wire,
        Some((filled_present!(tram_pb), filled_present!(prost_pb))),
        true,
    );
    alike(
        wire,
        Some((filled_listed!(tram_pb), filled_listed!(prost_pb))),
        true,
    );
    alike(
        wire,
        Some((filled_choice!(tram_pb), filled_choice!(prost_pb))),
        false,
    );
    macro_rules! filled_shade {
        ($module:ident) => {
            $module::PresentShade {
                shade: Some(2),
                shades: vec![1],
                plain: 2,
                loose: vec![0, 7],
            }
        };
    }
    alike(wire, Some((filled_shade!(tram_pb), filled_shade!(prost_pb))), true);
    alike::<tram_pb::Holder, prost_pb::Holder>(wire, None, false);
    alike::<tram_pb::Batch, prost_pb::Batch>(wire, None, false);
}

/// Decodes `wire` as `O` (tram-build's) and `T` (prost-build's), fresh
/// and merged into `filled`: the same result, the same message by `Debug`
/// where it decodes (with `strict`, the same `Debug` of the error too, and
/// of the message merged into after one), and prost's bytes written again.
fn alike<O, T>(wire: &[u8], filled: Option<(O, T)>, strict: bool)
where
    O: Message + Default + std::fmt::Debug,
    T: Message + Default + std::fmt::Debug,
{
    let ours = O::decode(Bytes::copy_from_slice(wire));
    let theirs = T::decode(wire);
    if strict {
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
    }
    assert_eq!(ours.is_ok(), theirs.is_ok(), "{ours:?} against {theirs:?}");
    if let (Ok(o), Ok(t)) = (&ours, &theirs) {
        assert_eq!(format!("{o:?}"), format!("{t:?}"));
        assert_eq!(o.encode_to_vec(), t.encode_to_vec());
        assert_eq!(o.encoded_len(), t.encoded_len());
    }
    if let Some((mut o, mut t)) = filled {
        let merged = (o.merge(Bytes::copy_from_slice(wire)), t.merge(wire));
        assert_eq!(merged.0.is_ok(), merged.1.is_ok());
        if strict || merged.1.is_ok() {
            assert_eq!(format!("{o:?}"), format!("{t:?}"));
        }
    }
}
