//! Reading the kernels of an elementwise op: `fn forward<T: Float>` over
//! its inputs (none for a source op) and `fn backward` over typed gradient
//! parameters.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Ident, ItemFn, ReturnType, Type};

use super::roles::{collect_roles, common_role, gradient, has_role, kernel, no_duplicates};
use super::syntax::{args, err, is_ident, last_segment, named, param_name, reference, type_param};
use super::types::{Backward, Kernel, Kernels, Params, Role};
use crate::options::Options;

/// The most inputs an elementwise kernel takes (its tile buffers live on the stack).
const MAX_INPUTS: usize = 8;

/// The most outputs an elementwise kernel returns (`-> (T, T, T, T)`).
const MAX_OUTPUTS: usize = 4;

/// Parameter names of the generated eager functions; inputs cannot use them.
pub(super) const RESERVED: [&str; 4] = ["out", "req", "scalar", "params"];

/// The forward and gradient of an elementwise op.
pub(super) fn kernels(
    fwd: &ItemFn,
    bwd: Option<&ItemFn>,
    params: &Params,
    opts: &Options,
    errors: &mut Vec<syn::Error>,
) -> Option<Kernels> {
    let (forward, input_names, outputs) = forward(fwd, params, opts, errors)?;
    let arity = input_names.len();
    let backward = bwd.and_then(|b| backward(b, params, arity, outputs, errors));
    if arity == 0
        && let Some(b) = bwd
    {
        err(
            errors,
            b.sig.ident.span(),
            "a source op (no inputs) has nothing to differentiate; remove `backward`",
        );
    }
    Some(Kernels {
        forward,
        outputs,
        input_names,
        backward,
    })
}

/// The forward kernel, the names of its inputs and its number of outputs.
fn forward(
    f: &ItemFn,
    params: &Params,
    opts: &Options,
    errors: &mut Vec<syn::Error>,
) -> Option<(Kernel, Vec<Ident>, usize)> {
    let t = type_param(f, "forward", errors)?;
    let args = args(f, errors);
    let sig = ForwardSig {
        scalar_at: scalar_position(f, &t, &args, params, errors)?,
        f,
        t,
        params,
        rng_requested: opts.rng.is_some(),
    };
    let mut names = Vec::new();
    let roles = collect_roles(args, params, errors, |i, ty, span, roles, errors| {
        let role = sig.role(i, ty, span, &mut names, errors)?;
        if let Role::Input(_) | Role::State(_) = role
            && roles
                .iter()
                .any(|(r, _)| matches!(r, Role::Scalar | Role::Kwargs | Role::Rng))
        {
            err(
                errors,
                span,
                "inputs come first, before the scalar, kwargs or rng",
            );
        }
        Some(role)
    });
    let outputs = forward_outputs(f, &sig.t, errors);
    check_inputs(f, &names, &roles, errors);
    if outputs > 1 && names.is_empty() {
        err(
            errors,
            f.sig.ident.span(),
            "a source op (no inputs) returns one value; several outputs need inputs",
        );
    }
    no_duplicates(&roles, errors);
    Some((kernel(roles), names, outputs))
}

/// How many values the forward returns: one `T`, or a tuple of 2 to
/// [`MAX_OUTPUTS`] `T`s (an op with several outputs).
pub(super) fn forward_outputs(f: &ItemFn, t: &Ident, errors: &mut Vec<syn::Error>) -> usize {
    let why = format!(
        "an elementwise `forward` returns one `{t}`, or a tuple of 2 to {MAX_OUTPUTS} `{t}`s for several outputs"
    );
    match &f.sig.output {
        ReturnType::Type(_, ty) if is_ident(ty, t) => 1,
        ReturnType::Type(_, ty) => match &**ty {
            Type::Tuple(tt)
                if (2..=MAX_OUTPUTS).contains(&tt.elems.len())
                    && tt.elems.iter().all(|e| is_ident(e, t)) =>
            {
                tt.elems.len()
            }
            _ => {
                err(errors, ty.span(), why);
                1
            }
        },
        ReturnType::Default => {
            err(errors, f.sig.ident.span(), why);
            1
        }
    }
}

