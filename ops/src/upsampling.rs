//! [`up_sampling()`] (`UpSampling`) with `sample_type = nearest`: repeats
//! each element of `(N, C, H, W)` data in a `scale × scale` block.
//!
//! Matches MXNet 1.9.1 (`src/operator/nn/upsampling-inl.h`): the op takes
//! `num_args` inputs `arg0, arg1, ...`; the output is `scale` times the
//! first input's height and width, and every other input is scaled by the
//! factor that brings it to that size. With `multi_input_mode = concat`
//! (default) the upsampled inputs are joined along the channels; with `sum`
//! they are added (they must have as many channels). The gradient of each
//! input sums the output gradient over each block.
//!
//! Differences from MXNet: `bilinear` (a deconvolution with a `weight`
//! input) is refused, naming `sample_type`; an input whose height and width
//! need different factors is refused (MXNet scales both by the height's),
//! and so is one with another batch size or an empty height or width
//! (MXNet divides by it). `num_filter` and `workspace` are accepted and
//! ignored. Computed in f64 for every float dtype.

use serde::{Deserialize, Serialize};
use simpleop::{Element, Float, OpReqType, Result, Shape, TBlob, TBlobMut, simple_op};

use crate::common::{bad_kwarg, float_error, shape_error};

const UP: &str = "UpSampling";

/// Keyword arguments of [`up_sampling()`] (MXNet's `UpSamplingParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct UpSamplingParams {
    /// The factor of the first input's height and width (at least 1).
    pub scale: i64,
    /// Accepted and ignored (bilinear only).
    pub num_filter: i64,
    /// `nearest`; `bilinear` is refused.
    pub sample_type: String,
    /// The number of inputs (default 1).
    pub num_args: usize,
    /// `concat` (default) or `sum`: how several inputs combine.
    pub multi_input_mode: String,
    /// Accepted and ignored (bilinear's deconvolution workspace).
    pub workspace: i64,
}

impl Default for UpSamplingParams {
    fn default() -> Self {
        UpSamplingParams {
            scale: 1,
            num_filter: 0,
            sample_type: String::new(),
            num_args: 1,
            multi_input_mode: "concat".into(),
            workspace: 512,
        }
    }
}

/// `arg0, arg1, ...` (bilinear's `data, weight` too, so that its refusal
/// names `sample_type` rather than the inputs).
fn up_arguments(p: &UpSamplingParams) -> Vec<String> {
    crate::join::numbered(p.num_args)
}

/// Where each input goes: its factor and first output channel.
#[derive(Debug)]
struct Layout {
    n: usize,
    out_c: usize,
    out_hw: [usize; 2],
    /// Per input: (channels, height, width, factor, first output channel).
    parts: Vec<(usize, usize, usize, usize, usize)>,
    sum: bool,
}

fn check_kwargs(p: &UpSamplingParams) -> Result<bool> {
    match p.sample_type.as_str() {
        "nearest" => {}
        "bilinear" => {
            return Err(bad_kwarg(
                UP,
                "sample_type",
                "`bilinear` (a deconvolution with a weight input) is not supported; use `nearest`",
            ));
        }
        t => {
            return Err(bad_kwarg(
                UP,
                "sample_type",
                format!("expected `nearest`, got `{t}`"),
            ));
        }
    }
    if !(1..i64::from(i32::MAX)).contains(&p.scale) {
        return Err(bad_kwarg(
            UP,
            "scale",
            format!("expected 1..2^31, got {}", p.scale),
        ));
    }
    crate::join::some_args(UP, p.num_args)?;
    match p.multi_input_mode.as_str() {
        "concat" => Ok(false),
        "sum" => Ok(true),
        m => Err(bad_kwarg(
            UP,
            "multi_input_mode",
            format!("expected concat or sum, got `{m}`"),
        )),
    }
}

/// Input `i`'s shape, checked: 4-D with a non-empty height and width.
fn four_d(i: usize, sh: &Shape) -> Result<[usize; 4]> {
    match *sh.dims() {
        [n, c, h, w] if h > 0 && w > 0 => Ok([n, c, h, w]),
        _ => Err(shape_error(
            UP,
            &format!("arg{i}"),
            "4-D (N, C, H, W) with H, W > 0",
            sh,
        )),
    }
}

