//! tram-build's codec for enum fields that are `optional` and `repeated`
//! (`PresentShade`): it writes prost-build's bytes, reads whatever bytes
//! it is given as prost does, and gives the fields prost's accessors and
//! `Debug`, numbers the enum does not name included.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use prost::Message;

mod flat;

use flat::{check_wire, codec_is_tram_builds, decode_alike, encoded_alike, prost_pb, tram_pb};

/// The fields of a `PresentShade`: `shade`, `shades`, `plain`, `loose`.
type ShadeValues = (Option<i32>, Vec<i32>, i32, Vec<i32>);

/// `fn $name(...) -> $module::PresentShade`: one builder for both crates'.
macro_rules! shade_builder {
    ($name:ident, $module:ident) => {
        fn $name(v: &ShadeValues) -> $module::PresentShade {
            $module::PresentShade {
                shade: v.0,
                shades: v.1.clone(),
                plain: v.2,
                loose: v.3.clone(),
            }
        }
    };
}

shade_builder!(tram_shade, tram_pb);
shade_builder!(prost_shade, prost_pb);

/// Mostly the enum's own numbers, some it does not name.
fn shade() -> impl Strategy<Value = i32> {
    prop_oneof![4 => 0i32..3, 1 => any::<i32>()]
}

prop_compose! {
    fn shade_values()(
        shade in proptest::option::of(shade()),
        shades in proptest::collection::vec(shade(), 0..4),
        plain in shade(),
        loose in proptest::collection::vec(shade(), 0..4),
    ) -> ShadeValues {
        (shade, shades, plain, loose)
    }
}

/// `decode_alike` for `PresentShade`, strict, merged into one with every
/// field set.
fn decode_shade_alike(wire: &[u8]) -> Result<(), TestCaseError> {
    let full: ShadeValues = (Some(2), vec![1], 2, vec![0, 7]);
    decode_alike(wire, (tram_shade(&full), prost_shade(&full)), true)
}

proptest! {
    #[test]
    fn enum_fields_write_and_read_as_prosts(
        v in shade_values(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        twice in any::<bool>(),
    ) {
        let (ours, theirs) = (tram_shade(&v), prost_shade(&v));
        check_wire(encoded_alike(&ours, &theirs)?, twice, at, byte, decode_shade_alike)?;
        // The accessors, as prost's.
        prop_assert_eq!(format!("{:?}", ours.shade()), format!("{:?}", theirs.shade()));
        prop_assert_eq!(format!("{:?}", ours.plain()), format!("{:?}", theirs.plain()));
        let (a, b): (Vec<_>, Vec<_>) = (ours.shades().collect(), theirs.shades().collect());
        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let (a, b): (Vec<_>, Vec<_>) = (ours.loose().collect(), theirs.loose().collect());
        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    #[test]
    fn enum_fields_read_any_bytes_as_prost_does(
        wire in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        decode_shade_alike(&wire)?;
    }
}

#[test]
fn enum_fields_are_tram_builds_with_prosts_setters() {
    assert!(codec_is_tram_builds("PresentShade"));
    let mut ours = tram_pb::PresentShade::default();
    let mut theirs = prost_pb::PresentShade::default();
    ours.set_shade(tram_pb::Shade::Dark);
    theirs.set_shade(prost_pb::Shade::Dark);
    ours.push_shades(tram_pb::Shade::Light);
    theirs.push_shades(prost_pb::Shade::Light);
    ours.set_plain(tram_pb::Shade::Light);
    theirs.set_plain(prost_pb::Shade::Light);
    ours.push_loose(tram_pb::Shade::Dark);
    theirs.push_loose(prost_pb::Shade::Dark);
    assert_eq!(ours.encode_to_vec(), theirs.encode_to_vec());
    assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
    // An optional enum set to its zero is written.
    ours.set_shade(tram_pb::Shade::Unspecified);
    assert_eq!(&ours.encode_to_vec()[..2], [0x08, 0x00]);
}
