//! The kwargs of `Convolution` and `Deconvolution`, checked against the
//! data, and the one geometry both run on: a convolution seen from its
//! input `x (N, cin, in…)` to its output `y (N, cout, out…)` with weight
//! `(cout, cin / groups, kernel…)`. A deconvolution is the same geometry
//! read backwards (its input is the convolution's output).

use serde::{Deserialize, Serialize};
use simpleop::{Error, Result, Shape};

use crate::common::{bad_kwarg, shape_error};

/// Keyword arguments of [`super::convolution()`] (MXNet's
/// `ConvolutionParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ConvolutionParams {
    /// The window, one entry per spatial axis (1 to 3 axes). Required.
    pub kernel: Vec<i64>,
    /// The step between windows (default 1 per axis).
    pub stride: Vec<i64>,
    /// The spacing of the window's taps (default 1 per axis).
    pub dilate: Vec<i64>,
    /// Implicit zeros on both sides of each axis (default 0).
    pub pad: Vec<i64>,
    /// The number of output channels. Required.
    pub num_filter: i64,
    /// Channel groups: input and output channels split into this many
    /// independent convolutions (default 1; the channel count makes it
    /// depthwise).
    pub num_group: i64,
    /// MXNet's workspace limit in MB; accepted and ignored (simpleop bounds
    /// its own workspace).
    pub workspace: i64,
    /// Drops the `bias` input (default false).
    pub no_bias: bool,
    /// Accepted and ignored (cuDNN).
    pub cudnn_tune: Option<String>,
    /// Accepted and ignored (cuDNN).
    pub cudnn_off: bool,
    /// `NCW`, `NCHW` or `NCDHW` (the default for the data's rank).
    pub layout: Option<String>,
}

impl Default for ConvolutionParams {
    fn default() -> Self {
        ConvolutionParams {
            kernel: Vec::new(),
            stride: Vec::new(),
            dilate: Vec::new(),
            pad: Vec::new(),
            num_filter: 0,
            num_group: 1,
            workspace: 1024,
            no_bias: false,
            cudnn_tune: None,
            cudnn_off: false,
            layout: None,
        }
    }
}

/// Keyword arguments of [`super::deconvolution()`] (MXNet's
/// `DeconvolutionParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct DeconvolutionParams {
    /// The window, one entry per spatial axis (1 to 3 axes). Required.
    pub kernel: Vec<i64>,
    /// The step between the windows of the convolution this reverses.
    pub stride: Vec<i64>,
    /// The spacing of the window's taps (default 1 per axis).
    pub dilate: Vec<i64>,
    /// The padding of the convolution this reverses: removed from the
    /// output (default 0). Ignored when `target_shape` is given.
    pub pad: Vec<i64>,
    /// Extra rows at the end of each output axis, below `stride` (default
    /// 0). Ignored when `target_shape` is given.
    pub adj: Vec<i64>,
    /// The output's spatial size; `pad` and `adj` are then derived from it
    /// as MXNet does. Empty or all zeros: not given.
    pub target_shape: Vec<i64>,
    /// The number of output channels. Required.
    pub num_filter: i64,
    /// Channel groups, as in `Convolution` (default 1).
    pub num_group: i64,
    /// Accepted and ignored.
    pub workspace: i64,
    /// Drops the `bias` input (default true, as in MXNet).
    pub no_bias: bool,
    /// Accepted and ignored (cuDNN).
    pub cudnn_tune: Option<String>,
    /// Accepted and ignored (cuDNN).
    pub cudnn_off: bool,
    /// `NCW`, `NCHW` or `NCDHW` (the default for the data's rank).
    pub layout: Option<String>,
}

impl Default for DeconvolutionParams {
    fn default() -> Self {
        DeconvolutionParams {
            kernel: Vec::new(),
            stride: Vec::new(),
            dilate: Vec::new(),
            pad: Vec::new(),
            adj: Vec::new(),
            target_shape: Vec::new(),
            num_filter: 0,
            num_group: 1,
            workspace: 512,
            no_bias: true,
            cudnn_tune: None,
            cudnn_off: false,
            layout: None,
        }
    }
}

/// A convolution from `x (batch, cin, inp)` to `y (batch, cout, out)`
/// with weight `(cout, cin / groups, kernel)`. Spatial arrays are
/// `[D, H, W]`, leading axes 1 for 1-D and 2-D data; `ndim` is the
/// number of real ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geom {
    pub(crate) batch: usize,
    pub(crate) groups: usize,
    pub(crate) cin: usize,
    pub(crate) cout: usize,
    pub(crate) ndim: usize,
    pub(crate) inp: [usize; 3],
    pub(crate) out: [usize; 3],
    pub(crate) kernel: [usize; 3],
    pub(crate) stride: [usize; 3],
    pub(crate) pad: [usize; 3],
    pub(crate) dilate: [usize; 3],
}

