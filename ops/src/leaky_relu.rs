//! [`leaky_relu()`] (`LeakyReLU`), MXNet's leaky-ReLU layer with every
//! `act_type`.
//!
//! Two types are not elementwise: `prelu` takes its slopes from a second
//! argument, `gamma` (one per channel, axis 1), and `rrelu` draws a random
//! slope per element in training and shows it as a second output, `mask`,
//! as MXNet does. The others (`leaky`, `elu`, `selu`, `gelu`) are one
//! scalar function, the elementwise op `_LeakyReLU_simple`
//! ([`crate::layers::leaky_relu_simple()`]): executors run such calls as
//! that op (`simple_form`), so they fuse with their neighbours, and an eager
//! call runs its kernels.

use simpleop::{
    Element, EnvArguments, Float, OpCall, OpReqType, Result, RunContext, Shape, TBlob, TBlobMut,
    dispatch_float, simple_op,
};

use crate::common::{bad_kwarg, check_blob, float_error, meta, meta_mut, shape_error};
use crate::layers::{LeakyActType, LeakyReLUParams};

const LEAKY: &str = "LeakyReLU";

/// `data`, and `gamma` for `prelu` (MXNet's `ListArguments`).
fn leaky_arguments(p: &LeakyReLUParams) -> Vec<String> {
    match p.act_type {
        LeakyActType::Prelu => vec!["data".into(), "gamma".into()],
        _ => vec!["data".into()],
    }
}

/// `output`, and `mask` for `rrelu`.
fn leaky_outputs(p: &LeakyReLUParams) -> usize {
    if p.act_type == LeakyActType::Rrelu {
        2
    } else {
        1
    }
}

/// The elementwise op that runs the scalar types.
fn leaky_simple_form(p: &LeakyReLUParams) -> Option<&'static str> {
    match p.act_type {
        LeakyActType::Prelu | LeakyActType::Rrelu => None,
        _ => Some(crate::layers::leaky_relu_simple::OP.name),
    }
}

/// The axis `gamma` runs along: 1, or 0 for 1-D data (as MXNet).
fn channel_axis(data: &Shape) -> Result<usize> {
    match data.ndim() {
        0 => Err(shape_error(
            LEAKY,
            "data",
            "at least 1 dimension for prelu",
            data,
        )),
        1 => Ok(0),
        _ => Ok(1),
    }
}

/// `gamma` is `(C,)` for `data`'s channels, or `(1,)` for one slope.
fn check_gamma(data: &Shape, gamma: &Shape) -> Result<()> {
    let c = data.dims()[channel_axis(data)?];
    match gamma.dims() {
        [g] if *g == c || *g == 1 => Ok(()),
        _ => Err(shape_error(
            LEAKY,
            "gamma",
            format!("({c},), one slope per channel (axis 1) of `data`, or (1,)"),
            gamma,
        )),
    }
}

/// rrelu's bounds: finite, `lower ≤ upper`.
fn rrelu_bounds(p: &LeakyReLUParams) -> Result<(f64, f64)> {
    let (lo, hi) = (p.lower_bound, p.upper_bound);
    if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
        return Err(bad_kwarg(
            LEAKY,
            "lower_bound",
            format!("expected finite bounds with lower_bound ≤ upper_bound, got {lo} and {hi}"),
        ));
    }
    Ok((lo, hi))
}

/// MXNet's `LeakyReLU`: `leaky`, `prelu` (slopes from the argument
/// `gamma`, one per channel or one for all), `rrelu` (a random slope per
/// element in `[lower_bound, upper_bound]` in training, shown as output
/// `mask`; their mean at inference, which `mask` then holds: MXNet leaves
/// it unwritten, but a backward pass after an inference forward reads it),
/// `elu`, `selu` and `gelu`. Gradients: data always, and
/// `gamma` for prelu, `Σ dy · min(x, 0)` over each channel.
#[simple_op(
    blob,
    name = "LeakyReLU",
    kwargs = LeakyReLUParams,
    arguments = super::leaky_arguments,
    outputs = super::leaky_outputs,
    output_names = ["output", "mask"],
    simple_form = super::leaky_simple_form,
    resources(rng)
)]
pub mod leaky_relu {
    use super::{LeakyActType, LeakyReLUParams};
    use simpleop::prelude::*;

