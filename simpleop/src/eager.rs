//! Eager execution: run a registered op on [`NDArray`]s now.
//!
//! Every op is callable by name ([`invoke`]) and, through the functions the
//! attribute generates, by a typed function that lands in [`invoke_with`],
//! [`invoke_into`] or [`invoke_inplace`].

use smallvec::SmallVec;

mod lookup;
mod outputs;

pub use lookup::lookup;
pub(crate) use lookup::registered;
use lookup::seeded;

pub use outputs::{
    TrainingGuard, invoke_backward_outputs, invoke_outputs, invoke_outputs_by_name, is_training,
    train_mode,
};

use crate::autograd::mode;
use crate::autograd::tape;
use crate::{
    Attrs, DType, EnvArguments, Error, GradArgs, NDArray, OpCall, OpDef, OpForm, OpReqType,
    RegisteredOp, Result, RunContext, Shape, TBlob, TBlobMut,
    op::{DTypeFn, ShapeFn, check_blob},
};

/// Runs op `name` with string attributes (as in a graph file).
///
/// ```
/// # use simpleop::{eager, Attrs, NDArray, DType};
/// simpleop_ops::link(); // the crate defining `smooth_l1`
/// let x = NDArray::from_vec(vec![-1.0f32, 0.5, 2.0], [3])?;
/// let y = eager::invoke("smooth_l1", &[&x], &Attrs::from([("scalar", "1.0")]))?;
/// assert_eq!(y.to_vec::<f32>()?, [0.5, 0.125, 1.5]);
/// # Ok::<(), simpleop::Error>(())
/// ```
pub fn invoke(name: &str, inputs: &[&NDArray], attrs: &Attrs) -> Result<NDArray> {
    let entry = lookup(name)?;
    let env = (entry.def.parse)(entry.def, attrs)?;
    run_forward(entry, inputs, &env, None)
}

/// Runs op `name` into `out`, honouring `req`.
pub fn invoke_into_by_name(
    name: &str,
    inputs: &[&NDArray],
    attrs: &Attrs,
    out: &mut NDArray,
    req: OpReqType,
) -> Result<()> {
    let entry = lookup(name)?;
    let env = (entry.def.parse)(entry.def, attrs)?;
    run_into(entry, inputs, &env, out, req)
}

/// Runs op `name` in place on `target` (its first input).
pub fn invoke_inplace_by_name(
    name: &str,
    target: &mut NDArray,
    rest: &[&NDArray],
    attrs: &Attrs,
) -> Result<()> {
    let entry = lookup(name)?;
    let env = (entry.def.parse)(entry.def, attrs)?;
    run_inplace(entry, target, rest, &env)
}

/// Runs `op` with typed arguments and returns a fresh output.
pub fn invoke_with(op: &'static OpDef, inputs: &[&NDArray], env: &EnvArguments) -> Result<NDArray> {
    run_forward(registered(op)?, inputs, env, None)
}

/// Runs `op` into `out`, which must already have the output's shape and
/// dtype. `WriteTo`/`WriteInplace` overwrite, `AddTo` accumulates, `Null`
/// leaves `out` alone. A shared `out` is copied first, so other handles
/// never see the write.
pub fn invoke_into(
    op: &'static OpDef,
    inputs: &[&NDArray],
    env: &EnvArguments,
    out: &mut NDArray,
    req: OpReqType,
) -> Result<()> {
    run_into(registered(op)?, inputs, env, out, req)
}

/// Runs `op` with `target` as its first input and stores the result in
/// `target`: in its own buffer when the op declares a forward in-place
/// option and nothing else shares the storage; otherwise the handle is
/// replaced by a fresh output.
pub fn invoke_inplace(
    op: &'static OpDef,
    target: &mut NDArray,
    rest: &[&NDArray],
    env: &EnvArguments,
) -> Result<()> {
    run_inplace(registered(op)?, target, rest, env)
}

