//! [`batch_norm()`] (`BatchNorm`), an op with three outputs and two aux
//! states.
//!
//! BatchNorm normalises each channel (`axis`) of `data` with the batch's
//! mean and biased variance in training, or with its moving statistics (the
//! aux states `moving_mean`, `moving_var`) in inference and with
//! `use_global_stats`. Its hidden outputs are MXNet's: the mean used and
//! the inverse standard deviation `1/√(var + eps)` (named `var`), which
//! backward reads instead of recomputing them. A training forward pass
//! updates the moving statistics, `m = m·momentum + s·(1 − momentum)`.
//! MXNet 1.9.1 applies that update in its backward pass instead; after a
//! forward and backward step the two agree, and a training forward alone
//! (no backward) updates here and not in MXNet.
//!
//! In inference the op is a per-channel `(x − mean)·scale + beta`, and
//! executors with fusion bind it as such (its
//! [`simpleop::OpDef::inference_form`]): the three broadcast ops then fuse
//! onto the convolution (or anything elementwise) before them, so a
//! BatchNorm after a convolution costs no pass over memory of its own.

use serde::{Deserialize, Serialize};
use simpleop::{
    Attrs, DType, Element, Float, FormInput, FormNode, InferenceForm, OpReqType, Result,
    RunContext, Shape, TBlob, TBlobMut, dispatch_float, simple_op,
};

use crate::common::{axis_of, bad_kwarg, float_error, shape_error, split_at_axis};

const BN: &str = "BatchNorm";

/// Keyword arguments of [`batch_norm()`] (MXNet's `BatchNormParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct BatchNormParams {
    /// Added to the variance (default 1e-3; used as an f32, as MXNet).
    pub eps: f64,
    /// The moving statistics' decay (default 0.9; used as an f32).
    pub momentum: f64,
    /// Treats gamma as 1 and gives it a zero gradient (default true).
    pub fix_gamma: bool,
    /// Normalises with the moving statistics in training too, and never
    /// updates them.
    pub use_global_stats: bool,
    /// Shows the mean and inverse std outputs.
    pub output_mean_var: bool,
    /// The channel axis (default 1; negative counts from the end).
    pub axis: i64,
    /// Accepted and ignored (cuDNN).
    pub cudnn_off: bool,
    /// Accepted and ignored (quantisation).
    pub min_calib_range: Option<f64>,
    /// Accepted and ignored (quantisation).
    pub max_calib_range: Option<f64>,
}

impl Default for BatchNormParams {
    fn default() -> Self {
        BatchNormParams {
            eps: 1e-3,
            momentum: 0.9,
            fix_gamma: true,
            use_global_stats: false,
            output_mean_var: false,
            axis: 1,
            cudnn_off: false,
            min_calib_range: None,
            max_calib_range: None,
        }
    }
}

fn bn_visible(p: &BatchNormParams) -> usize {
    if p.output_mean_var { 3 } else { 1 }
}

/// BatchNorm in inference as ops the executor fuses:
/// `scale = gamma / √(moving_var + eps)` (gamma 1 with `fix_gamma`), then
/// `(data − moving_mean)·scale + beta`, the per-channel values reshaped to
/// broadcast along the channel axis. Subtracting the mean first, as MXNet
/// does, keeps a large mean from cancelling in f32 (`data·scale + shift`
/// would). The per-channel part runs on `C` elements each pass, so
/// weights changed after bind are used. f32 and f64 only: in a half type
/// the per-channel values would be rounded to it, where the op itself
/// keeps them in f64. No channels: `Reshape` reads a 0 as "copy".
fn inference_form(p: &BatchNormParams, shapes: &[Shape], dtype: DType) -> Option<InferenceForm> {
    use FormInput::{Input, Node};
    let data = shapes.first()?;
    let ch = Channels::of(data, p).ok()?;
    let (eps, _) = constants(p).ok()?;
    if !matches!(dtype, DType::F32 | DType::F64) || ch.c == 0 {
        return None;
    }
    let k = axis_of(BN, "axis", p.axis, data.ndim()).ok()?;
    let mut dims = vec!["1".to_owned(); data.ndim()];
    dims[k] = ch.c.to_string();
    let channel_shape = format!("({})", dims.join(","));
    let reshape = |x| FormNode::new("Reshape", &[x], Attrs::new().with("shape", &channel_shape));
    let mut nodes = vec![
        FormNode::new(
            "_plus_scalar",
            &[Input(4)],
            Attrs::new().with("scalar", eps),
        ),
        FormNode::new("rsqrt", &[Node(0)], Attrs::new()),
    ];
    if !p.fix_gamma {
        nodes.push(FormNode::new(
            "elemwise_mul",
            &[Node(1), Input(1)],
            Attrs::new(),
        ));
    }
    let scale = Node(nodes.len() - 1);
    let at = nodes.len();
    nodes.extend([
        reshape(Input(3)),
        reshape(scale),
        reshape(Input(2)),
        FormNode::new("broadcast_sub", &[Input(0), Node(at)], Attrs::new()),
        FormNode::new("broadcast_mul", &[Node(at + 3), Node(at + 1)], Attrs::new()),
        FormNode::new("broadcast_add", &[Node(at + 4), Node(at + 2)], Attrs::new()),
    ]);
    Some(InferenceForm { nodes })
}

