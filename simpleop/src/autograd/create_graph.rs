//! Backward that records itself (`create_graph`): each recorded call's
//! gradient runs as an eager, recorded call of its `_backward` op
//! ([`crate::backward_op`]), and gradients reaching one value are summed
//! by a recorded `add_n`. The returned gradients are on the tape, so they
//! can be differentiated again, as PyTorch's `create_graph=True` and
//! MXNet's `autograd.grad(create_graph=True)` allow.
//!
//! The values each gradient reads are the ones the tape saved, put back
//! on the tape where they came from (an input's node, the call's own
//! outputs), so the second derivative flows through them. An argument the
//! gradient does not read was not saved; a zero array of its shape stands
//! in (the gradient does not depend on it).

use std::collections::HashMap;
use std::sync::Arc;

use super::engine::{Key, Pass, freed, key, value_of};
use super::mode::RecordingGuard;
use super::tape::{Link, Node, OpCall, lock, tape_ref};
use crate::backward_op;
use crate::{Attrs, Error, NDArray, Result, eager};

/// The gradients of `heads` (seeded with `seeds`) with respect to
/// `wanted`, recorded. `pass` was made for `heads` and `wanted` and
/// checked.
pub(crate) fn recorded_grads(
    pass: &Pass<'_>,
    heads: &[Link],
    seeds: &[NDArray],
    wanted: &[Link],
) -> Result<Vec<NDArray>> {
    let mut sums = Sums::default();
    for (l, g) in heads.iter().zip(seeds) {
        sums.push(key(l), g.clone());
    }
    for n in pass.needed_newest_first() {
        let call = n.call().expect("needed nodes are calls");
        let Some(dys) = out_grads(n, call, &mut sums)? else {
            continue;
        };
        let grads = backward_call(n, call, dys)?;
        for (input, g) in call.inputs.iter().zip(grads) {
            if let Some(l) = input.from.as_ref().filter(|l| pass.leads_to_target(l)) {
                sums.push(key(l), g);
            }
        }
    }
    wanted
        .iter()
        .map(|l| match sums.total(key(l))? {
            Some(g) => Ok(g),
            None => {
                let (shape, dtype) = value_of(l);
                NDArray::zeros_for("autograd::grad", shape.clone(), dtype)
            }
        })
        .collect()
}

/// The gradients reaching each value so far.
#[derive(Default)]
struct Sums(HashMap<Key, Vec<NDArray>>);

impl Sums {
    fn push(&mut self, k: Key, g: NDArray) {
        self.0.entry(k).or_default().push(g);
    }

    /// The value's gradient: its one contribution, or their recorded
    /// `add_n` (kept as the value's one contribution from then on).
    fn total(&mut self, k: Key) -> Result<Option<NDArray>> {
        let Some(gs) = self.0.get_mut(&k) else {
            return Ok(None);
        };
        if gs.len() > 1 {
            let refs: Vec<&NDArray> = gs.iter().collect();
            let attrs = Attrs::new().with("num_args", gs.len());
            let sum = {
                let _recording = RecordingGuard::new(true, true);
                eager::invoke("add_n", &refs, &attrs)
            }
            .map_err(|e| {
                Error::invalid(
                    "autograd::grad",
                    "create_graph",
                    format!("summing with `add_n` (link simpleop_ops): {e}"),
                )
            })?;
            *gs = vec![sum];
        }
        Ok(gs.first().cloned())
    }
}

/// Each output's gradient (zeros where none arrived), or `None` when no
/// gradient reached the node.
fn out_grads(n: &Arc<Node>, call: &OpCall, sums: &mut Sums) -> Result<Option<Vec<NDArray>>> {
    let node = Arc::as_ptr(n) as usize;
    let got: Vec<Option<NDArray>> = (0..call.outputs.len())
        .map(|k| sums.total((node, k)))
        .collect::<Result<_>>()?;
    if got.iter().all(Option::is_none) {
        return Ok(None);
    }
    got.into_iter()
        .zip(&call.outputs)
        .map(|(g, (shape, dtype))| match g {
            Some(g) => Ok(g),
            None => NDArray::zeros_for(call.op.name, shape.clone(), *dtype),
        })
        .collect::<Result<_>>()
        .map(Some)
}

/// The call's `_backward`, recorded: one gradient per argument.
fn backward_call(n: &Arc<Node>, call: &OpCall, dys: Vec<NDArray>) -> Result<Vec<NDArray>> {
    let layout = backward_op::Layout::of(call.op, &call.env)?;
    let mut args = dys;
    {
        let saved = lock(&call.saved);
        let saved = saved.as_ref().ok_or_else(|| freed(call.op.name))?;
        if layout.reads_outputs {
            for (k, y) in saved.outputs.iter().enumerate() {
                args.push(on_tape(y, n, k));
            }
        }
        for (i, input) in call.inputs.iter().enumerate() {
            args.push(match saved.inputs.get(i).and_then(Option::as_ref) {
                Some((x, Some(from), _)) => on_tape(x, &from.node, from.output),
                Some((x, None, _)) => x.clone(),
                None => NDArray::zeros_for(call.op.name, input.shape.clone(), input.dtype)?,
            });
        }
    }
    let refs: Vec<&NDArray> = args.iter().collect();
    let env = backward_op::env_for(call.op, &call.env);
    let _recording = RecordingGuard::new(true, call.is_train);
    eager::invoke_outputs(&backward_op::OP, &refs, &mut [], &env)
}

/// `a` (a saved value) as output `k` of `node` on the tape again.
fn on_tape(a: &NDArray, node: &Arc<Node>, k: usize) -> NDArray {
    let mut a = a.clone();
    a.set_tape(Some(tape_ref(node, k)));
    a
}
