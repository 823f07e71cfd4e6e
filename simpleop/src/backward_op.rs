//! `_backward`: an op's registered gradient as an op of its own.
//!
//! A gradient graph ([`crate::Symbol::gradient`]) is made of ops, so that
//! it can be differentiated again. For an op without a gradient
//! composition (see [`crate::composition`]) its gradient step is one
//! `_backward` node: kwargs `forward_op` (the op) plus that op's own
//! attributes, and inputs
//!
//! * the gradient of each of the op's outputs (hidden ones included),
//! * the op's outputs, when its gradient reads them ([`GradSpec`]),
//! * the op's arguments (all of them: they give the gradients' shapes),
//!
//! with one output per argument, its gradient. The forward runs the op's
//! backward kernel, so the values are bit for bit the executor's.
//!
//! `_backward`'s own gradient (the second derivative) exists for
//! single-output elementwise ops with 1–3 inputs (their typed gradient run
//! on dual numbers, [`crate::kernel::GradDerivativeFns`]), for ops with
//! a gradient composition ([`crate::composition`]) and for linear ops
//! ([`OpDef::linear`]; [`is_linear`]). Any other op gives
//! [`Error::NoGradient`] naming it.
//!
//! A linear op `L` needs no second kernel: `_backward/L` maps the output
//! gradients `dy` to `Lᵀ(dy)` whatever the arguments, so its gradient
//! given the gradients `g` reaching it is `L(g)` for `dy` and zero for
//! the arguments. `_backward/L` is then linear itself, and so is every
//! `_backward/…/_backward/L`: such a chain differentiates to any order.
//!
//! This file is the op's definition (arguments, shapes, attributes), which
//! graphs and the tape build on. Its kernels run eager calls and the tape,
//! so they live above both, in `autograd/backward_kernels.rs`.

use crate::registry::OpRegistration;
use crate::{
    Attrs, DType, Device, EnvArguments, Error, GradSpec, InplaceOptions, MultiOutput, OpDef,
    OpForm, ParamKind, Pattern, Registry, Resources, Result, Shape,
};

/// The op name.
pub const NAME: &str = "_backward";
/// The attribute naming the op whose gradient a `_backward` node computes.
pub const FORWARD_OP: &str = "forward_op";

/// `_backward`'s kwargs: the op and its own arguments.
pub(crate) struct BackwardOf {
    pub(crate) op: &'static OpDef,
    pub(crate) env: EnvArguments,
}

/// The arguments of a `_backward` call for `op` called with `env`.
pub fn env_for(op: &'static OpDef, env: &EnvArguments) -> EnvArguments {
    EnvArguments::kwargs(BackwardOf {
        op,
        env: env.clone(),
    })
}

/// The op whose gradient a `_backward` call with `env` computes, and the
/// arguments it was called with.
pub fn forward_op(env: &EnvArguments) -> Result<(&'static OpDef, &EnvArguments)> {
    let b = env.require_kwargs::<BackwardOf>(NAME)?;
    Ok((b.op, &b.env))
}

/// Where each group of a `_backward` call's inputs sits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// The op's outputs (hidden ones included).
    pub(crate) outputs: usize,
    /// Whether the op's outputs are inputs too.
    pub(crate) reads_outputs: bool,
    /// The op's arguments.
    pub(crate) arguments: usize,
}

