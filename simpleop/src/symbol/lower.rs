//! Pass 3, lowering: each fusion group's run of steps (from
//! [`super::group`]) becomes one fused step, a program over slots that the
//! engine runs tile by tile; values produced and consumed inside a group
//! never reach memory.

use std::collections::HashMap;

use crate::{DType, OpReqType, Pattern, Shape};

use super::graph::Graph;
use super::group::{FusionGroup, Grouping, MAX_FUSED, convex, simple};
use super::steps::{
    Fused, Instr, Loc, Plan, PlanInput, ReduceTail, SlabHead, Step, ValueId, backward_chains, slab,
};

/// Replaces each fusion group's run of steps with one fused step, and
/// returns the values that no longer reach memory (now [`Loc::Fused`]).
pub(crate) fn lower(plan: &mut Plan, p: &PlanInput<'_>, grouping: &Grouping) -> Vec<ValueId> {
    let fused_away = rewrite(plan, p.graph, grouping, p.backward_tile, p.shapes, p.dtypes);
    for &v in &fused_away {
        plan.values[v].loc = Loc::Fused;
    }
    fused_away
}

/// Elements per slab of a [`ReduceTail`]: the reduction's input slab
/// (1 MB in f32, 2 MB in f64) stays in L2 between the program writing it
/// and the reduction reading it, and a slab is big enough that the
/// per-slab dispatch is noise. Rows longer than this are not slabbed.
const SLAB_ELEMENTS: usize = 1 << 18;

/// Whether node `n` may run slab by slab over axis 0: its first input has
/// at least two dimensions and as many rows as its output, and for 1, 2
/// and 3 rows of that input (any other inputs whole) its shape function
/// gives those rows of the full output. Several slab sizes, so that an
/// output that merely happens to match one slab size (a reduced axis 0 kept
/// as 1) is not taken; 1, because the last slab may have one row. A `dot`
/// with `transpose_a`, or a `batch_dot` (whose second input would need
/// slicing too), fails this.
fn row_separable(g: &Graph, n: usize, ins: &[Shape], out_shape: &Shape) -> bool {
    let (Some(op), Some(first)) = (g.nodes[n].op, ins.first()) else {
        return false;
    };
    let (dims, out) = (first.dims(), out_shape.dims());
    if dims.len() < 2 || out.is_empty() || out[0] != dims[0] || dims[0] < 2 {
        return false;
    }
    [1usize, 2, 3].iter().all(|&rows| {
        let mut sliced = ins.to_vec();
        sliced[0] = slab(first, rows);
        (op.infer_shape)(op, &sliced, &g.nodes[n].env).is_ok_and(|s| s == slab(out_shape, rows))
    })
}

/// Rows per slab of a value of `shape`, or `None` when there is nothing to
/// slab (empty rows) or a row is longer than a slab (each thread's buffer
/// would be that row, far past the cache).
fn slab_rows(shape: &Shape) -> Option<usize> {
    let row = shape.size() / shape.dims()[0];
    (row > 0 && row <= SLAB_ELEMENTS).then(|| SLAB_ELEMENTS / row)
}

/// Builds fused programs from a run of steps; values produced inside are
/// read from slots, and kept out of memory when nothing else needs them.
struct Builder<'a> {
    plan: &'a Plan,
    /// Reads and writes of each value over the whole plan.
    reads: &'a [usize],
    writes: &'a [usize],
    f: Fused,
    slot_of: HashMap<ValueId, usize>,
    /// Reads of each value by the steps in this program.
    local_reads: HashMap<ValueId, usize>,
    produced: Vec<(ValueId, usize, OpReqType)>,
}

