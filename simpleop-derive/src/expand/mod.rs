//! Code generation: the op's module re-emitted with its generated items
//! (the kernel value and kernel code by form, the shape/dtype/rows
//! functions, the CPU entry points, the `OpDef` and its registration), and
//! the typed functions beside it.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemMod;

use crate::model::{Form, OpModel};

mod blob;
mod elementwise;
mod infer;
mod kernel;
mod opdef;
mod paths;
mod registration;
mod tile;
mod typed;

pub fn expand(module: &ItemMod, m: &OpModel) -> TokenStream {
    let ident = &m.ident;
    let vis = &m.vis;
    let outer = module
        .attrs
        .iter()
        .filter(|a| matches!(a.style, syn::AttrStyle::Outer));
    let inner = module
        .attrs
        .iter()
        .filter(|a| matches!(a.style, syn::AttrStyle::Inner(_)));
    let items =
        elementwise_kernels_inlined(&module.content.as_ref().expect("checked in model").1, m);
    let generated = generated(m);
    let typed = typed::functions(m);
    quote! {
        #(#outer)*
        #vis mod #ident {
            #(#inner)*
            #(#items)*

            #generated
        }
        #typed
    }
}

/// The items generated inside the op's module.
fn generated(m: &OpModel) -> TokenStream {
    let value = kernel::value(m);
    let code = match m.form {
        Form::Elementwise => elementwise::code(m),
        Form::Blob => blob::code(m),
    };
    let infer = infer::functions(m);
    let (backward_cpu, backward) = kernel::backward_cpu(code.backward.as_ref());
    let forward_cpu = kernel::forward_cpu(&code.forward);
    let op_def = opdef::op_def(m, &infer);
    let registration = registration::submit(
        m,
        &registration::CpuKernels {
            backward,
            tile: tile::fns(m),
            rows: infer.rows.clone(),
            derivative: tile::derivative(m),
            grad_derivative: tile::grad_derivative(m),
        },
    );
    let (code_items, infer_items) = (&code.items, &infer.items);
    quote! {
        #value
        #code_items
        #infer_items
        #backward_cpu
        #forward_cpu

        #op_def

        #registration
    }
}

/// The module's items, with `#[inline(always)]` added to an elementwise
/// op's `forward` and `backward` unless they carry an `inline` attribute:
/// the kernel must be inlined into the SIMD tile loops, which are compiled
/// per instruction set, or it runs as a scalar call per element.
fn elementwise_kernels_inlined(items: &[syn::Item], m: &OpModel) -> Vec<syn::Item> {
    let mut items = items.to_vec();
    if m.form != Form::Elementwise {
        return items;
    }
    for item in &mut items {
        if let syn::Item::Fn(f) = item
            && (f.sig.ident == "forward" || f.sig.ident == "backward")
            && !f.attrs.iter().any(|a| a.path().is_ident("inline"))
        {
            f.attrs.push(syn::parse_quote!(#[inline(always)]));
        }
    }
    items
}
