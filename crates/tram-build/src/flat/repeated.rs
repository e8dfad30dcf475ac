//! The code of a flat message's `repeated` fields: how each is written,
//! measured and read. A number is read packed or not, whichever the bytes
//! are (as prost and every other decoder must), and written as the field
//! says (packed unless `[packed = false]`). A `bytes::Bytes` or message
//! element is read as a span of the buffer, kept in a list of the field's
//! own ([`Lists`]) and sliced out once the read is over, as a singular
//! one is.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::fields::{Field, Kind};
use super::is_sliced;
use super::values::{key_bytes, message_len, put_message, read_value, to_bits};

/// The repeated fields whose elements are slices of the buffer, and the
/// lists of their spans.
pub(super) struct Lists<'a> {
    fields: Vec<&'a Field>,
}

impl<'a> Lists<'a> {
    pub(super) fn new(fields: &'a [Field]) -> Lists<'a> {
        Lists {
            fields: fields
                .iter()
                .filter(|f| f.repeated && is_sliced(f))
                .collect(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The lists, empty (no allocation until a span is kept).
    pub(super) fn declare(&self) -> TokenStream {
        let names = self.fields.iter().map(|f| list(f));
        quote!(#(let mut #names: ::std::vec::Vec<(usize, usize)> = ::std::vec::Vec::new();)*)
    }

    /// Appends each list's elements, slices of `whole` (the message's
    /// bytes): a `bytes` as it is, a message merged into a new one by its
    /// own codec (an error names the field, as prost's).
    pub(super) fn take(&self, p: &TokenStream) -> TokenStream {
        let each = self.fields.iter().map(|f| {
            let id = &f.ident;
            let name = list(f);
            let push = if f.kind == Kind::Message {
                quote! {
                    let mut item = ::core::default::Default::default();
                    #p::Message::merge(&mut item, value).map_err(|mut error| {
                        error.push(STRUCT_NAME, stringify!(#id));
                        error
                    })?;
                    self.#id.push(item);
                }
            } else {
                quote!(self.#id.push(value);)
            };
            quote! {
                for (start, len) in #name {
                    let value = whole.slice(start..start + len);
                    #push
                }
            }
        });
        quote!(#(#each)*)
    }
}

/// The list of the spans of field `f`'s elements.
fn list(f: &Field) -> syn::Ident {
    format_ident!("list_{}", f.tag)
}

/// Writes the field's elements (`encode_raw`).
pub(super) fn encode(f: &Field, flat: &TokenStream) -> TokenStream {
    let id = &f.ident;
    let key = key_bytes(f.tag, f.wire_type());
    match f.kind {
        Kind::String => {
            return quote! {
                for value in &self.#id {
                    #flat::put_str(buf, &[#(#key),*], value);
                }
            };
        }
        Kind::Bytes => {
            return quote! {
                for value in &self.#id {
                    #flat::put_bytes(buf, &[#(#key),*], value);
                }
            };
        }
        Kind::Message => {
            let put = put_message(&key);
            return quote! {
                for value in &self.#id {
                    #put
                }
            };
        }
        _ => {}
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
    if f.kind == Kind::Message {
        let len = message_len(key_len);
        return quote!(self.#id.iter().map(|value| #len).sum::<usize>());
    }
    if matches!(f.kind, Kind::String | Kind::Bytes) {
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
    if is_sliced(f) {
        let name = list(f);
        return quote! {
            Some(#one) => match r.span() {
                Some(span) => #name.push(span),
                None => break false,
            },
        };
    }
    let value = match f.kind {
        Kind::Bytes => quote!(r.slice().map(<[u8]>::to_vec)),
        kind => read_value(kind),
    };
    let arm = quote! {
        Some(#one) => match #value {
            Some(value) => self.#id.push(value),
            None => break false,
        },
    };
    if matches!(f.kind, Kind::String | Kind::Bytes) {
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
