//! MXNet's [`convolution()`] (`Convolution`) and [`deconvolution()`]
//! (`Deconvolution`) over 1-D, 2-D and 3-D channel-first data, with
//! channel groups (depthwise included), strides, dilations, padding and
//! an optional bias, and the gradients of data, weight and bias.
//!
//! - Output size per axis: `(in + 2·pad − reach) / stride + 1`, with the
//!   dilated kernel's `reach = dilate·(kernel − 1) + 1`. A deconvolution
//!   gives `(in − 1)·stride − 2·pad + reach + adj`; with `target_shape`
//!   it gives that shape, `pad` and `adj` derived as MXNet does (the
//!   overhang `(in − 1)·stride + reach − target` split evenly, an odd
//!   unit going to `adj`).
//! - A deconvolution is the adjoint of a convolution, and runs as one:
//!   its forward pass is the convolution's data gradient, its data
//!   gradient the convolution's forward pass. Its weight `(C, num_filter /
//!   num_group, kernel…)` is that convolution's weight.
//! - Algorithms: matrix products (`crate::linalg`'s kernels) over column
//!   tiles (the `gemm` submodule's docs), and a direct kernel for depthwise
//!   convolutions, whose products would be too thin.
//! - f32 and f64 compute in their own type; f16 and bf16 are widened to
//!   f32, computed, and rounded once. Products accumulate in the compute
//!   type, so f32 results may differ from MXNet's in the last bits.
//! - Refused: channel-last layouts, sizes of 2³¹ or more (as MXNet).
//!   Accepted and ignored: `workspace`, `cudnn_tune`, `cudnn_off`.

mod depthwise;
mod gemm;
mod geom;
mod im2col;

use std::borrow::Cow;

pub use geom::{ConvolutionParams, DeconvolutionParams};
use geom::{Geom, check_bias, check_weight};
use simpleop::{
    DType, Element, EnvArguments, Float, OpReqType, Result, Shape, TBlob, TBlobMut, simple_op,
};

use crate::common::{float_error, require_same_dtype, shape_error, store};

const CONV: &str = "Convolution";
const DECONV: &str = "Deconvolution";

/// Which way an op runs the geometry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Conv,
    Deconv,
}

impl Dir {
    fn op(self) -> &'static str {
        match self {
            Dir::Conv => CONV,
            Dir::Deconv => DECONV,
        }
    }
    /// The op's output channels and the elements per output channel.
    fn out_planes(self, g: &Geom) -> (usize, usize) {
        match self {
            Dir::Conv => (g.cout, g.out_vol()),
            Dir::Deconv => (g.cin, g.in_vol()),
        }
    }
    /// The op's input and output shapes.
    fn shapes(self, g: &Geom) -> (Shape, Shape) {
        match self {
            Dir::Conv => (g.x_shape(), g.y_shape()),
            Dir::Deconv => (g.y_shape(), g.x_shape()),
        }
    }
}

/// The convolution's forward pass, `y += conv(x, w)`.
fn conv_forward<C: Float>(g: &Geom, x: &[C], w: &[C], y: &mut [C], ctx: Ctx<'_>) -> Result<()> {
    if g.is_depthwise() {
        depthwise::forward(g, (x, w, y));
        return Ok(());
    }
    gemm::forward(g, (x, w, y), ctx)
}

/// The convolution's data gradient, `dx += convᵀ(dy, w)`.
fn conv_data<C: Float>(g: &Geom, dy: &[C], w: &[C], dx: &mut [C], ctx: Ctx<'_>) -> Result<()> {
    if g.is_depthwise() {
        depthwise::backward_data(g, (dy, w, dx));
        return Ok(());
    }
    gemm::backward_data(g, (dy, w, dx), ctx)
}

/// The convolution's weight gradient, `dw += ∂/∂w`.
fn conv_weight<C: Float>(g: &Geom, x: &[C], dy: &[C], dw: &mut [C], ctx: Ctx<'_>) -> Result<()> {
    if g.is_depthwise() {
        depthwise::backward_weight(g, (x, dy, dw));
        return Ok(());
    }
    gemm::backward_weight(g, (x, dy, dw), ctx)
}

type Ctx<'a> = (&'a str, &'a EnvArguments);

