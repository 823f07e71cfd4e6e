//! Eager autograd: record eager calls, then run their gradients backward,
//! as MXNet's `autograd` and PyTorch's tensors do.
//!
//! ```
//! use simpleop::{autograd, eager, Attrs, NDArray};
//! simpleop_ops::link();
//! let mut x = NDArray::from_vec(vec![1.0f32, -2.0, 3.0], [3])?;
//! x.attach_grad()?;
//! let y = autograd::record(|| {
//!     let sq = eager::invoke("square", &[&x], &Attrs::new())?;
//!     eager::invoke("sum", &[&sq], &Attrs::new())
//! })?;
//! y.backward()?;
//! assert_eq!(x.grad().unwrap().to_vec::<f32>()?, [2.0, -4.0, 6.0]);
//! # Ok::<(), simpleop::Error>(())
//! ```
//!
//! - [`NDArray::attach_grad`] makes an array a variable with a gradient
//!   buffer ([`GradReq`] `write`, `add` or `null`); [`NDArray::grad`]
//!   reads it.
//! - Inside [`record`] (or a [`RecordingGuard`]) every eager call with an
//!   input that carries a gradient is put on a tape; [`pause`] stops that.
//!   Both are per thread: threads recording at once never see each other's
//!   calls. `record` also sets training mode ([`is_training`]), so Dropout
//!   drops and BatchNorm uses the batch's statistics, as in MXNet.
//! - [`backward`] (or [`NDArray::backward`]) runs the recorded calls'
//!   backward kernels, newest first, into the variables' buffers; [`grad`]
//!   returns the gradients of chosen arrays instead and touches no buffer.
//!
//! **The tape keeps only what each gradient reads**: a call saves what its
//! op's [`GradSpec`](crate::GradSpec) names, nothing for a T0 gradient,
//! the output for T1, the named inputs for T2. [`tape_stats`] reports those
//! bytes against saving every input and output.
//!
//! **Accumulation** uses [`OpReqType::AddTo`](crate::OpReqType): an array
//! used twice receives one `WriteTo` and then `AddTo` writes into one
//! buffer, and a variable with `add` accumulates across backward calls.
//! The gradients equal the executor's bitwise for the same graph: the same
//! kernels run in the same order with the same requests.
//!
//! **In-place updates.** Writing to an array in place after a recorded call
//! saved it (an in-place op, `as_slice_mut`) bumps its version; the
//! backward that would read it refuses with [`Error::ModifiedInPlace`]
//! instead of computing a wrong gradient. Under recording, an in-place op on
//! a variable that asks for a gradient is refused at once. Optimizer
//! updates (`sgd_mom_update` and the like) run outside recording and update
//! parameters in place.
//!
//! A backward frees the values it read unless `retain_graph` is set; a
//! second backward through them is then an error. Ops without a gradient
//! are an error at backward time, and only when a path needs them.

mod backward_kernels;
mod create_graph;
mod engine;
pub(crate) mod mode;
mod one_call;
mod table;
pub(crate) mod tape;

use std::collections::HashSet;

pub use mode::{RecordingGuard, TrainingGuard, is_recording, is_training};

use crate::symbol::GradReady;
use crate::symbol::config::GradReq;
use crate::{Error, NDArray, Result};
use engine::{Pass, Targets};
use one_call::OneCall;
use tape::{Kind, Link, gradient_link, link_of};

/// Runs `f` recording eager calls, in training mode (MXNet's
/// `autograd.record()`).
pub fn record<R>(f: impl FnOnce() -> R) -> R {
    let _guard = RecordingGuard::new(true, true);
    f()
}

/// Runs `f` recording eager calls, in training mode or not
/// (`autograd.record(train_mode=...)`).
pub fn record_with<R>(train_mode: bool, f: impl FnOnce() -> R) -> R {
    let _guard = RecordingGuard::new(true, train_mode);
    f()
}