impl Geom {
    pub(crate) fn cin_g(&self) -> usize {
        self.cin / self.groups
    }
    pub(crate) fn cout_g(&self) -> usize {
        self.cout / self.groups
    }
    pub(crate) fn in_vol(&self) -> usize {
        self.inp.iter().product()
    }
    pub(crate) fn out_vol(&self) -> usize {
        self.out.iter().product()
    }
    pub(crate) fn k_vol(&self) -> usize {
        self.kernel.iter().product()
    }
    /// The rows of one group's column matrix: `cin_g · k_vol`.
    pub(crate) fn k_len(&self) -> usize {
        self.cin_g() * self.k_vol()
    }
    pub(crate) fn y_len(&self) -> usize {
        self.batch * self.cout * self.out_vol()
    }
    pub(crate) fn w_len(&self) -> usize {
        self.cout * self.k_len()
    }
    /// A 1×1 window over every input element: the input is its own
    /// column matrix.
    pub(crate) fn is_pointwise(&self) -> bool {
        self.kernel == [1; 3] && self.stride == [1; 3] && self.pad == [0; 3]
    }
    /// One input channel per group: the direct kernel's case.
    pub(crate) fn is_depthwise(&self) -> bool {
        self.cin_g() == 1 && self.groups > 1
    }
    /// Multiply-adds of one forward pass.
    pub(crate) fn macs(&self) -> usize {
        self.y_len().saturating_mul(self.k_len())
    }
    /// The weight's shape.
    pub(crate) fn weight_shape(&self) -> Shape {
        let mut w = vec![self.cout, self.cin_g()];
        w.extend_from_slice(&self.kernel[3 - self.ndim..]);
        Shape::new(w)
    }
    fn spatial_shape(&self, batch_channels: [usize; 2], sizes: &[usize; 3]) -> Shape {
        let mut s = batch_channels.to_vec();
        s.extend_from_slice(&sizes[3 - self.ndim..]);
        Shape::new(s)
    }
    pub(crate) fn x_shape(&self) -> Shape {
        self.spatial_shape([self.batch, self.cin], &self.inp)
    }
    pub(crate) fn y_shape(&self) -> Shape {
        self.spatial_shape([self.batch, self.cout], &self.out)
    }
}

/// The window kwargs one op shares, by name for its messages.
pub(crate) struct Window<'a> {
    pub(crate) op: &'static str,
    pub(crate) kernel: &'a [i64],
    pub(crate) stride: &'a [i64],
    pub(crate) dilate: &'a [i64],
    pub(crate) num_filter: i64,
    pub(crate) num_group: i64,
    pub(crate) layout: Option<&'a str>,
}

/// Sizes below 2³¹ (MXNet's limit), so that products of a few of them
/// and every signed coordinate fit.
const LIMIT: i64 = i32::MAX as i64;

/// A spatial kwarg as `n` sizes in `min..2³¹`, `default` when empty.
pub(crate) fn spatial(
    op: &str,
    arg: &str,
    v: &[i64],
    n: usize,
    default: usize,
    min: i64,
) -> Result<[usize; 3]> {
    let mut out = [default; 3];
    if v.is_empty() {
        return Ok(out);
    }
    if v.len() != n {
        let why = format!("expected {n} entries (one per spatial axis, as `kernel`), got {v:?}");
        return Err(bad_kwarg(op, arg, why));
    }
    for (a, &x) in v.iter().enumerate() {
        if !(min..LIMIT).contains(&x) {
            let why = format!("expected entries in {min}..2^31, got {v:?}");
            return Err(bad_kwarg(op, arg, why));
        }
        out[3 - n + a] = x as usize;
    }
    Ok(out)
}

/// Checks the data's rank and layout; the number of spatial axes.
fn spatial_axes(w: &Window<'_>, data: &Shape) -> Result<usize> {
    let nd = data.ndim();
    let n = w.kernel.len();
    if n == 0 {
        return Err(bad_kwarg(
            w.op,
            "kernel",
            "required: one entry per spatial axis",
        ));
    }
    if !(1..=3).contains(&n) {
        let why = format!("expected 1 to 3 entries, got {:?}", w.kernel);
        return Err(bad_kwarg(w.op, "kernel", why));
    }
    if nd != n + 2 {
        let want = format!(
            "{}-D data (N, C, spatial…) for a kernel of {n} entries",
            n + 2
        );
        return Err(shape_error(w.op, "data", want, data));
    }
    if data.dims().iter().any(|&d| d as u64 >= LIMIT as u64) {
        return Err(shape_error(w.op, "data", "dimensions below 2^31", data));
    }
    let want = ["NCW", "NCHW", "NCDHW"][n - 1];
    match w.layout {
        None => Ok(n),
        Some(l) if l == want => Ok(n),
        Some(l) => Err(bad_kwarg(
            w.op,
            "layout",
            format!(
                "expected {want} for {nd}-D data (channel-last layouts are not supported), got `{l}`"
            ),
        )),
    }
}