/// With `scalar`, the position of the last `T` parameter, which is the
/// scalar; `None` (after an error) when that leaves no input.
pub(super) fn scalar_position(
    f: &ItemFn,
    t: &Ident,
    args: &[(Type, Span)],
    params: &Params,
    errors: &mut Vec<syn::Error>,
) -> Option<Option<usize>> {
    if !matches!(params, Params::Scalar) {
        return Some(None);
    }
    let t_positions: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(_, (ty, _))| is_ident(ty, t))
        .map(|(i, _)| i)
        .collect();
    let last = t_positions.last().copied();
    if t_positions.len() < 2 {
        let span = last.map_or(f.sig.ident.span(), |i| args[i].1);
        err(
            errors,
            span,
            "with `scalar`, the last `T` parameter is the scalar, so this op would have no input; write `fn forward<T: Float>(x: T, s: T) -> T`",
        );
        return None;
    }
    Some(last)
}

/// [`common_role`] for an elementwise function (`what`: its kind), which
/// takes the scalar and the kwargs directly: `&EnvArguments` is refused,
/// as `Some(None)`.
fn direct_common_role(
    ty: &Type,
    params: &Params,
    what: &str,
    errors: &mut Vec<syn::Error>,
) -> Option<Option<Role>> {
    let r = common_role(ty, params)?;
    if r == Role::Env {
        err(
            errors,
            ty.span(),
            format!(
                "elementwise {what} take the scalar `T` or `&Params` directly, not `&EnvArguments`"
            ),
        );
        return Some(None);
    }
    Some(Some(r))
}

/// What the forward's parameters are read against.
struct ForwardSig<'a> {
    f: &'a ItemFn,
    /// The kernel's type parameter.
    t: Ident,
    /// The position of the scalar parameter, with `scalar`.
    scalar_at: Option<usize>,
    params: &'a Params,
    rng_requested: bool,
}

impl ForwardSig<'_> {
    /// The role of parameter `i`; an input's name goes to `names`.
    fn role(
        &self,
        i: usize,
        ty: &Type,
        span: Span,
        names: &mut Vec<Ident>,
        errors: &mut Vec<syn::Error>,
    ) -> Option<Role> {
        let t = &self.t;
        let input = |names: &mut Vec<Ident>| {
            let k = names.len();
            names
                .push(param_name(self.f, i).unwrap_or_else(|| Ident::new(&format!("in{k}"), span)));
            k
        };
        let role = if is_ident(ty, t) {
            if Some(i) == self.scalar_at {
                Role::Scalar
            } else {
                Role::Input(input(names))
            }
        } else if let Some(r) = direct_common_role(ty, self.params, "kernels", errors) {
            r?
        } else if matches!(reference(ty), Some((true, inner)) if is_ident(inner, t)) {
            Role::State(input(names))
        } else if matches!(reference(ty), Some((true, inner)) if named(inner, "Rng")) {
            if !self.rng_requested {
                err(
                    errors,
                    span,
                    "`forward` takes `&mut Rng`, which needs `resources(rng)` in the attribute",
                );
            }
            Role::Rng
        } else {
            err(
                errors,
                ty.span(),
                format!(
                    "unexpected parameter type in an elementwise kernel; expected `{t}` (an input or the scalar), `&Params` (kwargs) or `&mut Rng`"
                ),
            );
            return None;
        };
        Some(role)
    }
}