/// Runs `f` without recording, in inference mode (MXNet's
/// `autograd.pause()`): for evaluation inside a recorded step.
///
/// ```
/// use simpleop::autograd;
/// autograd::record(|| {
///     assert!(autograd::is_recording());
///     autograd::pause(|| assert!(!autograd::is_recording() && !autograd::is_training()));
/// });
/// ```
pub fn pause<R>(f: impl FnOnce() -> R) -> R {
    let _guard = RecordingGuard::new(false, false);
    f()
}

/// Backward from `heads`, into every variable's gradient buffer. Each head
/// takes its gradient from `head_grads` (one per head, its shape and
/// dtype) or, when `head_grads` is empty, ones. Frees the values the pass
/// read; see [`backward_with`] to keep them.
///
/// ```
/// use simpleop::{autograd, eager, Attrs, NDArray};
/// simpleop_ops::link();
/// let mut a = NDArray::from_vec(vec![2.0f32], [1])?;
/// let mut b = NDArray::from_vec(vec![3.0f32], [1])?;
/// a.attach_grad()?;
/// b.attach_grad()?;
/// let (p, s) = autograd::record(|| -> simpleop::Result<_> {
///     let p = eager::invoke("elemwise_mul", &[&a, &b], &Attrs::new())?;
///     let s = eager::invoke("elemwise_add", &[&a, &b], &Attrs::new())?;
///     Ok((p, s))
/// })?;
/// // d(p + 10 s)/da = b + 10, d/db = a + 10
/// let ten = NDArray::from_vec(vec![10.0f32], [1])?;
/// autograd::backward(&[&p, &s], &[&NDArray::ones([1], a.dtype()), &ten])?;
/// assert_eq!(a.grad().unwrap().to_vec::<f32>()?, [13.0]);
/// assert_eq!(b.grad().unwrap().to_vec::<f32>()?, [12.0]);
/// # Ok::<(), simpleop::Error>(())
/// ```
pub fn backward(heads: &[&NDArray], head_grads: &[&NDArray]) -> Result<()> {
    backward_with(heads, head_grads, false)
}

/// [`backward`], keeping the values the gradients read when
/// `retain_graph`, so that another backward can run through them.
pub fn backward_with(
    heads: &[&NDArray],
    head_grads: &[&NDArray],
    retain_graph: bool,
) -> Result<()> {
    let links = head_links(heads)?;
    if let [head] = &links[..]
        && let Some(one) = OneCall::new(head)
    {
        one.check()?;
        let grads = seed_grads(heads, head_grads)?;
        return one.run(&grads[0], retain_graph);
    }
    let mut pass = Pass::new(&links, Targets::Variables);
    pass.check()?;
    let grads = seed_grads(heads, head_grads)?;
    pass.take_buffers();
    let result = (|| {
        for (l, g) in links.iter().zip(&grads) {
            pass.seed(l, g)?;
        }
        pass.run(retain_graph, |_, _| Ok(()))
    })();
    pass.finish(result.is_ok());
    result
}

