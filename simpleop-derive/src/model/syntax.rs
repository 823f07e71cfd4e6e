//! Reading kernel signatures: the module's functions, their parameters and
//! the shapes of parameter types.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, Ident, ItemFn, ItemMod, PathArguments, Type};

pub(super) fn err(errors: &mut Vec<syn::Error>, span: Span, msg: impl std::fmt::Display) {
    errors.push(syn::Error::new(span, msg));
}

pub(super) fn find_fn<'a>(module: &'a ItemMod, name: &str) -> Option<&'a ItemFn> {
    module
        .content
        .as_ref()?
        .1
        .iter()
        .find_map(|item| match item {
            syn::Item::Fn(f) if f.sig.ident == name => Some(f),
            _ => None,
        })
}

/// The single type parameter of an elementwise kernel.
pub(super) fn type_param(f: &ItemFn, what: &str, errors: &mut Vec<syn::Error>) -> Option<Ident> {
    let tys: Vec<&syn::TypeParam> = f.sig.generics.type_params().collect();
    if tys.len() != 1 {
        err(
            errors,
            f.sig.ident.span(),
            format!(
                "elementwise `{what}` must be generic over exactly one `T: Float`, as in `fn {what}<T: Float>(x: T) -> T`"
            ),
        );
        return None;
    }
    Some(tys[0].ident.clone())
}

pub(super) fn is_ident(ty: &Type, ident: &Ident) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident(ident))
}

/// A plain `f64`: the scalar of a blob-style function.
pub(super) fn is_f64(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident("f64"))
}

/// The last segment of a path type: its name and its first generic type.
pub(super) fn last_segment(ty: &Type) -> Option<(String, Option<&Type>)> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    let arg = match &seg.arguments {
        PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        }),
        _ => None,
    };
    Some((seg.ident.to_string(), arg))
}

pub(super) fn reference(ty: &Type) -> Option<(bool, &Type)> {
    match ty {
        Type::Reference(r) => Some((r.mutability.is_some(), &r.elem)),
        _ => None,
    }
}

pub(super) fn slice_of(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Slice(s) => Some(&s.elem),
        _ => None,
    }
}

pub(super) fn named(ty: &Type, name: &str) -> bool {
    last_segment(ty).is_some_and(|(n, _)| n == name)
}

/// `&[name]` (or `&mut [name]` when `mutable`).
pub(super) fn slice_ref_of(ty: &Type, mutable: bool, name: &str) -> bool {
    matches!(reference(ty), Some((m, inner)) if m == mutable && slice_of(inner).is_some_and(|e| named(e, name)))
}

/// The typed parameters of `f` with their spans; a `self` is an error.
pub(super) fn args(f: &ItemFn, errors: &mut Vec<syn::Error>) -> Vec<(Type, Span)> {
    f.sig
        .inputs
        .iter()
        .filter_map(|a| match a {
            FnArg::Typed(t) => Some(((*t.ty).clone(), t.span())),
            FnArg::Receiver(r) => {
                err(
                    errors,
                    r.span(),
                    "kernels are free functions and take no `self`",
                );
                None
            }
        })
        .collect()
}

/// The name of `f`'s `i`-th typed parameter, when it is a plain identifier.
pub(super) fn param_name(f: &ItemFn, i: usize) -> Option<Ident> {
    match f
        .sig
        .inputs
        .iter()
        .filter(|a| matches!(a, FnArg::Typed(_)))
        .nth(i)?
    {
        FnArg::Typed(t) => match &*t.pat {
            syn::Pat::Ident(p) => Some(p.ident.clone()),
            _ => None,
        },
        _ => None,
    }
}
