//! The tape: one [`Node`] per variable (`attach_grad`) and per recorded op
//! call, linked from each call to the nodes of its inputs.
//!
//! A node saves only what its op's [`GradSpec`] says the gradient reads:
//! nothing for T0, the outputs for T1, the named inputs for T2. Saved
//! arrays are detached copies of the handles (shared storage, no tape),
//! so a saved output does not keep its own node alive.
//!
//! [`GradSpec`]: crate::GradSpec

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use smallvec::SmallVec;

use crate::ndarray::{Recorded, TapeRef};
use crate::symbol::config::GradReq;
use crate::{DType, EnvArguments, NDArray, OpDef, Shape};

/// Creation order of nodes: backward runs them newest first, as the
/// executor runs a graph's nodes in reverse.
static NEXT_SEQ: AtomicU64 = AtomicU64::new(0);

/// A variable or a recorded op call.
pub(crate) struct Node {
    pub(crate) seq: u64,
    /// Per output: bumped by every in-place write to that value.
    versions: SmallVec<[AtomicU64; 1]>,
    pub(crate) kind: Kind,
}

pub(crate) enum Kind {
    /// An array with `attach_grad`: its shape and dtype, and its gradient
    /// buffer (none for `Null`, and while a backward accumulates into it).
    Variable {
        req: GradReq,
        meta: (Shape, DType),
        grad: Mutex<Option<NDArray>>,
    },
    /// An op call.
    Op(OpCall),
}

/// A recorded op call.
pub(crate) struct OpCall {
    pub(crate) op: &'static OpDef,
    /// The call's arguments, seed included (a random op's mask is an output).
    pub(crate) env: EnvArguments,
    /// Whether the call ran in training mode; its backward runs in the same
    /// mode (BatchNorm's gradient differs).
    pub(crate) is_train: bool,
    /// Per argument.
    pub(crate) inputs: Vec<Input>,
    /// Per output (hidden ones included).
    pub(crate) outputs: SmallVec<[(Shape, DType); 1]>,
    /// `None` once a backward without `retain_graph` has run this node.
    pub(crate) saved: Mutex<Option<Saved>>,
}

/// One argument of a recorded call.
pub(crate) struct Input {
    /// Its node when it needs a gradient (a variable asking for one, or a
    /// recorded output); `None` for a constant.
    pub(crate) from: Option<Link>,
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
    /// Its storage's address and bytes, to count the tape's memory.
    pub(crate) storage: (usize, usize),
}

/// Output `output` of `node`.
#[derive(Clone)]
pub(crate) struct Link {
    pub(crate) node: Arc<Node>,
    pub(crate) output: usize,
}

/// What a gradient reads, with each value's version when it was saved.
pub(crate) struct Saved {
    /// Per argument, present when the gradient reads it: the value, its
    /// node (any array on the tape) and that node's version then. Empty
    /// when the gradient reads no argument.
    pub(crate) inputs: Vec<Option<(NDArray, Option<Link>, u64)>>,
    /// Every output, when the gradient reads them; otherwise empty.
    pub(crate) outputs: SmallVec<[NDArray; 1]>,
}

