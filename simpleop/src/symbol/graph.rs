//! The indexed form of a symbol: nodes in topological order, referring to
//! each other by index. Inference, planning, JSON and DOT work on this.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::node::{Entry, Node};
use crate::{Attrs, EnvArguments, Error, OpDef, Result};

/// One node, inputs by index. Every node stands for exactly one value:
/// an op with several outputs is its output 0, followed by one *output
/// node* per further output (no op, `output_of` set, its producer as the
/// only input), so that every pass indexes values by node.
#[derive(Clone)]
pub(crate) struct GNode {
    pub(crate) op: Option<&'static OpDef>,
    pub(crate) name: String,
    pub(crate) attrs: Attrs,
    pub(crate) env: EnvArguments,
    /// Producing node of each input: the arguments, then the aux states.
    pub(crate) inputs: Vec<usize>,
    /// For an output node: (producer, output index ≥ 1).
    pub(crate) output_of: Option<(usize, usize)>,
    /// For an op with several outputs: the output nodes of outputs 1...
    pub(crate) more_outputs: Vec<usize>,
}

impl GNode {
    /// A variable: an argument or an aux state.
    pub(crate) fn is_variable(&self) -> bool {
        self.op.is_none() && self.output_of.is_none()
    }
    /// An output node (output ≥ 1 of an op with several).
    pub(crate) fn is_output(&self) -> bool {
        self.output_of.is_some()
    }
    /// The node of each output, output 0 first (just `me` for one output).
    pub(crate) fn output_nodes(&self, me: usize) -> Vec<usize> {
        std::iter::once(me)
            .chain(self.more_outputs.iter().copied())
            .collect()
    }
    /// How many inputs are arguments (the rest are aux states).
    pub(crate) fn num_args(&self) -> usize {
        let aux = self.op.map_or(0, |o| o.aux_states.len());
        self.inputs.len().saturating_sub(aux)
    }
    /// The op's name, `null` for a variable (as MXNet's JSON).
    pub(crate) fn op_name(&self) -> &'static str {
        self.op.map_or("null", |o| o.name)
    }
    /// Wraps `e` with this node's name and op.
    pub(crate) fn error(&self, e: Error) -> Error {
        e.in_node(&self.name, self.op_name())
    }
}

/// A graph in topological order.
#[derive(Clone)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<GNode>,
    /// The output nodes, in order.
    pub(crate) heads: Vec<usize>,
    /// The argument variables, in order of first use.
    pub(crate) args: Vec<usize>,
    /// The aux-state variables (those feeding an op's aux-state inputs),
    /// in order of first use.
    pub(crate) aux: Vec<usize>,
}

impl Graph {
    /// Depth-first post-order from the heads, inputs in order: the order
    /// MXNet uses for nodes and arguments. Output nodes follow their op.
    pub(crate) fn from_heads(heads: &[Entry]) -> Graph {
        // Fx: pointers hash well, and SipHash dominated a large graph's walk.
        let mut index: FxHashMap<*const Node, usize> = FxHashMap::default();
        let mut nodes: Vec<GNode> = Vec::new();
        let mut variables = Vec::new();
        // Iterative DFS: (node, next input to visit).
        let mut stack: Vec<(Arc<Node>, usize)> = Vec::new();
        for h in heads {
            if index.contains_key(&Arc::as_ptr(&h.node)) {
                continue;
            }
            stack.push((h.node.clone(), 0));
            while let Some((node, next)) = stack.pop() {
                if let Some(input) = node.inputs.get(next) {
                    let child = input.node.clone();
                    stack.push((node, next + 1));
                    if !index.contains_key(&Arc::as_ptr(&child)) {
                        stack.push((child, 0));
                    }
                    continue;
                }
                let id = nodes.len();
                index.insert(Arc::as_ptr(&node), id);
                if node.op.is_none() {
                    variables.push(id);
                }
                let inputs = node
                    .inputs
                    .iter()
                    .map(|e| entry_node(&nodes, index[&Arc::as_ptr(&e.node)], e.index))
                    .collect();
                nodes.push(GNode {
                    op: node.op,
                    name: node.name.clone(),
                    attrs: node.attrs.clone(),
                    env: node.env.clone(),
                    inputs,
                    output_of: None,
                    more_outputs: Vec::new(),
                });
                push_output_nodes(&mut nodes, id, node.num_outputs());
            }
        }
        let heads = heads
            .iter()
            .map(|h| entry_node(&nodes, index[&Arc::as_ptr(&h.node)], h.index))
            .collect();
        let is_aux = aux_variables(&nodes);
        let (aux, args) = variables.into_iter().partition(|&v| is_aux[v]);
        Graph {
            nodes,
            heads,
            args,
            aux,
        }
    }

