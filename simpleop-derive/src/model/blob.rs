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
    // Kwargs-dependent arguments: any of them may be read.
    let arity = match opts.arguments {
        Some(_) => 31,
        None => input_names.len(),
    };
    let backward = bwd.map(|b| backward(b, params, arity, opts.outputs.as_ref(), errors));
    Kernels {
        outputs: 1,
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
            } else if slice_ref_of(ty, false, "OpReqType") {
                Some(Role::Reqs)
            } else if slice_ref_of(ty, false, "TBlob") {
                Some(Role::Inputs)
            } else if slice_ref_of(ty, true, "TBlobMut") {
                Some(Role::Outs)
            } else if matches!(reference(ty), Some((true, inner)) if named(inner, "TBlobMut")) {
                Some(Role::Out)
            } else if last_segment(ty).is_some_and(|(n, _)| n == "AuxStates") {
                Some(Role::Aux)
            } else if matches!(reference(ty), Some((false, inner)) if named(inner, "RunContext")) {
                Some(Role::Ctx)
            } else {
                None
            }
        },
        "unexpected parameter in a blob `forward`; expected `&[TBlob]`, `&mut TBlobMut` (or `&mut [TBlobMut]` with `outputs`), `OpReqType` (or `&[OpReqType]`), `AuxStates<&mut [TBlobMut]>`, `&RunContext`, `f64` (scalar), `&Params` or `&EnvArguments`",
    );
    output_roles(f, &roles, opts, errors);
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

/// The forward writes `out` (one output) or `outs` (`outputs = ...`), and
/// takes `AuxStates` exactly when the op has `aux = [...]`.
fn output_roles(f: &ItemFn, roles: &[(Role, Span)], opts: &Options, errors: &mut Vec<syn::Error>) {
    let span = f.sig.ident.span();
    let find = |r: Role| roles.iter().find(|(q, _)| *q == r).map(|(_, s)| *s);
    match (&opts.outputs, find(Role::Out), find(Role::Outs)) {
        (None, None, None) => err(
            errors,
            span,
            "a blob `forward` writes its output: add `out: &mut TBlobMut`",
        ),
        (Some(_), None, None) => err(
            errors,
            span,
            "an op with `outputs = ...` writes them all: add `outs: &mut [TBlobMut]`",
        ),
        (None, _, Some(s)) => err(
            errors,
            s,
            "`&mut [TBlobMut]` is for ops with several outputs: declare `outputs = N`, or write one `out: &mut TBlobMut`",
        ),
        (Some(_), Some(s), _) => err(
            errors,
            s,
            "an op with `outputs = ...` writes `outs: &mut [TBlobMut]`, not one `&mut TBlobMut`",
        ),
        _ => {}
    }
    if let (None, Some(s)) = (&opts.outputs, find(Role::Reqs)) {
        err(
            errors,
            s,
            "`&[OpReqType]` is for ops with several outputs; one output takes `req: OpReqType`",
        );
    }
    if let (Some(_), Some(s)) = (&opts.outputs, find(Role::Req)) {
        err(
            errors,
            s,
            "an op with `outputs = ...` takes one request per output: `reqs: &[OpReqType]`",
        );
    }
    match (&opts.aux, find(Role::Aux)) {
        (Some(a), None) => err(
            errors,
            a.span,
            "an op with aux states reads and updates them: add `aux: AuxStates<&mut [TBlobMut]>` to `forward`",
        ),
        (None, Some(s)) => err(
            errors,
            s,
            "`AuxStates` needs the op's aux-state names: `aux = [\"moving_mean\", ...]`",
        ),
        _ => {}
    }
}

/// The gradient kernel of an op with `arity` inputs.
fn backward(
    f: &ItemFn,
    params: &Params,
    arity: usize,
    outputs: Option<&crate::options::At<crate::options::Count>>,
    errors: &mut Vec<syn::Error>,
) -> Backward {
    let roles = blob_roles(
        f,
        params,
        errors,
        |ty| match last_segment(ty).map(|(n, _)| n).as_deref() {
            Some("OutGrad") => Some(Role::OutGrad),
            Some("OutValue") => Some(Role::OutValue),
            Some("OutGrads") => Some(Role::OutGrads),
            Some("OutValues") => Some(Role::OutValues),
            _ if matches!(reference(ty), Some((false, inner)) if named(inner, "RunContext")) => {
                Some(Role::Ctx)
            }
            Some("Inputs") => Some(Role::Inputs),
            _ if slice_ref_of(ty, true, "TBlobMut") => Some(Role::Grads),
            _ if slice_ref_of(ty, false, "OpReqType") => Some(Role::Reqs),
            _ => None,
        },
        "unexpected parameter in a blob `backward`; expected `OutGrad<&TBlob>` (or `OutGrads<&[Option<TBlob>]>` with `outputs`), `OutValue<&TBlob>` (or `OutValues<&[TBlob]>`), `Inputs<&[TBlob]>`, `&mut [TBlobMut]`, `&[OpReqType]`, `&RunContext`, `f64`, `&Params` or `&EnvArguments`",
    );
    let multi = outputs.is_some();
    let dy = if multi {
        (Role::OutGrads, "dys: OutGrads<&[Option<TBlob>]>")
    } else {
        (Role::OutGrad, "dy: OutGrad<&TBlob>")
    };
    for (r, s) in &roles {
        let wrong = match r {
            Role::OutGrad | Role::OutValue if multi => Some(
                "an op with `outputs = ...` reads `OutGrads<&[Option<TBlob>]>` and `OutValues<&[TBlob]>`, one entry per output",
            ),
            Role::OutGrads | Role::OutValues if !multi => Some(
                "`OutGrads` and `OutValues` are for ops with several outputs (`outputs = N`); one output takes `OutGrad<&TBlob>` and `OutValue<&TBlob>`",
            ),
            _ => None,
        };
        if let Some(w) = wrong {
            err(errors, *s, w);
        }
    }
    for (need, what) in [dy, (Role::Grads, "grads: &mut [TBlobMut]")] {
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