/// Output shape and dtype of `op` on `inputs`.
pub fn infer(op: &OpDef, inputs: &[&NDArray], env: &EnvArguments) -> Result<(Shape, crate::DType)> {
    op.check_inputs(env, inputs.len())?;
    // The default rules (one shape, one float dtype) answered inline when
    // the inputs agree: a fifth of a tiny call went to the general
    // functions. Anything else, errors included, takes them.
    let default_rules = std::ptr::fn_addr_eq(op.infer_shape, crate::op::same_shape as ShapeFn)
        && std::ptr::fn_addr_eq(op.infer_dtype, crate::op::same_float_dtype as DTypeFn);
    if default_rules
        && let [a, rest @ ..] = inputs
        && a.dtype().is_float()
        && rest
            .iter()
            .all(|b| b.dtype() == a.dtype() && b.shape() == a.shape())
    {
        return Ok((a.shape().clone(), a.dtype()));
    }
    // Fixed arrays for the common arities: building and moving a SmallVec
    // of shapes was a tenth of a tiny call.
    let (shape, dtype) = match inputs {
        [a] => {
            let dtype = (op.infer_dtype)(op, &[a.dtype()], env)?;
            ((op.infer_shape)(op, &[a.shape().clone()], env)?, dtype)
        }
        [a, b] => {
            let dtype = (op.infer_dtype)(op, &[a.dtype(), b.dtype()], env)?;
            let shapes = [a.shape().clone(), b.shape().clone()];
            ((op.infer_shape)(op, &shapes, env)?, dtype)
        }
        _ => {
            let dtypes: SmallVec<[_; 4]> = inputs.iter().map(|a| a.dtype()).collect();
            let dtype = (op.infer_dtype)(op, &dtypes, env)?;
            let shapes: Vec<_> = inputs.iter().map(|a| a.shape().clone()).collect();
            ((op.infer_shape)(op, &shapes, env)?, dtype)
        }
    };
    // a shape function may multiply (`_random_uniform`'s `shape`, `tile`)
    crate::ndarray::check_size(op.name, &shape, dtype)?;
    Ok((shape, dtype))
}

fn no_states(op: &OpDef) -> Result<()> {
    if op.outputs.is_some() || !op.aux_states.is_empty() {
        return Err(Error::invalid(
            op.name,
            "outputs",
            "this op has several outputs or aux states; call it with `eager::invoke_outputs` (or its typed function)",
        ));
    }
    match op.mutate_inputs.first() {
        None => Ok(()),
        Some(&k) => Err(Error::invalid(
            op.name,
            op.input_name(k),
            "this op updates the input in place; call it with `invoke_with_states` (or its typed function)",
        )),
    }
}

/// The context of an eager call: the default, in the thread's mode.
fn eager_context() -> RunContext {
    RunContext {
        is_train: is_training(),
        ..RunContext::default()
    }
}

