//! Reverse mode over the tape, as the executor does it for a graph: the
//! recorded calls newest first, each op's registered backward kernel,
//! and every value's gradient built in one buffer by a `WriteTo` followed
//! by `AddTo` writes (no add ops, no copies).
//!
//! Everything a backward can refuse (an op without a gradient on a path
//! that needs one, values freed by an earlier backward or changed in place
//! since they were saved, wrong head gradients) is checked before the
//! first kernel runs, so a refused backward writes nothing.

use std::sync::Arc;

use smallvec::SmallVec;

use super::table::{Set, Table};
use super::tape::{Kind, Link, Node, OpCall, Saved, lock};
use crate::eager::registered;
use crate::symbol::config::GradReq;
use crate::{
    BackwardFn, Error, GradArgs, GradSpec, NDArray, OpReqType, Result, RunContext, TBlob, TBlobMut,
    dispatch_float,
};

/// Whose gradients a backward computes.
pub(crate) enum Targets<'a> {
    /// Every variable asking for one, written into its gradient buffer
    /// per its request (`backward`).
    Variables,
    /// These values, returned; no buffer is touched (`grad`).
    Values(&'a [Link]),
}

/// A value: output `.1` of the node at address `.0`.
pub(crate) type Key = (usize, usize);

pub(crate) fn key(l: &Link) -> Key {
    (Arc::as_ptr(&l.node) as usize, l.output)
}

fn node_key(n: &Arc<Node>) -> usize {
    Arc::as_ptr(n) as usize
}

/// A value's gradient so far; after the first write every write adds.
#[derive(Default)]
struct Acc {
    buf: Option<NDArray>,
    accumulate: bool,
}

/// One backward pass over the nodes reachable from `heads`.
pub(crate) struct Pass<'a> {
    /// Oldest first.
    nodes: Nodes,
    targets: Targets<'a>,
    target_keys: Set<Key>,
    /// Op nodes whose backward must run: an input leads to a target.
    needed: Set<usize>,
    acc: Table<Key, Acc>,
}