/// [`backward`], calling `hook` once for each of `variables` as soon as
/// its gradient is final: after the last recorded call of the pass that
/// writes it (the tape runs calls newest first, so this is the oldest call
/// reading the variable), so that no later kernel changes it. The hook's
/// [`GradReady::index`] is the variable's position in `variables`, its
/// `name` is empty, and its `grad` is the buffer backward fills.
///
/// Each of `variables` must be a variable with a gradient buffer
/// (`attach_grad` with `write` or `add`), listed once. Every one of them
/// is given exactly once per call: a variable the heads do not depend on,
/// or reach only as a head, is final from the start and is given before
/// the first kernel runs (its buffer is then left as it was, as
/// [`backward`] leaves it). Variables not listed get their gradients as
/// usual, without a call. The order is the order backward finishes the
/// gradients, roughly the reverse of the order they were used in; it is
/// not guaranteed. An error from `hook` stops the pass and is returned.
///
/// ```
/// use simpleop::{autograd, eager, Attrs, NDArray};
/// simpleop_ops::link();
/// let mut w = NDArray::from_vec(vec![3.0f32], [1])?;
/// let mut b = NDArray::from_vec(vec![1.0f32], [1])?;
/// w.attach_grad()?;
/// b.attach_grad()?;
/// let x = NDArray::from_vec(vec![2.0f32], [1])?;
/// let y = autograd::record(|| {
///     let wx = eager::invoke("elemwise_mul", &[&w, &x], &Attrs::new())?;
///     eager::invoke("elemwise_add", &[&wx, &b], &Attrs::new())
/// })?;
/// let mut seen = Vec::new();
/// autograd::backward_with_hook(&[&y], &[], &[&w, &b], &mut |g| {
///     seen.push((g.index, g.grad.to_vec::<f32>()?[0]));
///     Ok(())
/// })?;
/// assert_eq!(seen, [(1, 1.0), (0, 2.0)]); // b's gradient is final first
/// # Ok::<(), simpleop::Error>(())
/// ```
pub fn backward_with_hook(
    heads: &[&NDArray],
    head_grads: &[&NDArray],
    variables: &[&NDArray],
    hook: &mut dyn FnMut(GradReady<'_>) -> Result<()>,
) -> Result<()> {
    let links = head_links(heads)?;
    let vars = hooked_variables(variables)?;
    let mut pass = Pass::new(&links, Targets::Variables);
    pass.check()?;
    let grads = seed_grads(heads, head_grads)?;
    // (node after which it is final, variable), in the order they run.
    let mut order: Vec<(Option<usize>, usize)> = pass
        .last_writers(&vars)
        .into_iter()
        .enumerate()
        .map(|(k, i)| (i, k))
        .collect();
    order.sort_by_key(|&(i, _)| std::cmp::Reverse(i.map_or(usize::MAX, |i| i)));
    let mut next = 0;
    let mut give = |pass: &Pass<'_>, done: Option<usize>| -> Result<()> {
        while let Some(&(i, k)) = order.get(next)
            && i.is_none_or(|i| done.is_some_and(|d| i >= d))
        {
            next += 1;
            let kept;
            let grad = match pass.held_grad(&vars[k]) {
                Some(g) => g,
                None => {
                    kept = variables[k].grad().ok_or_else(|| no_buffer(k))?;
                    &kept
                }
            };
            hook(GradReady {
                index: k,
                name: "",
                grad,
            })?;
        }
        Ok(())
    };
    pass.take_buffers();
    let result = (|| {
        for (l, g) in links.iter().zip(&grads) {
            pass.seed(l, g)?;
        }
        give(&pass, None)?;
        pass.run(false, |pass, i| give(pass, Some(i)))
    })();
    pass.finish(result.is_ok());
    result
}

/// The tape links of `backward_with_hook`'s variables: each a variable
/// with a gradient buffer, listed once.
fn hooked_variables(variables: &[&NDArray]) -> Result<Vec<Link>> {
    let op = "autograd::backward_with_hook";
    let mut seen = HashSet::new();
    variables
        .iter()
        .enumerate()
        .map(|(k, v)| {
            let l = gradient_link(v)
                .filter(|l| matches!(l.node.kind, Kind::Variable { .. }))
                .ok_or_else(|| {
                    Error::invalid(
                        op,
                        format!("variables[{k}]"),
                        "not a variable asking for a gradient: attach_grad it (write or add)",
                    )
                })?;
            if v.grad().is_none() {
                return Err(no_buffer(k));
            }
            if !seen.insert(std::sync::Arc::as_ptr(&l.node) as usize) {
                return Err(Error::invalid(
                    op,
                    format!("variables[{k}]"),
                    "listed twice (each variable's gradient is given once)",
                ));
            }
            Ok(l)
        })
        .collect()
}

fn no_buffer(k: usize) -> Error {
    Error::invalid(
        "autograd::backward_with_hook",
        format!("variables[{k}]"),
        "has no gradient buffer (a backward using it failed midway?)",
    )
}