/// `data` as `outer × channels × inner` around the channel axis.
#[derive(Clone, Copy)]
struct Channels {
    outer: usize,
    c: usize,
    inner: usize,
}

impl Channels {
    fn of(data: &Shape, p: &BatchNormParams) -> Result<Channels> {
        if data.ndim() == 0 {
            return Err(shape_error(BN, "data", "at least 1 dimension", data));
        }
        let k = axis_of(BN, "axis", p.axis, data.ndim())?;
        let (outer, c, inner) = split_at_axis(data.dims(), k);
        Ok(Channels { outer, c, inner })
    }
    /// Elements per channel.
    fn per_channel(self) -> usize {
        self.outer * self.inner
    }
    /// Calls `f(offset)` for every element of channel `ch`.
    #[inline]
    fn each(self, ch: usize, mut f: impl FnMut(usize)) {
        for o in 0..self.outer {
            let base = (o * self.c + ch) * self.inner;
            (base..base + self.inner).for_each(&mut f);
        }
    }
}

/// `y (=|+=) x·a + b`, `(a, b)` the channel's, in f64; split over the
/// pool in runs of one channel's contiguous elements.
#[inline]
fn normalize<T: Float>(ch: Channels, x: &[T], y: &mut [T], affine: &[(f64, f64)], req: OpReqType) {
    if req == OpReqType::Null || ch.inner == 0 {
        return;
    }
    let from = <<T as Float>::Compute as Element>::from_f64;
    simpleop::kernel::par_chunks_mut(y, 4, |start, out| {
        simpleop::kernel::with_isa(
            #[inline(always)]
            || {
                let mut i = start;
                while i - start < out.len() {
                    let run = (ch.inner - i % ch.inner).min(out.len() - (i - start));
                    let (a, b) = affine[(i / ch.inner) % ch.c];
                    let dst = &mut out[i - start..][..run];
                    for (d, &v) in dst.iter_mut().zip(&x[i..i + run]) {
                        req.assign(d, from(v.to_f64() * a + b));
                    }
                    i += run;
                }
            },
        )
    });
}

/// `eps` and `momentum` as MXNet's `float`s, checked.
fn constants(p: &BatchNormParams) -> Result<(f64, f64)> {
    let eps = f64::from(p.eps as f32);
    let momentum = f64::from(p.momentum as f32);
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(bad_kwarg(
            BN,
            "eps",
            format!("expected a finite number ≥ 0, got {}", p.eps),
        ));
    }
    if !momentum.is_finite() {
        return Err(bad_kwarg(
            BN,
            "momentum",
            format!("expected a finite number, got {}", p.momentum),
        ));
    }
    Ok((eps, momentum))
}

/// Checks gamma, beta (and the aux states) are `(C,)`.
fn check_channels(names: &[&str], shapes: &[&Shape], c: usize) -> Result<()> {
    for (arg, s) in names.iter().zip(shapes) {
        if s.dims() != [c] {
            return Err(shape_error(
                BN,
                arg,
                format!("({c},), one per channel of `data`"),
                s,
            ));
        }
    }
    Ok(())
}

/// MXNet's `BatchNorm`. Inputs `data`, `gamma`, `beta`; aux states
/// `moving_mean`, `moving_var`; outputs `output` and, shown with
/// `output_mean_var`, `mean` and `var` (the inverse std). Gradients for
/// data, gamma (zero with `fix_gamma`) and beta; head gradients on `mean`
/// and `var` are ignored, as in MXNet.
#[simple_op(
    blob,
    name = "BatchNorm",
    inputs = ["data", "gamma", "beta"],
    aux = ["moving_mean", "moving_var"],
    kwargs = BatchNormParams,
    outputs = 3,
    visible_outputs = super::bn_visible,
    output_names = ["output", "mean", "var"],
    inference_form = super::inference_form
)]
pub mod batch_norm {
    use super::BatchNormParams;
    use simpleop::prelude::*;

