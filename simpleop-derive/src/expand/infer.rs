//! The functions beside the kernels: `__infer_shape`, `__infer_dtype` and
//! `__rows` around the module's `shape`, `dtype` and `rows`, or the
//! defaults the op registers without them.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::paths::kwargs_type;
use crate::model::{Kernel, OpModel, Role};
use crate::options::Count;

/// The generated functions and the values the op registers.
pub(super) struct Infer {
    pub items: TokenStream,
    pub shape: TokenStream,
    pub rows: TokenStream,
    pub dtype: TokenStream,
    /// `Some(&__OUTPUTS)` for an op with several outputs, else `None`.
    pub outputs: TokenStream,
    /// `Some(__complete)` with `fn input_shapes`, else `None`.
    pub complete: TokenStream,
}

pub(super) fn functions(m: &OpModel) -> Infer {
    let mut items = quote!();
    items.extend(arguments_fn(m));
    items.extend(simple_form_fn(m));
    items.extend(inference_form_fn(m));
    let complete = match &m.input_shapes {
        Some(k) => {
            items.extend(complete_fn(m, k));
            quote!(Some(__complete))
        }
        None => quote!(None),
    };
    if m.outputs.is_some() {
        items.extend(multi_output(m));
        return Infer {
            items,
            shape: quote!(__infer_shape),
            rows: quote!(None),
            dtype: quote!(__infer_dtype),
            outputs: quote!(Some(&__OUTPUTS)),
            complete,
        };
    }
    let shape = match &m.shape {
        Some(k) => {
            items.extend(infer_fn(m, k, "shape", "shapes", quote!(::simpleop::Shape)));
            quote!(__infer_shape)
        }
        None if m.pattern == "broadcast" => quote!(::simpleop::__private::broadcast_shape),
        None => quote!(::simpleop::__private::same_shape),
    };
    let rows = match &m.rows {
        Some(k) => {
            items.extend(rows_fn(m, k));
            quote!(Some(__rows))
        }
        None => quote!(None),
    };
    let dtype = match &m.dtype {
        Some(k) => {
            items.extend(infer_fn(m, k, "dtype", "dtypes", quote!(::simpleop::DType)));
            quote!(__infer_dtype)
        }
        None => quote!(::simpleop::__private::same_float_dtype),
    };
    Infer {
        items,
        shape,
        rows,
        dtype,
        outputs: quote!(None),
        complete,
    }
}

/// `__arguments`: the argument names from the kwargs (`arguments = path`).
fn arguments_fn(m: &OpModel) -> TokenStream {
    let (Some(path), Some(p)) = (&m.arguments, kwargs_type(m)) else {
        return quote!();
    };
    let name = &m.name;
    quote! {
        fn __arguments(env: &::simpleop::EnvArguments) -> ::std::vec::Vec<::std::string::String> {
            env.require_kwargs::<#p>(#name).map(#path).unwrap_or_default()
        }
    }
}

/// `__simple_form`: the elementwise op that runs a call with these kwargs
/// (`simple_form = path`).
fn simple_form_fn(m: &OpModel) -> TokenStream {
    let (Some(path), Some(p)) = (&m.simple_form, kwargs_type(m)) else {
        return quote!();
    };
    let name = &m.name;
    quote! {
        fn __simple_form(env: &::simpleop::EnvArguments) -> ::core::option::Option<&'static str> {
            env.require_kwargs::<#p>(#name).ok().and_then(#path)
        }
    }
}

/// `__inference_form`: the ops that run a call with these kwargs, input
/// shapes and dtype in inference (`inference_form = path`).
fn inference_form_fn(m: &OpModel) -> TokenStream {
    let (Some(path), Some(p)) = (&m.inference_form, kwargs_type(m)) else {
        return quote!();
    };
    let name = &m.name;
    quote! {
        fn __inference_form(
            env: &::simpleop::EnvArguments,
            shapes: &[::simpleop::Shape],
            dtype: ::simpleop::DType,
        ) -> ::core::option::Option<::simpleop::InferenceForm> {
            let p = env.require_kwargs::<#p>(#name).ok()?;
            #path(p, shapes, dtype)
        }
    }
}

