//! Which of prost-build's structs are flat messages, read from the
//! `#[prost(...)]` attributes prost-build writes on them and their fields,
//! and what of prost's is taken off a struct whose codec is written here.

use quote::format_ident;
use syn::punctuated::Punctuated;
use syn::{Attribute, Fields, ItemStruct, Lit, Meta, Token};

use super::oneof::Oneof;

/// How a field is written on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Uint64,
    Uint32,
    Int64,
    Int32,
    Sint64,
    Sint32,
    Bool,
    Fixed64,
    Fixed32,
    Sfixed64,
    Sfixed32,
    Double,
    Float,
    String,
    Bytes,
    /// A message field whose type is a flat message without message
    /// fields of its own, in the same module.
    Message,
}

impl Kind {
    fn parse(name: &str) -> Option<Kind> {
        Some(match name {
            "uint64" => Kind::Uint64,
            "uint32" => Kind::Uint32,
            "int64" => Kind::Int64,
            "int32" => Kind::Int32,
            "sint64" => Kind::Sint64,
            "sint32" => Kind::Sint32,
            "bool" => Kind::Bool,
            "fixed64" => Kind::Fixed64,
            "fixed32" => Kind::Fixed32,
            "sfixed64" => Kind::Sfixed64,
            "sfixed32" => Kind::Sfixed32,
            "double" => Kind::Double,
            "float" => Kind::Float,
            "string" => Kind::String,
            "message" => Kind::Message,
            _ => return None,
        })
    }

    /// prost's module of encoding functions for the kind.
    pub(super) fn module(self) -> syn::Ident {
        format_ident!(
            "{}",
            match self {
                Kind::Uint64 => "uint64",
                Kind::Uint32 => "uint32",
                Kind::Int64 => "int64",
                Kind::Int32 => "int32",
                Kind::Sint64 => "sint64",
                Kind::Sint32 => "sint32",
                Kind::Bool => "bool",
                Kind::Fixed64 => "fixed64",
                Kind::Fixed32 => "fixed32",
                Kind::Sfixed64 => "sfixed64",
                Kind::Sfixed32 => "sfixed32",
                Kind::Double => "double",
                Kind::Float => "float",
                Kind::String => "string",
                Kind::Bytes => "bytes",
                Kind::Message => "message",
            }
        )
    }

    pub(super) fn wire_type(self) -> u32 {
        match self {
            Kind::Fixed64 | Kind::Sfixed64 | Kind::Double => 1,
            Kind::String | Kind::Bytes | Kind::Message => 2,
            Kind::Fixed32 | Kind::Sfixed32 | Kind::Float => 5,
            _ => 0,
        }
    }
}

/// One field of a flat message.
pub(super) struct Field {
    pub(super) ident: syn::Ident,
    pub(super) kind: Kind,
    pub(super) tag: u32,
    /// `bytes = "vec"`: a `Vec<u8>` rather than a `Bytes`.
    pub(super) vec: bool,
    /// The enum of an `enumeration` field (an `int32` on the wire).
    pub(super) enumeration: Option<syn::Path>,
    /// A proto3 `optional` field: an `Option`, written whenever it is
    /// `Some`, zero included.
    pub(super) optional: bool,
    /// A `repeated` field: a `Vec`, each element appended as it is read
    /// (a `bytes` or message element once the read is over, sliced).
    pub(super) repeated: bool,
    /// A repeated number written packed (one length-delimited record),
    /// as proto3 writes them unless told `[packed = false]`.
    pub(super) packed: bool,
}

impl Field {
    /// The wire type of the field's key as written: a packed field's
    /// record is length-delimited.
    pub(super) fn wire_type(&self) -> u32 {
        if self.packed {
            2
        } else {
            self.kind.wire_type()
        }
    }
}

/// The names of the structs among `items` that are flat messages with no
/// message fields (nor oneof variants that are messages): the types a flat
/// message's message fields may have.
pub(super) fn leaves(items: &[syn::Item]) -> Vec<syn::Ident> {
    items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Struct(s) => flat_fields(s, items, &[]).map(|_| s.ident.clone()),
            _ => None,
        })
        .collect()
}

/// The fields of `s` (one of `items`) if it is a flat message: one whose
/// message fields and oneof variants (if any) are of the types named in
/// `leaves`, flat messages of the same module without message fields of
/// their own, so that a flat message nests one level deep at most.
pub(super) fn flat_fields(
    s: &ItemStruct,
    items: &[syn::Item],
    leaves: &[syn::Ident],
) -> Option<Flat> {
    if !derives_message(&s.attrs) || !s.generics.params.is_empty() {
        return None;
    }
    // At the struct, prost-build writes only the prost path.
    for attr in s.attrs.iter().filter(|a| a.path().is_ident("prost")) {
        for meta in prost_args(attr)? {
            match meta {
                Meta::NameValue(nv) if nv.path.is_ident("prost_path") => {}
                _ => return None,
            }
        }
    }
    let Fields::Named(named) = &s.fields else {
        return None;
    };
    let mut fields = Vec::new();
    let mut oneofs = Vec::new();
    for (position, f) in named.named.iter().enumerate() {
        let mut prost = f.attrs.iter().filter(|a| a.path().is_ident("prost"));
        let (Some(attr), None) = (prost.next(), prost.next()) else {
            return None;
        };
        if let Some(oneof) = Oneof::parse(f, attr, items, leaves) {
            oneofs.push(oneof.at(position));
            continue;
        }
        let field = field(f.ident.clone()?, attr, false)?;
        if field.kind == Kind::Message {
            let ty = generic_of(&f.ty, if field.repeated { "Vec" } else { "Option" })?;
            if !leaves.iter().any(|l| ty.is_ident(l)) {
                return None;
            }
        }
        fields.push(field);
    }
    if fields.is_empty() && oneofs.is_empty() {
        return None;
    }
    let mut tags: Vec<u32> = fields
        .iter()
        .chain(oneofs.iter().flat_map(|o| &o.variants))
        .map(|f| f.tag)
        .collect();
    let n = tags.len();
    tags.sort_unstable();
    tags.dedup();
    (tags.len() == n).then_some(Flat { fields, oneofs })
}

