//! The code of a flat message's `repeated` numbers and strings: how each
//! is written, measured and read. A number is read packed or not,
//! whichever the bytes are (as prost and every other decoder must), and
//! written as the field says (packed unless `[packed = false]`).

use proc_macro2::TokenStream;
use quote::quote;

use super::fields::{Field, Kind};
use super::{key_bytes, read_value, to_bits};

/// Writes the field's elements (`encode_raw`).
pub(super) fn encode(f: &Field, flat: &TokenStream) -> TokenStream {
    let id = &f.ident;
    let key = key_bytes(f.tag, f.wire_type());
    if f.kind == Kind::String {
        return quote! {
            for value in &self.#id {
                #flat::put_str(buf, &[#(#key),*], value);
            }
        };
    }
    if !f.packed {
        let put = put_number(f.kind, &key, flat);
        return quote! {
            for &value in &self.#id {
                #put;
            }
        };
    }
    let put = put_number(f.kind, &[], flat);
    let body = packed_len(f, flat);
    quote! {
        if !self.#id.is_empty() {
            let len: usize = #body;
            #flat::put_varint(buf, &[#(#key),*], len as u64);
            for &value in &self.#id {
                #put;
            }
        }
    }
}

/// The bytes the field's elements take (`encoded_len`).
pub(super) fn encoded_len(f: &Field, flat: &TokenStream) -> TokenStream {
    let id = &f.ident;
    let key_len = key_bytes(f.tag, f.wire_type()).len();
    if f.kind == Kind::String {
        return quote! {
            self.#id
                .iter()
                .map(|value| #key_len + #flat::varint_len(value.len() as u64) + value.len())
                .sum::<usize>()
        };
    }
    if f.packed {
        let body = packed_len(f, flat);
        return quote!(if self.#id.is_empty() {
            0
        } else {
            let len: usize = #body;
            #key_len + #flat::varint_len(len as u64) + len
        });
    }
    match width(f.kind) {
        Some(w) => quote!(self.#id.len() * (#key_len + #w)),
        None => {
            let bits = to_bits(f.kind, &quote!(value));
            quote!(self.#id.iter().map(|&value| #key_len + #flat::varint_len(#bits)).sum::<usize>())
        }
    }
}

/// The read loop's arms for the field: an element at a time, and for a
/// number also a packed record of them, either way whatever the field
/// says, as prost reads them.
pub(super) fn read(f: &Field, flat: &TokenStream) -> TokenStream {
    let id = &f.ident;
    let one = u64::from(f.tag << 3 | f.kind.wire_type());
    let value = read_value(f.kind);
    let arm = quote! {
        Some(#one) => match #value {
            Some(value) => self.#id.push(value),
            None => break false,
        },
    };
    if f.kind == Kind::String {
        return arm;
    }
    let record = u64::from(f.tag << 3 | 2);
    let width = width(f.kind).unwrap_or(0);
    quote! {
        #arm
        Some(#record) => {
            if #flat::extend_packed(&mut r, &mut self.#id, #width, |r| #value).is_none() {
                break false;
            }
        }
    }
}

/// The bytes of a packed record's elements.
fn packed_len(f: &Field, flat: &TokenStream) -> TokenStream {
    let id = &f.ident;
    match width(f.kind) {
        Some(w) => quote!(self.#id.len() * #w),
        None => {
            let bits = to_bits(f.kind, &quote!(value));
            quote!(self.#id.iter().map(|&value| #flat::varint_len(#bits)).sum::<usize>())
        }
    }
}

/// Writes `value` after `key` (none in a packed record).
fn put_number(kind: Kind, key: &[u8], flat: &TokenStream) -> TokenStream {
    let bits = to_bits(kind, &quote!(value));
    match width(kind) {
        Some(_) => quote!(#flat::put_fixed(buf, &[#(#key),*], (#bits).to_le_bytes())),
        None => quote!(#flat::put_varint(buf, &[#(#key),*], #bits)),
    }
}

/// The bytes of a fixed-width number; `None` for a varint.
fn width(kind: Kind) -> Option<usize> {
    match kind.wire_type() {
        1 => Some(8),
        5 => Some(4),
        _ => None,
    }
}
