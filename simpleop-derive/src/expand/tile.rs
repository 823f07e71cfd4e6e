//! The tile functions of an elementwise op: its kernels over f32 and f64
//! tiles, for the fused executor, and the lane that computes the same.

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::{Form, OpModel, Params};

/// `Some(TileFns { .. })` for an elementwise op with inputs and no state,
/// `None` otherwise.
pub(super) fn fns(m: &OpModel) -> TokenStream {
    let arity = m.arity();
    if m.form != Form::Elementwise || arity == 0 || m.forward.has_state() {
        return quote!(None);
    }
    let bwd = |c: TokenStream| {
        if m.backward.is_some() {
            quote!(Some(|env: &::simpleop::EnvArguments, dy: &[#c], y: &[#c], xs: &[&[#c]], grads: &mut [&mut [#c]]| {
                ::simpleop::__private::tile_backward::<_, #c, #arity>(&__kernel(env)?, dy, y, xs, grads)
            }))
        } else {
            quote!(None)
        }
    };
    if m.elem_outputs > 1 {
        return multi_fns(m);
    }
    let (b32, b64) = (bwd(quote!(f32)), bwd(quote!(f64)));
    let lane = lane(m);
    quote!(Some(::simpleop::kernel::TileFns {
        forward_f32: |env: &::simpleop::EnvArguments, ins: &[&[f32]], out: &mut [f32]| {
            ::simpleop::__private::tile_forward::<_, f32, #arity>(&__kernel(env)?, ins, out)
        },
        forward_f64: |env: &::simpleop::EnvArguments, ins: &[&[f64]], out: &mut [f64]| {
            ::simpleop::__private::tile_forward::<_, f64, #arity>(&__kernel(env)?, ins, out)
        },
        backward_f32: #b32,
        backward_f64: #b64,
        lane: #lane,
        more_outputs: &[],
    }))
}

/// The tile functions of an op with several outputs: one forward per
/// output, and no tile gradient (its backward reads every output's
/// gradient, which fused gradient chains do not carry).
fn multi_fns(m: &OpModel) -> TokenStream {
    let (n, outs) = (m.arity(), m.elem_outputs);
    let one = |k: usize, c: TokenStream| {
        quote!(|env: &::simpleop::EnvArguments, ins: &[&[#c]], out: &mut [#c]| {
            ::simpleop::__private::tile_forward_output::<_, #c, #n, #outs>(&__kernel(env)?, #k, ins, out)
        })
    };
    let more = (1..outs).map(|k| {
        let (a, b) = (one(k, quote!(f32)), one(k, quote!(f64)));
        quote!((#a, #b))
    });
    let (f32_0, f64_0) = (one(0, quote!(f32)), one(0, quote!(f64)));
    quote!(Some(::simpleop::kernel::TileFns {
        forward_f32: #f32_0,
        forward_f64: #f64_0,
        backward_f32: None,
        backward_f64: None,
        lane: None,
        more_outputs: &[#(#more),*],
    }))
}

/// The lane of the op's `lanes = ...`, with its scalar, or `None`.
fn lane(m: &OpModel) -> TokenStream {
    let Some(op) = &m.lanes else {
        return quote!(None);
    };
    let scalar = if matches!(m.params, Params::Scalar) {
        quote!(<f32 as ::simpleop::Element>::from_f64(__k.scalar))
    } else {
        quote!(0.0)
    };
    quote!(Some(|env: &::simpleop::EnvArguments| -> ::core::option::Option<::simpleop::kernel::Lane> {
        let __k = __kernel(env).ok()?;
        let _ = &__k;
        ::core::option::Option::Some(::simpleop::kernel::Lane { op: #op, scalar: #scalar })
    }))
}

/// `Some(DerivativeFns { .. })` for a single-output elementwise op of 1 to
/// 3 inputs with no state and no random stream (what `Dual` can run and a
/// gradient can read), not `impure` (it may panic on the checker's special
/// values), `None` otherwise.
pub(super) fn derivative(m: &OpModel) -> TokenStream {
    let arity = m.arity();
    if m.form != Form::Elementwise
        || !(1..=3).contains(&arity)
        || m.forward.has_state()
        || m.rng
        || m.impure
        || m.elem_outputs > 1
    {
        return quote!(None);
    }
    let one = |c: TokenStream| {
        quote!(|env: &::simpleop::EnvArguments, x: &[#c], partials: &mut [#c]| {
            ::simpleop::__private::dual_derivative::<_, #c, #arity>(&__kernel(env)?, x, partials)
        })
    };
    let (f32_fn, f64_fn) = (one(quote!(f32)), one(quote!(f64)));
    quote!(Some(::simpleop::kernel::DerivativeFns { f32: #f32_fn, f64: #f64_fn }))
}

/// `Some(GradDerivativeFns { .. })` for a single-output elementwise op of
/// 1 to 3 inputs with a typed gradient and no state or random stream (its
/// gradient on dual numbers: the second derivative), `None` otherwise.
pub(super) fn grad_derivative(m: &OpModel) -> TokenStream {
    let arity = m.arity();
    if m.form != Form::Elementwise
        || m.backward.is_none()
        || !(1..=3).contains(&arity)
        || m.forward.has_state()
        || m.rng
        || m.elem_outputs > 1
    {
        return quote!(None);
    }
    let one = |c: TokenStream| {
        quote!(|env: &::simpleop::EnvArguments, at: &[#c], weights: &[#c], partials: &mut [#c]| {
            ::simpleop::__private::dual_grad_derivative::<_, #c, #arity>(&__kernel(env)?, at, weights, partials)
        })
    };
    let (f32_fn, f64_fn) = (one(quote!(f32)), one(quote!(f64)));
    quote!(Some(::simpleop::kernel::GradDerivativeFns { f32: #f32_fn, f64: #f64_fn }))
}
