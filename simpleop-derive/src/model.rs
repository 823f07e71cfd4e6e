//! The validated model of one op: what each kernel parameter means, and
//! every rule that can be checked at compile time.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{
    FnArg, GenericArgument, Ident, ItemFn, ItemMod, PathArguments, ReturnType, Type, Visibility,
};

use crate::options::{InplaceName, Options};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Form {
    Elementwise,
    Blob,
}

#[derive(Clone)]
pub enum Params {
    None,
    Scalar,
    Kwargs(syn::Path),
}

/// What one kernel parameter is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// Elementwise input `i`.
    Input(usize),
    /// Elementwise input `i`, updated in place by the forward (`&mut T`).
    State(usize),
    Scalar,
    Kwargs,
    Rng,
    Env,
    OutGrad,
    OutValue,
    /// Elementwise gradient reading input `i` (`In0`..`In2`).
    InputValue(usize),
    /// Blob: all input blobs.
    Inputs,
    /// Blob forward: the output blob.
    Out,
    Req,
    Grads,
    Reqs,
    Shapes,
    DTypes,
}

pub struct Kernel {
    pub roles: Vec<Role>,
}

pub struct Backward {
    pub kernel: Kernel,
    pub needs_output: bool,
    pub needs_inputs: u32,
}

pub struct OpModel {
    pub ident: Ident,
    pub vis: Visibility,
    pub name: String,
    pub aliases: Vec<String>,
    pub doc: String,
    pub form: Form,
    pub input_names: Vec<Ident>,
    pub params: Params,
    pub rng: bool,
    pub temp: bool,
    pub pattern: String,
    pub fwd_inplace: Option<InplaceName>,
    pub grad_inplace: Option<InplaceName>,
    pub forward: Kernel,
    pub backward: Option<Backward>,
    pub shape: Option<Kernel>,
    pub dtype: Option<Kernel>,
    /// `fn rows`: the row reduction a reduction op computes, if any.
    pub rows: Option<Kernel>,
    /// Estimated work per element (see [`estimate_cost`]).
    pub cost: u32,
    /// The `VectorForm` the kernel names, if any.
    pub vector: Option<syn::Path>,
    /// The `LaneOp` the kernel declares for code generation, if any.
    pub lanes: Option<syn::Path>,
    /// The author declared that the kernel reads state besides its
    /// arguments or may panic on some inputs (`impure`).
    pub impure: bool,
}

impl OpModel {
    pub fn arity(&self) -> usize {
        self.input_names.len()
    }

    /// An elementwise kernel whose result depends on its one input alone
    /// (not declared `impure`, and see [`not_unary`]): it can be tabulated
    /// over a 16-bit type.
    pub fn pure_unary(&self) -> bool {
        !self.impure
            && not_unary(
                self.form,
                self.arity(),
                &self.params,
                self.rng,
                &self.forward,
            )
            .is_none()
    }
}

/// Why a kernel's result does not depend on its one input alone (the blob
/// form, another arity, a scalar or kwargs, a random stream, or an input it
/// updates in place), or `None` when it does. Vector forms and half-type
/// tables both need that.
fn not_unary(
    form: Form,
    arity: usize,
    params: &Params,
    rng: bool,
    forward: &Kernel,
) -> Option<String> {
    let states = forward.roles.iter().any(|r| matches!(r, Role::State(_)));
    if form == Form::Blob {
        Some("the blob form".to_string())
    } else if arity != 1 {
        Some(format!("{arity} inputs"))
    } else if !matches!(params, Params::None) {
        Some("a scalar or kwargs".to_string())
    } else if rng {
        Some("a random stream".to_string())
    } else if states {
        Some("an input it updates in place".to_string())
    } else {
        None
    }
}

/// The most inputs an elementwise kernel takes (its tile buffers live on the stack).
const MAX_INPUTS: usize = 8;

/// Parameter names of the generated eager functions; inputs cannot use them.
const RESERVED: [&str; 4] = ["out", "req", "scalar", "params"];

fn err(errors: &mut Vec<syn::Error>, span: Span, msg: impl std::fmt::Display) {
    errors.push(syn::Error::new(span, msg));
}

