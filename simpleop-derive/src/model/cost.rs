//! The work estimate of a kernel.

use syn::ItemFn;

/// Methods of `Float` that cost about ten cheap arithmetic ops each.
const EXPENSIVE: [&str; 23] = [
    "exp", "exp_m1", "ln", "ln_1p", "log2", "log10", "powf", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "tanh", "erf", "gamma", "hypot", "cbrt", "sigmoid", "sqrt", "recip",
];

/// Work per element of a kernel, in units of one cheap elementwise op: 1
/// plus 10 per call of an expensive `Float` method in its body. The
/// executor uses it to decide when splitting across threads pays.
pub(super) fn estimate_cost(f: &ItemFn) -> u32 {
    fn walk(ts: proc_macro2::TokenStream) -> u32 {
        ts.into_iter()
            .map(|t| match t {
                proc_macro2::TokenTree::Ident(i) if EXPENSIVE.contains(&i.to_string().as_str()) => {
                    10
                }
                proc_macro2::TokenTree::Group(g) => walk(g.stream()),
                _ => 0,
            })
            .sum()
    }
    1 + walk(quote::ToTokens::to_token_stream(&f.block))
}
