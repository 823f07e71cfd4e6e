//! MXNet's symbol JSON.
//!
//! `nodes` in topological order, each `{"op", "name", "attrs", "inputs"}`
//! with variables as `"op": "null"`, inputs as `[node, output, version]`
//! and attribute values as strings; `arg_nodes`; `node_row_ptr`; `heads`.
//! Older files spell `attrs` as `attr` or `param`; all three are read.

use std::collections::BTreeMap;
use std::fmt::{self, Display};
use std::sync::Arc;

use serde::{Serialize, Serializer};
use serde_json::{Value, json};

use super::graph::Graph;
use super::node::{Entry, Node};
use crate::{Attrs, EnvArguments, Error, Registry, Result};

/// Writes the document field by field (keys in sorted order, as a
/// `serde_json::Value` would print them) without building a `Value` tree,
/// which for a large graph costs several times the text. Output nodes
/// (see [`GNode`]) are not written: entries name their op and index.
pub(crate) fn write(g: &Graph) -> String {
    let at = entry_positions(g);
    let written: Vec<usize> = (0..g.nodes.len())
        .filter(|&n| !g.nodes[n].is_output())
        .collect();
    let mut arg_nodes: Vec<usize> = g.args.iter().chain(&g.aux).map(|&a| at[a].0).collect();
    arg_nodes.sort_unstable();
    let mut row_ptr = vec![0usize];
    for &n in &written {
        let outputs = 1 + g.nodes[n].more_outputs.len();
        row_ptr.push(row_ptr.last().copied().unwrap_or(0) + outputs);
    }
    let doc = Doc {
        arg_nodes: &arg_nodes,
        attrs: json!({"mxnet_version": ["int", 10901]}),
        heads: Entries(&g.heads, &at),
        node_row_ptr: &row_ptr,
        nodes: Nodes(g, &written, &at),
    };
    serde_json::to_string_pretty(&doc).expect("plain structs and strings always serialize")
}

/// Per graph node, its `(node, output)` in the written document.
fn entry_positions(g: &Graph) -> Vec<(usize, usize)> {
    let mut at = vec![(0, 0); g.nodes.len()];
    let mut next = 0;
    for (n, node) in g.nodes.iter().enumerate() {
        at[n] = match node.output_of {
            Some((producer, k)) => (at[producer].0, k),
            None => {
                next += 1;
                (next - 1, 0)
            }
        };
    }
    at
}

#[derive(Serialize)]
struct Doc<'a> {
    arg_nodes: &'a [usize],
    attrs: Value,
    heads: Entries<'a>,
    node_row_ptr: &'a [usize],
    nodes: Nodes<'a>,
}

/// Graph nodes as `[node, output, 0]` entries.
struct Entries<'a>(&'a [usize], &'a [(usize, usize)]);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|&i| [self.1[i].0, self.1[i].1, 0]))
    }
}

/// The written nodes of a graph.
struct Nodes<'a>(&'a Graph, &'a [usize], &'a [(usize, usize)]);

impl Serialize for Nodes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.1.iter().map(|&i| {
            let n = &self.0.nodes[i];
            JsonNode {
                attrs: n.attrs.iter().collect(),
                inputs: Entries(&n.inputs, self.2),
                name: &n.name,
                op: n.op_name(),
            }
        }))
    }
}

#[derive(Serialize)]
struct JsonNode<'a> {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    attrs: BTreeMap<&'a str, &'a str>,
    inputs: Entries<'a>,
    name: &'a str,
    op: &'a str,
}

fn field<'a>(obj: &'a Value, key: &str, what: &dyn Display) -> Result<&'a Value> {
    obj.get(key)
        .ok_or_else(|| Error::graph(format!("{what} has no `{key}`")))
}

/// Names node `i` (and its name, once read) in messages; written only for
/// an error, as formatting it for every node was a tenth of a load.
struct What<'a> {
    i: usize,
    name: Option<&'a str>,
}

impl Display for What<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            None => write!(f, "node {}", self.i),
            Some(name) => write!(f, "node {} (`{name}`)", self.i),
        }
    }
}

/// `[node, output, version]` (MXNet also accepts `[node, output]`).
fn entry(v: &Value, what: &dyn Display) -> Result<(usize, usize)> {
    let parts = v
        .as_array()
        .filter(|a| (2..=3).contains(&a.len()))
        .ok_or_else(|| {
            Error::graph(format!("{what}: expected [node, output, version], got {v}"))
        })?;
    let num = |x: &Value| {
        x.as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| Error::graph(format!("{what}: expected non-negative integers, got {v}")))
    };
    Ok((num(&parts[0])?, num(&parts[1])?))
}

fn attrs_of(node: &Value, what: &dyn Display) -> Result<Attrs> {
    let mut attrs = Attrs::new();
    for key in ["attrs", "attr", "param"] {
        let Some(map) = node.get(key) else { continue };
        let map = map
            .as_object()
            .ok_or_else(|| Error::graph(format!("{what}: `{key}` must be an object")))?;
        for (k, v) in map {
            let s = match v {
                Value::String(s) => s.clone(),
                // Lenient: numbers and booleans written unquoted.
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
                other => {
                    return Err(Error::graph(format!(
                        "{what}: attribute `{k}` must be a string, got {other}"
                    )));
                }
            };
            attrs.insert(k.clone(), s);
        }
    }
    Ok(attrs)
}

