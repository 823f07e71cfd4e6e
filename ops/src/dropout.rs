//! [`dropout()`] (`Dropout`), whose mask is its second, hidden output:
//! drawn from the op's seeded random stream in training (or always, with
//! `mode = always`), read by backward, and never stored in inference.

use serde::{Deserialize, Serialize};
use simpleop::{
    Element, Float, OpReqType, Result, RunContext, TBlob, TBlobMut, dispatch_float, simple_op,
};

use crate::common::{axis_of, bad_kwarg, float_error};

const DROPOUT: &str = "Dropout";

/// Keyword arguments of [`dropout()`] (MXNet's `DropoutParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct DropoutParams {
    /// The fraction dropped (default 0.5), in `[0, 1]`.
    pub p: f64,
    /// `training` drops in training mode only; `always` drops in inference too.
    pub mode: String,
    /// Axes along which one mask value is shared (variational dropout).
    pub axes: Vec<i64>,
    /// Accepted and ignored (cuDNN).
    pub cudnn_off: bool,
}

impl Default for DropoutParams {
    fn default() -> Self {
        DropoutParams {
            p: 0.5,
            mode: "training".into(),
            axes: Vec::new(),
            cudnn_off: false,
        }
    }
}

/// Whether this call drops, after checking the kwargs.
fn dropping(p: &DropoutParams, is_train: bool) -> Result<bool> {
    if !(0.0..=1.0).contains(&p.p) {
        return Err(bad_kwarg(
            DROPOUT,
            "p",
            format!("expected a number in [0, 1], got {}", p.p),
        ));
    }
    let always = match p.mode.as_str() {
        "training" => false,
        "always" => true,
        m => {
            return Err(bad_kwarg(
                DROPOUT,
                "mode",
                format!("expected `training` or `always`, got `{m}`"),
            ));
        }
    };
    Ok((always || is_train) && p.p > 0.0)
}

/// Per axis, whether one mask value is shared along it (`axes`).
fn shared_axes(p: &DropoutParams, ndim: usize) -> Result<Vec<bool>> {
    let mut shared = vec![false; ndim];
    for &a in &p.axes {
        shared[axis_of(DROPOUT, "axes", a, ndim)?] = true;
    }
    Ok(shared)
}

/// The output and mask have `x`'s shape and dtype.
fn check_outputs(x: &TBlob<'_>, outs: &[TBlobMut<'_>]) -> Result<()> {
    for (o, arg) in outs.iter().zip(["output", "mask"]) {
        let got = crate::common::meta_mut(o);
        crate::common::check_blob(DROPOUT, arg, got, x.shape(), x.dtype())?;
    }
    Ok(())
}

/// The mask's index for element `i`: shared along `axes`.
fn mask_index(dims: &[usize], shared: &[bool], mut i: usize) -> usize {
    let (mut at, mut stride) = (0, 1);
    for (d, &n) in dims.iter().enumerate().rev() {
        let k = i % n;
        i /= n;
        if !shared[d] {
            at += k * stride;
            stride *= n;
        }
    }
    at
}

/// MXNet's `Dropout`: in training mode (or with `mode = always`) each
/// element is zeroed with probability `p` and the rest scaled by
/// `1/(1 − p)`; otherwise the identity. The mask (`0` or `1/(1 − p)`) is
/// the second, hidden output, drawn from the op's seeded random stream, and
/// backward multiplies by it.
#[simple_op(
    blob,
    name = "Dropout",
    kwargs = DropoutParams,
    outputs = 2,
    visible_outputs = 1,
    output_names = ["output", "mask"],
    resources(rng)
)]
pub mod dropout {
    use super::DropoutParams;
    use simpleop::prelude::*;

    /// `data`'s shape, twice. Checks `p`, `mode` and `axes` here, so that
    /// a bad one fails at bind, not halfway through a pass.
    pub fn shape(inputs: &[Shape], p: &DropoutParams) -> Result<Vec<Shape>> {
        super::dropping(p, false)?;
        super::shared_axes(p, inputs[0].ndim())?;
        Ok(vec![inputs[0].clone(), inputs[0].clone()])
    }