impl<'a> Builder<'a> {
    fn new(plan: &'a Plan, reads: &'a [usize], writes: &'a [usize]) -> Self {
        Builder {
            plan,
            reads,
            writes,
            f: Fused {
                nodes: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                slots: 0,
                instrs: Vec::new(),
                reduce: None,
                head: None,
            },
            slot_of: HashMap::new(),
            local_reads: HashMap::new(),
            produced: Vec::new(),
        }
    }
    fn fresh(&mut self) -> usize {
        self.f.slots += 1;
        self.f.slots - 1
    }
    fn read(&mut self, v: ValueId) -> usize {
        *self.local_reads.entry(v).or_default() += 1;
        if let Some(&s) = self.slot_of.get(&v) {
            return s;
        }
        self.f.inputs.push(v);
        let s = self.fresh();
        self.slot_of.insert(v, s);
        s
    }
    fn write(&mut self, v: ValueId, req: OpReqType) -> usize {
        let s = self.fresh();
        self.produced.push((v, s, req));
        if req == OpReqType::WriteTo && !self.slot_of.contains_key(&v) {
            self.slot_of.insert(v, s);
        }
        s
    }
    /// Input slots must come first: renumber so inputs are `0..k`.
    fn finish(mut self) -> (Fused, Vec<ValueId>) {
        let mut internal = Vec::new();
        // Per slot, the stores of what it holds: (output, req).
        let mut stores: Vec<Vec<(usize, OpReqType)>> = vec![Vec::new(); self.f.slots];
        let mut output_of: HashMap<ValueId, usize> = HashMap::new();
        for &(v, s, req) in &self.produced {
            let keep = self.plan.values[v].loc != Loc::Unplaced
                || req != OpReqType::WriteTo
                || self.writes[v] != 1
                || self.local_reads.get(&v).copied().unwrap_or(0) != self.reads[v];
            if keep {
                let k = match output_of.get(&v) {
                    Some(&k) => {
                        self.f.outputs[k].1 |= req == OpReqType::AddTo;
                        k
                    }
                    None => {
                        self.f.outputs.push((v, req == OpReqType::AddTo));
                        output_of.insert(v, self.f.outputs.len() - 1);
                        self.f.outputs.len() - 1
                    }
                };
                stores[s].push((k, req));
            } else {
                internal.push(v);
            }
        }
        // Stores go right after the instruction producing their slot, so
        // writes to one value keep their order.
        let mut instrs = Vec::new();
        for ins in std::mem::take(&mut self.f.instrs) {
            let written: Vec<usize> = match &ins {
                Instr::Forward { out, .. } => vec![*out],
                Instr::Backward { grads, .. } => grads.clone(),
                Instr::Store { .. } => Vec::new(),
            };
            instrs.push(ins);
            for w in written {
                for &(k, req) in &stores[w] {
                    instrs.push(Instr::Store {
                        slot: w,
                        output: k,
                        req,
                    });
                }
            }
        }
        // Renumber: inputs first in `inputs` order.
        let n_in = self.f.inputs.len();
        let mut map = vec![usize::MAX; self.f.slots];
        for (i, v) in self.f.inputs.iter().enumerate() {
            map[self.slot_of[v]] = i;
        }
        let mut next = n_in;
        for m in map.iter_mut() {
            if *m == usize::MAX {
                *m = next;
                next += 1;
            }
        }
        for ins in &mut instrs {
            ins.rename(&map);
        }
        self.f.slots = reuse_slots(&mut instrs, n_in, next);
        self.f.instrs = instrs;
        (self.f, internal)
    }
}

/// Gives values whose lives do not overlap the same slot, so that a
/// program's working set is its widest point, not its length: every slot
/// is a tile that should stay in L1. Input slots (`0..n_in`) keep theirs.
/// So does a result that no op reads (only stored): the kernel driver may
/// compute it straight into its output, or hand its buffer to a streamed
/// store that runs during the next tile. Returns the number of slots.
fn reuse_slots(instrs: &mut [Instr], n_in: usize, slots: usize) -> usize {
    let mut last = vec![None; slots];
    let mut op_read = vec![false; slots];
    for (i, ins) in instrs.iter().enumerate() {
        for s in ins.reads() {
            last[s] = Some(i);
            op_read[s] |= !matches!(ins, Instr::Store { .. });
        }
    }
    let mut map: Vec<usize> = (0..slots)
        .map(|s| if s < n_in { s } else { usize::MAX })
        .collect();
    let mut free: Vec<usize> = Vec::new();
    let mut count = n_in;
    for (i, ins) in instrs.iter().enumerate() {
        // Results take a slot before this instruction's last reads free
        // theirs: a result never shares a slot with its own inputs.
        // Only-stored results take a slot of their own.
        for w in ins.writes() {
            map[w] = match free.pop() {
                Some(f) if op_read[w] => f,
                f => {
                    free.extend(f);
                    count += 1;
                    count - 1
                }
            };
        }
        let ended = ins
            .reads()
            .into_iter()
            .chain(ins.writes())
            .filter(|&s| s >= n_in && op_read[s] && last[s].is_none_or(|l| l <= i));
        let mut ended: Vec<usize> = ended.collect();
        ended.sort_unstable();
        ended.dedup();
        // Scratch gradients nobody reads end where they are written.
        for s in ins.writes() {
            if last[s].is_none() && !ended.contains(&s) {
                ended.push(s);
            }
        }
        free.extend(ended.into_iter().map(|s| map[s]).rev());
    }
    for ins in instrs.iter_mut() {
        ins.rename(&map);
    }
    count
}