/// `num_filter` and `num_group` checked against `channels` input
/// channels: both divisible by the groups.
fn channels(w: &Window<'_>, data_channels: usize) -> Result<(usize, usize)> {
    if !(1..LIMIT).contains(&w.num_filter) {
        let why = format!(
            "expected a positive number of filters, got {}",
            w.num_filter
        );
        return Err(bad_kwarg(w.op, "num_filter", why));
    }
    if !(1..LIMIT).contains(&w.num_group) {
        let why = format!("expected a positive number of groups, got {}", w.num_group);
        return Err(bad_kwarg(w.op, "num_group", why));
    }
    let (filters, groups) = (w.num_filter as usize, w.num_group as usize);
    if !data_channels.is_multiple_of(groups) || !filters.is_multiple_of(groups) {
        let why = format!(
            "expected a divisor of both the data's {data_channels} channels and num_filter {filters}, got {groups}"
        );
        return Err(bad_kwarg(w.op, "num_group", why));
    }
    Ok((filters, groups))
}

/// A convolution's geometry from its data shape and kwargs.
pub(crate) fn conv_geom(data: &Shape, p: &ConvolutionParams) -> Result<Geom> {
    const OP: &str = "Convolution";
    let w = Window {
        op: OP,
        kernel: &p.kernel,
        stride: &p.stride,
        dilate: &p.dilate,
        num_filter: p.num_filter,
        num_group: p.num_group,
        layout: p.layout.as_deref(),
    };
    let n = spatial_axes(&w, data)?;
    let d = data.dims();
    let (cout, groups) = channels(&w, d[1])?;
    let mut g = window_geom(&w, n, (d[0], d[1], cout, groups))?;
    g.pad = spatial(OP, "pad", &p.pad, n, 0, 0)?;
    for a in 3 - n..3 {
        g.inp[a] = d[2 + a - (3 - n)];
        let padded = g.inp[a] + 2 * g.pad[a];
        let reach = g.dilate[a] * (g.kernel[a] - 1) + 1;
        if reach > padded {
            let why = format!(
                "the dilated kernel ({reach}) exceeds the input's size {} padded to {padded} along axis {}",
                g.inp[a],
                2 + a - (3 - n)
            );
            return Err(bad_kwarg(OP, "kernel", why));
        }
        g.out[a] = (padded - reach) / g.stride[a] + 1;
    }
    check_size(OP, data, &g)?;
    Ok(g)
}

/// Kernel, stride and dilation per axis, and the channel counts.
fn window_geom(
    w: &Window<'_>,
    n: usize,
    (batch, cin, cout, groups): (usize, usize, usize, usize),
) -> Result<Geom> {
    Ok(Geom {
        batch,
        groups,
        cin,
        cout,
        ndim: n,
        inp: [1; 3],
        out: [1; 3],
        kernel: spatial(w.op, "kernel", w.kernel, n, 1, 1)?,
        stride: spatial(w.op, "stride", w.stride, n, 1, 1)?,
        pad: [0; 3],
        dilate: spatial(w.op, "dilate", w.dilate, n, 1, 1)?,
    })
}

/// Refuses a geometry whose arrays could not be indexed: every length
/// the kernels compute must fit in usize (shapes do not bound the
/// weight or the column matrix). Checked before any of [`Geom`]'s
/// products is taken.
fn check_size(op: &str, data: &Shape, g: &Geom) -> Result<()> {
    let product = |v: &[usize]| v.iter().try_fold(1usize, |t, &d| t.checked_mul(d));
    let fits = (|| {
        let (in_vol, out_vol) = (product(&g.inp)?, product(&g.out)?);
        let k_len = product(&g.kernel)?.checked_mul(g.cin / g.groups)?;
        product(&[g.batch, g.cin, in_vol])?;
        product(&[g.cout, k_len])?;
        product(&[g.batch, g.cout, out_vol, k_len])
    })()
    .is_some();
    if !fits {
        let want = "sizes whose products (data, output, weight, work) fit in memory addresses";
        return Err(shape_error(op, "data", want, data));
    }
    Ok(())
}