/// The gradients of `heads` with respect to each of `inputs` (variables or
/// recorded arrays), returned in order; no gradient buffer is read or
/// written (MXNet's `autograd.grad`). `head_grads` as in [`backward`]. An
/// input that no head depends on gets zeros. Without `retain_graph` the
/// values of every call the heads depend on are freed, as by [`backward`].
///
/// ```
/// use simpleop::{autograd, eager, Attrs, NDArray};
/// simpleop_ops::link();
/// let mut x = NDArray::from_vec(vec![0.5f32, 2.0], [2])?;
/// x.attach_grad()?;
/// let y = autograd::record(|| eager::invoke("log", &[&x], &Attrs::new()))?;
/// let dx = autograd::grad(&[&y], &[&x], &[], false)?;
/// assert_eq!(dx[0].to_vec::<f32>()?, [2.0, 0.5]);
/// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, [0.0, 0.0]); // untouched
/// # Ok::<(), simpleop::Error>(())
/// ```
pub fn grad(
    heads: &[&NDArray],
    inputs: &[&NDArray],
    head_grads: &[&NDArray],
    retain_graph: bool,
) -> Result<Vec<NDArray>> {
    let options = GradOptions {
        retain_graph,
        create_graph: false,
    };
    grad_with(heads, inputs, head_grads, options)
}

/// Options of [`grad_with`] (MXNet's `autograd.grad` keywords).
#[derive(Clone, Copy, Debug, Default)]
pub struct GradOptions {
    /// Keep the values the gradients read, for another backward.
    pub retain_graph: bool,
    /// Record the backward pass itself, so the returned gradients are on
    /// the tape and can be differentiated again (second derivatives;
    /// implies `retain_graph`). Each gradient step runs as its op's
    /// `_backward` ([`crate::backward_op`]).
    pub create_graph: bool,
}

/// [`grad`] with options; with `create_graph` the gradients are
/// recorded, for gradients of gradients.
///
/// ```
/// use simpleop::{autograd, eager, Attrs, NDArray};
/// use simpleop::autograd::GradOptions;
/// simpleop_ops::link();
/// let mut x = NDArray::from_vec(vec![0.5f64], [1])?;
/// x.attach_grad()?;
/// let y = autograd::record(|| eager::invoke("tanh", &[&x], &Attrs::new()))?;
/// let options = GradOptions { create_graph: true, ..Default::default() };
/// let dy = autograd::grad_with(&[&y], &[&x], &[], options)?; // 1 - tanh²
/// let d2y = autograd::grad(&[&dy[0]], &[&x], &[], false)?; // -2 tanh (1 - tanh²)
/// let t = 0.5f64.tanh();
/// assert!((d2y[0].to_vec::<f64>()?[0] - -2.0 * t * (1.0 - t * t)).abs() < 1e-15);
/// # Ok::<(), simpleop::Error>(())
/// ```
pub fn grad_with(
    heads: &[&NDArray],
    inputs: &[&NDArray],
    head_grads: &[&NDArray],
    options: GradOptions,
) -> Result<Vec<NDArray>> {
    let links = head_links(heads)?;
    let wanted: Vec<Link> = inputs
        .iter()
        .enumerate()
        .map(|(k, a)| {
            gradient_link(a).ok_or_else(|| {
                Error::invalid(
                    "autograd::grad",
                    format!("inputs[{k}]"),
                    "not on the tape: attach_grad it, or compute it while recording",
                )
            })
        })
        .collect::<Result<_>>()?;
    let mut pass = Pass::new(&links, Targets::Values(&wanted));
    pass.check()?;
    let grads = seed_grads(heads, head_grads)?;
    if options.create_graph {
        return create_graph::recorded_grads(&pass, &links, &grads, &wanted);
    }
    for (l, g) in links.iter().zip(&grads) {
        pass.seed(l, g)?;
    }
    pass.run(options.retain_graph, |_, _| Ok(()))?;
    pass.take_values(&wanted)
}

/// Whether `a` is on the tape with a gradient path: a variable asking
/// for one, or a recorded value computed from one.
pub(crate) fn is_recorded(a: &NDArray) -> bool {
    gradient_link(a).is_some()
}

/// Per head, inline for the usual one or two.
type Heads<T> = smallvec::SmallVec<[T; 2]>;