fn run_forward(
    entry: &'static RegisteredOp,
    inputs: &[&NDArray],
    env: &EnvArguments,
    ctx: Option<&RunContext>,
) -> Result<NDArray> {
    let op = entry.def;
    if op.outputs.is_some() && op.aux_states.is_empty() && op.num_visible_outputs(env) == 1 {
        // Hidden outputs only: the one visible output, as a symbol shows it.
        return outputs::first_output(entry, inputs, env);
    }
    no_states(op)?;
    let (shape, dtype) = infer(op, inputs, env)?;
    let ctx = ctx.copied().unwrap_or_else(eager_context);
    let kernels = entry.kernels(ctx.device)?;
    let env = seeded(op, env);
    // Written with `WriteTo` below, so old pooled bytes never show.
    let mut out = NDArray::for_overwrite(op.name, shape, dtype)?;
    let call = OpCall {
        op,
        env: &env,
        ctx: &ctx,
    };
    let outs = &mut [out.blob_mut()];
    let reqs = &[OpReqType::WriteTo];
    match inputs {
        [a] => (kernels.forward)(&call, &[a.blob()], outs, reqs)?,
        [a, b] => (kernels.forward)(&call, &[a.blob(), b.blob()], outs, reqs)?,
        _ => {
            let blobs: SmallVec<[TBlob<'_>; 4]> = inputs.iter().map(|a| a.blob()).collect();
            (kernels.forward)(&call, &blobs, outs, reqs)?
        }
    }
    if mode::is_recording() {
        tape::record(op, &env, inputs, std::slice::from_mut(&mut out));
    }
    Ok(out)
}

/// Under recording, refuses an in-place write to `target` that autograd
/// could not differentiate: into a variable asking for a gradient, or an
/// `AddTo` into a recorded value.
fn check_recorded_write(
    op: &OpDef,
    target: &NDArray,
    inputs: &[&NDArray],
    req: OpReqType,
) -> Result<bool> {
    if !mode::is_recording() {
        return Ok(false);
    }
    let target_recorded = tape::needs_gradient(target);
    if !target_recorded && !inputs.iter().any(|a| tape::needs_gradient(a)) {
        return Ok(false);
    }
    if tape::is_variable(target) {
        return Err(Error::invalid(
            op.name,
            "out",
            "an in-place write into a variable that asks for a gradient cannot be recorded; \
             write into a new array, or pause recording",
        ));
    }
    if req == OpReqType::AddTo {
        return Err(Error::invalid(
            op.name,
            "req",
            "AddTo into an array cannot be recorded; add with elemwise_add instead",
        ));
    }
    Ok(true)
}

fn run_into(
    entry: &'static RegisteredOp,
    inputs: &[&NDArray],
    env: &EnvArguments,
    out: &mut NDArray,
    req: OpReqType,
) -> Result<()> {
    let op = entry.def;
    no_states(op)?;
    let (shape, dtype) = infer(op, inputs, env)?;
    check_blob(op, "out", out.shape(), out.dtype(), &shape, dtype)?;
    if req == OpReqType::Null {
        return Ok(());
    }
    if check_recorded_write(op, out, inputs, req)? {
        // Recorded: a new value behind `out`; whatever saved the old one
        // sees its version move.
        out.note_write();
        *out = run_forward(entry, inputs, env, None)?;
        return Ok(());
    }
    let ctx = eager_context();
    let kernels = entry.kernels(ctx.device)?;
    let env = seeded(op, env);
    if req != OpReqType::AddTo {
        out.make_unique_for_overwrite(op.name)?;
    }
    let blobs: Vec<TBlob<'_>> = inputs.iter().map(|a| a.blob()).collect();
    let call = OpCall {
        op,
        env: &env,
        ctx: &ctx,
    };
    // `out` is borrowed mutably, so it cannot be one of `inputs`; `blob_mut`
    // copies it first if another handle (maybe an input) shares it.
    (kernels.forward)(&call, &blobs, &mut [out.blob_mut()], &[req])
}

fn run_inplace(
    entry: &'static RegisteredOp,
    target: &mut NDArray,
    rest: &[&NDArray],
    env: &EnvArguments,
) -> Result<()> {
    let op = entry.def;
    no_states(op)?;
    let mut all: Vec<&NDArray> = Vec::with_capacity(rest.len() + 1);
    all.push(target);
    all.extend_from_slice(rest);
    let (shape, dtype) = infer(op, &all, env)?;
    let recorded = check_recorded_write(op, target, &all, OpReqType::WriteTo)?;
    drop(all);
    // Whatever saved the old value sees its version move.
    target.note_write();
    // Recorded: a new value, on the tape as the call's output.
    let fits = !recorded
        && op.inplace.forward.is_some()
        && op.form == OpForm::Elementwise
        && shape == *target.shape()
        && dtype == target.dtype();
    let ptr = if fits { target.unique_ptr() } else { None };
    let Some(ptr) = ptr else {
        let mut all: Vec<&NDArray> = vec![target];
        all.extend_from_slice(rest);
        let out = run_forward(entry, &all, env, None)?;
        match recorded {
            true => *target = out,
            false => target.replace_keeping_tape(out),
        }
        return Ok(());
    };
    let ctx = eager_context();
    let kernels = entry.kernels(ctx.device)?;
    let env = seeded(op, env);
    let mut blobs: Vec<TBlob<'_>> = Vec::with_capacity(rest.len() + 1);
    // SAFETY: `ptr` is the start of `target`'s buffer, which this handle owns
    // alone (`unique_ptr`), aligned and sized for `shape` of `dtype`. The op
    // is elementwise and declared a forward in-place option, so per the
    // TBlob aliasing contract its driver reads each element before writing it.
    let (input0, out) = unsafe {
        (
            TBlob::from_raw(ptr, dtype, shape.clone()),
            TBlobMut::from_raw(ptr, dtype, shape),
        )
    };
    blobs.push(input0);
    blobs.extend(rest.iter().map(|a| a.blob()));
    let call = OpCall {
        op,
        env: &env,
        ctx: &ctx,
    };
    (kernels.forward)(&call, &blobs, &mut [out], &[OpReqType::WriteInplace])
}

/// Runs `op`'s backward kernel.
///
/// `output` is the forward output (needed by T1 gradients). `grads` holds
/// one array per input, with that input's shape and dtype; each is written
/// according to `reqs`.
pub fn invoke_backward(
    op: &'static OpDef,
    env: &EnvArguments,
    out_grad: &NDArray,
    output: Option<&NDArray>,
    inputs: &[&NDArray],
    grads: &mut [NDArray],
    reqs: &[OpReqType],
) -> Result<()> {
    let entry = registered(op)?;
    let spec = op
        .gradient
        .ok_or_else(|| Error::NoGradient { op: op.name.into() })?;
    op.check_arity(inputs.len())?;
    op.check_arity(grads.len())?;
    op.check_arity(reqs.len())?;
    let ctx = RunContext::default();
    let kernels = entry.kernels(ctx.device)?;
    let backward = kernels
        .backward
        .ok_or_else(|| Error::NoGradient { op: op.name.into() })?;
    check_grad_sources(op, env, inputs, out_grad, output)?;
    for (i, (g, x)) in grads.iter().zip(inputs).enumerate() {
        if reqs[i] != OpReqType::Null {
            check_blob(
                op,
                &format!("{}_grad", op.input_name(i)),
                g.shape(),
                g.dtype(),
                x.shape(),
                x.dtype(),
            )?;
        }
    }
    let args = grad_args(op, spec, out_grad.blob(), output, inputs)?;
    for (g, &r) in grads.iter_mut().zip(reqs) {
        if r == OpReqType::WriteTo || r == OpReqType::WriteInplace {
            g.make_unique_for_overwrite(op.name)?;
        }
    }
    let mut blobs: Vec<TBlobMut<'_>> = grads.iter_mut().map(|g| g.blob_mut()).collect();
    let call = OpCall { op, env, ctx: &ctx };
    backward(&call, &args, &mut blobs, reqs)
}

/// What a backward kernel reads: exactly the forward values `spec` asks for.
fn grad_args<'a>(
    op: &OpDef,
    spec: crate::GradSpec,
    out_grad: TBlob<'a>,
    output: Option<&'a NDArray>,
    inputs: &[&'a NDArray],
) -> Result<GradArgs<'a>> {
    let output = match (spec.needs_output, output) {
        (false, _) => None,
        (true, Some(y)) => Some(y.blob()),
        (true, None) => {
            return Err(Error::invalid(
                op.name,
                "output",
                "the gradient reads the forward output",
            ));
        }
    };
    Ok(GradArgs {
        out_grads: std::iter::once(Some(out_grad.clone())).collect(),
        outputs: Default::default(),
        out_grad,
        output,
        inputs: inputs
            .iter()
            .enumerate()
            .map(|(i, x)| spec.needs_input(i).then(|| x.blob()))
            .collect(),
    })
}

