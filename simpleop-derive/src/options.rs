//! Parsing the attribute's options, collecting every error with its span.

use proc_macro2::{Span, TokenStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Lit, LitStr, Meta, Path, Token};

/// An option value with the span it was written at.
#[derive(Clone)]
pub struct At<T> {
    pub value: T,
    pub span: Span,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum InplaceName {
    InOut,
    LhsOut,
    OutIn,
    OutLhs,
}

impl InplaceName {
    pub fn is_forward(self) -> bool {
        matches!(self, InplaceName::InOut | InplaceName::LhsOut)
    }
}

/// A count given as a number or as a function of the kwargs.
#[derive(Clone)]
pub enum Count {
    Fixed(usize),
    Path(Path),
}

#[derive(Default)]
pub struct Options {
    pub name: Option<At<String>>,
    pub aliases: Vec<At<String>>,
    pub inplace: Vec<At<InplaceName>>,
    pub scalar: Option<Span>,
    pub kwargs: Option<At<Path>>,
    pub rng: Option<Span>,
    pub temp: Option<Span>,
    pub pattern: Option<At<String>>,
    pub broadcast: Option<Span>,
    pub blob: Option<Span>,
    pub inputs: Option<At<usize>>,
    /// The input names `inputs = ["data", "weight"]` gives (MXNet's
    /// `ListArguments`); `None` for `inputs = N`.
    pub input_names: Option<Vec<String>>,
    pub vector: Option<At<Path>>,
    pub lanes: Option<At<Path>>,
    pub impure: Option<Span>,
    /// `outputs = 3` or `outputs = path` (a function of the kwargs).
    pub outputs: Option<At<Count>>,
    /// `visible_outputs = 1` or a path.
    pub visible_outputs: Option<At<Count>>,
    /// `output_names = ["output", "mean", "var"]`.
    pub output_names: Option<At<Vec<String>>>,
    /// `arguments = path`: the argument names as a function of the kwargs.
    pub arguments: Option<At<Path>>,
    /// `aux = ["moving_mean", "moving_var"]`.
    pub aux: Option<At<Vec<String>>>,
    /// `simple_form = path`: the elementwise op that runs calls with some kwargs.
    pub simple_form: Option<At<Path>>,
    /// `inference_form = path`: the ops that run the op in inference.
    pub inference_form: Option<At<Path>>,
    /// `autodiff`: the gradient comes from the forward on dual numbers.
    pub autodiff: Option<Span>,
    /// `linear`: the op is linear in its arguments and its gradient is
    /// the adjoint, so the forward is its gradient's gradient.
    pub linear: Option<Span>,
}

const KNOWN: &str = "name, alias, inplace, scalar, kwargs, resources, pattern, broadcast, blob, inputs, vector, lanes, impure, outputs, visible_outputs, output_names, arguments, aux, simple_form, inference_form, autodiff, linear";

pub const PATTERNS: [&str; 6] = [
    "elementwise",
    "broadcast",
    "injective",
    "reduction",
    "out_elemwise_fusable",
    "opaque",
];

pub fn parse(attr: TokenStream, errors: &mut Vec<syn::Error>) -> Options {
    let mut opts = Options::default();
    let metas =
        match syn::parse::Parser::parse2(Punctuated::<Meta, Token![,]>::parse_terminated, attr) {
            Ok(m) => m,
            Err(e) => {
                errors.push(e);
                return opts;
            }
        };
    let mut seen: Vec<String> = Vec::new();
    for meta in metas {
        let key = quote::ToTokens::to_token_stream(meta.path())
            .to_string()
            .replace(' ', "");
        let span = meta.path().span();
        if seen.contains(&key) {
            errors.push(syn::Error::new(span, format!("duplicate option `{key}`")));
            continue;
        }
        seen.push(key.clone());
        if !apply(&key, &meta, &mut opts, errors) {
            errors.push(syn::Error::new(
                span,
                format!("unknown option `{key}`; expected one of: {KNOWN}"),
            ));
        }
    }
    opts
}

/// Reads option `key` into `opts`; `false` when there is no such option.
/// Each key comes here at most once, so a field is still unset.
fn apply(key: &str, meta: &Meta, opts: &mut Options, errors: &mut Vec<syn::Error>) -> bool {
    match key {
        "alias" => opts.aliases = aliases(meta, errors),
        "name" => opts.name = lit_str(meta, errors).map(|s| at_str(&s)),
        "inplace" => {
            if let Some(s) = lit_str(meta, errors) {
                parse_inplace(&s, opts, errors);
            }
        }
        "scalar" => opts.scalar = flag(meta, errors),
        "broadcast" => opts.broadcast = flag(meta, errors),
        "blob" => opts.blob = flag(meta, errors),
        "impure" => opts.impure = flag(meta, errors),
        "autodiff" => opts.autodiff = flag(meta, errors),
        "linear" => opts.linear = flag(meta, errors),
        "kwargs" => opts.kwargs = path_value(meta, "a type path: `kwargs = MyParams`", errors),
        "vector" => {
            opts.vector = path_value(
                meta,
                "the path of a `VectorForm` constant: `vector = simpleop::kernel::forms::EXP`",
                errors,
            );
        }
        "lanes" => {
            opts.lanes = path_value(
                meta,
                "the path of a `LaneOp`: `lanes = simpleop::kernel::LaneOp::Tanh`",
                errors,
            );
        }
        "resources" => parse_resources(meta, opts, errors),
        "pattern" => opts.pattern = pattern(meta, errors),
        "inputs" => (opts.inputs, opts.input_names) = inputs(meta, errors),
        "outputs" => opts.outputs = count(meta, errors),
        "visible_outputs" => opts.visible_outputs = count(meta, errors),
        "output_names" => opts.output_names = name_list(meta, errors),
        "aux" => opts.aux = name_list(meta, errors),
        "arguments" => {
            opts.arguments = path_value(
                meta,
                "the path of a function of the kwargs giving the argument names: `arguments = my_arguments`",
                errors,
            );
        }
        "simple_form" => {
            opts.simple_form = path_value(
                meta,
                "the path of a function of the kwargs naming the elementwise op that runs such calls: `simple_form = my_simple_form`",
                errors,
            );
        }
        "inference_form" => {
            opts.inference_form = path_value(
                meta,
                "the path of a function of the kwargs, input shapes and dtype giving the ops that run the op in inference: `inference_form = my_inference_form`",
                errors,
            );
        }
        _ => return false,
    }
    true
}

fn at_str(s: &LitStr) -> At<String> {
    At {
        value: s.value(),
        span: s.span(),
    }
}

/// `alias = "a, b"`: each name carries the span of the whole string.
fn aliases(meta: &Meta, errors: &mut Vec<syn::Error>) -> Vec<At<String>> {
    let Some(s) = lit_str(meta, errors) else {
        return Vec::new();
    };
    s.value()
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| At {
            value: a.to_string(),
            span: s.span(),
        })
        .collect()
}

