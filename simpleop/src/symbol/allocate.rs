//! Pass 4, memory planning: walks the steps in order. A value's buffer
//! returns to the free list after its last read; a new value takes the
//! best-fitting free buffer (growing one if none is big enough) or a new
//! one. A declared in-place option is used when the overwritten value is a
//! planned buffer read for the last time by this very step, with the same
//! shape and dtype.

use std::collections::BTreeSet;

use super::config::MemoryStats;
use super::steps::{Loc, Plan, PlanInput, Step, Value, ValueId, splits};
use crate::{OpForm, OpReqType};

/// Places every unplaced value in the pool, reusing buffers by liveness
/// and taking declared in-place options when planning is on.
/// Gives every [`Loc::Unplaced`] value a buffer and fills in the plan's
/// [`MemoryStats`]; `fused_away` are the values lowering kept out of memory.
pub(crate) fn allocate(plan: &mut Plan, p: &PlanInput<'_>, fused_away: &[ValueId]) {
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
    let fused_bytes = fused_away.iter().map(|&v| plan.values[v].bytes()).sum();
    plan.stats = MemoryStats {
        planned_bytes: buffers.iter().sum::<usize>() + head_bytes + sink,
        unplanned_bytes: unplanned_bytes + head_bytes + sink,
        inplace_writes,
        buffers: buffers.len() + n_heads,
        fused_values: fused_away.len(),
        fused_bytes,
    };
    plan.stats.unplanned_bytes += fused_bytes;
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