/// The input names and count: none may take a name of the generated
/// functions' parameters, a kernel with inputs takes no random stream, and
/// there are at most [`MAX_INPUTS`].
fn check_inputs(f: &ItemFn, names: &[Ident], roles: &[(Role, Span)], errors: &mut Vec<syn::Error>) {
    for n in names {
        if RESERVED.contains(&n.to_string().as_str()) {
            err(
                errors,
                n.span(),
                format!(
                    "input name `{n}` is taken by the generated eager functions ({}); rename the parameter",
                    RESERVED.join(", ")
                ),
            );
        }
    }
    if !names.is_empty()
        && let Some((_, span)) = roles.iter().find(|(r, _)| *r == Role::Rng)
    {
        err(
            errors,
            *span,
            "`&mut Rng` is for source ops (no inputs) in the elementwise form; use the blob form with `&EnvArguments`",
        );
    }
    if names.len() > MAX_INPUTS {
        err(
            errors,
            f.sig.ident.span(),
            format!("elementwise ops take at most {MAX_INPUTS} inputs; use the blob form for more"),
        );
    }
}

/// The gradient kernel of an op with `arity` inputs.
fn backward(
    f: &ItemFn,
    params: &Params,
    arity: usize,
    outputs: usize,
    errors: &mut Vec<syn::Error>,
) -> Option<Backward> {
    let t = type_param(f, "backward", errors)?;
    let args = args(f, errors);
    if untyped_gradient(&args, &t, params, errors) {
        return None;
    }
    let shape = GradShape { arity, outputs };
    let roles = collect_roles(args, params, errors, |_, ty, span, _, errors| {
        gradient_role(ty, span, &t, params, shape, errors)
    });
    no_duplicates(&roles, errors);
    let (role, want) = match outputs {
        1 => (
            Role::OutGrad,
            format!("the output gradient: `dy: OutGrad<{t}>`"),
        ),
        m => (
            Role::OutGrads,
            format!("every output's gradient: `dys: OutGrads<[{t}; {m}]>`"),
        ),
    };
    if !has_role(&roles, role) {
        err(
            errors,
            f.sig.ident.span(),
            format!("a gradient takes {want}"),
        );
    }
    check_gradient_returns(f, &t, arity, errors);
    Some(gradient(roles, arity))
}

/// Parameters written as plain `T` with no `OutGrad` anywhere: the author
/// typed them by value, not by what they read. One error that says so,
/// not one per parameter about scalars.
fn untyped_gradient(
    args: &[(Type, Span)],
    t: &Ident,
    params: &Params,
    errors: &mut Vec<syn::Error>,
) -> bool {
    let plain: Vec<Span> = args
        .iter()
        .filter(|(ty, _)| is_ident(ty, t))
        .map(|(_, s)| *s)
        .collect();
    let has_out_grad = args.iter().any(|(ty, _)| {
        matches!(last_segment(ty), Some((n, Some(inner))) if (n == "OutGrad" && is_ident(inner, t)) || n == "OutGrads")
    });
    let scalar_op = matches!(params, Params::Scalar);
    if !has_out_grad && (plain.len() > 1 || (plain.len() == 1 && !scalar_op)) {
        err(
            errors,
            plain[0],
            format!(
                "gradient parameters are typed by what they read: `dy: OutGrad<{t}>` (the output gradient, required), `x: In0<{t}>`..`In2<{t}>` (inputs), `y: OutValue<{t}>` (the output); a plain `{t}` is the op's scalar"
            ),
        );
        return true;
    }
    false
}

/// The inputs and outputs a gradient's parameters are read against.
#[derive(Clone, Copy)]
struct GradShape {
    arity: usize,
    outputs: usize,
}