/// Each head's place on the tape, or an error naming the head: one not
/// recorded, or whose handle no longer holds the recorded value (replaced
/// or written in place since).
fn head_links(heads: &[&NDArray]) -> Result<Heads<Link>> {
    let refuse =
        |k: usize, why: &str| Error::invalid("autograd::backward", format!("heads[{k}]"), why);
    heads
        .iter()
        .enumerate()
        .map(|(k, h)| {
            let l = gradient_link(h).ok_or_else(|| {
                refuse(
                    k,
                    "not recorded: compute it inside autograd::record from an array with attach_grad",
                )
            })?;
            let changed = l.node.call().is_some() && l.node.version(l.output) != 0;
            if engine::value_of(&l) != (h.shape(), h.dtype()) || changed {
                return Err(refuse(
                    k,
                    "changed in place since it was recorded: backward from the recorded value's handle",
                ));
            }
            Ok(l)
        })
        .collect()
}

/// Ones of `h`'s shape and dtype. A small one is kept per thread and
/// shared: a backward on a scalar loss (the usual head) then allocates no
/// seed. Sharing is safe, as writing to shared storage copies it first.
fn ones_like(h: &NDArray) -> Result<NDArray> {
    const KEPT: usize = 1024;
    thread_local! {
        static ONES: std::cell::RefCell<Option<NDArray>> = const { std::cell::RefCell::new(None) };
    }
    let fresh = || NDArray::full_for("autograd::backward", h.shape().clone(), 1.0, h.dtype());
    if h.size() > KEPT {
        return fresh();
    }
    ONES.with(|kept| {
        let mut kept = kept.borrow_mut();
        if let Some(a) = kept.as_ref()
            && a.shape() == h.shape()
            && a.dtype() == h.dtype()
        {
            return Ok(a.clone());
        }
        let a = fresh()?;
        *kept = Some(a.clone());
        Ok(a)
    })
}

/// One gradient per head: `head_grads`, checked, or ones.
fn seed_grads(heads: &[&NDArray], head_grads: &[&NDArray]) -> Result<Heads<NDArray>> {
    if head_grads.is_empty() {
        return heads.iter().map(|h| ones_like(h)).collect();
    }
    if head_grads.len() != heads.len() {
        return Err(Error::invalid(
            "autograd::backward",
            "head_grads",
            format!(
                "expected one per head ({}) or none, got {}",
                heads.len(),
                head_grads.len()
            ),
        ));
    }
    heads
        .iter()
        .zip(head_grads)
        .enumerate()
        .map(|(k, (h, g))| {
            if g.shape() != h.shape() || g.dtype() != h.dtype() {
                return Err(Error::invalid(
                    "autograd::backward",
                    format!("head_grads[{k}]"),
                    format!(
                        "expected shape {} and dtype {} (the head's), got {} and {}",
                        h.shape(),
                        h.dtype(),
                        g.shape(),
                        g.dtype()
                    ),
                ));
            }
            Ok(g.detach())
        })
        .collect()
}

/// The memory a tape holds: what its gradients read against what saving
/// every input and output of every recorded call would hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapeStats {
    /// Recorded calls reachable from the heads.
    pub calls: usize,
    /// Bytes of the distinct arrays the calls saved.
    pub saved_bytes: usize,
    /// Bytes of the distinct inputs and outputs of the calls.
    pub all_bytes: usize,
}

/// [`TapeStats`] of the calls that `heads` depend on.
pub fn tape_stats(heads: &[&NDArray]) -> TapeStats {
    let links: Vec<Link> = heads.iter().filter_map(|h| link_of(h)).collect();
    let mut stats = TapeStats::default();
    let mut saved_seen = HashSet::new();
    let mut value_seen = HashSet::new();
    let count = |seen: &mut HashSet<(usize, usize)>, id: (usize, usize), bytes: usize| {
        if seen.insert(id) { bytes } else { 0 }
    };
    for n in engine::reachable(&links) {
        let Kind::Op(call) = &n.kind else { continue };
        stats.calls += 1;
        let node = std::sync::Arc::as_ptr(&n) as usize;
        for (k, (shape, dtype)) in call.outputs.iter().enumerate() {
            let bytes = shape.size() * dtype.size();
            stats.all_bytes += count(&mut value_seen, (node, k), bytes);
        }
        for i in &call.inputs {
            let bytes = i.shape.size() * i.dtype.size();
            let id = match &i.from {
                Some(l) => (std::sync::Arc::as_ptr(&l.node) as usize, l.output),
                None => (i.storage.0, usize::MAX),
            };
            stats.all_bytes += count(&mut value_seen, id, bytes);
        }
        if let Some(saved) = tape::lock(&call.saved).as_ref() {
            let arrays = saved.inputs.iter().flatten().map(|(a, _, _)| a);
            for a in arrays.chain(&saved.outputs) {
                let (addr, bytes) = a.storage_id();
                stats.saved_bytes += count(&mut saved_seen, (addr, 0), bytes);
            }
        }
    }
    stats
}

