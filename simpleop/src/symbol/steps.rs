//! The executor's intermediate form: the *values* a bound graph produces
//! and the *steps* that write them, in order, as the passes build them up:
//! [`super::schedule`] (forward and autodiff steps), [`super::lower`]
//! (fused steps), [`super::allocate`] (buffers). Printed by
//! [`super::dot`].

use crate::{DType, OpReqType, Shape};

use super::config::{GradReq, MemoryStats};
use super::graph::Graph;

pub(crate) type ValueId = usize;

/// Where a value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loc {
    /// Not placed yet (planned into the pool).
    Unplaced,
    /// Argument `k` (in [`Graph::args`] order); never written.
    Arg(usize),
    /// Aux state `k` (in [`Graph::aux`] order); updated in place by the
    /// forward step of its op in training.
    Aux(usize),
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
    /// An output nothing reads, written with a `Null` request: no buffer
    /// (the kernel gets a [`crate::TBlobMut::discarded`] view).
    Discard,
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
        /// The arguments.
        inputs: Vec<ValueId>,
        /// Output 0.
        out: ValueId,
        /// Outputs 1.. of an op with several, each with its request
        /// (`Null` when nothing reads it).
        more_outs: Vec<(ValueId, OpReqType)>,
        /// The aux states, read, and updated in training.
        aux: Vec<ValueId>,
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
        /// The gradient of output 0; `None` when nothing reads that output.
        out_grad: Option<ValueId>,
        /// Outputs 1.. of an op with several: their gradients.
        more_out_grads: Vec<Option<ValueId>>,
        output: Option<ValueId>,
        /// Outputs 1.., when the gradient reads the outputs.
        more_outputs: Vec<ValueId>,
        inputs: Vec<Option<ValueId>>,
        /// Per input: the gradient value and request; `None` is `Null`.
        grads: Vec<Option<(ValueId, OpReqType)>>,
        in_place: bool,
    },
    /// Runs several elementwise kernels tile by tile (fusion), and maybe
    /// a `dot` ahead of them or a reduction behind them, slab by slab.
    Fused(Fused),
}

