//! The execution plan: autodiff schedule plus memory planning.
//!
//! Every array the graph produces is a *value*. Forward values are op
//! outputs; gradient values are the gradients of op outputs. Arguments,
//! the user's gradient buffers, the outputs and the head gradients live in
//! arrays the executor owns or borrows; everything else is planned into a
//! pool of buffers.
//!
//! Backward is built from each op's registered gradient. Its [`GradSpec`]
//! says what the gradient reads, and only that is kept alive past the
//! forward pass. A value used several times receives its gradients as one
//! `WriteTo` followed by `AddTo` writes into the same buffer; no add nodes.
//!
//! Memory planning walks the steps in order. A value's buffer returns to
//! the free list after its last read; a new value takes the best-fitting
//! free buffer (growing one if none is big enough) or a new one. A declared
//! in-place option is used when the overwritten value is a planned buffer
//! read for the last time by this very step, with the same shape and dtype.
//!
//! [`GradSpec`]: crate::GradSpec

use std::collections::BTreeSet;

use crate::{DType, Error, OpForm, OpReqType, Result, Shape};

use super::executor::{GradReq, MemoryStats};
use super::graph::Graph;

pub(crate) type ValueId = usize;

/// Where a value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loc {
    /// Not placed yet (planned into the pool).
    Unplaced,
    /// Argument `k` (in [`Graph::args`] order); never written.
    Arg(usize),
    /// The user's gradient buffer of argument `k`.
    ArgGrad(usize),
    /// The executor's output array `h`.
    Head(usize),
    /// The head gradient `h` passed to `backward`; never written.
    HeadGrad(usize),
    /// Planned buffer `b`.
    Pool(usize),
    /// Lives only in the tiles of a fused step: no buffer.
    Fused,
}

#[derive(Clone, Debug)]
pub(crate) struct Value {
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
    pub(crate) loc: Loc,
}

impl Value {
    pub(crate) fn bytes(&self) -> usize {
        self.shape.size() * self.dtype.size()
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// Runs node `node`'s forward kernel.
    Forward {
        node: usize,
        inputs: Vec<ValueId>,
        out: ValueId,
        in_place: bool,
    },
    /// Writes head gradient `head` into `dst` per `req`.
    Seed {
        head: usize,
        dst: ValueId,
        req: OpReqType,
    },
    /// Runs node `node`'s backward kernel.
    Backward {
        node: usize,
        out_grad: ValueId,
        output: Option<ValueId>,
        inputs: Vec<Option<ValueId>>,
        /// Per input: the gradient value and request; `None` is `Null`.
        grads: Vec<Option<(ValueId, OpReqType)>>,
        in_place: bool,
    },
    /// Runs several elementwise kernels tile by tile (fusion), and maybe
    /// a `dot` ahead of them or a reduction behind them, slab by slab.
    Fused(super::fuse::Fused),
}

impl Step {
    pub(crate) fn reads(&self) -> Vec<ValueId> {
        match self {
            Step::Forward { inputs, .. } => inputs.clone(),
            Step::Fused(f) => f.reads(),
            Step::Seed { .. } => Vec::new(),
            Step::Backward {
                out_grad,
                output,
                inputs,
                grads,
                ..
            } => {
                let mut r = vec![*out_grad];
                r.extend(output);
                r.extend(inputs.iter().flatten());
                // AddTo reads what it accumulates into.
                r.extend(
                    grads
                        .iter()
                        .flatten()
                        .filter(|(_, q)| *q == OpReqType::AddTo)
                        .map(|(v, _)| *v),
                );
                r
            }
        }
    }
    pub(crate) fn writes(&self) -> Vec<ValueId> {
        match self {
            Step::Forward { out, .. } => vec![*out],
            Step::Fused(f) => f.writes(),
            Step::Seed { dst, .. } => vec![*dst],
            Step::Backward { grads, .. } => grads.iter().flatten().map(|(v, _)| *v).collect(),
        }
    }
}

/// A complete plan for one mode (inference or training).
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) values: Vec<Value>,
    pub(crate) steps: Vec<Step>,
    /// Byte size of each pool buffer.
    pub(crate) buffers: Vec<usize>,
    /// Scratch for the gradient blobs a backward call must not write.
    pub(crate) sink: SinkLayout,
    /// Forward value of each node.
    pub(crate) forward_value: Vec<ValueId>,
    /// Gradient value of each node, when computed.
    pub(crate) grad_value: Vec<Option<ValueId>>,
    /// Index of the first backward step (`steps.len()` for inference).
    pub(crate) backward_start: usize,
    pub(crate) stats: MemoryStats,
}

