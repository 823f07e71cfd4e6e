//! [`Executor`]: a graph bound to arrays, with planned memory.

use std::collections::HashMap;

use smallvec::SmallVec;

use super::allocate;
use super::config::{BindConfig, GradReq, MemoryStats};
use super::graph::Graph;
use super::group::{self, FusionGroup, Grouping};
use super::infer;
use super::lower;
use super::schedule;
use super::steps::{self as plan, Instr, Loc, Plan, PlanInput, Step, ValueId, slab};
use crate::engine::fused::{
    RowSink, TileInstr, TileProgram, run_program, run_program_reducing, run_program_within,
};
use crate::kernel::RowReduction;
use crate::pool::Buffer;
use crate::{
    DType, Device, EnvArguments, Error, GradArgs, KernelRegistration, NDArray, OpCall, OpReqType,
    Registry, Result, RunContext, Shape, TBlob, TBlobMut, dispatch_float,
};

/// A per-call list (pointers, views), inline up to the usual sizes.
type Ptrs<T> = SmallVec<[T; 8]>;

/// The passes between a bound graph and its executable plan: the
/// schedule (forward, then autodiff), lowering of the fusion groups, and
/// memory planning.
fn compile_plan(input: &PlanInput<'_>, grouping: Option<&Grouping>) -> Result<Plan> {
    let mut plan = schedule::schedule(input)?;
    let fused_away = match grouping {
        Some(grouping) => lower::lower(&mut plan, input, grouping),
        None => Vec::new(),
    };
    allocate::allocate(&mut plan, input, &fused_away);
    Ok(plan)
}

/// A graph bound to arguments and gradient buffers.
///
/// ```
/// use std::collections::HashMap;
/// use simpleop::symbol::{GradReq, Symbol};
/// use simpleop::{DType, NDArray};
/// # fn main() -> simpleop::Result<()> {
/// simpleop_ops::link(); // the crate defining `elemwise_mul`
/// let x = Symbol::var("x");
/// let y = (&x * &x)?;
/// let args = HashMap::from([("x".to_owned(), NDArray::from_vec(vec![1.0f32, 2.0], [2])?)]);
/// let grads = HashMap::from([("x".to_owned(), NDArray::zeros([2], DType::F32))]);
/// let reqs = HashMap::from([("x".to_owned(), GradReq::Write)]);
/// let mut exe = y.bind(args, grads, reqs)?;
/// exe.forward(true)?;
/// exe.backward(&[])?;
/// assert_eq!(exe.grad("x").unwrap().to_vec::<f32>()?, [2.0, 4.0]);
/// # Ok(()) }
/// ```
pub struct Executor {
    graph: Graph,
    shapes: Vec<Shape>,
    dtypes: Vec<DType>,
    arg_names: Vec<String>,
    args: Vec<NDArray>,
    grads: Vec<Option<NDArray>>,
    grad_req: Vec<GradReq>,
    outputs: Vec<NDArray>,
    kernels: Vec<Option<KernelRegistration>>,
    /// Per node, the arguments of the last forward (seeded per run).
    envs: Vec<EnvArguments>,
    inference: Plan,
    training: Option<Plan>,
    /// Shared by both plans; each buffer is as large as either needs.
    pool: Vec<Buffer>,
    sink: Buffer,
    sink_layout: plan::SinkLayout,
    ctx: RunContext,
    /// `Some(is_train)` of the last forward.
    last_forward: Option<bool>,
    /// Per output: where `forward` copies its handle from (see [`HeadCopy`]).
    head_copy: Vec<HeadCopy>,
    fusion_groups: Vec<FusionGroup>,
    backward_fusion_groups: Vec<FusionGroup>,
    /// [`BindConfig::codegen`].
    codegen: bool,
    /// [`BindConfig::row_sinks`].
    row_sinks: bool,
    dot_groups: Vec<(Vec<usize>, &'static str)>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("arguments", &self.arg_names)
            .field("memory", &self.memory_stats())
            .finish()
    }
}

