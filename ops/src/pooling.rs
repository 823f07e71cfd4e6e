//! [`pooling()`] (`Pooling`): max, average, sum and Lp pooling over the
//! spatial axes of `(N, C, W)`, `(N, C, H, W)` or `(N, C, D, H, W)` data.
//!
//! Matches MXNet 1.9.1's CPU kernels (`src/operator/nn/pool.h`):
//!
//! - Output size per spatial axis, with `P = in + 2·pad`: `valid` is
//!   `1 + ⌊(P − kernel)/stride⌋`, `full` is `1 + ⌈(P − kernel)/stride⌉`,
//!   `same` (1-D only, `pad` must be 0) is `⌈P/stride⌉`. `global_pool`
//!   pools each whole plane to size 1 (kernel = the input, no padding).
//! - Windows start at `o·stride − pad` and are clipped to the input. Max
//!   pooling never sees the padding: its value is the largest element in
//!   the clipped window (NaN is skipped, an empty window gives the dtype's
//!   lowest finite value), and its gradient goes to the *first* element in
//!   row-major order equal to the output (one element per window on a
//!   tie; nothing for an empty window).
//! - `avg` divides by the window's size before clipping to the input
//!   (clipped to `in + pad`, so `full`'s overhanging windows count less) or,
//!   with `count_include_pad = false`, by the number of input elements in
//!   it. `sum` adds the window.
//! - `lp` with `p_value` 1, 2 or 3 is `(Σ xᵖ)^(1/p)` with MXNet's powers:
//!   `x`, `x²`, `x³` (no absolute value, so an odd `p` keeps signs) and
//!   the roots `·`, `√`, `∛`. Its gradient is MXNet's `dy·(x/y)^(p−1)`,
//!   zero where `y = 0` for `p` 2 and 3.
//!
//! Computed in f64 for every float dtype (MXNet accumulates f32 in f32, so
//! f32 results may differ in the last bits). Differences from MXNet: only
//! the channel-first layouts (`NCW`, `NCHW`, `NCDHW`) are supported, other
//! layouts are refused; dimensions of 2³¹ or more are refused (MXNet does
//! the same), and `full`'s output size is computed in integers (MXNet goes
//! through a `float`, which rounds above 2²⁴); `same` takes an all-zero
//! `pad` of any length (MXNet 1.9.1 fails unless it has 3 entries).
//! `cudnn_off` and
//! `output_size` are accepted and ignored.

use serde::{Deserialize, Serialize};
use simpleop::{DType, Element, Float, OpReqType, Result, Shape, TBlob, TBlobMut, simple_op};

use crate::common::{bad_kwarg, float_error, shape_error};

const POOL: &str = "Pooling";

/// Keyword arguments of [`pooling()`] (MXNet's `PoolingParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct PoolingParams {
    /// The window, one entry per spatial axis (ignored with `global_pool`).
    pub kernel: Vec<i64>,
    /// `max` (default), `avg`, `sum` or `lp`.
    pub pool_type: String,
    /// Pools each whole plane to one value.
    pub global_pool: bool,
    /// Accepted and ignored (cuDNN).
    pub cudnn_off: bool,
    /// `valid` (default), `full` or `same` (1-D only).
    pub pooling_convention: String,
    /// The step between windows (default 1 per axis).
    pub stride: Vec<i64>,
    /// Implicit padding on both sides of each axis (default 0).
    pub pad: Vec<i64>,
    /// The `p` of `lp` pooling: 1, 2 or 3 (required for `lp`).
    pub p_value: Option<i64>,
    /// Whether `avg` counts padding in the divisor (default true).
    pub count_include_pad: Option<bool>,
    /// `NCW`, `NCHW` or `NCDHW` (the default for the data's rank).
    pub layout: Option<String>,
    /// Accepted and ignored (MXNet uses it for adaptive pooling only).
    pub output_size: Option<Vec<i64>>,
}

