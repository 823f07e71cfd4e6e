//! [`Symbol`]: a handle on graph outputs, and the graph-building API.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::config::{BindConfig, GradReq};
use super::executor::Executor;
use super::graph::Graph;
use super::infer::{InferredShapes, InferredTypes};
use super::node::{Entry, Node};
use super::{dot, infer, json};
use crate::{Attrs, DType, EnvArguments, Error, NDArray, OpDef, Result, Shape, eager};

/// A symbolic expression: a handle on one or more outputs of a graph.
///
/// Cloning is cheap; nodes are shared.
///
/// ```
/// use simpleop::symbol::Symbol;
/// simpleop_ops::link(); // the crate defining `elemwise_mul`
/// let x = Symbol::var("x");
/// let y = Symbol::var("y");
/// let z = (&x * &y)?;
/// assert_eq!(z.list_arguments(), ["x", "y"]);
/// # Ok::<(), simpleop::Error>(())
/// ```
#[derive(Clone)]
pub struct Symbol {
    pub(super) heads: Vec<Entry>,
}

impl fmt::Debug for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Symbol")
            .field("outputs", &self.list_outputs())
            .field("arguments", &self.list_arguments())
            .finish()
    }
}

/// Per-op counters for automatic node names (`relu0`, `relu1`, ...), as
/// MXNet's name manager.
fn auto_name(op: &str) -> String {
    static COUNTERS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());
    static FALLBACK: AtomicUsize = AtomicUsize::new(0);
    match COUNTERS.lock() {
        Ok(mut map) => {
            let n = map.entry(op.to_owned()).or_default();
            let name = format!("{}{n}", op.trim_start_matches('_'));
            *n += 1;
            name
        }
        Err(_) => format!("{op}{}", FALLBACK.fetch_add(1, Ordering::Relaxed)),
    }
}

impl Symbol {
    /// A variable (a graph argument) called `name`.
    pub fn var(name: &str) -> Symbol {
        Symbol::var_with_attrs(name, Attrs::new())
    }

    /// A variable with attributes (MXNet keeps e.g. `__shape__` here).
    pub fn var_with_attrs(name: &str, attrs: Attrs) -> Symbol {
        Symbol {
            heads: vec![Entry::first(Arc::new(Node {
                op: None,
                name: name.to_owned(),
                attrs,
                env: EnvArguments::default(),
                inputs: Vec::new(),
            }))],
        }
    }

    /// Applies op `name` (or an alias) to `inputs` with string attributes,
    /// as a graph file stores them. The node is named automatically.
    pub fn invoke(name: &str, inputs: &[&Symbol], attrs: &Attrs) -> Result<Symbol> {
        Symbol::invoke_named(name, inputs, attrs, None)
    }

    /// [`Symbol::invoke`] with an explicit node name.
    pub fn invoke_named(
        name: &str,
        inputs: &[&Symbol],
        attrs: &Attrs,
        node_name: Option<&str>,
    ) -> Result<Symbol> {
        let op = eager::lookup(name)?.def;
        let env = (op.parse)(op, attrs)?;
        Symbol::compose(op, inputs, env, attrs.clone(), node_name)
    }

    /// Applies `op` with already parsed arguments; this is what the typed
    /// functions the attribute generates call.
    pub fn apply(op: &'static OpDef, inputs: &[&Symbol], env: &EnvArguments) -> Result<Symbol> {
        let attrs = (op.to_attrs)(op, env)?;
        Symbol::compose(op, inputs, env.clone(), attrs, None)
    }