/// Scratch for gradient blobs that a backward call receives but must not
/// write: inputs with a `Null` request, and, in a step whose gradients go
/// in several calls because inputs share a gradient buffer (`f(x, x)`,
/// `f(x, y, x)`), every input outside the current call. Input `i` of a
/// step gets slot `i`, so no two blobs of one call overlap, whatever the
/// op's arity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SinkLayout {
    /// Bytes per slot: the largest such input, in whole 64-byte lines.
    pub(crate) slot_bytes: usize,
    /// Slots: the most inputs of any backward step.
    pub(crate) slots: usize,
}

impl SinkLayout {
    pub(crate) fn bytes(&self) -> usize {
        self.slot_bytes.saturating_mul(self.slots)
    }
    /// The layout big enough for both.
    pub(crate) fn max(self, other: SinkLayout) -> SinkLayout {
        SinkLayout {
            slot_bytes: self.slot_bytes.max(other.slot_bytes),
            slots: self.slots.max(other.slots),
        }
    }
}

/// Whether two inputs of a backward step share a gradient buffer, so that
/// the executor writes their gradients in separate calls.
pub(crate) fn splits(grads: &[Option<(ValueId, OpReqType)>]) -> bool {
    let written: Vec<ValueId> = grads.iter().flatten().map(|&(v, _)| v).collect();
    (1..written.len()).any(|i| written[..i].contains(&written[i]))
}

/// The sink every backward step of `steps` fits in.
fn sink_layout(steps: &[Step], g: &Graph, p: &PlanInput<'_>) -> SinkLayout {
    let mut sink = SinkLayout::default();
    for s in steps {
        let Step::Backward { node, grads, .. } = s else {
            continue;
        };
        let inputs = &g.nodes[*node].inputs;
        sink.slots = sink.slots.max(inputs.len());
        let split = splits(grads);
        for (&src, grad) in inputs.iter().zip(grads) {
            if split || grad.is_none() {
                let bytes = p.shapes[src].size().saturating_mul(p.dtypes[src].size());
                sink.slot_bytes = sink.slot_bytes.max(bytes.next_multiple_of(64));
            }
        }
    }
    sink
}

/// What the planner needs to know about the bound graph.
pub(crate) struct PlanInput<'a> {
    pub(crate) graph: &'a Graph,
    pub(crate) shapes: &'a [Shape],
    pub(crate) dtypes: &'a [DType],
    /// Per argument (in [`Graph::args`] order).
    pub(crate) grad_req: &'a [GradReq],
    pub(crate) train: bool,
    pub(crate) memory_planning: bool,
    /// The fusion groups, when fusion is on.
    pub(crate) fusion: Option<&'a super::fuse::Grouping>,
    /// Per node: the op has tile gradient entry points.
    pub(crate) backward_tile: &'a [bool],
}

