//! `_backward`'s gradient for a linear op `L` ([`crate::OpDef::linear`]):
//! `_backward/L` maps the output gradients `dy` to `Lᵀ(dy)` and ignores
//! the arguments' values, so with `g` the gradients reaching its outputs
//! (one per argument of `L`) its gradient is `L(g)` for the `dy`s — `L`'s
//! own forward kernel, same kwargs, zeros for a missing `g` — and zero
//! for the arguments.
//!
//! The forward kernel writes straight into the gradient buffers under
//! their requests, so `AddTo` accumulates and `Null` leaves them alone as
//! in any forward call.

use crate::backward_op::{Layout, NAME};
use crate::{
    Element, Error, ForwardFn, GradArgs, NDArray, OpCall, OpReqType, Result, TBlob, TBlobMut,
    dispatch_float,
};

/// The second derivative through `L`'s forward `forward`; `call` is `L`'s
/// call (its op and kwargs), `inputs` every input of the `_backward` call.
pub(super) fn backward(
    call: &OpCall<'_>,
    forward: ForwardFn,
    l: &Layout,
    inputs: &[&TBlob<'_>],
    args: &GradArgs<'_>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let xs = &inputs[l.first_argument()..];
    let given = reaching(xs, args)?;
    let gs: Vec<TBlob<'_>> = given.iter().map(Reaching::blob).collect();
    let (dys, rest) = grads.split_at_mut(l.outputs);
    let (dy_reqs, rest_reqs) = reqs.split_at(l.outputs);
    if dy_reqs.iter().any(|&r| r != OpReqType::Null) {
        check_outputs(call, &gs, dys)?;
        // The gradients are fresh buffers, never the `g`s: write in place
        // as an ordinary write.
        let dy_reqs: Vec<OpReqType> = dy_reqs
            .iter()
            .map(|&r| match r {
                OpReqType::WriteInplace => OpReqType::WriteTo,
                r => r,
            })
            .collect();
        forward(call, &gs, dys, &dy_reqs)?;
    }
    for (g, &req) in rest.iter_mut().zip(rest_reqs) {
        write_zeros(g, req)?;
    }
    Ok(())
}

/// The gradient reaching `_backward`'s output for one argument of `L`.
enum Reaching<'a> {
    Given(TBlob<'a>),
    /// Nothing reached it: zeros of the argument's shape and dtype.
    Zeros(NDArray),
}

impl Reaching<'_> {
    fn blob(&self) -> TBlob<'_> {
        match self {
            Reaching::Given(g) => g.clone(),
            Reaching::Zeros(z) => z.blob(),
        }
    }
}

/// Per argument of `L` (`xs`), the gradient reaching `_backward`'s
/// output for it.
fn reaching<'a>(xs: &[&TBlob<'_>], args: &GradArgs<'a>) -> Result<Vec<Reaching<'a>>> {
    let given = |i: usize| args.out_grads.get(i).and_then(Option::as_ref);
    xs.iter()
        .enumerate()
        .map(|(i, x)| reach(i, x, given(i)))
        .collect()
}

/// The gradient `g` reaching the output for argument `i` (`x`), checked
/// to have its shape and dtype, or zeros like `x` when there is none.
fn reach<'a>(i: usize, x: &TBlob<'_>, g: Option<&TBlob<'a>>) -> Result<Reaching<'a>> {
    match g {
        Some(g) if g.shape() != x.shape() || g.dtype() != x.dtype() => Err(Error::ShapeMismatch {
            op: NAME.into(),
            arg: format!("gradient of output {i} ({})", g.dtype()),
            expected: format!("{} ({}), as argument {i}", x.shape(), x.dtype()),
            got: g.shape().clone(),
        }),
        Some(g) => Ok(Reaching::Given(g.clone())),
        None => NDArray::zeros_for(NAME, x.shape().clone(), x.dtype()).map(Reaching::Zeros),
    }
}

/// `L`'s outputs for arguments of the `g`s' shapes and dtypes are the
/// output gradients' buffers.
fn check_outputs(call: &OpCall<'_>, gs: &[TBlob<'_>], dys: &[TBlobMut<'_>]) -> Result<()> {
    let op = call.op;
    let shapes: Vec<_> = gs.iter().map(|g| g.shape().clone()).collect();
    let dtypes: Vec<_> = gs.iter().map(TBlob::dtype).collect();
    let want_shapes = op.output_shapes(&shapes, call.env)?;
    let want_dtypes = op.output_dtypes(&dtypes, call.env)?;
    if want_shapes.len() != dys.len() {
        return Err(Error::Arity {
            op: format!("{NAME}[{}]", op.name),
            expected: want_shapes.len(),
            got: dys.len(),
        });
    }
    for (k, ((s, d), dy)) in want_shapes.iter().zip(&want_dtypes).zip(dys).enumerate() {
        if dy.shape() != s || dy.dtype() != *d {
            return Err(Error::ShapeMismatch {
                op: NAME.into(),
                arg: format!(
                    "gradient of `{}`'s output gradient {k} ({})",
                    op.name,
                    dy.dtype()
                ),
                expected: format!("{s} ({d})"),
                got: dy.shape().clone(),
            });
        }
    }
    Ok(())
}

/// Zeros into `g` honouring `req`: written whole for `WriteTo` and
/// `WriteInplace`; `AddTo` adds nothing and `Null` writes nothing.
fn write_zeros(g: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
    if !matches!(req, OpReqType::WriteTo | OpReqType::WriteInplace) {
        return Ok(());
    }
    let dtype = g.dtype();
    dispatch_float!(dtype, S => {
        g.as_slice_mut::<S>()?.fill(<S as Element>::from_f64(0.0));
        Ok(())
    }, _ => Err(Error::invalid(NAME, "gradients", format!("a float dtype, got {dtype}"))))
}
