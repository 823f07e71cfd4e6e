//! Paths and values the generated items share.

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::{OpModel, Params};

/// The kwargs type as seen from inside the op's module: paths in the
/// attribute resolve where the attribute is written, one level up.
fn inner_path(p: &syn::Path) -> TokenStream {
    let first = p
        .segments
        .first()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    if p.leading_colon.is_some() || first == "crate" {
        quote!(#p)
    } else if first == "self" {
        let rest = p.segments.iter().skip(1);
        quote!(super #(:: #rest)*)
    } else {
        quote!(super:: #p)
    }
}

/// The op's kwargs type as seen from inside its module, if it takes kwargs.
pub(super) fn kwargs_type(m: &OpModel) -> Option<TokenStream> {
    match &m.params {
        Params::Kwargs(p) => Some(inner_path(p)),
        _ => None,
    }
}