pub(crate) fn plan(p: &PlanInput<'_>) -> Result<Plan> {
    let g = p.graph;
    let n_nodes = g.nodes.len();
    let mut values: Vec<Value> = Vec::new();
    let new_value = |values: &mut Vec<Value>, n: usize, loc: Loc| {
        values.push(Value {
            shape: p.shapes[n].clone(),
            dtype: p.dtypes[n],
            loc,
        });
        values.len() - 1
    };
    // Forward values: arguments in place, heads in the output arrays.
    let arg_index: Vec<Option<usize>> = {
        let mut v = vec![None; n_nodes];
        for (k, &a) in g.args.iter().enumerate() {
            v[a] = Some(k);
        }
        v
    };
    let heads = head_refs(g);
    let mut forward_value = Vec::with_capacity(n_nodes);
    for (n, arg) in arg_index.iter().enumerate() {
        let loc = match *arg {
            Some(k) => Loc::Arg(k),
            None => match heads[n].first() {
                Some(&h) => Loc::Head(h),
                None => Loc::Unplaced,
            },
        };
        forward_value.push(new_value(&mut values, n, loc));
    }
    let mut steps: Vec<Step> = g
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| !node.is_variable())
        .map(|(n, node)| Step::Forward {
            node: n,
            inputs: node.inputs.iter().map(|&i| forward_value[i]).collect(),
            out: forward_value[n],
            in_place: false,
        })
        .collect();
    let backward_start = steps.len();
    let mut grad_value: Vec<Option<ValueId>> = vec![None; n_nodes];
    if p.train {
        backward_steps(
            p,
            &arg_index,
            &forward_value,
            &mut grad_value,
            &mut values,
            &mut steps,
        )?;
    }
    let sink = sink_layout(&steps, g, p);
    let mut plan = Plan {
        values,
        steps,
        buffers: Vec::new(),
        sink,
        forward_value,
        grad_value,
        backward_start,
        stats: MemoryStats::default(),
    };
    let fused_away = match p.fusion {
        Some(grouping) => {
            super::fuse::rewrite(&mut plan, g, grouping, p.backward_tile, p.shapes, p.dtypes)
        }
        None => Vec::new(),
    };
    for &v in &fused_away {
        plan.values[v].loc = Loc::Fused;
    }
    allocate(&mut plan, p);
    plan.stats.fused_values = fused_away.len();
    plan.stats.fused_bytes = fused_away.iter().map(|&v| plan.values[v].bytes()).sum();
    plan.stats.unplanned_bytes += plan.stats.fused_bytes;
    Ok(plan)
}

fn backward_steps(
    p: &PlanInput<'_>,
    arg_index: &[Option<usize>],
    forward_value: &[ValueId],
    grad_value: &mut [Option<ValueId>],
    values: &mut Vec<Value>,
    steps: &mut Vec<Step>,
) -> Result<()> {
    let g = p.graph;
    let n_nodes = g.nodes.len();
    // Which node outputs need a gradient: a path to an argument asking one.
    let mut needs = vec![false; n_nodes];
    for (n, node) in g.nodes.iter().enumerate() {
        needs[n] = match arg_index[n] {
            Some(k) => p.grad_req[k] != GradReq::Null,
            None => node.inputs.iter().any(|&i| needs[i]),
        };
        if needs[n] && !node.is_variable() {
            let op = node.op.expect("not a variable");
            if op.gradient.is_none() {
                let above = ancestors(g, n);
                let wanted = g
                    .args
                    .iter()
                    .enumerate()
                    .find(|&(k, &a)| p.grad_req[k] != GradReq::Null && above[a])
                    .map(|(_, &a)| g.nodes[a].name.as_str())
                    .unwrap_or("an argument");
                return Err(node.error(Error::invalid(
                    op.name,
                    "grad_req",
                    format!(
                        "`{wanted}` asks for a gradient that flows through this op, which has none; set its grad_req to null"
                    ),
                )));
            }
        }
    }
    for (h, &n) in g.heads.iter().enumerate() {
        if needs[n] && !p.dtypes[n].is_float() {
            return Err(g.nodes[n].error(Error::invalid(
                g.nodes[n].op_name(),
                "output",
                format!(
                    "head {h} has dtype {}, gradients need a float dtype",
                    p.dtypes[n]
                ),
            )));
        }
    }
    let consumers = g.consumers();
    let heads_of = head_refs(g);
    // Gradient values: the user's buffers for arguments; a head gradient
    // read directly when it is the only contribution; planned otherwise.
    for n in 0..n_nodes {
        if !needs[n] {
            continue;
        }
        let loc = match arg_index[n] {
            Some(k) => Loc::ArgGrad(k),
            None => match heads_of[n].as_slice() {
                [h] if consumers[n].is_empty() => Loc::HeadGrad(*h),
                _ => Loc::Unplaced,
            },
        };
        values.push(Value {
            shape: p.shapes[n].clone(),
            dtype: p.dtypes[n],
            loc,
        });
        grad_value[n] = Some(values.len() - 1);
    }
    // Contributions made so far to each node's gradient.
    let mut written = vec![0usize; n_nodes];
    let req_for = |n: usize, written: &mut [usize]| -> OpReqType {
        let first = written[n] == 0;
        written[n] += 1;
        let add = match arg_index[n] {
            Some(k) => p.grad_req[k] == GradReq::Add,
            None => false,
        };
        if add || !first {
            OpReqType::AddTo
        } else {
            OpReqType::WriteTo
        }
    };
    for (h, &n) in g.heads.iter().enumerate() {
        let Some(dst) = grad_value[n] else { continue };
        if values[dst].loc == Loc::HeadGrad(h) {
            continue;
        }
        let req = req_for(n, &mut written);
        steps.push(Step::Seed { head: h, dst, req });
    }
    for n in (0..n_nodes).rev() {
        let node = &g.nodes[n];
        let Some(op) = node.op else { continue };
        if !needs[n] {
            continue;
        }
        let spec = op.gradient.expect("checked above");
        let out_grad = grad_value[n].expect("needed");
        let grads = node
            .inputs
            .iter()
            .map(|&i| grad_value[i].map(|v| (v, req_for(i, &mut written))))
            .collect();
        steps.push(Step::Backward {
            node: n,
            out_grad,
            output: spec.needs_output.then_some(forward_value[n]),
            inputs: node
                .inputs
                .iter()
                .enumerate()
                .map(|(i, &src)| spec.needs_input(i).then_some(forward_value[src]))
                .collect(),
            grads,
            in_place: false,
        });
    }
    Ok(())
}

