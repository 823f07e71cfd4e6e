//! Code generation: the op's `OpDef`, its CPU kernels, its registration and
//! its typed eager functions.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::ItemMod;

use crate::model::{Form, OpModel, Params, Role};
use crate::options::InplaceName;

/// The kwargs type as seen from inside the op's module: paths in the
/// attribute resolve where the attribute is written, one level up.
fn inner_path(p: &syn::Path) -> TokenStream {
    let first = p
        .segments
        .first()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    if p.leading_colon.is_some() || first == "crate" {
        quote!(#p)
    } else if first == "self" {
        let rest = p.segments.iter().skip(1);
        quote!(super #(:: #rest)*)
    } else {
        quote!(super:: #p)
    }
}

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
    let name = &m.name;
    let aliases = &m.aliases;
    let states: Vec<usize> = m
        .forward
        .roles
        .iter()
        .filter_map(|r| match r {
            Role::State(k) => Some(*k),
            _ => None,
        })
        .collect();
    let doc = &m.doc;
    let arity = m.arity();
    let p_inner = match &m.params {
        Params::Kwargs(p) => Some(inner_path(p)),
        _ => None,
    };

    // The kernel value: the scalar or a borrow of the kwargs.
    let (fields, init) = match (&m.params, &p_inner) {
        (Params::Scalar, _) => (
            quote!(scalar: f64,),
            quote!(scalar: env.require_scalar(#name)?,),
        ),
        (Params::Kwargs(_), Some(p)) => (
            quote!(params: &'p #p,),
            quote!(params: env.require_kwargs::<#p>(#name)?,),
        ),
        _ => (quote!(), quote!()),
    };
    let scalar_t = quote!(<__T as ::simpleop::Element>::from_f64(self.scalar));
    let env_scalar = quote!(call.env.require_scalar(#name)?);
    let env_kwargs = p_inner
        .as_ref()
        .map(|p| quote!(call.env.require_kwargs::<#p>(#name)?));

    let mut generated = quote! {
        #[doc(hidden)]
        #[allow(dead_code)]
        #[derive(Clone, Copy)]
        pub struct __Kernel<'p> {
            #fields
            _env: ::core::marker::PhantomData<&'p ()>,
        }
        #[doc(hidden)]
        pub fn __kernel(env: &::simpleop::EnvArguments) -> ::simpleop::Result<__Kernel<'_>> {
            let _ = env;
            Ok(__Kernel { #init _env: ::core::marker::PhantomData })
        }
    };

    let (forward_body, backward_body) = match m.form {
        Form::Elementwise => {
            let binds = (0..arity).map(|k| format_ident!("__x{}", k));
            let fwd_args = m.forward.roles.iter().map(|r| match r {
                Role::Input(k) => {
                    let v = format_ident!("__x{}", k);
                    quote!(*#v)
                }
                Role::State(k) => {
                    let v = format_ident!("__x{}", k);
                    quote!(&mut *#v)
                }
                Role::Scalar => scalar_t.clone(),
                Role::Kwargs => quote!(self.params),
                Role::Rng => quote!(rng),
                _ => quote!(compile_error!("unsupported role")),
            });
            if arity == 0 {
                generated.extend(quote! {
                    impl ::simpleop::kernel::SourceFn for __Kernel<'_> {
                        #[inline(always)]
                        fn apply<__T: ::simpleop::Float>(&self, rng: &mut ::simpleop::Rng) -> __T {
                            let _ = &rng;
                            forward::<__T>(#(#fwd_args),*)
                        }
                    }
                });
            } else {
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
                generated.extend(quote! {
                    impl ::simpleop::kernel::MapFn<#arity> for __Kernel<'_> {
                        #[inline(always)]
                        fn apply<__T: ::simpleop::Float>(&self, x: &mut [__T; #arity]) -> __T {
                            let [#(#binds),*] = x;
                            forward::<__T>(#(#fwd_args),*)
                        }
                        #vector
                        #tables
                    }
                });
            }
            let fwd = if arity == 0 {
                quote!(::simpleop::__private::source_forward(
                    call,
                    &__kernel(call.env)?,
                    outputs,
                    reqs
                ))
            } else {
                quote!(::simpleop::__private::map_forward::<_, #arity>(call, &__kernel(call.env)?, inputs, outputs, reqs))
            };
            let bwd = m.backward.as_ref().map(|b| {
                let args = b.kernel.roles.iter().map(|r| match r {
                    Role::OutGrad => quote!(::simpleop::OutGrad(dy)),
                    Role::OutValue => quote!(::simpleop::OutValue(y)),
                    Role::InputValue(k) => {
                        let w = format_ident!("In{}", k);
                        quote!(::simpleop::#w(x[#k]))
                    }
                    Role::Scalar => scalar_t.clone(),
                    Role::Kwargs => quote!(self.params),
                    _ => quote!(compile_error!("unsupported role")),
                });
                let ret = if arity == 1 {
                    quote!([r])
                } else {
                    let idx = (0..arity).map(syn::Index::from);
                    quote!([#(r.#idx),*])
                };
                generated.extend(quote! {
                    impl ::simpleop::kernel::MapGrad<#arity> for __Kernel<'_> {
                        #[inline(always)]
                        fn apply<__T: ::simpleop::Float>(&self, dy: __T, y: __T, x: [__T; #arity]) -> [__T; #arity] {
                            let _ = (&y, &x);
                            let r = backward::<__T>(#(#args),*);
                            #ret
                        }
                    }
                });
                quote!(::simpleop::__private::map_backward::<_, #arity>(call, &__kernel(call.env)?, args, grads, reqs))
            });
            (fwd, bwd)
        }
        Form::Blob => {
            let fwd_args = m.forward.roles.iter().map(|r| match r {
                Role::Inputs => quote!(inputs),
                Role::Out => quote!(out),
                Role::Req => quote!(req),
                Role::Scalar => env_scalar.clone(),
                Role::Kwargs => env_kwargs.clone().unwrap_or_default(),
                Role::Env => quote!(call.env),
                _ => quote!(compile_error!("unsupported role")),
            });
            let fwd = quote! {{
                call.op.check_arity(inputs.len())?;
                let ([out], [req]) = (outputs, reqs) else {
                    return Err(::simpleop::Error::invalid(#name, "outputs", "a blob-form op has one output"));
                };
                let req = *req;
                Ok(forward(#(#fwd_args),*)?)
            }};
            let bwd = m.backward.as_ref().map(|b| {
                let args = b.kernel.roles.iter().map(|r| match r {
                    Role::OutGrad => quote!(::simpleop::OutGrad(&args.out_grad)),
                    Role::OutValue => quote!(::simpleop::OutValue(args.output.as_ref().ok_or_else(|| ::simpleop::Error::invalid(#name, "output", "the gradient reads the forward output"))?)),
                    Role::Inputs => quote!(::simpleop::Inputs(&__inputs[..])),
                    Role::Grads => quote!(grads),
                    Role::Reqs => quote!(reqs),
                    Role::Scalar => env_scalar.clone(),
                    Role::Kwargs => env_kwargs.clone().unwrap_or_default(),
                    Role::Env => quote!(call.env),
                    _ => quote!(compile_error!("unsupported role")),
                });
                quote! {{
                    call.op.check_arity(grads.len())?;
                    call.op.check_arity(reqs.len())?;
                    let __inputs: ::std::vec::Vec<::simpleop::TBlob<'_>> = args
                        .inputs
                        .iter()
                        .flatten()
                        .cloned()
                        .collect();
                    Ok(backward(#(#args),*)?)
                }}
            });
            (fwd, bwd)
        }
    };

    let aux_args = |roles: &[Role], main: TokenStream| -> Vec<TokenStream> {
        roles
            .iter()
            .map(|r| match r {
                Role::Shapes | Role::DTypes => main.clone(),
                Role::Scalar => quote!(env.require_scalar(#name)?),
                Role::Kwargs => p_inner
                    .as_ref()
                    .map(|p| quote!(env.require_kwargs::<#p>(#name)?))
                    .unwrap_or_default(),
                Role::Env => quote!(env),
                _ => quote!(compile_error!("unsupported role")),
            })
            .collect()
    };
    let infer_shape = match &m.shape {
        Some(k) => {
            let a = aux_args(&k.roles, quote!(shapes));
            generated.extend(quote! {
                #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
                fn __infer_shape(op: &::simpleop::OpDef, shapes: &[::simpleop::Shape], env: &::simpleop::EnvArguments) -> ::simpleop::Result<::simpleop::Shape> {
                    op.check_arity(shapes.len())?;
                    let _ = env;
                    Ok(shape(#(#a),*)?)
                }
            });
            quote!(__infer_shape)
        }
        None if m.pattern == "broadcast" => quote!(::simpleop::__private::broadcast_shape),
        None => quote!(::simpleop::__private::same_shape),
    };
    let rows = match &m.rows {
        Some(k) => {
            let a = aux_args(&k.roles, quote!(shapes));
            generated.extend(quote! {
                #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
                fn __rows(shapes: &[::simpleop::Shape], env: &::simpleop::EnvArguments) -> ::simpleop::Result<::core::option::Option<::simpleop::kernel::RowReduction>> {
                    let _ = (shapes, env);
                    Ok(rows(#(#a),*)?)
                }
            });
            quote!(Some(__rows))
        }
        None => quote!(None),
    };
    let infer_dtype = match &m.dtype {
        Some(k) => {
            let a = aux_args(&k.roles, quote!(dtypes));
            generated.extend(quote! {
                #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
                fn __infer_dtype(op: &::simpleop::OpDef, dtypes: &[::simpleop::DType], env: &::simpleop::EnvArguments) -> ::simpleop::Result<::simpleop::DType> {
                    op.check_arity(dtypes.len())?;
                    let _ = env;
                    Ok(dtype(#(#a),*)?)
                }
            });
            quote!(__infer_dtype)
        }
        None => quote!(::simpleop::__private::same_float_dtype),
    };

    let (params_kind, parse, to_attrs) = match (&m.params, &p_inner) {
        (Params::Kwargs(p), Some(pi)) => {
            let type_name = quote!(#p).to_string().replace(' ', "");
            (
                quote!(::simpleop::ParamKind::Kwargs { type_name: #type_name, fields: ::simpleop::__private::kwarg_fields::<#pi> }),
                quote!(::simpleop::__private::parse_kwargs_env::<#pi>),
                quote!(::simpleop::__private::kwargs_to_attrs::<#pi>),
            )
        }
        (Params::Scalar, _) => (
            quote!(::simpleop::ParamKind::Scalar),
            quote!(::simpleop::__private::parse_scalar_or_none),
            quote!(::simpleop::__private::scalar_to_attrs),
        ),
        _ => (
            quote!(::simpleop::ParamKind::None),
            quote!(::simpleop::__private::parse_scalar_or_none),
            quote!(::simpleop::__private::scalar_to_attrs),
        ),
    };
    let form = match m.form {
        Form::Elementwise => quote!(::simpleop::OpForm::Elementwise),
        Form::Blob => quote!(::simpleop::OpForm::Blob),
    };
    let pattern = match m.pattern.as_str() {
        "broadcast" => quote!(Broadcast),
        "injective" => quote!(Injective),
        "reduction" => quote!(Reduction),
        "out_elemwise_fusable" => quote!(OutElemwiseFusable),
        "opaque" => quote!(Opaque),
        _ => quote!(Elementwise),
    };
    let cost = m.cost;
    let fwd_inplace = match m.fwd_inplace {
        Some(InplaceName::InOut) => quote!(Some(::simpleop::ForwardInplace::InOut)),
        Some(InplaceName::LhsOut) => quote!(Some(::simpleop::ForwardInplace::LhsOut)),
        _ => quote!(None),
    };
    let grad_inplace = match m.grad_inplace {
        Some(InplaceName::OutIn) => quote!(Some(::simpleop::GradInplace::OutIn)),
        Some(InplaceName::OutLhs) => quote!(Some(::simpleop::GradInplace::OutLhs)),
        _ => quote!(None),
    };
    let gradient = match &m.backward {
        Some(b) => {
            let (o, i) = (b.needs_output, b.needs_inputs);
            quote!(Some(::simpleop::GradSpec { needs_output: #o, needs_inputs: #i }))
        }
        None => quote!(None),
    };
    let (rng, temp) = (m.rng, m.temp);
    let input_strs: Vec<String> = m.input_names.iter().map(|i| i.to_string()).collect();
    let backward_fn = match &backward_body {
        Some(body) => {
            generated.extend(quote! {
                #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
                fn __backward_cpu(
                    call: &::simpleop::OpCall<'_>,
                    args: &::simpleop::GradArgs<'_>,
                    grads: &mut [::simpleop::TBlobMut<'_>],
                    reqs: &[::simpleop::OpReqType],
                ) -> ::simpleop::Result<()> {
                    #body
                }
            });
            quote!(Some(__backward_cpu))
        }
        None => quote!(None),
    };
    let tile = if m.form == Form::Elementwise && arity > 0 && states.is_empty() {
        let bwd = |c: TokenStream| {
            if m.backward.is_some() {
                quote!(Some(|env: &::simpleop::EnvArguments, dy: &[#c], y: &[#c], xs: &[&[#c]], grads: &mut [&mut [#c]]| {
                    ::simpleop::__private::tile_backward::<_, #c, #arity>(&__kernel(env)?, dy, y, xs, grads)
                }))
            } else {
                quote!(None)
            }
        };
        let (b32, b64) = (bwd(quote!(f32)), bwd(quote!(f64)));
        let lane = match &m.lanes {
            Some(op) => {
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
            None => quote!(None),
        };
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
        }))
    } else {
        quote!(None)
    };
    generated.extend(quote! {
        #[allow(clippy::needless_question_mark)] // user functions may return any error convertible into simpleop::Error
                fn __forward_cpu(
            call: &::simpleop::OpCall<'_>,
            inputs: &[::simpleop::TBlob<'_>],
            outputs: &mut [::simpleop::TBlobMut<'_>],
            reqs: &[::simpleop::OpReqType],
        ) -> ::simpleop::Result<()> {
            let _ = inputs;
            #forward_body
        }

        #[doc = concat!("The definition of op `", #name, "`.")]
        pub static OP: ::simpleop::OpDef = ::simpleop::OpDef {
            name: #name,
            aliases: &[#(#aliases),*],
            mutate_inputs: &[#(#states),*],
            description: #doc,
            location: concat!(file!(), ":", line!()),
            inputs: &[#(#input_strs),*],
            params: #params_kind,
            form: #form,
            pattern: ::simpleop::Pattern::#pattern,
            cost: #cost,
            inplace: ::simpleop::InplaceOptions { forward: #fwd_inplace, gradient: #grad_inplace },
            gradient: #gradient,
            resources: ::simpleop::Resources { rng: #rng, temp: #temp },
            parse: #parse,
            to_attrs: #to_attrs,
            infer_shape: #infer_shape,
            infer_dtype: #infer_dtype,
        };

        ::simpleop::__private::inventory::submit! {
            ::simpleop::OpRegistration(&OP)
        }
        ::simpleop::__private::inventory::submit! {
            ::simpleop::KernelRegistration {
                op: #name,
                device: ::simpleop::Device::Cpu,
                forward: __forward_cpu,
                backward: #backward_fn,
                tile: #tile,
                rows: #rows,
                location: concat!(file!(), ":", line!()),
            }
        }
    });

    let typed = typed_functions(m);
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

fn typed_functions(m: &OpModel) -> TokenStream {
    let ident = &m.ident;
    let vis = &m.vis;
    let name = &m.name;
    let inputs = &m.input_names;
    let (param_decl, env) = match &m.params {
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
    let into = format_ident!("{}_into", ident);
    let inplace = format_ident!("{}_inplace", ident);
    let is_state: Vec<bool> = (0..inputs.len())
        .map(|k| m.forward.roles.contains(&Role::State(k)))
        .collect();
    let first = inputs.first().map(|i| i.to_string()).unwrap_or_default();
    let doc_call = format!("Runs op `{name}` eagerly and returns a fresh output.");
    let doc_into = format!(
        "Runs op `{name}` into `out` (which has the output's shape and dtype), honouring `req`."
    );
    let doc_inplace = format!(
        "Runs op `{name}` with `{first}` as its first input and stores the result there: in its own buffer when the op allows it and nothing shares the storage, otherwise by replacing the handle."
    );
    if is_state.iter().any(|&s| s) {
        // Ops that update some inputs in place take those as `&mut`.
        let decl = inputs.iter().zip(&is_state).map(|(i, &s)| {
            if s {
                quote!(#i: &mut ::simpleop::NDArray)
            } else {
                quote!(#i: &::simpleop::NDArray)
            }
        });
        let plain = inputs
            .iter()
            .zip(&is_state)
            .filter(|(_, s)| !**s)
            .map(|(i, _)| i);
        let states: Vec<_> = inputs
            .iter()
            .zip(&is_state)
            .filter(|(_, s)| **s)
            .map(|(i, _)| i)
            .collect();
        let rest_decl = inputs.iter().zip(&is_state).skip(1).map(|(i, &s)| {
            if s {
                quote!(#i: &mut ::simpleop::NDArray)
            } else {
                quote!(#i: &::simpleop::NDArray)
            }
        });
        let rest_plain = inputs
            .iter()
            .zip(&is_state)
            .skip(1)
            .filter(|(_, s)| !**s)
            .map(|(i, _)| i);
        let first = &inputs[0];
        let doc_call = format!(
            "Runs op `{name}` eagerly, updating its state inputs in place, and returns the output."
        );
        let doc_inplace = format!(
            "Runs op `{name}` with the result stored in `{first}` and its state inputs updated in place."
        );
        return quote! {
            #[doc = #doc_call]
            #[allow(dead_code)]
            #vis fn #ident(#(#decl,)* #param_decl) -> ::simpleop::Result<::simpleop::NDArray> {
                ::simpleop::__private::invoke_with_states(&#ident::OP, &[#(#plain),*], &mut [#(#states),*], &#env)
            }
            #[doc = #doc_inplace]
            #[allow(dead_code)]
            #vis fn #inplace(#first: &mut ::simpleop::NDArray, #(#rest_decl,)* #param_decl) -> ::simpleop::Result<()> {
                ::simpleop::__private::invoke_inplace_with_states(&#ident::OP, #first, &[#(#rest_plain),*], &mut [#(#states),*], &#env)
            }
        };
    }
    // With inputs, one function serves both front ends: an `NDArray`
    // runs now, a `Symbol` adds a graph node. A source op has nothing to
    // infer the front end from, so it stays eager.
    let call_fn = if inputs.is_empty() {
        quote! {
            #[doc = #doc_call]
            #[allow(dead_code)]
            #vis fn #ident(#param_decl) -> ::simpleop::Result<::simpleop::NDArray> {
                ::simpleop::__private::invoke_with(&#ident::OP, &[], &#env)
            }
        }
    } else {
        let doc_call = format!(
            "Applies op `{name}`: on `NDArray`s it runs now and returns a fresh output; on `Symbol`s it returns a new graph node."
        );
        quote! {
            #[doc = #doc_call]
            #[allow(dead_code)]
            #vis fn #ident<A: ::simpleop::Operand>(#(#inputs: &A,)* #param_decl) -> ::simpleop::Result<A> {
                <A as ::simpleop::Operand>::apply(&#ident::OP, &[#(#inputs),*], &#env)
            }
        }
    };
    let mut out = quote! {
        #call_fn
        #[doc = #doc_into]
        #[allow(dead_code)]
        #vis fn #into(#(#inputs: &::simpleop::NDArray,)* #param_decl out: &mut ::simpleop::NDArray, req: ::simpleop::OpReqType) -> ::simpleop::Result<()> {
            ::simpleop::__private::invoke_into(&#ident::OP, &[#(#inputs),*], &#env, out, req)
        }
    };
    if let Some((first, rest)) = inputs.split_first() {
        out.extend(quote! {
            #[doc = #doc_inplace]
            #[allow(dead_code)]
            #vis fn #inplace(#first: &mut ::simpleop::NDArray, #(#rest: &::simpleop::NDArray,)* #param_decl) -> ::simpleop::Result<()> {
                ::simpleop::__private::invoke_inplace(&#ident::OP, #first, &[#(#rest),*], &#env)
            }
        });
    }
    out
}
