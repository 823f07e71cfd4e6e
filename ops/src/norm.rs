//! Normalisation layers: [`instance_norm()`] (`InstanceNorm`) and
//! [`layer_norm()`] (`LayerNorm`), with gradients for data, gamma and beta.
//!
//! Both normalise *lanes* of the data, `y = γ (x − μ) / σ + β` with
//! `σ = √(var + eps)` (the biased variance, as MXNet), and differ in what a
//! lane is and which γ an element gets. Statistics are accumulated in f64
//! for every dtype. MXNet keeps the mean and the standard deviation as
//! hidden outputs for backward; with one output, backward recomputes them
//! from the data (the gradient reads the inputs, so it is T2).

use serde::{Deserialize, Serialize};
use simpleop::{
    Element, Float, OpReqType, Result, Shape, TBlob, TBlobMut, dispatch_float, simple_op,
};

use crate::common::{axis_of, bad_kwarg, check_blob, float_error, meta, meta_mut, shape_error};

/// Keyword arguments of [`instance_norm()`] (MXNet's `InstanceNormParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct InstanceNormParams {
    /// Added to the variance before the square root (default 1e-3; used as
    /// an f32, MXNet's `float`).
    pub eps: f64,
}

impl Default for InstanceNormParams {
    fn default() -> Self {
        InstanceNormParams { eps: 1e-3 }
    }
}

/// Keyword arguments of [`layer_norm()`] (MXNet's `LayerNormParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct LayerNormParams {
    /// The axis normalised over, which gamma and beta run along (default
    /// -1; negative counts from the end).
    pub axis: i64,
    /// Added to the variance before the square root (default 1e-5; used as
    /// an f32, MXNet's `float`).
    pub eps: f64,
    /// Shows the mean and standard deviation outputs (hidden otherwise).
    pub output_mean_var: bool,
}

impl Default for LayerNormParams {
    fn default() -> Self {
        LayerNormParams {
            axis: -1,
            eps: 1e-5,
            output_mean_var: false,
        }
    }
}

/// Which elements form a lane and which γ, β each element takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lanes {
    /// LayerNorm: data as `outer × len × inner` normalised along `len`;
    /// lane `(o, j)` holds `(o·len + i)·inner + j`, which takes γ[i].
    Along {
        outer: usize,
        len: usize,
        inner: usize,
    },
    /// InstanceNorm: data as `n × c × rest`; lane `(n, c)` is the `rest`
    /// contiguous elements from `(n·c_count + c)·rest`, all taking γ[c].
    Instance { n: usize, c: usize, rest: usize },
}

impl Lanes {
    fn count(self) -> usize {
        match self {
            Lanes::Along { outer, inner, .. } => outer.saturating_mul(inner),
            Lanes::Instance { n, c, .. } => n.saturating_mul(c),
        }
    }
    /// Elements per lane.
    fn len(self) -> usize {
        match self {
            Lanes::Along { len, .. } => len,
            Lanes::Instance { rest, .. } => rest,
        }
    }
    /// The channels γ and β run over.
    fn channels(self) -> usize {
        match self {
            Lanes::Along { len, .. } => len,
            Lanes::Instance { c, .. } => c,
        }
    }
    /// The offset of lane `l`'s element `i`, and that element's channel.
    #[inline(always)]
    fn at(self, l: usize, i: usize) -> (usize, usize) {
        match self {
            Lanes::Along { len, inner, .. } => {
                let (o, j) = (l / inner, l % inner);
                ((o * len + i) * inner + j, i)
            }
            Lanes::Instance { c, rest, .. } => (l * rest + i, l % c),
        }
    }
}

const IN: &str = "InstanceNorm";
const LN: &str = "LayerNorm";

/// `eps` as MXNet's `float`, checked.
fn eps_of(op: &str, eps: f64) -> Result<f64> {
    let e = f64::from(eps as f32);
    if !(e.is_finite() && e >= 0.0) {
        return Err(bad_kwarg(
            op,
            "eps",
            format!("expected a finite number ≥ 0, got {eps}"),
        ));
    }
    Ok(e)
}

/// Checks gamma and beta are `(channels,)`.
fn check_affine(op: &str, inputs: &[Shape], channels: usize, what: &str) -> Result<()> {
    for (arg, s) in [("gamma", &inputs[1]), ("beta", &inputs[2])] {
        if s.dims() != [channels] {
            return Err(shape_error(op, arg, format!("({channels},), {what}"), s));
        }
    }
    Ok(())
}

/// Fills unknown `gamma` and `beta` shapes with `(channels,)`.
fn fill_affine(shapes: &mut [Option<Shape>], channels: usize) {
    for s in shapes[1..].iter_mut() {
        s.get_or_insert_with(|| Shape::new(vec![channels]));
    }
}