/// The fields of a flat message: its plain fields and its oneofs, each in
/// the struct's order.
pub(super) struct Flat {
    pub(super) fields: Vec<Field>,
    pub(super) oneofs: Vec<Oneof>,
}

/// A field from its `#[prost(...)]` attribute, if it is one a flat
/// message may have: a kind and a tag, nothing else. `variant`: a oneof's
/// variant, never `optional` or `repeated` (a message one included).
pub(super) fn field(ident: syn::Ident, attr: &Attribute, variant: bool) -> Option<Field> {
    let mut kind = None;
    let mut tag = None;
    let mut vec = false;
    let mut enumeration = None;
    let mut optional = false;
    let mut repeated = false;
    let mut packed = None;
    for meta in prost_args(attr)? {
        match meta {
            Meta::Path(p) if p.is_ident("optional") => {
                if std::mem::replace(&mut optional, true) {
                    return None;
                }
            }
            Meta::Path(p) if p.is_ident("repeated") => {
                if std::mem::replace(&mut repeated, true) {
                    return None;
                }
            }
            // A oneof's `bytes` variant names no type: its own says.
            Meta::Path(p) if variant && p.is_ident("bytes") => {
                if kind.replace(Kind::Bytes).is_some() {
                    return None;
                }
            }
            Meta::Path(p) => {
                let k = Kind::parse(&p.get_ident()?.to_string())?;
                if kind.replace(k).is_some() {
                    return None;
                }
            }
            Meta::NameValue(nv) => {
                let value = str_value(&nv)?;
                if nv.path.is_ident("tag") {
                    tag = Some(value.value().parse::<u32>().ok()?);
                } else if nv.path.is_ident("packed") {
                    let p = value.value().parse::<bool>().ok()?;
                    if packed.replace(p).is_some() {
                        return None;
                    }
                } else if nv.path.is_ident("enumeration") {
                    enumeration = Some(syn::parse_str::<syn::Path>(&value.value()).ok()?);
                    if kind.replace(Kind::Int32).is_some() {
                        return None;
                    }
                } else if nv.path.is_ident("bytes") {
                    vec = match value.value().as_str() {
                        "bytes" => false,
                        "vec" => true,
                        _ => return None,
                    };
                    if kind.replace(Kind::Bytes).is_some() {
                        return None;
                    }
                } else {
                    return None;
                }
            }
            Meta::List(_) => return None,
        }
    }
    let tag = tag.filter(|t| (1..(1 << 29)).contains(t))?;
    // A singular message field is always an `Option`.
    if optional && repeated
        || variant && (optional || repeated)
        || kind == Some(Kind::Message) && optional == repeated && !variant
    {
        return None;
    }
    let kind = kind?;
    let number = !matches!(kind, Kind::String | Kind::Bytes | Kind::Message);
    // prost's default: numbers packed.
    let packed = match packed {
        Some(p) if !repeated || p && !number => return None,
        Some(p) => p,
        None => repeated && number,
    };
    Some(Field {
        ident,
        kind,
        tag,
        vec,
        enumeration,
        optional,
        repeated,
        packed,
    })
}

/// `T` of a field's type `Option<T>` or `Vec<T>` (`outer`, as prost-build
/// writes them: `::core::option::Option<T>`, `::prost::alloc::vec::Vec<T>`).
pub(super) fn generic_of<'a>(ty: &'a syn::Type, outer: &str) -> Option<&'a syn::Path> {
    let syn::Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != outer {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(syn::Type::Path(t)) if args.args.len() == 1 => Some(&t.path),
        _ => None,
    }
}

/// The string of a `name = "value"` argument; `None` for any other value.
pub(super) fn str_value(nv: &syn::MetaNameValue) -> Option<&syn::LitStr> {
    match &nv.value {
        syn::Expr::Lit(syn::ExprLit {
            lit: Lit::Str(value),
            ..
        }) => Some(value),
        _ => None,
    }
}

pub(super) fn prost_args(attr: &Attribute) -> Option<Punctuated<Meta, Token![,]>> {
    attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
        .ok()
}

fn derives_message(attrs: &[Attribute]) -> bool {
    derives(attrs).iter().any(is_message)
}

fn is_message(path: &syn::Path) -> bool {
    path.segments.last().is_some_and(|s| s.ident == "Message")
}

pub(super) fn derives(attrs: &[Attribute]) -> Vec<syn::Path> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .filter_map(|a| {
            a.parse_args_with(Punctuated::<syn::Path, Token![,]>::parse_terminated)
                .ok()
        })
        .flatten()
        .collect()
}

/// Drops prost's derive (for `Default`, which is what it wrote) and the
/// `#[prost]` attributes it read.
pub(super) fn strip(s: &mut ItemStruct) {
    let kept: Vec<syn::Path> = derives(&s.attrs)
        .into_iter()
        .filter(|p| !is_message(p))
        .collect();
    s.attrs
        .retain(|a| !a.path().is_ident("derive") && !a.path().is_ident("prost"));
    s.attrs
        .insert(0, syn::parse_quote!(#[derive(#(#kept,)* Default)]));
    if let Fields::Named(named) = &mut s.fields {
        for f in &mut named.named {
            f.attrs.retain(|a| !a.path().is_ident("prost"));
        }
    }
}
