//! What the flat codec's tests share: `proto/fields.proto` from tram-build
//! and from plain prost-build, and a few helpers.
#![allow(dead_code)]

use proptest::prelude::*;

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