impl<'a> Pass<'a> {
    // Inlined into `backward_with`: the pass then stays in place instead
    // of being moved through calls (it holds inline tables).
    #[inline]
    pub(crate) fn new(heads: &[Link], targets: Targets<'a>) -> Pass<'a> {
        let nodes = reachable(heads);
        let target_keys = match &targets {
            Targets::Variables => Set::default(),
            Targets::Values(v) => v.iter().map(key).collect(),
        };
        let mut pass = Pass {
            nodes,
            targets,
            target_keys,
            needed: Set::default(),
            acc: Table::default(),
        };
        for n in &pass.nodes {
            if let Some(call) = n.call()
                && call
                    .inputs
                    .iter()
                    .flat_map(|i| &i.from)
                    .any(|l| pass.leads_to_target(l))
            {
                pass.needed.insert(node_key(n));
            }
        }
        pass
    }

    fn is_target(&self, l: &Link) -> bool {
        match self.targets {
            Targets::Variables => matches!(l.node.kind, Kind::Variable { .. }),
            Targets::Values(_) => self.target_keys.contains(&key(l)),
        }
    }

    /// The op nodes whose backward must run, newest first.
    pub(crate) fn needed_newest_first(&self) -> impl Iterator<Item = &Arc<Node>> {
        let needed = &self.needed;
        self.nodes
            .iter()
            .rev()
            .filter(move |n| n.call().is_some() && needed.contains(&node_key(n)))
    }

    /// Whether a gradient written to `l` reaches a target.
    pub(crate) fn leads_to_target(&self, l: &Link) -> bool {
        self.is_target(l) || self.needed.contains(&node_key(&l.node))
    }

    /// Everything that would make the pass fail, before anything runs.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        for n in &self.nodes {
            let Some(call) = n.call() else { continue };
            if self.needed.contains(&node_key(n)) {
                check_call(n, call)?;
            }
        }
        Ok(())
    }

    /// Seeds head `l` with gradient `g` (its shape and dtype checked).
    #[inline]
    pub(crate) fn seed(&mut self, l: &Link, g: &NDArray) -> Result<()> {
        let acc = self.acc.entry(key(l));
        match acc.buf.as_mut() {
            // A `write` variable's own buffer holds its old gradient.
            Some(buf) if acc.accumulate => add_into(buf, g)?,
            _ => acc.buf = Some(g.clone()),
        }
        acc.accumulate = true;
        Ok(())
    }

    /// Takes every variable's gradient buffer until [`Pass::finish`]: an
    /// `add` variable's gradient starts from it, and a `write` variable's
    /// first write goes into it (`WriteTo`, as MXNet writes a gradient
    /// into its buffer) instead of a fresh array.
    #[inline]
    pub(crate) fn take_buffers(&mut self) {
        for n in &self.nodes {
            if let Kind::Variable { req, grad, .. } = &n.kind
                && *req != GradReq::Null
                && let Some(g) = lock(grad).take()
            {
                let acc = self.acc.entry((node_key(n), 0));
                acc.buf = Some(g);
                acc.accumulate = *req == GradReq::Add;
            }
        }
    }

    /// Runs every needed node's backward, newest first; frees what each
    /// saved unless `retain`. Calls `after(self, i)` once node `i` (its
    /// index among the pass's nodes, oldest first) is done: the
    /// gradient-ready hook.
    #[inline]
    pub(crate) fn run(
        &mut self,
        retain: bool,
        mut after: impl FnMut(&Self, usize) -> Result<()>,
    ) -> Result<()> {
        let nodes = std::mem::take(&mut self.nodes);
        let result = nodes.iter().enumerate().rev().try_for_each(|(i, n)| {
            let Some(call) = n.call() else { return Ok(()) };
            if self.needed.contains(&node_key(n)) {
                self.run_node(n, call)?;
            }
            if !retain {
                *lock(&call.saved) = None;
            }
            after(self, i)
        });
        self.nodes = nodes;
        result
    }

    fn run_node(&mut self, n: &Arc<Node>, call: &OpCall) -> Result<()> {
        let out_grads: SmallVec<[Option<NDArray>; 2]> = (0..call.outputs.len())
            .map(|k| self.take_out_grad((node_key(n), k)))
            .collect();
        if out_grads.iter().all(Option::is_none) {
            return Ok(());
        }
        let saved = lock(&call.saved);
        let saved = saved.as_ref().ok_or_else(|| freed(call.op.name))?;
        let slots: SmallVec<[Option<Key>; 4]> = call
            .inputs
            .iter()
            .map(|i| i.from.as_ref().filter(|l| self.leads_to_target(l)).map(key))
            .collect();
        let (calls, count) = gradient_calls(&slots);
        for c in 0..count {
            self.run_group(call, saved, &out_grads, &slots, |i| calls[i] == Some(c))?;
        }
        Ok(())
    }

    /// The gradient reaching value `k`: taken, unless `k` is a target,
    /// whose gradient is also the result.
    fn take_out_grad(&mut self, k: Key) -> Option<NDArray> {
        if self.target_keys.contains(&k) {
            return self.acc.get(&k).and_then(|a| a.buf.clone());
        }
        self.acc.remove(&k).and_then(|a| a.buf)
    }

    /// One backward kernel call writing the inputs `in_call` selects.
    fn run_group(
        &mut self,
        call: &OpCall,
        saved: &Saved,
        out_grads: &[Option<NDArray>],
        slots: &[Option<Key>],
        in_call: impl Fn(usize) -> bool,
    ) -> Result<()> {
        let op = call.op;
        let mut bufs: SmallVec<[NDArray; 4]> = SmallVec::with_capacity(slots.len());
        let mut reqs: SmallVec<[OpReqType; 4]> = SmallVec::with_capacity(slots.len());
        for (i, input) in call.inputs.iter().enumerate() {
            let acc = match slots[i] {
                Some(k) if in_call(i) => self.acc.entry(k),
                // Every slot has its input's shape: kernels may read it.
                _ => {
                    let sink = NDArray::for_overwrite(op.name, input.shape.clone(), input.dtype)?;
                    bufs.push(sink);
                    reqs.push(OpReqType::Null);
                    continue;
                }
            };
            let (buf, req) = match acc.buf.take() {
                Some(b) if acc.accumulate => (b, OpReqType::AddTo),
                Some(b) => (b, OpReqType::WriteTo),
                None => {
                    let b = NDArray::for_overwrite(op.name, input.shape.clone(), input.dtype)?;
                    (b, OpReqType::WriteTo)
                }
            };
            bufs.push(buf);
            reqs.push(req);
        }
        let result = run_kernel(call, saved, out_grads, &mut bufs, &reqs);
        for (i, buf) in bufs.into_iter().enumerate() {
            if let Some(k) = slots[i]
                && in_call(i)
            {
                let acc = self.acc.entry(k);
                acc.buf = Some(buf);
                acc.accumulate = true;
            }
        }
        result
    }

    /// Gives every variable its buffer back: on success with the pass's
    /// gradient; on failure whatever it holds (its old value when nothing
    /// was written to it; a `write` variable without its own buffer keeps
    /// its old one).
    #[inline]
    pub(crate) fn finish(&mut self, ok: bool) {
        for n in &self.nodes {
            let Kind::Variable { req, grad, .. } = &n.kind else {
                continue;
            };
            let Some(acc) = self.acc.remove(&(node_key(n), 0)) else {
                continue;
            };
            let keep = ok || *req == GradReq::Add || !acc.accumulate;
            if let Some(buf) = acc.buf
                && (keep || lock(grad).is_none())
            {
                *lock(grad) = Some(buf);
            }
        }
    }

    /// When each of `vars` (variables) has its final gradient in this
    /// pass: `Some(i)` after node `i`, its last needed reader (the oldest,
    /// as nodes run newest first); `None` when no node writes it (not
    /// reached, or reached only as a head) and it is final from the start.
    pub(crate) fn last_writers(&self, vars: &[Link]) -> Vec<Option<usize>> {
        let mut last = vec![None; vars.len()];
        let index: std::collections::HashMap<usize, usize> = vars
            .iter()
            .enumerate()
            .map(|(k, l)| (node_key(&l.node), k))
            .collect();
        for (i, n) in self.nodes.iter().enumerate().rev() {
            let Some(call) = n.call() else { continue };
            if !self.needed.contains(&node_key(n)) {
                continue;
            }
            for l in call.inputs.iter().flat_map(|i| &i.from) {
                if let Some(&k) = index.get(&node_key(&l.node)) {
                    last[k] = Some(i);
                }
            }
        }
        last
    }

    /// Variable `l`'s gradient buffer while the pass holds it.
    pub(crate) fn held_grad(&self, l: &Link) -> Option<&NDArray> {
        self.acc.get(&key(l)).and_then(|a| a.buf.as_ref())
    }

    /// The gradient of each of `values` (zeros where no path leads).
    pub(crate) fn take_values(&mut self, values: &[Link]) -> Result<Vec<NDArray>> {
        values
            .iter()
            .map(
                |l| match self.acc.get(&key(l)).and_then(|a| a.buf.clone()) {
                    Some(g) => Ok(g),
                    None => {
                        let (shape, dtype) = value_of(l);
                        NDArray::zeros_for("autograd::grad", shape.clone(), dtype)
                    }
                },
            )
            .collect()
    }
}