/// Errors unless there are the three inputs `data`, `gamma`, `beta`.
fn three(op: &str, n: usize) -> Result<()> {
    if n == 3 {
        Ok(())
    } else {
        Err(simpleop::Error::Arity {
            op: op.into(),
            expected: 3,
            got: n,
        })
    }
}

fn instance_lanes(inputs: &[Shape], p: &InstanceNormParams) -> Result<(Lanes, f64)> {
    three(IN, inputs.len())?;
    let data = &inputs[0];
    let dims = data.dims();
    if dims.len() < 3 {
        return Err(shape_error(
            IN,
            "data",
            "at least 3 dimensions (batch, channel, spatial...)",
            data,
        ));
    }
    let (n, c) = (dims[0], dims[1]);
    let rest = dims[2..].iter().fold(1usize, |a, &d| a.saturating_mul(d));
    check_affine(IN, inputs, c, &format!("one per channel of `data` {data}"))?;
    Ok((Lanes::Instance { n, c, rest }, eps_of(IN, p.eps)?))
}

fn layer_lanes(inputs: &[Shape], p: &LayerNormParams) -> Result<(Lanes, f64)> {
    three(LN, inputs.len())?;
    let data = &inputs[0];
    if data.ndim() == 0 {
        return Err(shape_error(LN, "data", "at least 1 dimension", data));
    }
    let k = axis_of(LN, "axis", p.axis, data.ndim())?;
    let (outer, len, inner) = crate::common::split_at_axis(data.dims(), k);
    check_affine(
        LN,
        inputs,
        len,
        &format!("the size of axis {} of `data` {data}", p.axis),
    )?;
    Ok((Lanes::Along { outer, len, inner }, eps_of(LN, p.eps)?))
}

/// Mean and `1/σ` of lane `l`, in f64.
#[inline]
fn moments<T: Float>(x: &[T], lanes: Lanes, l: usize, eps: f64) -> (f64, f64) {
    let m = lanes.len();
    let mut sum = 0.0f64;
    for i in 0..m {
        sum += x[lanes.at(l, i).0].to_f64();
    }
    let mean = sum / m as f64;
    let mut sq = 0.0f64;
    for i in 0..m {
        let d = x[lanes.at(l, i).0].to_f64() - mean;
        sq += d * d;
    }
    (mean, 1.0 / (sq / m as f64 + eps).sqrt())
}

/// The three inputs, checked against each other and `out` (for executors
/// that do not infer first).
fn operands<'a, 'b>(
    op: &str,
    inputs: &'a [TBlob<'b>],
) -> Result<(&'a TBlob<'b>, &'a TBlob<'b>, &'a TBlob<'b>)> {
    let [x, gamma, beta] = inputs else {
        return Err(simpleop::Error::Arity {
            op: op.into(),
            expected: 3,
            got: inputs.len(),
        });
    };
    if !x.dtype().is_float() {
        return Err(float_error(op, "data", x.dtype()));
    }
    for (arg, b) in [("gamma", gamma), ("beta", beta)] {
        crate::common::require_same_dtype(op, arg, b.dtype(), x.dtype(), "data")?;
    }
    Ok((x, gamma, beta))
}

fn norm_forward(
    op: &str,
    lanes: Lanes,
    eps: f64,
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let (x, gamma, beta) = operands(op, inputs)?;
    check_blob(op, "output", meta_mut(out), x.shape(), x.dtype())?;
    dispatch_float!(x.dtype(), T => {
        let (xs, g, b) = (x.as_slice::<T>()?, gamma.as_slice::<T>()?, beta.as_slice::<T>()?);
        let ys = out.as_slice_mut::<T>()?;
        for l in 0..lanes.count() {
            let (mean, rstd) = moments(xs, lanes, l, eps);
            for i in 0..lanes.len() {
                let (at, c) = lanes.at(l, i);
                let v = g[c].to_f64() * ((xs[at].to_f64() - mean) * rstd) + b[c].to_f64();
                req.assign(&mut ys[at], <<T as Float>::Compute as Element>::from_f64(v));
            }
        }
        Ok(())
    }, _ => Err(float_error(op, "data", x.dtype())))
}