    /// Argument and aux-state names are how arrays are bound, so they must
    /// be unique, and a variable is either an argument or an aux state.
    pub(crate) fn check_unique_arguments(&self) -> Result<()> {
        let mut is_aux = vec![false; self.nodes.len()];
        self.aux.iter().for_each(|&a| is_aux[a] = true);
        for (n, node) in self.nodes.iter().enumerate() {
            let aux = &node.inputs[node.num_args()..];
            if let Some(k) = (1..aux.len()).find(|&k| aux[..k].contains(&aux[k])) {
                return Err(node.error(Error::argument(
                    &self.nodes[aux[k]].name,
                    "is given for two aux states of one op; each needs its own variable",
                )));
            }
            for (i, &src) in node.inputs.iter().enumerate() {
                if i < node.num_args() && is_aux[src] {
                    return Err(node.error(Error::argument(
                        &self.nodes[src].name,
                        format!(
                            "is an aux state of one op and an argument (input {i}) of node {n}; a variable can only be one"
                        ),
                    )));
                }
                if i >= node.num_args() && !self.nodes[src].is_variable() {
                    let op = node.op.map_or("?", |o| o.name);
                    return Err(node.error(Error::invalid(
                        op,
                        node.op.map_or("aux", |o| o.input_name(i)),
                        "an aux state must be a variable, not the output of an op",
                    )));
                }
            }
        }
        let mut seen = HashMap::new();
        for &a in self.args.iter().chain(&self.aux) {
            let name = &self.nodes[a].name;
            if seen.insert(name.as_str(), a).is_some() {
                return Err(Error::argument(
                    name,
                    "two different variables have this name; arguments are bound by name",
                ));
            }
        }
        Ok(())
    }

    /// This graph with each op that is elementwise for its node's kwargs
    /// ([`OpDef::simple_form`]) replaced by that elementwise op, which
    /// executors fuse and run in place.
    pub(crate) fn with_simple_forms(mut self) -> Result<Graph> {
        for node in &mut self.nodes {
            if let Some(op) = node.op.filter(|op| op.simple_form.is_some()) {
                let simple = crate::Registry::global()?.simple_form(op, &node.env);
                node.op = Some(simple.map_err(|e| node.error(e))?);
            }
        }
        Ok(self)
    }

    /// The argument names, in [`Graph::args`] order.
    pub(crate) fn argument_names(&self) -> Vec<String> {
        self.args
            .iter()
            .map(|&a| self.nodes[a].name.clone())
            .collect()
    }

    /// The aux-state names, in [`Graph::aux`] order.
    pub(crate) fn aux_names(&self) -> Vec<String> {
        self.aux
            .iter()
            .map(|&a| self.nodes[a].name.clone())
            .collect()
    }

    /// For each node, the nodes that read it (once per input slot).
    pub(crate) fn consumers(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.nodes.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for &i in &node.inputs {
                out[i].push(n);
            }
        }
        out
    }
}

/// The node holding output `index` of node `id` (itself for output 0).
/// An index past the op's outputs was refused when the entry was made.
fn entry_node(nodes: &[GNode], id: usize, index: usize) -> usize {
    match index {
        0 => id,
        k => nodes[id].more_outputs[k - 1],
    }
}

/// Appends the output nodes of op node `id`'s outputs 1..`count`.
fn push_output_nodes(nodes: &mut Vec<GNode>, id: usize, count: usize) {
    if count <= 1 {
        return;
    }
    let names = nodes[id]
        .op
        .map(|op| op.output_names(&nodes[id].env))
        .unwrap_or_default();
    for k in 1..count {
        let name = format!(
            "{}_{}",
            nodes[id].name,
            names.get(k).map_or("output", String::as_str)
        );
        let out = nodes.len();
        nodes.push(GNode {
            op: None,
            name,
            attrs: Attrs::new(),
            env: EnvArguments::default(),
            inputs: vec![id],
            output_of: Some((id, k)),
            more_outputs: Vec::new(),
        });
        nodes[id].more_outputs.push(out);
    }
}

/// Per node, whether it is a variable feeding some op's aux-state input.
fn aux_variables(nodes: &[GNode]) -> Vec<bool> {
    let mut aux = vec![false; nodes.len()];
    for node in nodes {
        for &src in &node.inputs[node.num_args()..] {
            if nodes[src].is_variable() {
                aux[src] = true;
            }
        }
    }
    aux
}