/// `resources(rng, temp)`.
fn parse_resources(meta: &Meta, opts: &mut Options, errors: &mut Vec<syn::Error>) {
    let Meta::List(list) = meta else {
        errors.push(syn::Error::new(
            meta.path().span(),
            "`resources` takes a list: `resources(rng, temp)`",
        ));
        return;
    };
    let ids = match list.parse_args_with(Punctuated::<syn::Ident, Token![,]>::parse_terminated) {
        Ok(ids) => ids,
        Err(e) => return errors.push(e),
    };
    for id in ids {
        match id.to_string().as_str() {
            "rng" if opts.rng.is_none() => opts.rng = Some(id.span()),
            "temp" if opts.temp.is_none() => opts.temp = Some(id.span()),
            "rng" | "temp" => errors.push(syn::Error::new(
                id.span(),
                format!("duplicate resource `{id}`"),
            )),
            _ => errors.push(syn::Error::new(
                id.span(),
                format!("unknown resource `{id}`; expected `rng` or `temp`"),
            )),
        }
    }
}

/// `pattern = "..."`, one of [`PATTERNS`].
fn pattern(meta: &Meta, errors: &mut Vec<syn::Error>) -> Option<At<String>> {
    let s = lit_str(meta, errors)?;
    if PATTERNS.contains(&s.value().as_str()) {
        return Some(at_str(&s));
    }
    errors.push(syn::Error::new(
        s.span(),
        format!(
            "unknown pattern `{}`; expected one of: {}",
            s.value(),
            PATTERNS.join(", ")
        ),
    ));
    None
}