/// The role of one gradient parameter: the scalar `T`, the kwargs, or a
/// `T` wrapped in what it reads (`[T; M]` for every output's).
fn gradient_role(
    ty: &Type,
    span: Span,
    t: &Ident,
    params: &Params,
    shape: GradShape,
    errors: &mut Vec<syn::Error>,
) -> Option<Role> {
    let GradShape { arity, outputs } = shape;
    if is_ident(ty, t) {
        return Some(Role::Scalar);
    }
    if let Some(r) = direct_common_role(ty, params, "gradients", errors) {
        return r;
    }
    if let Some((n, Some(inner))) = last_segment(ty)
        && (n == "OutGrads" || n == "OutValues")
    {
        return every_output_role(&n, inner, span, t, outputs, errors);
    }
    if outputs > 1
        && let Some((n, _)) = last_segment(ty)
        && (n == "OutGrad" || n == "OutValue")
    {
        err(
            errors,
            span,
            format!("this op has {outputs} outputs: read them all with `{n}s<[{t}; {outputs}]>`"),
        );
        return None;
    }
    let n = match last_segment(ty) {
        Some((n, Some(inner))) if is_ident(inner, t) => n,
        _ => {
            err(
                errors,
                ty.span(),
                format!(
                    "unexpected gradient parameter; expected `OutGrad<{t}>`, `OutValue<{t}>`, `In0<{t}>`..`In2<{t}>`, the scalar `{t}` or `&Params`"
                ),
            );
            return None;
        }
    };
    match n.as_str() {
        "OutGrad" => Some(Role::OutGrad),
        "OutValue" => Some(Role::OutValue),
        "In0" | "In1" | "In2" => {
            let k = (n.as_bytes()[2] - b'0') as usize;
            if k >= arity {
                err(
                    errors,
                    span,
                    format!("the gradient reads `{n}`, but the op has {arity} input(s)"),
                );
            }
            Some(Role::InputValue(k))
        }
        _ => {
            err(
                errors,
                ty.span(),
                format!(
                    "unexpected gradient parameter `{n}<{t}>`; expected `OutGrad<{t}>`, `OutValue<{t}>`, `In0<{t}>`..`In2<{t}>`"
                ),
            );
            None
        }
    }
}

/// `OutGrads<[T; M]>` or `OutValues<[T; M]>` of an op with `M` outputs.
fn every_output_role(
    n: &str,
    inner: &Type,
    span: Span,
    t: &Ident,
    outputs: usize,
    errors: &mut Vec<syn::Error>,
) -> Option<Role> {
    let len = match inner {
        Type::Array(a) if is_ident(&a.elem, t) => match &a.len {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(i),
                ..
            }) => i.base10_parse::<usize>().ok(),
            _ => None,
        },
        _ => None,
    };
    if outputs < 2 || len != Some(outputs) {
        let want = match outputs {
            1 => format!("`OutGrad<{t}>` and `OutValue<{t}>` for an op with one output"),
            m => format!("`{n}<[{t}; {m}]>`: one entry per output of the {m}"),
        };
        err(errors, span, format!("expected {want}"));
        return None;
    }
    Some(if n == "OutGrads" {
        Role::OutGrads
    } else {
        Role::OutValues
    })
}

/// An `arity`-input gradient returns one `T` per input.
fn check_gradient_returns(f: &ItemFn, t: &Ident, arity: usize, errors: &mut Vec<syn::Error>) {
    let returns = match &f.sig.output {
        ReturnType::Type(_, ty) if is_ident(ty, t) => Some(1),
        ReturnType::Type(_, ty) => match &**ty {
            Type::Tuple(tt) if tt.elems.iter().all(|e| is_ident(e, t)) => Some(tt.elems.len()),
            _ => None,
        },
        ReturnType::Default => Some(0),
    };
    if arity > 0 && returns != Some(arity) {
        let want = match arity {
            1 => t.to_string(),
            n => format!("({})", vec![t.to_string(); n].join(", ")),
        };
        let span = match &f.sig.output {
            ReturnType::Type(_, ty) => ty.span(),
            ReturnType::Default => f.sig.ident.span(),
        };
        err(
            errors,
            span,
            format!("the gradient of a {arity}-input op returns one value per input: `{want}`"),
        );
    }
}
