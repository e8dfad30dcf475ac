//! A field's key, and how a number is read from the wire and written to
//! it, as tokens of the code written for a flat message.

use proc_macro2::TokenStream;
use quote::quote;

use super::fields::{Field, Kind};

/// A field's key, encoded as a varint.
pub(super) fn key(field: &Field) -> Vec<u8> {
    key_bytes(field.tag, field.wire_type())
}

/// The key of field `tag` with wire type `wire_type`, encoded as a varint.
pub(super) fn key_bytes(tag: u32, wire_type: u32) -> Vec<u8> {
    let mut k = u64::from(tag << 3 | wire_type);
    let mut out = Vec::new();
    while k >= 0x80 {
        out.push((k as u8) | 0x80);
        k >>= 7;
    }
    out.push(k as u8);
    out
}

/// An expression reading a number or a string of `kind` from the reader
/// `r`: `Some(value)`, or `None` where prost would fail or differ.
pub(super) fn read_value(kind: Kind) -> TokenStream {
    match kind {
        Kind::String => quote!(r.string()),
        Kind::Fixed64 => quote!(r.fixed64()),
        Kind::Fixed32 => quote!(r.fixed32()),
        Kind::Float => quote!(r.fixed32().map(f32::from_bits)),
        Kind::Double => quote!(r.fixed64().map(f64::from_bits)),
        Kind::Sfixed32 => {
            let from = from_bits(kind, quote!(x));
            quote!(r.fixed32().map(|x| #from))
        }
        Kind::Sfixed64 => {
            let from = from_bits(kind, quote!(x));
            quote!(r.fixed64().map(|x| #from))
        }
        Kind::Uint64 => quote!(r.varint()),
        Kind::Bytes | Kind::Message => unreachable!("read as spans of the buffer"),
        _ => {
            let from = from_bits(kind, quote!(x));
            quote!(r.varint().map(|x| #from))
        }
    }
}

/// A value as the bits prost writes: a varint's `u64`, a fixed field's
/// `u32` or `u64`.
pub(super) fn to_bits(kind: Kind, v: &TokenStream) -> TokenStream {
    match kind {
        Kind::Uint64 | Kind::Fixed64 | Kind::Fixed32 => quote!(#v),
        Kind::Uint32 | Kind::Bool => quote!(u64::from(#v)),
        Kind::Int64 | Kind::Int32 | Kind::Sfixed64 => quote!(#v as u64),
        Kind::Sfixed32 => quote!(#v as u32),
        Kind::Sint64 => quote!(((#v << 1) ^ (#v >> 63)) as u64),
        Kind::Sint32 => quote!(((#v << 1) ^ (#v >> 31)) as u32 as u64),
        Kind::Float | Kind::Double => quote!(#v.to_bits()),
        Kind::String | Kind::Bytes | Kind::Message => {
            unreachable!("length-delimited fields have no bits")
        }
    }
}

/// The value prost reads from bits `x`.
pub(super) fn from_bits(kind: Kind, x: TokenStream) -> TokenStream {
    match kind {
        Kind::Uint64 | Kind::Fixed64 | Kind::Fixed32 => x,
        Kind::Uint32 => quote!(#x as u32),
        Kind::Int64 | Kind::Sfixed64 => quote!(#x as i64),
        Kind::Int32 => quote!(#x as i32),
        Kind::Sfixed32 => quote!(#x as i32),
        Kind::Bool => quote!(#x != 0),
        Kind::Sint64 => quote!(((#x >> 1) as i64) ^ (-((#x & 1) as i64))),
        Kind::Sint32 => quote!({
            let x = #x as u32;
            ((x >> 1) as i32) ^ (-((x & 1) as i32))
        }),
        Kind::Float => quote!(f32::from_bits(#x)),
        Kind::Double => quote!(f64::from_bits(#x)),
        Kind::String | Kind::Bytes | Kind::Message => {
            unreachable!("length-delimited fields have no bits")
        }
    }
}

/// Writes the message `value` (a reference) after `key`: its length, then
/// its fields.
pub(super) fn put_message(key: &[u8]) -> TokenStream {
    quote! {
        let len = ::tram::codegen::prost::Message::encoded_len(value);
        ::tram::codegen::flat::put_varint(buf, &[#(#key),*], len as u64);
        ::tram::codegen::prost::Message::encode_raw(value, buf);
    }
}

/// The bytes the message `value` takes after a key of `key_len` bytes.
pub(super) fn message_len(key_len: usize) -> TokenStream {
    quote!({
        let len = ::tram::codegen::prost::Message::encoded_len(value);
        #key_len + ::tram::codegen::flat::varint_len(len as u64) + len
    })
}
