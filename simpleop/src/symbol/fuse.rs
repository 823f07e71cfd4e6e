//! Operator fusion: TVM's FuseOps grouping over the forward graph, and the
//! rewrite of a plan's steps into fused tile programs.
//!
//! Grouping follows TVM. Each op node has a [`Pattern`]; an elementwise op
//! without tile entry points counts as opaque. Over the post-dominator tree
//! of the graph (outputs post-dominated by a virtual sink), in topological
//! order, a node joins the group of its immediate post-dominator when every
//! node on every path between them allows it:
//! * an elementwise/broadcast group fuses into an elementwise/broadcast
//!   node (including one already fused onto a `dot`) or into a reduction;
//! * an out-elementwise-fusable group (`dot`) fuses into elementwise
//!   consumers;
//! * nodes in between must be elementwise/broadcast groups;
//! * a group's pattern is the most complex of its members, so a group
//!   holding `dot` or a reduction never fuses again: two complex ops never
//!   merge;
//! * a group, like a fused gradient chain, holds at most `MAX_FUSED` (256)
//!   ops, as TVM's `max_fuse_depth`.
//!
//! Fused edges also need one shape and dtype: a broadcast op's smaller
//! operand is an external input of the group, gathered per tile. Injective
//! ops have no tile kernels and stay alone.
//!
//! Execution runs the elementwise members of a group as one tile program.
//! A reduction that keeps axis 0, is its input's only reader and has rows
//! no longer than a slab runs behind the program slab by slab
//! ([`ReduceTail`]), so its input never reaches main memory; when its op
//! declares a row form (`fn rows`: `sum`, `mean`, `norm` over trailing
//! axes, f32/f64) the executor feeds it the program's tiles instead, and
//! no slab is written either (`kernel::fused::run_program_reducing`).
//! Likewise an
//! out-elementwise-fusable op (`dot`) whose output only the program reads
//! and whose rows follow its first input's runs ahead of it slab by slab
//! ([`SlabHead`]), so its output never reaches main memory. Any other
//! complex op runs unfused before (dot) or after (reduction) the program,
//! with its output or input materialised: a `dot` with `transpose_a`, a
//! `batch_dot`, a 1-d first operand or an output read outside the group;
//! a reduction over axis 0, of a 1-d input, or whose input is also read
//! elsewhere; either with rows longer than a slab.

use std::collections::HashMap;

use super::graph::Graph;
use super::plan::{Loc, Plan, Step, ValueId};
use crate::{DType, OpReqType, Pattern, Shape};

/// A group of fused nodes, as [`super::Executor::fusion_groups`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusionGroup {
    /// The most complex member pattern.
    pub pattern: Pattern,
    /// The members in execution (topological) order: node name and pattern.
    pub nodes: Vec<(String, Pattern)>,
}

/// The grouping of a graph's nodes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Grouping {
    /// Groups of two or more op nodes, members in topological order.
    pub(crate) groups: Vec<Vec<usize>>,
    /// Each node's pattern as fusion sees it (`None` for variables).
    pub(crate) pattern: Vec<Option<Pattern>>,
}

impl Grouping {
    pub(crate) fn describe(&self, g: &Graph) -> Vec<FusionGroup> {
        self.groups
            .iter()
            .map(|m| FusionGroup {
                pattern: m
                    .iter()
                    .filter_map(|&n| self.pattern[n])
                    .max()
                    .unwrap_or(Pattern::Opaque),
                nodes: m
                    .iter()
                    .map(|&n| {
                        (
                            g.nodes[n].name.clone(),
                            self.pattern[n].unwrap_or(Pattern::Opaque),
                        )
                    })
                    .collect(),
            })
            .collect()
    }
}

fn simple(p: Pattern) -> bool {
    p <= Pattern::Broadcast
}

/// The most ops one fused step runs (TVM's `max_fuse_depth`, 256 by
/// default, the same): a program's per-tile bookkeeping grows with its
/// inputs times its ops, so a huge group would be slower than several.
const MAX_FUSED: usize = 256;

struct Dsu {
    parent: Vec<usize>,
    pattern: Vec<Pattern>,
    /// Members of each root's group.
    size: Vec<usize>,
}

impl Dsu {
    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }
    fn union_into(&mut self, from: usize, to: usize) {
        let (a, b) = (self.find(from), self.find(to));
        if a != b {
            self.parent[a] = b;
            self.pattern[b] = self.pattern[b].max(self.pattern[a]);
            self.size[b] += self.size[a];
        }
    }
}

