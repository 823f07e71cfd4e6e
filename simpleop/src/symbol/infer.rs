//! Shape and dtype inference over a graph from partial information.
//!
//! Forward: a node's output follows from its inputs through the op's own
//! inference. Backward, for same-shape elementwise ops only: every input
//! has the output's shape and dtype, so a known output or sibling fills an
//! unknown input (`x + y` with only `x` known gives `y`). Repeats until
//! nothing changes, revisiting only the nodes next to a change.
//!
//! A variable's MXNet hints (`__shape__`, `__dtype__`, as
//! `mx.sym.var('x', shape=(2, 3), dtype='float16')` writes them) stand in
//! for a value the caller does not give; a given value wins, as in MXNet.
//!
//! A source op's output shape with a 0 (`_zeros(shape=(1, 0, 3))`, Gluon's
//! RNN begin states) is a template, as in MXNet: a consumer that completes
//! its inputs, or a same-shape sibling, fills the 0s (known dimensions
//! must agree). Only once nothing else changes does an unfilled template
//! stand as it is, a 0 then being a dimension of size 0.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use super::graph::Graph;
use crate::{Attrs, DType, Error, OpForm, Pattern, Result, Shape};

/// What [`super::Symbol::infer_shape`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct InferredShapes {
    /// Argument names, in [`super::Symbol::list_arguments`] order.
    pub arguments: Vec<String>,
    /// Each argument's shape, when determined.
    pub argument_shapes: Vec<Option<Shape>>,
    /// Each output's shape, when determined.
    pub output_shapes: Vec<Option<Shape>>,
    /// Aux-state names, in [`super::Symbol::list_auxiliary_states`] order.
    pub aux: Vec<String>,
    /// Each aux state's shape, when determined.
    pub aux_shapes: Vec<Option<Shape>>,
}

impl InferredShapes {
    /// True when every argument, aux-state and output shape is known.
    pub fn is_complete(&self) -> bool {
        self.argument_shapes.iter().all(Option::is_some)
            && self.output_shapes.iter().all(Option::is_some)
            && self.aux_shapes.iter().all(Option::is_some)
    }
}

/// What [`super::Symbol::infer_type`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct InferredTypes {
    /// Argument names, in [`super::Symbol::list_arguments`] order.
    pub arguments: Vec<String>,
    /// Each argument's dtype, when determined.
    pub argument_types: Vec<Option<DType>>,
    /// Each output's dtype, when determined.
    pub output_types: Vec<Option<DType>>,
    /// Aux-state names, in [`super::Symbol::list_auxiliary_states`] order.
    pub aux: Vec<String>,
    /// Each aux state's dtype, when determined.
    pub aux_types: Vec<Option<DType>>,
}

/// Whether every input of node `n` has the output's shape and dtype.
fn same_shape_elementwise(g: &Graph, n: usize) -> bool {
    g.nodes[n].op.is_some_and(|op| {
        op.form == OpForm::Elementwise
            && op.pattern == Pattern::Elementwise
            && (1..=2).contains(&op.num_inputs())
    })
}

/// Runs a fixed-point inference of one property per node.
///
/// Equivalent to repeated passes over all op nodes in order until nothing
/// changes, but after the first pass a node is only revisited when its
/// value or an input's changed since it last ran (only those feed
/// [`infer_node`]), so a chain that fills backwards one link per pass is
/// linear, not quadratic. The visiting order is the passes' order, so
/// errors are the same.
fn fixed_point<V: Clone + PartialEq + std::fmt::Display>(
    g: &Graph,
    values: &mut [Option<V>],
    rule: Rule<'_, V>,
) -> Result<()> {
    let mut work = Worklist {
        consumers: g.consumers(),
        queued: vec![false; g.nodes.len()],
        this_pass: BinaryHeap::new(),
        next_pass: Vec::new(),
        changed: Vec::new(),
    };
    // The first pass visits every op node.
    for n in 0..g.nodes.len() {
        if g.nodes[n].op.is_some() {
            let settled = infer_node(g, n, values, &rule, &mut work.changed, false)?;
            work.requeue(g, n, settled, true);
        }
    }
    loop {
        while !(work.next_pass.is_empty() && work.this_pass.is_empty()) {
            let next = std::mem::take(&mut work.next_pass);
            work.this_pass.extend(next.into_iter().map(Reverse));
            while let Some(Reverse(n)) = work.this_pass.pop() {
                work.queued[n] = false;
                let settled = infer_node(g, n, values, &rule, &mut work.changed, false)?;
                work.requeue(g, n, settled, false);
            }
        }
        // Templates no consumer completed stand as they are (a 0 is then
        // a dimension of size 0), and inference goes on from them.
        for n in 0..g.nodes.len() {
            let node = &g.nodes[n];
            if node.op.is_some() && node.num_args() == 0 {
                infer_node(g, n, values, &rule, &mut work.changed, true)?;
                work.requeue(g, n, true, false);
            }
        }
        if work.next_pass.is_empty() && work.this_pass.is_empty() {
            return Ok(());
        }
    }
}

