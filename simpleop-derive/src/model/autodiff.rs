//! `autodiff`: an elementwise op's `backward` derived from its `forward`
//! by running the forward on dual numbers (`simpleop::Dual`). The derived
//! function is written into the module before the model reads it, so
//! everything after (roles, checks, code) treats it as the author's own:
//! a T2 gradient reading every input.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{GenericParam, Ident, ItemFn, ItemMod, Type, TypeParamBound};

use super::elementwise::{forward_outputs, scalar_position};
use super::syntax::{args, err, find_fn, is_ident, named, reference};
use super::types::Params;
use crate::options::Options;

/// The most inputs a derived gradient reads (`In0`..`In2`).
const MAX_INPUTS: usize = 3;

/// `module` with a derived `backward` when the options ask for
/// `autodiff`; `None` (after reporting why) when the op cannot have one,
/// or when it does not ask.
pub fn with_derived_backward(
    opts: &Options,
    module: &ItemMod,
    errors: &mut Vec<syn::Error>,
) -> Option<ItemMod> {
    let at = opts.autodiff?;
    if opts.blob.is_some() {
        err(
            errors,
            at,
            "`autodiff` derives an elementwise op's gradient from its scalar `forward`; a blob op writes its `backward`",
        );
        return None;
    }
    let fwd = find_fn(module, "forward")?;
    if let Some(b) = find_fn(module, "backward") {
        err(
            errors,
            b.sig.ident.span(),
            "`autodiff` derives `backward` from `forward`: remove this `backward` or the `autodiff` option",
        );
        return None;
    }
    let t = float_only(fwd, errors)?;
    let sig = read_forward(fwd, &t, opts, errors)?;
    let backward = derived(fwd, &t, &sig);
    let mut module = module.clone();
    let items = &mut module.content.as_mut().expect("found `forward` in it").1;
    items.push(syn::Item::Fn(backward));
    Some(module)
}

/// The forward's one type parameter, when `Float` is its only bound: the
/// forward then runs on `Dual<T, N>`, which is `Float` and nothing more.
fn float_only(f: &ItemFn, errors: &mut Vec<syn::Error>) -> Option<Ident> {
    let params: Vec<&syn::TypeParam> = f.sig.generics.type_params().collect();
    let [tp] = params[..] else {
        // The model reports a forward that is not generic over one `T`.
        return None;
    };
    let is_float = |b: &TypeParamBound| {
        matches!(b, TypeParamBound::Trait(t)
            if t.path.segments.last().is_some_and(|s| s.ident == "Float"))
    };
    // Point at what a dual number may not meet: another bound, a `where`
    // clause, another generic parameter, or a missing `Float`.
    let offending = if let Some(b) = tp.bounds.iter().find(|b| !is_float(b)) {
        Some(b.span())
    } else if let Some(w) = &f.sig.generics.where_clause {
        Some(w.where_token.span)
    } else if let Some(p) = f
        .sig
        .generics
        .params
        .iter()
        .find(|p| !matches!(p, GenericParam::Type(_)))
    {
        Some(p.span())
    } else if tp.bounds.is_empty() {
        Some(tp.ident.span())
    } else {
        None
    };
    if let Some(span) = offending {
        err(
            errors,
            span,
            format!(
                "`autodiff` runs `forward` on dual numbers, so it must be generic over `Float` alone: `fn forward<{}: Float>(..)`",
                tp.ident
            ),
        );
        return None;
    }
    Some(tp.ident.clone())
}

/// What the derived gradient passes to the forward, parameter by
/// parameter.
enum Arg {
    /// Input `k`: the dual variable `k`.
    Input(usize),
    /// The scalar: a dual constant.
    Scalar,
    /// The kwargs, of this type, passed through.
    Kwargs(Box<Type>),
}

/// The forward's parameters and its number of outputs.
struct ForwardSig {
    args: Vec<Arg>,
    inputs: usize,
    outputs: usize,
}

