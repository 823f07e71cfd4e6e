//! [`Executor`]: a graph bound to arrays, with planned memory.

use std::collections::HashMap;

use smallvec::SmallVec;

use super::bind::{
    bind_args, bind_aux, bind_buffer, bind_grads, compile_plan, infer_nodes, node_kernels,
    shared_buffers,
};
use super::config::{BindConfig, GradReq, MemoryStats};
use super::graph::Graph;
use super::group::{self, FusionGroup, Grouping};
use super::slabs::{SlabError, SlabOp, Slabs};
use super::steps::{self as plan, Instr, Plan, PlanInput, Step, ValueId};
use super::{inference, lower};
use crate::engine::fused::{RowSink, TileInstr, TileProgram, run_program, run_program_reducing};
use crate::kernel::RowReduction;
use crate::pool::Buffer;
use crate::{
    DType, EnvArguments, Error, GradArgs, KernelRegistration, NDArray, OpCall, OpReqType, Result,
    RunContext, Shape, TBlob, TBlobMut, dispatch_float,
};

mod accessors;
mod hook;
mod placed;

use placed::{Placed, view_from};

/// A per-call list (pointers, views), inline up to the usual sizes.
type Ptrs<T> = SmallVec<[T; 8]>;

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
    aux_names: Vec<String>,
    /// The aux states, updated in place by training forward passes.
    aux: Vec<NDArray>,
    grads: Vec<Option<NDArray>>,
    grad_req: Vec<GradReq>,
    outputs: Vec<NDArray>,
    kernels: Vec<Option<KernelRegistration>>,
    /// Per node, the arguments of the last forward (seeded per run).
    envs: Vec<EnvArguments>,
    inference: Plan,
    training: Option<Plan>,
    /// Shared by every plan (the expanded executor's too); each buffer
    /// is as large as any of them needs.
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
    /// When each argument's gradient is final in the training plan's
    /// backward ([`super::ready::ready_schedule`]).
    ready_schedule: Vec<(usize, usize)>,
    /// Runs `forward(false)` when some op has an inference form
    /// ([`inference::expand`]): the expanded graph, bound to no arrays of
    /// its own between runs; each run lends it this executor's arguments,
    /// aux states, outputs and pool, so it sees every change made to them
    /// and plans no memory of its own.
    expanded: Option<Box<Executor>>,
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
        args: HashMap<String, NDArray>,
        grads: HashMap<String, NDArray>,
        grad_req: HashMap<String, GradReq>,
        config: BindConfig,
    ) -> Result<Executor> {
        let mut exe = Executor::build(graph, args, grads, grad_req, config)?;
        if config.fusion
            && let Some(g) = inference::expand(&exe.graph, &exe.shapes, &exe.dtypes)?
        {
            let mut inner = exe.bind_expanded(g, config)?;
            exe.share_pool(&mut inner);
            exe.expanded = Some(Box::new(inner));
        }
        Ok(exe)
    }

    /// Takes `inner`'s planned buffers into this executor's pool, each
    /// buffer as large as either plan needs: the plans never run at once
    /// (a run lends the pool), so they share it as the inference and
    /// training plans do.
    fn share_pool(&mut self, inner: &mut Executor) {
        for (b, buf) in std::mem::take(&mut inner.pool).into_iter().enumerate() {
            match self.pool.get(b) {
                None => self.pool.push(buf),
                Some(own) if own.bytes().len() < buf.bytes().len() => self.pool[b] = buf,
                Some(_) => {}
            }
        }
    }

    /// The executor of `forward(false)` over `g`, this one's graph with
    /// inference forms expanded; it holds no arrays once bound (but its
    /// pool, which [`Executor::share_pool`] takes).
    fn bind_expanded(&self, g: Graph, config: BindConfig) -> Result<Executor> {
        let names = self.arg_names.iter().chain(&self.aux_names).cloned();
        let arrays = names
            .zip(self.args.iter().chain(&self.aux).cloned())
            .collect();
        let mut exe = Executor::build(g, arrays, HashMap::new(), HashMap::new(), config)?;
        let same = exe.arg_names == self.arg_names
            && exe.aux_names == self.aux_names
            && exe.outputs.len() == self.outputs.len()
            && exe
                .outputs
                .iter()
                .zip(&self.outputs)
                .all(|(a, b)| a.shape() == b.shape() && a.dtype() == b.dtype());
        if !same {
            return Err(Error::graph(
                "an op's inference form changes the graph's arguments or outputs",
            ));
        }
        exe.args.clear();
        exe.aux.clear();
        exe.outputs.clear();
        Ok(exe)
    }

    fn build(
        graph: Graph,
        mut args: HashMap<String, NDArray>,
        grads: HashMap<String, NDArray>,
        grad_req: HashMap<String, GradReq>,
        config: BindConfig,
    ) -> Result<Executor> {
        let graph = graph.with_simple_forms()?;
        let arg_names = graph.argument_names();
        let aux_names = graph.aux_names();
        let aux = bind_aux(&aux_names, &mut args)?;
        let bound_args = bind_args(&arg_names, args, &grads, &grad_req)?;
        let (shapes, dtypes) = infer_nodes(&graph, &arg_names, &bound_args, &aux_names, &aux)?;
        let reqs: Vec<GradReq> = arg_names
            .iter()
            .map(|n| grad_req.get(n).copied().unwrap_or_default())
            .collect();
        let bound_grads = bind_grads(&arg_names, &bound_args, grads, &reqs)?;
        let ctx = RunContext::default();
        let kernels = node_kernels(&graph, ctx.device)?;
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
        let (sizes, sink) = shared_buffers(&inference, training.as_ref());
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
        let has_grad: Vec<bool> = bound_grads.iter().map(Option::is_some).collect();
        let ready_schedule = training
            .as_ref()
            .map(|t| super::ready::ready_schedule(t, &has_grad))
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
            aux_names,
            aux,
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
            ready_schedule,
            expanded: None,
            graph,
            shapes,
            dtypes,
        })
    }

    /// Runs the forward pass. With `is_train`, keeps what backward needs.
    pub fn forward(&mut self, is_train: bool) -> Result<()> {
        self.check_bound()?;
        if !is_train && self.expanded.is_some() {
            return self.forward_expanded();
        }
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
        self.ctx.is_train = is_train;
        let result = self.run(&plan, 0..plan.backward_start, &[], &mut |_, _| Ok(()));
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
                HeadCopy::Aux(k) => self.outputs[h] = self.aux[k].clone(),
                HeadCopy::Head(first) => self.outputs[h] = self.outputs[first].clone(),
                HeadCopy::Written => {}
            }
        }
        self.last_forward = Some(is_train);
        Ok(())
    }

    /// `forward(false)` on the expanded graph, lent this executor's
    /// arrays and pool for the run (moved, not shared: an array shared
    /// with it would be copied by the next `arg_mut`).
    fn forward_expanded(&mut self) -> Result<()> {
        use std::mem::take;
        let inner = self.expanded.as_mut().expect("checked");
        inner.args = take(&mut self.args);
        inner.aux = take(&mut self.aux);
        inner.outputs = take(&mut self.outputs);
        inner.pool = take(&mut self.pool);
        let result = inner.forward(false);
        self.args = take(&mut inner.args);
        self.aux = take(&mut inner.aux);
        self.outputs = take(&mut inner.outputs);
        self.pool = take(&mut inner.pool);
        self.last_forward = result.is_ok().then_some(false);
        result
    }

    /// Runs the backward pass of the last `forward(true)`. `head_grads`
    /// has one array per output, or is empty for ones.
    /// [`Executor::backward_with_hook`] also says when each gradient is
    /// final.
    pub fn backward(&mut self, head_grads: &[NDArray]) -> Result<()> {
        self.check_trained()?;
        let Some(plan) = self.training.take() else {
            // No argument asks for a gradient: nothing to do.
            return Ok(());
        };
        let result = self.backward_with(&plan, head_grads, &mut |_, _| Ok(()));
        self.training = Some(plan);
        result
    }

    fn check_trained(&self) -> Result<()> {
        if self.last_forward != Some(true) {
            return Err(Error::graph(
                "backward needs a preceding forward(is_train = true)",
            ));
        }
        Ok(())
    }

    /// The backward steps of `plan`, with `after` as in [`Executor::run`].
    fn backward_with(
        &mut self,
        plan: &Plan,
        head_grads: &[NDArray],
        after: &mut impl FnMut(&Executor, usize) -> Result<()>,
    ) -> Result<()> {
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
        self.ctx.is_train = true;
        self.run(plan, plan.backward_start..plan.steps.len(), heads, after)
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
                Instr::Forward {
                    node,
                    ins,
                    out,
                    output,
                } => {
                    cost += self.graph.nodes[*node].op.map_or(1, |o| o.cost as usize);
                    TileInstr::Forward {
                        fns: output_fns(fns(*node)?, *output)?,
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

    /// Runs `plan.steps[range]`, one function per kind of step, calling
    /// `after(self, s)` before the first step (`s = range.start`) and after
    /// each (`s` = the index of the next step): the gradient-ready hook.
    ///
    /// Per-call lists live inline ([`Ptrs`]): a six-op fused forward made
    /// 35 allocator calls with `Vec`s, 3 now (`tests/tests/fusion.rs`).
    fn run(
        &mut self,
        plan: &Plan,
        range: std::ops::Range<usize>,
        head_grads: &[NDArray],
        after: &mut impl FnMut(&Executor, usize) -> Result<()>,
    ) -> Result<()> {
        let at = self.place(plan, head_grads)?;
        after(self, range.start)?;
        for s in range {
            match &plan.steps[s] {
                Step::Forward {
                    node,
                    inputs,
                    out,
                    more_outs,
                    aux,
                    in_place,
                } => {
                    let step = ForwardStep {
                        node: *node,
                        inputs,
                        out: *out,
                        more_outs,
                        aux,
                        in_place: *in_place,
                    };
                    self.run_forward(&at, &step)?
                }
                Step::Fused(f) => self.run_fused(&at, f)?,
                Step::Seed { head, dst, req } => {
                    let src = view_from(at.head_grads[*head], &plan.values[*dst]);
                    seed(&src, &mut at.view_mut(*dst), *req)?;
                }
                Step::Backward {
                    node,
                    out_grad,
                    more_out_grads,
                    output,
                    more_outputs,
                    inputs,
                    grads,
                    in_place,
                } => {
                    let step = BackwardStep {
                        node: *node,
                        out_grad: *out_grad,
                        more_out_grads,
                        output: *output,
                        more_outputs,
                        inputs,
                        grads,
                        in_place: *in_place,
                    };
                    self.run_backward(&at, &step)?;
                }
            }
            after(self, s + 1)?;
        }
        Ok(())
    }

    /// The base pointers of every place a value of `plan` can live.
    /// Arguments and head gradients are only read; outputs and gradient
    /// buffers are made unique first so that no other handle sees the
    /// writes.
    fn place<'p>(&mut self, plan: &'p Plan, head_grads: &[NDArray]) -> Result<Placed<'p>> {
        Ok(Placed {
            plan,
            args: self.args.iter().map(|a| a.blob().as_ptr()).collect(),
            aux: self
                .aux
                .iter_mut()
                .map(NDArray::make_unique_ptr)
                .collect::<Result<_>>()?,
            head_grads: head_grads.iter().map(|a| a.blob().as_ptr()).collect(),
            outputs: self
                .outputs
                .iter_mut()
                .map(NDArray::make_unique_ptr)
                .collect::<Result<_>>()?,
            grads: self
                .grads
                .iter_mut()
                .map(|g| g.as_mut().map(NDArray::make_unique_ptr).transpose())
                .collect::<Result<_>>()?,
            pool: self
                .pool
                .iter_mut()
                .map(|b| b.bytes_mut().as_mut_ptr())
                .collect(),
            sink: self.sink.bytes_mut().as_mut_ptr(),
            sink_slot: self.sink_layout.slot_bytes,
        })
    }

    /// One op's forward kernel: its outputs, then its aux states, which
    /// it may update only in training (their request is `Null` otherwise).
    fn run_forward(&self, at: &Placed<'_>, step: &ForwardStep<'_>) -> Result<()> {
        let n = step.node;
        let op = self.graph.nodes[n].op.expect("op node");
        let k = self.kernels[n].expect("op node");
        if !step.in_place {
            at.view_mut(step.out).poison_if_asked();
        }
        let ins: Ptrs<TBlob<'_>> = step.inputs.iter().map(|&v| at.view(v)).collect();
        let req = if step.in_place {
            OpReqType::WriteInplace
        } else {
            OpReqType::WriteTo
        };
        let aux_req = if self.ctx.is_train {
            OpReqType::WriteInplace
        } else {
            OpReqType::Null
        };
        let mut outs: Ptrs<TBlobMut<'_>> = Ptrs::new();
        let mut reqs: Ptrs<OpReqType> = Ptrs::new();
        outs.push(at.view_mut(step.out));
        reqs.push(req);
        for &(v, r) in step.more_outs {
            outs.push(at.view_mut(v));
            reqs.push(r);
        }
        for &v in step.aux {
            outs.push(at.view_mut(v));
            reqs.push(aux_req);
        }
        let call = OpCall {
            op,
            env: &self.envs[n],
            ctx: &self.ctx,
        };
        (k.forward)(&call, &ins, &mut outs, &reqs).map_err(|e| self.graph.nodes[n].error(e))
    }

    /// A fused step: a tile program alone, feeding a row sink, or run slab
    /// by slab behind a `dot` or ahead of a reduction.
    fn run_fused(&self, at: &Placed<'_>, f: &plan::Fused) -> Result<()> {
        let first = f.nodes.first().copied().unwrap_or(0);
        let node_err = |e: Error| self.graph.nodes[first].error(e);
        let prog = self.tile_program(f)?;
        if f.reduce.is_none() && f.head.is_none() {
            let ins: Ptrs<TBlob<'_>> = f.inputs.iter().map(|&v| at.view(v)).collect();
            let mut outs: Ptrs<TBlobMut<'_>> =
                f.outputs.iter().map(|&(v, _)| at.view_mut(v)).collect();
            return run_program(&prog, &ins, &mut outs, self.ctx.parallel).map_err(node_err);
        }
        if let (Some(t), None) = (&f.reduce, &f.head)
            && let Some((reduction, k)) = self.row_sink(at.plan, f, t)?
        {
            // The reduction eats the program's tiles: its input is never
            // stored, not even to a slab buffer.
            let (prog, slot) = without_output(prog, k);
            let ins: Ptrs<TBlob<'_>> = f.inputs.iter().map(|&v| at.view(v)).collect();
            let mut outs: Ptrs<TBlobMut<'_>> = f
                .outputs
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != k)
                .map(|(_, &(v, _))| at.view_mut(v))
                .collect();
            let sink = RowSink {
                slot,
                reduction,
                dst: at.view_mut(t.out),
            };
            let space = &at.plan.values[t.scratch].shape;
            return run_program_reducing(&prog, &ins, &mut outs, sink, space, self.ctx.parallel)
                .map_err(node_err);
        }
        self.run_slabs(at, f, &prog).map_err(|e| match e {
            SlabError::Program(e) => node_err(e),
            SlabError::Op(n, e) => self.graph.nodes[n].error(e),
        })
    }

    /// A fused step with a slabbed `dot` head or reduction tail.
    fn run_slabs(
        &self,
        at: &Placed<'_>,
        f: &plan::Fused,
        prog: &TileProgram<'_>,
    ) -> std::result::Result<(), SlabError> {
        // Base addresses (plain integers, so that the slab closure may
        // cross threads) of what the slabs view; `None` marks the head's
        // output or the reduction's input, which lives in a per-thread slab
        // buffer instead.
        let scratch = f.head.as_ref().map(|h| h.scratch);
        let tail_in = f.reduce.as_ref().map(|t| t.scratch);
        let placed =
            |v: ValueId, skip: Option<ValueId>| (Some(v) != skip).then(|| (v, at.ptr(v) as usize));
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
            let ins = h.inputs.iter().map(|&v| (v, at.ptr(v) as usize)).collect();
            slab_op(h.node, ins)
        });
        let tail = f
            .reduce
            .as_ref()
            .map(|t| slab_op(t.node, vec![(t.out, at.ptr(t.out) as usize)]));
        // `fixed`: a head's slabs start at multiples of its slab rows
        // whatever the thread split, because the product's rounding
        // depends on how many rows one call gets.
        let (space, rows, extra_cost, fixed) = match (&f.head, &f.reduce) {
            (Some(h), None) => (h.scratch, h.rows, h.cost, true),
            (None, Some(t)) => (t.scratch, t.rows, 0, false),
            // The slab buffer would be both read and written.
            _ => {
                return Err(SlabError::Program(Error::graph(
                    "a fused step with both a slabbed dot and a slabbed reduction",
                )));
            }
        };
        let slabs = Slabs {
            plan: at.plan,
            space,
            rows,
            fixed,
            cost: prog.cost + extra_cost,
            ctx: RunContext {
                parallel: false,
                ..self.ctx
            },
            prog,
            inputs: &inputs,
            outputs: &outputs,
            head,
            tail,
        };
        slabs.run(self.ctx.parallel)
    }

    /// One op's backward kernel. Inputs that share a gradient buffer
    /// (`f(x, x)`) get their gradients in separate calls, in order, so each
    /// write sees the previous one (WriteTo then AddTo).
    fn run_backward(&self, at: &Placed<'_>, step: &BackwardStep<'_>) -> Result<()> {
        let n = step.node;
        let op = self.graph.nodes[n].op.expect("op node");
        let k = self.kernels[n].expect("op node");
        let backward = k
            .backward
            .ok_or_else(|| self.graph.nodes[n].error(Error::NoGradient { op: op.name.into() }))?;
        let call = OpCall {
            op,
            env: &self.envs[n],
            ctx: &self.ctx,
        };
        for group in gradient_calls(step.grads) {
            let out_grads: crate::GradBlobs<'_> = std::iter::once(step.out_grad)
                .chain(step.more_out_grads.iter().copied())
                .map(|g| g.map(|v| at.view(v)))
                .collect();
            // Every output, for an op with several that reads them.
            let outputs: crate::OutputBlobs<'_> = match step.more_outputs {
                [] => Default::default(),
                more => step
                    .output
                    .iter()
                    .chain(more)
                    .map(|&v| at.view(v))
                    .collect(),
            };
            let out_grad = match &out_grads[0] {
                Some(g) => g.clone(),
                None => TBlob::empty(self.dtypes[n]),
            };
            let args = GradArgs {
                out_grad,
                output: step.output.map(|v| at.view(v)),
                inputs: step.inputs.iter().map(|x| x.map(|v| at.view(v))).collect(),
                out_grads,
                outputs,
            };
            let mut blobs = Vec::with_capacity(step.grads.len());
            let mut reqs = Vec::with_capacity(step.grads.len());
            for (i, g) in step.grads.iter().enumerate() {
                match g {
                    Some((v, r)) if group.contains(&i) => {
                        let req = if i == 0 && step.in_place {
                            OpReqType::WriteInplace
                        } else {
                            *r
                        };
                        let mut blob = at.view_mut(*v);
                        if req == OpReqType::WriteTo {
                            blob.poison_if_asked();
                        }
                        blobs.push(blob);
                        reqs.push(req);
                    }
                    _ => {
                        let src = self.graph.nodes[n].inputs[i];
                        blobs.push(at.sink_slot(i, self.dtypes[src], &self.shapes[src]));
                        reqs.push(OpReqType::Null);
                    }
                }
            }
            backward(&call, &args, &mut blobs, &reqs).map_err(|e| self.graph.nodes[n].error(e))?;
        }
        Ok(())
    }
}