fn find_fn<'a>(module: &'a ItemMod, name: &str) -> Option<&'a ItemFn> {
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
fn type_param(f: &ItemFn, what: &str, errors: &mut Vec<syn::Error>) -> Option<Ident> {
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

fn is_ident(ty: &Type, ident: &Ident) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident(ident))
}

/// The last segment of a path type: its name and its first generic type.
fn last_segment(ty: &Type) -> Option<(String, Option<&Type>)> {
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

fn reference(ty: &Type) -> Option<(bool, &Type)> {
    match ty {
        Type::Reference(r) => Some((r.mutability.is_some(), &r.elem)),
        _ => None,
    }
}

fn slice_of(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Slice(s) => Some(&s.elem),
        _ => None,
    }
}

fn named(ty: &Type, name: &str) -> bool {
    last_segment(ty).is_some_and(|(n, _)| n == name)
}

fn is_kwargs(ty: &Type, params: &Params) -> bool {
    match (reference(ty), params) {
        (Some((false, inner)), Params::Kwargs(p)) => {
            let want = p.segments.last().map(|s| s.ident.to_string());
            last_segment(inner).map(|(n, _)| n) == want
        }
        _ => false,
    }
}

fn args(f: &ItemFn, errors: &mut Vec<syn::Error>) -> Vec<(Type, Span)> {
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

fn param_name(f: &ItemFn, i: usize) -> Option<Ident> {
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

/// Roles of non-kernel parameters shared by every function kind.
fn common_role(ty: &Type, params: &Params) -> Option<Role> {
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

impl Role {
    /// What a parameter of this role is, for messages.
    fn describe(self) -> String {
        match self {
            Role::Input(k) => format!("input {k}"),
            Role::State(k) => format!("the state input {k} (`&mut T`)"),
            Role::Scalar => "the scalar (`T`)".into(),
            Role::Kwargs => "the kwargs (`&Params`)".into(),
            Role::Rng => "the random stream (`&mut Rng`)".into(),
            Role::Env => "the environment (`&EnvArguments`)".into(),
            Role::OutGrad => "the output gradient (`OutGrad`)".into(),
            Role::OutValue => "the output value (`OutValue`)".into(),
            Role::InputValue(k) => format!("input {k}'s value (`In{k}`)"),
            Role::Inputs => "the input blobs".into(),
            Role::Out => "the output blob".into(),
            Role::Req => "the request (`OpReqType`)".into(),
            Role::Grads => "the gradient blobs".into(),
            Role::Reqs => "the gradient requests".into(),
            Role::Shapes => "the input shapes".into(),
            Role::DTypes => "the input dtypes".into(),
        }
    }
}

fn no_duplicates(roles: &[(Role, Span)], errors: &mut Vec<syn::Error>) {
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

/// The functions the attribute reads from the module.
const KNOWN_FNS: [&str; 5] = ["forward", "backward", "shape", "dtype", "rows"];

/// Edit distance (insertions, deletions, substitutions) of two short names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Refuses module functions whose names are a typo away from one the
/// attribute reads (`backwrd`, `Shape`): the attribute would skip them
/// silently, and the op would lose its gradient or shape rule.
fn near_misses(module: &ItemMod, errors: &mut Vec<syn::Error>) {
    let Some((_, items)) = &module.content else {
        return;
    };
    for item in items {
        let syn::Item::Fn(f) = item else { continue };
        let name = f.sig.ident.to_string();
        if KNOWN_FNS.contains(&name.as_str()) {
            continue;
        }
        // typos drop or change letters; longer names (`shapes`,
        // `backwards`) and short ones (`row`) are more likely helpers
        let lower = name.to_lowercase();
        let close = KNOWN_FNS.iter().find(|k| {
            let d = edit_distance(&lower, k);
            let typo = d <= if k.len() > 5 { 2 } else { 1 }
                && lower.len() <= k.len()
                && lower.len() + 1 >= k.len()
                && lower.len() >= 4;
            d == 0 || typo
        });
        if let Some(k) = close {
            err(
                errors,
                f.sig.ident.span(),
                format!(
                    "`fn {name}` is not read by `#[simple_op]`; did you mean `fn {k}`? (a helper named a typo away from `forward`, `backward`, `shape`, `dtype` or `rows` is refused, so that a typo cannot drop one silently: rename it)"
                ),
            );
        }
    }
}

pub fn build(opts: Options, module: &ItemMod, errors: &mut Vec<syn::Error>) -> Option<OpModel> {
    let ident = module.ident.clone();
    if module.content.is_none() {
        err(
            errors,
            ident.span(),
            "#[simple_op] needs an inline module: `mod name { ... }`",
        );
        return None;
    }
    let params = match (&opts.scalar, &opts.kwargs) {
        (Some(_), Some(k)) => {
            err(
                errors,
                k.span,
                "`scalar` and `kwargs` cannot be combined: pass the scalar as a field of the kwargs struct",
            );
            Params::Kwargs(k.value.clone())
        }
        (Some(_), None) => Params::Scalar,
        (None, Some(k)) => Params::Kwargs(k.value.clone()),
        (None, None) => Params::None,
    };
    let form = if opts.blob.is_some() {
        Form::Blob
    } else {
        Form::Elementwise
    };
    let doc = module
        .attrs
        .iter()
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value().trim().to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string();
    let name = opts
        .name
        .as_ref()
        .map(|n| n.value.clone())
        .unwrap_or_else(|| ident.to_string());
    if name.is_empty() {
        err(
            errors,
            opts.name.as_ref().map_or(ident.span(), |n| n.span),
            "an op name cannot be empty",
        );
    }

    near_misses(module, errors);
    let Some(fwd) = find_fn(module, "forward") else {
        err(
            errors,
            ident.span(),
            format!("op `{name}` has no `fn forward`"),
        );
        return None;
    };
    let bwd = find_fn(module, "backward");
    let (forward, input_names) = match form {
        Form::Elementwise => elementwise_forward(fwd, &params, &opts, errors)?,
        Form::Blob => blob_forward(fwd, &params, &opts, errors),
    };
    let arity = input_names.len();
    let backward = bwd.and_then(|b| match form {
        Form::Elementwise => elementwise_backward(b, &params, arity, errors),
        Form::Blob => blob_backward(b, &params, arity, errors),
    });
    if form == Form::Elementwise
        && arity == 0
        && let Some(b) = bwd
    {
        err(
            errors,
            b.sig.ident.span(),
            "a source op (no inputs) has nothing to differentiate; remove `backward`",
        );
    }
    let shape = find_fn(module, "shape").map(|f| aux_fn(f, &params, Role::Shapes, "Shape", errors));
    let dtype = find_fn(module, "dtype").map(|f| aux_fn(f, &params, Role::DTypes, "DType", errors));
    if shape.is_none() && (form == Form::Blob || arity == 0) {
        err(
            errors,
            ident.span(),
            format!(
                "op `{name}` needs `fn shape(inputs: &[Shape], ...) -> Result<Shape>`: {}",
                if form == Form::Blob {
                    "blob-form ops compute their own output shape"
                } else {
                    "a source op has no input to take the shape from"
                }
            ),
        );
    }
    if let (Some(i), Form::Elementwise) = (&opts.inputs, form) {
        err(
            errors,
            i.span,
            "`inputs = N` is for the blob form; an elementwise op's inputs are its forward's `T` parameters",
        );
    }
    if let Some(v) = &opts.vector
        && let Some(why) = not_unary(form, arity, &params, opts.rng.is_some(), &forward)
    {
        errors.push(syn::Error::new_spanned(
                &v.value,
                format!(
                    "`vector` is for elementwise ops with one input and no scalar, kwargs, rng or state (a vector form sees only that input), but `{name}` has {why}"
                ),
            ));
    }
    if let Some(l) = &opts.lanes {
        let states = forward.roles.iter().any(|r| matches!(r, Role::State(_)));
        let why = if form == Form::Blob {
            Some("the blob form".to_string())
        } else if matches!(params, Params::Kwargs(_)) {
            Some("kwargs".to_string())
        } else if opts.rng.is_some() {
            Some("a random stream".to_string())
        } else if states {
            Some("an input it updates in place".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            errors.push(syn::Error::new_spanned(
                &l.value,
                format!(
                    "`lanes` is for elementwise ops whose arguments are their inputs and at most a scalar (a lane sees nothing else), but `{name}` has {why}"
                ),
            ));
        }
    }
    if let Some(b) = opts.broadcast
        && (form == Form::Blob || arity < 2)
    {
        err(
            errors,
            b,
            "`broadcast` is for elementwise ops with two or more inputs",
        );
    }

    // In-place options must fit the arity and the gradient.
    let mut fwd_inplace = None;
    let mut grad_inplace = None;
    for o in &opts.inplace {
        let ok = match o.value {
            InplaceName::InOut | InplaceName::OutIn => arity == 1,
            InplaceName::LhsOut | InplaceName::OutLhs => arity >= 2,
        };
        if form == Form::Blob {
            err(
                errors,
                o.span,
                "in-place options need the elementwise form: blob kernels never see aliased buffers",
            );
        } else if !ok {
            let (want, alt) = match o.value {
                InplaceName::InOut => ("unary", "LhsOut"),
                InplaceName::OutIn => ("unary", "OutLhs"),
                InplaceName::LhsOut => ("binary and ternary", "InOut"),
                InplaceName::OutLhs => ("binary and ternary", "OutIn"),
            };
            let hint = if arity == 0 {
                "a source op has no input to share".to_string()
            } else {
                format!("use `{alt}`")
            };
            err(
                errors,
                o.span,
                format!(
                    "`{:?}` is for {want} ops, but `{name}` has {arity} input(s); {hint}",
                    o.value
                ),
            );
        }
        if o.value.is_forward() {
            fwd_inplace = Some(o.value);
        } else {
            grad_inplace = Some(o.value);
            if bwd.is_none() {
                err(
                    errors,
                    o.span,
                    format!(
                        "gradient in-place option `{:?}` but `{name}` has no `fn backward`",
                        o.value
                    ),
                );
            }
        }
    }
    if forward.roles.iter().any(|r| matches!(r, Role::State(_))) {
        if let Some(b) = bwd {
            err(
                errors,
                b.sig.ident.span(),
                "an op that updates inputs in place (`&mut T` parameters) has no gradient",
            );
        }
        if let (true, Some(o)) = (
            forward.roles.contains(&Role::State(0)),
            opts.inplace.iter().find(|o| o.value.is_forward()),
        ) {
            err(
                errors,
                o.span,
                "the first input is updated in place as state; it cannot also take the output",
            );
        }
    }
    if let (Some(f), Some(b), Some(bk)) = (fwd_inplace, bwd, &backward)
        && bk.needs_inputs & 1 != 0
    {
        let span = b
            .sig
            .inputs
            .iter()
            .zip(&bk.kernel.roles)
            .find(|(_, r)| matches!(r, Role::InputValue(0) | Role::Inputs))
            .map_or(b.sig.ident.span(), |(a, _)| a.span());
        err(
            errors,
            span,
            format!(
                "forward `{f:?}` overwrites the first input, but this gradient reads it; drop `{f:?}` or compute the gradient from `OutValue<T>`"
            ),
        );
    }
    if opts.rng.is_some() && form == Form::Elementwise && !forward.roles.contains(&Role::Rng) {
        err(
            errors,
            opts.rng.unwrap_or(ident.span()),
            "`resources(rng)` is requested but `forward` takes no `rng: &mut Rng`",
        );
    }
    let pattern = match &opts.pattern {
        Some(p) => p.value.clone(),
        None if form == Form::Blob => "opaque".into(),
        None if opts.broadcast.is_some() => "broadcast".into(),
        None => "elementwise".into(),
    };
    let rows = find_fn(module, "rows").map(|f| {
        if form != Form::Blob || pattern != "reduction" {
            err(
                errors,
                f.sig.ident.span(),
                format!(
                    "`fn rows` describes a reduction over trailing axes; it is for blob-form ops with `pattern = \"reduction\"`, but `{name}` is {}",
                    if form == Form::Blob {
                        format!("a blob-form op with pattern `{pattern}`")
                    } else {
                        "an elementwise op".to_string()
                    }
                ),
            );
        }
        aux_fn(f, &params, Role::Shapes, "Shape", errors)
    });
    Some(OpModel {
        ident,
        vis: module.vis.clone(),
        aliases: opts.aliases.iter().map(|a| a.value.clone()).collect(),
        name,
        doc,
        form,
        input_names,
        params,
        rng: opts.rng.is_some(),
        temp: opts.temp.is_some(),
        pattern,
        fwd_inplace,
        grad_inplace,
        forward,
        backward,
        shape,
        dtype,
        rows,
        cost: find_fn(module, "forward").map_or(1, estimate_cost),
        vector: opts.vector.as_ref().map(|v| v.value.clone()),
        lanes: opts.lanes.as_ref().map(|v| v.value.clone()),
        impure: opts.impure.is_some(),
    })
}

/// Methods of `Float` that cost about ten cheap arithmetic ops each.
const EXPENSIVE: [&str; 23] = [
    "exp", "exp_m1", "ln", "ln_1p", "log2", "log10", "powf", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "tanh", "erf", "gamma", "hypot", "cbrt", "sigmoid", "sqrt", "recip",
];

/// Work per element of a kernel, in units of one cheap elementwise op: 1
/// plus 10 per call of an expensive `Float` method in its body. The
/// executor uses it to decide when splitting across threads pays.
fn estimate_cost(f: &ItemFn) -> u32 {
    fn walk(ts: proc_macro2::TokenStream) -> u32 {
        ts.into_iter()
            .map(|t| match t {
                proc_macro2::TokenTree::Ident(i) if EXPENSIVE.contains(&i.to_string().as_str()) => {
                    10
                }
                proc_macro2::TokenTree::Group(g) => walk(g.stream()),
                _ => 0,
            })
            .sum()
    }
    1 + walk(quote::ToTokens::to_token_stream(&f.block))
}

fn elementwise_forward(
    f: &ItemFn,
    params: &Params,
    opts: &Options,
    errors: &mut Vec<syn::Error>,
) -> Option<(Kernel, Vec<Ident>)> {
    let t = type_param(f, "forward", errors)?;
    let args = args(f, errors);
    let mut roles: Vec<(Role, Span)> = Vec::new();
    let mut names = Vec::new();
    let t_positions: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(_, (ty, _))| is_ident(ty, &t))
        .map(|(i, _)| i)
        .collect();
    let scalar_at = match params {
        Params::Scalar => {
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
            last
        }
        _ => None,
    };
    for (i, (ty, span)) in args.iter().enumerate() {
        let role = if is_ident(ty, &t) {
            if Some(i) == scalar_at {
                Role::Scalar
            } else {
                let k = names.len();
                names
                    .push(param_name(f, i).unwrap_or_else(|| Ident::new(&format!("in{k}"), *span)));
                Role::Input(k)
            }
        } else if let Some(r) = common_role(ty, params) {
            if r == Role::Env {
                err(
                    errors,
                    ty.span(),
                    "elementwise kernels take the scalar `T` or `&Params` directly, not `&EnvArguments`",
                );
                continue;
            }
            r
        } else if matches!(reference(ty), Some((true, inner)) if is_ident(inner, &t)) {
            let k = names.len();
            names.push(param_name(f, i).unwrap_or_else(|| Ident::new(&format!("in{k}"), *span)));
            Role::State(k)
        } else if matches!(reference(ty), Some((true, inner)) if named(inner, "Rng")) {
            if opts.rng.is_none() {
                err(
                    errors,
                    *span,
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
            continue;
        };
        if let Role::Input(_) | Role::State(_) = role
            && roles
                .iter()
                .any(|(r, _)| matches!(r, Role::Scalar | Role::Kwargs | Role::Rng))
        {
            err(
                errors,
                *span,
                "inputs come first, before the scalar, kwargs or rng",
            );
        }
        role_kind_ok(role, params, *span, errors);
        roles.push((role, *span));
    }
    match &f.sig.output {
        ReturnType::Type(_, ty) if is_ident(ty, &t) => {}
        ReturnType::Type(_, ty) => err(
            errors,
            ty.span(),
            format!("an elementwise `forward` returns one `{t}`"),
        ),
        ReturnType::Default => err(
            errors,
            f.sig.ident.span(),
            format!("an elementwise `forward` returns one `{t}`"),
        ),
    }
    for n in &names {
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
    no_duplicates(&roles, errors);
    Some((
        Kernel {
            roles: roles.into_iter().map(|(r, _)| r).collect(),
        },
        names,
    ))
}

fn elementwise_backward(
    f: &ItemFn,
    params: &Params,
    arity: usize,
    errors: &mut Vec<syn::Error>,
) -> Option<Backward> {
    let t = type_param(f, "backward", errors)?;
    let args = args(f, errors);
    // Parameters written as plain `T` with no `OutGrad` anywhere: the
    // author typed them by value, not by what they read. One error that
    // says so, not one per parameter about scalars.
    let plain: Vec<Span> = args
        .iter()
        .filter(|(ty, _)| is_ident(ty, &t))
        .map(|(_, s)| *s)
        .collect();
    let has_out_grad = args.iter().any(|(ty, _)| {
        matches!(last_segment(ty), Some((n, Some(inner))) if n == "OutGrad" && is_ident(inner, &t))
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
        return None;
    }
    let mut roles: Vec<(Role, Span)> = Vec::new();
    for (ty, span) in args {
        let role = if is_ident(&ty, &t) {
            Role::Scalar
        } else if let Some(r) = common_role(&ty, params) {
            if r == Role::Env {
                err(
                    errors,
                    ty.span(),
                    "elementwise gradients take the scalar `T` or `&Params` directly, not `&EnvArguments`",
                );
                continue;
            }
            r
        } else {
            match last_segment(&ty) {
                Some((n, Some(inner))) if is_ident(inner, &t) => match n.as_str() {
                    "OutGrad" => Role::OutGrad,
                    "OutValue" => Role::OutValue,
                    "In0" | "In1" | "In2" => {
                        let k = (n.as_bytes()[2] - b'0') as usize;
                        if k >= arity {
                            err(
                                errors,
                                span,
                                format!(
                                    "the gradient reads `{n}`, but the op has {arity} input(s)"
                                ),
                            );
                        }
                        Role::InputValue(k)
                    }
                    _ => {
                        err(
                            errors,
                            ty.span(),
                            format!(
                                "unexpected gradient parameter `{n}<{t}>`; expected `OutGrad<{t}>`, `OutValue<{t}>`, `In0<{t}>`..`In2<{t}>`"
                            ),
                        );
                        continue;
                    }
                },
                _ => {
                    err(
                        errors,
                        ty.span(),
                        format!(
                            "unexpected gradient parameter; expected `OutGrad<{t}>`, `OutValue<{t}>`, `In0<{t}>`..`In2<{t}>`, the scalar `{t}` or `&Params`"
                        ),
                    );
                    continue;
                }
            }
        };
        role_kind_ok(role, params, span, errors);
        roles.push((role, span));
    }
    no_duplicates(&roles, errors);
    if !roles.iter().any(|(r, _)| *r == Role::OutGrad) {
        err(
            errors,
            f.sig.ident.span(),
            format!("a gradient takes the output gradient: `dy: OutGrad<{t}>`"),
        );
    }
    let returns = match &f.sig.output {
        ReturnType::Type(_, ty) if is_ident(ty, &t) => Some(1),
        ReturnType::Type(_, ty) => match &**ty {
            Type::Tuple(tt) if tt.elems.iter().all(|e| is_ident(e, &t)) => Some(tt.elems.len()),
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
    let needs_inputs = roles.iter().fold(0u32, |m, (r, _)| match r {
        Role::InputValue(k) => m | (1 << k),
        _ => m,
    });
    Some(Backward {
        needs_output: roles.iter().any(|(r, _)| *r == Role::OutValue),
        needs_inputs,
        kernel: Kernel {
            roles: roles.into_iter().map(|(r, _)| r).collect(),
        },
    })
}

fn blob_forward(
    f: &ItemFn,
    params: &Params,
    opts: &Options,
    errors: &mut Vec<syn::Error>,
) -> (Kernel, Vec<Ident>) {
    let mut roles = Vec::new();
    for (ty, span) in args(f, errors) {
        let role = if let Some(r) = common_role(&ty, params) {
            r
        } else if is_ident(&ty, &Ident::new("f64", span)) {
            Role::Scalar
        } else if named(&ty, "OpReqType") {
            Role::Req
        } else {
            match reference(&ty) {
                Some((false, inner)) if slice_of(inner).is_some_and(|e| named(e, "TBlob")) => {
                    Role::Inputs
                }
                Some((true, inner)) if named(inner, "TBlobMut") => Role::Out,
                _ => {
                    err(
                        errors,
                        ty.span(),
                        "unexpected parameter in a blob `forward`; expected `&[TBlob]`, `&mut TBlobMut`, `OpReqType`, `f64` (scalar), `&Params` or `&EnvArguments`",
                    );
                    continue;
                }
            }
        };
        role_kind_ok(role, params, span, errors);
        roles.push((role, span));
    }
    no_duplicates(&roles, errors);
    if !roles.iter().any(|(r, _)| *r == Role::Out) {
        err(
            errors,
            f.sig.ident.span(),
            "a blob `forward` writes its output: add `out: &mut TBlobMut`",
        );
    }
    let n = opts.inputs.as_ref().map_or(1, |i| i.value);
    let names = (0..n)
        .map(|i| {
            let s = match (n, i) {
                (1, _) => "data".to_string(),
                (2, 0) => "lhs".to_string(),
                (2, _) => "rhs".to_string(),
                _ => format!("arg{i}"),
            };
            Ident::new(&s, f.sig.ident.span())
        })
        .collect();
    (
        Kernel {
            roles: roles.into_iter().map(|(r, _)| r).collect(),
        },
        names,
    )
}

fn blob_backward(
    f: &ItemFn,
    params: &Params,
    arity: usize,
    errors: &mut Vec<syn::Error>,
) -> Option<Backward> {
    let mut roles = Vec::new();
    for (ty, span) in args(f, errors) {
        let role = if let Some(r) = common_role(&ty, params) {
            r
        } else if is_ident(&ty, &Ident::new("f64", span)) {
            Role::Scalar
        } else if let Some((n, _)) = last_segment(&ty)
            .filter(|(n, _)| ["OutGrad", "OutValue", "Inputs"].contains(&n.as_str()))
        {
            match n.as_str() {
                "OutGrad" => Role::OutGrad,
                "OutValue" => Role::OutValue,
                _ => Role::Inputs,
            }
        } else {
            match reference(&ty) {
                Some((true, inner)) if slice_of(inner).is_some_and(|e| named(e, "TBlobMut")) => {
                    Role::Grads
                }
                Some((false, inner)) if slice_of(inner).is_some_and(|e| named(e, "OpReqType")) => {
                    Role::Reqs
                }
                _ => {
                    err(
                        errors,
                        ty.span(),
                        "unexpected parameter in a blob `backward`; expected `OutGrad<&TBlob>`, `OutValue<&TBlob>`, `Inputs<&[TBlob]>`, `&mut [TBlobMut]`, `&[OpReqType]`, `f64`, `&Params` or `&EnvArguments`",
                    );
                    continue;
                }
            }
        };
        role_kind_ok(role, params, span, errors);
        roles.push((role, span));
    }
    no_duplicates(&roles, errors);
    for (need, what) in [
        (Role::OutGrad, "dy: OutGrad<&TBlob>"),
        (Role::Grads, "grads: &mut [TBlobMut]"),
    ] {
        if !roles.iter().any(|(r, _)| *r == need) {
            err(
                errors,
                f.sig.ident.span(),
                format!("a blob `backward` takes `{what}`"),
            );
        }
    }
    Some(Backward {
        needs_output: roles.iter().any(|(r, _)| *r == Role::OutValue),
        needs_inputs: if roles.iter().any(|(r, _)| *r == Role::Inputs) {
            (1u32 << arity.min(31)) - 1
        } else {
            0
        },
        kernel: Kernel {
            roles: roles.into_iter().map(|(r, _)| r).collect(),
        },
    })
}

fn aux_fn(
    f: &ItemFn,
    params: &Params,
    main: Role,
    elem: &str,
    errors: &mut Vec<syn::Error>,
) -> Kernel {
    let mut roles = Vec::new();
    for (ty, span) in args(f, errors) {
        let role = if let Some(r) = common_role(&ty, params) {
            r
        } else if is_ident(&ty, &Ident::new("f64", span)) {
            Role::Scalar
        } else if matches!(reference(&ty), Some((false, inner)) if slice_of(inner).is_some_and(|e| named(e, elem)))
        {
            main
        } else {
            err(
                errors,
                ty.span(),
                format!(
                    "unexpected parameter in `{}`; expected `&[{elem}]`, `f64` (scalar) or `&Params`",
                    f.sig.ident
                ),
            );
            continue;
        };
        role_kind_ok(role, params, span, errors);
        roles.push((role, span));
    }
    no_duplicates(&roles, errors);
    Kernel {
        roles: roles.into_iter().map(|(r, _)| r).collect(),
    }
}
