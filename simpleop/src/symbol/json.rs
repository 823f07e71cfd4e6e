//! MXNet's symbol JSON.
//!
//! `nodes` in topological order, each `{"op", "name", "attrs", "inputs"}`
//! with variables as `"op": "null"`, inputs as `[node, output, version]`
//! and attribute values as strings; `arg_nodes`; `node_row_ptr`; `heads`.
//! Older files spell `attrs` as `attr` or `param`; all three are read.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Entry, Graph, Node, Symbol};
use crate::{Attrs, EnvArguments, Error, Registry, Result};

pub(crate) fn write(g: &Graph) -> String {
    let nodes: Vec<Value> = g
        .nodes
        .iter()
        .map(|n| {
            let mut obj = serde_json::Map::new();
            obj.insert("op".into(), json!(n.op_name()));
            obj.insert("name".into(), json!(n.name));
            if !n.attrs.is_empty() {
                let attrs: BTreeMap<&str, &str> = n.attrs.iter().collect();
                obj.insert("attrs".into(), json!(attrs));
            }
            let inputs: Vec<Value> = n.inputs.iter().map(|&i| json!([i, 0, 0])).collect();
            obj.insert("inputs".into(), Value::Array(inputs));
            Value::Object(obj)
        })
        .collect();
    let row_ptr: Vec<usize> = (0..=g.nodes.len()).collect();
    let heads: Vec<Value> = g.heads.iter().map(|&h| json!([h, 0, 0])).collect();
    let doc = json!({
        "nodes": nodes,
        "arg_nodes": g.args,
        "node_row_ptr": row_ptr,
        "heads": heads,
        "attrs": {"mxnet_version": ["int", 10901]},
    });
    serde_json::to_string_pretty(&doc).expect("a JSON value always serializes")
}

fn field<'a>(obj: &'a Value, key: &str, what: &str) -> Result<&'a Value> {
    obj.get(key)
        .ok_or_else(|| Error::graph(format!("{what} has no `{key}`")))
}

/// `[node, output, version]` (MXNet also accepts `[node, output]`).
fn entry(v: &Value, what: &str) -> Result<(usize, usize)> {
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

fn attrs_of(node: &Value, what: &str) -> Result<Attrs> {
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

pub(crate) fn read(text: &str) -> Result<Symbol> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| Error::graph(format!("invalid JSON: {e}")))?;
    let nodes = field(&doc, "nodes", "the symbol")?
        .as_array()
        .ok_or_else(|| Error::graph("`nodes` must be an array"))?;
    let registry = Registry::global()?;
    let mut built: Vec<Arc<Node>> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let what = format!("node {i}");
        let op_name = field(n, "op", &what)?
            .as_str()
            .ok_or_else(|| Error::graph(format!("{what}: `op` must be a string")))?;
        let name = field(n, "name", &what)?
            .as_str()
            .ok_or_else(|| Error::graph(format!("{what}: `name` must be a string")))?
            .to_owned();
        let what = format!("node {i} (`{name}`)");
        let attrs = attrs_of(n, &what)?;
        let raw_inputs = match n.get("inputs") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .ok_or_else(|| Error::graph(format!("{what}: `inputs` must be an array")))?
                .clone(),
        };
        let mut inputs = Vec::with_capacity(raw_inputs.len());
        for v in &raw_inputs {
            let (src, out) = entry(v, &what)?;
            if src >= i {
                return Err(Error::graph(format!(
                    "{what}: input {v} does not refer to an earlier node (nodes must be in topological order)"
                )));
            }
            if out != 0 {
                return Err(Error::graph(format!(
                    "{what}: input {v} reads output {out} of `{}`, which has one output",
                    built[src].name
                )));
            }
            inputs.push(Entry {
                node: built[src].clone(),
            });
        }
        let node = if op_name == "null" {
            if !inputs.is_empty() {
                return Err(Error::graph(format!("{what}: a variable has no inputs")));
            }
            Node {
                op: None,
                name,
                attrs,
                env: EnvArguments::default(),
                inputs,
            }
        } else {
            let op = registry.get(op_name).map_err(|e| match e {
                Error::UnknownOp { .. } => Error::graph(format!("{what}: {e}")),
                e => e,
            })?;
            let op = op.def;
            let arity = |e: Error| e.in_node(&name, op.name);
            op.check_arity(inputs.len()).map_err(arity)?;
            let env = (op.parse)(op, &attrs).map_err(|e| e.in_node(&name, op.name))?;
            if let Some(&k) = op.mutate_inputs.first() {
                return Err(Error::invalid(
                    op.name,
                    op.input_name(k),
                    "ops that update an input in place run eagerly, not in graphs",
                )
                .in_node(&name, op.name));
            }
            Node {
                op: Some(op),
                name,
                attrs,
                env,
                inputs,
            }
        };
        built.push(Arc::new(node));
    }
    let heads = field(&doc, "heads", "the symbol")?
        .as_array()
        .ok_or_else(|| Error::graph("`heads` must be an array"))?;
    if heads.is_empty() {
        return Err(Error::graph("`heads` is empty: the symbol has no outputs"));
    }
    let mut entries = Vec::with_capacity(heads.len());
    for h in heads {
        let (n, out) = entry(h, "heads")?;
        let node = built.get(n).ok_or_else(|| {
            Error::graph(format!("head {h} refers to a node that does not exist"))
        })?;
        if out != 0 {
            return Err(Error::graph(format!(
                "head {h} reads output {out} of `{}`, which has one output",
                node.name
            )));
        }
        entries.push(Entry { node: node.clone() });
    }
    if let Some(args) = doc.get("arg_nodes").and_then(Value::as_array) {
        // Only validated: the argument order comes from the graph itself.
        let vars: HashSet<usize> = built
            .iter()
            .enumerate()
            .filter(|(_, n)| n.op.is_none())
            .map(|(i, _)| i)
            .collect();
        for a in args {
            let ok = a
                .as_u64()
                .and_then(|a| usize::try_from(a).ok())
                .is_some_and(|a| vars.contains(&a));
            if !ok {
                return Err(Error::graph(format!(
                    "arg_nodes entry {a} is not a variable node"
                )));
            }
        }
    }
    let sym = Symbol { heads: entries };
    sym.graph()?;
    Ok(sym)
}