impl Default for PoolingParams {
    fn default() -> Self {
        PoolingParams {
            kernel: Vec::new(),
            pool_type: "max".into(),
            global_pool: false,
            cudnn_off: false,
            pooling_convention: "valid".into(),
            stride: Vec::new(),
            pad: Vec::new(),
            p_value: None,
            count_include_pad: None,
            layout: None,
            output_size: None,
        }
    }
}

/// What a window reduces to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Max,
    Avg,
    Sum,
    Lp(u8),
}

fn kind_of(p: &PoolingParams) -> Result<Kind> {
    Ok(match p.pool_type.as_str() {
        "max" => Kind::Max,
        "avg" => Kind::Avg,
        "sum" => Kind::Sum,
        "lp" => match p.p_value {
            Some(v @ 1..=3) => Kind::Lp(v as u8),
            Some(v) => {
                return Err(bad_kwarg(
                    POOL,
                    "p_value",
                    format!("expected 1, 2 or 3 for lp pooling, got {v}"),
                ));
            }
            None => {
                return Err(bad_kwarg(
                    POOL,
                    "p_value",
                    "required for pool_type `lp` (1, 2 or 3)",
                ));
            }
        },
        t => {
            return Err(bad_kwarg(
                POOL,
                "pool_type",
                format!("expected max, avg, sum or lp, got `{t}`"),
            ));
        }
    })
}

/// The pooling of one call: `planes` (N·C) planes, each a 3-D volume
/// (1-D and 2-D data get leading axes of size 1, kernel 1).
#[derive(Clone, Copy, Debug)]
struct Geom {
    planes: usize,
    inp: [usize; 3],
    out: [usize; 3],
    kernel: [usize; 3],
    stride: [usize; 3],
    pad: [usize; 3],
    kind: Kind,
    include_pad: bool,
}

impl Geom {
    fn in_len(&self) -> usize {
        self.inp.iter().product()
    }
    fn out_len(&self) -> usize {
        self.out.iter().product()
    }
}

/// A spatial kwarg (`kernel`, `stride`, `pad`) as sizes, `default` per axis
/// when empty; each at least `min` and below 2³¹.
fn spatial(arg: &str, v: &[i64], n: usize, default: usize, min: i64) -> Result<Vec<usize>> {
    if v.is_empty() {
        return Ok(vec![default; n]);
    }
    if v.len() != n {
        return Err(bad_kwarg(
            POOL,
            arg,
            format!("expected {n} entries (one per spatial axis, as `kernel`), got {v:?}"),
        ));
    }
    v.iter()
        .map(|&x| {
            if (min..i64::from(i32::MAX)).contains(&x) {
                Ok(x as usize)
            } else {
                Err(bad_kwarg(
                    POOL,
                    arg,
                    format!("expected entries in {min}..2^31, got {v:?}"),
                ))
            }
        })
        .collect()
}

fn check_layout(p: &PoolingParams, nd: usize) -> Result<()> {
    let want = ["NCW", "NCHW", "NCDHW"][nd - 3];
    match p.layout.as_deref() {
        None => Ok(()),
        Some(l) if l == want => Ok(()),
        Some(l) => Err(bad_kwarg(
            POOL,
            "layout",
            format!(
                "expected {want} for {nd}-D data (channel-last layouts are not supported), got `{l}`"
            ),
        )),
    }
}

/// Output size of one axis under `convention`, or an error naming `kernel`.
fn out_size(
    convention: &str,
    axis: usize,
    i: usize,
    k: usize,
    s: usize,
    pd: usize,
) -> Result<usize> {
    let padded = pd.checked_mul(2).and_then(|v| v.checked_add(i));
    let padded =
        padded.ok_or_else(|| bad_kwarg(POOL, "pad", "input size plus padding overflows"))?;
    if k > padded {
        return Err(bad_kwarg(
            POOL,
            "kernel",
            format!("kernel size {k} exceeds input size {i} padded to {padded} along axis {axis}"),
        ));
    }
    Ok(match convention {
        "valid" => 1 + (padded - k) / s,
        "full" => 1 + (padded - k).div_ceil(s),
        _ => padded.div_ceil(s),
    })
}