/// A float blob in the compute type `C`: itself, or widened into
/// temporary space (f16, bf16).
fn compute_view<'a, C: Float>(b: &'a TBlob<'_>, arg: &str, ctx: Ctx<'_>) -> Result<Cow<'a, [C]>> {
    if b.dtype() == C::DTYPE {
        return Ok(Cow::Borrowed(b.as_slice::<C>()?));
    }
    let dtype = b.dtype();
    simpleop::dispatch_float!(dtype, T => {
        let src = b.as_slice::<T>()?;
        let mut v = ctx.1.temp_space::<C>(ctx.0, src.len())?;
        for (d, &s) in v.iter_mut().zip(src) {
            *d = C::from_f64(s.to_f64());
        }
        Ok(Cow::Owned(v))
    }, _ => Err(float_error(ctx.0, arg, dtype)))
}

/// Runs `f` on `out` in the compute type `C` after the request's
/// preparation (zeroed unless `add`), widening and rounding back once
/// for the half types.
fn with_output<C: Float>(
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    ctx: Ctx<'_>,
    f: impl FnOnce(&mut [C]) -> Result<()>,
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    if out.dtype() == C::DTYPE {
        let dst = out.as_slice_mut::<C>()?;
        if req != OpReqType::AddTo {
            dst.fill(C::zero());
        }
        return f(dst);
    }
    let mut tmp = ctx.1.temp_space::<C>(ctx.0, out.len())?;
    f(&mut tmp)?;
    let dtype = out.dtype();
    simpleop::dispatch_float!(dtype, T => {
        for (d, v) in out.as_slice_mut::<T>()?.iter_mut().zip(tmp) {
            store(d, v.to_f64(), req);
        }
        Ok(())
    }, _ => Err(float_error(ctx.0, "output", dtype)))
}

/// Adds `bias[c]` to every element of channel `c` of `y` (`planes` of
/// `vol` elements, channels cycling).
fn add_bias<C: Float>(y: &mut [C], bias: &[C], vol: usize) {
    if vol == 0 || bias.is_empty() {
        return;
    }
    for (i, plane) in y.chunks_mut(vol).enumerate() {
        let b = bias[i % bias.len()];
        plane.iter_mut().for_each(|v| *v += b);
    }
}

/// The op's inputs, checked: data, weight and (unless `no_bias`) bias of
/// one float dtype, shaped as the geometry wants.
struct Checked<'a, 'b> {
    x: &'a TBlob<'b>,
    w: &'a TBlob<'b>,
    b: Option<&'a TBlob<'b>>,
    g: Geom,
}

fn check_inputs<'a, 'b>(
    dir: Dir,
    inputs: &'a [TBlob<'b>],
    no_bias: bool,
    geom: impl Fn(&Shape) -> Result<Geom>,
) -> Result<Checked<'a, 'b>> {
    let op = dir.op();
    let (x, w, b) = match (inputs, no_bias) {
        ([x, w], true) => (x, w, None),
        ([x, w, b], false) => (x, w, Some(b)),
        _ => return Err(geom::arity(op, no_bias, inputs.len())),
    };
    let g = geom(x.shape())?;
    check_weight(op, &g, w.shape(), dir == Dir::Deconv)?;
    if let Some(b) = b {
        check_bias(op, dir.out_planes(&g).0, b.shape())?;
    }
    crate::common::require_float(op, "data", x.dtype())?;
    require_same_dtype(op, "weight", w.dtype(), x.dtype(), "data")?;
    if let Some(b) = b {
        require_same_dtype(op, "bias", b.dtype(), x.dtype(), "data")?;
    }
    Ok(Checked { x, w, b, g })
}

fn check_out(op: &str, arg: &str, got: &Shape, want: &Shape) -> Result<()> {
    if got != want {
        return Err(shape_error(op, arg, want.to_string(), got));
    }
    Ok(())
}

/// The forward pass of either op, in the compute type `C`.
fn forward_in<C: Float>(
    dir: Dir,
    c: &Checked<'_, '_>,
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    ctx: Ctx<'_>,
) -> Result<()> {
    let x = compute_view::<C>(c.x, "data", ctx)?;
    let w = compute_view::<C>(c.w, "weight", ctx)?;
    let b = c.b.map(|b| compute_view::<C>(b, "bias", ctx)).transpose()?;
    let g = &c.g;
    with_output::<C>(out, req, ctx, |y| {
        if let Some(b) = &b {
            add_bias(y, b, dir.out_planes(g).1);
        }
        match dir {
            Dir::Conv => conv_forward(g, &x, &w, y, ctx),
            Dir::Deconv => conv_data(g, &x, &w, y, ctx),
        }
    })
}