    /// `out = data · mask`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        outs: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        ctx: &RunContext,
        p: &DropoutParams,
        env: &EnvArguments,
    ) -> Result<()> {
        super::dropout_forward(&inputs[0], outs, reqs, ctx, p, env)
    }

    /// `dx = dy · mask`.
    pub fn backward(
        dys: OutGrads<&[Option<TBlob<'_>>]>,
        ys: OutValues<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
    ) -> Result<()> {
        super::dropout_backward(&dys, &ys, grads, reqs)
    }
}

fn dropout_forward(
    x: &TBlob<'_>,
    outs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    ctx: &RunContext,
    p: &DropoutParams,
    env: &simpleop::EnvArguments,
) -> Result<()> {
    let drop = dropping(p, ctx.is_train)?;
    let dims = x.shape().dims().to_vec();
    let shared = shared_axes(p, dims.len())?;
    let dtype = x.dtype();
    check_outputs(x, outs)?;
    if x.is_empty() {
        return Ok(());
    }
    dispatch_float!(dtype, T => {
        let xs = x.as_slice::<T>()?;
        let keep = 1.0 - p.p;
        let scale = if keep > 0.0 { 1.0 / keep } else { 0.0 };
        // One draw per distinct mask value, in order.
        let draws = dims.iter().zip(&shared).filter(|(_, s)| !**s).map(|(n, _)| *n).product::<usize>();
        let mut rng = simpleop::Rng::new(env.seed_or_draw(), 0);
        let values: Vec<f64> = (0..draws)
            .map(|_| if !drop { 1.0 } else if rng.uniform() < keep { scale } else { 0.0 })
            .collect();
        let from = <<T as Float>::Compute as Element>::from_f64;
        let (head, mask) = outs.split_at_mut(1);
        let y = head[0].as_slice_mut::<T>()?;
        // Inference does not read the mask: its view then has no storage.
        let mut mk = match reqs[1] {
            OpReqType::Null => None,
            _ => Some(mask[0].as_slice_mut::<T>()?),
        };
        for i in 0..xs.len() {
            let m = values[mask_index(&dims, &shared, i)];
            reqs[0].assign(&mut y[i], from(xs[i].to_f64() * m));
            if let Some(mk) = mk.as_deref_mut() {
                reqs[1].assign(&mut mk[i], from(m));
            }
        }
        Ok(())
    }, _ => Err(float_error(DROPOUT, "data", dtype)))
}

fn dropout_backward(
    dys: &[Option<TBlob<'_>>],
    ys: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let [_, mask] = ys else {
        return Err(simpleop::Error::invalid(
            DROPOUT,
            "outputs",
            "expected output and mask",
        ));
    };
    let (shape, dtype) = (mask.shape(), mask.dtype());
    let dx = crate::common::meta_mut(&grads[0]);
    crate::common::check_blob(DROPOUT, "data_grad", dx, shape, dtype)?;
    if let Some(dy) = &dys[0] {
        crate::common::check_blob(DROPOUT, "out_grad", crate::common::meta(dy), shape, dtype)?;
    }
    let dtype = mask.dtype();
    dispatch_float!(dtype, T => {
        let mk = mask.as_slice::<T>()?;
        let dx = grads[0].as_slice_mut::<T>()?;
        let from = <<T as Float>::Compute as Element>::from_f64;
        match &dys[0] {
            Some(dy) => {
                for ((o, d), m) in dx.iter_mut().zip(dy.as_slice::<T>()?).zip(mk) {
                    reqs[0].assign(o, from(d.to_f64() * m.to_f64()));
                }
            }
            None => {
                for o in dx.iter_mut() {
                    reqs[0].assign(o, from(0.0));
                }
            }
        }
        Ok(())
    }, _ => Err(float_error(DROPOUT, "data", dtype)))
}