/// Checks the kwargs against `data`'s shape and lays the pooling out.
/// Checks `data`'s rank, sizes and `layout`.
fn check_data(data: &Shape, p: &PoolingParams) -> Result<()> {
    let nd = data.ndim();
    if !(3..=5).contains(&nd) {
        let want = "3-D (N, C, W), 4-D (N, C, H, W) or 5-D (N, C, D, H, W)";
        return Err(shape_error(POOL, "data", want, data));
    }
    if data.dims().iter().any(|&d| d >= i32::MAX as usize) {
        return Err(shape_error(POOL, "data", "dimensions below 2^31", data));
    }
    check_layout(p, nd)
}

/// `pooling_convention`, checked against `data` (`same`: 1-D, no pad).
fn convention<'a>(data: &Shape, p: &'a PoolingParams) -> Result<&'a str> {
    let conv = p.pooling_convention.as_str();
    if !matches!(conv, "valid" | "full" | "same") {
        let why = format!("expected valid, full or same, got `{conv}`");
        return Err(bad_kwarg(POOL, "pooling_convention", why));
    }
    if conv == "same" && data.ndim() != 3 {
        let want = "3-D (N, C, W): pooling_convention `same` is 1-D only";
        return Err(shape_error(POOL, "data", want, data));
    }
    if conv == "same" && p.pad.iter().any(|&v| v != 0) {
        let why = format!(
            "expected no padding with pooling_convention `same`, got {:?}",
            p.pad
        );
        return Err(bad_kwarg(POOL, "pad", why));
    }
    Ok(conv)
}

/// Kernel, stride and pad per spatial axis (`sp`, the spatial sizes).
type Windows = (Vec<usize>, Vec<usize>, Vec<usize>);

fn window_kwargs(data: &Shape, p: &PoolingParams, conv: &str) -> Result<Windows> {
    let sp = &data.dims()[2..];
    let n = sp.len();
    if p.global_pool {
        return Ok((sp.to_vec(), vec![1; n], vec![0; n]));
    }
    if p.kernel.is_empty() {
        return Err(bad_kwarg(
            POOL,
            "kernel",
            "required unless global_pool is set",
        ));
    }
    if p.kernel.len() != n {
        let k = p.kernel.len();
        let want = format!("{}-D data for a kernel of {k} entries", k + 2);
        return Err(shape_error(POOL, "data", want, data));
    }
    // `same` has no padding (checked by `convention`, of any length).
    let pad = if conv == "same" {
        vec![0; n]
    } else {
        spatial("pad", &p.pad, n, 0, 0)?
    };
    let kernel = spatial("kernel", &p.kernel, n, 1, 1)?;
    Ok((kernel, spatial("stride", &p.stride, n, 1, 1)?, pad))
}

/// Checks the kwargs against `data`'s shape and lays the pooling out.
fn geom(data: &Shape, p: &PoolingParams) -> Result<Geom> {
    let kind = kind_of(p)?;
    check_data(data, p)?;
    let conv = convention(data, p)?;
    let (kernel, stride, pad) = window_kwargs(data, p, conv)?;
    let dims = data.dims();
    let (sp, n) = (&dims[2..], dims.len() - 2);
    let mut g = Geom {
        planes: dims[0] * dims[1],
        inp: [1; 3],
        out: [1; 3],
        kernel: [1; 3],
        stride: [1; 3],
        pad: [0; 3],
        kind,
        include_pad: p.count_include_pad.unwrap_or(true),
    };
    for a in 0..n {
        let at = 3 - n + a;
        (g.inp[at], g.kernel[at], g.stride[at], g.pad[at]) = (sp[a], kernel[a], stride[a], pad[a]);
        g.out[at] = match p.global_pool {
            true => 1,
            false => out_size(conv, a + 2, sp[a], kernel[a], stride[a], pad[a])?,
        };
    }
    if g.out
        .iter()
        .try_fold(g.planes, |t, &o| t.checked_mul(o))
        .is_none()
    {
        let want = "an output of fewer than 2^64 elements";
        return Err(shape_error(POOL, "data", want, data));
    }
    Ok(g)
}