/// The nodes [`fixed_point`] still has to visit.
struct Worklist {
    consumers: Vec<Vec<usize>>,
    /// In `this_pass` or `next_pass`.
    queued: Vec<bool>,
    /// This pass's nodes ahead of the cursor, smallest first.
    this_pass: BinaryHeap<Reverse<usize>>,
    next_pass: Vec<usize>,
    /// Nodes whose value the last visit set.
    changed: Vec<usize>,
}

impl Worklist {
    /// After visiting `n`: queues the readers of every changed value (its
    /// node and consumers), in this pass when ahead of `n`, else in the
    /// next. `settled`: a visit of `n` would change nothing now, so only
    /// others are queued. `sweep`: this pass visits every node, so none is
    /// queued in it.
    fn requeue(&mut self, g: &Graph, n: usize, settled: bool, sweep: bool) {
        let mut changed = std::mem::take(&mut self.changed);
        for x in changed.drain(..) {
            for r in std::iter::once(x).chain(self.consumers[x].iter().copied()) {
                let skip = (settled && r == n) || (sweep && r > n) || self.queued[r];
                if skip || g.nodes[r].op.is_none() {
                    continue;
                }
                self.queued[r] = true;
                if r > n {
                    self.this_pass.push(Reverse(r));
                } else {
                    self.next_pass.push(r);
                }
            }
        }
        // Kept for its capacity.
        self.changed = changed;
    }
}

/// How one property is inferred: its name for messages, an op's outputs
/// from its arguments, and the filling of unknown inputs from known ones
/// (run only for ops with `complete_shapes`).
struct Rule<'a, V> {
    what: &'a str,
    forward: &'a OutputsRule<'a, V>,
    complete: &'a InputsRule<'a, V>,
    /// A source op's output that is only a template (MXNet's 0 = unknown
    /// dimension in `_zeros`' `shape`), and whether a value fits it.
    template: &'a TemplateRule<'a, V>,
}

/// Node `n`'s outputs from its arguments.
type OutputsRule<'a, V> = dyn Fn(usize, &[V]) -> Result<Vec<V>> + 'a;
/// Node `n`'s unknown inputs from its known ones.
type InputsRule<'a, V> = dyn Fn(usize, &mut [Option<V>]) -> Result<()> + 'a;
/// `(template, v)`: `None` when `template` is complete, else whether `v`
/// agrees with its known parts.
type TemplateRule<'a, V> = dyn Fn(&V, &V) -> Option<bool> + 'a;