/// Checks the output gradient (and the output, when given) against the
/// shape and dtype inference gives for `inputs`.
fn check_grad_sources(
    op: &OpDef,
    env: &EnvArguments,
    inputs: &[&NDArray],
    out_grad: &NDArray,
    output: Option<&NDArray>,
) -> Result<()> {
    let (shape, dtype) = infer(op, inputs, env)?;
    check_blob(
        op,
        "out_grad",
        out_grad.shape(),
        out_grad.dtype(),
        &shape,
        dtype,
    )?;
    if let Some(y) = output {
        check_blob(op, "output", y.shape(), y.dtype(), &shape, dtype)?;
    }
    Ok(())
}

/// Forward then backward: the gradient of `sum(out_grad * op(inputs))`
/// with respect to each input.
pub fn gradient(
    op: &'static OpDef,
    env: &EnvArguments,
    inputs: &[&NDArray],
    out_grad: &NDArray,
) -> Result<Vec<NDArray>> {
    let env = seeded(op, env);
    let out = invoke_with(op, inputs, &env)?;
    let mut grads: Vec<NDArray> = inputs
        .iter()
        .map(|x| NDArray::zeros_for(op.name, x.shape().clone(), x.dtype()))
        .collect::<Result<_>>()?;
    let reqs = vec![OpReqType::WriteTo; inputs.len()];
    invoke_backward(op, &env, out_grad, Some(&out), inputs, &mut grads, &reqs)?;
    Ok(grads)
}

