//! The kernel code of an elementwise op: `SourceFn` (no inputs) or
//! `MapFn` over the forward, `MapGrad` over the gradient, and the CPU
//! bodies that map them over the blobs.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::kernel::FormCode;
use crate::model::{Backward, OpModel, Role};

/// The scalar as the kernel's element type.
fn scalar_t() -> TokenStream {
    quote!(<__T as ::simpleop::Element>::from_f64(self.scalar))
}

pub(super) fn code(m: &OpModel) -> FormCode {
    if m.elem_outputs > 1 {
        return multi_code(m);
    }
    let arity = m.arity();
    let mut items = if arity == 0 {
        source_impl(m)
    } else {
        map_impl(m)
    };
    let forward = if arity == 0 {
        quote!(::simpleop::__private::source_forward(
            call,
            &__kernel(call.env)?,
            outputs,
            reqs
        ))
    } else {
        quote!(::simpleop::__private::map_forward::<_, #arity>(call, &__kernel(call.env)?, inputs, outputs, reqs))
    };
    let backward = m.backward.as_ref().map(|b| {
        items.extend(grad_impl(b, arity));
        quote!(::simpleop::__private::map_backward::<_, #arity>(call, &__kernel(call.env)?, args, grads, reqs))
    });
    FormCode {
        items,
        forward,
        backward,
    }
}

/// The forward's arguments, from the bound inputs `__x0`.. and the kernel
/// value.
fn forward_args(m: &OpModel) -> impl Iterator<Item = TokenStream> + '_ {
    m.forward.roles.iter().map(|r| match r {
        Role::Input(k) => {
            let v = format_ident!("__x{}", k);
            quote!(*#v)
        }
        Role::State(k) => {
            let v = format_ident!("__x{}", k);
            quote!(&mut *#v)
        }
        Role::Scalar => scalar_t(),
        Role::Kwargs => quote!(self.params),
        Role::Rng => quote!(rng),
        _ => quote!(compile_error!("unsupported role")),
    })
}

/// A source op (no inputs): one value per element from the random stream.
fn source_impl(m: &OpModel) -> TokenStream {
    let fwd_args = forward_args(m);
    quote! {
        impl ::simpleop::kernel::SourceFn for __Kernel<'_> {
            #[inline(always)]
            fn apply<__T: ::simpleop::Float>(&self, rng: &mut ::simpleop::Rng) -> __T {
                let _ = &rng;
                forward::<__T>(#(#fwd_args),*)
            }
        }
    }
}

/// A map over the inputs, with the op's vector form and, for a pure unary
/// kernel, its half-type tables.
fn map_impl(m: &OpModel) -> TokenStream {
    let arity = m.arity();
    let binds = (0..arity).map(|k| format_ident!("__x{}", k));
    let fwd_args = forward_args(m);
    let vector = m.vector.as_ref().map(|v| {
        quote! {
            #[inline(always)]
            fn vector(&self) -> ::core::option::Option<::simpleop::kernel::VectorForm> {
                ::core::option::Option::Some(#v)
            }
        }
    });
    // One table per op over each half type, built at first use.
    let tables = m.pure_unary().then(|| {
        quote! {
            #[inline(always)]
            fn half_tables(&self) -> ::core::option::Option<&'static ::simpleop::kernel::HalfTables> {
                static TABLES: ::simpleop::kernel::HalfTables = ::simpleop::kernel::HalfTables::new();
                ::core::option::Option::Some(&TABLES)
            }
        }
    });
    quote! {
        impl ::simpleop::kernel::MapFn<#arity> for __Kernel<'_> {
            #[inline(always)]
            fn apply<__T: ::simpleop::Float>(&self, x: &mut [__T; #arity]) -> __T {
                let [#(#binds),*] = x;
                forward::<__T>(#(#fwd_args),*)
            }
            #vector
            #tables
        }
    }
}

/// The arguments of a call of `backward` over `dy`, `y` and `x` (one value
/// each, or arrays over the outputs), and its result as an array `r` of
/// one gradient per input.
fn grad_call(b: &Backward, arity: usize) -> (Vec<TokenStream>, TokenStream) {
    let args = b.kernel.roles.iter().map(|r| match r {
        Role::OutGrad => quote!(::simpleop::OutGrad(dy)),
        Role::OutValue => quote!(::simpleop::OutValue(y)),
        Role::OutGrads => quote!(::simpleop::OutGrads(dy)),
        Role::OutValues => quote!(::simpleop::OutValues(y)),
        Role::InputValue(k) => {
            let w = format_ident!("In{}", k);
            quote!(::simpleop::#w(x[#k]))
        }
        Role::Scalar => scalar_t(),
        Role::Kwargs => quote!(self.params),
        _ => quote!(compile_error!("unsupported role")),
    });
    let ret = if arity == 1 {
        quote!([r])
    } else {
        let idx = (0..arity).map(syn::Index::from);
        quote!([#(r.#idx),*])
    };
    (args.collect(), ret)
}

/// The gradient as a map from the output gradient, the output and the
/// inputs to one gradient per input.
fn grad_impl(b: &Backward, arity: usize) -> TokenStream {
    let (args, ret) = grad_call(b, arity);
    quote! {
        impl ::simpleop::kernel::MapGrad<#arity> for __Kernel<'_> {
            #[inline(always)]
            fn apply<__T: ::simpleop::Float>(&self, dy: __T, y: __T, x: [__T; #arity]) -> [__T; #arity] {
                let _ = (&y, &x);
                let r = backward::<__T>(#(#args),*);
                #ret
            }
        }
    }
}

/// An op whose forward returns a tuple: `MultiMapFn` over the forward,
/// `MultiMapGrad` over the gradient (its `OutGrads`/`OutValues` read as
/// arrays), run by the several-output drivers.
fn multi_code(m: &OpModel) -> FormCode {
    let (n, outs) = (m.arity(), m.elem_outputs);
    let binds = (0..n).map(|k| format_ident!("__x{}", k));
    let fwd_args = forward_args(m);
    let idx = (0..outs).map(syn::Index::from);
    let mut items = quote! {
        impl ::simpleop::kernel::MultiMapFn<#n, #outs> for __Kernel<'_> {
            #[inline(always)]
            fn apply<__T: ::simpleop::Float>(&self, mut x: [__T; #n]) -> [__T; #outs] {
                let [#(#binds),*] = &mut x;
                let r = forward::<__T>(#(#fwd_args),*);
                [#(r.#idx),*]
            }
        }
    };
    let forward = quote!(::simpleop::__private::multi_map_forward::<_, #n, #outs>(call, &__kernel(call.env)?, inputs, outputs, reqs));
    let backward = m.backward.as_ref().map(|b| {
        items.extend(multi_grad_impl(b, n, outs));
        quote!(::simpleop::__private::multi_map_backward::<_, #n, #outs>(call, &__kernel(call.env)?, args, grads, reqs))
    });
    FormCode {
        items,
        forward,
        backward,
    }
}

fn multi_grad_impl(b: &Backward, arity: usize, outs: usize) -> TokenStream {
    let (args, ret) = grad_call(b, arity);
    quote! {
        impl ::simpleop::kernel::MultiMapGrad<#arity, #outs> for __Kernel<'_> {
            #[inline(always)]
            fn apply<__T: ::simpleop::Float>(&self, dy: [__T; #outs], y: [__T; #outs], x: [__T; #arity]) -> [__T; #arity] {
                let _ = (&y, &x);
                let r = backward::<__T>(#(#args),*);
                #ret
            }
        }
    }
}
