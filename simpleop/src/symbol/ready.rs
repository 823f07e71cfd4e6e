//! When, in a training plan's backward steps, each argument's gradient
//! is final: what the gradient-ready hook of
//! [`Executor::backward_with_hook`] is given, and when.
//!
//! [`Executor::backward_with_hook`]: super::Executor::backward_with_hook

use super::steps::{Loc, Plan};
use crate::NDArray;

/// A gradient that backward has finished: no later step of the pass
/// writes or reads its buffer. Given to the hook of
/// [`Executor::backward_with_hook`](super::Executor::backward_with_hook) and of
/// [`autograd::backward_with_hook`](crate::autograd::backward_with_hook).
#[derive(Clone, Copy, Debug)]
pub struct GradReady<'a> {
    /// The argument's index in
    /// [`Executor::arg_names`](super::Executor::arg_names), or for the tape
    /// the variable's index in the list passed to `backward_with_hook`.
    pub index: usize,
    /// The argument's name; empty for the tape, whose variables have none.
    pub name: &'a str,
    /// The gradient buffer, holding its final value for this backward.
    pub grad: &'a NDArray,
}

/// When each argument with a gradient buffer is final: pairs `(steps, k)`
/// sorted by `steps`, meaning argument `k`'s gradient is final once the
/// plan's steps before index `steps` have run. The last backward step that
/// writes or reads the argument's buffer sets it; an argument that no
/// backward step touches is final from the start (`backward_start`).
pub(crate) fn ready_schedule(plan: &Plan, has_grad: &[bool]) -> Vec<(usize, usize)> {
    let mut last: Vec<Option<usize>> = vec![None; has_grad.len()];
    let arg_of = |v: usize| match plan.values[v].loc {
        Loc::ArgGrad(k) => Some(k),
        _ => None,
    };
    for s in plan.backward_start..plan.steps.len() {
        let step = &plan.steps[s];
        for v in step.reads().into_iter().chain(step.writes()) {
            if let Some(k) = arg_of(v) {
                last[k] = Some(s + 1);
            }
        }
    }
    let mut order: Vec<(usize, usize)> = (0..has_grad.len())
        .filter(|&k| has_grad[k])
        .map(|k| (last[k].unwrap_or(plan.backward_start), k))
        .collect();
    // Stable: arguments finished by one step keep their index order.
    order.sort_by_key(|&(s, _)| s);
    order
}