/// One visit of op node `n`: unknown inputs the op can infer backwards
/// (a layer's weights from its data), its outputs from its arguments,
/// then (same-shape elementwise ops) unknown inputs and output from a
/// known one. A source op's template output is set only when
/// `settle_templates`; before that a consumer may complete it. Pushes every node whose value it set onto `changed`.
/// Returns whether every input was known: then the outputs were checked
/// against them, nothing was filled, and another visit before an input
/// changes would do nothing.
fn infer_node<V: Clone + PartialEq + std::fmt::Display>(
    g: &Graph,
    n: usize,
    values: &mut [Option<V>],
    rule: &Rule<'_, V>,
    changed: &mut Vec<usize>,
    settle_templates: bool,
) -> Result<bool> {
    let node = &g.nodes[n];
    let what = rule.what;
    let settled = node.inputs.iter().all(|&i| values[i].is_some());
    // Only ops with backward shape inference have inputs to fill; for them
    // it runs also when all are known, to check them (aux states' shapes).
    if node.op.is_some_and(|op| op.complete_shapes.is_some()) {
        let mut ins: Vec<Option<V>> = node.inputs.iter().map(|&i| values[i].clone()).collect();
        (rule.complete)(n, &mut ins).map_err(|e| node.error(e))?;
        for (&i, v) in node.inputs.iter().zip(ins) {
            if values[i].is_none() && v.is_some() {
                values[i] = v;
                changed.push(i);
            }
        }
    }
    let args = &node.inputs[..node.num_args()];
    let known: Option<Vec<V>> = args.iter().map(|&i| values[i].clone()).collect();
    if let Some(ins) = known {
        let outs = (rule.forward)(n, &ins).map_err(|e| node.error(e))?;
        let nodes = node.output_nodes(n);
        if outs.len() != nodes.len() {
            return Err(node.error(Error::graph(format!(
                "the op's {what} function gave {} outputs, the op has {}",
                outs.len(),
                nodes.len()
            ))));
        }
        for (o, v) in nodes.into_iter().zip(outs) {
            // A source op's template waits for a consumer to complete it.
            let template = |old: &V| args.is_empty().then(|| (rule.template)(&v, old)).flatten();
            match &values[o] {
                Some(old) if *old != v && template(old) != Some(true) => {
                    let partial = if template(old).is_some() {
                        " (unknown dimensions are 0)"
                    } else {
                        ""
                    };
                    return Err(node.error(Error::graph(format!(
                        "inferred output {what} {v}{partial} conflicts with {old}"
                    ))));
                }
                Some(_) => {}
                None if !settle_templates && template(&v).is_some() => {}
                None => {
                    values[o] = Some(v);
                    changed.push(o);
                }
            }
        }
    }
    if same_shape_elementwise(g, n) {
        let fill = values[n]
            .clone()
            .or_else(|| node.inputs.iter().find_map(|&i| values[i].clone()));
        if let Some(v) = fill {
            for &i in &node.inputs {
                if values[i].is_none() {
                    values[i] = Some(v.clone());
                    changed.push(i);
                }
            }
            if values[n].is_none() {
                values[n] = Some(v);
                changed.push(n);
            }
        }
    }
    Ok(settled)
}

/// A variable's `__shape__` hint, when it is complete: MXNet 1.x writes an
/// unknown dimension as 0 and an unknown rank as `()`, which leave the
/// shape to inference.
fn shape_hint(name: &str, attrs: &Attrs) -> Result<Option<Shape>> {
    let Some(text) = attrs.get("__shape__") else {
        return Ok(None);
    };
    let bad = || {
        Error::argument(
            name,
            format!("its `__shape__` hint {text:?} is not a tuple of sizes like \"(2, 3)\""),
        )
    };
    let inner = text
        .trim()
        .strip_prefix(['(', '['])
        .and_then(|t| t.strip_suffix([')', ']']))
        .ok_or_else(bad)?;
    let mut dims = Vec::new();
    for d in inner.split(',').map(str::trim) {
        match d {
            // "(3,)": a trailing comma
            "" => continue,
            _ => dims.push(
                d.trim_end_matches('L')
                    .parse::<usize>()
                    .map_err(|_| bad())?,
            ),
        }
    }
    Ok((!dims.is_empty() && !dims.contains(&0)).then(|| Shape::new(dims)))
}

/// A variable's `__dtype__` hint (an MXNet type flag).
fn dtype_hint(name: &str, attrs: &Attrs) -> Result<Option<DType>> {
    let Some(text) = attrs.get("__dtype__") else {
        return Ok(None);
    };
    let flag: i32 = text.trim().parse().map_err(|_| {
        Error::argument(
            name,
            format!("its `__dtype__` hint {text:?} is not an MXNet type flag (0 float32, 1 float64, ...)"),
        )
    })?;
    DType::from_mxnet_flag(flag).map(Some).ok_or_else(|| {
        Error::argument(
            name,
            format!("its `__dtype__` hint {flag} names an MXNet type simpleop does not have"),
        )
    })
}

