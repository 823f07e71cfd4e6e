//! `_backward`'s kernels (the op is defined in [`crate::backward_op`]):
//! the forward runs the op's registered backward kernel; the backward (the
//! second derivative) runs its typed gradient on dual numbers (`dual`),
//! records its gradient composition on the tape (`composed`), or, for a
//! linear op, runs the op's forward on the gradients reaching it
//! (`linear`).

use crate::backward_op::{
    Layout, NAME, check_count, gradient_of, is_linear, layout, no_second_order,
};
use crate::composition::composition_of;
use crate::registry::KernelRegistration;
use crate::{Device, Error, GradArgs, OpCall, OpReqType, Registry, Result, TBlob, TBlobMut};

mod composed;
mod dual;
mod linear;

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
    let inputs = every_input(&l, args)?;
    check_grads(grads, &inputs)?;
    let kernels = Registry::global()?.get(op.name)?.kernels(call.ctx.device)?;
    match (kernels.grad_derivative, composition_of(op)) {
        (Some(fns), _) if l.outputs == 1 => {
            dual::backward(fns, &l, inner, &inputs, args, grads, reqs)
        }
        (_, Some(c)) => composed::backward(c, &l, inner, &inputs, args, grads, reqs),
        _ if is_linear(op, inner) => {
            let inner_call = OpCall {
                op,
                env: inner,
                ctx: call.ctx,
            };
            linear::backward(&inner_call, kernels.forward, &l, &inputs, args, grads, reqs)
        }
        _ => Err(no_second_order(op, inner)),
    }
}

/// Every input of a `_backward` call: its gradient reads them all.
fn every_input<'a, 'b>(l: &Layout, args: &'a GradArgs<'b>) -> Result<Vec<&'a TBlob<'b>>> {
    (0..l.len())
        .map(|k| {
            args.inputs.get(k).and_then(Option::as_ref).ok_or_else(|| {
                Error::invalid(
                    NAME,
                    format!("input {k}"),
                    "present: the second derivative reads every input",
                )
            })
        })
        .collect()
}

/// Each gradient buffer has its input's shape and dtype.
fn check_grads(grads: &[TBlobMut<'_>], inputs: &[&TBlob<'_>]) -> Result<()> {
    for (k, (g, x)) in grads.iter().zip(inputs).enumerate() {
        if g.shape() != x.shape() || g.dtype() != x.dtype() {
            return Err(Error::ShapeMismatch {
                op: NAME.into(),
                arg: format!("gradient of input {k} ({})", g.dtype()),
                expected: format!("{} ({})", x.shape(), x.dtype()),
                got: g.shape().clone(),
            });
        }
    }
    Ok(())
}
