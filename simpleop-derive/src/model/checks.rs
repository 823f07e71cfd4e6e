//! The op-level rules: the options must fit the op's form, arity and
//! kernels.

use syn::spanned::Spanned;
use syn::{Ident, ItemFn};

use super::syntax::err;
use super::types::{Form, Kernels, Params, Role, not_unary};
use crate::options::{Count, InplaceName, Options};

/// What the op-level rules read: the options and the kernels read so far.
pub(super) struct Draft<'a> {
    pub opts: &'a Options,
    pub ident: &'a Ident,
    pub name: &'a str,
    pub form: Form,
    pub params: &'a Params,
    pub kernels: &'a Kernels,
    /// `fn backward`, if the module has one.
    pub bwd: Option<&'a ItemFn>,
}

impl Draft<'_> {
    fn arity(&self) -> usize {
        self.kernels.input_names.len()
    }
}

/// A blob-form or source op computes its output shape itself.
pub(super) fn shape_given(d: &Draft, has_shape: bool, errors: &mut Vec<syn::Error>) {
    if has_shape || (d.form != Form::Blob && d.arity() != 0) {
        return;
    }
    err(
        errors,
        d.ident.span(),
        format!(
            "op `{}` needs `fn shape(inputs: &[Shape], ...) -> Result<Shape>`: {}",
            d.name,
            if d.form == Form::Blob {
                "blob-form ops compute their own output shape"
            } else {
                "a source op has no input to take the shape from"
            }
        ),
    );
}

/// `inputs`, `vector`, `lanes` and `broadcast` each fit one kind of op.
pub(super) fn options_fit(d: &Draft, errors: &mut Vec<syn::Error>) {
    let (opts, name, form) = (d.opts, d.name, d.form);
    if let (Some(i), Form::Elementwise) = (&opts.inputs, form) {
        err(
            errors,
            i.span,
            "`inputs = N` is for the blob form; an elementwise op's inputs are its forward's `T` parameters",
        );
    }
    if let Some(v) = &opts.vector
        && let Some(why) = not_unary(
            form,
            d.arity(),
            d.params,
            opts.rng.is_some(),
            &d.kernels.forward,
        )
    {
        errors.push(syn::Error::new_spanned(
                &v.value,
                format!(
                    "`vector` is for elementwise ops with one input and no scalar, kwargs, rng or state (a vector form sees only that input), but `{name}` has {why}"
                ),
            ));
    }
    if let Some(l) = &opts.lanes
        && let Some(why) = not_lane(d)
    {
        errors.push(syn::Error::new_spanned(
                &l.value,
                format!(
                    "`lanes` is for elementwise ops whose arguments are their inputs and at most a scalar (a lane sees nothing else), but `{name}` has {why}"
                ),
            ));
    }
    if let Some(b) = opts.broadcast
        && (form == Form::Blob || d.arity() < 2)
    {
        err(
            errors,
            b,
            "`broadcast` is for elementwise ops with two or more inputs",
        );
    }
}

/// Why a lane cannot compute the kernel: it sees the inputs and the scalar
/// alone. `None` when it can.
fn not_lane(d: &Draft) -> Option<String> {
    if d.form == Form::Blob {
        Some("the blob form".to_string())
    } else if matches!(d.params, Params::Kwargs(_)) {
        Some("kwargs".to_string())
    } else if d.opts.rng.is_some() {
        Some("a random stream".to_string())
    } else if d.kernels.forward.has_state() {
        Some("an input it updates in place".to_string())
    } else {
        None
    }
}

