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
        Role::Out => quote!(&mut outs[0]),
        Role::Req => quote!(reqs[0]),
        Role::Outs => quote!(outs),
        Role::Reqs => quote!(reqs),
        Role::Aux => quote!(::simpleop::AuxStates(aux)),
        Role::Ctx => quote!(call.ctx),
        _ => shared_arg(m, r).unwrap_or_else(|| quote!(compile_error!("unsupported role"))),
    });
    quote! {{
        let n_aux = call.op.aux_states.len();
        call.op.check_inputs(call.env, inputs.len() + n_aux)?;
        let n_out = call.op.num_outputs(call.env);
        if outputs.len() != n_out + n_aux || reqs.len() != outputs.len() {
            return Err(::simpleop::Error::invalid(#name, "outputs", format!(
                "expected {} output blob(s) and {} aux state(s) with a request each, got {} blobs and {} requests",
                n_out, n_aux, outputs.len(), reqs.len())));
        }
        let (outs, aux) = outputs.split_at_mut(n_out);
        let reqs = &reqs[..n_out];
        let _ = (&aux, &reqs);
        Ok(forward(#(#fwd_args),*)?)
    }}
}

fn backward(m: &OpModel, b: &Backward) -> TokenStream {
    let name = &m.name;
    let args = b.kernel.roles.iter().map(|&r| match r {
        Role::OutGrad => quote!(::simpleop::OutGrad(&args.out_grad)),
        Role::OutValue => quote!(::simpleop::OutValue(args.output.as_ref().ok_or_else(|| ::simpleop::Error::invalid(#name, "output", "the gradient reads the forward output"))?)),
        Role::OutGrads => quote!(::simpleop::OutGrads(&args.out_grads[..])),
        Role::OutValues => quote!(::simpleop::OutValues(&args.outputs[..])),
        Role::Inputs => quote!(::simpleop::Inputs(&__inputs[..])),
        Role::Grads => quote!(grads),
        Role::Reqs => quote!(reqs),
        Role::Ctx => quote!(call.ctx),
        _ => shared_arg(m, r).unwrap_or_else(|| quote!(compile_error!("unsupported role"))),
    });
    quote! {{
        let n_args = call.op.num_arguments(call.env);
        for (what, got) in [("gradient blobs", grads.len()), ("gradient requests", reqs.len())] {
            if got != n_args {
                return Err(::simpleop::Error::invalid(#name, what, format!("expected {n_args}, one per argument, got {got}")));
            }
        }
        if args.out_grads.len() != call.op.num_outputs(call.env) {
            return Err(::simpleop::Error::invalid(#name, "out_grads", "expected one entry per output"));
        }
        let __inputs: ::std::vec::Vec<::simpleop::TBlob<'_>> = args
            .inputs
            .iter()
            .flatten()
            .cloned()
            .collect();
        Ok(backward(#(#args),*)?)
    }}
}