/// Per node, the heads (output indices) it is, in order.
fn head_refs(g: &Graph) -> Vec<Vec<usize>> {
    let mut refs = vec![Vec::new(); g.nodes.len()];
    for (h, &n) in g.heads.iter().enumerate() {
        refs[n].push(h);
    }
    refs
}

/// Per node, whether it is an ancestor of (or is) node `to`.
fn ancestors(g: &Graph, to: usize) -> Vec<bool> {
    let mut seen = vec![false; g.nodes.len()];
    let mut stack = vec![to];
    while let Some(n) = stack.pop() {
        if !std::mem::replace(&mut seen[n], true) {
            stack.extend(&g.nodes[n].inputs);
        }
    }
    seen
}

/// Places every unplaced value in the pool, reusing buffers by liveness
/// and taking declared in-place options when planning is on.
fn allocate(plan: &mut Plan, p: &PlanInput<'_>) {
    let g = p.graph;
    let n_values = plan.values.len();
    let mut last_read: Vec<Option<usize>> = vec![None; n_values];
    for (s, step) in plan.steps.iter().enumerate() {
        for v in step.reads() {
            last_read[v] = Some(s);
        }
    }
    let planned = |v: ValueId, plan: &Plan| plan.values[v].loc == Loc::Unplaced;
    let mut free = FreeList::default();
    let mut buffers: Vec<usize> = Vec::new();
    let mut unplanned_bytes = 0usize;
    let mut inplace_writes = 0usize;
    for v in 0..n_values {
        if planned(v, plan) {
            unplanned_bytes += plan.values[v].bytes();
        }
    }
    for s in 0..plan.steps.len() {
        let mut transferred: Option<ValueId> = None;
        if p.memory_planning {
            match &mut plan.steps[s] {
                Step::Forward {
                    node,
                    inputs,
                    out,
                    in_place,
                } => {
                    let op = g.nodes[*node].op.expect("op node");
                    if op.inplace.forward.is_some()
                        && op.form == OpForm::Elementwise
                        && !inputs.is_empty()
                    {
                        let src = inputs[0];
                        let (sv, ov) = (&plan.values[src], &plan.values[*out]);
                        if let (Loc::Pool(b), Loc::Unplaced) = (sv.loc, ov.loc)
                            && last_read[src] == Some(s)
                            && !inputs[1..].contains(&src)
                            && sv.shape == ov.shape
                            && sv.dtype == ov.dtype
                        {
                            plan.values[*out].loc = Loc::Pool(b);
                            *in_place = true;
                            transferred = Some(src);
                            inplace_writes += 1;
                        }
                    }
                }
                Step::Backward {
                    node,
                    out_grad,
                    grads,
                    in_place,
                    ..
                } => {
                    let op = g.nodes[*node].op.expect("op node");
                    if let Some(Some((g0, OpReqType::WriteTo))) = grads.first().copied()
                        && op.inplace.gradient.is_some()
                        && op.form == OpForm::Elementwise
                        && !splits(grads)
                    {
                        let (dv, gv) = (&plan.values[*out_grad], &plan.values[g0]);
                        if let (Loc::Pool(b), Loc::Unplaced) = (dv.loc, gv.loc)
                            && last_read[*out_grad] == Some(s)
                            && dv.shape == gv.shape
                            && dv.dtype == gv.dtype
                        {
                            plan.values[g0].loc = Loc::Pool(b);
                            *in_place = true;
                            transferred = Some(*out_grad);
                            inplace_writes += 1;
                        }
                    }
                }
                Step::Seed { .. } | Step::Fused(_) => {}
            }
        }
        for v in plan.steps[s].writes() {
            if !planned(v, plan) {
                continue;
            }
            let need = plan.values[v].bytes();
            let b = if p.memory_planning {
                free.take(&mut buffers, need)
            } else {
                None
            };
            let b = b.unwrap_or_else(|| {
                buffers.push(need);
                buffers.len() - 1
            });
            plan.values[v].loc = Loc::Pool(b);
        }
        if p.memory_planning {
            for v in plan.steps[s].reads() {
                if last_read[v] == Some(s)
                    && Some(v) != transferred
                    && let Loc::Pool(b) = plan.values[v].loc
                {
                    free.push(b, &buffers);
                }
            }
        }
    }
    let head_bytes: usize = plan
        .values
        .iter()
        .filter(|v| matches!(v.loc, Loc::Head(_)))
        .map(Value::bytes)
        .sum();
    let n_heads = plan
        .values
        .iter()
        .filter(|v| matches!(v.loc, Loc::Head(_)))
        .count();
    let sink = plan.sink.bytes();
    plan.stats = MemoryStats {
        planned_bytes: buffers.iter().sum::<usize>() + head_bytes + sink,
        unplanned_bytes: unplanned_bytes + head_bytes + sink,
        inplace_writes,
        buffers: buffers.len() + n_heads,
        ..MemoryStats::default()
    };
    plan.buffers = buffers;
}