/// Per-value counts of reading and writing steps.
fn counts(plan: &Plan) -> (Vec<usize>, Vec<usize>) {
    let mut reads = vec![0; plan.values.len()];
    let mut writes = vec![0; plan.values.len()];
    for s in &plan.steps {
        for v in s.reads() {
            reads[v] += 1;
        }
        for v in s.writes() {
            writes[v] += 1;
        }
    }
    (reads, writes)
}

/// Whether node `n` can run its gradient on tiles: elementwise with tile
/// gradients, every input of the output's shape and dtype.
fn tile_backward(
    g: &Graph,
    n: usize,
    grouping: &Grouping,
    backward_tile: &[bool],
    shapes: &[Shape],
    dtypes: &[DType],
) -> bool {
    grouping.pattern[n].is_some_and(simple)
        && backward_tile[n]
        && g.nodes[n]
            .inputs
            .iter()
            .all(|&i| shapes[i] == shapes[n] && dtypes[i] == dtypes[n])
}

/// A fusion group that lowers into one fused step: its elementwise members
/// (in order), and the reduction behind or the op ahead of them that runs
/// slab by slab.
struct ForwardGroup {
    members: Vec<usize>,
    tail: Option<ReduceTail>,
    head: Option<SlabHead>,
}

/// What the lowering reads while it rewrites the steps: the plan's values,
/// the graph, its grouping, and per-value counts of reading and writing
/// steps over the plan before rewriting.
struct Lowering<'a> {
    plan: &'a Plan,
    g: &'a Graph,
    grouping: &'a Grouping,
    reads: &'a [usize],
    writes: &'a [usize],
}

/// Rewrites `plan.steps` (before allocation): each group's elementwise
/// members become one fused step at the last member's position; runs of
/// adjacent elementwise gradient steps whose intermediate gradient is read
/// by the next alone become one fused step. Returns the values fused away.
fn rewrite(
    plan: &mut Plan,
    g: &Graph,
    grouping: &Grouping,
    backward_tile: &[bool],
    shapes: &[Shape],
    dtypes: &[DType],
) -> Vec<ValueId> {
    let (reads, writes) = counts(plan);
    let old = std::mem::take(&mut plan.steps);
    let lowering = Lowering {
        plan,
        g,
        grouping,
        reads: &reads,
        writes: &writes,
    };
    let mut fused_away = Vec::new();
    let (steps, backward_start) = lowering.fuse_forward_groups(&old, &mut fused_away);
    let fusable = |st: &Step| match st {
        Step::Backward { node, .. } => {
            tile_backward(g, *node, grouping, backward_tile, shapes, dtypes)
        }
        _ => false,
    };
    let steps = lowering.fuse_backward_chains(&steps, backward_start, fusable, &mut fused_away);
    plan.steps = steps;
    plan.backward_start = backward_start;
    fused_away
}