impl Layout {
    pub(crate) fn of(op: &'static OpDef, env: &EnvArguments) -> Result<Layout> {
        let spec = gradient_of(op)?;
        if !op.aux_states.is_empty() || !op.mutate_inputs.is_empty() {
            return Err(Error::invalid(
                op.name,
                "gradient graph",
                "an op with auxiliary states or updated inputs has no gradient op; \
                 bind the graph and use the executor's backward",
            ));
        }
        Ok(Layout {
            outputs: op.num_outputs(env),
            reads_outputs: spec.needs_output,
            arguments: op.num_arguments(env),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.outputs * (1 + usize::from(self.reads_outputs)) + self.arguments
    }

    /// Index of the op's first argument among the inputs.
    pub(crate) fn first_argument(&self) -> usize {
        self.len() - self.arguments
    }
}

/// The op's gradient spec, or [`Error::NoGradient`].
pub(crate) fn gradient_of(op: &OpDef) -> Result<GradSpec> {
    op.gradient
        .ok_or_else(|| Error::NoGradient { op: op.name.into() })
}

/// Whether the gradient of `op` has a gradient itself (`_backward`'s
/// gradient works for it), or [`Error::NoGradient`] naming it.
pub fn check_second_order(op: &'static OpDef, env: &EnvArguments) -> Result<()> {
    let l = Layout::of(op, env)?;
    let kernels = Registry::global()?.get(op.name)?.kernels(Device::Cpu)?;
    let dual = kernels.grad_derivative.is_some() && l.outputs == 1;
    if dual || crate::composition::composition_of(op).is_some() || is_linear(op, env) {
        Ok(())
    } else {
        Err(no_second_order(op, env))
    }
}

/// Whether `op` called with `env` is linear ([`OpDef::linear`]):
/// declared so, or a `_backward` of a linear op (`dy ↦ Lᵀ(dy)`, zero in
/// the arguments), at any depth.
pub fn is_linear(op: &'static OpDef, env: &EnvArguments) -> bool {
    innermost(op, env).0.linear
}

pub(crate) fn layout(env: &EnvArguments) -> Result<(Layout, &'static OpDef, &EnvArguments)> {
    let (op, inner) = forward_op(env)?;
    Ok((Layout::of(op, inner)?, op, inner))
}

/// The definition of `_backward`.
pub static OP: OpDef = OpDef {
    name: NAME,
    aliases: &[],
    description: "The gradient of op `forward_op` (its registered backward kernel) as an op: \
                  inputs are the gradients of its outputs, its outputs when its gradient reads \
                  them, and its arguments; one output per argument.",
    location: concat!(file!(), ":", line!()),
    inputs: &[],
    params: ParamKind::Kwargs {
        type_name: "BackwardOf",
        fields: || &[FORWARD_OP],
    },
    form: OpForm::Blob,
    pattern: Pattern::Opaque,
    cost: 1,
    inplace: InplaceOptions {
        forward: None,
        gradient: None,
    },
    mutate_inputs: &[],
    gradient: Some(GradSpec {
        needs_output: false,
        needs_inputs: u32::MAX,
    }),
    // Linear exactly when its op is: `is_linear` asks through `forward_op`.
    linear: false,
    resources: Resources {
        rng: false,
        temp: false,
    },
    parse,
    to_attrs,
    infer_shape: |op, shapes, env| first(op, infer_shapes(op, shapes, env)?),
    infer_dtype: |op, dtypes, env| first(op, infer_dtypes(op, dtypes, env)?),
    arguments: Some(argument_names),
    aux_states: &[],
    outputs: Some(&MultiOutput {
        count: output_count,
        visible: output_count,
        names: output_names,
        infer_shapes,
        infer_dtypes,
    }),
    complete_shapes: None,
    simple_form: None,
    inference_form: None,
};

inventory::submit! { OpRegistration(&OP) }
/// The error for an op whose gradient has no gradient, naming it by its
/// path (`_backward/tanh` for a gradient of `tanh`'s gradient).
pub(crate) fn no_second_order(op: &'static OpDef, env: &EnvArguments) -> Error {
    let path = path_of(op, env);
    Error::NoGradient {
        op: format!(
            "{NAME}[{path}] (the gradient of `{path}` has no gradient: only single-output \
             elementwise ops with a typed gradient, ops with a gradient composition and \
             linear ops differentiate twice)"
        ),
    }
}

/// `op`'s name, behind a `_backward/` per level of nesting.
fn path_of(op: &'static OpDef, env: &EnvArguments) -> String {
    let (inner, depth) = innermost(op, env);
    format!("{}{}", format!("{NAME}/").repeat(depth), inner.name)
}

/// The op under `depth` nested `_backward`s: `op` itself when it is not
/// `_backward` (or names no op).
fn innermost(mut op: &'static OpDef, mut env: &EnvArguments) -> (&'static OpDef, usize) {
    let mut depth = 0;
    while std::ptr::eq(op, &OP) {
        let Ok((inner, inner_env)) = forward_op(env) else {
            break;
        };
        (op, env, depth) = (inner, inner_env, depth + 1);
    }
    (op, depth)
}

fn first<T>(op: &OpDef, mut v: Vec<T>) -> Result<T> {
    if v.is_empty() {
        return Err(Error::invalid(op.name, "outputs", "at least one"));
    }
    Ok(v.swap_remove(0))
}

/// Nested `_backward`s (a gradient's gradient) a `forward_op` may name.
const MAX_NESTING: usize = 4;

/// `forward_op` names the op, or for a `_backward` of a `_backward` the
/// path `_backward/…/op`, so that a saved gradient graph of any order
/// loads again.
fn parse(_: &OpDef, attrs: &Attrs) -> Result<EnvArguments> {
    let mut rest = attrs.clone();
    let path = rest.remove(FORWARD_OP).ok_or_else(|| {
        Error::invalid(
            NAME,
            FORWARD_OP,
            "the name of the op whose gradient this is",
        )
    })?;
    if path.matches('/').count() > MAX_NESTING {
        return Err(Error::invalid(
            NAME,
            FORWARD_OP,
            format!("at most {MAX_NESTING} nested `{NAME}/` steps, got `{path}`"),
        ));
    }
    let name = match path.split_once('/') {
        Some((outer, inner)) => {
            rest.insert(FORWARD_OP, inner);
            outer
        }
        None => path.as_str(),
    };
    let op = Registry::global()?.get(name)?.def;
    let env = (op.parse)(op, &rest)?;
    Layout::of(op, &env)?; // refused once, with its reason, not as 0 inputs
    Ok(env_for(op, &env))
}

fn to_attrs(_: &OpDef, env: &EnvArguments) -> Result<Attrs> {
    let (op, inner) = forward_op(env)?;
    let mut attrs = (op.to_attrs)(op, inner)?;
    let path = match attrs.get(FORWARD_OP).filter(|_| op.name == NAME) {
        Some(inner_path) => format!("{NAME}/{inner_path}"),
        None => op.name.to_owned(),
    };
    attrs.insert(FORWARD_OP, path);
    Ok(attrs)
}

/// `out_grad…`, `output…` and the op's arguments; none for a call
/// without an op, which [`OpDef::check_inputs`] then refuses.
fn argument_names(env: &EnvArguments) -> Vec<String> {
    let Ok((l, op, inner)) = layout(env) else {
        return Vec::new();
    };
    let outs = op.output_names(inner);
    let mut names: Vec<String> = outs.iter().map(|o| format!("{o}_grad")).collect();
    if l.reads_outputs {
        names.extend(outs);
    }
    names.extend(op.argument_names(inner));
    names
}

fn output_count(env: &EnvArguments) -> usize {
    layout(env).map_or(0, |(l, ..)| l.arguments)
}

fn output_names(env: &EnvArguments) -> Vec<String> {
    forward_op(env).map_or_else(
        |_| Vec::new(),
        |(op, inner)| {
            op.argument_names(inner)
                .into_iter()
                .map(|a| format!("{a}_grad"))
                .collect()
        },
    )
}

/// The arguments' shapes, after checking that each output gradient has
/// its output's shape.
fn infer_shapes(_: &OpDef, shapes: &[Shape], env: &EnvArguments) -> Result<Vec<Shape>> {
    let (l, op, inner) = layout(env)?;
    check_count(shapes.len(), &l)?;
    let args = &shapes[l.first_argument()..];
    let outs = op.output_shapes(args, inner)?;
    let groups: &[&str] = if l.reads_outputs {
        &["gradient of output", "output"]
    } else {
        &["gradient of output"]
    };
    for (g, what) in groups.iter().enumerate() {
        let given = &shapes[g * l.outputs..(g + 1) * l.outputs];
        for (k, (want, got)) in outs.iter().zip(given).enumerate() {
            if want != got {
                return Err(Error::ShapeMismatch {
                    op: NAME.into(),
                    arg: format!("{what} {k} of `{}`", op.name),
                    expected: want.to_string(),
                    got: got.clone(),
                });
            }
        }
    }
    Ok(args.to_vec())
}

fn infer_dtypes(_: &OpDef, dtypes: &[DType], env: &EnvArguments) -> Result<Vec<DType>> {
    let (l, ..) = layout(env)?;
    check_count(dtypes.len(), &l)?;
    Ok(dtypes[l.first_argument()..].to_vec())
}

pub(crate) fn check_count(got: usize, l: &Layout) -> Result<()> {
    if got != l.len() {
        return Err(Error::Arity {
            op: NAME.into(),
            expected: l.len(),
            got,
        });
    }
    Ok(())
}