/// Groups the op nodes of `g`. `tile[n]`: node `n` has tile entry points.
pub(crate) fn group(g: &Graph, shapes: &[Shape], dtypes: &[DType], tile: &[bool]) -> Grouping {
    let n_nodes = g.nodes.len();
    let pattern: Vec<Option<Pattern>> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            node.op.map(|op| {
                if simple(op.pattern) && !tile[n] {
                    Pattern::Opaque
                } else {
                    op.pattern
                }
            })
        })
        .collect();
    let consumers = g.consumers();
    let mut is_head = vec![false; n_nodes];
    for &h in &g.heads {
        is_head[h] = true;
    }
    // Immediate post-dominators; `n_nodes` is the virtual sink.
    let sink = n_nodes;
    let mut ipdom = vec![sink; n_nodes + 1];
    let mut depth = vec![0usize; n_nodes + 1];
    for n in (0..n_nodes).rev() {
        let d = if is_head[n] || consumers[n].is_empty() {
            sink
        } else {
            let mut d = consumers[n][0];
            for &c in &consumers[n][1..] {
                let mut c = c;
                while d != c {
                    if depth[d] < depth[c] {
                        c = ipdom[c];
                    } else {
                        d = ipdom[d];
                    }
                }
            }
            d
        };
        ipdom[n] = d;
        depth[n] = depth[d] + 1;
    }
    // Marks of the path walks below, cleared after each walk (a fresh
    // vector per node would make a long chain quadratic).
    let mut seen = vec![false; n_nodes];
    let mut dsu = Dsu {
        parent: (0..n_nodes).collect(),
        pattern: pattern
            .iter()
            .map(|p| p.unwrap_or(Pattern::Opaque))
            .collect(),
        size: vec![1; n_nodes],
    };
    for n in 0..n_nodes {
        if pattern[n].is_none() {
            continue;
        }
        let d = ipdom[n];
        if d == sink {
            continue;
        }
        let (gn, gd) = (dsu.find(n), dsu.find(d));
        if gn == gd {
            continue;
        }
        let (gp, dp) = (dsu.pattern[gn], dsu.pattern[gd]);
        let pd = pattern[d].unwrap_or(Pattern::Opaque);
        let same = |m: usize| shapes[m] == shapes[n] && dtypes[m] == dtypes[n];
        let sink_ok = if gp == Pattern::OutElemwiseFusable {
            simple(pd) && simple(dp) && same(d)
        } else if simple(gp) {
            (simple(pd) && (simple(dp) || dp == Pattern::OutElemwiseFusable) && same(d))
                || (pd == Pattern::Reduction && dp == Pattern::Reduction)
        } else {
            false
        };
        if !sink_ok {
            continue;
        }
        // Every node strictly between n and d must be a simple group.
        let mut on_path = vec![n];
        let mut stack = consumers[n].clone();
        let mut ok = true;
        while let Some(c) = stack.pop() {
            if c == d || std::mem::replace(&mut seen[c], true) {
                continue;
            }
            on_path.push(c);
            let gc = dsu.find(c);
            // A longer path would make too big a group anyway: stop, so a
            // wide region is not walked once per node.
            if !(simple(dsu.pattern[gc]) && same(c)) || on_path.len() >= MAX_FUSED {
                ok = false;
                break;
            }
            stack.extend(&consumers[c]);
        }
        for &c in &on_path[1..] {
            seen[c] = false;
        }
        if ok && merged_size(&mut dsu, &on_path, gd) <= MAX_FUSED {
            for m in on_path {
                dsu.union_into(m, d);
            }
        }
    }
    let mut by_root: HashMap<usize, Vec<usize>> = HashMap::new();
    for (n, p) in pattern.iter().enumerate() {
        if p.is_some() {
            let r = dsu.find(n);
            by_root.entry(r).or_default().push(n);
        }
    }
    let mut groups: Vec<Vec<usize>> = by_root
        .into_values()
        .filter(|m| m.len() > 1 && convex(g, m))
        .collect();
    groups.sort_by_key(|m| m[0]);
    Grouping { groups, pattern }
}

/// The size of the group that merging `members`' groups into root `to`'s
/// would make.
fn merged_size(dsu: &mut Dsu, members: &[usize], to: usize) -> usize {
    let mut roots: Vec<usize> = members.iter().map(|&m| dsu.find(m)).collect();
    roots.push(to);
    roots.sort_unstable();
    roots.dedup();
    roots.iter().map(|&r| dsu.size[r]).sum()
}