/// The output's height and width: `scale` times the first input's.
fn output_hw(first: [usize; 4], s: usize, sh: &Shape) -> Result<[usize; 2]> {
    let big = |v: usize| v.checked_mul(s).filter(|&o| o < i32::MAX as usize);
    match (big(first[2]), big(first[3])) {
        (Some(h), Some(w)) => Ok([h, w]),
        _ => Err(bad_kwarg(
            UP,
            "scale",
            format!("scale {s} makes {sh} too large"),
        )),
    }
}

/// Input `i`'s factor, checked against the first input and the output.
fn factor(
    i: usize,
    (d, sh): ([usize; 4], &Shape),
    d0: [usize; 4],
    hw: [usize; 2],
    sum: bool,
) -> Result<usize> {
    let f = hw[0] / d[2];
    let channels_ok = !sum || d[1] == d0[1];
    if d[0] == d0[0] && f * d[2] == hw[0] && f * d[3] == hw[1] && channels_ok {
        return Ok(f);
    }
    let same_c = if sum {
        format!(", and {} channels (multi_input_mode sum)", d0[1])
    } else {
        String::new()
    };
    let want = format!(
        "batch {} and an integer factor f with f·H = {} and f·W = {}{same_c}",
        d0[0], hw[0], hw[1]
    );
    Err(shape_error(UP, &format!("arg{i}"), want, sh))
}

fn layout(shapes: &[&Shape], p: &UpSamplingParams) -> Result<Layout> {
    let sum = check_kwargs(p)?;
    if shapes.len() != p.num_args {
        let why = format!("expected {} inputs, got {}", p.num_args, shapes.len());
        return Err(bad_kwarg(UP, "num_args", why));
    }
    let d0 = four_d(0, shapes[0])?;
    let out_hw = output_hw(d0, p.scale as usize, shapes[0])?;
    let (mut parts, mut out_c) = (Vec::new(), 0usize);
    for (i, sh) in shapes.iter().enumerate() {
        let d = four_d(i, sh)?;
        let f = factor(i, (d, sh), d0, out_hw, sum)?;
        parts.push((d[1], d[2], d[3], f, if sum { 0 } else { out_c }));
        let joined = out_c.checked_add(d[1]);
        out_c = if sum {
            d[1]
        } else {
            joined.ok_or_else(|| shape_error(UP, &format!("arg{i}"), "fewer channels", sh))?
        };
    }
    let total = [d0[0], out_c, out_hw[0], out_hw[1]]
        .iter()
        .try_fold(1usize, |t, &v| t.checked_mul(v));
    if total.is_none() {
        return Err(bad_kwarg(
            UP,
            "scale",
            "the output would have 2^64 elements or more",
        ));
    }
    Ok(Layout {
        n: d0[0],
        out_c,
        out_hw,
        parts,
        sum,
    })
}

fn out_shape(l: &Layout) -> Shape {
    Shape::new(vec![l.n, l.out_c, l.out_hw[0], l.out_hw[1]])
}

fn up_forward(
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &UpSamplingParams,
) -> Result<()> {
    let shapes: Vec<&Shape> = inputs.iter().map(|b| b.shape()).collect();
    let l = layout(&shapes, p)?;
    let dtype = inputs[0].dtype();
    for (i, b) in inputs.iter().enumerate() {
        crate::common::require_same_dtype(UP, &format!("arg{i}"), b.dtype(), dtype, "arg0")?;
    }
    crate::common::check_blob(
        UP,
        "output",
        crate::common::meta_mut(out),
        &out_shape(&l),
        dtype,
    )?;
    if req == OpReqType::Null || out.is_empty() {
        return Ok(());
    }
    let [oh, ow] = l.out_hw;
    simpleop::dispatch_float!(dtype, T => {
        let xs: Vec<&[T]> = inputs.iter().map(|b| b.as_slice::<T>()).collect::<Result<_>>()?;
        let mut planes: Vec<&mut [T]> = out.as_slice_mut::<T>()?.chunks_mut(oh * ow).collect();
        simpleop::kernel::par_chunks_mut(&mut planes, oh * ow * inputs.len(), |start, planes| {
            let mut acc = vec![0.0; oh * ow];
            for (j, ys) in planes.iter_mut().enumerate() {
                let (n, c) = ((start + j) / l.out_c, (start + j) % l.out_c);
                acc.fill(0.0);
                for (x, &(ci, h, w, f, c0)) in xs.iter().zip(&l.parts) {
                    if l.sum || (c0..c0 + ci).contains(&c) {
                        let base = (n * ci + c - c0) * h * w;
                        for (y, row) in acc.chunks_mut(ow).enumerate() {
                            let src = &x[base + (y / f) * w..base + (y / f + 1) * w];
                            row.iter_mut().enumerate().for_each(|(xo, a)| *a += src[xo / f].to_f64());
                        }
                    }
                }
                for (y, a) in ys.iter_mut().zip(&acc) {
                    req.assign(y, <<T as Float>::Compute as Element>::from_f64(*a));
                }
            }
        });
        Ok(())
    }, _ => Err(float_error(UP, "arg0", dtype)))
}