fn out_shape(data: &Shape, g: &Geom) -> Shape {
    let dims = data.dims();
    let n = dims.len() - 2;
    let mut o = dims[..2].to_vec();
    o.extend_from_slice(&g.out[3 - n..]);
    Shape::new(o)
}

/// One axis of one window: the input range `lo..hi` it covers and its
/// length clipped to `in + pad` only (MXNet's `count_include_pad` size).
#[derive(Clone, Copy, Debug)]
struct Span {
    lo: usize,
    hi: usize,
    full: usize,
}

/// Each axis's spans, one per output index.
fn spans(g: &Geom) -> [Vec<Span>; 3] {
    std::array::from_fn(|a| {
        let (i, k, s, pd) = (
            g.inp[a] as i64,
            g.kernel[a] as i64,
            g.stride[a] as i64,
            g.pad[a] as i64,
        );
        (0..g.out[a] as i64)
            .map(|o| {
                let start = o * s - pd;
                let end = (start + k).min(i + pd);
                let lo = start.max(0);
                let hi = end.min(i).max(lo);
                Span {
                    lo: lo as usize,
                    hi: hi as usize,
                    full: (end - start).max(0) as usize,
                }
            })
            .collect()
    })
}

/// A window: one span per axis.
type Window = [Span; 3];

/// Calls `f(index)` for every plane index in `w`, row-major.
#[inline]
fn each(w: &Window, inp: [usize; 3], mut f: impl FnMut(usize)) {
    for d in w[0].lo..w[0].hi {
        for h in w[1].lo..w[1].hi {
            let row = (d * inp[1] + h) * inp[2];
            (row + w[2].lo..row + w[2].hi).for_each(&mut f);
        }
    }
}

/// What `avg` divides by.
fn divisor(g: &Geom, w: &Window) -> f64 {
    let n: usize = if g.include_pad {
        w.iter().map(|s| s.full).product()
    } else {
        w.iter().map(|s| s.hi - s.lo).product()
    };
    n as f64
}

/// MXNet's `a_root_p`.
fn root(p: u8, v: f64) -> f64 {
    match p {
        1 => v,
        2 => v.sqrt(),
        _ => v.cbrt(),
    }
}

/// The window's value (`lowest` is the dtype's lowest finite value).
#[inline]
fn window_value<T: Float>(g: &Geom, w: &Window, x: &[T], lowest: f64) -> f64 {
    let mut acc = 0.0;
    match g.kind {
        Kind::Max => {
            acc = lowest;
            each(w, g.inp, |i| {
                let v = x[i].to_f64();
                if v > acc {
                    acc = v;
                }
            });
        }
        Kind::Avg => {
            let n = divisor(g, w);
            each(w, g.inp, |i| acc += x[i].to_f64() / n);
        }
        Kind::Sum => each(w, g.inp, |i| acc += x[i].to_f64()),
        Kind::Lp(p) => {
            each(w, g.inp, |i| acc += x[i].to_f64().powi(i32::from(p)));
            acc = root(p, acc);
        }
    }
    acc
}

/// The window at output index `o` of a plane.
#[inline]
fn window(sp: &[Vec<Span>; 3], out: [usize; 3], o: usize) -> Window {
    let (w, dh) = (o % out[2], o / out[2]);
    [sp[0][dh / out[1]], sp[1][dh % out[1]], sp[2][w]]
}

