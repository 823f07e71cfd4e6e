//! The typed functions beside the op's module: `op(..)` (eager on
//! `NDArray`s, a graph node on `Symbol`s), `op_into(..)` and
//! `op_inplace(..)`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Ident;

use crate::model::{OpModel, Params, Role};

/// The op's parameter as the functions declare it, and the
/// `EnvArguments` they build from it.
struct Env {
    decl: TokenStream,
    value: TokenStream,
}

impl Env {
    fn new(m: &OpModel) -> Env {
        let (decl, value) = match &m.params {
            Params::None => (quote!(), quote!(::simpleop::EnvArguments::none())),
            Params::Scalar => (
                quote!(scalar: f64,),
                quote!(::simpleop::EnvArguments::scalar(scalar)),
            ),
            Params::Kwargs(p) => (
                quote!(params: #p,),
                quote!(::simpleop::EnvArguments::kwargs(params)),
            ),
        };
        Env { decl, value }
    }
}

pub(super) fn functions(m: &OpModel) -> TokenStream {
    let env = Env::new(m);
    if m.forward.has_state() {
        return with_states(m, &env);
    }
    if m.is_general() {
        return general(m, &env);
    }
    if m.arguments.is_some() {
        return variadic(m, &env);
    }
    let mut out = call(m, &env);
    out.extend(into(m, &env));
    if let Some((first, rest)) = m.input_names.split_first() {
        out.extend(inplace(m, &env, first, rest));
    }
    out
}

/// `op(..)`. With inputs, one function serves both front ends: an `NDArray`
/// runs now, a `Symbol` adds a graph node. A source op has nothing to infer
/// the front end from, so it stays eager.
fn call(m: &OpModel, env: &Env) -> TokenStream {
    let (ident, vis, name, inputs) = (&m.ident, &m.vis, &m.name, &m.input_names);
    let Env { decl, value } = env;
    if inputs.is_empty() {
        let doc = format!("Runs op `{name}` eagerly and returns a fresh output.");
        return quote! {
            #[doc = #doc]
            #[allow(dead_code)]
            #vis fn #ident(#decl) -> ::simpleop::Result<::simpleop::NDArray> {
                ::simpleop::__private::invoke_with(&#ident::OP, &[], &#value)
            }
        };
    }
    let doc = format!(
        "Applies op `{name}`: on `NDArray`s it runs now and returns a fresh output; on `Symbol`s it returns a new graph node."
    );
    quote! {
        #[doc = #doc]
        #[allow(dead_code)]
        #vis fn #ident<A: ::simpleop::Operand>(#(#inputs: &A,)* #decl) -> ::simpleop::Result<A> {
            <A as ::simpleop::Operand>::apply(&#ident::OP, &[#(#inputs),*], &#value)
        }
    }
}

/// `op_into(.., out, req)`.
fn into(m: &OpModel, env: &Env) -> TokenStream {
    let (ident, vis, name, inputs) = (&m.ident, &m.vis, &m.name, &m.input_names);
    let Env { decl, value } = env;
    let into = format_ident!("{}_into", ident);
    let doc = format!(
        "Runs op `{name}` into `out` (which has the output's shape and dtype), honouring `req`."
    );
    quote! {
        #[doc = #doc]
        #[allow(dead_code)]
        #vis fn #into(#(#inputs: &::simpleop::NDArray,)* #decl out: &mut ::simpleop::NDArray, req: ::simpleop::OpReqType) -> ::simpleop::Result<()> {
            ::simpleop::__private::invoke_into(&#ident::OP, &[#(#inputs),*], &#value, out, req)
        }
    }
}

/// `op_inplace(first, ..)`.
fn inplace(m: &OpModel, env: &Env, first: &Ident, rest: &[Ident]) -> TokenStream {
    let (ident, vis, name) = (&m.ident, &m.vis, &m.name);
    let Env { decl, value } = env;
    let inplace = format_ident!("{}_inplace", ident);
    let doc = format!(
        "Runs op `{name}` with `{first}` as its first input and stores the result there: in its own buffer when the op allows it and nothing shares the storage, otherwise by replacing the handle."
    );
    quote! {
        #[doc = #doc]
        #[allow(dead_code)]
        #vis fn #inplace(#first: &mut ::simpleop::NDArray, #(#rest: &::simpleop::NDArray,)* #decl) -> ::simpleop::Result<()> {
            ::simpleop::__private::invoke_inplace(&#ident::OP, #first, &[#(#rest),*], &#value)
        }
    }
}

/// `op(..)` and `op_inplace(..)` of an op that updates some inputs in
/// place: those it takes as `&mut`.
fn with_states(m: &OpModel, env: &Env) -> TokenStream {
    let (ident, vis, name, inputs) = (&m.ident, &m.vis, &m.name, &m.input_names);
    let Env {
        decl: param_decl,
        value,
    } = env;
    let inplace = format_ident!("{}_inplace", ident);
    let is_state: Vec<bool> = (0..inputs.len())
        .map(|k| m.forward.roles.contains(&Role::State(k)))
        .collect();
    let declare = |(i, &s): (&Ident, &bool)| {
        if s {
            quote!(#i: &mut ::simpleop::NDArray)
        } else {
            quote!(#i: &::simpleop::NDArray)
        }
    };
    let decl = inputs.iter().zip(&is_state).map(declare);
    let rest_decl = inputs.iter().zip(&is_state).skip(1).map(declare);
    let plain = |skip| {
        inputs
            .iter()
            .zip(&is_state)
            .skip(skip)
            .filter(|(_, s)| !**s)
            .map(|(i, _)| i)
    };
    let (plain, rest_plain) = (plain(0), plain(1));
    let states: Vec<_> = inputs
        .iter()
        .zip(&is_state)
        .filter(|(_, s)| **s)
        .map(|(i, _)| i)
        .collect();
    let first = &inputs[0];
    let doc_call = format!(
        "Runs op `{name}` eagerly, updating its state inputs in place, and returns the output."
    );
    let doc_inplace = format!(
        "Runs op `{name}` with the result stored in `{first}` and its state inputs updated in place."
    );
    quote! {
        #[doc = #doc_call]
        #[allow(dead_code)]
        #vis fn #ident(#(#decl,)* #param_decl) -> ::simpleop::Result<::simpleop::NDArray> {
            ::simpleop::__private::invoke_with_states(&#ident::OP, &[#(#plain),*], &mut [#(#states),*], &#value)
        }
        #[doc = #doc_inplace]
        #[allow(dead_code)]
        #vis fn #inplace(#first: &mut ::simpleop::NDArray, #(#rest_decl,)* #param_decl) -> ::simpleop::Result<()> {
            ::simpleop::__private::invoke_inplace_with_states(&#ident::OP, #first, &[#(#rest_plain),*], &mut [#(#states),*], &#value)
        }
    }
}

/// `op(inputs, ..)` of an op whose arguments depend on its kwargs: a
/// slice of inputs, on either front end.
fn variadic(m: &OpModel, env: &Env) -> TokenStream {
    let (ident, vis, name) = (&m.ident, &m.vis, &m.name);
    let Env { decl, value } = env;
    let doc = format!(
        "Applies op `{name}` to `inputs` (as many as its kwargs say): on `NDArray`s it runs now; on `Symbol`s it returns a new graph node."
    );
    quote! {
        #[doc = #doc]
        #[allow(dead_code)]
        #vis fn #ident<A: ::simpleop::Operand>(inputs: &[&A], #decl) -> ::simpleop::Result<A> {
            <A as ::simpleop::Operand>::apply(&#ident::OP, inputs, &#value)
        }
    }
}

/// `op(..)` (eager: every output, the aux states updated in place in
/// training mode) and `op_symbol(..)` (a graph node showing the visible
/// outputs) of an op with several outputs or aux states.
fn general(m: &OpModel, env: &Env) -> TokenStream {
    let (ident, vis, name) = (&m.ident, &m.vis, &m.name);
    let Env { decl, value } = env;
    let symbol = format_ident!("{}_symbol", ident);
    let aux: Vec<Ident> = m.aux.iter().map(|a| format_ident!("{a}")).collect();
    let (arg_decl, arg_list, sym_decl) = match &m.arguments {
        Some(_) => (
            quote!(inputs: &[&::simpleop::NDArray],),
            quote!(inputs),
            quote!(inputs: &[&::simpleop::Symbol],),
        ),
        None => {
            let inputs = &m.input_names;
            (
                quote!(#(#inputs: &::simpleop::NDArray,)*),
                quote!(&[#(#inputs),*]),
                quote!(#(#inputs: &::simpleop::Symbol,)*),
            )
        }
    };
    let sym_inputs = match &m.arguments {
        Some(_) => quote!(inputs.iter().copied()),
        None => {
            let inputs = &m.input_names;
            quote!([#(#inputs),*].into_iter())
        }
    };
    let doc = format!(
        "Runs op `{name}` eagerly and returns every output; aux states are read, and updated in place in training mode (`simpleop::eager::train_mode`)."
    );
    let doc_symbol =
        format!("Applies op `{name}` to symbols: a graph node showing its visible outputs.");
    quote! {
        #[doc = #doc]
        #[allow(dead_code, clippy::too_many_arguments)]
        #vis fn #ident(#arg_decl #(#aux: &mut ::simpleop::NDArray,)* #decl) -> ::simpleop::Result<::std::vec::Vec<::simpleop::NDArray>> {
            ::simpleop::__private::invoke_outputs(&#ident::OP, #arg_list, &mut [#(#aux),*], &#value)
        }
        #[doc = #doc_symbol]
        #[allow(dead_code, clippy::too_many_arguments)]
        #vis fn #symbol(#sym_decl #(#aux: &::simpleop::Symbol,)* #decl) -> ::simpleop::Result<::simpleop::Symbol> {
            let all: ::std::vec::Vec<&::simpleop::Symbol> = #sym_inputs.chain([#(#aux),*]).collect();
            ::simpleop::Symbol::apply(&#ident::OP, &all, &#value)
        }
    }
}