/// One input's gradient: each element sums its `f × f` block of `dy`.
fn up_grad<T: Float>(dys: &[T], l: &Layout, part: usize, g: &mut [T], req: OpReqType) {
    let (ci, h, w, f, c0) = l.parts[part];
    let [oh, ow] = l.out_hw;
    let mut planes: Vec<&mut [T]> = g.chunks_mut(h * w).collect();
    simpleop::kernel::par_chunks_mut(&mut planes, oh * ow, |start, planes| {
        for (j, gp) in planes.iter_mut().enumerate() {
            let (n, c) = ((start + j) / ci, (start + j) % ci);
            let dyp = &dys[(n * l.out_c + c0 + c) * oh * ow..][..oh * ow];
            for (i, gv) in gp.iter_mut().enumerate() {
                let (y, x) = (i / w, i % w);
                let mut s = 0.0;
                for row in dyp.chunks(ow).skip(y * f).take(f) {
                    s += row[x * f..(x + 1) * f]
                        .iter()
                        .map(|v| v.to_f64())
                        .sum::<f64>();
                }
                req.assign(gv, <<T as Float>::Compute as Element>::from_f64(s));
            }
        }
    });
}

fn up_backward(
    dy: &TBlob<'_>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    p: &UpSamplingParams,
) -> Result<()> {
    let shapes: Vec<&Shape> = grads.iter().map(|b| b.shape()).collect();
    let l = layout(&shapes, p)?;
    let dtype = dy.dtype();
    crate::common::check_blob(
        UP,
        "out_grad",
        crate::common::meta(dy),
        &out_shape(&l),
        dtype,
    )?;
    simpleop::dispatch_float!(dtype, T => {
        let dys = dy.as_slice::<T>()?;
        for (i, (g, &req)) in grads.iter_mut().zip(reqs).enumerate() {
            if req == OpReqType::Null || g.is_empty() {
                continue;
            }
            crate::common::require_same_dtype(UP, &format!("arg{i}_grad"), g.dtype(), dtype, "out_grad")?;
            up_grad(dys, &l, i, g.as_slice_mut::<T>()?, req);
        }
        Ok(())
    }, _ => Err(float_error(UP, "out_grad", dtype)))
}

/// MXNet's `UpSampling` with `sample_type = nearest`: repeats each element
/// in a `scale × scale` block; several inputs are scaled to the first's
/// output size and concatenated along the channels or summed. Gradients
/// for every input.
#[simple_op(blob, name = "UpSampling", kwargs = UpSamplingParams, arguments = super::up_arguments, linear)]
pub mod up_sampling {
    use super::UpSamplingParams;
    use simpleop::prelude::*;

    /// `(N, C, scale·H, scale·W)`, `C` the channels joined or shared.
    pub fn shape(inputs: &[Shape], p: &UpSamplingParams) -> Result<Shape> {
        let shapes: Vec<&Shape> = inputs.iter().collect();
        Ok(super::out_shape(&super::layout(&shapes, p)?))
    }

    /// Repeats each input element over its block.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &UpSamplingParams,
    ) -> Result<()> {
        super::up_forward(inputs, out, req, p)
    }

    /// Sums the output gradient over each block.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &UpSamplingParams,
    ) -> Result<()> {
        super::up_backward(&dy, grads, reqs, p)
    }
}