/// The free buffers, in the order a plain list would hold them (pushed
/// at the end, taken by swapping the last into the gap), with an index by
/// size so that taking one is logarithmic: a long training chain frees
/// thousands of buffers, and scanning the list per step was quadratic.
#[derive(Default)]
struct FreeList {
    order: Vec<usize>,
    /// (size, position in `order`) of each free buffer.
    by_size: BTreeSet<(usize, usize)>,
    is_free: Vec<bool>,
}

impl FreeList {
    /// Frees buffer `b` (of `sizes[b]` bytes), unless it is free already.
    fn push(&mut self, b: usize, sizes: &[usize]) {
        if self.is_free.len() <= b {
            self.is_free.resize(b + 1, false);
        }
        if !std::mem::replace(&mut self.is_free[b], true) {
            self.by_size.insert((sizes[b], self.order.len()));
            self.order.push(b);
        }
    }

    /// The best-fitting free buffer for `need` bytes: the smallest big
    /// enough (the first in list order among equals), else the largest
    /// (the last among equals), grown.
    fn take(&mut self, sizes: &mut [usize], need: usize) -> Option<usize> {
        let &(size, i) = self
            .by_size
            .range((need, 0)..)
            .next()
            .or_else(|| self.by_size.last())?;
        self.by_size.remove(&(size, i));
        let last = self.order.len() - 1;
        if i != last {
            let moved = self.order[last];
            self.by_size.remove(&(sizes[moved], last));
            self.by_size.insert((sizes[moved], i));
        }
        let b = self.order.swap_remove(i);
        self.is_free[b] = false;
        sizes[b] = sizes[b].max(need);
        Some(b)
    }
}