/// Where an output's array comes from after a forward pass.
#[derive(Clone, Copy, Debug)]
enum HeadCopy {
    /// The step making it wrote it.
    Written,
    /// It is argument `k`.
    Arg(usize),
    /// It is aux state `k`.
    Aux(usize),
    /// Its node is also an earlier output, which holds the result.
    Head(usize),
}

/// Each output's [`HeadCopy`], found by index rather than by search so
/// that many outputs stay linear.
fn head_copies(g: &Graph) -> Vec<HeadCopy> {
    let arg_of: HashMap<usize, usize> = g.args.iter().enumerate().map(|(k, &a)| (a, k)).collect();
    let aux_of: HashMap<usize, usize> = g.aux.iter().enumerate().map(|(k, &a)| (a, k)).collect();
    let mut first: HashMap<usize, usize> = HashMap::new();
    g.heads
        .iter()
        .enumerate()
        .map(|(h, &n)| match (arg_of.get(&n), aux_of.get(&n)) {
            (Some(&k), _) => HeadCopy::Arg(k),
            (_, Some(&k)) => HeadCopy::Aux(k),
            _ => match *first.entry(n).or_insert(h) {
                f if f == h => HeadCopy::Written,
                f => HeadCopy::Head(f),
            },
        })
        .collect()
}

