//! [`pad()`] (`Pad`): pads the spatial axes of 4-D `(N, C, H, W)` and 5-D
//! `(N, C, D, H, W)` data with a constant, the edge values, or a
//! reflection.
//!
//! Matches MXNet 1.9.1 (`src/operator/pad.cc`): `pad_width` is numpy's
//! `pad_width` flattened, `(before_0, after_0, ..., before_n, after_n)`, two
//! entries per axis, and the first four (batch and channel) must be 0.
//! `reflect` mirrors without repeating the edge (numpy's `reflect`) and
//! needs every pad smaller than its axis. The gradient is the output
//! gradient's centre for `constant`, and for `edge` and `reflect` also sums
//! each padded element's gradient into the element it copies.
//!
//! Differences from MXNet: `reflect` checks every padded axis (MXNet 1.9.1
//! checks only the first two spatial axes, and reads out of bounds on the
//! third of 5-D data), and `edge` padding of an empty axis is refused
//! (there is no edge to copy). Computed in f64 for every float dtype;
//! `constant_value` is rounded to the data's dtype, as MXNet does.

use serde::{Deserialize, Serialize};
use simpleop::{Element, Float, OpReqType, Result, Shape, TBlob, TBlobMut, simple_op};

use crate::common::{bad_kwarg, float_error, shape_error};

const PAD: &str = "Pad";

/// Keyword arguments of [`pad()`] (MXNet's `PadParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct PadParams {
    /// `constant` (default), `edge` or `reflect`.
    pub mode: String,
    /// `(before, after)` per axis, flattened; the first four are 0.
    pub pad_width: Vec<i64>,
    /// The value `constant` pads with (default 0).
    pub constant_value: f64,
}

