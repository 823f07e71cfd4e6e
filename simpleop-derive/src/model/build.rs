//! Building the model of one op: the options and the module's functions,
//! read by the op's form and checked against each other.

use syn::{Ident, ItemMod};

use super::checks::{self, Draft};
use super::cost::estimate_cost;
use super::infer::infer_fn;
use super::names::near_misses;
use super::syntax::{err, find_fn};
use super::types::{Form, Kernels, OpModel, Params, Role};
use super::{blob, elementwise};
use crate::options::Options;

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
    let params = params(&opts, errors);
    let form = if opts.blob.is_some() {
        Form::Blob
    } else {
        Form::Elementwise
    };
    let doc = doc(module);
    let name = name(&opts, &ident, errors);

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
    let kernels = match form {
        Form::Elementwise => elementwise::kernels(fwd, bwd, &params, &opts, errors)?,
        Form::Blob => blob::kernels(fwd, bwd, &params, &opts, errors),
    };
    let infer =
        |f, main, elem, errors: &mut Vec<syn::Error>| infer_fn(f, &params, main, elem, errors);
    let shape = find_fn(module, "shape").map(|f| infer(f, Role::Shapes, "Shape", errors));
    let dtype = find_fn(module, "dtype").map(|f| infer(f, Role::DTypes, "DType", errors));

    let draft = Draft {
        opts: &opts,
        ident: &ident,
        name: &name,
        form,
        params: &params,
        kernels: &kernels,
        bwd,
    };
    checks::shape_given(&draft, shape.is_some(), errors);
    checks::options_fit(&draft, errors);
    let (fwd_inplace, grad_inplace) = checks::inplace(&draft, errors);
    checks::overwrites(&draft, fwd_inplace, errors);
    checks::rng_used(&draft, errors);
    let pattern = pattern(&opts, form);
    checks::general_fit(&draft, fwd_inplace.or(grad_inplace).is_some(), errors);
    checks::tuple_fit(&draft, errors);
    checks::linear_fit(&draft, errors);
    let input_shapes = find_fn(module, "input_shapes").map(|f| input_shapes_fn(f, &params, errors));
    let rows = find_fn(module, "rows").map(|f| {
        checks::rows_fit(&draft, f, &pattern, errors);
        infer(f, Role::Shapes, "Shape", errors)
    });

    let Kernels {
        forward,
        outputs: elem_outputs,
        input_names,
        backward,
    } = kernels;
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
        cost: estimate_cost(fwd),
        vector: opts.vector.as_ref().map(|v| v.value.clone()),
        lanes: opts.lanes.as_ref().map(|v| v.value.clone()),
        impure: opts.impure.is_some(),
        linear: opts.linear.is_some(),
        // An elementwise tuple is a fixed count of outputs.
        outputs: match elem_outputs {
            1 => opts.outputs.as_ref().map(|o| o.value.clone()),
            n => Some(crate::options::Count::Fixed(n)),
        },
        visible_outputs: opts.visible_outputs.as_ref().map(|o| o.value.clone()),
        output_names: opts.output_names.as_ref().map(|o| o.value.clone()),
        arguments: opts.arguments.as_ref().map(|o| o.value.clone()),
        simple_form: opts.simple_form.as_ref().map(|o| o.value.clone()),
        inference_form: opts.inference_form.as_ref().map(|o| o.value.clone()),
        aux: opts
            .aux
            .as_ref()
            .map(|o| o.value.clone())
            .unwrap_or_default(),
        input_shapes,
        elem_outputs,
    })
}

/// `fn input_shapes(shapes: &mut [Option<Shape>], ...) -> Result<()>`:
/// fills in unknown input shapes.
fn input_shapes_fn(
    f: &syn::ItemFn,
    params: &Params,
    errors: &mut Vec<syn::Error>,
) -> super::types::Kernel {
    let roles = super::blob::blob_roles(
        f,
        params,
        errors,
        |ty| super::syntax::slice_ref_of(ty, true, "Option").then_some(Role::Shapes),
        "unexpected parameter in `input_shapes`; expected `&mut [Option<Shape>]`, `f64` (scalar) or `&Params`",
    );
    super::roles::kernel(roles)
}

/// The op's parameter kind: a scalar, kwargs, or none.
fn params(opts: &Options, errors: &mut Vec<syn::Error>) -> Params {
    match (&opts.scalar, &opts.kwargs) {
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
    }
}

/// The module's doc comment, trimmed.
fn doc(module: &ItemMod) -> String {
    module
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
        .to_string()
}

/// The op's name: `name = "..."`, or the module's.
fn name(opts: &Options, ident: &Ident, errors: &mut Vec<syn::Error>) -> String {
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
    name
}

/// The fusion pattern: `pattern = "..."`, or the form's default.
fn pattern(opts: &Options, form: Form) -> String {
    match &opts.pattern {
        Some(p) => p.value.clone(),
        None if form == Form::Blob => "opaque".into(),
        None if opts.broadcast.is_some() => "broadcast".into(),
        None => "elementwise".into(),
    }
}
