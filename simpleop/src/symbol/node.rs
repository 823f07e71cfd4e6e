//! The graph's nodes: an op applied to entries (outputs of other nodes), or
//! a variable. Shared by the symbols that reach them.

use std::sync::Arc;

use crate::{Attrs, EnvArguments, OpDef};

/// One node of a graph: an op applied to entries, or a variable.
pub(crate) struct Node {
    /// `None` for a variable.
    pub(crate) op: Option<&'static OpDef>,
    pub(crate) name: String,
    /// The attributes as strings, exactly as written to JSON.
    pub(crate) attrs: Attrs,
    /// The parsed attributes (scalar, kwargs).
    pub(crate) env: EnvArguments,
    pub(crate) inputs: Vec<Entry>,
}

impl Drop for Node {
    /// Frees the inputs this node owns alone with an explicit stack: the
    /// default drop recurses once per node of a chain, and a deep graph
    /// overflows the stack.
    fn drop(&mut self) {
        let mut stack = std::mem::take(&mut self.inputs);
        while let Some(e) = stack.pop() {
            // `into_inner` succeeds for exactly one of several racing
            // owners, so a node shared across threads is freed once.
            if let Some(mut node) = Arc::into_inner(e.node) {
                stack.append(&mut node.inputs);
                // `node` drops here with no inputs: no recursion.
            }
        }
    }
}

/// Output `index` of a node (MXNet's JSON writes `[node, index, 0]`).
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) node: Arc<Node>,
    pub(crate) index: usize,
}

impl Entry {
    /// Output 0 of `node`.
    pub(crate) fn first(node: Arc<Node>) -> Entry {
        Entry { node, index: 0 }
    }
}

impl Node {
    /// How many outputs the node has (1 for a variable).
    pub(crate) fn num_outputs(&self) -> usize {
        self.op.map_or(1, |op| op.num_outputs(&self.env))
    }
}
