//! The second derivative of an op with a gradient composition: the
//! composition recorded on the eager tape at the call's shapes, then
//! differentiated with the gradients reaching `_backward`'s outputs as
//! heads.

use super::dual::{values, write};
use crate::backward_op::Layout;
use crate::backward_op::NAME;
use crate::composition::{GradParts, GradientComposition};
use crate::{EnvArguments, Error, GradArgs, NDArray, OpReqType, Result, TBlob, TBlobMut, autograd};

pub(super) fn backward(
    c: &GradientComposition,
    l: &Layout,
    env: &EnvArguments,
    inputs: &[&TBlob<'_>],
    args: &GradArgs<'_>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let mut vars = inputs
        .iter()
        .map(|b| array_of(b))
        .collect::<Result<Vec<_>>>()?;
    for v in &mut vars {
        v.attach_grad()?;
    }
    let (dys, rest) = vars.split_at(l.outputs);
    let (ys, xs) = rest.split_at(if l.reads_outputs { l.outputs } else { 0 });
    let parts = GradParts {
        env,
        inputs: xs,
        outputs: ys,
        out_grads: dys,
    };
    let gs = autograd::record(|| (c.gradient)(&parts))?;
    if gs.len() != l.arguments {
        return Err(Error::invalid(
            c.op,
            "gradient composition",
            format!(
                "one gradient per argument ({}), got {}",
                l.arguments,
                gs.len()
            ),
        ));
    }
    let (mut heads, mut weights) = (Vec::new(), Vec::new());
    for (i, g) in gs.iter().enumerate() {
        let (Some(g), Some(w)) = (g, args.out_grads.get(i).and_then(Option::as_ref)) else {
            continue;
        };
        if g.shape() != w.shape() || g.dtype() != w.dtype() {
            return Err(Error::invalid(
                c.op,
                "gradient composition",
                format!(
                    "gradient {i} of shape {} ({}) like its argument, got {} ({})",
                    w.shape(),
                    w.dtype(),
                    g.shape(),
                    g.dtype()
                ),
            ));
        }
        if autograd::is_recorded(g) {
            heads.push(g);
            weights.push(array_of(w)?);
        }
    }
    let results = if heads.is_empty() {
        vars.iter()
            .map(|v| NDArray::zeros_for(NAME, v.shape().clone(), v.dtype()))
            .collect::<Result<Vec<_>>>()?
    } else {
        let var_refs: Vec<&NDArray> = vars.iter().collect();
        let weight_refs: Vec<&NDArray> = weights.iter().collect();
        autograd::grad(&heads, &var_refs, &weight_refs, false)?
    };
    for ((g, r), &req) in grads.iter_mut().zip(&results).zip(reqs) {
        write(g, &r.to_f64_vec(), req)?;
    }
    Ok(())
}

/// A copy of `b` as an array of its dtype.
fn array_of(b: &TBlob<'_>) -> Result<NDArray> {
    NDArray::from_f64(&values::<f64>(b)?, b.shape().clone(), b.dtype())
}