/// `__complete`: unknown input shapes from known ones (`fn input_shapes`).
fn complete_fn(m: &OpModel, k: &Kernel) -> TokenStream {
    let a = args(m, k, &quote!(shapes));
    quote! {
        #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
        fn __complete(op: &::simpleop::OpDef, shapes: &mut [::core::option::Option<::simpleop::Shape>], env: &::simpleop::EnvArguments) -> ::simpleop::Result<()> {
            let _ = (op, env);
            Ok(input_shapes(#(#a),*)?)
        }
    }
}

/// A count option as a function of the environment.
fn count_fn(m: &OpModel, ident: &str, count: Option<&Count>, default: TokenStream) -> TokenStream {
    let f = format_ident!("{ident}");
    let name = &m.name;
    let body = match (count, kwargs_type(m)) {
        (Some(Count::Fixed(n)), _) => quote!(#n),
        (Some(Count::Path(p)), Some(k)) => {
            quote!(env.require_kwargs::<#k>(#name).map(#p).unwrap_or(1))
        }
        _ => default,
    };
    quote! {
        fn #f(env: &::simpleop::EnvArguments) -> usize {
            let _ = env;
            #body
        }
    }
}

/// The shape, dtype, count and name functions of an op with several
/// outputs, and `__OUTPUTS` gathering them.
fn multi_output(m: &OpModel) -> TokenStream {
    let name = &m.name;
    let mut items = count_fn(m, "__num_outputs", m.outputs.as_ref(), quote!(1));
    items.extend(count_fn(
        m,
        "__num_visible_outputs",
        m.visible_outputs.as_ref(),
        quote!(__num_outputs(env)),
    ));
    let names = match &m.output_names {
        // A kwargs-dependent count takes the first names (rrelu's mask).
        Some(list) => quote!({
            let mut names = vec![#(#list.to_owned()),*];
            names.truncate(__num_outputs(env));
            names
        }),
        None => quote!(match __num_outputs(env) {
            1 => vec!["output".to_owned()],
            n => (0..n).map(|k| format!("output{k}")).collect(),
        }),
    };
    let shapes = match &m.shape {
        Some(k) => {
            let a = args(m, k, &quote!(shapes));
            quote!(Ok(shape(#(#a),*)?))
        }
        // An elementwise tuple: every output has the inputs' one shape.
        None if m.elem_outputs > 1 => {
            quote!(Ok(vec![
                ::simpleop::__private::same_shape(op, shapes, env)?;
                __num_outputs(env)
            ]))
        }
        None => {
            quote!(Err(::simpleop::Error::invalid(#name, "shape", "an op with several outputs needs `fn shape`")))
        }
    };
    let dtypes = match &m.dtype {
        Some(k) => {
            let a = args(m, k, &quote!(dtypes));
            quote!(Ok(dtype(#(#a),*)?))
        }
        None => quote!({
            let d = ::simpleop::__private::same_float_dtype(op, dtypes, env)?;
            Ok(vec![d; __num_outputs(env)])
        }),
    };
    items.extend(quote! {
        fn __output_names(env: &::simpleop::EnvArguments) -> ::std::vec::Vec<::std::string::String> {
            let _ = env;
            #names
        }
        #[allow(clippy::needless_question_mark)]
        fn __infer_shapes(op: &::simpleop::OpDef, shapes: &[::simpleop::Shape], env: &::simpleop::EnvArguments) -> ::simpleop::Result<::std::vec::Vec<::simpleop::Shape>> {
            op.check_inputs(env, shapes.len() + op.aux_states.len())?;
            #shapes
        }
        #[allow(clippy::needless_question_mark)]
        fn __infer_dtypes(op: &::simpleop::OpDef, dtypes: &[::simpleop::DType], env: &::simpleop::EnvArguments) -> ::simpleop::Result<::std::vec::Vec<::simpleop::DType>> {
            op.check_inputs(env, dtypes.len() + op.aux_states.len())?;
            #dtypes
        }
        fn __infer_shape(op: &::simpleop::OpDef, shapes: &[::simpleop::Shape], env: &::simpleop::EnvArguments) -> ::simpleop::Result<::simpleop::Shape> {
            __infer_shapes(op, shapes, env)?.into_iter().next().ok_or_else(|| ::simpleop::Error::invalid(#name, "shape", "the shape function gave no output"))
        }
        fn __infer_dtype(op: &::simpleop::OpDef, dtypes: &[::simpleop::DType], env: &::simpleop::EnvArguments) -> ::simpleop::Result<::simpleop::DType> {
            __infer_dtypes(op, dtypes, env)?.into_iter().next().ok_or_else(|| ::simpleop::Error::invalid(#name, "dtype", "the dtype function gave no output"))
        }
        static __OUTPUTS: ::simpleop::MultiOutput = ::simpleop::MultiOutput {
            count: __num_outputs,
            visible: __num_visible_outputs,
            names: __output_names,
            infer_shapes: __infer_shapes,
            infer_dtypes: __infer_dtypes,
        };
    });
    items
}

/// The arguments of a module function `k` over the shapes or dtypes:
/// `main` for those, and what else it takes from the environment.
fn args(m: &OpModel, k: &Kernel, main: &TokenStream) -> Vec<TokenStream> {
    let name = &m.name;
    let kwargs = kwargs_type(m);
    k.roles
        .iter()
        .map(|r| match r {
            Role::Shapes | Role::DTypes => main.clone(),
            Role::Scalar => quote!(env.require_scalar(#name)?),
            Role::Kwargs => kwargs
                .as_ref()
                .map(|p| quote!(env.require_kwargs::<#p>(#name)?))
                .unwrap_or_default(),
            Role::Env => quote!(env),
            _ => quote!(compile_error!("unsupported role")),
        })
        .collect()
}

/// `__infer_<what>`: the output's `elem` from the inputs' (`inputs`), by
/// the module's `fn <what>`.
fn infer_fn(m: &OpModel, k: &Kernel, what: &str, inputs: &str, elem: TokenStream) -> TokenStream {
    let inputs = format_ident!("{inputs}");
    let a = args(m, k, &quote!(#inputs));
    let (generated, user) = (format_ident!("__infer_{what}"), format_ident!("{what}"));
    quote! {
        #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
        fn #generated(op: &::simpleop::OpDef, #inputs: &[#elem], env: &::simpleop::EnvArguments) -> ::simpleop::Result<#elem> {
            op.check_inputs(env, #inputs.len() + op.aux_states.len())?;
            let _ = env;
            Ok(#user(#(#a),*)?)
        }
    }
}

/// `__rows`: the row reduction of a reduction op, by the module's `fn rows`.
fn rows_fn(m: &OpModel, k: &Kernel) -> TokenStream {
    let a = args(m, k, &quote!(shapes));
    quote! {
        #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
        fn __rows(shapes: &[::simpleop::Shape], env: &::simpleop::EnvArguments) -> ::simpleop::Result<::core::option::Option<::simpleop::kernel::RowReduction>> {
            let _ = (shapes, env);
            Ok(rows(#(#a),*)?)
        }
    }
}
