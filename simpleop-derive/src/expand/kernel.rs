//! The kernel value (`__Kernel`: the scalar or a borrow of the kwargs, read
//! from the environment) and the CPU entry points that run the kernels.

use proc_macro2::TokenStream;
use quote::quote;

use super::paths::kwargs_type;
use crate::model::{OpModel, Params};

/// `__Kernel` and `__kernel`, which reads it from the environment.
pub(super) fn value(m: &OpModel) -> TokenStream {
    let name = &m.name;
    let (fields, init) = match (&m.params, kwargs_type(m)) {
        (Params::Scalar, _) => (
            quote!(scalar: f64,),
            quote!(scalar: env.require_scalar(#name)?,),
        ),
        (Params::Kwargs(_), Some(p)) => (
            quote!(params: &'p #p,),
            quote!(params: env.require_kwargs::<#p>(#name)?,),
        ),
        _ => (quote!(), quote!()),
    };
    quote! {
        #[doc(hidden)]
        #[allow(dead_code)]
        #[derive(Clone, Copy)]
        pub struct __Kernel<'p> {
            #fields
            _env: ::core::marker::PhantomData<&'p ()>,
        }
        #[doc(hidden)]
        pub fn __kernel(env: &::simpleop::EnvArguments) -> ::simpleop::Result<__Kernel<'_>> {
            let _ = env;
            Ok(__Kernel { #init _env: ::core::marker::PhantomData })
        }
    }
}

/// The form's kernel code: trait impls for the kernel value, and the bodies
/// of the CPU forward and (with a gradient) backward.
pub(super) struct FormCode {
    pub items: TokenStream,
    pub forward: TokenStream,
    pub backward: Option<TokenStream>,
}

/// `__backward_cpu` around the gradient body, and the value registered for
/// it.
pub(super) fn backward_cpu(body: Option<&TokenStream>) -> (TokenStream, TokenStream) {
    match body {
        Some(body) => (
            quote! {
                #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
                fn __backward_cpu(
                    call: &::simpleop::OpCall<'_>,
                    args: &::simpleop::GradArgs<'_>,
                    grads: &mut [::simpleop::TBlobMut<'_>],
                    reqs: &[::simpleop::OpReqType],
                ) -> ::simpleop::Result<()> {
                    #body
                }
            },
            quote!(Some(__backward_cpu)),
        ),
        None => (quote!(), quote!(None)),
    }
}

/// `__forward_cpu` around the forward body.
pub(super) fn forward_cpu(body: &TokenStream) -> TokenStream {
    quote! {
        #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
        fn __forward_cpu(
            call: &::simpleop::OpCall<'_>,
            inputs: &[::simpleop::TBlob<'_>],
            outputs: &mut [::simpleop::TBlobMut<'_>],
            reqs: &[::simpleop::OpReqType],
        ) -> ::simpleop::Result<()> {
            let _ = inputs;
            #body
        }
    }
}
