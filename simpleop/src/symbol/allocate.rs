//! Pass 4, memory planning: walks the steps in order. A value's buffer
//! returns to the free list after its last read; a new value takes the
//! best-fitting free buffer (growing one if none is big enough) or a new
//! one. A declared in-place option is used when the overwritten value is a
//! planned buffer read for the last time by this very step, with the same
//! shape and dtype.

use std::collections::BTreeSet;

use super::config::MemoryStats;
use super::graph::Graph;
use super::steps::{Loc, Plan, PlanInput, Step, Value, ValueId, splits};
use crate::{OpForm, OpReqType};

/// Places every unplaced value in the pool, reusing buffers by liveness
/// and taking declared in-place options when planning is on.
/// Gives every [`Loc::Unplaced`] value a buffer and fills in the plan's
/// [`MemoryStats`]; `fused_away` are the values lowering kept out of memory.
pub(crate) fn allocate(plan: &mut Plan, p: &PlanInput<'_>, fused_away: &[ValueId]) {
    let last_read = last_reads(plan);
    let unplanned_bytes = plan
        .values
        .iter()
        .filter(|v| v.loc == Loc::Unplaced)
        .map(Value::bytes)
        .sum();
    let mut free = FreeList::default();
    let mut buffers: Vec<usize> = Vec::new();
    let mut inplace_writes = 0usize;
    for s in 0..plan.steps.len() {
        let transferred = if p.memory_planning {
            take_in_place(plan, p.graph, s, &last_read)
        } else {
            None
        };
        inplace_writes += usize::from(transferred.is_some());
        let writes = plan.steps[s].writes();
        for &v in &writes {
            if plan.values[v].loc != Loc::Unplaced {
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
            // Written and never read (an output nothing uses): free now.
            let unread = writes.iter().filter(|&&v| last_read[v].is_none());
            for v in plan.steps[s].reads().into_iter().chain(unread.copied()) {
                if last_read[v].is_none_or(|r| r == s)
                    && Some(v) != transferred
                    && let Loc::Pool(b) = plan.values[v].loc
                {
                    free.push(b, &buffers);
                }
            }
        }
    }
    plan.stats = memory_stats(plan, &buffers, unplanned_bytes, inplace_writes, fused_away);
    plan.buffers = buffers;
}

/// Per value, the last step that reads it.
fn last_reads(plan: &Plan) -> Vec<Option<usize>> {
    let mut last_read = vec![None; plan.values.len()];
    for (s, step) in plan.steps.iter().enumerate() {
        for v in step.reads() {
            last_read[v] = Some(s);
        }
    }
    last_read
}

/// Takes step `s`'s declared in-place option when it applies: the value
/// it overwrites (its first input, or for a gradient its out_grad) is a
/// pool buffer read for the last time here, of the result's shape and
/// dtype. The result then takes that buffer; returns the overwritten value.
fn take_in_place(
    plan: &mut Plan,
    g: &Graph,
    s: usize,
    last_read: &[Option<usize>],
) -> Option<ValueId> {
    let (src, dst, in_place) = match &mut plan.steps[s] {
        Step::Forward {
            node,
            inputs,
            out,
            in_place,
            ..
        } => {
            let op = g.nodes[*node].op.expect("op node");
            let &[src, ref rest @ ..] = inputs.as_slice() else {
                return None;
            };
            if op.inplace.forward.is_none()
                || op.form != OpForm::Elementwise
                || !op.is_simple()
                || rest.contains(&src)
            {
                return None;
            }
            (src, *out, in_place)
        }
        Step::Backward {
            node,
            out_grad,
            grads,
            in_place,
            ..
        } => {
            let op = g.nodes[*node].op.expect("op node");
            let Some(Some((g0, OpReqType::WriteTo))) = grads.first().copied() else {
                return None;
            };
            let Some(out_grad) = out_grad else {
                return None;
            };
            if op.inplace.gradient.is_none() || op.form != OpForm::Elementwise || splits(grads) {
                return None;
            }
            (*out_grad, g0, in_place)
        }
        Step::Seed { .. } | Step::Fused(_) => return None,
    };
    let (sv, dv) = (&plan.values[src], &plan.values[dst]);
    let (Loc::Pool(b), Loc::Unplaced) = (sv.loc, dv.loc) else {
        return None;
    };
    if last_read[src] != Some(s) || sv.shape != dv.shape || sv.dtype != dv.dtype {
        return None;
    }
    plan.values[dst].loc = Loc::Pool(b);
    *in_place = true;
    Some(src)
}

/// The plan's memory figures: pool `buffers` plus the heads and the sink,
/// against what a buffer per value (`unplanned_bytes` of pool values)
/// would take, with the values fusion kept out of memory.
fn memory_stats(
    plan: &Plan,
    buffers: &[usize],
    unplanned_bytes: usize,
    inplace_writes: usize,
    fused_away: &[ValueId],
) -> MemoryStats {
    let heads = || plan.values.iter().filter(|v| matches!(v.loc, Loc::Head(_)));
    let head_bytes: usize = heads().map(Value::bytes).sum();
    let sink = plan.sink.bytes();
    let fused_bytes: usize = fused_away.iter().map(|&v| plan.values[v].bytes()).sum();
    MemoryStats {
        planned_bytes: buffers.iter().sum::<usize>() + head_bytes + sink,
        unplanned_bytes: unplanned_bytes + head_bytes + sink + fused_bytes,
        inplace_writes,
        buffers: buffers.len() + heads().count(),
        fused_values: fused_away.len(),
        fused_bytes,
    }
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
