//! [`Symbol::gradient`]: reverse mode as a graph transformation.
//!
//! The result is a symbol like any other: it binds, fuses and runs with
//! forward only, and its own gradient (the executor's backward, or
//! `gradient` again) is the second derivative. Each op's gradient step is
//! one `_backward` node ([`crate::backward_op`]), which runs the op's
//! backward kernel. Several
//! gradients reaching one value are summed with `add_n`; a head's
//! gradient defaults to `ones_like`, an unread output's to `zeros_like`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::api::Symbol;
use super::node::{Entry, Node};
use crate::backward_op::{self, Layout};
use crate::{Attrs, Error, OpDef, Result};

/// A value: output `.1` of the node at address `.0`.
type Key = (usize, usize);

fn key(e: &Entry) -> Key {
    (Arc::as_ptr(&e.node) as usize, e.index)
}

fn node_key(n: &Arc<Node>) -> usize {
    Arc::as_ptr(n) as usize
}

impl Symbol {
    /// The gradients of this symbol's outputs (each seeded with ones) with
    /// respect to the variables named in `wrt`, as a symbol with one
    /// output per name. The gradient graph is made of ops with gradients
    /// of their own, so binding it and running backward, or calling
    /// `gradient` on it, gives second derivatives (see
    /// [`crate::backward_op`] for which ops differentiate twice).
    ///
    /// ```
    /// use simpleop::{Attrs, NDArray, Symbol};
    /// use std::collections::HashMap;
    /// simpleop_ops::link();
    /// let x = Symbol::var("x");
    /// let y = Symbol::invoke("tanh", &[&x], &Attrs::new())?;
    /// let dy = y.gradient(&["x"])?; // 1 - tanh²(x)
    /// let d2y = dy.gradient(&["x"])?; // -2 tanh(x) (1 - tanh²(x))
    /// let x0 = NDArray::from_vec(vec![0.5f64], [1])?;
    /// let args = HashMap::from([("x".to_string(), x0)]);
    /// let mut exe = d2y.bind(args, HashMap::new(), HashMap::new())?;
    /// exe.forward(false)?;
    /// let out = exe.outputs()[0].to_vec::<f64>()?;
    /// let t = 0.5f64.tanh();
    /// assert!((out[0] - -2.0 * t * (1.0 - t * t)).abs() < 1e-12);
    /// # Ok::<(), simpleop::Error>(())
    /// ```
    pub fn gradient(&self, wrt: &[&str]) -> Result<Symbol> {
        self.gradient_with(wrt, &[])
    }

