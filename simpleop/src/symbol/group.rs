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
use crate::{DType, OpForm, Pattern, Shape};

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

pub(crate) fn simple(p: Pattern) -> bool {
    p <= Pattern::Broadcast
}

/// The most ops one fused step runs (TVM's `max_fuse_depth`, 256 by
/// default, the same): a program's per-tile bookkeeping grows with its
/// inputs times its ops, so a huge group would be slower than several.
pub(crate) const MAX_FUSED: usize = 256;

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
    let pattern = node_patterns(g, tile);
    let consumers = g.consumers();
    let ipdom = post_dominators(g, &consumers);
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
        if d == n_nodes {
            continue;
        }
        let (gn, gd) = (dsu.find(n), dsu.find(d));
        if gn == gd {
            continue;
        }
        let same = |m: usize| shapes[m] == shapes[n] && dtypes[m] == dtypes[n];
        let pd = pattern[d].unwrap_or(Pattern::Opaque);
        if !may_join(dsu.pattern[gn], dsu.pattern[gd], pd, same(d)) {
            continue;
        }
        let on_path = simple_path(&mut dsu, &consumers, &mut seen, n, d, same);
        if let Some(on_path) = on_path
            && merged_size(&mut dsu, &on_path, gd) <= MAX_FUSED
        {
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

/// Per node, its op's pattern (`None` for a variable); a simple op
/// without tile entry points counts as opaque. The outputs 1.. of an
/// elementwise op with several (`-> (T, T)`) share its pattern, so that
/// the op and its outputs' readers can fuse; other output nodes are
/// values made elsewhere, as variables are.
fn node_patterns(g: &Graph, tile: &[bool]) -> Vec<Option<Pattern>> {
    let fusable = |n: usize| {
        g.nodes[n].op.is_some_and(|op| {
            tile[n]
                && (op.is_simple() || (op.form == OpForm::Elementwise && op.aux_states.is_empty()))
        })
    };
    g.nodes
        .iter()
        .enumerate()
        .map(|(n, node)| match (node.op, node.output_of) {
            (None, Some((p, _))) if fusable(p) => g.nodes[p].op.map(|op| op.pattern),
            (op, _) => op.map(|op| {
                if (simple(op.pattern) && !tile[n]) || !(op.is_simple() || fusable(n)) {
                    Pattern::Opaque
                } else {
                    op.pattern
                }
            }),
        })
        .collect()
}

/// Per node, its immediate post-dominator; `g.nodes.len()` is the virtual
/// sink, the post-dominator of heads and of nodes nothing reads.
fn post_dominators(g: &Graph, consumers: &[Vec<usize>]) -> Vec<usize> {
    let n_nodes = g.nodes.len();
    let mut is_head = vec![false; n_nodes];
    for &h in &g.heads {
        is_head[h] = true;
    }
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
    ipdom
}

/// Whether a node's group (pattern `gp`) may join the group (pattern `dp`)
/// of its post-dominator (own pattern `pd`; `same`: of the node's shape
/// and dtype).
fn may_join(gp: Pattern, dp: Pattern, pd: Pattern, same: bool) -> bool {
    if gp == Pattern::OutElemwiseFusable {
        simple(pd) && simple(dp) && same
    } else if simple(gp) {
        (simple(pd) && (simple(dp) || dp == Pattern::OutElemwiseFusable) && same)
            || (pd == Pattern::Reduction && dp == Pattern::Reduction)
    } else {
        false
    }
}

/// `n` and every node strictly between it and its post-dominator `d`, or
/// `None` unless all of those are in simple groups and `same` (of `n`'s
/// shape and dtype) and there are fewer than [`MAX_FUSED`]. `seen` is
/// all false before and after.
fn simple_path(
    dsu: &mut Dsu,
    consumers: &[Vec<usize>],
    seen: &mut [bool],
    n: usize,
    d: usize,
    same: impl Fn(usize) -> bool,
) -> Option<Vec<usize>> {
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
    ok.then_some(on_path)
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
pub(crate) fn convex(g: &Graph, members: &[usize]) -> bool {
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