/// The heads of the graph `text` describes, checked to form a graph.
pub(crate) fn read(text: &str) -> Result<Vec<Entry>> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| Error::graph(format!("invalid JSON: {e}")))?;
    let nodes = field(&doc, "nodes", &"the symbol")?
        .as_array()
        .ok_or_else(|| Error::graph("`nodes` must be an array"))?;
    let registry = Registry::global()?;
    let mut built: Vec<Arc<Node>> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let node = read_node(registry, &built, i, n)?;
        built.push(Arc::new(node));
    }
    let entries = read_heads(&doc, &built)?;
    if let Some(args) = doc.get("arg_nodes").and_then(Value::as_array) {
        check_arg_nodes(args, &built)?;
    }
    Graph::from_heads(&entries).check_unique_arguments()?;
    Ok(entries)
}

/// Node `i`, whose inputs are among the `built` ones.
fn read_node(registry: &Registry, built: &[Arc<Node>], i: usize, n: &Value) -> Result<Node> {
    let what = What { i, name: None };
    let op_name = field(n, "op", &what)?
        .as_str()
        .ok_or_else(|| Error::graph(format!("{what}: `op` must be a string")))?;
    let name = field(n, "name", &what)?
        .as_str()
        .ok_or_else(|| Error::graph(format!("{what}: `name` must be a string")))?;
    let what = What {
        i,
        name: Some(name),
    };
    let attrs = attrs_of(n, &what)?;
    let raw_inputs: &[Value] = match n.get("inputs") {
        None => &[],
        Some(v) => v
            .as_array()
            .ok_or_else(|| Error::graph(format!("{what}: `inputs` must be an array")))?,
    };
    let mut inputs = Vec::with_capacity(raw_inputs.len());
    for v in raw_inputs {
        let (src, out) = entry(v, &what)?;
        if src >= i {
            return Err(Error::graph(format!(
                "{what}: input {v} does not refer to an earlier node (nodes must be in topological order)"
            )));
        }
        let outputs = built[src].num_outputs();
        if out >= outputs {
            return Err(Error::graph(format!(
                "{what}: input {v} reads output {out} of `{}`, which has {outputs}",
                built[src].name
            )));
        }
        inputs.push(Entry {
            node: built[src].clone(),
            index: out,
        });
    }
    if op_name == "null" {
        if !inputs.is_empty() {
            return Err(Error::graph(format!("{what}: a variable has no inputs")));
        }
        return Ok(Node {
            op: None,
            name: name.to_owned(),
            attrs,
            env: EnvArguments::default(),
            inputs,
        });
    }
    let op = registry.get(op_name).map_err(|e| match e {
        Error::UnknownOp { .. } => Error::graph(format!("{what}: {e}")),
        e => e,
    })?;
    let op = op.def;
    let in_node = |e: Error| e.in_node(name, op.name);
    let env = (op.parse)(op, &attrs).map_err(in_node)?;
    op.check_inputs(&env, inputs.len()).map_err(in_node)?;
    if let Some(&k) = op.mutate_inputs.first() {
        return Err(in_node(Error::invalid(
            op.name,
            op.input_name(k),
            "ops that update an input in place run eagerly, not in graphs",
        )));
    }
    Ok(Node {
        op: Some(op),
        name: name.to_owned(),
        attrs,
        env,
        inputs,
    })
}

/// The `heads` entries, over the `built` nodes.
fn read_heads(doc: &Value, built: &[Arc<Node>]) -> Result<Vec<Entry>> {
    let heads = field(doc, "heads", &"the symbol")?
        .as_array()
        .ok_or_else(|| Error::graph("`heads` must be an array"))?;
    if heads.is_empty() {
        return Err(Error::graph("`heads` is empty: the symbol has no outputs"));
    }
    let mut entries = Vec::with_capacity(heads.len());
    for h in heads {
        let (n, out) = entry(h, &"heads")?;
        let node = built.get(n).ok_or_else(|| {
            Error::graph(format!("head {h} refers to a node that does not exist"))
        })?;
        let outputs = node.num_outputs();
        if out >= outputs {
            return Err(Error::graph(format!(
                "head {h} reads output {out} of `{}`, which has {outputs}",
                node.name
            )));
        }
        entries.push(Entry {
            node: node.clone(),
            index: out,
        });
    }
    Ok(entries)
}

/// Only validated: the argument order comes from the graph itself.
fn check_arg_nodes(args: &[Value], built: &[Arc<Node>]) -> Result<()> {
    for a in args {
        let ok = a
            .as_u64()
            .and_then(|a| usize::try_from(a).ok())
            .and_then(|a| built.get(a))
            .is_some_and(|n| n.op.is_none());
        if !ok {
            return Err(Error::graph(format!(
                "arg_nodes entry {a} is not a variable node"
            )));
        }
    }
    Ok(())
}
