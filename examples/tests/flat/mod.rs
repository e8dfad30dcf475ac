//! What the flat codec's tests share: `proto/fields.proto` from tram-build
//! and from plain prost-build, and a few helpers.
#![allow(dead_code)]

use bytes::Bytes;
use proptest::prelude::*;
use prost::Message;

/// `proto/fields.proto` from tram-build.
#[allow(missing_docs, unreachable_pub, dead_code)]
pub(crate) mod tram_pb {
    include!(concat!(env!("OUT_DIR"), "/fields/fields.rs"));
}

/// The same from plain prost-build.
#[allow(missing_docs, unreachable_pub, dead_code)]
pub(crate) mod prost_pb {
    include!(concat!(env!("OUT_DIR"), "/prost/fields.rs"));
}

/// Zeros often, so that fields are left out as proto3 leaves them.
pub(crate) fn or_zero<T: Default + std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![1 => Just(T::default()), 2 => s].boxed()
}

/// A `Buf` in two pieces, whose first chunk is not the whole message.
pub(crate) struct Buf2<'a>(pub(crate) &'a [u8], pub(crate) &'a [u8]);

impl bytes::Buf for Buf2<'_> {
    fn remaining(&self) -> usize {
        self.0.len() + self.1.len()
    }
    fn chunk(&self) -> &[u8] {
        if self.0.is_empty() { self.1 } else { self.0 }
    }
    fn advance(&mut self, mut cnt: usize) {
        let first = cnt.min(self.0.len());
        self.0 = &self.0[first..];
        cnt -= first;
        self.1 = &self.1[cnt..];
    }
}

/// tram-build's `fields.rs`.
pub(crate) const OURS: &str = include_str!(concat!(env!("OUT_DIR"), "/fields/fields.rs"));

/// Whether tram-build wrote the codec of `name` itself (rather than
/// keeping prost's derive on it).
pub(crate) fn codec_is_tram_builds(name: &str) -> bool {
    let at = OURS.find(&format!("pub struct {name} ")).unwrap();
    let derive = OURS[..at].rfind("#[derive(").unwrap();
    let prosts = OURS[derive..at].contains("::tram::codegen::prost::Message)]");
    let ours = OURS.contains(&format!("impl ::tram::codegen::prost::Message for {name} "));
    assert_ne!(prosts, ours, "{name}: both codecs or neither");
    ours
}

/// Decodes `wire` as `O` (tram-build's) and `T` (prost-build's): fresh,
/// through `&mut` a buffer, merged into `filled`, from a buffer in two
/// pieces. The messages are compared by their `Debug` (prost's for both,
/// NaN equal to itself). With `strict`, also after an error: a message
/// with message fields merges them after the others, where prost leaves
/// a message it failed to merge into as it happened to stop.
pub(crate) fn decode_alike<O, T>(
    wire: &[u8],
    filled: (O, T),
    strict: bool,
) -> Result<(), TestCaseError>
where
    O: Message + Default + std::fmt::Debug,
    T: Message + Default + std::fmt::Debug,
{
    let theirs = T::decode(wire);
    let ours = O::decode(Bytes::copy_from_slice(wire));
    prop_assert_eq!(
        ours.is_ok(),
        theirs.is_ok(),
        "{:?} against {:?}",
        ours,
        theirs
    );
    if let (Ok(o), Ok(t)) = (&ours, &theirs) {
        prop_assert_eq!(format!("{o:?}"), format!("{t:?}"));
    }
    let mut rest = Bytes::copy_from_slice(wire);
    if O::decode(&mut rest).is_ok() {
        prop_assert!(rest.is_empty());
    }
    let (mut o, mut t) = filled;
    let merged = (o.merge(Bytes::copy_from_slice(wire)), t.merge(wire));
    prop_assert_eq!(merged.0.is_ok(), merged.1.is_ok());
    if strict || merged.1.is_ok() {
        prop_assert_eq!(format!("{o:?}"), format!("{t:?}"));
    }
    let half = wire.len() / 2;
    let pieces = O::decode(Buf2(&wire[..half], &wire[half..]));
    prop_assert_eq!(pieces.is_ok(), theirs.is_ok());
    if let (Ok(p), Ok(t)) = (&pieces, &theirs) {
        prop_assert_eq!(format!("{p:?}"), format!("{t:?}"));
    }
    Ok(())
}

/// The encoding of `ours`, checked to be prost's (`theirs`) byte for
/// byte, in length, and in `Debug`.
pub(crate) fn encoded_alike(
    ours: &(impl Message + std::fmt::Debug),
    theirs: &(impl Message + std::fmt::Debug),
) -> Result<Vec<u8>, TestCaseError> {
    let wire = ours.encode_to_vec();
    prop_assert_eq!(&wire, &theirs.encode_to_vec());
    prop_assert_eq!(ours.encoded_len(), theirs.encoded_len());
    prop_assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
    Ok(wire)
}

/// Runs `check` on `wire`; with `twice`, on it written twice over (every
/// field seen again); then on it with the byte at `at` set to `byte` (a
/// message damaged anywhere).
pub(crate) fn check_wire(
    mut wire: Vec<u8>,
    twice: bool,
    at: prop::sample::Index,
    byte: u8,
    mut check: impl FnMut(&[u8]) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    check(&wire)?;
    if twice {
        let again = wire.clone();
        wire.extend_from_slice(&again);
        check(&wire)?;
    }
    if !wire.is_empty() {
        let i = at.index(wire.len());
        wire[i] = byte;
        check(&wire)?;
    }
    Ok(())
}