/// Reads the forward's parameters as the derived gradient passes them;
/// reports what a derived gradient cannot do (inputs updated in place, a
/// random stream, no inputs or more than [`MAX_INPUTS`]).
fn read_forward(
    f: &ItemFn,
    t: &Ident,
    opts: &Options,
    errors: &mut Vec<syn::Error>,
) -> Option<ForwardSig> {
    // The model reports malformed parameters, a misplaced scalar and a
    // malformed return type; only the types matter here.
    let ignored = &mut Vec::new();
    let params = args(f, ignored);
    let kind = if opts.scalar.is_some() {
        Params::Scalar
    } else {
        Params::None
    };
    let scalar_at = scalar_position(f, t, &params, &kind, ignored).flatten();
    let mut out = Vec::new();
    let mut inputs = 0;
    let before = errors.len();
    for (i, (ty, span)) in params.iter().enumerate() {
        if Some(i) == scalar_at {
            out.push(Arg::Scalar);
        } else if is_ident(ty, t) {
            out.push(Arg::Input(inputs));
            inputs += 1;
        } else if let Some((true, inner)) = reference(ty) {
            let what = if is_ident(inner, t) {
                "an input updated in place (`&mut T`): its gradient is not the forward's derivative"
            } else if named(inner, "Rng") {
                "a random stream: a random op has no derivative"
            } else {
                continue;
            };
            err(
                errors,
                *span,
                format!("`autodiff` cannot derive a gradient through {what}"),
            );
        } else {
            out.push(Arg::Kwargs(Box::new(ty.clone())));
        }
    }
    if !(1..=MAX_INPUTS).contains(&inputs) {
        err(
            errors,
            f.sig.ident.span(),
            format!(
                "`autodiff` derives gradients of ops with 1 to {MAX_INPUTS} inputs (a gradient reads `In0`..`In2`); this forward has {inputs}"
            ),
        );
    }
    (errors.len() == before).then_some(ForwardSig {
        args: out,
        inputs,
        outputs: forward_outputs(f, t, ignored),
    })
}

/// `pub fn backward<T: Float>(dy, x0.., scalar, kwargs) -> ..`: the forward
/// on `Dual<T, inputs>`, each input seeded as its own variable, and the
/// output gradients times the partials (summed over outputs).
fn derived(fwd: &ItemFn, t: &Ident, sig: &ForwardSig) -> ItemFn {
    let span = fwd.sig.ident.span();
    let n = sig.inputs;
    let xs: Vec<Ident> = (0..n)
        .map(|k| format_ident!("__x{}", k, span = span))
        .collect();
    let mut params: Vec<TokenStream> = Vec::new();
    let mut call: Vec<TokenStream> = Vec::new();
    for a in &sig.args {
        match a {
            Arg::Input(k) => {
                let (x, wrap) = (&xs[*k], format_ident!("In{}", k));
                params.push(quote!(#x: ::simpleop::#wrap<#t>));
                call.push(quote!(::simpleop::Dual::<#t, #n>::variable(*#x, #k)));
            }
            Arg::Scalar => {
                params.push(quote!(__scalar: #t));
                call.push(quote!(::simpleop::Dual::<#t, #n>::constant(__scalar)));
            }
            Arg::Kwargs(ty) => {
                params.push(quote!(__kwargs: #ty));
                call.push(quote!(__kwargs));
            }
        }
    }
    let (dy, grads) = output_gradients(t, n, sig.outputs);
    let ret = match n {
        1 => quote!(#t),
        _ => {
            let ts = (0..n).map(|_| t);
            quote!((#(#ts),*))
        }
    };
    let vis = &fwd.vis;
    let doc = "The gradient of `forward`, derived by running it on dual numbers (`autodiff`).";
    syn::parse_quote_spanned! {span=>
        #[doc = #doc]
        #vis fn backward<#t: ::simpleop::Float>(#dy, #(#params),*) -> #ret {
            let __y = forward::<::simpleop::Dual<#t, #n>>(#(#call),*);
            #grads
        }
    }
}

/// The output-gradient parameter and the expression of the input
/// gradients (a tuple for several inputs) from the forward's dual result
/// `__y`.
fn output_gradients(t: &Ident, n: usize, outputs: usize) -> (TokenStream, TokenStream) {
    let per_input = (0..n).map(|k| {
        if outputs == 1 {
            quote!(::simpleop::__private::head_times(*__dy, __y.partial(#k)))
        } else {
            let terms = (0..outputs).map(|j| {
                let j_ = syn::Index::from(j);
                quote!(::simpleop::__private::head_times((*__dys)[#j], __y.#j_.partial(#k)))
            });
            quote!(#(#terms)+*)
        }
    });
    let grads: Vec<TokenStream> = per_input.collect();
    let value = match n {
        1 => quote!(#(#grads)*),
        _ => quote!((#(#grads),*)),
    };
    let param = if outputs == 1 {
        quote!(__dy: ::simpleop::OutGrad<#t>)
    } else {
        quote!(__dys: ::simpleop::OutGrads<[#t; #outputs]>)
    };
    (param, value)
}
