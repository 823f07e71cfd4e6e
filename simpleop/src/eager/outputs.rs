//! Eager calls of ops with several outputs or aux states, and the
//! thread's training mode (MXNet's `autograd.train_mode()`), which every
//! eager call passes to its kernel as [`RunContext::is_train`].

use smallvec::SmallVec;

use super::lookup::{lookup, registered, seeded};
use crate::{
    Attrs, EnvArguments, NDArray, OpCall, OpDef, OpReqType, RegisteredOp, Result, RunContext,
    TBlob, TBlobMut, op::check_blob,
};

pub use crate::autograd::mode::{TrainingGuard, is_training};

/// Runs `f` with this thread's eager calls in training mode: Dropout
/// drops, BatchNorm normalises with the batch's statistics and updates
/// its moving ones.
///
/// ```
/// use simpleop::{eager, NDArray};
/// assert!(!eager::is_training());
/// eager::train_mode(|| assert!(eager::is_training()));
/// assert!(!eager::is_training());
/// ```
pub fn train_mode<R>(f: impl FnOnce() -> R) -> R {
    let _guard = TrainingGuard::new(true);
    f()
}

/// Runs op `name` with string attributes and returns every output
/// (hidden ones included, in the op's order); `aux` are its aux states,
/// read, and updated in place in training mode.
pub fn invoke_outputs_by_name(
    name: &str,
    inputs: &[&NDArray],
    aux: &mut [&mut NDArray],
    attrs: &Attrs,
) -> Result<Vec<NDArray>> {
    let entry = lookup(name)?;
    let env = (entry.def.parse)(entry.def, attrs)?;
    run_outputs(entry, inputs, aux, &env)
}

/// Runs `op` and returns every output; any op may be called so, and ops
/// with several outputs or aux states must be.
///
/// ```
/// use simpleop::{eager, Attrs, NDArray};
/// simpleop_ops::link();
/// let x = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
/// let parts = eager::invoke_outputs_by_name(
///     "split", &[&x], &mut [], &Attrs::from([("num_outputs", "2"), ("axis", "1")]))?;
/// assert_eq!(parts[0].to_vec::<f32>()?, [1.0, 3.0]);
/// assert_eq!(parts[1].to_vec::<f32>()?, [2.0, 4.0]);
/// # Ok::<(), simpleop::Error>(())
/// ```
pub fn invoke_outputs(
    op: &'static OpDef,
    inputs: &[&NDArray],
    aux: &mut [&mut NDArray],
    env: &EnvArguments,
) -> Result<Vec<NDArray>> {
    run_outputs(registered(op)?, inputs, aux, env)
}

/// Output 0 of an op whose other outputs are hidden (Dropout's mask,
/// LayerNorm's statistics): what `eager::invoke` returns for it.
pub(super) fn first_output(
    entry: &'static RegisteredOp,
    inputs: &[&NDArray],
    env: &EnvArguments,
) -> Result<NDArray> {
    let mut outs = run_outputs(entry, inputs, &mut [], env)?;
    Ok(outs.swap_remove(0))
}