/// Makes each of `variables` a variable with the given gradient buffer
/// and request (MXNet's `autograd.mark_variables`): a buffer to accumulate
/// into with `Add`, say. Each buffer must have its variable's shape and
/// dtype.
pub fn mark_variables(
    variables: &mut [&mut NDArray],
    gradients: Vec<NDArray>,
    reqs: &[GradReq],
) -> Result<()> {
    if gradients.len() != variables.len() || reqs.len() != variables.len() {
        return Err(Error::invalid(
            "autograd::mark_variables",
            "gradients",
            format!(
                "expected one gradient and one request per variable ({}), got {} and {}",
                variables.len(),
                gradients.len(),
                reqs.len()
            ),
        ));
    }
    for (k, (v, g)) in variables.iter().zip(&gradients).enumerate() {
        if g.shape() != v.shape() || g.dtype() != v.dtype() || !v.dtype().is_float() {
            return Err(Error::invalid(
                "autograd::mark_variables",
                format!("gradients[{k}]"),
                format!(
                    "expected shape {} and a float dtype {} (the variable's), got {} and {}",
                    v.shape(),
                    v.dtype(),
                    g.shape(),
                    g.dtype()
                ),
            ));
        }
    }
    for ((v, g), &req) in variables.iter_mut().zip(gradients).zip(reqs) {
        tape::attach(v, req, (req != GradReq::Null).then(|| g.detach()));
    }
    Ok(())
}

impl NDArray {
    /// Makes this array a variable whose gradient backward writes
    /// (MXNet's `attach_grad()`); the buffer starts as zeros. Clones made
    /// afterwards share it.
    pub fn attach_grad(&mut self) -> Result<()> {
        self.attach_grad_with(GradReq::Write)
    }

    /// [`NDArray::attach_grad`] with a request: `Write` overwrites the
    /// buffer at every backward, `Add` accumulates into it, `Null` gives
    /// none (the array is then a constant to autograd, and has no buffer).
    pub fn attach_grad_with(&mut self, req: GradReq) -> Result<()> {
        if !self.dtype().is_float() {
            return Err(Error::invalid(
                "attach_grad",
                "dtype",
                format!("{} has no gradient; expected a float dtype", self.dtype()),
            ));
        }
        let grad = match req {
            GradReq::Null => None,
            _ => Some(NDArray::zeros_for(
                "attach_grad",
                self.shape().clone(),
                self.dtype(),
            )?),
        };
        tape::attach(self, req, grad);
        Ok(())
    }

    /// The gradient buffer of a variable ([`NDArray::attach_grad`]); `None`
    /// for any other array. The handle shares the buffer until the next
    /// backward writes it (copy on write: it then keeps this value).
    pub fn grad(&self) -> Option<NDArray> {
        let l = link_of(self)?;
        match &l.node.kind {
            Kind::Variable { grad, .. } => tape::lock(grad).clone(),
            Kind::Op(_) => None,
        }
    }

    /// Backward from this array with a head gradient of ones (MXNet's
    /// `y.backward()`); see [`backward`].
    pub fn backward(&self) -> Result<()> {
        backward(&[self], &[])
    }

    /// Whether a gradient flows through this array: a variable asking for
    /// one, or the output of a recorded call.
    pub fn requires_grad(&self) -> bool {
        tape::needs_gradient(self)
    }
}