fn forward(
    dir: Dir,
    c: &Checked<'_, '_>,
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    env: &EnvArguments,
) -> Result<()> {
    let op = dir.op();
    check_out(op, "output", out.shape(), &dir.shapes(&c.g).1)?;
    require_same_dtype(op, "output", out.dtype(), c.x.dtype(), "data")?;
    match c.x.dtype() {
        DType::F64 => forward_in::<f64>(dir, c, out, req, (op, env)),
        _ => forward_in::<f32>(dir, c, out, req, (op, env)),
    }
}

/// The gradients of either op, in the compute type `C`.
fn backward_in<C: Float>(
    dir: Dir,
    c: &Checked<'_, '_>,
    dy: &TBlob<'_>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    ctx: Ctx<'_>,
) -> Result<()> {
    let g = &c.g;
    let dy = compute_view::<C>(dy, "out_grad", ctx)?;
    let (gx, rest) = grads.split_at_mut(1);
    let (gw, gb) = rest.split_at_mut(1);
    if reqs[0] != OpReqType::Null {
        let w = compute_view::<C>(c.w, "weight", ctx)?;
        with_output::<C>(&mut gx[0], reqs[0], ctx, |dx| match dir {
            Dir::Conv => conv_data(g, &dy, &w, dx, ctx),
            Dir::Deconv => conv_forward(g, &dy, &w, dx, ctx),
        })?;
    }
    if reqs[1] != OpReqType::Null {
        let x = compute_view::<C>(c.x, "data", ctx)?;
        with_output::<C>(&mut gw[0], reqs[1], ctx, |dw| match dir {
            Dir::Conv => conv_weight(g, &x, &dy, dw, ctx),
            Dir::Deconv => conv_weight(g, &dy, &x, dw, ctx),
        })?;
    }
    if let Some(gb) = gb.first_mut() {
        let (channels, vol) = dir.out_planes(g);
        let mut sums = vec![0f64; channels];
        if vol > 0 {
            for (i, plane) in dy.chunks(vol).enumerate() {
                sums[i % channels] += plane.iter().map(|v| v.to_f64()).sum::<f64>();
            }
        }
        with_output::<C>(gb, reqs[2], ctx, |db| {
            for (d, s) in db.iter_mut().zip(sums) {
                *d += C::from_f64(s);
            }
            Ok(())
        })?;
    }
    Ok(())
}

fn backward(
    dir: Dir,
    c: &Checked<'_, '_>,
    dy: &TBlob<'_>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    env: &EnvArguments,
) -> Result<()> {
    let op = dir.op();
    let (x_shape, y_shape) = dir.shapes(&c.g);
    check_out(op, "out_grad", dy.shape(), &y_shape)?;
    require_same_dtype(op, "out_grad", dy.dtype(), c.x.dtype(), "data")?;
    let want = [
        Some(x_shape),
        Some(c.w.shape().clone()),
        c.b.map(|b| b.shape().clone()),
    ];
    let names = ["data_grad", "weight_grad", "bias_grad"];
    if grads.len() != want.iter().flatten().count() || reqs.len() < grads.len() {
        return Err(geom::arity(op, c.b.is_none(), grads.len()));
    }
    for ((gr, want), name) in grads.iter().zip(want.iter().flatten()).zip(names) {
        check_out(op, name, gr.shape(), want)?;
        require_same_dtype(op, name, gr.dtype(), c.x.dtype(), "data")?;
    }
    let mut reqs = reqs.to_vec();
    reqs.resize(3, OpReqType::Null);
    match c.x.dtype() {
        DType::F64 => backward_in::<f64>(dir, c, dy, grads, &reqs, (op, env)),
        _ => backward_in::<f32>(dir, c, dy, grads, &reqs, (op, env)),
    }
}

/// The arguments: `data`, `weight` and, unless `no_bias`, `bias`.
fn arguments(no_bias: bool) -> Vec<String> {
    let n = if no_bias { 2 } else { 3 };
    ["data", "weight", "bias"][..n]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

fn conv_arguments(p: &ConvolutionParams) -> Vec<String> {
    arguments(p.no_bias)
}

fn deconv_arguments(p: &DeconvolutionParams) -> Vec<String> {
    arguments(p.no_bias)
}

/// Fills the weight and bias shapes from the data's.
fn complete(dir: Dir, shapes: &mut [Option<Shape>], g: Result<Option<Geom>>) -> Result<()> {
    let Some(g) = g? else {
        return Ok(());
    };
    let want = [g.weight_shape(), Shape::new([dir.out_planes(&g).0])];
    for (s, w) in shapes[1..].iter_mut().zip(want) {
        s.get_or_insert(w);
    }
    Ok(())
}

/// MXNet's `Convolution`: `y = x ⋆ w + bias` over 1 to 3 spatial axes,
/// in channel groups (see the module docs). Gradients for data, weight
/// and bias.
#[simple_op(
    blob,
    name = "Convolution",
    inputs = ["data", "weight", "bias"],
    arguments = super::conv_arguments,
    kwargs = ConvolutionParams,
    pattern = "out_elemwise_fusable",
    resources(temp)
)]
pub mod convolution {
    use super::ConvolutionParams;
    use simpleop::prelude::*;

