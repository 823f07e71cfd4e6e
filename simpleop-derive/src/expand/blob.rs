//! The kernel code of a blob-form op: CPU bodies that pass the blobs to
//! `forward` and `backward` as their parameters ask.

use proc_macro2::TokenStream;
use quote::quote;

use super::kernel::FormCode;
use super::paths::kwargs_type;
use crate::model::{Backward, OpModel, Role};

pub(super) fn code(m: &OpModel) -> FormCode {
    FormCode {
        items: quote!(),
        forward: forward(m),
        backward: m.backward.as_ref().map(|b| backward(m, b)),
    }
}

/// The argument for a parameter either kernel may take; `None` for one
/// only the forward or the gradient takes.
fn shared_arg(m: &OpModel, r: Role) -> Option<TokenStream> {
    let name = &m.name;
    match r {
        Role::Scalar => Some(quote!(call.env.require_scalar(#name)?)),
        Role::Kwargs => Some(
            kwargs_type(m)
                .map(|p| quote!(call.env.require_kwargs::<#p>(#name)?))
                .unwrap_or_default(),
        ),
        Role::Env => Some(quote!(call.env)),
        _ => None,
    }
}

fn forward(m: &OpModel) -> TokenStream {
    let name = &m.name;
    let fwd_args = m.forward.roles.iter().map(|&r| match r {
        Role::Inputs => quote!(inputs),
        Role::Out => quote!(out),
        Role::Req => quote!(req),
        _ => shared_arg(m, r).unwrap_or_else(|| quote!(compile_error!("unsupported role"))),
    });
    quote! {{
        call.op.check_arity(inputs.len())?;
        let ([out], [req]) = (outputs, reqs) else {
            return Err(::simpleop::Error::invalid(#name, "outputs", "a blob-form op has one output"));
        };
        let req = *req;
        Ok(forward(#(#fwd_args),*)?)
    }}
}

fn backward(m: &OpModel, b: &Backward) -> TokenStream {
    let name = &m.name;
    let args = b.kernel.roles.iter().map(|&r| match r {
        Role::OutGrad => quote!(::simpleop::OutGrad(&args.out_grad)),
        Role::OutValue => quote!(::simpleop::OutValue(args.output.as_ref().ok_or_else(|| ::simpleop::Error::invalid(#name, "output", "the gradient reads the forward output"))?)),
        Role::Inputs => quote!(::simpleop::Inputs(&__inputs[..])),
        Role::Grads => quote!(grads),
        Role::Reqs => quote!(reqs),
        _ => shared_arg(m, r).unwrap_or_else(|| quote!(compile_error!("unsupported role"))),
    });
    quote! {{
        call.op.check_arity(grads.len())?;
        call.op.check_arity(reqs.len())?;
        let __inputs: ::std::vec::Vec<::simpleop::TBlob<'_>> = args
            .inputs
            .iter()
            .flatten()
            .cloned()
            .collect();
        Ok(backward(#(#args),*)?)
    }}
}