/// Runs `op`'s backward kernel writing input 0's gradient over `out_grad`
/// (the seed's `OutIn` / `OutLhs`). The other inputs' gradients go to
/// `rest_grads` (one per input after the first) per `reqs[1..]`.
///
/// Falls back to a separate buffer, then replaces `out_grad`'s handle, when
/// the op declares no gradient in-place option or the storage is shared.
/// Returns whether the write happened in place.
pub fn invoke_backward_inplace(
    op: &'static OpDef,
    env: &EnvArguments,
    out_grad: &mut NDArray,
    output: Option<&NDArray>,
    inputs: &[&NDArray],
    rest_grads: &mut [NDArray],
    reqs: &[OpReqType],
) -> Result<bool> {
    let entry = registered(op)?;
    let spec = op
        .gradient
        .ok_or_else(|| Error::NoGradient { op: op.name.into() })?;
    op.check_arity(inputs.len())?;
    op.check_arity(reqs.len())?;
    op.check_arity(rest_grads.len() + 1)?;
    check_grad_sources(op, env, inputs, out_grad, output)?;
    let x0 = inputs[0];
    let fits = op.inplace.gradient.is_some()
        && op.form == OpForm::Elementwise
        && out_grad.shape() == x0.shape()
        && out_grad.dtype() == x0.dtype();
    let ptr = if fits { out_grad.unique_ptr() } else { None };
    let Some(ptr) = ptr else {
        let mut grads = vec![NDArray::zeros_for(op.name, x0.shape().clone(), x0.dtype())?];
        grads.extend(rest_grads.iter().cloned());
        let mut reqs = reqs.to_vec();
        if reqs[0] == OpReqType::WriteInplace || reqs[0] == OpReqType::AddTo {
            reqs[0] = OpReqType::WriteTo;
        }
        invoke_backward(op, env, out_grad, output, inputs, &mut grads, &reqs)?;
        let mut it = grads.into_iter();
        *out_grad = it.next().expect("arity checked");
        for (dst, g) in rest_grads.iter_mut().zip(it) {
            *dst = g;
        }
        return Ok(false);
    };
    let ctx = RunContext::default();
    let kernels = entry.kernels(ctx.device)?;
    let backward = kernels
        .backward
        .ok_or_else(|| Error::NoGradient { op: op.name.into() })?;
    let (shape, dtype) = (x0.shape().clone(), x0.dtype());
    for (i, g) in rest_grads.iter_mut().enumerate() {
        if reqs[i + 1] != OpReqType::Null {
            check_blob(
                op,
                &format!("{}_grad", op.input_name(i + 1)),
                g.shape(),
                g.dtype(),
                inputs[i + 1].shape(),
                inputs[i + 1].dtype(),
            )?;
        }
        if reqs[i + 1] == OpReqType::WriteTo {
            g.make_unique_for_overwrite(op.name)?;
        }
    }
    // SAFETY: `ptr` is the start of `out_grad`'s buffer, owned by this handle
    // alone, aligned and sized for `shape` of `dtype`. The op is elementwise
    // and declared a gradient in-place option, so its driver reads each
    // element of the output gradient before writing the input gradient there.
    let (dy, g0) = unsafe {
        (
            TBlob::from_raw(ptr, dtype, shape.clone()),
            TBlobMut::from_raw(ptr, dtype, shape),
        )
    };
    let args = grad_args(op, spec, dy, output, inputs)?;
    let mut blobs = vec![g0];
    blobs.extend(rest_grads.iter_mut().map(|g| g.blob_mut()));
    let mut reqs = reqs.to_vec();
    reqs[0] = OpReqType::WriteInplace;
    let call = OpCall { op, env, ctx: &ctx };
    backward(&call, &args, &mut blobs, &reqs)?;
    Ok(true)
}