/// A deconvolution's geometry, as the convolution it reverses: that
/// convolution's input is the deconvolution's output `(N, num_filter,
/// out…)`, its output the deconvolution's data.
pub(crate) fn deconv_geom(data: &Shape, p: &DeconvolutionParams) -> Result<Geom> {
    const OP: &str = "Deconvolution";
    let w = Window {
        op: OP,
        kernel: &p.kernel,
        stride: &p.stride,
        dilate: &p.dilate,
        num_filter: p.num_filter,
        num_group: p.num_group,
        layout: p.layout.as_deref(),
    };
    let n = spatial_axes(&w, data)?;
    let d = data.dims();
    let (filters, groups) = channels(&w, d[1])?;
    // The reversed convolution: from (N, filters) to the data's (N, C).
    let mut g = window_geom(&w, n, (d[0], filters, d[1], groups))?;
    let (pad, adj) = pad_and_adj(p, n, &g, &d[2..])?;
    g.pad = pad;
    for a in 3 - n..3 {
        let i = d[2 + a - (3 - n)];
        g.out[a] = i;
        let reach = g.dilate[a] * (g.kernel[a] - 1) + 1;
        let full = (i.max(1) - 1) * g.stride[a] + reach + adj[a];
        if i == 0 || full <= 2 * pad[a] {
            let why = format!(
                "it leaves no output along axis {} (input {i}, stride {}, kernel reach {reach}, adj {})",
                2 + a - (3 - n),
                g.stride[a],
                adj[a]
            );
            return Err(bad_kwarg(OP, "pad", why));
        }
        g.inp[a] = full - 2 * pad[a];
    }
    check_size(OP, data, &g)?;
    Ok(g)
}

/// `pad` and `adj` per axis: given, or derived from `target_shape` as
/// MXNet does (the total overhang split evenly, an odd unit into `adj`).
fn pad_and_adj(
    p: &DeconvolutionParams,
    n: usize,
    g: &Geom,
    data: &[usize],
) -> Result<([usize; 3], [usize; 3])> {
    const OP: &str = "Deconvolution";
    let target = spatial(OP, "target_shape", &p.target_shape, n, 0, 0)?;
    if target == [0; 3] {
        let pad = spatial(OP, "pad", &p.pad, n, 0, 0)?;
        let adj = spatial(OP, "adj", &p.adj, n, 0, 0)?;
        if (0..3).any(|a| adj[a] >= g.stride[a]) {
            let why = format!(
                "expected entries below the stride {:?}, got {:?}",
                p.stride, p.adj
            );
            return Err(bad_kwarg(OP, "adj", why));
        }
        return Ok((pad, adj));
    }
    let (mut pad, mut adj) = ([0; 3], [0; 3]);
    for a in 3 - n..3 {
        let i = data[a - (3 - n)];
        let reach = g.dilate[a] * (g.kernel[a] - 1) + 1;
        let full = (i.max(1) - 1) * g.stride[a] + reach;
        let t = target[a];
        if t > full || t == 0 {
            let why = format!(
                "expected each entry in 1..={full} (what stride, kernel and input {i} reach along axis {}), got {:?}",
                2 + a - (3 - n),
                p.target_shape
            );
            return Err(bad_kwarg(OP, "target_shape", why));
        }
        let over = full - t;
        adj[a] = over % 2;
        pad[a] = over.div_ceil(2);
    }
    Ok((pad, adj))
}

/// The weight shape the geometry wants, or an error naming `weight`. A
/// deconvolution's `(C, num_filter / groups, kernel…)` is the reversed
/// convolution's `(cout, cin_g, kernel…)`.
pub(crate) fn check_weight(op: &str, g: &Geom, weight: &Shape, deconv: bool) -> Result<()> {
    let want = g.weight_shape();
    if *weight != want {
        let what = if deconv {
            "(data channels, num_filter / num_group, kernel…)"
        } else {
            "(num_filter, data channels / num_group, kernel…)"
        };
        return Err(shape_error(op, "weight", format!("{want}: {what}"), weight));
    }
    Ok(())
}

/// The bias shape: one per output channel of the op.
pub(crate) fn check_bias(op: &str, channels: usize, bias: &Shape) -> Result<()> {
    if bias.dims() != [channels] {
        let want = format!("({channels},): (num_filter,)");
        return Err(shape_error(op, "bias", want, bias));
    }
    Ok(())
}

/// An error for inputs in the wrong number.
pub(crate) fn arity(op: &str, no_bias: bool, got: usize) -> Error {
    Error::Arity {
        op: op.into(),
        expected: if no_bias { 2 } else { 3 },
        got,
    }
}