impl Step {
    pub(crate) fn reads(&self) -> Vec<ValueId> {
        match self {
            Step::Forward { inputs, aux, .. } => inputs.iter().chain(aux).copied().collect(),
            Step::Fused(f) => f.reads(),
            Step::Seed { .. } => Vec::new(),
            Step::Backward {
                out_grad,
                more_out_grads,
                output,
                more_outputs,
                inputs,
                grads,
                ..
            } => {
                let mut r: Vec<ValueId> = out_grad.iter().copied().collect();
                r.extend(more_out_grads.iter().flatten());
                r.extend(output);
                r.extend(more_outputs);
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
            Step::Forward { out, more_outs, .. } => std::iter::once(*out)
                .chain(more_outs.iter().map(|&(v, _)| v))
                .collect(),
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

/// One instruction of a fused step, over slots (see `kernel::fused`).
#[derive(Clone, Debug)]
pub(crate) enum Instr {
    Forward {
        node: usize,
        ins: Vec<usize>,
        out: usize,
        /// Which of the op's outputs it computes (0 but for an
        /// elementwise op with several).
        output: usize,
    },
    Backward {
        node: usize,
        dy: usize,
        y: Option<usize>,
        xs: Vec<Option<usize>>,
        grads: Vec<usize>,
    },
    Store {
        slot: usize,
        output: usize,
        req: OpReqType,
    },
}

/// A fused step: slots `0..inputs.len()` hold the inputs' tiles.
#[derive(Clone, Debug)]
pub(crate) struct Fused {
    pub(crate) nodes: Vec<usize>,
    pub(crate) inputs: Vec<ValueId>,
    /// Distinct values the program writes (the reduction's output is not
    /// among them); the first one's shape is the iteration space.
    pub(crate) outputs: Vec<(ValueId, bool)>,
    pub(crate) slots: usize,
    pub(crate) instrs: Vec<Instr>,
    /// A reduction fed by the program: slab by slab behind it, or tile by
    /// tile when its op has a row form (the executor's `row_sink`).
    pub(crate) reduce: Option<ReduceTail>,
    /// An out-elementwise-fusable op feeding the program, run slab by slab
    /// ahead of it (never together with `reduce`: two complex ops never
    /// merge).
    pub(crate) head: Option<SlabHead>,
}

/// An out-elementwise-fusable op (`dot`) whose output only the program
/// reads, and whose output rows (axis 0) come from the same rows of its
/// first input and all of its other inputs. Per slab of rows it computes
/// its output into a cache-resident buffer that the program then reads, so
/// the output never reaches main memory.
#[derive(Clone, Debug)]
pub(crate) struct SlabHead {
    /// The op node.
    pub(crate) node: usize,
    /// Its inputs: the first is taken row by row, the others whole.
    pub(crate) inputs: Vec<ValueId>,
    /// Its output: one of the program's inputs, never placed in memory.
    pub(crate) scratch: ValueId,
    /// Rows (of axis 0) per slab.
    pub(crate) rows: usize,
    /// Estimated work per output element, for the thread split: the first
    /// input's row length (the multiply-adds of a 2-d product; an
    /// overestimate for an N-d first operand).
    pub(crate) cost: usize,
}

/// A reduction that consumes one output of a fused program, and whose
/// output rows depend only on the same rows of its input (it keeps axis
/// 0). The program and the reduction run over slabs of rows, so the
/// reduction's input only ever exists one cache-sized slab at a time.
#[derive(Clone, Debug)]
pub(crate) struct ReduceTail {
    /// The reduction node.
    pub(crate) node: usize,
    /// Its input: one of the program's outputs, never placed in memory.
    pub(crate) scratch: ValueId,
    /// Its output.
    pub(crate) out: ValueId,
    /// Rows (of axis 0) per slab.
    pub(crate) rows: usize,
}

impl Fused {
    pub(crate) fn reads(&self) -> Vec<ValueId> {
        let scratch = self.head.as_ref().map(|h| h.scratch);
        let mut r: Vec<ValueId> = self
            .inputs
            .iter()
            .copied()
            .filter(|&v| Some(v) != scratch)
            .collect();
        r.extend(self.head.iter().flat_map(|h| h.inputs.iter().copied()));
        r.extend(self.outputs.iter().filter(|(_, add)| *add).map(|(v, _)| *v));
        r
    }
    pub(crate) fn writes(&self) -> Vec<ValueId> {
        let mut w: Vec<ValueId> = self.outputs.iter().map(|(v, _)| *v).collect();
        w.extend(self.reduce.as_ref().map(|t| t.out));
        w
    }
}

/// `shape` with `rows` rows (axis 0 set to `rows`).
pub(crate) fn slab(shape: &Shape, rows: usize) -> Shape {
    let mut dims = shape.dims().to_vec();
    dims[0] = rows;
    Shape::new(dims)
}

/// The members (forward node indices, in the order they run) of each fused
/// gradient chain of a training plan.
pub(crate) fn backward_chains(plan: &Plan) -> impl Iterator<Item = &[usize]> {
    plan.steps[plan.backward_start.min(plan.steps.len())..]
        .iter()
        .filter_map(|st| match st {
            Step::Fused(f) if f.instrs.iter().any(|i| matches!(i, Instr::Backward { .. })) => {
                Some(f.nodes.as_slice())
            }
            _ => None,
        })
}

impl Instr {
    /// Slots this instruction reads.
    pub(crate) fn reads(&self) -> Vec<usize> {
        match self {
            Instr::Forward { ins, .. } => ins.clone(),
            Instr::Backward { dy, y, xs, .. } => std::iter::once(*dy)
                .chain(*y)
                .chain(xs.iter().flatten().copied())
                .collect(),
            Instr::Store { slot, .. } => vec![*slot],
        }
    }
    /// Slots this instruction writes.
    pub(crate) fn writes(&self) -> Vec<usize> {
        match self {
            Instr::Forward { out, .. } => vec![*out],
            Instr::Backward { grads, .. } => grads.clone(),
            Instr::Store { .. } => Vec::new(),
        }
    }
    /// Replaces every slot `s` it names with `map[s]`.
    pub(crate) fn rename(&mut self, map: &[usize]) {
        match self {
            Instr::Forward { ins, out, .. } => {
                ins.iter_mut().for_each(|s| *s = map[*s]);
                *out = map[*out];
            }
            Instr::Backward {
                dy, y, xs, grads, ..
            } => {
                *dy = map[*dy];
                if let Some(y) = y {
                    *y = map[*y];
                }
                xs.iter_mut().flatten().for_each(|s| *s = map[*s]);
                grads.iter_mut().for_each(|s| *s = map[*s]);
            }
            Instr::Store { slot, .. } => *slot = map[*slot],
        }
    }
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
    /// Per node: the op has tile gradient entry points.
    pub(crate) backward_tile: &'a [bool],
}