impl Lowering<'_> {
    /// The groups that lower into a fused step, keyed by the node whose
    /// step they replace (the last member), and per node whether it is a
    /// member of one of them.
    fn forward_groups(&self) -> (HashMap<usize, ForwardGroup>, Vec<bool>) {
        let (g, grouping) = (self.g, self.grouping);
        let consumers = g.consumers();
        let mut group_at = HashMap::new();
        let mut member = vec![false; g.nodes.len()];
        // Per node, the group (index + 1) it is a simple member of; 0 for none.
        let mut simple_group = vec![0usize; g.nodes.len()];
        for (k, m) in grouping.groups.iter().enumerate() {
            let members: Vec<usize> = m
                .iter()
                .copied()
                .filter(|&n| grouping.pattern[n].is_some_and(simple))
                .collect();
            // Output nodes of an op with several outputs are members
            // without a step of their own: the op's step writes them.
            let stepped = members.iter().filter(|&&n| g.nodes[n].op.is_some());
            let Some(&last) = stepped.clone().next_back() else {
                continue;
            };
            let steps = stepped.count();
            for &n in &members {
                simple_group[n] = k + 1;
            }
            // The step runs at the last member's place: every value read
            // outside must be read after it (TVM's rules guarantee this).
            let late_readers = members.iter().all(|&n| {
                consumers[n]
                    .iter()
                    .all(|&c| c > last || simple_group[c] == k + 1)
            });
            let tail = self.reduce_tail(m, &members);
            let head = self.slab_head(m, &members);
            if (steps < 2 && tail.is_none() && head.is_none())
                || !late_readers
                || !convex(g, &members)
            {
                continue;
            }
            let slabbed = tail
                .iter()
                .map(|t| t.node)
                .chain(head.iter().map(|h| h.node));
            for n in members.iter().copied().chain(slabbed) {
                member[n] = true;
            }
            group_at.insert(
                last,
                ForwardGroup {
                    members,
                    tail,
                    head,
                },
            );
        }
        (group_at, member)
    }

    /// `old` with each forward group's steps replaced by one fused step at
    /// the last member's place, and where the backward steps now start.
    fn fuse_forward_groups(
        &self,
        old: &[Step],
        fused_away: &mut Vec<ValueId>,
    ) -> (Vec<Step>, usize) {
        let (group_at, member) = self.forward_groups();
        let mut forward_step = vec![None; self.g.nodes.len()];
        for (s, st) in old.iter().enumerate() {
            if let Step::Forward { node, .. } = st {
                forward_step[*node] = Some(s);
            }
        }
        let mut steps = Vec::with_capacity(old.len());
        let mut backward_start = self.plan.backward_start;
        for (s, step) in old.iter().enumerate() {
            match step {
                Step::Forward { node, .. } if member[*node] => {
                    if s < self.plan.backward_start {
                        backward_start -= 1;
                    }
                    let Some(group) = group_at.get(node) else {
                        continue;
                    };
                    let fused = self.fuse_group(group, |n| forward_step[n].map(|s| &old[s]));
                    steps.push(Step::Fused(fused.collect_into(fused_away)));
                    if s < self.plan.backward_start {
                        backward_start += 1;
                    }
                }
                _ => steps.push(step.clone()),
            }
        }
        (steps, backward_start)
    }

    /// One forward group as a fused step: its members' programs, with the
    /// slabbed reduction or op (whose scratch value is fused away).
    fn fuse_group<'s>(
        &self,
        group: &ForwardGroup,
        forward_step: impl Fn(usize) -> Option<&'s Step>,
    ) -> FusedStep {
        let mut b = Builder::new(self.plan, self.reads, self.writes);
        for &n in &group.members {
            let Some(Step::Forward {
                inputs,
                out,
                more_outs,
                ..
            }) = forward_step(n)
            else {
                continue;
            };
            let ins: Vec<usize> = inputs.iter().map(|&v| b.read(v)).collect();
            b.f.nodes.push(n);
            // One instruction per output that something reads.
            let outs = std::iter::once((*out, OpReqType::WriteTo)).chain(more_outs.iter().copied());
            for (k, (v, req)) in outs.enumerate() {
                if req == OpReqType::Null {
                    continue;
                }
                let o = b.write(v, OpReqType::WriteTo);
                b.f.instrs.push(Instr::Forward {
                    node: n,
                    ins: ins.clone(),
                    out: o,
                    output: k,
                });
            }
        }
        let (mut f, mut internal) = b.finish();
        if let Some(t) = &group.tail {
            internal.push(t.scratch);
            f.reduce = Some(t.clone());
        }
        if let Some(h) = &group.head {
            internal.push(h.scratch);
            f.head = Some(h.clone());
        }
        FusedStep { f, internal }
    }

    /// `steps` with each run of fusable gradient steps (from
    /// `backward_start` on) that forms a chain replaced by one fused step.
    fn fuse_backward_chains(
        &self,
        steps: &[Step],
        backward_start: usize,
        fusable: impl Fn(&Step) -> bool,
        fused_away: &mut Vec<ValueId>,
    ) -> Vec<Step> {
        let mut out = Vec::with_capacity(steps.len());
        let mut s = 0;
        while s < steps.len() {
            let end = if s < backward_start || !fusable(&steps[s]) {
                s + 1
            } else {
                self.chain_end(steps, s, &fusable)
            };
            if end - s < 2 {
                out.push(steps[s].clone());
            } else {
                let fused = self.fuse_chain(&steps[s..end]);
                out.push(Step::Fused(fused.collect_into(fused_away)));
            }
            s = end;
        }
        out
    }

    /// The end of the gradient chain starting at the fusable step `s`: it
    /// extends while the next step's out_grad is a single-write `WriteTo`
    /// gradient of the chain, and it reads nothing else the chain wrote.
    fn chain_end(&self, steps: &[Step], s: usize, fusable: impl Fn(&Step) -> bool) -> usize {
        // Values the chain wrote: whether some write was a `WriteTo`.
        let mut written: HashMap<ValueId, bool> = HashMap::new();
        let record = |st: &Step, written: &mut HashMap<ValueId, bool>| {
            for (v, r) in grads_of(st) {
                *written.entry(v).or_default() |= r == OpReqType::WriteTo;
            }
        };
        record(&steps[s], &mut written);
        let mut end = s + 1;
        while end < steps.len() && end - s < MAX_FUSED && fusable(&steps[end]) {
            let Step::Backward {
                out_grad: Some(out_grad),
                output,
                inputs,
                ..
            } = &steps[end]
            else {
                break;
            };
            let link = written.get(out_grad) == Some(&true)
                && self.writes[*out_grad] == 1
                && self.plan.values[*out_grad].loc == Loc::Unplaced;
            let others_clean = output
                .iter()
                .chain(inputs.iter().flatten())
                .all(|v| !written.contains_key(v));
            if !(link && others_clean) {
                break;
            }
            record(&steps[end], &mut written);
            end += 1;
        }
        end
    }

    /// A chain of gradient steps as one fused step.
    fn fuse_chain(&self, chain: &[Step]) -> FusedStep {
        let mut b = Builder::new(self.plan, self.reads, self.writes);
        for st in chain {
            let Step::Backward {
                node,
                out_grad: Some(out_grad),
                output,
                inputs,
                grads,
                ..
            } = st
            else {
                continue;
            };
            let dy = b.read(*out_grad);
            let y = output.map(|v| b.read(v));
            let xs = inputs.iter().map(|x| x.map(|v| b.read(v))).collect();
            let gs = grads
                .iter()
                .map(|gr| match gr {
                    Some((v, r)) => b.write(*v, *r),
                    None => b.fresh(),
                })
                .collect();
            b.f.nodes.push(*node);
            b.f.instrs.push(Instr::Backward {
                node: *node,
                dy,
                y,
                xs,
                grads: gs,
            });
        }
        let (f, internal) = b.finish();
        FusedStep { f, internal }
    }

    /// The first node of group `m` with pattern `pattern`.
    fn group_node(&self, m: &[usize], pattern: Pattern) -> Option<usize> {
        m.iter()
            .copied()
            .find(|&n| self.grouping.pattern[n] == Some(pattern))
    }

    /// The reduction of group `m` that can run slab by slab behind the
    /// group's program: its one input is made by the program and read by
    /// nothing else in the plan, and it keeps axis 0 ([`row_separable`]).
    fn reduce_tail(&self, m: &[usize], simple_members: &[usize]) -> Option<ReduceTail> {
        let (plan, g) = (self.plan, self.g);
        let r = self.group_node(m, Pattern::Reduction)?;
        let &[input] = g.nodes[r].inputs.as_slice() else {
            return None;
        };
        if !simple_members.contains(&input) {
            return None;
        }
        let (v, out) = (plan.forward_value[input], plan.forward_value[r]);
        let value = &plan.values[v];
        let alone = self.reads[v] == 1 && self.writes[v] == 1 && value.loc == Loc::Unplaced;
        let in_shape = std::slice::from_ref(&value.shape);
        if !alone || !row_separable(g, r, in_shape, &plan.values[out].shape) {
            return None;
        }
        Some(ReduceTail {
            node: r,
            scratch: v,
            out,
            rows: slab_rows(&value.shape)?,
        })
    }

    /// The out-elementwise-fusable op of group `m` that can run slab by slab
    /// ahead of the group's program: its output is read by the program alone
    /// (not by a gradient, not a graph output), none of its inputs is made by
    /// the program, and it keeps axis 0 ([`row_separable`]).
    fn slab_head(&self, m: &[usize], simple_members: &[usize]) -> Option<SlabHead> {
        let (plan, g) = (self.plan, self.g);
        let h = self.group_node(m, Pattern::OutElemwiseFusable)?;
        let node_inputs = &g.nodes[h].inputs;
        if node_inputs.iter().any(|i| simple_members.contains(i)) {
            return None;
        }
        let v = plan.forward_value[h];
        let member_reads: usize = simple_members
            .iter()
            .map(|&n| g.nodes[n].inputs.iter().filter(|&&i| i == h).count())
            .sum();
        let value = &plan.values[v];
        let alone = member_reads > 0
            && self.reads[v] == member_reads
            && self.writes[v] == 1
            && value.loc == Loc::Unplaced;
        let inputs: Vec<ValueId> = node_inputs.iter().map(|&i| plan.forward_value[i]).collect();
        let in_shapes: Vec<Shape> = inputs
            .iter()
            .map(|&i| plan.values[i].shape.clone())
            .collect();
        if !alone || !row_separable(g, h, &in_shapes, &value.shape) {
            return None;
        }
        let first = &in_shapes[0];
        Some(SlabHead {
            node: h,
            inputs,
            scratch: v,
            rows: slab_rows(&value.shape)?,
            cost: first.size() / first.dims()[0],
        })
    }
}

