//! The functions beside the kernels: `__infer_shape`, `__infer_dtype` and
//! `__rows` around the module's `shape`, `dtype` and `rows`, or the
//! defaults the op registers without them.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::paths::kwargs_type;
use crate::model::{Kernel, OpModel, Role};

/// The generated functions and the values the op registers.
pub(super) struct Infer {
    pub items: TokenStream,
    pub shape: TokenStream,
    pub rows: TokenStream,
    pub dtype: TokenStream,
}

pub(super) fn functions(m: &OpModel) -> Infer {
    let mut items = quote!();
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
    }
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
            op.check_arity(#inputs.len())?;
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