/// The dtype's lowest finite value (MXNet's `MinValue`), max pooling's
/// start and the value of an empty window.
fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MIN,
        DType::F16 => simpleop::f16::MIN.to_f64(),
        DType::BF16 => simpleop::bf16::MIN.to_f64(),
        _ => f64::from(f32::MIN),
    }
}

fn pool_forward(
    x: &TBlob<'_>,
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &PoolingParams,
) -> Result<()> {
    let g = geom(x.shape(), p)?;
    let (dtype, oshape) = (x.dtype(), out_shape(x.shape(), &g));
    crate::common::check_blob(POOL, "output", crate::common::meta_mut(out), &oshape, dtype)?;
    if req == OpReqType::Null || out.is_empty() {
        return Ok(());
    }
    let sp = spans(&g);
    let (ilen, olen, low) = (g.in_len(), g.out_len(), lowest(dtype));
    let cost = olen.saturating_mul(g.kernel.iter().product());
    simpleop::dispatch_float!(dtype, T => {
        let xs = x.as_slice::<T>()?;
        let mut planes: Vec<&mut [T]> = out.as_slice_mut::<T>()?.chunks_mut(olen).collect();
        simpleop::kernel::par_chunks_mut(&mut planes, cost, |start, planes| {
            for (j, ys) in planes.iter_mut().enumerate() {
                let xp = &xs[(start + j) * ilen..(start + j + 1) * ilen];
                let mut ys = ys.iter_mut();
                // Windows in output order, without dividing each index.
                for sd in &sp[0] {
                    for sh in &sp[1] {
                        for (sw, y) in sp[2].iter().zip(ys.by_ref()) {
                            let v = window_value(&g, &[*sd, *sh, *sw], xp, low);
                            req.assign(y, <<T as Float>::Compute as Element>::from_f64(v));
                        }
                    }
                }
            }
        });
        Ok(())
    }, _ => Err(float_error(POOL, "data", dtype)))
}

/// Adds window `w`'s share of `dy` (its output `y`) into `acc`.
fn unpool_window<T: Float>(g: &Geom, w: &Window, x: &[T], (dy, y): (f64, f64), acc: &mut [f64]) {
    match g.kind {
        Kind::Max => {
            let mut first = None;
            each(w, g.inp, |i| {
                if first.is_none() && x[i].to_f64() == y {
                    first = Some(i);
                }
            });
            if let Some(i) = first {
                acc[i] += dy;
            }
        }
        Kind::Avg => {
            let n = divisor(g, w);
            each(w, g.inp, |i| acc[i] += dy / n);
        }
        Kind::Sum | Kind::Lp(1) => each(w, g.inp, |i| acc[i] += dy),
        Kind::Lp(p) => each(w, g.inp, |i| {
            if y != 0.0 {
                acc[i] += dy * (x[i].to_f64() / y).powi(i32::from(p) - 1);
            }
        }),
    }
}

/// Max pooling's backward on one plane: each window's gradient goes to
/// its first maximum, the element `window_value` then `unpool_window` find,
/// found in one pass instead of two (the generic route was a quarter of a
/// LeNet training step).
fn max_unpool_plane<T: Float>(
    g: &Geom,
    sp: &[Vec<Span>; 3],
    xp: &[T],
    dyp: &[T],
    acc: &mut [f64],
    lowest: f64,
) {
    let mut dys = dyp.iter();
    for sd in &sp[0] {
        for sh in &sp[1] {
            for sw in &sp[2] {
                let w = [*sd, *sh, *sw];
                let (mut best, mut at) = (lowest, None);
                each(&w, g.inp, |i| {
                    let v = xp[i].to_f64();
                    if v > best {
                        (best, at) = (v, Some(i));
                    }
                });
                // Every value at the dtype's lowest (or NaN): the first
                // equal to it, as `unpool_window` finds it.
                let at = at.or_else(|| {
                    let mut first = None;
                    each(&w, g.inp, |i| {
                        if first.is_none() && xp[i].to_f64() == lowest {
                            first = Some(i);
                        }
                    });
                    first
                });
                let dy = dys.next().map_or(0.0, |d| d.to_f64());
                if let Some(i) = at {
                    acc[i] += dy;
                }
            }
        }
    }
}