#[allow(clippy::too_many_arguments)]
fn norm_backward(
    op: &str,
    lanes: Lanes,
    eps: f64,
    dy: &TBlob<'_>,
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
) -> Result<()> {
    let (x, gamma, beta) = operands(op, inputs)?;
    check_blob(op, "out_grad", meta(dy), x.shape(), x.dtype())?;
    for (k, (arg, like)) in [("data_grad", x), ("gamma_grad", gamma), ("beta_grad", beta)]
        .into_iter()
        .enumerate()
    {
        if req[k] != OpReqType::Null {
            check_blob(op, arg, meta_mut(&grads[k]), like.shape(), like.dtype())?;
        }
    }
    dispatch_float!(x.dtype(), T => {
        let (xs, g, d) = (x.as_slice::<T>()?, gamma.as_slice::<T>()?, dy.as_slice::<T>()?);
        let m = lanes.len();
        let mut dgamma = vec![0.0f64; lanes.channels()];
        let mut dbeta = vec![0.0f64; lanes.channels()];
        let want_data = req[0] != OpReqType::Null;
        let mut dx = if want_data { Some(grads[0].as_slice_mut::<T>()?) } else { None };
        for l in 0..lanes.count() {
            let (mean, rstd) = moments(xs, lanes, l, eps);
            // Σ g and Σ g·x̂ over the lane, g = dy·γ
            let (mut sg, mut sgx) = (0.0f64, 0.0f64);
            for i in 0..m {
                let (at, c) = lanes.at(l, i);
                let (dyv, xhat) = (d[at].to_f64(), (xs[at].to_f64() - mean) * rstd);
                dgamma[c] += dyv * xhat;
                dbeta[c] += dyv;
                let gv = dyv * g[c].to_f64();
                sg += gv;
                sgx += gv * xhat;
            }
            if let Some(dx) = dx.as_deref_mut() {
                let (mg, mgx) = (sg / m as f64, sgx / m as f64);
                for i in 0..m {
                    let (at, c) = lanes.at(l, i);
                    let xhat = (xs[at].to_f64() - mean) * rstd;
                    let gv = d[at].to_f64() * g[c].to_f64();
                    let v = rstd * (gv - mg - xhat * mgx);
                    req[0].assign(&mut dx[at], <<T as Float>::Compute as Element>::from_f64(v));
                }
            }
        }
        for (k, acc) in [(1usize, &dgamma), (2, &dbeta)] {
            if req[k] != OpReqType::Null {
                let out = grads[k].as_slice_mut::<T>()?;
                for (o, &v) in out.iter_mut().zip(acc.iter()) {
                    req[k].assign(o, <<T as Float>::Compute as Element>::from_f64(v));
                }
            }
        }
        Ok(())
    }, _ => Err(float_error(op, "data", x.dtype())))
}

/// Instance normalisation (MXNet's `InstanceNorm`): every `(sample,
/// channel)` of `data` `(N, C, ...)` is normalised over its spatial
/// elements, then scaled and shifted by the channel's `gamma` and `beta`
/// `(C,)`. Gradients for all three inputs.
#[simple_op(name = "InstanceNorm", blob, inputs = ["data", "gamma", "beta"], kwargs = InstanceNormParams)]
pub mod instance_norm {
    use super::InstanceNormParams;
    use simpleop::prelude::*;

    /// `data`'s shape; `data` has at least 3 dimensions and `gamma`,
    /// `beta` are `(C,)`.
    pub fn shape(inputs: &[Shape], p: &InstanceNormParams) -> Result<Shape> {
        super::instance_lanes(inputs, p)?;
        Ok(inputs[0].clone())
    }

    /// `gamma` and `beta` are `(C,)` for `data` `(N, C, ...)`.
    pub fn input_shapes(shapes: &mut [Option<Shape>], _p: &InstanceNormParams) -> Result<()> {
        if let Some(&c) = shapes[0].as_ref().and_then(|d| d.dims().get(1)) {
            super::fill_affine(shapes, c);
        }
        Ok(())
    }

    /// `out (=|+=) γ_c (x − μ) / √(var + eps) + β_c` per (sample, channel).
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &InstanceNormParams,
    ) -> Result<()> {
        let shapes: Vec<Shape> = inputs.iter().map(|b| b.shape().clone()).collect();
        let (lanes, eps) = super::instance_lanes(&shapes, p)?;
        super::norm_forward(super::IN, lanes, eps, inputs, out, req)
    }

    /// `dx = γ/σ (dy − mean(dy) − x̂ mean(dy x̂))` per instance;
    /// `dγ_c = Σ dy x̂`, `dβ_c = Σ dy` over the channel's elements.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        p: &InstanceNormParams,
    ) -> Result<()> {
        let shapes: Vec<Shape> = x.iter().map(|b| b.shape().clone()).collect();
        let (lanes, eps) = super::instance_lanes(&shapes, p)?;
        super::norm_backward(super::IN, lanes, eps, &dy, &x, grads, req)
    }
}