/// `inputs = N` (the blob form's input count), or `inputs = ["data",
/// "weight"]`: the count and the names.
fn inputs(meta: &Meta, errors: &mut Vec<syn::Error>) -> (Option<At<usize>>, Option<Vec<String>>) {
    enum Given<'a> {
        Count(&'a syn::LitInt),
        Names(&'a syn::ExprArray),
    }
    fn pick(value: &Expr) -> Option<Given<'_>> {
        match value {
            Expr::Lit(ExprLit {
                lit: Lit::Int(i), ..
            }) => Some(Given::Count(i)),
            Expr::Array(a) => Some(Given::Names(a)),
            _ => None,
        }
    }
    let message =
        "`inputs` takes an integer or a list of names: `inputs = 2`, `inputs = [\"data\", \"weight\"]`"
            .to_string();
    match option_value(meta, meta.path(), message, pick, errors) {
        None => (None, None),
        Some(Given::Count(i)) => match i.base10_parse::<usize>() {
            Ok(n) => (
                Some(At {
                    value: n,
                    span: i.span(),
                }),
                None,
            ),
            Err(e) => {
                errors.push(e);
                (None, None)
            }
        },
        Some(Given::Names(a)) => input_names(a, errors),
    }
}

/// `key = N` (at least 1) or `key = path` (a `fn(&Params) -> usize`).
fn count(meta: &Meta, errors: &mut Vec<syn::Error>) -> Option<At<Count>> {
    let key = quote::ToTokens::to_token_stream(meta.path()).to_string();
    let pick = |value: &Expr| match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => Some((Some(i.clone()), None, value.span())),
        Expr::Path(p) => Some((None, Some(p.path.clone()), value.span())),
        _ => None,
    };
    let message = format!(
        "`{key}` takes a count or the path of a function of the kwargs: `{key} = 2`, `{key} = my_count`"
    );
    let (lit, path, span) = option_value(meta, meta.path(), message, pick, errors)?;
    if let Some(path) = path {
        return Some(At {
            value: Count::Path(path),
            span,
        });
    }
    match lit.map(|l| l.base10_parse::<usize>()) {
        Some(Ok(n)) if n >= 1 => Some(At {
            value: Count::Fixed(n),
            span,
        }),
        Some(Ok(_)) => {
            errors.push(syn::Error::new(span, format!("`{key}` must be at least 1")));
            None
        }
        Some(Err(e)) => {
            errors.push(e);
            None
        }
        None => None,
    }
}

/// `key = ["a", "b"]`: distinct names, each a Rust identifier.
fn name_list(meta: &Meta, errors: &mut Vec<syn::Error>) -> Option<At<Vec<String>>> {
    let key = quote::ToTokens::to_token_stream(meta.path()).to_string();
    let pick = |value: &Expr| match value {
        Expr::Array(a) => Some(a.clone()),
        _ => None,
    };
    let message = format!("`{key}` takes a list of names: `{key} = [\"a\", \"b\"]`");
    let a = option_value(meta, meta.path(), message, pick, errors)?;
    let (_, names) = input_names(&a, errors);
    Some(At {
        value: names.unwrap_or_default(),
        span: a.span(),
    })
}