    fn compose(
        op: &'static OpDef,
        inputs: &[&Symbol],
        env: EnvArguments,
        attrs: Attrs,
        node_name: Option<&str>,
    ) -> Result<Symbol> {
        op.check_inputs(&env, inputs.len())?;
        if let Some(&k) = op.mutate_inputs.first() {
            return Err(Error::invalid(
                op.name,
                op.input_name(k),
                "ops that update an input in place run eagerly, not in graphs",
            ));
        }
        let mut entries = Vec::with_capacity(inputs.len());
        for (i, s) in inputs.iter().enumerate() {
            match s.heads.as_slice() {
                [one] => entries.push(one.clone()),
                heads => {
                    return Err(Error::invalid(
                        op.name,
                        op.input_name(i),
                        format!("a symbol with one output, got {} outputs", heads.len()),
                    ));
                }
            }
        }
        let name = node_name.map_or_else(|| auto_name(op.name), str::to_owned);
        let visible = op.num_visible_outputs(&env);
        let node = Arc::new(Node {
            op: Some(op),
            name,
            attrs,
            env,
            inputs: entries,
        });
        Ok(Symbol {
            heads: (0..visible)
                .map(|index| Entry {
                    node: node.clone(),
                    index,
                })
                .collect(),
        })
    }

    /// Several symbols as one with all their outputs (MXNet's `Group`).
    pub fn group(symbols: &[Symbol]) -> Symbol {
        Symbol {
            heads: symbols.iter().flat_map(|s| s.heads.clone()).collect(),
        }
    }

    /// Output `i` alone (MXNet's `sym[i]`).
    pub fn output(&self, i: usize) -> Result<Symbol> {
        let e = self.heads.get(i).ok_or_else(|| {
            Error::graph(format!(
                "output {i} requested of a symbol with {} outputs",
                self.heads.len()
            ))
        })?;
        Ok(Symbol {
            heads: vec![e.clone()],
        })
    }

    /// Number of outputs.
    pub fn num_outputs(&self) -> usize {
        self.heads.len()
    }

    /// The variables that are arguments, in depth-first order of first use
    /// (MXNet's order); aux states are listed apart.
    pub fn list_arguments(&self) -> Vec<String> {
        Graph::from_heads(&self.heads).argument_names()
    }

    /// The variables that feed an op's aux-state inputs (BatchNorm's
    /// moving statistics), in order of first use (MXNet's
    /// `list_auxiliary_states`). Bind passes them with the arguments.
    pub fn list_auxiliary_states(&self) -> Vec<String> {
        Graph::from_heads(&self.heads).aux_names()
    }

    /// The outputs' names: `<node>_<output name>` for op nodes
    /// (`fc1_output`, `bn0_mean`, `split0_output1`), the variable's name
    /// for a variable.
    pub fn list_outputs(&self) -> Vec<String> {
        // One list of names per node, not per head: a split shows
        // thousands of outputs of one node.
        let mut names: Option<(*const Node, Vec<String>)> = None;
        self.heads
            .iter()
            .map(|e| match e.node.op {
                Some(op) => {
                    let ptr = Arc::as_ptr(&e.node);
                    if names.as_ref().is_none_or(|(p, _)| *p != ptr) {
                        names = Some((ptr, op.output_names(&e.node.env)));
                    }
                    let list = names.as_ref().map(|(_, n)| n.as_slice()).unwrap_or(&[]);
                    let out = list.get(e.index).map_or("output", String::as_str);
                    format!("{}_{out}", e.node.name)
                }
                None => e.node.name.clone(),
            })
            .collect()
    }

    /// The node name of output 0.
    pub fn name(&self) -> Option<&str> {
        self.heads.first().map(|e| e.node.name.as_str())
    }

    /// Shapes of every argument and output from the `known` argument
    /// shapes. Unknown ones stay `None` when the information does not
    /// determine them; an inconsistency is an error naming the node and op.
    /// A variable's MXNet `__shape__` hint stands in for a shape not in
    /// `known` (as in MXNet, a given shape wins); a hint with an unknown
    /// dimension (0, as MXNet 1.x writes it) is no hint.
    ///
    /// ```
    /// use simpleop::{Attrs, Shape, Symbol};
    /// use std::collections::HashMap;
    /// simpleop_ops::link();
    /// let x = Symbol::var_with_attrs("x", Attrs::from([("__shape__", "(2, 3)")]));
    /// let y = Symbol::invoke("relu", &[&x], &Attrs::new())?;
    /// let shapes = y.infer_shape(&HashMap::new())?;
    /// assert_eq!(shapes.output_shapes, [Some(Shape::new([2, 3]))]);
    /// # Ok::<(), simpleop::Error>(())
    /// ```
    pub fn infer_shape(&self, known: &HashMap<String, Shape>) -> Result<InferredShapes> {
        let g = self.graph()?;
        infer::shapes(&g, known)
    }