impl Default for PadParams {
    fn default() -> Self {
        PadParams {
            mode: "constant".into(),
            pad_width: Vec::new(),
            constant_value: 0.0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Constant,
    Edge,
    Reflect,
}

/// One call's padding of each (N, C) plane, a 3-D volume (4-D data gets
/// a leading axis of 1): per output index of each axis the input index it
/// copies (`None`: the constant).
#[derive(Debug)]
struct Plan {
    inp: [usize; 3],
    out: [usize; 3],
    src: [Vec<Option<usize>>; 3],
}

fn mode_of(p: &PadParams) -> Result<Mode> {
    match p.mode.as_str() {
        "constant" => Ok(Mode::Constant),
        "edge" => Ok(Mode::Edge),
        "reflect" => Ok(Mode::Reflect),
        m => Err(bad_kwarg(
            PAD,
            "mode",
            format!("expected constant, edge or reflect, got `{m}`"),
        )),
    }
}

/// The checked `(before, after)` pairs of `data`'s axes.
fn widths(data: &Shape, p: &PadParams) -> Result<Vec<(usize, usize)>> {
    let nd = data.ndim();
    if !(4..=5).contains(&nd) {
        return Err(shape_error(
            PAD,
            "data",
            "4-D (N, C, H, W) or 5-D (N, C, D, H, W)",
            data,
        ));
    }
    let pw = &p.pad_width;
    if pw.len() != 2 * nd {
        let why = format!(
            "expected {} entries (before and after for each of the {nd} axes of `data`), got {pw:?}",
            2 * nd
        );
        return Err(bad_kwarg(PAD, "pad_width", why));
    }
    if pw[..4].iter().any(|&v| v != 0) {
        return Err(bad_kwarg(
            PAD,
            "pad_width",
            format!(
                "expected 0 for the batch and channel axes (the first four entries), got {pw:?}"
            ),
        ));
    }
    if pw.iter().any(|&v| !(0..i64::from(i32::MAX)).contains(&v)) {
        return Err(bad_kwarg(
            PAD,
            "pad_width",
            format!("expected entries in 0..2^31, got {pw:?}"),
        ));
    }
    Ok(pw
        .chunks(2)
        .map(|c| (c[0] as usize, c[1] as usize))
        .collect())
}

/// The input index output index `j` of an axis of `len` copies.
fn source(mode: Mode, j: usize, before: usize, len: usize) -> Option<usize> {
    let i = j as i64 - before as i64;
    let n = len as i64;
    if (0..n).contains(&i) {
        return Some(i as usize);
    }
    match mode {
        Mode::Constant => None,
        Mode::Edge => Some(i.clamp(0, n - 1) as usize),
        Mode::Reflect => Some(if i < 0 { -i } else { 2 * (n - 1) - i } as usize),
    }
}

fn plan(data: &Shape, p: &PadParams) -> Result<Plan> {
    let mode = mode_of(p)?;
    let w = widths(data, p)?;
    let dims = data.dims();
    let mut out_dims = Vec::with_capacity(dims.len());
    for (a, (&d, &(b, e))) in dims.iter().zip(&w).enumerate() {
        if mode == Mode::Reflect && (b >= d || e >= d) && b + e > 0 {
            return Err(bad_kwarg(
                PAD,
                "pad_width",
                format!(
                    "reflect padding needs pads smaller than the axis: axis {a} has size {d}, pads ({b}, {e})"
                ),
            ));
        }
        if mode == Mode::Edge && d == 0 && b + e > 0 {
            return Err(shape_error(
                PAD,
                "data",
                format!("a non-empty axis {a} for edge padding"),
                data,
            ));
        }
        out_dims.push(d + b + e);
    }
    if out_dims
        .iter()
        .try_fold(1usize, |t, &o| t.checked_mul(o))
        .is_none()
    {
        return Err(bad_kwarg(
            PAD,
            "pad_width",
            "the padded output would have 2^64 elements or more",
        ));
    }
    let k = dims.len() - 2;
    let mut pl = Plan {
        inp: [1; 3],
        out: [1; 3],
        src: [vec![Some(0)], vec![Some(0)], vec![Some(0)]],
    };
    for a in 0..k {
        let at = 3 - k + a;
        let (d, (b, _)) = (dims[a + 2], w[a + 2]);
        (pl.inp[at], pl.out[at]) = (d, out_dims[a + 2]);
        pl.src[at] = (0..out_dims[a + 2])
            .map(|j| source(mode, j, b, d))
            .collect();
    }
    Ok(pl)
}

fn padded_shape(data: &Shape, p: &PadParams) -> Result<Shape> {
    plan(data, p)?;
    let w = widths(data, p)?;
    Ok(Shape::new(
        data.dims()
            .iter()
            .zip(&w)
            .map(|(&d, &(b, e))| d + b + e)
            .collect::<Vec<_>>(),
    ))
}

/// Calls `f(out_index, in_index)` for each element of a plane's output,
/// in order; `in_index` is `None` for the constant.
#[inline]
fn each(pl: &Plan, mut f: impl FnMut(usize, Option<usize>)) {
    let mut o = 0;
    for sd in &pl.src[0] {
        for sh in &pl.src[1] {
            let row = sd.zip(*sh).map(|(d, h)| (d * pl.inp[1] + h) * pl.inp[2]);
            for sw in &pl.src[2] {
                f(o, row.zip(*sw).map(|(r, w)| r + w));
                o += 1;
            }
        }
    }
}

fn pad_forward(x: &TBlob<'_>, out: &mut TBlobMut<'_>, req: OpReqType, p: &PadParams) -> Result<()> {
    let pl = plan(x.shape(), p)?;
    let (dtype, oshape) = (x.dtype(), padded_shape(x.shape(), p)?);
    crate::common::check_blob(PAD, "output", crate::common::meta_mut(out), &oshape, dtype)?;
    if req == OpReqType::Null || out.is_empty() {
        return Ok(());
    }
    let (ilen, olen) = (
        pl.inp.iter().product::<usize>(),
        pl.out.iter().product::<usize>(),
    );
    simpleop::dispatch_float!(dtype, T => {
        let xs = x.as_slice::<T>()?;
        let c = T::from_f64(p.constant_value).to_f64();
        let mut planes: Vec<&mut [T]> = out.as_slice_mut::<T>()?.chunks_mut(olen).collect();
        simpleop::kernel::par_chunks_mut(&mut planes, olen, |start, planes| {
            for (j, ys) in planes.iter_mut().enumerate() {
                let xp = &xs[(start + j) * ilen..(start + j + 1) * ilen];
                each(&pl, |o, i| {
                    let v = i.map_or(c, |i| xp[i].to_f64());
                    req.assign(&mut ys[o], <<T as Float>::Compute as Element>::from_f64(v));
                });
            }
        });
        Ok(())
    }, _ => Err(float_error(PAD, "data", dtype)))
}

fn pad_backward(
    dy: &TBlob<'_>,
    x: &TBlob<'_>,
    dx: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &PadParams,
) -> Result<()> {
    let pl = plan(x.shape(), p)?;
    let (dtype, oshape) = (x.dtype(), padded_shape(x.shape(), p)?);
    crate::common::check_blob(PAD, "out_grad", crate::common::meta(dy), &oshape, dtype)?;
    crate::common::check_blob(
        PAD,
        "data_grad",
        crate::common::meta_mut(dx),
        x.shape(),
        dtype,
    )?;
    if req == OpReqType::Null || dx.is_empty() {
        return Ok(());
    }
    let (ilen, olen) = (
        pl.inp.iter().product::<usize>(),
        pl.out.iter().product::<usize>(),
    );
    simpleop::dispatch_float!(dtype, T => {
        let dys = dy.as_slice::<T>()?;
        let mut planes: Vec<&mut [T]> = dx.as_slice_mut::<T>()?.chunks_mut(ilen).collect();
        simpleop::kernel::par_chunks_mut(&mut planes, olen.max(ilen), |start, planes| {
            let mut acc = vec![0.0; ilen];
            for (j, dxp) in planes.iter_mut().enumerate() {
                let dyp = &dys[(start + j) * olen..(start + j + 1) * olen];
                acc.fill(0.0);
                each(&pl, |o, i| {
                    if let Some(i) = i {
                        acc[i] += dyp[o].to_f64();
                    }
                });
                for (g, a) in dxp.iter_mut().zip(&acc) {
                    req.assign(g, <<T as Float>::Compute as Element>::from_f64(*a));
                }
            }
        });
        Ok(())
    }, _ => Err(float_error(PAD, "data", dtype)))
}

/// MXNet's `Pad` (`pad`): pads the spatial axes of 4-D or 5-D data by
/// `pad_width` with `constant_value`, the edge, or a reflection. The
/// gradient is for `data`.
#[simple_op(blob, name = "Pad", alias = "pad", kwargs = PadParams)]
pub mod pad {
    use super::PadParams;
    use simpleop::prelude::*;

    /// Each axis grows by its two pads; checks every kwarg.
    pub fn shape(inputs: &[Shape], p: &PadParams) -> Result<Shape> {
        super::padded_shape(&inputs[0], p)
    }

    /// Copies the data into the padded output.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &PadParams,
    ) -> Result<()> {
        super::pad_forward(&inputs[0], out, req, p)
    }

    /// Sums each output gradient into the element it copies.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &PadParams,
    ) -> Result<()> {
        super::pad_backward(&dy, &x[0], &mut grads[0], reqs[0], p)
    }
}
