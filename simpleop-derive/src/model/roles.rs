//! Giving kernel parameters their roles: the roles every function kind
//! shares, and the checks every kernel's roles pass.

use proc_macro2::Span;
use syn::Type;

use super::syntax::{err, last_segment, named, reference};
use super::types::{Backward, Kernel, Params, Role};

fn is_kwargs(ty: &Type, params: &Params) -> bool {
    match (reference(ty), params) {
        (Some((false, inner)), Params::Kwargs(p)) => {
            let want = p.segments.last().map(|s| s.ident.to_string());
            last_segment(inner).map(|(n, _)| n) == want
        }
        _ => false,
    }
}

/// Roles of non-kernel parameters shared by every function kind.
pub(super) fn common_role(ty: &Type, params: &Params) -> Option<Role> {
    if is_kwargs(ty, params) {
        return Some(Role::Kwargs);
    }
    if let Some((false, inner)) = reference(ty)
        && named(inner, "EnvArguments")
    {
        return Some(Role::Env);
    }
    None
}

fn role_kind_ok(role: Role, params: &Params, span: Span, errors: &mut Vec<syn::Error>) {
    match (role, params) {
        (Role::Scalar, Params::Scalar) | (Role::Kwargs, Params::Kwargs(_)) => {}
        (Role::Scalar, _) => err(
            errors,
            span,
            "this parameter reads a scalar, but the op has no `scalar` option",
        ),
        (Role::Kwargs, _) => err(
            errors,
            span,
            "this parameter reads kwargs, but the op has no `kwargs = ...` option",
        ),
        _ => {}
    }
}

/// Refuses a role given to more than one parameter.
pub(super) fn no_duplicates(roles: &[(Role, Span)], errors: &mut Vec<syn::Error>) {
    for (i, (r, s)) in roles.iter().enumerate() {
        if roles[..i].iter().any(|(q, _)| q == r) {
            err(
                errors,
                *s,
                format!(
                    "a second parameter for {}: each may appear once",
                    r.describe()
                ),
            );
        }
    }
}

/// The roles of a kernel's parameters. `classify` gives one parameter
/// (its position, type and span, and the roles so far) its role, or
/// reports why it has none and skips it. Every role must fit the op's
/// scalar/kwargs option. (Callers check [`no_duplicates`] where their
/// messages order it.)
pub(super) fn collect_roles(
    args: Vec<(Type, Span)>,
    params: &Params,
    errors: &mut Vec<syn::Error>,
    mut classify: impl FnMut(usize, &Type, Span, &[(Role, Span)], &mut Vec<syn::Error>) -> Option<Role>,
) -> Vec<(Role, Span)> {
    let mut roles: Vec<(Role, Span)> = Vec::new();
    for (i, (ty, span)) in args.into_iter().enumerate() {
        let Some(role) = classify(i, &ty, span, &roles, errors) else {
            continue;
        };
        role_kind_ok(role, params, span, errors);
        roles.push((role, span));
    }
    roles
}

/// Whether any parameter has `role`.
pub(super) fn has_role(roles: &[(Role, Span)], role: Role) -> bool {
    roles.iter().any(|(r, _)| *r == role)
}

/// The kernel of the collected roles.
pub(super) fn kernel(roles: Vec<(Role, Span)>) -> Kernel {
    Kernel {
        roles: roles.into_iter().map(|(r, _)| r).collect(),
    }
}

/// The gradient of the collected roles: whether it reads the forward
/// output, and the mask of inputs it reads (`In0`.. each; `Inputs` all of
/// them).
pub(super) fn gradient(roles: Vec<(Role, Span)>, arity: usize) -> Backward {
    let needs_inputs = roles.iter().fold(0u32, |m, (r, _)| match r {
        Role::InputValue(k) => m | (1 << k),
        Role::Inputs => m | ((1u32 << arity.min(31)) - 1),
        _ => m,
    });
    Backward {
        needs_output: has_role(&roles, Role::OutValue) || has_role(&roles, Role::OutValues),
        needs_inputs,
        kernel: kernel(roles),
    }
}
