//! A flat message's `oneof` fields: an `Option` of an enum prost-build
//! writes in the message's module, each of whose variants is a field a
//! flat message may have (a number, an enum, a string, `bytes`, or a flat
//! message without message fields of its own).
//!
//! The enum keeps prost's `Oneof` derive, which writes it (its `encode`
//! and `encoded_len`, with tram's `bytes` encoding, as every message
//! tram-build generates) and merges it where the message goes to prost.
//! The read written here sets a number, a string or a `Vec<u8>` variant
//! as it reads it, and keeps a `Bytes` or message variant as a span,
//! sliced out after the read. A oneof seen twice in one message goes to
//! prost, whose derive says how the second replaces the first or merges
//! into it.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Attribute, Item, Meta};

use super::fields::{Field, Kind, derives, field, generic_of, prost_args, str_value};
use super::is_sliced;
use super::values::read_value;

pub(super) struct Oneof {
    /// The struct's field, an `Option` of the enum.
    pub(super) ident: syn::Ident,
    /// The enum, as the field's type names it (`blob::Either`).
    path: syn::Path,
    /// Its place among the struct's fields.
    pub(super) position: usize,
    /// The variants, each as a field whose ident is the variant's.
    pub(super) variants: Vec<Field>,
}

impl Oneof {
    /// The oneof of the struct's field `f` (whose prost attribute is
    /// `attr`), if it is one and every variant of its enum (one of the
    /// modules among `items`) is a field a flat message may have; a
    /// message variant of one of the types named in `leaves`.
    pub(super) fn parse(
        f: &syn::Field,
        attr: &Attribute,
        items: &[Item],
        leaves: &[syn::Ident],
    ) -> Option<Oneof> {
        let (mut path, mut tags) = (None, None);
        for meta in prost_args(attr)? {
            let Meta::NameValue(nv) = meta else {
                return None;
            };
            let value = str_value(&nv)?;
            if nv.path.is_ident("oneof") {
                path = Some(syn::parse_str::<syn::Path>(&value.value()).ok()?);
            } else if nv.path.is_ident("tags") {
                tags = Some(value.value());
            } else {
                return None;
            }
        }
        let path = path?;
        let ty = generic_of(&f.ty, "Option")?;
        if quote!(#ty).to_string() != quote!(#path).to_string() {
            return None;
        }
        // prost-build writes the enum in a module named for the message.
        let [module, name] = &path.segments.iter().collect::<Vec<_>>()[..] else {
            return None;
        };
        let e = items.iter().find_map(|item| match item {
            Item::Mod(m) if m.ident == module.ident => {
                m.content.as_ref()?.1.iter().find_map(|item| match item {
                    Item::Enum(e) if e.ident == name.ident => Some(e),
                    _ => None,
                })
            }
            _ => None,
        })?;
        let derived = derives(&e.attrs);
        if !derived
            .iter()
            .any(|p| p.segments.last().is_some_and(|s| s.ident == "Oneof"))
        {
            return None;
        }
        let mut variants = Vec::new();
        for v in &e.variants {
            let mut prost = v.attrs.iter().filter(|a| a.path().is_ident("prost"));
            let (Some(attr), None) = (prost.next(), prost.next()) else {
                return None;
            };
            let syn::Fields::Unnamed(inner) = &v.fields else {
                return None;
            };
            let [inner] = &inner.unnamed.iter().collect::<Vec<_>>()[..] else {
                return None;
            };
            let mut variant = field(v.ident.clone(), attr, true)?;
            match variant.kind {
                Kind::Message if !is_leaf(&inner.ty, leaves) => return None,
                Kind::Bytes => variant.vec = is_vec(&inner.ty)?,
                _ => {}
            }
            variants.push(variant);
        }
        let mut listed = tags?
            .split(',')
            .map(|t| t.trim().parse::<u32>().ok())
            .collect::<Option<Vec<_>>>()?;
        let mut have: Vec<u32> = variants.iter().map(|v| v.tag).collect();
        listed.sort_unstable();
        have.sort_unstable();
        if have.is_empty() || listed != have {
            return None;
        }
        Some(Oneof {
            ident: f.ident.clone()?,
            path,
            position: 0,
            variants,
        })
    }

    /// The oneof, as the struct's field at `position`.
    pub(super) fn at(self, position: usize) -> Oneof {
        Oneof { position, ..self }
    }

    /// Its smallest tag, by which prost's derive orders it among the
    /// fields it writes.
    pub(super) fn first_tag(&self) -> u32 {
        self.variants
            .iter()
            .map(|v| v.tag)
            .min()
            .unwrap_or_default()
    }