    /// Dtypes of every argument and output from the `known` argument dtypes;
    /// a variable's `__dtype__` hint (an MXNet type flag, see
    /// [`DType::from_mxnet_flag`]) stands in for one not given.
    pub fn infer_type(&self, known: &HashMap<String, DType>) -> Result<InferredTypes> {
        let g = self.graph()?;
        infer::types(&g, known)
    }

    /// MXNet symbol JSON.
    pub fn to_json(&self) -> String {
        json::write(&Graph::from_heads(&self.heads))
    }

    /// Loads MXNet symbol JSON. Unknown ops are errors listing close names;
    /// malformed JSON is an error, never a panic.
    pub fn from_json(text: &str) -> Result<Symbol> {
        Ok(Symbol {
            heads: json::read(text)?,
        })
    }

    /// The graph in Graphviz DOT: one box per op with its name and
    /// attributes, ellipses for variables.
    pub fn to_dot(&self) -> String {
        dot::write(&Graph::from_heads(&self.heads), None)
    }

    /// Binds the graph to arrays: one per argument and aux state in `args`
    /// (aux states are never differentiated); a gradient
    /// buffer in `grads` for each argument whose `grad_req` is `Write` or
    /// `Add` (for `Add` it holds the value gradients are added to).
    /// Arguments missing from `grad_req` get `Null`.
    pub fn bind(
        &self,
        args: HashMap<String, NDArray>,
        grads: HashMap<String, NDArray>,
        grad_req: HashMap<String, GradReq>,
    ) -> Result<Executor> {
        Executor::new(self.graph()?, args, grads, grad_req, BindConfig::default())
    }

    /// [`Symbol::bind`] with options (memory planning, fusion).
    pub fn bind_with(
        &self,
        args: HashMap<String, NDArray>,
        grads: HashMap<String, NDArray>,
        grad_req: HashMap<String, GradReq>,
        config: BindConfig,
    ) -> Result<Executor> {
        Executor::new(self.graph()?, args, grads, grad_req, config)
    }

    /// Allocates arguments (zeros) and gradient buffers from partial shape
    /// information and binds. Argument dtypes default to f32 unless given
    /// in `dtypes`, hinted or inferable; every argument's shape must be
    /// given, hinted (`__shape__`, see [`Symbol::infer_shape`]) or
    /// inferable.
    pub fn simple_bind(
        &self,
        shapes: &HashMap<String, Shape>,
        dtypes: &HashMap<String, DType>,
        grad_req: HashMap<String, GradReq>,
    ) -> Result<Executor> {
        self.simple_bind_with(shapes, dtypes, grad_req, BindConfig::default())
    }

    /// [`Symbol::simple_bind`] with planning and fusion options.
    pub fn simple_bind_with(
        &self,
        shapes: &HashMap<String, Shape>,
        dtypes: &HashMap<String, DType>,
        grad_req: HashMap<String, GradReq>,
        config: BindConfig,
    ) -> Result<Executor> {
        let g = self.graph()?;
        let inferred = infer::shapes(&g, shapes)?;
        // f32 only for what neither `dtypes`, a hint nor inference gives
        let partial = infer::types(&g, dtypes)?;
        let mut known_types = dtypes.clone();
        for (name, t) in partial.arguments.iter().zip(&partial.argument_types) {
            known_types.insert(name.clone(), t.unwrap_or(DType::F32));
        }
        let types = infer::types(&g, &known_types)?;
        let mut args = HashMap::new();
        let mut grads = HashMap::new();
        for (i, name) in inferred.arguments.iter().enumerate() {
            let shape = inferred.argument_shapes[i].clone().ok_or_else(|| {
                Error::argument(name, "its shape cannot be inferred; give it to simple_bind")
            })?;
            let dtype = types.argument_types[i].unwrap_or(DType::F32);
            if grad_req.get(name).is_some_and(|r| *r != GradReq::Null) {
                grads.insert(name.clone(), NDArray::try_zeros(shape.clone(), dtype)?);
            }
            args.insert(name.clone(), NDArray::try_zeros(shape, dtype)?);
        }
        for (i, name) in inferred.aux.iter().enumerate() {
            let shape = inferred.aux_shapes[i].clone().ok_or_else(|| {
                Error::argument(name, "its shape cannot be inferred; give it to simple_bind")
            })?;
            let dtype = types.aux_types[i].unwrap_or(DType::F32);
            args.insert(name.clone(), NDArray::try_zeros(shape, dtype)?);
        }
        Executor::new(g, args, grads, grad_req, config)
    }