/// The forward and gradient in-place options, which must fit the arity and
/// the gradient.
pub(super) fn inplace(
    d: &Draft,
    errors: &mut Vec<syn::Error>,
) -> (Option<InplaceName>, Option<InplaceName>) {
    let (name, arity) = (d.name, d.arity());
    let mut fwd_inplace = None;
    let mut grad_inplace = None;
    for o in &d.opts.inplace {
        let ok = match o.value {
            InplaceName::InOut | InplaceName::OutIn => arity == 1,
            InplaceName::LhsOut | InplaceName::OutLhs => arity >= 2,
        };
        if d.form == Form::Blob {
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
            if d.bwd.is_none() {
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
    (fwd_inplace, grad_inplace)
}

/// An op with state inputs has no gradient and no forward in-place on its
/// first input; a forward in-place must not overwrite an input the
/// gradient reads.
pub(super) fn overwrites(
    d: &Draft,
    fwd_inplace: Option<InplaceName>,
    errors: &mut Vec<syn::Error>,
) {
    let forward = &d.kernels.forward;
    if forward.has_state() {
        if let Some(b) = d.bwd {
            err(
                errors,
                b.sig.ident.span(),
                "an op that updates inputs in place (`&mut T` parameters) has no gradient",
            );
        }
        if let (true, Some(o)) = (
            forward.roles.contains(&Role::State(0)),
            d.opts.inplace.iter().find(|o| o.value.is_forward()),
        ) {
            err(
                errors,
                o.span,
                "the first input is updated in place as state; it cannot also take the output",
            );
        }
    }
    if let (Some(f), Some(b), Some(bk)) = (fwd_inplace, d.bwd, &d.kernels.backward)
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
}

/// An elementwise op that requests a random stream reads it.
pub(super) fn rng_used(d: &Draft, errors: &mut Vec<syn::Error>) {
    let rng = d.opts.rng;
    if rng.is_some() && d.form == Form::Elementwise && !d.kernels.forward.roles.contains(&Role::Rng)
    {
        err(
            errors,
            rng.unwrap_or(d.ident.span()),
            "`resources(rng)` is requested but `forward` takes no `rng: &mut Rng`",
        );
    }
}

/// `fn rows` is for blob-form reductions.
pub(super) fn rows_fit(d: &Draft, f: &ItemFn, pattern: &str, errors: &mut Vec<syn::Error>) {
    if d.form == Form::Blob && pattern == "reduction" {
        return;
    }
    err(
        errors,
        f.sig.ident.span(),
        format!(
            "`fn rows` describes a reduction over trailing axes; it is for blob-form ops with `pattern = \"reduction\"`, but `{}` is {}",
            d.name,
            if d.form == Form::Blob {
                format!("a blob-form op with pattern `{pattern}`")
            } else {
                "an elementwise op".to_string()
            }
        ),
    );
}

/// Several outputs, kwargs-dependent arguments and aux states are for the
/// blob form, and exclude in-place options (an output could overwrite
/// what backward reads); output names and counts must agree. An
/// elementwise op may name a `simple_form` (a kwargs-free op computing the
/// same for some kwargs), in place or not.
pub(super) fn general_fit(d: &Draft, has_inplace: bool, errors: &mut Vec<syn::Error>) {
    let opts = d.opts;
    let spans = [
        opts.outputs.as_ref().map(|o| ("outputs", o.span)),
        opts.visible_outputs
            .as_ref()
            .map(|o| ("visible_outputs", o.span)),
        opts.output_names.as_ref().map(|o| ("output_names", o.span)),
        opts.arguments.as_ref().map(|o| ("arguments", o.span)),
        opts.aux.as_ref().map(|o| ("aux", o.span)),
        opts.simple_form.as_ref().map(|o| ("simple_form", o.span)),
        opts.inference_form
            .as_ref()
            .map(|o| ("inference_form", o.span)),
    ];
    let tuple = d.kernels.outputs > 1;
    for (key, span) in spans.into_iter().flatten() {
        if key == "simple_form" && d.form != Form::Blob {
            continue;
        }
        let names_of_tuple = tuple && matches!(key, "output_names" | "visible_outputs");
        if d.form != Form::Blob && !names_of_tuple {
            err(
                errors,
                span,
                format!("`{key}` is for the blob form: add `blob` and write `forward` over blobs"),
            );
        }
        if has_inplace && key != "arguments" {
            err(
                errors,
                span,
                format!(
                    "`{key}` cannot be combined with `inplace`: a written output could overwrite what backward reads"
                ),
            );
        }
    }
    let fixed = match opts.outputs.as_ref().map(|o| &o.value) {
        Some(Count::Fixed(n)) => Some(*n),
        _ if tuple => Some(d.kernels.outputs),
        _ => None,
    };
    if let (Some(n), Some(names)) = (fixed, &opts.output_names)
        && names.value.len() != n
    {
        err(
            errors,
            names.span,
            format!("{} output names for {n} outputs", names.value.len()),
        );
    }
    if opts.outputs.is_none() && !tuple {
        for (key, span) in [
            opts.visible_outputs
                .as_ref()
                .map(|o| ("visible_outputs", o.span)),
            opts.output_names.as_ref().map(|o| ("output_names", o.span)),
        ]
        .into_iter()
        .flatten()
        {
            err(errors, span, format!("`{key}` needs `outputs = N`"));
        }
    }
    let needs_kwargs = [
        matches!(
            opts.outputs.as_ref().map(|o| &o.value),
            Some(Count::Path(_))
        )
        .then(|| opts.outputs.as_ref().map(|o| o.span))
        .flatten(),
        matches!(
            opts.visible_outputs.as_ref().map(|o| &o.value),
            Some(Count::Path(_))
        )
        .then(|| opts.visible_outputs.as_ref().map(|o| o.span))
        .flatten(),
        opts.arguments.as_ref().map(|a| a.span),
        opts.simple_form.as_ref().map(|a| a.span),
        opts.inference_form.as_ref().map(|a| a.span),
    ];
    if !matches!(d.params, Params::Kwargs(_)) {
        for span in needs_kwargs.into_iter().flatten() {
            err(
                errors,
                span,
                "a count or list computed from the kwargs needs `kwargs = MyParams`",
            );
        }
    }
    if let (Some(a), Some(x)) = (&opts.arguments, &opts.aux) {
        let _ = a;
        err(
            errors,
            x.span,
            "aux states after kwargs-dependent arguments are not supported: list fixed `inputs` instead",
        );
    }
}

/// An elementwise forward returning a tuple has several outputs: nothing
/// that assumes one output (in place, vector and lane forms,
/// broadcasting, updated inputs) or sets the count another way applies.
pub(super) fn tuple_fit(d: &Draft, errors: &mut Vec<syn::Error>) {
    let m = d.kernels.outputs;
    if m < 2 {
        return;
    }
    let opts = d.opts;
    let conflicts = [
        opts.inplace.first().map(|i| ("inplace", i.span)),
        opts.vector.as_ref().map(|v| ("vector", v.span)),
        opts.lanes.as_ref().map(|v| ("lanes", v.span)),
        opts.broadcast.map(|s| ("broadcast", s)),
        opts.outputs.as_ref().map(|o| ("outputs", o.span)),
    ];
    for (key, span) in conflicts.into_iter().flatten() {
        let why = if key == "outputs" {
            format!("the forward's tuple already gives {m} outputs")
        } else {
            format!("it assumes one output, and this forward returns {m}")
        };
        err(errors, span, format!("`{key}` does not fit this op: {why}"));
    }
    if d.kernels.forward.has_state() {
        err(
            errors,
            d.ident.span(),
            "an elementwise op with several outputs cannot update its inputs (`&mut T`)",
        );
    }
}

/// `linear`: the op's gradient is the adjoint of its forward, so the
/// forward is its gradient's gradient. That holds only for a written
/// gradient that reads nothing but output gradients (and the scalar or
/// kwargs), of an op without a random stream or aux states.
pub(super) fn linear_fit(d: &Draft, errors: &mut Vec<syn::Error>) {
    let Some(at) = d.opts.linear else {
        return;
    };
    if d.opts.autodiff.is_some() {
        return err(
            errors,
            at,
            "`linear` cannot be combined with `autodiff`: a derived gradient reads the inputs; write the adjoint of the forward as `backward`, reading only `OutGrad`",
        );
    }
    let (Some(b), Some(bk)) = (d.bwd, &d.kernels.backward) else {
        return err(
            errors,
            at,
            format!(
                "`linear` op `{}` needs a `fn backward`: the adjoint of its forward, reading only the output gradient",
                d.name
            ),
        );
    };
    let reads = |r: &Role| {
        matches!(
            r,
            Role::OutValue | Role::OutValues | Role::InputValue(_) | Role::Inputs
        )
    };
    for (arg, role) in b.sig.inputs.iter().zip(&bk.kernel.roles) {
        if reads(role) {
            err(
                errors,
                arg.span(),
                format!(
                    "`linear` op `{}` has a gradient that reads {}, so its gradient is not linear in the output gradients and the arguments together; a linear op's gradient is the adjoint of its forward and reads only the output gradients (drop `linear`, or this parameter)",
                    d.name,
                    role.describe()
                ),
            );
        }
    }
    let conflicts = [
        d.opts
            .rng
            .map(|s| (s, "a random stream (a second call draws other numbers)")),
        d.opts
            .aux
            .as_ref()
            .map(|a| (a.span, "aux states (never differentiated)")),
    ];
    for (span, what) in conflicts.into_iter().flatten() {
        err(
            errors,
            span,
            format!("`linear` does not fit an op with {what}"),
        );
    }
}
