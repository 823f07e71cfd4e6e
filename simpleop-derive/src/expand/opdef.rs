//! The op's registration data: `pub static OP: OpDef`.

use proc_macro2::TokenStream;
use quote::quote;

use super::infer::Infer;
use super::paths::kwargs_type;
use crate::model::{Form, OpModel, Params, Role};
use crate::options::InplaceName;

/// `OP`, the op's definition, with its shape and dtype rules from `infer`.
pub(super) fn op_def(m: &OpModel, infer: &Infer) -> TokenStream {
    let name = &m.name;
    let aliases = &m.aliases;
    let states = m.forward.roles.iter().filter_map(|r| match r {
        Role::State(k) => Some(*k),
        _ => None,
    });
    let doc = &m.doc;
    let input_strs = m.input_names.iter().map(|i| i.to_string());
    let (params_kind, parse, to_attrs) = params(m);
    let form = match m.form {
        Form::Elementwise => quote!(::simpleop::OpForm::Elementwise),
        Form::Blob => quote!(::simpleop::OpForm::Blob),
    };
    let pattern = pattern(&m.pattern);
    let cost = m.cost;
    let (fwd_inplace, grad_inplace) = inplace(m);
    let gradient = match &m.backward {
        Some(b) => {
            let (o, i) = (b.needs_output, b.needs_inputs);
            quote!(Some(::simpleop::GradSpec { needs_output: #o, needs_inputs: #i }))
        }
        None => quote!(None),
    };
    let (rng, temp, linear) = (m.rng, m.temp, m.linear);
    let Infer {
        shape: infer_shape,
        dtype: infer_dtype,
        outputs,
        complete,
        ..
    } = infer;
    let arguments = match &m.arguments {
        Some(_) => quote!(Some(__arguments)),
        None => quote!(None),
    };
    let simple_form = match &m.simple_form {
        Some(_) => quote!(Some(__simple_form)),
        None => quote!(None),
    };
    let inference_form = match &m.inference_form {
        Some(_) => quote!(Some(__inference_form)),
        None => quote!(None),
    };
    let aux = &m.aux;
    quote! {
        #[doc = concat!("The definition of op `", #name, "`.")]
        pub static OP: ::simpleop::OpDef = ::simpleop::OpDef {
            name: #name,
            aliases: &[#(#aliases),*],
            mutate_inputs: &[#(#states),*],
            description: #doc,
            location: concat!(file!(), ":", line!()),
            inputs: &[#(#input_strs),*],
            params: #params_kind,
            form: #form,
            pattern: ::simpleop::Pattern::#pattern,
            cost: #cost,
            inplace: ::simpleop::InplaceOptions { forward: #fwd_inplace, gradient: #grad_inplace },
            gradient: #gradient,
            linear: #linear,
            resources: ::simpleop::Resources { rng: #rng, temp: #temp },
            parse: #parse,
            to_attrs: #to_attrs,
            infer_shape: #infer_shape,
            infer_dtype: #infer_dtype,
            arguments: #arguments,
            aux_states: &[#(#aux),*],
            outputs: #outputs,
            complete_shapes: #complete,
            simple_form: #simple_form,
            inference_form: #inference_form,
        };
    }
}

/// The op's parameter kind, and how its parameters are parsed from and
/// written to attributes.
fn params(m: &OpModel) -> (TokenStream, TokenStream, TokenStream) {
    match (&m.params, kwargs_type(m)) {
        (Params::Kwargs(p), Some(pi)) => {
            let type_name = quote!(#p).to_string().replace(' ', "");
            (
                quote!(::simpleop::ParamKind::Kwargs { type_name: #type_name, fields: ::simpleop::__private::kwarg_fields::<#pi> }),
                quote!(::simpleop::__private::parse_kwargs_env::<#pi>),
                quote!(::simpleop::__private::kwargs_to_attrs::<#pi>),
            )
        }
        (Params::Scalar, _) => (
            quote!(::simpleop::ParamKind::Scalar),
            quote!(::simpleop::__private::parse_scalar_or_none),
            quote!(::simpleop::__private::scalar_to_attrs),
        ),
        _ => (
            quote!(::simpleop::ParamKind::None),
            quote!(::simpleop::__private::parse_scalar_or_none),
            quote!(::simpleop::__private::scalar_to_attrs),
        ),
    }
}

/// The `Pattern` variant of a pattern name (one of `options::PATTERNS`).
fn pattern(pattern: &str) -> TokenStream {
    match pattern {
        "broadcast" => quote!(Broadcast),
        "injective" => quote!(Injective),
        "reduction" => quote!(Reduction),
        "out_elemwise_fusable" => quote!(OutElemwiseFusable),
        "opaque" => quote!(Opaque),
        _ => quote!(Elementwise),
    }
}

/// The forward and gradient in-place options.
fn inplace(m: &OpModel) -> (TokenStream, TokenStream) {
    let forward = match m.fwd_inplace {
        Some(InplaceName::InOut) => quote!(Some(::simpleop::ForwardInplace::InOut)),
        Some(InplaceName::LhsOut) => quote!(Some(::simpleop::ForwardInplace::LhsOut)),
        _ => quote!(None),
    };
    let gradient = match m.grad_inplace {
        Some(InplaceName::OutIn) => quote!(Some(::simpleop::GradInplace::OutIn)),
        Some(InplaceName::OutLhs) => quote!(Some(::simpleop::GradInplace::OutLhs)),
        _ => quote!(None),
    };
    (forward, gradient)
}
