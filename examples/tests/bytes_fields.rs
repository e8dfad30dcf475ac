//! tram-build encodes `bytes` fields its own way (`tram::codegen::prost`,
//! which copies a field's bytes where prost clones its `Bytes` first): for
//! every shape of field, the bytes written are prost-build's, and each side
//! decodes the other's; with `plain_prost(true)` the messages are plain
//! prost's.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use bytes::Bytes;
use proptest::prelude::*;

/// `proto/fields.proto` from tram-build.
#[allow(missing_docs, unreachable_pub, dead_code)]
mod tram_pb {
    include!(concat!(env!("OUT_DIR"), "/fields/fields.rs"));
}

/// The same from tram-build with `plain_prost(true)`.
#[allow(missing_docs, unreachable_pub, dead_code)]
mod plain_pb {
    include!(concat!(env!("OUT_DIR"), "/plain/fields.rs"));
}

/// The same from plain prost-build.
#[allow(missing_docs, unreachable_pub, dead_code)]
mod prost_pb {
    include!(concat!(env!("OUT_DIR"), "/prost/fields.rs"));
}

/// A `Blob`'s fields, from which both crates' messages are built.
#[derive(Debug, Clone)]
struct Fields {
    one: Vec<u8>,
    many: Vec<Vec<u8>>,
    named: HashMap<String, Vec<u8>>,
    maybe: Option<Vec<u8>>,
    either: Option<Result<Vec<u8>, String>>,
}

fn fields() -> impl Strategy<Value = Fields> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..300);
    (
        bytes(),
        proptest::collection::vec(bytes(), 0..4),
        proptest::collection::hash_map("[a-z]{0,6}", bytes(), 0..4),
        proptest::option::of(bytes()),
        proptest::option::of(prop_oneof![
            bytes().prop_map(Ok),
            "[a-z]{0,8}".prop_map(Err)
        ]),
    )
        .prop_map(|(one, many, named, maybe, either)| Fields {
            one,
            many,
            named,
            maybe,
            either,
        })
}

/// `fn $name(fields, inner) -> $module::Blob`: the same builder for both
/// crates' messages, which differ only in type.
macro_rules! blob_builder {
    ($name:ident, $module:ident) => {
        fn $name(f: &Fields, inner: Option<&Fields>) -> $module::Blob {
            use $module::blob::Either;
            $module::Blob {
                one: Bytes::from(f.one.clone()),
                many: f.many.iter().cloned().map(Bytes::from).collect(),
                named: f
                    .named
                    .iter()
                    .map(|(k, v)| (k.clone(), Bytes::from(v.clone())))
                    .collect(),
                maybe: f.maybe.clone().map(Bytes::from),
                either: f.either.clone().map(|e| match e {
                    Ok(raw) => Either::Raw(Bytes::from(raw)),
                    Err(text) => Either::Text(text),
                }),
                inner: inner.map(|i| Box::new($name(i, None))),
            }
        }
    };
}

blob_builder!(tram_blob, tram_pb);
blob_builder!(plain_blob, plain_pb);
blob_builder!(prost_blob, prost_pb);

proptest! {
    #[test]
    fn encodes_as_prost_does(outer in fields(), inner in proptest::option::of(fields())) {
        use prost::Message;
        let ours = tram_blob(&outer, inner.as_ref());
        let theirs = prost_blob(&outer, inner.as_ref());
        // A map's entries are written in its iteration order, which two
        // maps built alike share only by chance: with more than one named
        // entry, compare what each side decodes instead of the bytes.
        let wire = ours.encode_to_vec();
        prop_assert_eq!(wire.len(), ours.encoded_len());
        let single_map = outer.named.len() <= 1
            && inner.as_ref().is_none_or(|i| i.named.len() <= 1);
        if single_map {
            prop_assert_eq!(&wire, &theirs.encode_to_vec());
        }
        let back = prost_pb::Blob::decode(wire.as_slice()).unwrap();
        prop_assert_eq!(&back, &theirs);
        let ours_back = tram_pb::Blob::decode(theirs.encode_to_vec().as_slice()).unwrap();
        prop_assert_eq!(&ours_back, &ours);
        let plain = plain_blob(&outer, inner.as_ref());
        prop_assert_eq!(
            prost_pb::Blob::decode(plain.encode_to_vec().as_slice()).unwrap(),
            theirs
        );
    }
}

/// Encoding through a plain slice, as tram's codec does for small frames,
/// writes the same bytes as into a `Vec`.
#[test]
fn encodes_into_a_slice() {
    use prost::Message;
    let blob = tram_blob(
        &Fields {
            one: b"sixteen bytes!!!".to_vec(),
            many: vec![vec![1, 2, 3], Vec::new()],
            named: HashMap::new(),
            maybe: Some(Vec::new()),
            either: Some(Ok(vec![9; 70])),
        },
        None,
    );
    let mut room = [0u8; 256];
    let mut slice = &mut room[..];
    blob.encode_raw(&mut slice);
    let used = 256 - slice.len();
    assert_eq!(&room[..used], blob.encode_to_vec().as_slice());
}

/// By default the messages name tram's prost; with `plain_prost(true)`,
/// prost itself, so that they build in a crate without tram.
#[test]
fn plain_prost_names_prost_only() {
    let ours = include_str!(concat!(env!("OUT_DIR"), "/fields/fields.rs"));
    let plain = include_str!(concat!(env!("OUT_DIR"), "/plain/fields.rs"));
    assert!(ours.contains("::tram::codegen::prost::Message"));
    assert!(!plain.contains("tram"), "{plain}");
    assert!(plain.contains("::prost::Message"));
}