/// Runs op `name`, which updates the inputs listed in its
/// [`OpDef::mutate_inputs`] in place (optimizer updates), by name.
///
/// `inputs` are the other inputs, in order; `states` are the updated ones,
/// in order. Returns the op's output.
pub fn invoke_mut(
    name: &str,
    inputs: &[&NDArray],
    states: &mut [&mut NDArray],
    attrs: &Attrs,
) -> Result<NDArray> {
    let entry = lookup(name)?;
    let env = (entry.def.parse)(entry.def, attrs)?;
    run_states(entry, None, inputs, states, &env).map(|o| o.expect("no target: a fresh output"))
}

/// Runs `op`, which updates some inputs in place (see [`invoke_mut`]), and
/// returns its output.
pub fn invoke_with_states(
    op: &'static OpDef,
    inputs: &[&NDArray],
    states: &mut [&mut NDArray],
    env: &EnvArguments,
) -> Result<NDArray> {
    run_states(registered(op)?, None, inputs, states, env)
        .map(|o| o.expect("no target: a fresh output"))
}

/// Runs `op`, which updates some inputs in place, with `target` as its
/// first input and the output stored in `target` (in its own buffer when
/// the op declares a forward in-place option and the storage is not shared).
/// This is the usual optimizer step: `weight` updated with its state.
pub fn invoke_inplace_with_states(
    op: &'static OpDef,
    target: &mut NDArray,
    inputs: &[&NDArray],
    states: &mut [&mut NDArray],
    env: &EnvArguments,
) -> Result<()> {
    run_states(registered(op)?, Some(target), inputs, states, env).map(|_| ())
}

fn run_states(
    entry: &'static RegisteredOp,
    mut target: Option<&mut NDArray>,
    inputs: &[&NDArray],
    states: &mut [&mut NDArray],
    env: &EnvArguments,
) -> Result<Option<NDArray>> {
    let op = entry.def;
    let n_states = op.mutate_inputs.len();
    let n_plain = op.num_inputs() - n_states;
    check_state_arity(op, inputs.len(), states.len(), target.is_some())?;
    refuse_recorded_update(op, target.as_deref(), inputs, states)?;
    let order = input_order(op);
    let (shape, dtype) = infer_states(op, &order, inputs, target.as_deref(), states, env)?;
    let ctx = RunContext::default();
    let kernels = entry.kernels(ctx.device)?;
    let env = seeded(op, env);
    let in_place_target = match target.as_deref_mut() {
        Some(t) if op.inplace.forward.is_some() && *t.shape() == shape && t.dtype() == dtype => {
            t.unique_ptr()
        }
        _ => None,
    };
    let state_ptrs: Vec<*mut u8> = states
        .iter_mut()
        .map(|s| s.make_unique_ptr())
        .collect::<Result<_>>()?;
    let mut fresh = if in_place_target.is_some() {
        None
    } else {
        Some(NDArray::zeros_for(op.name, shape.clone(), dtype)?)
    };
    // Handles that keep the plain inputs alive while their blobs are used;
    // none for an in-place target, which is only reached through its pointer.
    let plain_inputs: Vec<Option<NDArray>> = (0..n_plain)
        .map(|p| {
            (p > 0 || in_place_target.is_none()).then(|| plain_arg(inputs, target.as_deref(), p))
        })
        .collect();
    // SAFETY: each state pointer is the start of a buffer that `states[j]`
    // (borrowed mutably for this call) now owns alone (`make_unique_ptr`),
    // sized and aligned for `shape` of `dtype` (checked above); so is the
    // in-place target's (`unique_ptr`). Each is viewed once as an input and
    // once as an output, exactly aliased, and the op is elementwise (the
    // attribute allows state updates only there), so its driver reads every
    // element before writing it.
    let blobs: Vec<TBlob<'_>> = order
        .iter()
        .map(|o| match (*o, in_place_target) {
            (Ok(0), Some(p)) => unsafe { TBlob::from_raw(p, dtype, shape.clone()) },
            (Ok(p), _) => plain_inputs[p].as_ref().expect("kept above").blob(),
            (Err(j), _) => unsafe { TBlob::from_raw(state_ptrs[j], dtype, shape.clone()) },
        })
        .collect();
    let mut outs: Vec<TBlobMut<'_>> = Vec::with_capacity(1 + n_states);
    outs.push(match (in_place_target, fresh.as_mut()) {
        (Some(p), _) => unsafe { TBlobMut::from_raw(p, dtype, shape.clone()) },
        (None, Some(f)) => f.blob_mut(),
        (None, None) => unreachable!("a fresh output exists when not in place"),
    });
    for &p in &state_ptrs {
        outs.push(unsafe { TBlobMut::from_raw(p, dtype, shape.clone()) });
    }
    let mut reqs = vec![OpReqType::WriteInplace; 1 + n_states];
    if in_place_target.is_none() {
        reqs[0] = OpReqType::WriteTo;
    }
    let call = OpCall {
        op,
        env: &env,
        ctx: &ctx,
    };
    (kernels.forward)(&call, &blobs, &mut outs, &reqs)?;
    drop(outs);
    drop(blobs);
    match (target, fresh) {
        (Some(t), Some(f)) => {
            t.note_write();
            t.replace_keeping_tape(f);
            Ok(None)
        }
        (_, f) => Ok(f),
    }
}