/// A fused step just built, and the values that live only in its tiles.
struct FusedStep {
    f: Fused,
    internal: Vec<ValueId>,
}

impl FusedStep {
    /// The step, its tile-only values added to `fused_away`.
    fn collect_into(self, fused_away: &mut Vec<ValueId>) -> Fused {
        fused_away.extend(self.internal);
        self.f
    }
}

/// The fused gradient chains of a training plan, as the API reports them.
pub(crate) fn describe_backward(g: &Graph, plan: &Plan) -> Vec<FusionGroup> {
    backward_chains(plan)
        .map(|nodes| FusionGroup {
            pattern: Pattern::Elementwise,
            nodes: nodes
                .iter()
                .map(|&n| (g.nodes[n].name.clone(), Pattern::Elementwise))
                .collect(),
        })
        .collect()
}

fn grads_of(st: &Step) -> Vec<(ValueId, OpReqType)> {
    match st {
        Step::Backward { grads, .. } => grads.iter().flatten().copied().collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fwd(ins: &[usize], out: usize) -> Instr {
        Instr::Forward {
            node: 0,
            ins: ins.to_vec(),
            out,
            output: 0,
        }
    }
    fn store(slot: usize, output: usize) -> Instr {
        Instr::Store {
            slot,
            output,
            req: OpReqType::WriteTo,
        }
    }

    /// No instruction writes a slot it reads, and every read finds the
    /// value it read before renaming: the slots are simulated, each
    /// holding the logical value last written to it (inputs hold
    /// themselves).
    fn check_lives(before: &[Instr], after: &[Instr], n_in: usize) {
        let mut holds: HashMap<usize, usize> = (0..n_in).map(|s| (s, s)).collect();
        for (b, a) in before.iter().zip(after) {
            for (l, p) in b.reads().into_iter().zip(a.reads()) {
                assert_eq!(holds.get(&p), Some(&l), "{a:?}: slot {p} lost value {l}");
            }
            for w in a.writes() {
                assert!(!a.reads().contains(&w), "{a:?} writes a slot it reads");
            }
            for (l, p) in b.writes().into_iter().zip(a.writes()) {
                holds.insert(p, l);
            }
        }
    }

    #[test]
    fn a_chain_reuses_two_slots_and_an_only_stored_result_keeps_its_own() {
        // 0, 1 inputs; 2..=7 a chain of six ops; 7 stored only; 4 also
        // stored on the way (and read after).
        let before = vec![
            fwd(&[0], 2),
            fwd(&[2], 3),
            fwd(&[3], 4),
            store(4, 0),
            fwd(&[4, 1], 5),
            fwd(&[5], 6),
            fwd(&[6, 0], 7),
            store(7, 1),
        ];
        let mut after = before.clone();
        let slots = reuse_slots(&mut after, 2, 8);
        assert_eq!(slots, 5, "{after:?}");
        check_lives(&before, &after, 2);
        let Instr::Store { slot, .. } = after[7] else {
            unreachable!()
        };
        let uses = after
            .iter()
            .flat_map(|i| i.reads().into_iter().chain(i.writes()))
            .filter(|&s| s == slot)
            .count();
        assert_eq!(uses, 2, "only the last op and its store use slot {slot}");
    }

    #[test]
    fn scratch_gradients_are_freed_and_gradients_never_alias_their_inputs() {
        let before = vec![
            fwd(&[0], 2),
            Instr::Backward {
                node: 0,
                dy: 1,
                y: Some(2),
                xs: vec![Some(0), Some(2)],
                grads: vec![3, 4],
            },
            fwd(&[3], 5),
            store(5, 0),
        ];
        let mut after = before.clone();
        let slots = reuse_slots(&mut after, 2, 6);
        check_lives(&before, &after, 2);
        // 2, then 3 and 4 beside it; 5 (only stored) takes a fresh slot.
        assert_eq!(slots, 6, "{after:?}");
    }
}
