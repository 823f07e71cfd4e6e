//! Pass 0 of an inference plan with fusion: ops that declare an
//! [`InferenceForm`] (BatchNorm: a per-channel subtract, multiply and add) are
//! replaced by that small graph of registered ops, so that the fusion
//! groups see through them and a convolution's BatchNorm and activation
//! run on its output while it is in cache. The training plan keeps the
//! ops: their training semantics (batch statistics, moving averages)
//! differ. Arguments, aux states and heads keep their order, so one set of
//! arrays binds to both graphs.

use super::graph::{GNode, Graph};
use crate::{DType, Error, FormInput, InferenceForm, Result, Shape, eager};

/// The graph `forward(false)` runs, or `None` when no op expands: an op
/// expands when its form function gives a form for its kwargs, input
/// shapes and dtype, and none of its outputs past the first is read.
pub(crate) fn expand(g: &Graph, shapes: &[Shape], dtypes: &[DType]) -> Result<Option<Graph>> {
    // Most graphs have no such op: bind them without copying every node.
    if !g
        .nodes
        .iter()
        .any(|n| n.op.is_some_and(|op| op.inference_form.is_some()))
    {
        return Ok(None);
    }
    let consumers = g.consumers();
    let read = |o: usize| !consumers[o].is_empty() || g.heads.contains(&o);
    let mut nodes: Vec<GNode> = Vec::with_capacity(g.nodes.len());
    // New index of each old node; `None` for a dropped output node.
    let mut map: Vec<Option<usize>> = vec![None; g.nodes.len()];
    let mut expanded = vec![false; g.nodes.len()];
    for (n, node) in g.nodes.iter().enumerate() {
        if node.output_of.is_some_and(|(p, _)| expanded[p]) {
            continue; // an unread output of an expanded op
        }
        let form = node.op.and_then(|op| op.inference_form).and_then(|f| {
            let ins: Vec<Shape> = node.inputs.iter().map(|&i| shapes[i].clone()).collect();
            f(&node.env, &ins, dtypes[n])
        });
        match form {
            Some(form) if !node.more_outputs.iter().any(|&o| read(o)) => {
                let inputs: Vec<usize> = node.inputs.iter().map(|&i| mapped(&map, i)).collect();
                map[n] = Some(push_form(&mut nodes, node, &form, &inputs)?);
                expanded[n] = true;
            }
            _ => {
                let mut copy = node.clone();
                copy.inputs = node.inputs.iter().map(|&i| mapped(&map, i)).collect();
                map[n] = Some(nodes.len());
                nodes.push(copy);
            }
        }
    }
    if !expanded.contains(&true) {
        return Ok(None);
    }
    for node in &mut nodes {
        if let Some((p, k)) = node.output_of {
            node.output_of = Some((mapped(&map, p), k));
        }
        node.more_outputs = node.more_outputs.iter().map(|&o| mapped(&map, o)).collect();
    }
    let all = |list: &[usize]| list.iter().map(|&i| mapped(&map, i)).collect();
    Ok(Some(Graph {
        heads: all(&g.heads),
        args: all(&g.args),
        aux: all(&g.aux),
        nodes,
    }))
}

/// Where node `i` went. Every node a kept node reads was kept: only the
/// unread outputs of expanded ops are dropped.
fn mapped(map: &[Option<usize>], i: usize) -> usize {
    map[i].expect("a read node is kept")
}

/// Appends `form`'s nodes in place of `node` (whose inputs are now
/// `inputs`) and returns the index of the last, which stands for the op's
/// output 0 and keeps its name.
fn push_form(
    nodes: &mut Vec<GNode>,
    node: &GNode,
    form: &InferenceForm,
    inputs: &[usize],
) -> Result<usize> {
    let op_name = node.op_name();
    let bad = |why: String| node.error(Error::graph(format!("inference form of {op_name}: {why}")));
    let start = nodes.len();
    for (j, f) in form.nodes.iter().enumerate() {
        let op = eager::lookup(f.op).map_err(|e| node.error(e))?.def;
        let env = (op.parse)(op, &f.attrs).map_err(|e| node.error(e))?;
        if op.num_outputs(&env) != 1 || !op.aux_states.is_empty() {
            return Err(bad(format!("`{}` has several outputs or aux states", f.op)));
        }
        let from = |x: &FormInput| match *x {
            FormInput::Input(k) => inputs.get(k).copied(),
            FormInput::Node(m) => (m < j).then_some(start + m),
        };
        let ins = f.inputs.iter().map(from).collect::<Option<Vec<usize>>>();
        let ins = ins.ok_or_else(|| bad(format!("node {j} reads an input it cannot")))?;
        let last = j + 1 == form.nodes.len();
        nodes.push(GNode {
            op: Some(op),
            name: if last {
                node.name.clone()
            } else {
                format!("{}/inference{j}", node.name)
            },
            attrs: f.attrs.clone(),
            env,
            inputs: ins,
            output_of: None,
            more_outputs: Vec::new(),
        });
    }
    if nodes.len() == start {
        return Err(bad("no nodes".to_owned()));
    }
    Ok(nodes.len() - 1)
}