/// Refuses an op that updates its inputs in place (an optimizer step)
/// under recording when anything it reads carries a gradient: autograd
/// cannot differentiate it, and the step belongs outside `record`.
fn refuse_recorded_update(
    op: &OpDef,
    target: Option<&NDArray>,
    inputs: &[&NDArray],
    states: &[&mut NDArray],
) -> Result<()> {
    if !mode::is_recording() {
        return Ok(());
    }
    let mut all = target.into_iter().chain(inputs.iter().copied());
    if all.any(tape::needs_gradient) || states.iter().any(|s| tape::needs_gradient(s)) {
        return Err(Error::invalid(
            op.name,
            "inputs",
            "an op that updates its inputs in place cannot be recorded; \
             run it outside autograd::record (or inside autograd::pause)",
        ));
    }
    Ok(())
}

/// Checks the counts of plain inputs (`inputs`, plus the in-place target
/// when there is one) and of `states` against `op`, and that the target is
/// not an updated state.
fn check_state_arity(op: &OpDef, inputs: usize, states: usize, has_target: bool) -> Result<()> {
    let n_states = op.mutate_inputs.len();
    let given = inputs + usize::from(has_target);
    if states != n_states || given != op.num_inputs() - n_states {
        return Err(Error::Arity {
            op: op.name.into(),
            expected: op.num_inputs(),
            got: given + states,
        });
    }
    if has_target && op.mutate_inputs.contains(&0) {
        return Err(Error::invalid(
            op.name,
            op.input_name(0),
            "an updated state cannot also be the in-place target",
        ));
    }
    Ok(())
}

/// Plain input `p`: the target first when there is one, then `inputs`.
fn plain_arg(inputs: &[&NDArray], target: Option<&NDArray>, p: usize) -> NDArray {
    match (target, p) {
        (Some(t), 0) => t.clone(),
        (Some(_), p) => inputs[p - 1].clone(),
        (None, p) => inputs[p].clone(),
    }
}

/// The output shape and dtype, inferred over all inputs in op order
/// (`order` from [`input_order`]); every state must have them.
fn infer_states(
    op: &OpDef,
    order: &[Result<usize, usize>],
    inputs: &[&NDArray],
    target: Option<&NDArray>,
    states: &[&mut NDArray],
    env: &EnvArguments,
) -> Result<(Shape, DType)> {
    let all: Vec<NDArray> = order
        .iter()
        .map(|o| match *o {
            Ok(p) => plain_arg(inputs, target, p),
            Err(j) => (*states[j]).clone(),
        })
        .collect();
    let refs: Vec<&NDArray> = all.iter().collect();
    let (shape, dtype) = infer(op, &refs, env)?;
    for (j, s) in states.iter().enumerate() {
        let k = op.mutate_inputs[j];
        check_blob(op, op.input_name(k), s.shape(), s.dtype(), &shape, dtype)?;
    }
    Ok((shape, dtype))
}

/// Per input of `op`, in order: `Err(j)` for updated state `j`, `Ok(p)`
/// for plain input `p`.
fn input_order(op: &OpDef) -> Vec<Result<usize, usize>> {
    let mut plain = 0;
    (0..op.num_inputs())
        .map(|i| match op.mutate_inputs.iter().position(|&k| k == i) {
            Some(j) => Err(j),
            None => {
                plain += 1;
                Ok(plain - 1)
            }
        })
        .collect()
}