    /// `data`'s shape (twice for rrelu); checks gamma's for prelu.
    pub fn shape(inputs: &[Shape], p: &LeakyReLUParams) -> Result<Vec<Shape>> {
        match p.act_type {
            LeakyActType::Prelu => super::check_gamma(&inputs[0], &inputs[1])?,
            LeakyActType::Rrelu => {
                super::rrelu_bounds(p)?;
            }
            _ => {}
        }
        Ok(vec![inputs[0].clone(); super::leaky_outputs(p)])
    }

    /// prelu's `gamma` is `(C,)` for `data`'s channels (axis 1); left
    /// unknown for 1-D data, as MXNet cannot infer it either.
    pub fn input_shapes(shapes: &mut [Option<Shape>], p: &LeakyReLUParams) -> Result<()> {
        if p.act_type == LeakyActType::Prelu
            && shapes[1].is_none()
            && let Some(data) = &shapes[0]
            && data.ndim() >= 2
        {
            shapes[1] = Some(Shape::new(vec![data.dims()[1]]));
        }
        Ok(())
    }

    /// The function `act_type` names.
    pub fn forward(
        inputs: &[TBlob<'_>],
        outs: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        ctx: &RunContext,
        p: &LeakyReLUParams,
        env: &EnvArguments,
    ) -> Result<()> {
        match p.act_type {
            LeakyActType::Prelu => super::prelu_forward(inputs, outs, reqs[0]),
            LeakyActType::Rrelu => super::rrelu_forward(inputs, outs, reqs, ctx, p, env),
            _ => super::simple_forward(inputs, outs, reqs, ctx, env),
        }
    }

    /// `dy` times the derivative; gamma's gradient for prelu.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        dys: OutGrads<&[Option<TBlob<'_>>]>,
        ys: OutValues<&[TBlob<'_>]>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        ctx: &RunContext,
        p: &LeakyReLUParams,
        env: &EnvArguments,
    ) -> Result<()> {
        let Some(dy) = &dys[0] else {
            // Nothing read the output: every gradient is zero.
            for (g, r) in grads.iter_mut().zip(reqs) {
                crate::common::zero_grad(g, *r)?;
            }
            return Ok(());
        };
        match p.act_type {
            LeakyActType::Prelu => super::prelu_backward(dy, &x, grads, reqs),
            LeakyActType::Rrelu => super::rrelu_backward(dy, &ys, &x, grads, reqs),
            _ => super::simple_backward(dy, &ys, &x, grads, reqs, ctx, env),
        }
    }
}

/// `_LeakyReLU_simple` and its kernels on `ctx`'s device, which run the
/// scalar types.
fn simple_kernels(
    ctx: &RunContext,
) -> Result<(
    &'static simpleop::OpDef,
    &'static simpleop::KernelRegistration,
)> {
    let op = &crate::layers::leaky_relu_simple::OP;
    let kernels = simpleop::Registry::global()?
        .get(op.name)?
        .kernels(ctx.device)?;
    Ok((op, kernels))
}

fn simple_forward(
    inputs: &[TBlob<'_>],
    outs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    ctx: &RunContext,
    env: &EnvArguments,
) -> Result<()> {
    let (op, kernels) = simple_kernels(ctx)?;
    (kernels.forward)(&OpCall { op, env, ctx }, inputs, outs, reqs)
}

fn simple_backward(
    dy: &TBlob<'_>,
    ys: &[TBlob<'_>],
    x: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    ctx: &RunContext,
    env: &EnvArguments,
) -> Result<()> {
    let (op, kernels) = simple_kernels(ctx)?;
    let backward = kernels
        .backward
        .ok_or_else(|| simpleop::Error::NoGradient { op: op.name.into() })?;
    let args = simpleop::GradArgs {
        out_grad: dy.clone(),
        output: ys.first().cloned(),
        inputs: x.iter().cloned().map(Some).collect(),
        out_grads: std::iter::once(Some(dy.clone())).collect(),
        outputs: Default::default(),
    };
    backward(&OpCall { op, env, ctx }, &args, grads, reqs)
}

/// prelu's arguments, checked, and which slope each element of `data`
/// takes: one per channel of gamma's axis, or one for all.
struct Prelu<'b, 'a> {
    x: &'b TBlob<'a>,
    gamma: &'b TBlob<'a>,
    /// Channels and elements per channel step (`outer × c × inner`).
    c: usize,
    inner: usize,
    one: bool,
}

impl<'b, 'a> Prelu<'b, 'a> {
    fn of(inputs: &'b [TBlob<'a>]) -> Result<Self> {
        let [x, gamma] = inputs else {
            return Err(simpleop::Error::invalid(
                LEAKY,
                "gamma",
                "prelu takes data and gamma",
            ));
        };
        check_gamma(x.shape(), gamma.shape())?;
        crate::common::require_same_dtype(LEAKY, "gamma", gamma.dtype(), x.dtype(), "data")?;
        let k = channel_axis(x.shape())?;
        let (_, c, inner) = crate::common::split_at_axis(x.shape().dims(), k);
        let one = gamma.len() == 1 && c != 1;
        Ok(Prelu {
            x,
            gamma,
            c,
            inner,
            one,
        })
    }

    /// The index in gamma of element `i`'s slope.
    #[inline]
    fn slope_at(&self, i: usize) -> usize {
        if self.one {
            0
        } else {
            (i / self.inner) % self.c
        }
    }
}

fn prelu_forward(inputs: &[TBlob<'_>], outs: &mut [TBlobMut<'_>], req: OpReqType) -> Result<()> {
    let pr = Prelu::of(inputs)?;
    let (x, gamma) = (pr.x, pr.gamma);
    check_blob(LEAKY, "output", meta_mut(&outs[0]), x.shape(), x.dtype())?;
    let dtype = x.dtype();
    dispatch_float!(dtype, T => {
        let (xs, gs) = (x.as_slice::<T>()?, gamma.as_slice::<T>()?);
        let from = <<T as Float>::Compute as Element>::from_f64;
        let y = outs[0].as_slice_mut::<T>()?;
        for (i, (o, v)) in y.iter_mut().zip(xs).enumerate() {
            let v = v.to_f64();
            let g = gs[pr.slope_at(i)].to_f64();
            req.assign(o, from(if v > 0.0 { v } else { g * v }));
        }
        Ok(())
    }, _ => Err(float_error(LEAKY, "data", dtype)))
}

fn prelu_backward(
    dy: &TBlob<'_>,
    x: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let pr = Prelu::of(x)?;
    let (x, gamma) = (pr.x, pr.gamma);
    check_blob(LEAKY, "out_grad", meta(dy), x.shape(), x.dtype())?;
    let wanted = [(x.shape(), "data_grad"), (gamma.shape(), "gamma_grad")];
    for ((shape, arg), (g, r)) in wanted.into_iter().zip(grads.iter().zip(reqs)) {
        if *r != OpReqType::Null {
            check_blob(LEAKY, arg, meta_mut(g), shape, x.dtype())?;
        }
    }
    let dtype = x.dtype();
    dispatch_float!(dtype, T => {
        let (xs, gs, ds) = (x.as_slice::<T>()?, gamma.as_slice::<T>()?, dy.as_slice::<T>()?);
        let from = <<T as Float>::Compute as Element>::from_f64;
        let mut dgamma = vec![0.0f64; gs.len()];
        for (i, (v, d)) in xs.iter().zip(ds).enumerate() {
            let v = v.to_f64();
            if v <= 0.0 {
                dgamma[pr.slope_at(i)] += d.to_f64() * v;
            }
        }
        if reqs[0] != OpReqType::Null {
            let dx = grads[0].as_slice_mut::<T>()?;
            for (i, ((o, v), d)) in dx.iter_mut().zip(xs).zip(ds).enumerate() {
                let (v, d) = (v.to_f64(), d.to_f64());
                let g = gs[pr.slope_at(i)].to_f64();
                reqs[0].assign(o, from(if v > 0.0 { d } else { d * g }));
            }
        }
        if reqs[1] != OpReqType::Null {
            let dg = grads[1].as_slice_mut::<T>()?;
            for (o, v) in dg.iter_mut().zip(dgamma) {
                reqs[1].assign(o, from(v));
            }
        }
        Ok(())
    }, _ => Err(float_error(LEAKY, "data", dtype)))
}

/// `x > 0 ? x : x · slope`, the slope drawn per element in training from
/// the op's seeded stream (kept in `mask`), their mean at inference.
fn rrelu_forward(
    inputs: &[TBlob<'_>],
    outs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    ctx: &RunContext,
    p: &LeakyReLUParams,
    env: &EnvArguments,
) -> Result<()> {
    let (lo, hi) = rrelu_bounds(p)?;
    let x = &inputs[0];
    for (o, arg) in outs.iter().zip(["output", "mask"]) {
        check_blob(LEAKY, arg, meta_mut(o), x.shape(), x.dtype())?;
    }
    let mut rng = simpleop::Rng::new(env.seed_or_draw(), 0);
    // MXNet's `float` fields: the bounds and the inference slope in f32.
    let (lo, hi) = (f64::from(lo as f32), f64::from(hi as f32));
    let mean = f64::from((lo as f32 + hi as f32) / 2.0);
    let dtype = x.dtype();
    dispatch_float!(dtype, T => {
        let xs = x.as_slice::<T>()?;
        let from = <<T as Float>::Compute as Element>::from_f64;
        let (head, mask) = outs.split_at_mut(1);
        let y = head[0].as_slice_mut::<T>()?;
        let mut mk = match reqs[1] {
            OpReqType::Null => None,
            _ => Some(mask[0].as_slice_mut::<T>()?),
        };
        for (i, (o, v)) in y.iter_mut().zip(xs).enumerate() {
            let slope = if ctx.is_train {
                // Rounded to T, so that backward's slope is forward's.
                T::from_f64(lo + (hi - lo) * rng.uniform()).to_f64()
            } else {
                mean
            };
            let v = v.to_f64();
            reqs[0].assign(o, from(if v > 0.0 { v } else { v * slope }));
            if let Some(mk) = mk.as_deref_mut() {
                reqs[1].assign(&mut mk[i], from(slope));
            }
        }
        Ok(())
    }, _ => Err(float_error(LEAKY, "data", dtype)))
}

/// `dy · (x > 0 ? 1 : mask)`: the derivative, from the input's sign.
fn rrelu_backward(
    dy: &TBlob<'_>,
    ys: &[TBlob<'_>],
    x: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let (x, mask) = match (x, ys) {
        ([x], [_, mask]) => (x, mask),
        _ => {
            return Err(simpleop::Error::invalid(
                LEAKY,
                "mask",
                "rrelu's backward reads data and mask",
            ));
        }
    };
    let (shape, dtype) = (x.shape(), x.dtype());
    check_blob(LEAKY, "mask", meta(mask), shape, dtype)?;
    check_blob(LEAKY, "out_grad", meta(dy), shape, dtype)?;
    if reqs[0] == OpReqType::Null {
        return Ok(());
    }
    check_blob(LEAKY, "data_grad", meta_mut(&grads[0]), shape, dtype)?;
    dispatch_float!(dtype, T => {
        let (xs, ms, ds) = (x.as_slice::<T>()?, mask.as_slice::<T>()?, dy.as_slice::<T>()?);
        let from = <<T as Float>::Compute as Element>::from_f64;
        let dx = grads[0].as_slice_mut::<T>()?;
        for (((o, v), m), d) in dx.iter_mut().zip(xs).zip(ms).zip(ds) {
            let slope = if v.to_f64() > 0.0 { 1.0 } else { m.to_f64() };
            reqs[0].assign(o, from(d.to_f64() * slope));
        }
        Ok(())
    }, _ => Err(float_error(LEAKY, "data", dtype)))
}
