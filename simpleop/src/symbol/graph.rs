//! The indexed form of a symbol: nodes in topological order, referring to
//! each other by index. Inference, planning, JSON and DOT work on this.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::node::{Entry, Node};
use crate::{Attrs, EnvArguments, Error, OpDef, Result};

/// One node, inputs by index. Every node has exactly one output.
#[derive(Clone)]
pub(crate) struct GNode {
    pub(crate) op: Option<&'static OpDef>,
    pub(crate) name: String,
    pub(crate) attrs: Attrs,
    pub(crate) env: EnvArguments,
    /// Producing node of each input.
    pub(crate) inputs: Vec<usize>,
}

impl GNode {
    pub(crate) fn is_variable(&self) -> bool {
        self.op.is_none()
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
    /// The variable nodes in order of first use.
    pub(crate) args: Vec<usize>,
}

impl Graph {
    /// Depth-first post-order from the heads, inputs in order: the order
    /// MXNet uses for nodes and arguments.
    pub(crate) fn from_heads(heads: &[Entry]) -> Graph {
        // Fx: pointers hash well, and SipHash dominated a large graph's walk.
        let mut index: FxHashMap<*const Node, usize> = FxHashMap::default();
        let mut nodes: Vec<GNode> = Vec::new();
        let mut args = Vec::new();
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
                    args.push(id);
                }
                nodes.push(GNode {
                    op: node.op,
                    name: node.name.clone(),
                    attrs: node.attrs.clone(),
                    env: node.env.clone(),
                    inputs: node
                        .inputs
                        .iter()
                        .map(|e| index[&Arc::as_ptr(&e.node)])
                        .collect(),
                });
            }
        }
        let heads = heads.iter().map(|h| index[&Arc::as_ptr(&h.node)]).collect();
        Graph { nodes, heads, args }
    }

    /// Argument names are how arrays are bound, so they must be unique.
    pub(crate) fn check_unique_arguments(&self) -> Result<()> {
        let mut seen = HashMap::new();
        for &a in &self.args {
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

    /// The argument names, in [`Graph::args`] order.
    pub(crate) fn argument_names(&self) -> Vec<String> {
        self.args
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