impl Recorded for Node {
    fn note_write(&self, k: usize) {
        if let Some(v) = self.versions.get(k) {
            v.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn holds(&self, shape: &Shape, dtype: DType) -> bool {
        matches!(&self.kind, Kind::Variable { meta, .. } if meta.0 == *shape && meta.1 == dtype)
    }
}

impl Node {
    fn new(outputs: usize, kind: Kind) -> Node {
        Node {
            seq: NEXT_SEQ.fetch_add(1, Ordering::Relaxed),
            versions: (0..outputs).map(|_| AtomicU64::new(0)).collect(),
            kind,
        }
    }

    /// Output `k`'s version: how many in-place writes it has seen.
    pub(crate) fn version(&self, k: usize) -> u64 {
        self.versions
            .get(k)
            .map_or(0, |v| v.load(Ordering::Relaxed))
    }

    /// Whether a gradient flows into this node's values at all.
    pub(crate) fn wants_gradient(&self) -> bool {
        match &self.kind {
            Kind::Variable { req, .. } => *req != GradReq::Null,
            Kind::Op(_) => true,
        }
    }

    /// The recorded call, for an op node.
    pub(crate) fn call(&self) -> Option<&OpCall> {
        match &self.kind {
            Kind::Op(c) => Some(c),
            Kind::Variable { .. } => None,
        }
    }
}

impl Drop for Node {
    /// Drops a long chain of nodes in a loop: recursive drops of a deep
    /// tape would overflow the stack.
    fn drop(&mut self) {
        let Kind::Op(call) = &mut self.kind else {
            return;
        };
        let mut stack = links(call);
        while let Some(node) = stack.pop() {
            if let Some(mut node) = Arc::into_inner(node)
                && let Kind::Op(call) = &mut node.kind
            {
                stack.extend(links(call));
            }
        }
    }
}

/// Takes the node links out of `call`: its inputs', and those its saved
/// values keep for their versions.
fn links(call: &mut OpCall) -> SmallVec<[Arc<Node>; 4]> {
    let saved = call.saved.get_mut().unwrap_or_else(|e| e.into_inner());
    let kept = saved.iter_mut().flat_map(|s| s.inputs.iter_mut().flatten());
    let kept = kept.filter_map(|(_, from, _)| from.take().map(|l| l.node));
    let inputs = call
        .inputs
        .iter_mut()
        .filter_map(|i| i.from.take().map(|l| l.node));
    inputs.chain(kept).collect()
}

/// Locks `m`; a thread that panicked while holding it left plain data,
/// which stays usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The node behind an array's tape entry.
pub(crate) fn link_of(a: &NDArray) -> Option<Link> {
    let t = a.tape()?;
    let any: Arc<dyn std::any::Any + Send + Sync> = t.node.clone();
    let node = any.downcast::<Node>().ok()?;
    Some(Link {
        node,
        output: t.output,
    })
}

pub(crate) fn tape_ref(node: &Arc<Node>, output: usize) -> TapeRef {
    TapeRef {
        node: node.clone(),
        output,
    }
}

/// Makes `a` a variable with gradient buffer `grad` (none for `Null`).
pub(crate) fn attach(a: &mut NDArray, req: GradReq, grad: Option<NDArray>) {
    let node = Arc::new(Node::new(
        1,
        Kind::Variable {
            req,
            meta: (a.shape().clone(), a.dtype()),
            grad: Mutex::new(grad),
        },
    ));
    a.set_tape(Some(tape_ref(&node, 0)));
}

/// Whether `a` carries a gradient: a variable asking for one, or a
/// recorded output.
pub(crate) fn needs_gradient(a: &NDArray) -> bool {
    gradient_link(a).is_some()
}

/// `a`'s place on the tape when a gradient flows through it.
pub(crate) fn gradient_link(a: &NDArray) -> Option<Link> {
    link_of(a).filter(|l| l.node.wants_gradient())
}

/// Whether `a` is a variable asking for a gradient.
pub(crate) fn is_variable(a: &NDArray) -> bool {
    gradient_link(a).is_some_and(|l| matches!(l.node.kind, Kind::Variable { .. }))
}

/// Records a call of `op` on `inputs` (its arguments) that made `outputs`,
/// and puts each float output on the tape. Nothing is recorded when no
/// input carries a gradient.
pub(crate) fn record(
    op: &'static OpDef,
    env: &EnvArguments,
    inputs: &[&NDArray],
    outputs: &mut [NDArray],
) {
    if inputs.iter().all(|a| a.tape().is_none()) {
        return;
    }
    let links: SmallVec<[Option<Link>; 4]> = inputs.iter().map(|a| link_of(a)).collect();
    let needed = links.iter().flatten().any(|l| l.node.wants_gradient());
    if !needed || !outputs.iter().any(|o| o.dtype().is_float()) {
        return;
    }
    // The op a graph runs for these kwargs (`Activation` as `softsign`),
    // whose gradient the executor would run: the same bits either way.
    let op = crate::registry::runs_as(op, env);
    let spec = op.gradient;
    // Empty, not a list of `None`s, when the gradient reads no argument.
    let reads_inputs = spec.is_some_and(|s| s.needs_inputs != 0);
    let saved_inputs = inputs
        .iter()
        .take(if reads_inputs { inputs.len() } else { 0 })
        .zip(&links)
        .enumerate()
        .map(|(i, (a, from))| {
            let read = spec.is_some_and(|s| s.needs_input(i));
            read.then(|| {
                let version = from.as_ref().map_or(0, |l| l.node.version(l.output));
                (a.detach(), from.clone(), version)
            })
        })
        .collect();
    let saved_outputs = match spec {
        Some(s) if s.needs_output => outputs.iter().map(NDArray::detach).collect(),
        _ => SmallVec::new(),
    };
    let call = OpCall {
        op,
        env: env.clone(),
        is_train: super::mode::is_training(),
        inputs: inputs
            .iter()
            .zip(links)
            .map(|(a, from)| Input {
                from: from.filter(|l| l.node.wants_gradient()),
                shape: a.shape().clone(),
                dtype: a.dtype(),
                storage: a.storage_id(),
            })
            .collect(),
        outputs: outputs
            .iter()
            .map(|o| (o.shape().clone(), o.dtype()))
            .collect(),
        saved: Mutex::new(Some(Saved {
            inputs: saved_inputs,
            outputs: saved_outputs,
        })),
    };
    let node = Arc::new(Node::new(outputs.len(), Kind::Op(call)));
    for (k, o) in outputs.iter_mut().enumerate() {
        let tape = o.dtype().is_float().then(|| tape_ref(&node, k));
        o.set_tape(tape);
    }
}