fn run_outputs(
    entry: &'static RegisteredOp,
    inputs: &[&NDArray],
    aux: &mut [&mut NDArray],
    env: &EnvArguments,
) -> Result<Vec<NDArray>> {
    let op = entry.def;
    op.check_inputs(env, inputs.len() + aux.len())?;
    if op.num_arguments(env) != inputs.len() {
        return Err(crate::Error::invalid(
            op.name,
            "aux",
            format!(
                "expected {} aux state(s) ({}), got {}",
                op.aux_states.len(),
                op.aux_states.join(", "),
                aux.len()
            ),
        ));
    }
    let shapes: Vec<_> = inputs.iter().map(|a| a.shape().clone()).collect();
    let dtypes: Vec<_> = inputs.iter().map(|a| a.dtype()).collect();
    let out_shapes = op.output_shapes(&shapes, env)?;
    let out_dtypes = op.output_dtypes(&dtypes, env)?;
    let known: Vec<Option<crate::Shape>> = shapes
        .iter()
        .cloned()
        .chain(aux.iter().map(|a| a.shape().clone()))
        .map(Some)
        .collect();
    op.check_against_data(&known, env)?;
    let mut outs = Vec::with_capacity(out_shapes.len());
    for (s, d) in out_shapes.into_iter().zip(out_dtypes) {
        crate::ndarray::check_size(op.name, &s, d)?;
        // Written with `WriteTo`, so old pooled bytes never show.
        outs.push(NDArray::for_overwrite(op.name, s, d)?);
    }
    let ctx = RunContext {
        is_train: is_training(),
        ..RunContext::default()
    };
    let kernels = entry.kernels(ctx.device)?;
    let env = seeded(op, env);
    let aux_req = if ctx.is_train {
        OpReqType::WriteInplace
    } else {
        OpReqType::Null
    };
    let mut reqs: SmallVec<[OpReqType; 8]> = SmallVec::new();
    reqs.extend(outs.iter().map(|_| OpReqType::WriteTo));
    reqs.extend(aux.iter().map(|_| aux_req));
    let blobs: SmallVec<[TBlob<'_>; 4]> = inputs.iter().map(|a| a.blob()).collect();
    let mut targets: SmallVec<[TBlobMut<'_>; 8]> = SmallVec::new();
    for o in outs.iter_mut() {
        targets.push(o.try_blob_mut()?);
    }
    // `aux` is borrowed mutably, so no aux state is also an input; an
    // aux state shared with another handle is copied first.
    for a in aux.iter_mut() {
        targets.push(a.try_blob_mut()?);
    }
    let call = OpCall {
        op,
        env: &env,
        ctx: &ctx,
    };
    (kernels.forward)(&call, &blobs, &mut targets, &reqs)?;
    drop(targets);
    if crate::autograd::mode::is_recording() {
        crate::autograd::tape::record(op, &env, inputs, &mut outs);
    }
    Ok(outs)
}

/// Checks every array a backward call is given against what inference
/// gives for `inputs`: counts, then each output gradient and output (when
/// the gradient reads them) and each gradient buffer's shape and dtype.
#[allow(clippy::too_many_arguments)]
fn check_backward_arrays(
    op: &OpDef,
    env: &EnvArguments,
    needs_output: bool,
    out_grads: &[Option<&NDArray>],
    outputs: &[&NDArray],
    inputs: &[&NDArray],
    grads: &[NDArray],
    reqs: &[OpReqType],
) -> Result<()> {
    let n_args = op.num_arguments(env);
    for (what, got) in [
        ("inputs", inputs.len()),
        ("grads", grads.len()),
        ("reqs", reqs.len()),
    ] {
        if got != n_args {
            return Err(crate::Error::invalid(
                op.name,
                what,
                format!("expected {n_args}, one per argument, got {got}"),
            ));
        }
    }
    let shapes: Vec<_> = inputs.iter().map(|a| a.shape().clone()).collect();
    let dtypes: Vec<_> = inputs.iter().map(|a| a.dtype()).collect();
    let out_shapes = op.output_shapes(&shapes, env)?;
    let out_dtypes = op.output_dtypes(&dtypes, env)?;
    let n_out = out_shapes.len();
    if out_grads.len() != n_out || (needs_output && outputs.len() != n_out) {
        return Err(crate::Error::invalid(
            op.name,
            "out_grads",
            format!(
                "expected {n_out} output gradients{}, got {} and {} outputs",
                if needs_output { " and outputs" } else { "" },
                out_grads.len(),
                outputs.len()
            ),
        ));
    }
    let given = out_grads.iter().map(|g| ("out_grad", *g));
    let given = given.chain(outputs.iter().map(|o| ("output", Some(*o))));
    for (k, (what, a)) in given.enumerate() {
        if let Some(a) = a {
            let (s, d) = (&out_shapes[k % n_out], out_dtypes[k % n_out]);
            check_blob(op, what, a.shape(), a.dtype(), s, d)?;
        }
    }
    for (i, (g, x)) in grads.iter().zip(inputs).enumerate() {
        if reqs[i] != OpReqType::Null {
            let arg = format!("{}_grad", op.input_name(i));
            check_blob(op, &arg, g.shape(), g.dtype(), x.shape(), x.dtype())?;
        }
    }
    Ok(())
}

/// Runs `op`'s backward kernel for any op, with one optional gradient per
/// output (`None`: nothing reads that output, its gradient is zero) and
/// the forward outputs (`outputs`, all of them, when the gradient reads
/// them). `grads` holds one array per argument, each written per `reqs`.
#[allow(clippy::too_many_arguments)]
pub fn invoke_backward_outputs(
    op: &'static OpDef,
    env: &EnvArguments,
    out_grads: &[Option<&NDArray>],
    outputs: &[&NDArray],
    inputs: &[&NDArray],
    grads: &mut [NDArray],
    reqs: &[OpReqType],
) -> Result<()> {
    let entry = registered(op)?;
    let spec = op
        .gradient
        .ok_or_else(|| crate::Error::NoGradient { op: op.name.into() })?;
    check_backward_arrays(
        op,
        env,
        spec.needs_output,
        out_grads,
        outputs,
        inputs,
        grads,
        reqs,
    )?;
    let ctx = RunContext {
        is_train: true,
        ..RunContext::default()
    };
    let backward = entry
        .kernels(ctx.device)?
        .backward
        .ok_or_else(|| crate::Error::NoGradient { op: op.name.into() })?;
    let out_grads: crate::GradBlobs<'_> = out_grads.iter().map(|g| g.map(NDArray::blob)).collect();
    let dtype = inputs.first().map_or(crate::DType::F32, |a| a.dtype());
    let args = crate::GradArgs {
        out_grad: out_grads[0].clone().unwrap_or_else(|| TBlob::empty(dtype)),
        output: spec
            .needs_output
            .then(|| outputs.first().map(|o| o.blob()))
            .flatten(),
        inputs: inputs
            .iter()
            .enumerate()
            .map(|(i, x)| spec.needs_input(i).then(|| x.blob()))
            .collect(),
        out_grads,
        outputs: match spec.needs_output {
            true => outputs.iter().map(|o| o.blob()).collect(),
            false => Default::default(),
        },
    };
    let mut blobs: Vec<TBlobMut<'_>> = Vec::with_capacity(grads.len());
    for g in grads.iter_mut() {
        blobs.push(g.try_blob_mut()?);
    }
    let call = OpCall { op, env, ctx: &ctx };
    backward(&call, &args, &mut blobs, reqs)
}