    /// [`Symbol::gradient`] with the gradient of each output given
    /// (`head_grads`, one single-output symbol per output, or none for
    /// ones).
    pub fn gradient_with(&self, wrt: &[&str], head_grads: &[&Symbol]) -> Result<Symbol> {
        if !head_grads.is_empty() && head_grads.len() != self.heads.len() {
            return Err(Error::invalid(
                "Symbol::gradient",
                "head_grads",
                format!(
                    "one per output ({}) or none, got {}",
                    self.heads.len(),
                    head_grads.len()
                ),
            ));
        }
        let order = topological(&self.heads);
        let targets = wrt_nodes(&order, wrt)?;
        let leads = leading_to(&order, &targets);
        let mut sums = Contributions::default();
        for (k, head) in self.heads.iter().enumerate() {
            let g = match head_grads.get(k) {
                Some(g) => single(g, "head_grads")?,
                None => first(&call_op("ones_like", &[&one(head)], &Attrs::new())?)?,
            };
            sums.push(key(head), g);
        }
        for n in order.iter().rev() {
            if n.op.is_some() && leads.contains(&node_key(n)) {
                step(n, &leads, &mut sums)?;
            }
        }
        let grads = wrt
            .iter()
            .map(|name| {
                let v = &targets[*name];
                let e = Entry::first(v.clone());
                match sums.total(key(&e))? {
                    Some(g) => Ok(g),
                    None => first(&call_op("zeros_like", &[&one(&e)], &Attrs::new())?),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Symbol { heads: grads })
    }
}

/// The gradients reaching each value so far.
#[derive(Default)]
struct Contributions(HashMap<Key, Vec<Entry>>);

impl Contributions {
    fn push(&mut self, k: Key, g: Entry) {
        self.0.entry(k).or_default().push(g);
    }

    /// The value's gradient, kept (a name asked for twice gets it twice).
    fn total(&mut self, k: Key) -> Result<Option<Entry>> {
        let g = self.take(k)?;
        if let Some(g) = &g {
            self.push(k, g.clone());
        }
        Ok(g)
    }

    /// The value's gradient: its one contribution, or their `add_n`.
    fn take(&mut self, k: Key) -> Result<Option<Entry>> {
        let Some(mut gs) = self.0.remove(&k) else {
            return Ok(None);
        };
        if gs.len() == 1 {
            return Ok(gs.pop());
        }
        let syms: Vec<Symbol> = gs.iter().map(one).collect();
        let refs: Vec<&Symbol> = syms.iter().collect();
        let attrs = Attrs::new().with("num_args", gs.len());
        Ok(Some(first(&call_op("add_n", &refs, &attrs)?)?))
    }
}

/// One op node's gradient step: its output gradients in, its arguments'
/// gradients added to `sums`.
fn step(n: &Arc<Node>, leads: &HashSet<usize>, sums: &mut Contributions) -> Result<()> {
    let op = crate::registry::runs_as(n.op.expect("op nodes only"), &n.env);
    let outputs = n.num_outputs();
    let dys: Vec<Option<Entry>> = (0..outputs)
        .map(|k| sums.take((node_key(n), k)))
        .collect::<Result<_>>()?;
    if dys.iter().all(Option::is_none) {
        return Ok(());
    }
    let node_error =
        |e: Error| Error::graph(format!("gradient of node `{}` ({}): {e}", n.name, op.name));
    let layout = Layout::of(op, &n.env).map_err(node_error)?;
    if std::ptr::eq(op, &backward_op::OP) {
        let (inner, env) = backward_op::forward_op(&n.env)?;
        backward_op::check_second_order(inner, env).map_err(node_error)?;
    }
    let dys = dys
        .into_iter()
        .enumerate()
        .map(|(k, g)| match g {
            Some(g) => Ok(g),
            None => first(&call_op("zeros_like", &[&one(&out(n, k))], &Attrs::new())?),
        })
        .collect::<Result<Vec<_>>>()?;
    let grads = argument_gradients(n, op, layout, &dys).map_err(node_error)?;
    for (input, g) in n.inputs.iter().zip(grads) {
        if let Some(g) = g
            && leads.contains(&node_key(&input.node))
        {
            sums.push(key(input), g);
        }
    }
    Ok(())
}

/// Per argument, its gradient entry: output `i` of one `_backward` node.
fn argument_gradients(
    n: &Arc<Node>,
    op: &'static OpDef,
    layout: Layout,
    dys: &[Entry],
) -> Result<Vec<Option<Entry>>> {
    let mut args: Vec<Symbol> = dys.iter().map(one).collect();
    if layout.reads_outputs {
        args.extend((0..layout.outputs).map(|k| one(&out(n, k))));
    }
    args.extend(n.inputs[..layout.arguments].iter().map(one));
    let refs: Vec<&Symbol> = args.iter().collect();
    let env = backward_op::env_for(op, &n.env);
    let node = Symbol::apply(&backward_op::OP, &refs, &env)?;
    Ok(node.heads.into_iter().map(Some).collect())
}

/// Output `k` of `n`.
fn out(n: &Arc<Node>, k: usize) -> Entry {
    Entry {
        node: n.clone(),
        index: k,
    }
}

/// A symbol of one entry.
fn one(e: &Entry) -> Symbol {
    Symbol {
        heads: vec![e.clone()],
    }
}

fn first(s: &Symbol) -> Result<Entry> {
    single(s, "result")
}

/// The one entry of `s`, or an error naming `what`.
fn single(s: &Symbol, what: &str) -> Result<Entry> {
    match s.heads.as_slice() {
        [e] => Ok(e.clone()),
        heads => Err(Error::invalid(
            "Symbol::gradient",
            what,
            format!("a symbol with one output, got {}", heads.len()),
        )),
    }
}

/// `name` applied by name: the standard ops a gradient graph uses
/// (`add_n`, `ones_like`, `zeros_like`) must be linked.
fn call_op(name: &str, inputs: &[&Symbol], attrs: &Attrs) -> Result<Symbol> {
    Symbol::invoke(name, inputs, attrs).map_err(|e| {
        Error::invalid(
            "Symbol::gradient",
            name,
            format!("the standard op `{name}` (link simpleop_ops): {e}"),
        )
    })
}

/// Every node reachable from `heads`, each after its inputs.
fn topological(heads: &[Entry]) -> Vec<Arc<Node>> {
    let mut order = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    // (node, inputs pushed yet)
    let mut stack: Vec<(Arc<Node>, bool)> = heads
        .iter()
        .rev()
        .map(|e| (e.node.clone(), false))
        .collect();
    while let Some((n, expanded)) = stack.pop() {
        if expanded {
            order.push(n);
            continue;
        }
        if !seen.insert(node_key(&n)) {
            continue;
        }
        stack.push((n.clone(), true));
        for input in n.inputs.iter().rev() {
            if !seen.contains(&node_key(&input.node)) {
                stack.push((input.node.clone(), false));
            }
        }
    }
    order
}

/// The variable node of each name in `wrt`.
fn wrt_nodes(order: &[Arc<Node>], wrt: &[&str]) -> Result<HashMap<String, Arc<Node>>> {
    let vars: HashMap<&str, &Arc<Node>> = order
        .iter()
        .filter(|n| n.op.is_none())
        .map(|n| (n.name.as_str(), n))
        .collect();
    wrt.iter()
        .map(|name| match vars.get(name) {
            Some(n) => Ok((name.to_string(), (*n).clone())),
            None => Err(Error::invalid(
                "Symbol::gradient",
                "wrt",
                format!(
                    "a variable of the symbol, got `{name}` (variables: {})",
                    vars.keys().copied().collect::<Vec<_>>().join(", ")
                ),
            )),
        })
        .collect()
}

/// Nodes with a path to a node of `targets` (the targets included).
fn leading_to(order: &[Arc<Node>], targets: &HashMap<String, Arc<Node>>) -> HashSet<usize> {
    let mut leads: HashSet<usize> = targets.values().map(node_key).collect();
    for n in order {
        if n.inputs.iter().any(|e| leads.contains(&node_key(&e.node))) {
            leads.insert(node_key(n));
        }
    }
    leads
}
