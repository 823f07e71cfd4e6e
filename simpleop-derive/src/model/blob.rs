//! Reading the kernels of a blob-form op: functions over whole input and
//! output blobs.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Ident, ItemFn, Type};

use super::elementwise::RESERVED;
use super::roles::{collect_roles, common_role, gradient, has_role, kernel, no_duplicates};
use super::syntax::{args, err, is_f64, last_segment, named, reference, slice_ref_of};
use super::types::{Backward, Kernel, Kernels, Params, Role};
use crate::options::Options;

/// The forward and gradient of a blob-form op.
pub(super) fn kernels(
    fwd: &ItemFn,
    bwd: Option<&ItemFn>,
    params: &Params,
    opts: &Options,
    errors: &mut Vec<syn::Error>,
) -> Kernels {
    let (forward, input_names) = forward(fwd, params, opts, errors);
    let arity = input_names.len();
    let backward = bwd.map(|b| backward(b, params, arity, errors));
    Kernels {
        forward,
        input_names,
        backward,
    }
}

/// The roles of a blob-style function's parameters: the kwargs, the
/// environment and an `f64` scalar, and what `specific` recognises;
/// anything else is reported as `unexpected`.
pub(super) fn blob_roles(
    f: &ItemFn,
    params: &Params,
    errors: &mut Vec<syn::Error>,
    specific: impl Fn(&Type) -> Option<Role>,
    unexpected: &str,
) -> Vec<(Role, Span)> {
    let roles = collect_roles(args(f, errors), params, errors, |_, ty, _, _, errors| {
        let role = common_role(ty, params)
            .or_else(|| is_f64(ty).then_some(Role::Scalar))
            .or_else(|| specific(ty));
        if role.is_none() {
            err(errors, ty.span(), unexpected);
        }
        role
    });
    no_duplicates(&roles, errors);
    roles
}

/// The forward kernel, and input names by the op's `inputs = N`.
fn forward(
    f: &ItemFn,
    params: &Params,
    opts: &Options,
    errors: &mut Vec<syn::Error>,
) -> (Kernel, Vec<Ident>) {
    let roles = blob_roles(
        f,
        params,
        errors,
        |ty| {
            if named(ty, "OpReqType") {
                Some(Role::Req)
            } else if slice_ref_of(ty, false, "TBlob") {
                Some(Role::Inputs)
            } else if matches!(reference(ty), Some((true, inner)) if named(inner, "TBlobMut")) {
                Some(Role::Out)
            } else {
                None
            }
        },
        "unexpected parameter in a blob `forward`; expected `&[TBlob]`, `&mut TBlobMut`, `OpReqType`, `f64` (scalar), `&Params` or `&EnvArguments`",
    );
    if !has_role(&roles, Role::Out) {
        err(
            errors,
            f.sig.ident.span(),
            "a blob `forward` writes its output: add `out: &mut TBlobMut`",
        );
    }
    let n = opts.inputs.as_ref().map_or(1, |i| i.value);
    if let (Some(names), Some(at)) = (&opts.input_names, &opts.inputs)
        && let Some(taken) = names.iter().find(|n| RESERVED.contains(&n.as_str()))
    {
        err(
            errors,
            at.span,
            format!(
                "input name `{taken}` is taken by the generated eager functions ({}); choose another",
                RESERVED.join(", ")
            ),
        );
    }
    let names = (0..n)
        .map(|i| {
            let s = match (&opts.input_names, n, i) {
                (Some(names), _, _) => names[i].clone(),
                (None, 1, _) => "data".to_string(),
                (None, 2, 0) => "lhs".to_string(),
                (None, 2, _) => "rhs".to_string(),
                _ => format!("arg{i}"),
            };
            Ident::new(&s, f.sig.ident.span())
        })
        .collect();
    (kernel(roles), names)
}

/// The gradient kernel of an op with `arity` inputs.
fn backward(f: &ItemFn, params: &Params, arity: usize, errors: &mut Vec<syn::Error>) -> Backward {
    let roles = blob_roles(
        f,
        params,
        errors,
        |ty| match last_segment(ty).map(|(n, _)| n).as_deref() {
            Some("OutGrad") => Some(Role::OutGrad),
            Some("OutValue") => Some(Role::OutValue),
            Some("Inputs") => Some(Role::Inputs),
            _ if slice_ref_of(ty, true, "TBlobMut") => Some(Role::Grads),
            _ if slice_ref_of(ty, false, "OpReqType") => Some(Role::Reqs),
            _ => None,
        },
        "unexpected parameter in a blob `backward`; expected `OutGrad<&TBlob>`, `OutValue<&TBlob>`, `Inputs<&[TBlob]>`, `&mut [TBlobMut]`, `&[OpReqType]`, `f64`, `&Params` or `&EnvArguments`",
    );
    for (need, what) in [
        (Role::OutGrad, "dy: OutGrad<&TBlob>"),
        (Role::Grads, "grads: &mut [TBlobMut]"),
    ] {
        if !has_role(&roles, need) {
            err(
                errors,
                f.sig.ident.span(),
                format!("a blob `backward` takes `{what}`"),
            );
        }
    }
    gradient(roles, arity)
}