/// Shape and dtype of the value `l` names.
pub(crate) fn value_of(l: &Link) -> (&crate::Shape, crate::DType) {
    let (shape, dtype) = match &l.node.kind {
        Kind::Op(call) => &call.outputs[l.output],
        Kind::Variable { meta, .. } => meta,
    };
    (shape, *dtype)
}

/// The op's gradient spec and backward kernel, or [`Error::NoGradient`].
pub(crate) fn backward_of(
    op: &'static crate::OpDef,
    ctx: &RunContext,
) -> Result<(GradSpec, BackwardFn)> {
    let no_gradient = || Error::NoGradient { op: op.name.into() };
    let spec = op.gradient.ok_or_else(no_gradient)?;
    let backward = registered(op)?.kernels(ctx.device)?.backward;
    Ok((spec, backward.ok_or_else(no_gradient)?))
}

/// The op's backward kernel, as the executor calls it.
pub(crate) fn run_kernel(
    call: &OpCall,
    saved: &Saved,
    out_grads: &[Option<NDArray>],
    bufs: &mut [NDArray],
    reqs: &[OpReqType],
) -> Result<()> {
    let op = call.op;
    let ctx = RunContext {
        is_train: call.is_train,
        ..RunContext::default()
    };
    let (spec, backward) = backward_of(op, &ctx)?;
    let out_grads: crate::GradBlobs<'_> = out_grads
        .iter()
        .map(|g| g.as_ref().map(NDArray::blob))
        .collect();
    // An op declaring several outputs reads them all (even when this call
    // made one); a one-output op reads `output`.
    let outputs: crate::OutputBlobs<'_> = match op.outputs {
        Some(_) => saved.outputs.iter().map(NDArray::blob).collect(),
        None => Default::default(),
    };
    let args = GradArgs {
        out_grad: out_grads[0]
            .clone()
            .unwrap_or_else(|| TBlob::empty(call.outputs[0].1)),
        output: spec
            .needs_output
            .then(|| saved.outputs.first().map(NDArray::blob))
            .flatten(),
        inputs: (0..call.inputs.len())
            .map(|i| saved.inputs.get(i)?.as_ref().map(|(a, _, _)| a.blob()))
            .collect(),
        out_grads,
        outputs,
    };
    let mut blobs: SmallVec<[TBlobMut<'_>; 4]> = SmallVec::with_capacity(bufs.len());
    for b in bufs.iter_mut() {
        blobs.push(b.try_blob_mut()?);
    }
    let call_ = crate::OpCall {
        op,
        env: &call.env,
        ctx: &ctx,
    };
    backward(&call_, &args, &mut blobs, reqs)
}