/// A forward step's fields ([`Step::Forward`]).
struct ForwardStep<'s> {
    node: usize,
    inputs: &'s [ValueId],
    out: ValueId,
    more_outs: &'s [(ValueId, OpReqType)],
    aux: &'s [ValueId],
    in_place: bool,
}

/// A backward step's fields ([`Step::Backward`]).
struct BackwardStep<'s> {
    node: usize,
    out_grad: Option<ValueId>,
    more_out_grads: &'s [Option<ValueId>],
    output: Option<ValueId>,
    more_outputs: &'s [ValueId],
    inputs: &'s [Option<ValueId>],
    grads: &'s [Option<(ValueId, OpReqType)>],
    in_place: bool,
}

/// The inputs of a backward step grouped into calls: consecutive inputs
/// go in one call unless one shares a gradient buffer with an input
/// already in it.
fn gradient_calls(grads: &[Option<(ValueId, OpReqType)>]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, g) in grads.iter().enumerate() {
        let Some((v, _)) = g else { continue };
        let clash = groups
            .last()
            .is_some_and(|grp| grp.iter().any(|&j| grads[j].is_some_and(|(w, _)| w == *v)));
        match groups.last_mut() {
            Some(grp) if !clash => grp.push(i),
            _ => groups.push(vec![i]),
        }
    }
    groups
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

/// The entry points that compute output `k` of an op: its own for output
/// 0, else those of [`crate::kernel::TileFns::more_outputs`] (no gradient
/// or lane: fused gradients and code generation see one output).
fn output_fns(fns: crate::kernel::TileFns, k: usize) -> Result<crate::kernel::TileFns> {
    if k == 0 {
        return Ok(fns);
    }
    let &(f32_fn, f64_fn) = fns
        .more_outputs
        .get(k - 1)
        .ok_or_else(|| Error::graph(format!("no tile kernel for output {k}")))?;
    Ok(crate::kernel::TileFns {
        forward_f32: f32_fn,
        forward_f64: f64_fn,
        backward_f32: None,
        backward_f64: None,
        lane: None,
        more_outputs: &[],
    })
}