/// No path leaves the group and comes back, so it can run as one step.
/// Such a path lies between the first and last member (topological
/// order), so only that span is scanned: many small groups along a long
/// graph stay linear.
fn convex(g: &Graph, members: &[usize]) -> bool {
    let (Some(&lo), Some(&hi)) = (members.iter().min(), members.iter().max()) else {
        return true;
    };
    // Indexed from `lo`; nodes before it are neither inside nor tainted.
    let mut inside = vec![false; hi - lo + 1];
    for &m in members {
        inside[m - lo] = true;
    }
    let mut tainted = vec![false; hi - lo + 1];
    let at = |v: &[bool], i: usize| i >= lo && v[i - lo];
    for n in lo..=hi {
        let inputs = &g.nodes[n].inputs;
        if inside[n - lo] {
            if inputs.iter().any(|&i| !at(&inside, i) && at(&tainted, i)) {
                return false;
            }
        } else {
            tainted[n - lo] = inputs.iter().any(|&i| at(&inside, i) || at(&tainted, i));
        }
    }
    true
}

/// One instruction of a fused step, over slots (see `kernel::fused`).
#[derive(Clone, Debug)]
pub(crate) enum Instr {
    Forward {
        node: usize,
        ins: Vec<usize>,
        out: usize,
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

/// Elements per slab of a [`ReduceTail`]: the reduction's input slab
/// (1 MB in f32, 2 MB in f64) stays in L2 between the program writing it
/// and the reduction reading it, and a slab is big enough that the
/// per-slab dispatch is noise. Rows longer than this are not slabbed.
const SLAB_ELEMENTS: usize = 1 << 18;

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

/// `shape` with `rows` rows (axis 0 set to `rows`).
pub(crate) fn slab(shape: &Shape, rows: usize) -> Shape {
    let mut dims = shape.dims().to_vec();
    dims[0] = rows;
    Shape::new(dims)
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

impl Instr {
    /// Slots this instruction reads.
    fn reads(&self) -> Vec<usize> {
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
    fn writes(&self) -> Vec<usize> {
        match self {
            Instr::Forward { out, .. } => vec![*out],
            Instr::Backward { grads, .. } => grads.clone(),
            Instr::Store { .. } => Vec::new(),
        }
    }
    /// Replaces every slot `s` it names with `map[s]`.
    fn rename(&mut self, map: &[usize]) {
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

/// Rewrites `plan.steps` (before allocation): each group's elementwise
/// members become one fused step at the last member's position; runs of
/// adjacent elementwise gradient steps whose intermediate gradient is read
/// by the next alone become one fused step. Returns the values fused away.
pub(crate) fn rewrite(
    plan: &mut Plan,
    g: &Graph,
    grouping: &Grouping,
    backward_tile: &[bool],
    shapes: &[Shape],
    dtypes: &[DType],
) -> Vec<ValueId> {
    let (reads, writes) = counts(plan);
    let mut fused_away = Vec::new();
    // Forward groups.
    let consumers = g.consumers();
    type Parts = (Vec<usize>, Option<ReduceTail>, Option<SlabHead>);
    let mut group_at: HashMap<usize, Parts> = HashMap::new();
    let mut member = vec![false; g.nodes.len()];
    // Per node, the group (index + 1) it is a simple member of; 0 for none.
    let mut simple_group = vec![0usize; g.nodes.len()];
    for (k, m) in grouping.groups.iter().enumerate() {
        let simple_members: Vec<usize> = m
            .iter()
            .copied()
            .filter(|&n| grouping.pattern[n].is_some_and(simple))
            .collect();
        let Some(&last) = simple_members.last() else {
            continue;
        };
        for &n in &simple_members {
            simple_group[n] = k + 1;
        }
        // The step runs at the last member's place: every value read
        // outside must be read after it (TVM's rules guarantee this).
        let late_readers = simple_members.iter().all(|&n| {
            consumers[n]
                .iter()
                .all(|&c| c > last || simple_group[c] == k + 1)
        });
        let tail = reduce_tail(plan, g, grouping, m, &simple_members, &reads, &writes);
        let head = slab_head(plan, g, grouping, m, &simple_members, &reads, &writes);
        if (simple_members.len() < 2 && tail.is_none() && head.is_none())
            || !late_readers
            || !convex(g, &simple_members)
        {
            continue;
        }
        for &n in &simple_members {
            member[n] = true;
        }
        if let Some(t) = &tail {
            member[t.node] = true;
        }
        if let Some(h) = &head {
            member[h.node] = true;
        }
        group_at.insert(last, (simple_members, tail, head));
    }
    let mut steps = Vec::with_capacity(plan.steps.len());
    let old = std::mem::take(&mut plan.steps);
    let mut forward_step = vec![None; g.nodes.len()];
    for (s, st) in old.iter().enumerate() {
        if let Step::Forward { node, .. } = st {
            forward_step[*node] = Some(s);
        }
    }
    let mut backward_start = plan.backward_start;
    for (s, step) in old.iter().enumerate() {
        match step {
            Step::Forward { node, .. } if member[*node] => {
                if s < plan.backward_start {
                    backward_start -= 1;
                }
                let Some((nodes, tail, head)) = group_at.get(node) else {
                    continue;
                };
                let mut b = Builder::new(plan, &reads, &writes);
                for &n in nodes {
                    let Some(Step::Forward { inputs, out, .. }) = forward_step[n].map(|s| &old[s])
                    else {
                        continue;
                    };
                    let ins = inputs.iter().map(|&v| b.read(v)).collect();
                    let o = b.write(*out, OpReqType::WriteTo);
                    b.f.nodes.push(n);
                    b.f.instrs.push(Instr::Forward {
                        node: n,
                        ins,
                        out: o,
                    });
                }
                let (mut f, internal) = b.finish();
                fused_away.extend(internal);
                if let Some(t) = tail {
                    fused_away.push(t.scratch);
                    f.reduce = Some(t.clone());
                }
                if let Some(h) = head {
                    fused_away.push(h.scratch);
                    f.head = Some(h.clone());
                }
                steps.push(Step::Fused(f));
                if s < plan.backward_start {
                    backward_start += 1;
                }
            }
            _ => steps.push(step.clone()),
        }
    }
    plan.backward_start = backward_start;
    // Backward chains.
    let fusable = |st: &Step| match st {
        Step::Backward { node, .. } => {
            tile_backward(g, *node, grouping, backward_tile, shapes, dtypes)
        }
        _ => false,
    };
    let mut out = Vec::with_capacity(steps.len());
    let mut s = 0;
    while s < steps.len() {
        if s < plan.backward_start || !fusable(&steps[s]) {
            out.push(steps[s].clone());
            s += 1;
            continue;
        }
        // Extend while the next step's out_grad is a single-write WriteTo
        // gradient of the chain, and it reads nothing else the chain wrote.
        let mut end = s + 1;
        // Values the chain wrote: whether some write was a `WriteTo`.
        let mut written: HashMap<ValueId, bool> = HashMap::new();
        let record = |st: &Step, written: &mut HashMap<ValueId, bool>| {
            for (v, r) in grads_of(st) {
                *written.entry(v).or_default() |= r == OpReqType::WriteTo;
            }
        };
        record(&steps[s], &mut written);
        while end < steps.len() && end - s < MAX_FUSED && fusable(&steps[end]) {
            let Step::Backward {
                out_grad,
                output,
                inputs,
                ..
            } = &steps[end]
            else {
                break;
            };
            let link = written.get(out_grad) == Some(&true)
                && writes[*out_grad] == 1
                && plan.values[*out_grad].loc == Loc::Unplaced;
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
        if end - s < 2 {
            out.push(steps[s].clone());
            s += 1;
            continue;
        }
        let mut b = Builder::new(plan, &reads, &writes);
        for st in &steps[s..end] {
            let Step::Backward {
                node,
                out_grad,
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
        fused_away.extend(internal);
        out.push(Step::Fused(f));
        s = end;
    }
    plan.steps = out;
    fused_away
}

/// The reduction of group `m` that can run slab by slab behind the
/// group's program: its one input is made by the program and read by
/// nothing else in the plan, and it keeps axis 0 ([`row_separable`]).
fn reduce_tail(
    plan: &Plan,
    g: &Graph,
    grouping: &Grouping,
    m: &[usize],
    simple_members: &[usize],
    reads: &[usize],
    writes: &[usize],
) -> Option<ReduceTail> {
    let r = m
        .iter()
        .copied()
        .find(|&n| grouping.pattern[n] == Some(Pattern::Reduction))?;
    let &[input] = g.nodes[r].inputs.as_slice() else {
        return None;
    };
    if !simple_members.contains(&input) {
        return None;
    }
    let (v, out) = (plan.forward_value[input], plan.forward_value[r]);
    let value = &plan.values[v];
    let alone = reads[v] == 1 && writes[v] == 1 && value.loc == Loc::Unplaced;
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
fn slab_head(
    plan: &Plan,
    g: &Graph,
    grouping: &Grouping,
    m: &[usize],
    simple_members: &[usize],
    reads: &[usize],
    writes: &[usize],
) -> Option<SlabHead> {
    let h = m
        .iter()
        .copied()
        .find(|&n| grouping.pattern[n] == Some(Pattern::OutElemwiseFusable))?;
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
        && reads[v] == member_reads
        && writes[v] == 1
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
