//! A flat message's enum fields, singular, `optional` or `repeated`: an
//! `i32` on the struct (an `Option<i32>`, a `Vec<i32>`), read and written
//! as an `int32`, with the accessors and the `Debug` prost's derive gives
//! them, so that a message reads the same to its users whichever codec it
//! has.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::fields::Field;

/// The field's entry in the message's `Debug`: an enum's value by its
/// name where it has one, the number otherwise, as prost's derive prints
/// it.
pub(super) fn debug(f: &Field, flat: &TokenStream) -> TokenStream {
    let id = &f.ident;
    let Some(ty) = &f.enumeration else {
        return quote!(builder.field(stringify!(#id), &self.#id););
    };
    let named = quote!(#flat::EnumDebug::<#ty>::new);
    let value = if f.optional {
        quote!(&self.#id.map(#named))
    } else if f.repeated {
        quote!(&self.#id.iter().map(|&value| #named(value)).collect::<::std::vec::Vec<_>>())
    } else {
        quote!(&#named(self.#id))
    };
    quote!(builder.field(stringify!(#id), #value);)
}

/// The accessors prost's derive writes for an enum field, with its doc
/// comments: a getter and a setter, or for a repeated field an iterator
/// over its known values and a `push_`.
pub(super) fn methods(f: &Field) -> Option<TokenStream> {
    let ty = f.enumeration.as_ref()?;
    let id = &f.ident;
    let name = id.to_string();
    let name = name.trim_start_matches("r#");
    if f.repeated {
        let push = format_ident!("push_{name}");
        let iter_doc = format!(
            "Returns an iterator which yields the valid enum values contained in `{name}`."
        );
        let push_doc = format!("Appends the provided enum value to `{name}`.");
        return Some(quote! {
            #[doc = #iter_doc]
            #[allow(clippy::type_complexity)]
            pub fn #id(
                &self,
            ) -> ::core::iter::FilterMap<
                ::core::iter::Cloned<::core::slice::Iter<'_, i32>>,
                fn(i32) -> ::core::option::Option<#ty>,
            > {
                self.#id.iter().cloned().filter_map(|x| {
                    let result: ::core::result::Result<#ty, _> = ::core::convert::TryFrom::try_from(x);
                    result.ok()
                })
            }

            #[doc = #push_doc]
            pub fn #push(&mut self, value: #ty) {
                self.#id.push(value as i32);
            }
        });
    }
    let set = format_ident!("set_{name}");
    let set_doc = format!("Sets `{name}` to the provided enum value.");
    if f.optional {
        let get_doc = format!(
            "Returns the enum value of `{name}`, or the default if the field is unset or set to an invalid enum value."
        );
        return Some(quote! {
            #[doc = #get_doc]
            pub fn #id(&self) -> #ty {
                self.#id
                    .and_then(|x| {
                        let result: ::core::result::Result<#ty, _> = ::core::convert::TryFrom::try_from(x);
                        result.ok()
                    })
                    .unwrap_or_default()
            }

            #[doc = #set_doc]
            pub fn #set(&mut self, value: #ty) {
                self.#id = ::core::option::Option::Some(value as i32);
            }
        });
    }
    let get_doc = format!(
        "Returns the enum value of `{name}`, or the default if the field is set to an invalid enum value."
    );
    Some(quote! {
        #[doc = #get_doc]
        pub fn #id(&self) -> #ty {
            ::core::convert::TryFrom::try_from(self.#id).unwrap_or_default()
        }

        #[doc = #set_doc]
        pub fn #set(&mut self, value: #ty) {
            self.#id = value as i32;
        }
    })
}