    /// The graph's nodes in topological order (inputs before the nodes
    /// that read them, MXNet's order), for programs that walk a graph
    /// themselves: interpreters, exporters, the conformance runner.
    pub fn topology(&self) -> Result<Topology> {
        let g = self.graph()?;
        Ok(Topology {
            nodes: g
                .nodes
                .into_iter()
                .map(|n| TopoNode {
                    op: n.op,
                    name: n.name,
                    env: n.env,
                    inputs: n.inputs,
                    output_of: n.output_of,
                    more_outputs: n.more_outputs,
                })
                .collect(),
            heads: g.heads,
        })
    }

    pub(crate) fn graph(&self) -> Result<Graph> {
        let g = Graph::from_heads(&self.heads);
        g.check_unique_arguments()?;
        Ok(g)
    }
}

/// A symbol's graph in topological order ([`Symbol::topology`]).
#[derive(Clone, Debug)]
pub struct Topology {
    /// Every node, each after the nodes it reads.
    pub nodes: Vec<TopoNode>,
    /// The index of each output's node, in output order.
    pub heads: Vec<usize>,
}

/// One node of a [`Topology`].
#[derive(Clone, Debug)]
pub struct TopoNode {
    /// The op, or `None` for a variable or an output node.
    pub op: Option<&'static OpDef>,
    /// The node's name (a variable's is its argument name).
    pub name: String,
    /// The op's parsed arguments.
    pub env: EnvArguments,
    /// The index of the node each input comes from: the arguments, then
    /// the aux states.
    pub inputs: Vec<usize>,
    /// For output `k ≥ 1` of an op with several outputs, which the graph
    /// holds as a node of its own: `(the op's node, k)`; such a node has no
    /// op and is no variable. `None` otherwise.
    pub output_of: Option<(usize, usize)>,
    /// For an op with several outputs: the nodes of outputs 1, 2, ...
    pub more_outputs: Vec<usize>,
}

impl TopoNode {
    /// `e`, saying which node it came from.
    pub fn error(&self, e: Error) -> Error {
        e.in_node(&self.name, self.op.map_or("null", |o| o.name))
    }
}

macro_rules! symbol_binary_op {
    ($trait:ident, $method:ident, $same:literal, $scalar:literal) => {
        /// The same-shape elementwise op, as MXNet's symbol operators; use
        /// the `broadcast_*` ops to broadcast.
        impl std::ops::$trait<&Symbol> for &Symbol {
            type Output = Result<Symbol>;
            fn $method(self, rhs: &Symbol) -> Result<Symbol> {
                Symbol::invoke($same, &[self, rhs], &Attrs::new())
            }
        }
        impl std::ops::$trait<f64> for &Symbol {
            type Output = Result<Symbol>;
            fn $method(self, rhs: f64) -> Result<Symbol> {
                Symbol::invoke($scalar, &[self], &Attrs::new().with("scalar", rhs))
            }
        }
    };
}

symbol_binary_op!(Add, add, "elemwise_add", "_plus_scalar");
symbol_binary_op!(Sub, sub, "elemwise_sub", "_minus_scalar");
symbol_binary_op!(Mul, mul, "elemwise_mul", "_mul_scalar");
symbol_binary_op!(Div, div, "elemwise_div", "_div_scalar");

impl std::ops::Neg for &Symbol {
    type Output = Result<Symbol>;
    fn neg(self) -> Result<Symbol> {
        Symbol::invoke("negative", &[self], &Attrs::new())
    }
}