/// Nodes of one pass, inline while few.
pub(crate) type Nodes = SmallVec<[Arc<Node>; 8]>;

/// Every node reachable from `heads` through recorded inputs, oldest first.
pub(crate) fn reachable(heads: &[Link]) -> Nodes {
    let mut seen: Set<usize> = Set::default();
    let mut stack: SmallVec<[Arc<Node>; 8]> = heads.iter().map(|l| l.node.clone()).collect();
    let mut nodes = Nodes::new();
    while let Some(n) = stack.pop() {
        if !seen.insert(node_key(&n)) {
            continue;
        }
        if let Some(call) = n.call() {
            stack.extend(
                call.inputs
                    .iter()
                    .flat_map(|i| &i.from)
                    .map(|l| l.node.clone()),
            );
        }
        nodes.push(n);
    }
    nodes.sort_unstable_by_key(|n| n.seq);
    nodes
}

/// The kernel call writing each input slot (none without a gradient), and
/// the number of calls: slots sharing a gradient (`f(x, x)`) go to
/// successive calls, in order, so each write sees the previous one.
fn gradient_calls(slots: &[Option<Key>]) -> (SmallVec<[Option<usize>; 4]>, usize) {
    let mut calls: SmallVec<[Option<usize>; 4]> = SmallVec::with_capacity(slots.len());
    let (mut count, mut first) = (0usize, 0);
    for (i, k) in slots.iter().enumerate() {
        let Some(k) = k else {
            calls.push(None);
            continue;
        };
        let current = count.checked_sub(1);
        let clash = (first..i).any(|j| calls[j] == current && slots[j].as_ref() == Some(k));
        if current.is_none() || clash {
            count += 1;
            first = i;
        }
        calls.push(Some(count - 1));
    }
    (calls, count)
}

/// What would make node `n`'s backward fail: no gradient, its values
/// freed, or changed in place since it saved them.
pub(crate) fn check_call(n: &Node, call: &OpCall) -> Result<()> {
    backward_of(call.op, &RunContext::default())?;
    let saved = lock(&call.saved);
    let saved = saved.as_ref().ok_or_else(|| freed(call.op.name))?;
    check_versions(n, call, saved)
}

/// Refuses values that changed in place since the node saved them.
fn check_versions(n: &Node, call: &OpCall, saved: &Saved) -> Result<()> {
    let op = call.op;
    for (i, s) in saved.inputs.iter().enumerate() {
        if let Some((_, Some(from), then)) = s {
            let now = from.node.version(from.output);
            if now != *then {
                return Err(modified(op.name, op.input_name(i), *then, now));
            }
        }
    }
    if !saved.outputs.is_empty() {
        for k in 0..call.outputs.len() {
            let now = n.version(k);
            if now != 0 {
                let names = op.output_names(&call.env);
                let name = names.get(k).map_or("output", String::as_str);
                return Err(modified(op.name, name, 0, now));
            }
        }
    }
    Ok(())
}

fn modified(op: &str, arg: &str, saved: u64, now: u64) -> Error {
    Error::ModifiedInPlace {
        op: op.into(),
        arg: arg.into(),
        saved,
        now,
    }
}

pub(crate) fn freed(op: &str) -> Error {
    Error::invalid(
        op,
        "retain_graph",
        "the values its gradient reads were freed by an earlier backward; \
         record again, or pass retain_graph = true to the first backward",
    )
}

/// `dst += src` (same shape and dtype, checked by the caller).
fn add_into(dst: &mut NDArray, src: &NDArray) -> Result<()> {
    let mut to = dst.try_blob_mut()?;
    let from = src.blob();
    dispatch_float!(from.dtype(), S => {
        let from = from.as_slice::<S>()?;
        for (d, s) in to.as_slice_mut::<S>()?.iter_mut().zip(from) {
            OpReqType::AddTo.assign(d, crate::Float::to_compute(*s));
        }
        Ok(())
    }, _ => Err(Error::argument("head_grads", format!("dtype {} has no gradient", from.dtype()))))
}
