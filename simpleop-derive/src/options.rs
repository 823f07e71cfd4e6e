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
    pub vector: Option<At<Path>>,
    pub lanes: Option<At<Path>>,
    pub impure: Option<Span>,
}

const KNOWN: &str = "name, alias, inplace, scalar, kwargs, resources, pattern, broadcast, blob, inputs, vector, lanes, impure";

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
        match key.as_str() {
            "alias" => {
                if let Some(s) = lit_str(&meta, errors) {
                    for a in s
                        .value()
                        .split(',')
                        .map(str::trim)
                        .filter(|a| !a.is_empty())
                    {
                        opts.aliases.push(At {
                            value: a.to_string(),
                            span: s.span(),
                        });
                    }
                }
            }
            "name" => {
                if let Some(s) = lit_str(&meta, errors) {
                    opts.name = Some(At {
                        value: s.value(),
                        span: s.span(),
                    });
                }
            }
            "inplace" => {
                if let Some(s) = lit_str(&meta, errors) {
                    parse_inplace(&s, &mut opts, errors);
                }
            }
            "scalar" => {
                if flag(&meta, errors) {
                    opts.scalar = Some(span);
                }
            }
            "broadcast" => {
                if flag(&meta, errors) {
                    opts.broadcast = Some(span);
                }
            }
            "blob" => {
                if flag(&meta, errors) {
                    opts.blob = Some(span);
                }
            }
            "impure" => {
                if flag(&meta, errors) {
                    opts.impure = Some(span);
                }
            }
            "kwargs" => {
                opts.kwargs = path_value(&meta, "a type path: `kwargs = MyParams`", errors);
            }
            "vector" => {
                opts.vector = path_value(
                    &meta,
                    "the path of a `VectorForm` constant: `vector = simpleop::kernel::forms::EXP`",
                    errors,
                );
            }
            "lanes" => {
                opts.lanes = path_value(
                    &meta,
                    "the path of a `LaneOp`: `lanes = simpleop::kernel::LaneOp::Tanh`",
                    errors,
                );
            }
            "resources" => match &meta {
                Meta::List(list) => {
                    match list
                        .parse_args_with(Punctuated::<syn::Ident, Token![,]>::parse_terminated)
                    {
                        Ok(ids) => {
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
                                        format!(
                                            "unknown resource `{id}`; expected `rng` or `temp`"
                                        ),
                                    )),
                                }
                            }
                        }
                        Err(e) => errors.push(e),
                    }
                }
                _ => errors.push(syn::Error::new(
                    span,
                    "`resources` takes a list: `resources(rng, temp)`",
                )),
            },
            "pattern" => {
                if let Some(s) = lit_str(&meta, errors) {
                    if PATTERNS.contains(&s.value().as_str()) {
                        opts.pattern = Some(At {
                            value: s.value(),
                            span: s.span(),
                        });
                    } else {
                        errors.push(syn::Error::new(
                            s.span(),
                            format!(
                                "unknown pattern `{}`; expected one of: {}",
                                s.value(),
                                PATTERNS.join(", ")
                            ),
                        ));
                    }
                }
            }
            "inputs" => match &meta {
                Meta::NameValue(nv) => match &nv.value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Int(i), ..
                    }) => match i.base10_parse::<usize>() {
                        Ok(n) => {
                            opts.inputs = Some(At {
                                value: n,
                                span: i.span(),
                            })
                        }
                        Err(e) => errors.push(e),
                    },
                    other => errors.push(syn::Error::new_spanned(
                        other,
                        "`inputs` takes an integer: `inputs = 2`",
                    )),
                },
                _ => errors.push(syn::Error::new(
                    span,
                    "`inputs` takes an integer: `inputs = 2`",
                )),
            },
            _ => errors.push(syn::Error::new(
                span,
                format!("unknown option `{key}`; expected one of: {KNOWN}"),
            )),
        }
    }
    opts
}

/// The path of a `key = path` option; otherwise an error saying the option
/// takes `what`.
fn path_value(meta: &Meta, what: &str, errors: &mut Vec<syn::Error>) -> Option<At<Path>> {
    let key = quote::ToTokens::to_token_stream(meta.path()).to_string();
    match meta {
        Meta::NameValue(nv) => match &nv.value {
            Expr::Path(p) => Some(At {
                value: p.path.clone(),
                span: nv.value.span(),
            }),
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    format!("`{key}` takes {what}"),
                ));
                None
            }
        },
        _ => {
            errors.push(syn::Error::new(
                meta.path().span(),
                format!("`{key}` takes {what}"),
            ));
            None
        }
    }
}

fn lit_str(meta: &Meta, errors: &mut Vec<syn::Error>) -> Option<LitStr> {
    let key = quote::ToTokens::to_token_stream(meta.path()).to_string();
    match meta {
        Meta::NameValue(nv) => match &nv.value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => Some(s.clone()),
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    format!("`{key}` takes a string: `{key} = \"...\"`"),
                ));
                None
            }
        },
        _ => {
            errors.push(syn::Error::new_spanned(
                meta,
                format!("`{key}` takes a string: `{key} = \"...\"`"),
            ));
            None
        }
    }
}

fn flag(meta: &Meta, errors: &mut Vec<syn::Error>) -> bool {
    match meta {
        Meta::Path(_) => true,
        _ => {
            let key = quote::ToTokens::to_token_stream(meta.path()).to_string();
            errors.push(syn::Error::new_spanned(
                meta,
                format!("`{key}` is a flag and takes no value"),
            ));
            false
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