/// Layer normalisation (MXNet's `LayerNorm`): `data` is normalised along
/// `axis`, then every position along it is scaled and shifted by its
/// `gamma` and `beta` (both of that axis's size). Gradients for all three
/// inputs. Its hidden outputs, shown with `output_mean_var`, are the mean
/// and the standard deviation `√(var + eps)` of each lane, with `axis` of
/// size 1; head gradients on them are ignored, as in MXNet.
#[simple_op(
    name = "LayerNorm",
    blob,
    inputs = ["data", "gamma", "beta"],
    kwargs = LayerNormParams,
    outputs = 3,
    visible_outputs = super::ln_visible,
    output_names = ["output", "mean", "std"]
)]
pub mod layer_norm {
    use super::LayerNormParams;
    use simpleop::prelude::*;

    /// `data`'s shape, then the lanes' shape (`axis` of size 1) twice.
    pub fn shape(inputs: &[Shape], p: &LayerNormParams) -> Result<Vec<Shape>> {
        super::layer_lanes(inputs, p)?;
        let stats = super::lane_shape(&inputs[0], p)?;
        Ok(vec![inputs[0].clone(), stats.clone(), stats])
    }

    /// `gamma` and `beta` are `(data.shape[axis],)`.
    pub fn input_shapes(shapes: &mut [Option<Shape>], p: &LayerNormParams) -> Result<()> {
        if let Some(data) = shapes[0].clone() {
            let k = crate::common::axis_of(super::LN, "axis", p.axis, data.ndim())?;
            super::fill_affine(shapes, data.dims()[k]);
        }
        Ok(())
    }

    /// `out (=|+=) γ_i (x − μ) / √(var + eps) + β_i` along `axis`; the
    /// lanes' mean and std when asked for.
    pub fn forward(
        inputs: &[TBlob<'_>],
        outs: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &LayerNormParams,
    ) -> Result<()> {
        let shapes: Vec<Shape> = inputs.iter().map(|b| b.shape().clone()).collect();
        let (lanes, eps) = super::layer_lanes(&shapes, p)?;
        let (head, stats) = outs.split_at_mut(1);
        super::norm_forward(super::LN, lanes, eps, inputs, &mut head[0], reqs[0])?;
        super::lane_stats(lanes, eps, &inputs[0], stats, &reqs[1..])
    }

    /// `dx = (1/σ)(g − mean(g) − x̂ mean(g x̂))` with `g = dy γ` per lane;
    /// `dγ_i = Σ dy x̂`, `dβ_i = Σ dy` over the other axes.
    pub fn backward(
        dys: OutGrads<&[Option<TBlob<'_>>]>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        p: &LayerNormParams,
    ) -> Result<()> {
        let shapes: Vec<Shape> = x.iter().map(|b| b.shape().clone()).collect();
        let (lanes, eps) = super::layer_lanes(&shapes, p)?;
        let zeros;
        let dy = match &dys[0] {
            Some(dy) => dy.clone(),
            None => {
                zeros = simpleop::NDArray::zeros(x[0].shape().clone(), x[0].dtype());
                zeros.blob()
            }
        };
        super::norm_backward(super::LN, lanes, eps, &dy, &x, grads, req)
    }
}

fn ln_visible(p: &LayerNormParams) -> usize {
    if p.output_mean_var { 3 } else { 1 }
}

/// `data`'s shape with `axis` of size 1: one entry per lane.
fn lane_shape(data: &Shape, p: &LayerNormParams) -> Result<Shape> {
    let k = axis_of(LN, "axis", p.axis, data.ndim())?;
    let mut dims = data.dims().to_vec();
    dims[k] = 1;
    Ok(Shape::new(dims))
}

/// Each lane's mean and `√(var + eps)` into `stats`, per request.
fn lane_stats(
    lanes: Lanes,
    eps: f64,
    x: &TBlob<'_>,
    stats: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    if reqs.iter().all(|r| *r == OpReqType::Null) {
        return Ok(());
    }
    dispatch_float!(x.dtype(), T => {
        let xs = x.as_slice::<T>()?;
        let from = <<T as Float>::Compute as Element>::from_f64;
        let moments: Vec<(f64, f64)> = (0..lanes.count()).map(|l| moments(xs, lanes, l, eps)).collect();
        for (k, (s, req)) in stats.iter_mut().zip(reqs).enumerate() {
            if *req == OpReqType::Null {
                continue;
            }
            let out = s.as_slice_mut::<T>()?;
            // Lane `l` = (o, j) of `outer × inner` sits at o·inner + j, as
            // the lanes' shape is `data`'s with the axis of size 1.
            for (l, &(mean, rstd)) in moments.iter().enumerate() {
                let v = if k == 0 { mean } else { 1.0 / rstd };
                req.assign(&mut out[l], from(v));
            }
        }
        Ok(())
    }, _ => Err(float_error(LN, "data", x.dtype())))
}
