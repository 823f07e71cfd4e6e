//! Binding: checking the arrays a graph is bound to, inferring every
//! node's shape and dtype, finding the kernels, and running the passes
//! that turn the graph into a plan (see the module documentation of
//! [`super`]).

use std::collections::HashMap;

use super::allocate;
use super::config::GradReq;
use super::graph::Graph;
use super::group::Grouping;
use super::infer;
use super::lower;
use super::schedule;
use super::steps::{self as plan, Plan, PlanInput};
use crate::pool::Buffer;
use crate::{DType, Device, Error, KernelRegistration, NDArray, Registry, Result, Shape};

/// The passes between a bound graph and its executable plan: the
/// schedule (forward, then autodiff), lowering of the fusion groups, and
/// memory planning.
pub(super) fn compile_plan(input: &PlanInput<'_>, grouping: Option<&Grouping>) -> Result<Plan> {
    let mut plan = schedule::schedule(input)?;
    let fused_away = match grouping {
        Some(grouping) => lower::lower(&mut plan, input, grouping),
        None => Vec::new(),
    };
    allocate::allocate(&mut plan, input, &fused_away);
    Ok(plan)
}

/// Zeroed storage of `bytes` for `bind`, or [`Error::Alloc`] naming `what`.
pub(super) fn bind_buffer(what: &str, bytes: usize) -> Result<Buffer> {
    Buffer::new(bytes, true).ok_or_else(|| Error::alloc("bind", what, Some(bytes)))
}

/// A read view of a head gradient with `like`'s shape and dtype.
/// The arguments in the graph's order, after checking that every name
/// given is an argument and every argument has an array.
pub(super) fn bind_args(
    arg_names: &[String],
    mut args: HashMap<String, NDArray>,
    grads: &HashMap<String, NDArray>,
    grad_req: &HashMap<String, GradReq>,
) -> Result<Vec<NDArray>> {
    let is_arg: std::collections::HashSet<&str> = arg_names.iter().map(String::as_str).collect();
    for name in args.keys().chain(grads.keys()).chain(grad_req.keys()) {
        if !is_arg.contains(name.as_str()) {
            return Err(Error::argument(
                name,
                format!(
                    "not an argument of the graph (arguments: {})",
                    arg_names.join(", ")
                ),
            ));
        }
    }
    arg_names
        .iter()
        .map(|name| {
            args.remove(name)
                .ok_or_else(|| Error::argument(name, "unbound: no array was given for it"))
        })
        .collect()
}

/// The aux states in the graph's order, taken out of `args` (bind passes
/// them with the arguments, by name).
pub(super) fn bind_aux(
    aux_names: &[String],
    args: &mut HashMap<String, NDArray>,
) -> Result<Vec<NDArray>> {
    aux_names
        .iter()
        .map(|name| {
            args.remove(name).ok_or_else(|| {
                Error::argument(name, "unbound: no array was given for this aux state")
            })
        })
        .collect()
}

/// Every node's shape and dtype, from the bound arguments and aux states;
/// an op whose output would be too large to allocate is an error here.
pub(super) fn infer_nodes(
    graph: &Graph,
    arg_names: &[String],
    bound_args: &[NDArray],
    aux_names: &[String],
    aux: &[NDArray],
) -> Result<(Vec<Shape>, Vec<DType>)> {
    let named = || {
        arg_names
            .iter()
            .zip(bound_args)
            .chain(aux_names.iter().zip(aux))
    };
    let known_shapes: HashMap<String, Shape> = named()
        .map(|(n, a)| (n.clone(), a.shape().clone()))
        .collect();
    let known_types: HashMap<String, DType> =
        named().map(|(n, a)| (n.clone(), a.dtype())).collect();
    let shapes: Vec<Shape> = infer::node_shapes(graph, &known_shapes)?
        .into_iter()
        .map(|s| s.expect("every argument is bound, so every shape is known"))
        .collect();
    let dtypes: Vec<DType> = infer::node_types(graph, &known_types)?
        .into_iter()
        .map(|d| d.expect("every argument is bound, so every dtype is known"))
        .collect();
    for (n, node) in graph.nodes.iter().enumerate() {
        let producer = node.output_of.map_or(node, |(p, _)| &graph.nodes[p]);
        if let Some(op) = producer.op {
            crate::ndarray::check_size(op.name, &shapes[n], dtypes[n])
                .map_err(|e| producer.error(e))?;
        }
    }
    Ok((shapes, dtypes))
}

/// The gradient buffers in argument order: one per argument whose request
/// is not `null`, of the argument's shape and (float) dtype.
pub(super) fn bind_grads(
    arg_names: &[String],
    bound_args: &[NDArray],
    mut grads: HashMap<String, NDArray>,
    reqs: &[GradReq],
) -> Result<Vec<Option<NDArray>>> {
    let mut bound = Vec::with_capacity(arg_names.len());
    for (k, name) in arg_names.iter().enumerate() {
        let a = &bound_args[k];
        match (reqs[k], grads.remove(name)) {
            (GradReq::Null, _) => bound.push(None),
            (req, None) => {
                return Err(Error::argument(
                    name,
                    format!(
                        "grad_req is {}, but no gradient buffer was given",
                        req.name()
                    ),
                ));
            }
            (_, Some(g)) => {
                if !a.dtype().is_float() {
                    return Err(Error::argument(
                        name,
                        format!(
                            "has dtype {}; only float arguments have gradients",
                            a.dtype()
                        ),
                    ));
                }
                if g.shape() != a.shape() || g.dtype() != a.dtype() {
                    return Err(Error::argument(
                        name,
                        format!(
                            "gradient buffer is {} {}, expected {} {}",
                            g.shape(),
                            g.dtype(),
                            a.shape(),
                            a.dtype()
                        ),
                    ));
                }
                bound.push(Some(g));
            }
        }
    }
    Ok(bound)
}

/// Every op node's registered kernels for `device` (`None` for variables).
pub(super) fn node_kernels(
    graph: &Graph,
    device: Device,
) -> Result<Vec<Option<KernelRegistration>>> {
    let registry = Registry::global()?;
    graph
        .nodes
        .iter()
        .map(|node| match node.op {
            None => Ok(None),
            Some(op) => Ok(Some(
                *registry
                    .get(op.name)?
                    .kernels(device)
                    .map_err(|e| node.error(e))?,
            )),
        })
        .collect()
}

/// The pool both plans share (each buffer as large as either needs) and
/// the gradient sink that fits both.
pub(super) fn shared_buffers(
    inference: &Plan,
    training: Option<&Plan>,
) -> (Vec<usize>, plan::SinkLayout) {
    let mut sizes = inference.buffers.clone();
    let mut sink = inference.sink;
    if let Some(t) = training {
        if t.buffers.len() > sizes.len() {
            sizes.resize(t.buffers.len(), 0);
        }
        for (s, &b) in sizes.iter_mut().zip(&t.buffers) {
            *s = (*s).max(b);
        }
        sink = sink.max(t.sink);
    }
    (sizes, sink)
}