    /// Writes the variant held, if any (`encode_raw`).
    pub(super) fn encode(&self) -> TokenStream {
        let id = &self.ident;
        quote! {
            if let ::core::option::Option::Some(oneof) = &self.#id {
                oneof.encode(buf);
            }
        }
    }

    /// The bytes it takes (`encoded_len`).
    pub(super) fn encoded_len(&self) -> TokenStream {
        let id = &self.ident;
        quote!(self.#id.as_ref().map_or(0, |oneof| oneof.encoded_len()))
    }

    /// Its arm of `merge_field`: the enum's own merge, as prost's derive
    /// calls it.
    pub(super) fn merge_arm(&self) -> TokenStream {
        let (id, path) = (&self.ident, &self.path);
        let tags = tag_pattern(self.variants.iter().map(|v| v.tag).collect());
        quote! {
            #tags => #path::merge(&mut self.#id, tag, wire_type, buf, ctx)
                .map_err(|mut error| {
                    error.push(STRUCT_NAME, stringify!(#id));
                    error
                }),
        }
    }

    /// Whether a variant is read as a span, to be set after the read.
    pub(super) fn defers(&self) -> bool {
        self.variants.iter().any(is_sliced)
    }

    /// Whether more than one is: which was read is then kept too.
    fn defers_several(&self) -> bool {
        self.variants.iter().filter(|v| is_sliced(v)).count() > 1
    }

    /// Whether one of its variants was read.
    fn seen(&self) -> syn::Ident {
        format_ident!("seen_{}", self.first_tag())
    }

    /// The tag of a variant read as a span (kept in the message's spans).
    fn pending(&self) -> syn::Ident {
        format_ident!("pending_{}", self.first_tag())
    }

    /// What the read keeps of it.
    pub(super) fn declare(&self) -> TokenStream {
        let seen = self.seen();
        if !self.defers_several() {
            return quote!(let mut #seen = false;);
        }
        let pending = self.pending();
        quote! {
            let mut #seen = false;
            let mut #pending = 0u32;
        }
    }

    /// The read loop's arms for its variants; `slot`: where in `spans` a
    /// variant read as a span goes.
    pub(super) fn read_arms(&self, slot: Option<usize>) -> TokenStream {
        let (id, path) = (&self.ident, &self.path);
        let (seen, pending) = (self.seen(), self.pending());
        let arms = self.variants.iter().map(|v| {
            let key = u64::from(v.tag << 3 | v.kind.wire_type());
            let (variant, tag) = (&v.ident, v.tag);
            if is_sliced(v) {
                let slot = slot.unwrap_or_default();
                let which = self.defers_several().then(|| quote!(#pending = #tag;));
                return quote! {
                    Some(#key) => match r.span() {
                        Some(span) if !#seen => {
                            #seen = true;
                            #which
                            spans[#slot] = Some(span);
                        }
                        _ => break false,
                    },
                };
            }
            let value = match v.kind {
                Kind::Bytes => quote!(r.slice().map(<[u8]>::to_vec)),
                kind => read_value(kind),
            };
            quote! {
                Some(#key) => match #value {
                    Some(value) if !#seen => {
                        #seen = true;
                        self.#id = Some(#path::#variant(value));
                    }
                    _ => break false,
                },
            }
        });
        quote!(#(#arms)*)
    }

    /// Sets the variant read as a span to its slice of the buffer,
    /// `value`: a `bytes` to it, a message merged into the one the field
    /// holds if it holds that variant, or into a new one, as prost's
    /// derive merges it.
    pub(super) fn set_pending(&self, p: &TokenStream) -> TokenStream {
        let (id, path, pending) = (&self.ident, &self.path, self.pending());
        let push = quote! {
            |mut error: #p::DecodeError| {
                error.push(STRUCT_NAME, stringify!(#id));
                error
            }
        };
        let arms: Vec<(u32, TokenStream)> = self
            .variants
            .iter()
            .filter(|v| is_sliced(v))
            .map(|v| {
                let (variant, tag) = (&v.ident, v.tag);
                let set = if v.kind == Kind::Message {
                    quote! {
                        if let ::core::option::Option::Some(#path::#variant(held)) = &mut self.#id {
                            #p::Message::merge(held, value).map_err(#push)?;
                        } else {
                            let mut held = ::core::default::Default::default();
                            #p::Message::merge(&mut held, value).map_err(#push)?;
                            self.#id = Some(#path::#variant(held));
                        }
                    }
                } else {
                    quote!(self.#id = Some(#path::#variant(value));)
                };
                (tag, set)
            })
            .collect();
        match &arms[..] {
            [(_, set)] => set.clone(),
            _ => {
                let arms = arms.iter().map(|(tag, set)| quote!(#tag => { #set }));
                quote!(match #pending { #(#arms)* _ => {} })
            }
        }
    }
}

/// A pattern matching `tags`: runs of consecutive tags as ranges (as
/// clippy would have them written), the rest one by one.
fn tag_pattern(mut tags: Vec<u32>) -> TokenStream {
    tags.sort_unstable();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for tag in tags {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == tag => *last = tag,
            _ => runs.push((tag, tag)),
        }
    }
    let runs = runs.iter().map(|&(first, last)| {
        if first == last {
            quote!(#first)
        } else {
            quote!(#first..=#last)
        }
    });
    quote!(#(#runs)|*)
}

/// Whether a `bytes` variant's type is a `Vec<u8>` (or a `Bytes`); `None`
/// for anything else.
fn is_vec(ty: &syn::Type) -> Option<bool> {
    let syn::Type::Path(t) = ty else {
        return None;
    };
    match t.path.segments.last()?.ident.to_string().as_str() {
        "Vec" => Some(true),
        "Bytes" => Some(false),
        _ => None,
    }
}

/// Whether `ty` is `super::T` (the message's own module, seen from the
/// enum's) for a `T` named in `leaves`.
fn is_leaf(ty: &syn::Type, leaves: &[syn::Ident]) -> bool {
    let syn::Type::Path(t) = ty else {
        return false;
    };
    let segments: Vec<_> = t.path.segments.iter().collect();
    match &segments[..] {
        [up, leaf] => {
            up.ident == "super" && leaf.arguments.is_empty() && leaves.contains(&leaf.ident)
        }
        _ => false,
    }
}
