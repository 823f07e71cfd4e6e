//! The `#[simple_op]` attribute of simpleop.
//!
//! Laid out as parse (`options`) → model (`model`) → expand
//! (`expand`). Every error is collected with its span, and the annotated
//! module is re-emitted even when there are errors, so IDEs keep working.

#![warn(missing_docs)]

use proc_macro::TokenStream;

mod expand;
mod model;
mod options;

/// Defines an operator from a module holding its kernels.
///
/// ```ignore
/// /// Smooth L1 loss: quadratic within 1/sigma^2 of zero, linear outside.
/// #[simple_op(inplace = "OutIn", scalar)]
/// mod smooth_l1 {
///     use simpleop::prelude::*;
///     pub fn forward<T: Float>(x: T, sigma: T) -> T { /* ... */ }
///     pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, sigma: T) -> T { /* ... */ }
/// }
/// ```
///
/// Options: `name = "..."`, `inplace = "InOut, OutIn"`, `scalar`,
/// `kwargs = Params`, `resources(rng, temp)`, `pattern = "injective"`,
/// `broadcast`, `blob`, `inputs = N` (blob form), `vector = path` (a
/// `simpleop::kernel::VectorForm` such as `simpleop::kernel::forms::EXP` for a one-input elementwise kernel),
/// `lanes = path` (a `simpleop::kernel::LaneOp` that computes what the
/// kernel computes, bit for bit, so fused programs can compile it),
/// `impure` (the kernel reads state besides its arguments, or may panic on
/// some input values: the executor then never tabulates it), `autodiff`
/// (an elementwise op's `backward` derived from `forward` by dual numbers,
/// instead of one written by hand), `linear` (the op is linear in all its
/// arguments and `backward`, reading only the output gradients, is the
/// adjoint: the forward is then the gradient's gradient). See the
/// `simpleop` crate documentation for the full contract.
#[proc_macro_attribute]
pub fn simple_op(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item2: proc_macro2::TokenStream = item.clone().into();
    let mut errors = Vec::new();
    let opts = options::parse(attr.into(), &mut errors);
    let module = match syn::parse2::<syn::ItemMod>(item2.clone()) {
        Ok(m) => m,
        Err(_) => {
            let e = syn::Error::new_spanned(
                &item2,
                "#[simple_op] goes on a module holding `forward` (and optionally `backward`, `shape`, `dtype`)",
            );
            let err = e.to_compile_error();
            return quote::quote!(#item2 #err).into();
        }
    };
    // With `autodiff`, the model reads (and the expansion re-emits) the
    // module with its derived `backward`; errors re-emit what was written.
    let derived = model::with_derived_backward(&opts, &module, &mut errors);
    let read = derived.as_ref().unwrap_or(&module);
    let model = model::build(opts, read, &mut errors);
    if !errors.is_empty() || model.is_none() {
        let errs = errors.iter().map(syn::Error::to_compile_error);
        return quote::quote!(#module #(#errs)*).into();
    }
    expand::expand(read, &model.expect("checked above")).into()
}