/// The names of `inputs = ["data", "weight"]`: string literals, distinct.
fn input_names(
    a: &syn::ExprArray,
    errors: &mut Vec<syn::Error>,
) -> (Option<At<usize>>, Option<Vec<String>>) {
    let mut names: Vec<String> = Vec::new();
    for e in &a.elems {
        match e {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) if syn::parse_str::<syn::Ident>(&s.value()).is_ok()
                && !names.contains(&s.value()) =>
            {
                names.push(s.value())
            }
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => errors.push(syn::Error::new(
                s.span(),
                "input names must be distinct, and each a Rust identifier (the typed function's parameters)",
            )),
            other => errors.push(syn::Error::new(
                other.span(),
                "an input name is a string literal: `inputs = [\"data\", \"weight\"]`",
            )),
        }
    }
    let count = At {
        value: names.len(),
        span: a.span(),
    };
    (Some(count), Some(names))
}

/// The value of a `key = value` option when `pick` accepts it; otherwise
/// `message` is reported at the value, or at `bare` when there is none.
fn option_value<'a, T>(
    meta: &'a Meta,
    bare: &dyn quote::ToTokens,
    message: String,
    pick: impl FnOnce(&'a Expr) -> Option<T>,
    errors: &mut Vec<syn::Error>,
) -> Option<T> {
    let (at, picked): (&dyn quote::ToTokens, _) = match meta {
        Meta::NameValue(nv) => (&nv.value, pick(&nv.value)),
        _ => (bare, None),
    };
    if picked.is_none() {
        errors.push(syn::Error::new_spanned(at, message));
    }
    picked
}

/// The path of a `key = path` option; otherwise an error saying the option
/// takes `what`.
fn path_value(meta: &Meta, what: &str, errors: &mut Vec<syn::Error>) -> Option<At<Path>> {
    let key = quote::ToTokens::to_token_stream(meta.path()).to_string();
    let pick = |value: &Expr| match value {
        Expr::Path(p) => Some(At {
            value: p.path.clone(),
            span: value.span(),
        }),
        _ => None,
    };
    option_value(
        meta,
        meta.path(),
        format!("`{key}` takes {what}"),
        pick,
        errors,
    )
}

fn lit_str(meta: &Meta, errors: &mut Vec<syn::Error>) -> Option<LitStr> {
    let key = quote::ToTokens::to_token_stream(meta.path()).to_string();
    let pick = |value: &Expr| match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s.clone()),
        _ => None,
    };
    let message = format!("`{key}` takes a string: `{key} = \"...\"`");
    option_value(meta, meta, message, pick, errors)
}

/// The span of a flag option (a bare name); an error if it has a value.
fn flag(meta: &Meta, errors: &mut Vec<syn::Error>) -> Option<Span> {
    match meta {
        Meta::Path(p) => Some(p.span()),
        _ => {
            let key = quote::ToTokens::to_token_stream(meta.path()).to_string();
            errors.push(syn::Error::new_spanned(
                meta,
                format!("`{key}` is a flag and takes no value"),
            ));
            None
        }
    }
}

fn parse_inplace(s: &LitStr, opts: &mut Options, errors: &mut Vec<syn::Error>) {
    for part in s
        .value()
        .split([',', '+', '|'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let name = match part {
            "InOut" => InplaceName::InOut,
            "LhsOut" => InplaceName::LhsOut,
            "OutIn" => InplaceName::OutIn,
            "OutLhs" => InplaceName::OutLhs,
            _ => {
                errors.push(syn::Error::new(
                    s.span(),
                    format!("unknown inplace option `{part}`; expected `InOut` or `LhsOut` (forward) and/or `OutIn` or `OutLhs` (gradient)"),
                ));
                continue;
            }
        };
        if opts
            .inplace
            .iter()
            .any(|o| o.value.is_forward() == name.is_forward())
        {
            errors.push(syn::Error::new(
                s.span(),
                format!(
                    "more than one {} inplace option",
                    if name.is_forward() {
                        "forward"
                    } else {
                        "gradient"
                    }
                ),
            ));
            continue;
        }
        opts.inplace.push(At {
            value: name,
            span: s.span(),
        });
    }
}