fn pool_backward(
    dy: &TBlob<'_>,
    x: &TBlob<'_>,
    dx: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &PoolingParams,
) -> Result<()> {
    let g = geom(x.shape(), p)?;
    let (dtype, oshape) = (x.dtype(), out_shape(x.shape(), &g));
    crate::common::check_blob(POOL, "out_grad", crate::common::meta(dy), &oshape, dtype)?;
    crate::common::check_blob(
        POOL,
        "data_grad",
        crate::common::meta_mut(dx),
        x.shape(),
        dtype,
    )?;
    if req == OpReqType::Null || dx.is_empty() {
        return Ok(());
    }
    let sp = spans(&g);
    let (ilen, olen, low) = (g.in_len(), g.out_len(), lowest(dtype));
    let cost = olen
        .saturating_mul(g.kernel.iter().product())
        .saturating_mul(2);
    simpleop::dispatch_float!(dtype, T => {
        let (xs, dys) = (x.as_slice::<T>()?, dy.as_slice::<T>()?);
        let mut planes: Vec<&mut [T]> = dx.as_slice_mut::<T>()?.chunks_mut(ilen).collect();
        simpleop::kernel::par_chunks_mut(&mut planes, cost, |start, planes| {
            let mut acc = vec![0.0; ilen];
            for (j, dxp) in planes.iter_mut().enumerate() {
                let pl = start + j;
                let (xp, dyp) = (&xs[pl * ilen..(pl + 1) * ilen], &dys[pl * olen..(pl + 1) * olen]);
                acc.fill(0.0);
                if g.kind == Kind::Max {
                    max_unpool_plane(&g, &sp, xp, dyp, &mut acc, low);
                }
                for (o, d) in dyp.iter().enumerate().filter(|_| g.kind != Kind::Max) {
                    let w = window(&sp, g.out, o);
                    // The output as stored, as MXNet's backward reads it.
                    let y = match g.kind {
                        Kind::Max | Kind::Lp(2 | 3) => T::from_f64(window_value(&g, &w, xp, low)).to_f64(),
                        _ => 0.0,
                    };
                    unpool_window(&g, &w, xp, (d.to_f64(), y), &mut acc);
                }
                for (o, a) in dxp.iter_mut().zip(&acc) {
                    req.assign(o, <<T as Float>::Compute as Element>::from_f64(*a));
                }
            }
        });
        Ok(())
    }, _ => Err(float_error(POOL, "data", dtype)))
}

/// MXNet's `Pooling`: max, avg, sum or lp pooling of 1-D, 2-D or 3-D
/// channel-first data (see the module docs for the exact rules). The
/// gradient is for `data`.
#[simple_op(blob, name = "Pooling", kwargs = PoolingParams)]
pub mod pooling {
    use super::PoolingParams;
    use simpleop::prelude::*;

    /// `(N, C, out...)` per `pooling_convention`; checks every kwarg.
    pub fn shape(inputs: &[Shape], p: &PoolingParams) -> Result<Shape> {
        let g = super::geom(&inputs[0], p)?;
        Ok(super::out_shape(&inputs[0], &g))
    }

    /// Pools each window.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &PoolingParams,
    ) -> Result<()> {
        super::pool_forward(&inputs[0], out, req, p)
    }

    /// Spreads each window's gradient over its input (max: to the first
    /// maximum).
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &PoolingParams,
    ) -> Result<()> {
        super::pool_backward(&dy, &x[0], &mut grads[0], reqs[0], p)
    }
}