impl Executor {
    pub(crate) fn new(
        graph: Graph,
        mut args: HashMap<String, NDArray>,
        mut grads: HashMap<String, NDArray>,
        grad_req: HashMap<String, GradReq>,
        config: BindConfig,
    ) -> Result<Executor> {
        let arg_names = graph.argument_names();
        let is_arg: std::collections::HashSet<&str> =
            arg_names.iter().map(String::as_str).collect();
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
        let mut bound_args = Vec::with_capacity(arg_names.len());
        for name in &arg_names {
            let a = args
                .remove(name)
                .ok_or_else(|| Error::argument(name, "unbound: no array was given for it"))?;
            bound_args.push(a);
        }
        let known_shapes: HashMap<String, Shape> = arg_names
            .iter()
            .zip(&bound_args)
            .map(|(n, a)| (n.clone(), a.shape().clone()))
            .collect();
        let known_types: HashMap<String, DType> = arg_names
            .iter()
            .zip(&bound_args)
            .map(|(n, a)| (n.clone(), a.dtype()))
            .collect();
        let shapes: Vec<Shape> = infer::node_shapes(&graph, &known_shapes)?
            .into_iter()
            .map(|s| s.expect("every argument is bound, so every shape is known"))
            .collect();
        let dtypes: Vec<DType> = infer::node_types(&graph, &known_types)?
            .into_iter()
            .map(|d| d.expect("every argument is bound, so every dtype is known"))
            .collect();
        for (n, node) in graph.nodes.iter().enumerate() {
            if let Some(op) = node.op {
                crate::ndarray::check_size(op.name, &shapes[n], dtypes[n])
                    .map_err(|e| node.error(e))?;
            }
        }
        let reqs: Vec<GradReq> = arg_names
            .iter()
            .map(|n| grad_req.get(n).copied().unwrap_or_default())
            .collect();
        let mut bound_grads = Vec::with_capacity(arg_names.len());
        for (k, name) in arg_names.iter().enumerate() {
            let g = grads.remove(name);
            let a = &bound_args[k];
            match (reqs[k], g) {
                (GradReq::Null, _) => bound_grads.push(None),
                (_, None) => {
                    return Err(Error::argument(
                        name,
                        format!(
                            "grad_req is {}, but no gradient buffer was given",
                            reqs[k].name()
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
                    bound_grads.push(Some(g));
                }
            }
        }
        let registry = Registry::global()?;
        let ctx = RunContext::default();
        let mut kernels = Vec::with_capacity(graph.nodes.len());
        for node in &graph.nodes {
            kernels.push(match node.op {
                None => None,
                Some(op) => Some(
                    *registry
                        .get(op.name)?
                        .kernels(ctx.device)
                        .map_err(|e| node.error(e))?,
                ),
            });
        }
        let tile: Vec<bool> = kernels
            .iter()
            .map(|k| k.is_some_and(|k| k.tile.is_some()))
            .collect();
        let backward_tile: Vec<bool> = kernels
            .iter()
            .map(|k| k.is_some_and(|k| k.tile.is_some_and(|t| t.backward_f32.is_some())))
            .collect();
        let grouping = if config.fusion {
            group::group(&graph, &shapes, &dtypes, &tile)
        } else {
            Grouping::default()
        };
        let input = |train| PlanInput {
            graph: &graph,
            shapes: &shapes,
            dtypes: &dtypes,
            grad_req: &reqs,
            train,
            memory_planning: config.memory_planning,
            backward_tile: &backward_tile,
        };
        let inference = compile_plan(&input(false), config.fusion.then_some(&grouping))?;
        let training = if reqs.iter().any(|r| *r != GradReq::Null) {
            Some(compile_plan(
                &input(true),
                config.fusion.then_some(&grouping),
            )?)
        } else {
            None
        };
        let mut sizes = inference.buffers.clone();
        let mut sink = inference.sink;
        if let Some(t) = &training {
            if t.buffers.len() > sizes.len() {
                sizes.resize(t.buffers.len(), 0);
            }
            for (s, &b) in sizes.iter_mut().zip(&t.buffers) {
                *s = (*s).max(b);
            }
            sink = sink.max(t.sink);
        }
        let outputs = graph
            .heads
            .iter()
            .map(|&h| NDArray::try_zeros(shapes[h].clone(), dtypes[h]))
            .collect::<Result<_>>()?;
        let envs = graph.nodes.iter().map(|n| n.env.clone()).collect();
        let fusion_groups = grouping.describe(&graph);
        let backward_fusion_groups = training
            .as_ref()
            .map(|t| lower::describe_backward(&graph, t))
            .unwrap_or_default();
        let dot_groups = grouping
            .groups
            .iter()
            .zip(&fusion_groups)
            .map(|(m, d)| (m.clone(), d.pattern.name()))
            .collect();
        Ok(Executor {
            head_copy: head_copies(&graph),
            fusion_groups,
            backward_fusion_groups,
            codegen: config.codegen,
            row_sinks: config.row_sinks,
            dot_groups,
            arg_names,
            args: bound_args,
            grads: bound_grads,
            grad_req: reqs,
            outputs,
            kernels,
            envs,
            inference,
            training,
            pool: sizes
                .into_iter()
                .map(|b| bind_buffer("a planned buffer", b))
                .collect::<Result<_>>()?,
            sink: bind_buffer("the gradient sink", sink.bytes())?,
            sink_layout: sink,
            ctx,
            last_forward: None,
            graph,
            shapes,
            dtypes,
        })
    }

    /// The argument names, in [`super::Symbol::list_arguments`] order.
    pub fn arg_names(&self) -> &[String] {
        &self.arg_names
    }

    fn arg_index(&self, name: &str) -> Option<usize> {
        self.arg_names.iter().position(|n| n == name)
    }

    /// An argument's array.
    pub fn arg(&self, name: &str) -> Option<&NDArray> {
        self.arg_index(name).map(|k| &self.args[k])
    }

    /// Mutable access to an argument's array, e.g. to update a parameter in
    /// place with an optimizer op between steps. `set_arg` shares the
    /// caller's array with the executor, so updating that copy in place
    /// copies it first (copy-on-write); updating it here does not, unless
    /// it is shared elsewhere. Its shape and dtype are checked again
    /// before use.
    pub fn arg_mut(&mut self, name: &str) -> Option<&mut NDArray> {
        self.arg_index(name).map(|k| &mut self.args[k])
    }

    /// Replaces an argument's values with `value`'s; shape and dtype must
    /// match the bound ones.
    pub fn set_arg(&mut self, name: &str, value: &NDArray) -> Result<()> {
        let k = self
            .arg_index(name)
            .ok_or_else(|| Error::argument(name, "not an argument of the graph"))?;
        self.check_arg(k, value)?;
        self.args[k] = value.clone();
        Ok(())
    }

    /// `value` has argument `k`'s bound shape and dtype.
    fn check_arg(&self, k: usize, value: &NDArray) -> Result<()> {
        let node = self.graph.args[k];
        let (shape, dtype) = (&self.shapes[node], self.dtypes[node]);
        if value.shape() != shape || value.dtype() != dtype {
            return Err(Error::argument(
                &self.arg_names[k],
                format!(
                    "is bound as {shape} {dtype}, got {} {}",
                    value.shape(),
                    value.dtype()
                ),
            ));
        }
        Ok(())
    }

    /// An argument's gradient buffer (when its `grad_req` is not `null`).
    pub fn grad(&self, name: &str) -> Option<&NDArray> {
        self.arg_index(name).and_then(|k| self.grads[k].as_ref())
    }

    /// Mutable access to a gradient buffer, e.g. to zero it between
    /// `add` steps. Its shape and dtype are checked again before use.
    pub fn grad_mut(&mut self, name: &str) -> Option<&mut NDArray> {
        self.arg_index(name).and_then(|k| self.grads[k].as_mut())
    }

    /// An argument's `grad_req`.
    pub fn grad_req(&self, name: &str) -> Option<GradReq> {
        self.arg_index(name).map(|k| self.grad_req[k])
    }

    /// The outputs of the last forward pass.
    pub fn outputs(&self) -> &[NDArray] {
        &self.outputs
    }

    /// An output by name (`<node>_output`, as [`super::Symbol::list_outputs`]).
    pub fn output(&self, name: &str) -> Option<&NDArray> {
        self.graph
            .heads
            .iter()
            .position(|&h| {
                let node = &self.graph.nodes[h];
                (node.is_variable() && node.name == name)
                    || name.strip_suffix("_output") == Some(node.name.as_str())
            })
            .map(|i| &self.outputs[i])
    }

    /// The memory plan of training (forward + backward) when some argument
    /// asks for a gradient, else of inference.
    pub fn memory_stats(&self) -> MemoryStats {
        self.training.as_ref().unwrap_or(&self.inference).stats
    }

    /// The fusion groups of the forward graph (groups of two or more
    /// nodes; empty when fusion is off). A group's elementwise members run
    /// as one tile loop; a reduction that keeps axis 0 runs behind it slab
    /// by slab (see the README's fusion section for when).
    pub fn fusion_groups(&self) -> &[FusionGroup] {
        &self.fusion_groups
    }

    /// The fused gradient chains of `backward()`: each group's gradient
    /// steps run as one tile loop, in the listed order (output side
    /// first). Members are named by their forward nodes. Empty when fusion
    /// is off or no argument asks for a gradient.
    pub fn backward_fusion_groups(&self) -> &[FusionGroup] {
        &self.backward_fusion_groups
    }

    /// The memory plan of `forward(false)`.
    pub fn inference_memory_stats(&self) -> MemoryStats {
        self.inference.stats
    }

    /// The graph in DOT with shapes, dtypes and the planned buffer of
    /// every value; in-place writes are marked.
    pub fn to_dot(&self) -> String {
        let plan = self.training.as_ref().unwrap_or(&self.inference);
        super::dot::write(
            &self.graph,
            Some(super::dot::Planned {
                shapes: &self.shapes,
                dtypes: &self.dtypes,
                plan,
                groups: &self.dot_groups,
            }),
        )
    }

    /// Runs the forward pass. With `is_train`, keeps what backward needs.
    pub fn forward(&mut self, is_train: bool) -> Result<()> {
        self.check_bound()?;
        // Draw fresh seeds for sampling ops, kept for backward.
        for (n, node) in self.graph.nodes.iter().enumerate() {
            if let Some(op) = node.op
                && op.resources.rng
            {
                self.envs[n] = node.env.clone().with_seed(node.env.seed_or_draw());
            }
        }
        let train = is_train && self.training.is_some();
        let plan = if train {
            self.training.take().expect("checked")
        } else {
            std::mem::replace(&mut self.inference, placeholder_plan())
        };
        self.last_forward = None;
        let result = self.run(&plan, 0..plan.backward_start, &[]);
        if train {
            self.training = Some(plan);
        } else {
            self.inference = plan;
        }
        result?;
        // A node that is several heads fills the first; copy handles.
        for (h, copy) in self.head_copy.iter().enumerate() {
            match *copy {
                HeadCopy::Arg(k) => self.outputs[h] = self.args[k].clone(),
                HeadCopy::Head(first) => self.outputs[h] = self.outputs[first].clone(),
                HeadCopy::Written => {}
            }
        }
        self.last_forward = Some(is_train);
        Ok(())
    }

    /// Runs the backward pass of the last `forward(true)`. `head_grads`
    /// has one array per output, or is empty for ones.
    pub fn backward(&mut self, head_grads: &[NDArray]) -> Result<()> {
        if self.last_forward != Some(true) {
            return Err(Error::graph(
                "backward needs a preceding forward(is_train = true)",
            ));
        }
        let Some(plan) = self.training.take() else {
            // No argument asks for a gradient: nothing to do.
            return Ok(());
        };
        let result = self.backward_with(&plan, head_grads);
        self.training = Some(plan);
        result
    }

    fn backward_with(&mut self, plan: &Plan, head_grads: &[NDArray]) -> Result<()> {
        let ones: Vec<NDArray>;
        let heads = if head_grads.is_empty() {
            ones = self
                .outputs
                .iter()
                .map(|o| NDArray::full_for("backward", o.shape().clone(), 1.0, o.dtype()))
                .collect::<Result<_>>()?;
            &ones[..]
        } else {
            head_grads
        };
        if heads.len() != self.outputs.len() {
            return Err(Error::argument(
                "head_grads",
                format!(
                    "expected {} arrays (one per output), got {}",
                    self.outputs.len(),
                    heads.len()
                ),
            ));
        }
        for (h, (g, o)) in heads.iter().zip(&self.outputs).enumerate() {
            if g.shape() != o.shape() || g.dtype() != o.dtype() {
                return Err(Error::argument(
                    "head_grads",
                    format!(
                        "head gradient {h} is {} {}, expected the output's {} {}",
                        g.shape(),
                        g.dtype(),
                        o.shape(),
                        o.dtype()
                    ),
                ));
            }
        }
        self.check_bound()?;
        self.run(plan, plan.backward_start..plan.steps.len(), heads)
    }

    /// Arguments and gradient buffers may have been replaced through
    /// `arg_mut`/`grad_mut`; check them before anything is written.
    fn check_bound(&self) -> Result<()> {
        for (k, name) in self.arg_names.iter().enumerate() {
            let node = self.graph.args[k];
            let (shape, dtype) = (&self.shapes[node], self.dtypes[node]);
            self.check_arg(k, &self.args[k])?;
            if let Some(g) = &self.grads[k]
                && (g.shape() != shape || g.dtype() != dtype)
            {
                return Err(Error::argument(
                    name,
                    format!(
                        "gradient buffer is {} {}, expected {shape} {dtype}",
                        g.shape(),
                        g.dtype()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The tile program of a fused step, with each member's entry points.
    fn tile_program<'a>(&'a self, f: &'a plan::Fused) -> Result<TileProgram<'a>> {
        let mut instrs = Vec::with_capacity(f.instrs.len());
        let mut cost = 0usize;
        let fns = |n: usize| {
            self.kernels[n].and_then(|k| k.tile).ok_or_else(|| {
                Error::graph(format!(
                    "node `{}` has no tile kernels to fuse",
                    self.graph.nodes[n].name
                ))
            })
        };
        for ins in &f.instrs {
            instrs.push(match ins {
                Instr::Forward { node, ins, out } => {
                    cost += self.graph.nodes[*node].op.map_or(1, |o| o.cost as usize);
                    TileInstr::Forward {
                        fns: fns(*node)?,
                        env: &self.envs[*node],
                        ins,
                        out: *out,
                    }
                }
                Instr::Backward {
                    node,
                    dy,
                    y,
                    xs,
                    grads,
                } => {
                    cost += self.graph.nodes[*node].op.map_or(1, |o| o.cost as usize);
                    TileInstr::Backward {
                        fns: fns(*node)?,
                        env: &self.envs[*node],
                        dy: *dy,
                        y: *y,
                        xs,
                        grads,
                    }
                }
                Instr::Store { slot, output, req } => TileInstr::Store {
                    slot: *slot,
                    output: *output,
                    req: *req,
                },
            });
        }
        Ok(TileProgram {
            slots: f.slots,
            instrs,
            cost,
            codegen: self.codegen,
        })
    }

    /// How the fused step `f`'s reduction `t` can eat the program's tiles
    /// (the program only stores `t`'s input, into a slot nothing else
    /// overwrites, so the slot holds it when the tile's instructions end):
    /// its row reduction and the program output it reads, when the op
    /// declares one for these arguments (`fn rows`), the values are f32 or
    /// f64, and the program writes that output once, with `WriteTo`.
    fn row_sink(
        &self,
        plan: &Plan,
        f: &plan::Fused,
        t: &plan::ReduceTail,
    ) -> Result<Option<(RowReduction, usize)>> {
        let Some(rows) = self.kernels[t.node].and_then(|k| k.rows) else {
            return Ok(None);
        };
        if !self.row_sinks {
            return Ok(None);
        }
        let (input, out) = (&plan.values[t.scratch], &plan.values[t.out]);
        if !matches!(input.dtype, DType::F32 | DType::F64) || input.dtype != out.dtype {
            return Ok(None);
        }
        let Some(k) = f.outputs.iter().position(|&(v, _)| v == t.scratch) else {
            return Ok(None);
        };
        let mut stores = f.instrs.iter().filter_map(|i| match i {
            Instr::Store { output, req, .. } if *output == k => Some(*req),
            _ => None,
        });
        if stores.next() != Some(OpReqType::WriteTo) || stores.next().is_some() {
            return Ok(None);
        }
        let reduction = rows(std::slice::from_ref(&input.shape), &self.envs[t.node])
            .map_err(|e| self.graph.nodes[t.node].error(e))?;
        Ok(reduction
            .filter(|r| {
                r.len > 0 && out.shape.size().checked_mul(r.len) == Some(input.shape.size())
            })
            .map(|r| (r, k)))
    }

    /// Runs `plan.steps[range]`.
    ///
    /// Per-call lists live inline ([`Ptrs`]): a six-op fused forward made
    /// 35 allocator calls with `Vec`s, 3 now (`tests/fused_allocs.rs`).
    fn run(
        &mut self,
        plan: &Plan,
        range: std::ops::Range<usize>,
        head_grads: &[NDArray],
    ) -> Result<()> {
        // Base pointers of every location. Arguments and head gradients are
        // only read; outputs and gradient buffers are made unique first so
        // no other handle sees the writes.
        let arg_ptrs: Ptrs<*const u8> = self.args.iter().map(|a| a.blob().as_ptr()).collect();
        let head_grad_ptrs: Ptrs<*const u8> =
            head_grads.iter().map(|a| a.blob().as_ptr()).collect();
        let out_ptrs: Ptrs<*mut u8> = self
            .outputs
            .iter_mut()
            .map(NDArray::make_unique_ptr)
            .collect::<Result<_>>()?;
        let grad_ptrs: Ptrs<Option<*mut u8>> = self
            .grads
            .iter_mut()
            .map(|g| g.as_mut().map(NDArray::make_unique_ptr).transpose())
            .collect::<Result<_>>()?;
        let pool_ptrs: Ptrs<*mut u8> = self
            .pool
            .iter_mut()
            .map(|b| b.bytes_mut().as_mut_ptr())
            .collect();
        let sink_ptr = self.sink.bytes_mut().as_mut_ptr();
        let sink_slot = self.sink_layout.slot_bytes;
        let ptr = |v: ValueId| -> *mut u8 {
            match plan.values[v].loc {
                Loc::Arg(k) => arg_ptrs[k].cast_mut(),
                Loc::ArgGrad(k) => grad_ptrs[k].expect("planned only with a buffer"),
                Loc::Head(h) => out_ptrs[h],
                Loc::HeadGrad(h) => head_grad_ptrs[h].cast_mut(),
                Loc::Pool(b) => pool_ptrs[b],
                Loc::Unplaced | Loc::Fused => {
                    unreachable!("the planner places every value a step reads or writes")
                }
            }
        };
        // SAFETY (for the views below): every pointer is the start of a live,
        // 64-byte aligned allocation owned by `self` (arguments, outputs,
        // gradient buffers, pool, sink) or by `head_grads`, none of which is
        // resized or dropped during this call; each is at least as large as
        // the value viewed there (pool buffers are sized by the planner to
        // the largest value placed in them). The planner gives a value being
        // written a buffer no live value occupies, except the exact alias of
        // a declared in-place option, which the kernel contract allows: the
        // elementwise driver reads each tile before writing it. Arguments
        // and head gradients are never written.
        let view = |v: ValueId| unsafe {
            let val = &plan.values[v];
            TBlob::from_raw(ptr(v), val.dtype, val.shape.clone())
        };
        let view_mut = |v: ValueId| unsafe {
            let val = &plan.values[v];
            TBlobMut::from_raw(ptr(v), val.dtype, val.shape.clone())
        };
        for s in range {
            match &plan.steps[s] {
                Step::Forward {
                    node,
                    inputs,
                    out,
                    in_place,
                } => {
                    let n = *node;
                    let op = self.graph.nodes[n].op.expect("op node");
                    let k = self.kernels[n].expect("op node");
                    if !*in_place {
                        view_mut(*out).poison_if_asked();
                    }
                    let ins: Ptrs<TBlob<'_>> = inputs.iter().map(|&v| view(v)).collect();
                    let req = if *in_place {
                        OpReqType::WriteInplace
                    } else {
                        OpReqType::WriteTo
                    };
                    let call = OpCall {
                        op,
                        env: &self.envs[n],
                        ctx: &self.ctx,
                    };
                    (k.forward)(&call, &ins, &mut [view_mut(*out)], &[req])
                        .map_err(|e| self.graph.nodes[n].error(e))?;
                }
                Step::Fused(f) => {
                    let first = f.nodes.first().copied().unwrap_or(0);
                    let node_err = |e: Error| self.graph.nodes[first].error(e);
                    let prog = self.tile_program(f)?;
                    if f.reduce.is_none() && f.head.is_none() {
                        let ins: Ptrs<TBlob<'_>> = f.inputs.iter().map(|&v| view(v)).collect();
                        let mut outs: Ptrs<TBlobMut<'_>> =
                            f.outputs.iter().map(|&(v, _)| view_mut(v)).collect();
                        run_program(&prog, &ins, &mut outs, self.ctx.parallel).map_err(node_err)?;
                        continue;
                    }
                    if let (Some(t), None) = (&f.reduce, &f.head)
                        && let Some((reduction, k)) = self.row_sink(plan, f, t)?
                    {
                        // The reduction eats the program's tiles: its input
                        // is never stored, not even to a slab buffer.
                        let (prog, slot) = without_output(prog, k);
                        let ins: Ptrs<TBlob<'_>> = f.inputs.iter().map(|&v| view(v)).collect();
                        let mut outs: Ptrs<TBlobMut<'_>> = f
                            .outputs
                            .iter()
                            .enumerate()
                            .filter(|&(j, _)| j != k)
                            .map(|(_, &(v, _))| view_mut(v))
                            .collect();
                        let sink = RowSink {
                            slot,
                            reduction,
                            dst: view_mut(t.out),
                        };
                        let space = &plan.values[t.scratch].shape;
                        run_program_reducing(
                            &prog,
                            &ins,
                            &mut outs,
                            sink,
                            space,
                            self.ctx.parallel,
                        )
                        .map_err(node_err)?;
                        continue;
                    }
                    // Base addresses (plain integers, so that the slab
                    // closure may cross threads) of what the slabs view;
                    // `None` marks the head's output or the reduction's
                    // input, which lives in a per-thread slab buffer instead.
                    let scratch = f.head.as_ref().map(|h| h.scratch);
                    let tail_in = f.reduce.as_ref().map(|t| t.scratch);
                    let placed = |v: ValueId, skip: Option<ValueId>| {
                        (Some(v) != skip).then(|| (v, ptr(v) as usize))
                    };
                    let inputs: Vec<Option<(ValueId, usize)>> =
                        f.inputs.iter().map(|&v| placed(v, scratch)).collect();
                    let outputs: Vec<Option<(ValueId, usize)>> =
                        f.outputs.iter().map(|&(v, _)| placed(v, tail_in)).collect();
                    let slab_op = |node: usize, values: Vec<(ValueId, usize)>| SlabOp {
                        node,
                        op: self.graph.nodes[node].op.expect("op node"),
                        forward: self.kernels[node].expect("op node").forward,
                        env: &self.envs[node],
                        values,
                    };
                    let head = f.head.as_ref().map(|h| {
                        let ins = h.inputs.iter().map(|&v| (v, ptr(v) as usize)).collect();
                        slab_op(h.node, ins)
                    });
                    let tail = f
                        .reduce
                        .as_ref()
                        .map(|t| slab_op(t.node, vec![(t.out, ptr(t.out) as usize)]));
                    // `fixed`: a head's slabs start at multiples of its slab
                    // rows whatever the thread split, because the product's
                    // rounding depends on how many rows one call gets.
                    let (space, rows, extra_cost, fixed) = match (&f.head, &f.reduce) {
                        (Some(h), None) => (h.scratch, h.rows, h.cost, true),
                        (None, Some(t)) => (t.scratch, t.rows, 0, false),
                        // The slab buffer would be both read and written.
                        _ => {
                            return Err(node_err(Error::graph(
                                "a fused step with both a slabbed dot and a slabbed reduction",
                            )));
                        }
                    };
                    let slabs = Slabs {
                        plan,
                        space,
                        rows,
                        fixed,
                        cost: prog.cost + extra_cost,
                        ctx: RunContext {
                            parallel: false,
                            ..self.ctx
                        },
                        prog: &prog,
                        inputs: &inputs,
                        outputs: &outputs,
                        head,
                        tail,
                    };
                    slabs.run(self.ctx.parallel).map_err(|e| match e {
                        SlabError::Program(e) => node_err(e),
                        SlabError::Op(n, e) => self.graph.nodes[n].error(e),
                    })?;
                }
                Step::Seed { head, dst, req } => {
                    let src = view_from(head_grad_ptrs[*head], &plan.values[*dst]);
                    seed(&src, &mut view_mut(*dst), *req)?;
                }
                Step::Backward {
                    node,
                    out_grad,
                    output,
                    inputs,
                    grads,
                    in_place,
                } => {
                    let n = *node;
                    let op = self.graph.nodes[n].op.expect("op node");
                    let k = self.kernels[n].expect("op node");
                    let backward = k.backward.ok_or_else(|| {
                        self.graph.nodes[n].error(Error::NoGradient { op: op.name.into() })
                    })?;
                    let call = OpCall {
                        op,
                        env: &self.envs[n],
                        ctx: &self.ctx,
                    };
                    // Inputs that share a gradient buffer (`f(x, x)`) get
                    // their gradients in separate calls, in order, so each
                    // write sees the previous one (WriteTo then AddTo).
                    let mut groups: Vec<Vec<usize>> = Vec::new();
                    for (i, g) in grads.iter().enumerate() {
                        let Some((v, _)) = g else { continue };
                        let clash = groups.last().is_some_and(|grp| {
                            grp.iter().any(|&j| grads[j].is_some_and(|(w, _)| w == *v))
                        });
                        match groups.last_mut() {
                            Some(grp) if !clash => grp.push(i),
                            _ => groups.push(vec![i]),
                        }
                    }
                    for grp in groups {
                        let args = GradArgs {
                            out_grad: view(*out_grad),
                            output: output.map(view),
                            inputs: inputs.iter().map(|x| x.map(view)).collect(),
                        };
                        let node_inputs = &self.graph.nodes[n].inputs;
                        let mut blobs = Vec::with_capacity(grads.len());
                        let mut reqs = Vec::with_capacity(grads.len());
                        for (i, g) in grads.iter().enumerate() {
                            match g {
                                Some((v, r)) if grp.contains(&i) => {
                                    let req = if i == 0 && *in_place {
                                        OpReqType::WriteInplace
                                    } else {
                                        *r
                                    };
                                    let mut blob = view_mut(*v);
                                    if req == OpReqType::WriteTo {
                                        blob.poison_if_asked();
                                    }
                                    blobs.push(blob);
                                    reqs.push(req);
                                }
                                _ => {
                                    let src = node_inputs[i];
                                    // SAFETY: the sink has a slot for every
                                    // input of the widest backward step, each
                                    // `sink_slot` bytes: at least the size of
                                    // every `Null` input, and of every input
                                    // of a step whose gradients split into
                                    // several calls (`SinkLayout`), the only
                                    // inputs that land here. Slot `i` is this
                                    // call's alone, and no array lives there,
                                    // so an op that writes it anyway harms
                                    // nothing.
                                    blobs.push(unsafe {
                                        TBlobMut::from_raw(
                                            sink_ptr.add(i * sink_slot),
                                            self.dtypes[src],
                                            self.shapes[src].clone(),
                                        )
                                    });
                                    reqs.push(OpReqType::Null);
                                }
                            }
                        }
                        backward(&call, &args, &mut blobs, &reqs)
                            .map_err(|e| self.graph.nodes[n].error(e))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The device kernels run on.
    pub fn device(&self) -> Device {
        self.ctx.device
    }
}

/// Where an output's array comes from after a forward pass.
#[derive(Clone, Copy, Debug)]
enum HeadCopy {
    /// The step making it wrote it.
    Written,
    /// It is argument `k`.
    Arg(usize),
    /// Its node is also an earlier output, which holds the result.
    Head(usize),
}

/// Each output's [`HeadCopy`], found by index rather than by search so
/// that many outputs stay linear.
fn head_copies(g: &Graph) -> Vec<HeadCopy> {
    let arg_of: HashMap<usize, usize> = g.args.iter().enumerate().map(|(k, &a)| (a, k)).collect();
    let mut first: HashMap<usize, usize> = HashMap::new();
    g.heads
        .iter()
        .enumerate()
        .map(|(h, &n)| match arg_of.get(&n) {
            Some(&k) => HeadCopy::Arg(k),
            None => match *first.entry(n).or_insert(h) {
                f if f == h => HeadCopy::Written,
                f => HeadCopy::Head(f),
            },
        })
        .collect()
}

/// Zeroed storage of `bytes` for `bind`, or [`Error::Alloc`] naming `what`.
fn bind_buffer(what: &str, bytes: usize) -> Result<Buffer> {
    Buffer::new(bytes, true).ok_or_else(|| Error::alloc("bind", what, Some(bytes)))
}

/// A read view of a head gradient with `like`'s shape and dtype.
fn view_from<'a>(ptr: *const u8, like: &plan::Value) -> TBlob<'a> {
    // SAFETY: `ptr` is the start of a head gradient array, checked in
    // `backward_with` to have the output's shape and dtype, which is the
    // gradient value's; it outlives the step.
    unsafe { TBlob::from_raw(ptr, like.dtype, like.shape.clone()) }
}

/// `dst = src` or `dst += src`.
fn seed(src: &TBlob<'_>, dst: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
    dispatch_float!(src.dtype(), S => {
        let from = src.as_slice::<S>()?;
        let to = dst.as_slice_mut::<S>()?;
        for (d, s) in to.iter_mut().zip(from) {
            req.assign(d, crate::Float::to_compute(*s));
        }
        Ok(())
    }, _ => Err(Error::argument("head_grads", format!("dtype {} has no gradient", src.dtype()))))
}

/// Stands in for a plan while the real one is borrowed out of `self`.
fn placeholder_plan() -> Plan {
    Plan {
        values: Vec::new(),
        steps: Vec::new(),
        buffers: Vec::new(),
        sink: plan::SinkLayout::default(),
        forward_value: Vec::new(),
        grad_value: Vec::new(),
        backward_start: 0,
        stats: MemoryStats::default(),
    }
}

/// `prog` without its store into output `k` (the later outputs renumbered
/// down), and the slot that store read.
fn without_output(prog: TileProgram<'_>, k: usize) -> (TileProgram<'_>, usize) {
    let mut slot = 0;
    let instrs = prog
        .instrs
        .into_iter()
        .filter_map(|i| match i {
            TileInstr::Store {
                slot: s, output, ..
            } if output == k => {
                slot = s;
                None
            }
            TileInstr::Store { slot, output, req } => Some(TileInstr::Store {
                slot,
                output: if output > k { output - 1 } else { output },
                req,
            }),
            other => Some(other),
        })
        .collect();
    (TileProgram { instrs, ..prog }, slot)
}

/// A fused program with a [`plan::SlabHead`] or a [`plan::ReduceTail`],
/// run over slabs of rows: per slab, the head computes its output into a
/// slab buffer (still in cache) that the program reads, or the program
/// writes the reduction's input into it and the reduction reads it from
/// there. Each thread takes one contiguous run of rows and slabs it, with
/// its own buffer.
struct Slabs<'a> {
    plan: &'a Plan,
    /// The value that lives in the slab buffer (the head's output or the
    /// reduction's input); its shape is the program's iteration space.
    space: ValueId,
    /// Rows (of axis 0) per slab.
    rows: usize,
    /// Whether threads split at slab boundaries (multiples of `rows`).
    fixed: bool,
    /// Work per element, for the thread split.
    cost: usize,
    /// The slab ops' context: the executor's, on one thread.
    ctx: RunContext,
    prog: &'a TileProgram<'a>,
    /// Each program input and its base address; `None` for the head's
    /// output.
    inputs: &'a [Option<(ValueId, usize)>],
    /// Each program output and its base address; `None` for the
    /// reduction's input.
    outputs: &'a [Option<(ValueId, usize)>],
    head: Option<SlabOp<'a>>,
    tail: Option<SlabOp<'a>>,
}

/// A complex op run slab by slab beside a fused program.
struct SlabOp<'a> {
    node: usize,
    op: &'static crate::OpDef,
    forward: crate::ForwardFn,
    env: &'a EnvArguments,
    /// Its values besides the slab buffer, with base addresses: the head's
    /// inputs (the first taken row by row, the others whole), the tail's
    /// output.
    values: Vec<(ValueId, usize)>,
}

/// Which part of a slabbed step failed, so the error names its node.
enum SlabError {
    Program(Error),
    Op(usize, Error),
}

impl Slabs<'_> {
    fn run(&self, parallel: bool) -> std::result::Result<(), SlabError> {
        let space = &self.plan.values[self.space].shape;
        let n_rows = space.dims()[0];
        let row = space.size() / n_rows;
        // Split by elements at row (or slab) boundaries, so that the usual
        // grain rules apply; each thread slabs its own rows.
        let align = if self.fixed { row * self.rows } else { row };
        crate::engine::chunks::try_for_each_chunk(
            n_rows * row,
            self.cost,
            parallel,
            align,
            |elems| self.run_rows(elems.start / row..elems.end / row),
        )
    }

    fn call<'s>(&'s self, op: &'s SlabOp<'_>) -> OpCall<'s> {
        OpCall {
            op: op.op,
            env: op.env,
            ctx: &self.ctx,
        }
    }

    /// Rows `rows` of every value, slab by slab, on this thread.
    fn run_rows(&self, rows: std::ops::Range<usize>) -> std::result::Result<(), SlabError> {
        let values = &self.plan.values;
        let space = &values[self.space];
        let n_rows = space.shape.dims()[0];
        let shape = slab(&space.shape, self.rows.min(rows.len()));
        // Kept alive (`_buffer`) while `buffer_ptr` is used.
        let (_buffer, buffer_ptr) = NDArray::for_overwrite("slab", shape, space.dtype)
            .and_then(|mut b| b.make_unique_ptr().map(|p| (b, p)))
            .map_err(SlabError::Program)?;
        let view = |v: ValueId, base: usize, aligned: bool, r: std::ops::Range<usize>| {
            let (ptr, shape) = rows_of(&values[v], base, aligned, n_rows, r);
            // SAFETY: as for `view` in `Executor::run`: `ptr` lies in the
            // value's live allocation with `shape` in bounds (`rows_of`),
            // and inputs are only read.
            unsafe { TBlob::from_raw(ptr, values[v].dtype, shape) }
        };
        let view_mut = |v: ValueId, base: usize, r: std::ops::Range<usize>| {
            let (ptr, shape) = rows_of(&values[v], base, true, n_rows, r);
            // SAFETY: as above; every value written here has the `n_rows`
            // rows of the slabbed axis 0, so each thread's rows
            // (`for_each_chunk` hands out disjoint ones) are bytes no other
            // thread touches.
            unsafe { TBlobMut::from_raw(ptr.cast_mut(), values[v].dtype, shape) }
        };
        // SAFETY (both): the slab buffer is this thread's own and at least
        // `self.rows.min(rows.len())` rows long, and `rows` never exceeds
        // that; a view of it is dropped before the next one is made.
        let buffer_view = |rows: usize| unsafe {
            TBlob::from_raw(
                buffer_ptr.cast_const(),
                space.dtype,
                slab(&space.shape, rows),
            )
        };
        // SAFETY: see `buffer_view`.
        let buffer_view_mut = |rows: usize| unsafe {
            TBlobMut::from_raw(buffer_ptr, space.dtype, slab(&space.shape, rows))
        };
        // The arrays the program's outputs are slabs of (the slab buffer,
        // read again at once, counts as itself).
        let whole: Vec<usize> = self
            .outputs
            .iter()
            .map(|o| o.map_or(0, |(v, _)| values[v].shape.size()))
            .collect();
        let mut r0 = rows.start;
        while r0 < rows.end {
            let r1 = (r0 + self.rows).min(rows.end);
            if let Some(h) = &self.head {
                let ins: Vec<TBlob<'_>> = h
                    .values
                    .iter()
                    .enumerate()
                    .map(|(k, &(v, base))| view(v, base, k == 0, r0..r1))
                    .collect();
                (h.forward)(
                    &self.call(h),
                    &ins,
                    &mut [buffer_view_mut(r1 - r0)],
                    &[OpReqType::WriteTo],
                )
                .map_err(|e| SlabError::Op(h.node, e))?;
            }
            let ins: Vec<TBlob<'_>> = self
                .inputs
                .iter()
                .map(|i| match *i {
                    // An input with fewer dimensions broadcasts along axis 0.
                    Some((v, base)) => view(
                        v,
                        base,
                        values[v].shape.ndim() == space.shape.ndim(),
                        r0..r1,
                    ),
                    None => buffer_view(r1 - r0),
                })
                .collect();
            let mut outs: Vec<TBlobMut<'_>> = self
                .outputs
                .iter()
                .map(|o| match *o {
                    Some((v, base)) => view_mut(v, base, r0..r1),
                    None => buffer_view_mut(r1 - r0),
                })
                .collect();
            run_program_within(self.prog, &ins, &mut outs, false, &whole)
                .map_err(SlabError::Program)?;
            drop(outs);
            if let Some(t) = &self.tail {
                let (v, base) = t.values[0];
                (t.forward)(
                    &self.call(t),
                    &[buffer_view(r1 - r0)],
                    &mut [view_mut(v, base, r0..r1)],
                    &[OpReqType::WriteTo],
                )
                .map_err(|e| SlabError::Op(t.node, e))?;
            }
            r0 = r1;
        }
        Ok(())
    }
}

/// Where rows `rows` of `value` (at `base`) start and their shape, when
/// its axis 0 is the `n_rows` rows (`aligned`, and that long); all of it
/// when it broadcasts along them.
fn rows_of(
    value: &plan::Value,
    base: usize,
    aligned: bool,
    n_rows: usize,
    rows: std::ops::Range<usize>,
) -> (*const u8, Shape) {
    let dims = value.shape.dims();
    if aligned && dims.first() == Some(&n_rows) {
        let row_bytes = value.shape.size() / n_rows * value.dtype.size();
        let at = base + rows.start * row_bytes;
        (at as *const u8, slab(&value.shape, rows.len()))
    } else {
        (base as *const u8, value.shape.clone())
    }
}
