//! `_backward`'s kernels (the op is defined in [`crate::backward_op`]):
//! the forward runs the op's registered backward kernel; the backward (the
//! second derivative) runs its typed gradient on dual numbers (`dual`) or
//! records its gradient composition on the tape (`composed`).

use crate::backward_op::{NAME, check_count, gradient_of, layout, no_second_order};
use crate::composition::composition_of;
use crate::registry::KernelRegistration;
use crate::{Device, Error, GradArgs, OpCall, OpReqType, Registry, Result, TBlob, TBlobMut};

mod composed;
mod dual;

inventory::submit! {
    KernelRegistration {
        op: NAME,
        device: Device::Cpu,
        forward,
        backward: Some(backward),
        tile: None,
        rows: None,
        derivative: None,
        grad_derivative: None,
        location: concat!(file!(), ":", line!()),
    }
}

/// Runs the op's backward kernel: the `_backward` call's inputs become
/// its [`GradArgs`], its outputs the gradients.
fn forward(
    call: &OpCall<'_>,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let (l, op, inner) = layout(call.env)?;
    check_count(inputs.len(), &l)?;
    let spec = gradient_of(op)?;
    let backward = Registry::global()?
        .get(op.name)?
        .kernels(call.ctx.device)?
        .backward
        .ok_or_else(|| Error::NoGradient { op: op.name.into() })?;
    let out_grads = &inputs[..l.outputs];
    let forward_outputs = if l.reads_outputs {
        &inputs[l.outputs..2 * l.outputs]
    } else {
        &[]
    };
    let args = GradArgs {
        out_grad: out_grads[0].clone(),
        output: forward_outputs.first().cloned(),
        inputs: inputs[l.first_argument()..]
            .iter()
            .enumerate()
            .map(|(i, x)| spec.needs_input(i).then(|| x.clone()))
            .collect(),
        out_grads: out_grads.iter().cloned().map(Some).collect(),
        outputs: match op.outputs {
            Some(_) => forward_outputs.iter().cloned().collect(),
            None => Default::default(),
        },
    };
    let inner_call = OpCall {
        op,
        env: inner,
        ctx: call.ctx,
    };
    backward(&inner_call, &args, outputs, reqs)
}

/// `_backward`'s backward kernel.
fn backward(
    call: &OpCall<'_>,
    args: &GradArgs<'_>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let (l, op, inner) = layout(call.env)?;
    if grads.len() != l.len() || reqs.len() != l.len() {
        return Err(Error::Arity {
            op: NAME.into(),
            expected: l.len(),
            got: grads.len().min(reqs.len()),
        });
    }
    if reqs.iter().all(|&r| r == OpReqType::Null) {
        return Ok(());
    }
    let kernels = Registry::global()?.get(op.name)?.kernels(call.ctx.device)?;
    let Some(fns) = kernels.grad_derivative.filter(|_| l.outputs == 1) else {
        return match composition_of(op) {
            Some(c) => composed::backward(c, &l, inner, args, grads, reqs),
            None => Err(no_second_order(op)),
        };
    };
    dual::backward(fns, &l, inner, args, grads, reqs)
}