fn seed<V: Clone>(
    g: &Graph,
    known: &HashMap<String, V>,
    what: &str,
    hint: impl Fn(&str, &Attrs) -> Result<Option<V>>,
) -> Result<Vec<Option<V>>> {
    let names = g.argument_names();
    let aux = g.aux_names();
    let lookup: HashSet<&str> = names.iter().chain(&aux).map(String::as_str).collect();
    for k in known.keys() {
        if !lookup.contains(k.as_str()) {
            return Err(Error::argument(
                k,
                format!(
                    "a {what} was given for it, but the graph has no such argument or aux state (arguments: {})",
                    names.join(", ")
                ),
            ));
        }
    }
    g.nodes
        .iter()
        .map(|n| {
            if !n.is_variable() {
                return Ok(None);
            }
            match known.get(&n.name) {
                Some(v) => Ok(Some(v.clone())),
                None => hint(&n.name, &n.attrs),
            }
        })
        .collect()
}

/// Per-node output shapes (complete or not).
pub(crate) fn node_shapes(g: &Graph, known: &HashMap<String, Shape>) -> Result<Vec<Option<Shape>>> {
    let mut values = seed(g, known, "shape", shape_hint)?;
    let forward = |n: usize, ins: &[Shape]| {
        let node = &g.nodes[n];
        let op = node.op.expect("op nodes only");
        op.output_shapes(ins, &node.env)
    };
    let complete = |n: usize, ins: &mut [Option<Shape>]| {
        let node = &g.nodes[n];
        let op = node.op.expect("op nodes only");
        let Some(f) = op.complete_shapes else {
            return Ok(());
        };
        f(op, ins, &node.env)?;
        op.check_against_data(ins, &node.env)
    };
    let template = |t: &Shape, s: &Shape| {
        let dims = t.dims();
        dims.contains(&0).then(|| {
            dims.len() == s.ndim() && dims.iter().zip(s.dims()).all(|(&t, &s)| t == 0 || t == s)
        })
    };
    let rule = Rule {
        what: "shape",
        forward: &forward,
        complete: &complete,
        template: &template,
    };
    fixed_point(g, &mut values, rule)?;
    Ok(values)
}

/// Per-node output dtypes (complete or not). An op that completes its
/// input shapes (a layer's weights, its aux states) gives unknown inputs,
/// once its first is known, the float dtype of a known input (f32 when
/// only integer indices are known).
pub(crate) fn node_types(g: &Graph, known: &HashMap<String, DType>) -> Result<Vec<Option<DType>>> {
    let mut values = seed(g, known, "dtype", dtype_hint)?;
    let forward = |n: usize, ins: &[DType]| {
        let node = &g.nodes[n];
        let op = node.op.expect("op nodes only");
        op.output_dtypes(ins, &node.env)
    };
    // Called for ops with backward shape inference only (`infer_node`).
    let complete = |_: usize, ins: &mut [Option<DType>]| {
        // Once the data's dtype is known: its float dtype (indices may be
        // integers; their weights are not).
        if let Some(Some(first)) = ins.first().copied() {
            let float = ins.iter().flatten().copied().find(|d| d.is_float());
            let fill = float.unwrap_or(if first.is_float() { first } else { DType::F32 });
            ins.iter_mut().for_each(|d| *d = Some(d.unwrap_or(fill)));
        }
        Ok(())
    };
    let rule = Rule {
        what: "dtype",
        forward: &forward,
        complete: &complete,
        template: &|_, _| None,
    };
    fixed_point(g, &mut values, rule)?;
    Ok(values)
}

pub(crate) fn shapes(g: &Graph, known: &HashMap<String, Shape>) -> Result<InferredShapes> {
    let v = node_shapes(g, known)?;
    Ok(InferredShapes {
        arguments: g.argument_names(),
        argument_shapes: g.args.iter().map(|&a| v[a].clone()).collect(),
        output_shapes: g.heads.iter().map(|&h| v[h].clone()).collect(),
        aux: g.aux_names(),
        aux_shapes: g.aux.iter().map(|&a| v[a].clone()).collect(),
    })
}

pub(crate) fn types(g: &Graph, known: &HashMap<String, DType>) -> Result<InferredTypes> {
    let v = node_types(g, known)?;
    Ok(InferredTypes {
        arguments: g.argument_names(),
        argument_types: g.args.iter().map(|&a| v[a]).collect(),
        output_types: g.heads.iter().map(|&h| v[h]).collect(),
        aux: g.aux_names(),
        aux_types: g.aux.iter().map(|&a| v[a]).collect(),
    })
}