    /// `(N, num_filter, out…)`; checks every kwarg, the weight and the bias.
    pub fn shape(inputs: &[Shape], p: &ConvolutionParams) -> Result<Shape> {
        let g = super::geom::conv_geom(&inputs[0], p)?;
        super::check_weight(super::CONV, &g, &inputs[1], false)?;
        if let Some(b) = inputs.get(2) {
            super::check_bias(super::CONV, g.cout, b)?;
        }
        Ok(g.y_shape())
    }

    /// `weight` is `(num_filter, C / num_group, kernel…)`, `bias`
    /// `(num_filter,)`.
    pub fn input_shapes(shapes: &mut [Option<Shape>], p: &ConvolutionParams) -> Result<()> {
        let g = shapes[0]
            .as_ref()
            .map(|d| super::geom::conv_geom(d, p))
            .transpose();
        super::complete(super::Dir::Conv, shapes, g)
    }

    /// `y (=|+=) x ⋆ w + bias`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &ConvolutionParams,
        env: &EnvArguments,
    ) -> Result<()> {
        let c = super::check_inputs(super::Dir::Conv, inputs, p.no_bias, |s| {
            super::geom::conv_geom(s, p)
        })?;
        super::forward(super::Dir::Conv, &c, out, req, env)
    }

    /// `data_grad = dy ⋆ᵀ w`, `weight_grad = Σ_n dy ⋆ x`, `bias_grad =
    /// Σ dy` per channel.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &ConvolutionParams,
        env: &EnvArguments,
    ) -> Result<()> {
        let c = super::check_inputs(super::Dir::Conv, &x, p.no_bias, |s| {
            super::geom::conv_geom(s, p)
        })?;
        super::backward(super::Dir::Conv, &c, &dy, grads, reqs, env)
    }
}

/// MXNet's `Deconvolution` (transposed convolution): the adjoint of the
/// `Convolution` with the same kwargs, plus a bias (see the module docs).
/// Gradients for data, weight and bias.
#[simple_op(
    blob,
    name = "Deconvolution",
    inputs = ["data", "weight", "bias"],
    arguments = super::deconv_arguments,
    kwargs = DeconvolutionParams,
    pattern = "out_elemwise_fusable",
    resources(temp)
)]
pub mod deconvolution {
    use super::DeconvolutionParams;
    use simpleop::prelude::*;

    /// `(N, num_filter, out…)`; checks every kwarg, the weight and the bias.
    pub fn shape(inputs: &[Shape], p: &DeconvolutionParams) -> Result<Shape> {
        let g = super::geom::deconv_geom(&inputs[0], p)?;
        super::check_weight(super::DECONV, &g, &inputs[1], true)?;
        if let Some(b) = inputs.get(2) {
            super::check_bias(super::DECONV, g.cin, b)?;
        }
        Ok(g.x_shape())
    }

    /// `weight` is `(C, num_filter / num_group, kernel…)`, `bias`
    /// `(num_filter,)`.
    pub fn input_shapes(shapes: &mut [Option<Shape>], p: &DeconvolutionParams) -> Result<()> {
        let g = shapes[0]
            .as_ref()
            .map(|d| super::geom::deconv_geom(d, p))
            .transpose();
        super::complete(super::Dir::Deconv, shapes, g)
    }

    /// `y (=|+=) convᵀ(x, w) + bias`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &DeconvolutionParams,
        env: &EnvArguments,
    ) -> Result<()> {
        let c = super::check_inputs(super::Dir::Deconv, inputs, p.no_bias, |s| {
            super::geom::deconv_geom(s, p)
        })?;
        super::forward(super::Dir::Deconv, &c, out, req, env)
    }

    /// `data_grad = conv(dy, w)`, `weight_grad`, `bias_grad = Σ dy` per
    /// channel.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &DeconvolutionParams,
        env: &EnvArguments,
    ) -> Result<()> {
        let c = super::check_inputs(super::Dir::Deconv, &x, p.no_bias, |s| {
            super::geom::deconv_geom(s, p)
        })?;
        super::backward(super::Dir::Deconv, &c, &dy, grads, reqs, env)
    }
}