    /// `data`'s shape, then `(C,)` twice. Checks `eps` and `momentum`
    /// here, so that a bad one fails at bind, not halfway through a pass.
    pub fn shape(inputs: &[Shape], p: &BatchNormParams) -> Result<Vec<Shape>> {
        super::constants(p)?;
        let ch = super::Channels::of(&inputs[0], p)?;
        super::check_channels(&["gamma", "beta"], &[&inputs[1], &inputs[2]], ch.c)?;
        let c = Shape::new(vec![ch.c]);
        Ok(vec![inputs[0].clone(), c.clone(), c])
    }

    /// gamma, beta and the aux states are `(C,)` for `data`'s channels.
    pub fn input_shapes(shapes: &mut [Option<Shape>], p: &BatchNormParams) -> Result<()> {
        if let Some(data) = shapes[0].clone() {
            let ch = super::Channels::of(&data, p)?;
            for s in shapes[1..].iter_mut().filter(|s| s.is_none()) {
                *s = Some(Shape::new(vec![ch.c]));
            }
        }
        Ok(())
    }

    /// Normalises; in training (without `use_global_stats`) with the
    /// batch's statistics, updating the moving ones.
    pub fn forward(
        inputs: &[TBlob<'_>],
        outs: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        aux: AuxStates<&mut [TBlobMut<'_>]>,
        ctx: &RunContext,
        p: &BatchNormParams,
    ) -> Result<()> {
        super::bn_forward(inputs, outs, reqs, aux.0, ctx, p)
    }

    /// The batch-statistics gradient in training, the fixed-statistics
    /// one with `use_global_stats` or after an inference-mode forward (an
    /// eager call recorded with `record_with(false, ..)`), as MXNet's.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        dys: OutGrads<&[Option<TBlob<'_>>]>,
        ys: OutValues<&[TBlob<'_>]>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        ctx: &RunContext,
        p: &BatchNormParams,
    ) -> Result<()> {
        let global = p.use_global_stats || !ctx.is_train;
        super::bn_backward(&dys, &ys, &x, grads, reqs, p, global)
    }
}

fn bn_forward(
    inputs: &[TBlob<'_>],
    outs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    aux: &mut [TBlobMut<'_>],
    ctx: &RunContext,
    p: &BatchNormParams,
) -> Result<()> {
    let [x, gamma, beta] = inputs else {
        return Err(simpleop::Error::Arity {
            op: BN.into(),
            expected: 3,
            got: inputs.len(),
        });
    };
    let ch = Channels::of(x.shape(), p)?;
    let (eps, momentum) = constants(p)?;
    let [mm, mv] = aux else {
        return Err(simpleop::Error::invalid(
            BN,
            "aux",
            "expected moving_mean and moving_var",
        ));
    };
    check_channels(
        &["gamma", "beta", "moving_mean", "moving_var"],
        &[gamma.shape(), beta.shape(), mm.shape(), mv.shape()],
        ch.c,
    )?;
    let dtype = x.dtype();
    for (arg, d) in [
        ("gamma", gamma.dtype()),
        ("beta", beta.dtype()),
        ("moving_mean", mm.dtype()),
        ("moving_var", mv.dtype()),
    ] {
        crate::common::require_same_dtype(BN, arg, d, dtype, "data")?;
    }
    let batch_stats = ctx.is_train && !p.use_global_stats;
    if x.is_empty() {
        if batch_stats {
            // No statistics to take: the moving ones would become NaN.
            return Err(shape_error(
                BN,
                "data",
                "a non-empty batch in training",
                x.shape(),
            ));
        }
        return Ok(());
    }
    dispatch_float!(dtype, T => {
        let (xs, g, b) = (x.as_slice::<T>()?, gamma.as_slice::<T>()?, beta.as_slice::<T>()?);
        let m = ch.per_channel() as f64;
        let mut mean = vec![0.0f64; ch.c];
        let mut var = vec![0.0f64; ch.c];
        if batch_stats {
            for c in 0..ch.c {
                let mut s = 0.0;
                ch.each(c, |i| s += xs[i].to_f64());
                mean[c] = s / m;
                let mut q = 0.0;
                ch.each(c, |i| q += (xs[i].to_f64() - mean[c]).powi(2));
                var[c] = q / m;
            }
        } else {
            mean = mm.as_slice_mut::<T>()?.iter().map(|v| v.to_f64()).collect();
            var = mv.as_slice_mut::<T>()?.iter().map(|v| v.to_f64()).collect();
        }
        let inv: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
        let from = <<T as Float>::Compute as Element>::from_f64;
        let (head, stats) = outs.split_at_mut(1);
        // y = x·a + b per channel, in f64: a = γ/√(var + ε), b = β − a·mean.
        let affine: Vec<(f64, f64)> = (0..ch.c)
            .map(|c| {
                let a = if p.fix_gamma { 1.0 } else { g[c].to_f64() } * inv[c];
                (a, b[c].to_f64() - a * mean[c])
            })
            .collect();
        normalize(ch, xs, head[0].as_slice_mut::<T>()?, &affine, reqs[0]);
        for (k, vals) in [(0usize, &mean), (1, &inv)] {
            if reqs[k + 1] == OpReqType::Null {
                continue;
            }
            let out = stats[k].as_slice_mut::<T>()?;
            for (o, &v) in out.iter_mut().zip(vals.iter()) {
                reqs[k + 1].assign(o, from(v));
            }
        }
        if batch_stats && ctx.is_train {
            for (a, stat) in [(&mut *mm, &mean), (&mut *mv, &var)] {
                for (o, &s) in a.as_slice_mut::<T>()?.iter_mut().zip(stat.iter()) {
                    *o = T::from_f64(o.to_f64() * momentum + s * (1.0 - momentum));
                }
            }
        }
        Ok(())
    }, _ => Err(float_error(BN, "data", dtype)))
}

fn bn_backward(
    dys: &[Option<TBlob<'_>>],
    ys: &[TBlob<'_>],
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    p: &BatchNormParams,
    global_stats: bool,
) -> Result<()> {
    let [x, gamma, _beta] = inputs else {
        return Err(simpleop::Error::Arity {
            op: BN.into(),
            expected: 3,
            got: inputs.len(),
        });
    };
    let [_, mean, inv] = ys else {
        return Err(simpleop::Error::invalid(
            BN,
            "outputs",
            "expected output, mean and var",
        ));
    };
    let ch = Channels::of(x.shape(), p)?;
    let dtype = x.dtype();
    check_channels(
        &["gamma", "mean", "var"],
        &[gamma.shape(), mean.shape(), inv.shape()],
        ch.c,
    )?;
    for (k, (arg, g)) in ["data_grad", "gamma_grad", "beta_grad"]
        .iter()
        .zip(grads.iter())
        .enumerate()
    {
        let like = if k == 0 { x.shape() } else { gamma.shape() };
        if reqs[k] != OpReqType::Null && g.shape() != like {
            return Err(shape_error(BN, arg, like.to_string(), g.shape()));
        }
    }
    if let Some(dy) = &dys[0]
        && dy.shape() != x.shape()
    {
        return Err(shape_error(
            BN,
            "out_grad",
            x.shape().to_string(),
            dy.shape(),
        ));
    }
    if x.is_empty() {
        for (g, r) in grads.iter_mut().zip(reqs) {
            crate::common::zero_grad(g, *r)?;
        }
        return Ok(());
    }
    dispatch_float!(dtype, T => {
        let (xs, g) = (x.as_slice::<T>()?, gamma.as_slice::<T>()?);
        let (mean, inv) = (mean.as_slice::<T>()?, inv.as_slice::<T>()?);
        let zeros;
        let dy: &[T] = match &dys[0] {
            Some(d) => d.as_slice::<T>()?,
            None => {
                zeros = vec![T::from_f64(0.0); x.len()];
                &zeros
            }
        };
        let m = ch.per_channel() as f64;
        let from = <<T as Float>::Compute as Element>::from_f64;
        let mut dgamma = vec![0.0f64; ch.c];
        let mut dbeta = vec![0.0f64; ch.c];
        for c in 0..ch.c {
            let (mu, r) = (mean[c].to_f64(), inv[c].to_f64());
            ch.each(c, |i| {
                let d = dy[i].to_f64();
                dbeta[c] += d;
                dgamma[c] += d * (xs[i].to_f64() - mu) * r;
            });
        }
        if reqs[0] != OpReqType::Null {
            let dx = grads[0].as_slice_mut::<T>()?;
            for c in 0..ch.c {
                let (mu, r) = (mean[c].to_f64(), inv[c].to_f64());
                let scale = if p.fix_gamma { 1.0 } else { g[c].to_f64() };
                let (mb, mg) = (dbeta[c] / m, dgamma[c] / m);
                ch.each(c, |i| {
                    let d = dy[i].to_f64();
                    let v = if global_stats {
                        d * scale * r
                    } else {
                        scale * r * (d - mb - (xs[i].to_f64() - mu) * r * mg)
                    };
                    reqs[0].assign(&mut dx[i], from(v));
                });
            }
        }
        if p.fix_gamma {
            dgamma.fill(0.0);
        }
        for (k, acc) in [(1usize, &dgamma), (2, &dbeta)] {
            if reqs[k] != OpReqType::Null {
                for (o, &v) in grads[k].as_slice_mut::<T>()?.iter_mut().zip(acc.iter()) {
                    reqs[k].assign(o, from(v));
                }
            }
        }
        Ok(())
    }, _ => Err(float_error(BN, "data", dtype)))
}
