//! Reductions over axes (`sum`, `mean`, `max`, `min`, `prod`, `norm`) and
//! index searches (`argmax`, `argmin`), with MXNet 1.x's shape rules.
//!
//! Every op here goes through one plan, `AxesPlan`: the input is split
//! into kept and reduced axes; output element `o` reduces the input elements
//! at `outer[o] + inner[r]` for every `r`. The same plan, read backwards,
//! broadcasts (see `broadcast.rs`) and scatters gradients.
//!
//! Output shapes follow MXNet 1.x, not NumPy: reducing every axis without
//! `keepdims` gives shape `(1,)`, `axis=None` (or `()`) reduces every axis
//! whatever `exclude` says, and `exclude=True` reduces the axes *not* listed.

use serde::{Deserialize, Serialize};
use simpleop::composition::GradParts;
use simpleop::eager::invoke;
use simpleop::kernel::prefetch;
use simpleop::kernel::{RowReducer, RowReduction};
use simpleop::{
    Attrs, Element, Error, Float, NDArray, OpReqType, Result, Shape, TBlob, TBlobMut, simple_op,
};

/// Keyword arguments of [`sum()`], [`mean()`], [`max()`], [`min()`] and
/// [`prod()`] (MXNet's `ReduceAxesParam`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ReduceAxesParams {
    /// The axes to reduce (negative counts from the end); `None` or `()`
    /// reduces every axis. Accepts `"1"`, `"(0, 2)"` and `"None"`.
    pub axis: Option<Vec<i64>>,
    /// Keep reduced axes as size 1.
    pub keepdims: bool,
    /// Reduce over every axis *not* in `axis`.
    pub exclude: bool,
}

/// Keyword arguments of [`norm()`] (MXNet's `NormParam`, plus `exclude`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct NormParams {
    /// 2 (the default) for the L2 norm, 1 for the L1 norm.
    pub ord: i64,
    /// The axes to reduce, as for [`ReduceAxesParams::axis`].
    pub axis: Option<Vec<i64>>,
    /// Keep reduced axes as size 1.
    pub keepdims: bool,
    /// Reduce over every axis *not* in `axis`.
    pub exclude: bool,
    /// MXNet's output dtype; only `None` (the input's dtype) is supported.
    pub out_dtype: Option<String>,
}

impl Default for NormParams {
    fn default() -> Self {
        NormParams {
            ord: 2,
            axis: None,
            keepdims: false,
            exclude: false,
            out_dtype: None,
        }
    }
}

/// Keyword arguments of [`argmax()`] and [`argmin()`] (MXNet's
/// `ReduceAxisParam`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ArgReduceParams {
    /// The axis to search along (negative counts from the end); `None`
    /// searches the flattened array.
    pub axis: Option<i64>,
    /// Keep the searched axis as size 1.
    pub keepdims: bool,
}

// ---------------------------------------------------------------------------
// Axes and plans (shared with broadcast.rs)
// ---------------------------------------------------------------------------

/// Resolves a possibly negative axis of an `ndim`-D array, or errors naming
/// `op` and `arg`. `extra` widens the valid range (1 for `expand_dims`).
pub(crate) fn resolve_axis(
    op: &str,
    arg: &str,
    axis: i64,
    ndim: usize,
    extra: usize,
) -> Result<usize> {
    let n = (ndim + extra) as i64;
    let a = if axis < 0 { axis + n } else { axis };
    if a < 0 || a >= n {
        return Err(Error::BadKwarg {
            op: op.into(),
            arg: arg.into(),
            reason: format!(
                "axis {axis} is out of range for an array of {ndim} dimension(s) (valid: {}..={})",
                -n,
                n - 1
            ),
        });
    }
    Ok(a as usize)
}

/// Resolves a list of axes into a mask over `ndim` axes, rejecting
/// out-of-range and repeated axes.
pub(crate) fn axes_mask(op: &str, arg: &str, axes: &[i64], ndim: usize) -> Result<Vec<bool>> {
    let mut mask = vec![false; ndim];
    for &a in axes {
        let k = resolve_axis(op, arg, a, ndim, 0)?;
        if mask[k] {
            return Err(Error::BadKwarg {
                op: op.into(),
                arg: arg.into(),
                reason: format!("axis {a} is given more than once in {axes:?}"),
            });
        }
        mask[k] = true;
    }
    Ok(mask)
}

/// The walk over an array split into kept and reduced axes: output `o`
/// (kept axes, row-major) covers the flat elements `outer[o] + inner[r]`
/// (reduced axes, row-major).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AxesPlan {
    /// Flat offset of the first element of each group.
    pub outer: Vec<usize>,
    /// Offsets of a group's elements from its first.
    pub inner: Vec<usize>,
}

/// Row-major flat offsets of every index over `(dim, stride)` pairs, or
/// `None` when their count does not fit in memory.
fn offsets(axes: &[(usize, usize)]) -> Option<Vec<usize>> {
    let count = axes
        .iter()
        .try_fold(1usize, |n, &(d, _)| n.checked_mul(d))?;
    let mut offs = Vec::new();
    offs.try_reserve_exact(count).ok()?;
    if count == 0 {
        return Some(offs);
    }
    // An odometer over the index, last axis fastest.
    let mut index = vec![0usize; axes.len()];
    let mut at = 0usize;
    loop {
        offs.push(at);
        let mut a = axes.len();
        loop {
            if a == 0 {
                return Some(offs);
            }
            a -= 1;
            index[a] += 1;
            at += axes[a].1;
            if index[a] < axes[a].0 {
                break;
            }
            at -= axes[a].1 * index[a];
            index[a] = 0;
        }
    }
}

impl AxesPlan {
    /// The plan of `shape` reducing the axes where `reduced` is true.
    /// Sized by the elements walked: with no outputs, no group is walked
    /// and the reduced offsets are left empty (a `[0, 2^40]` sum holds no
    /// 2^40-entry table). [`Error::Alloc`] when a table cannot be had.
    pub(crate) fn new(op: &str, shape: &Shape, reduced: &[bool]) -> Result<Self> {
        let strides = shape.strides();
        let axes = |keep: bool| -> Vec<(usize, usize)> {
            let all = shape.dims().iter().copied().zip(strides.iter().copied());
            all.zip(reduced)
                .filter(|(_, r)| **r != keep)
                .map(|(a, _)| a)
                .collect()
        };
        let table = |axes: &[(usize, usize)], what: &str| {
            offsets(axes).ok_or_else(|| {
                let n = axes.iter().try_fold(1usize, |n, &(d, _)| n.checked_mul(d));
                let bytes = n.and_then(|n| n.checked_mul(size_of::<usize>()));
                Error::alloc(op, format!("the {what} offsets of shape {shape}"), bytes)
            })
        };
        let outer = table(&axes(true), "output")?;
        let inner = if outer.is_empty() {
            Vec::new()
        } else {
            table(&axes(false), "reduced")?
        };
        Ok(AxesPlan { outer, inner })
    }

    /// Calls `f(o, flat)` for every element, grouped by output.
    #[inline]
    fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        for (o, &base) in self.outer.iter().enumerate() {
            for &r in &self.inner {
                f(o, base + r);
            }
        }
    }
}

/// Output shape and reduced-axes mask of reducing `shape` as MXNet 1.x's
/// `ReduceAxesShapeImpl` does.
pub(crate) fn reduce_axes(
    op: &str,
    shape: &Shape,
    axis: Option<&[i64]>,
    keepdims: bool,
    exclude: bool,
) -> Result<(Shape, Vec<bool>)> {
    let dims = shape.dims();
    let ndim = dims.len();
    let mask = match axis {
        None | Some([]) => vec![true; ndim],
        Some(axes) => {
            let listed = axes_mask(op, "axis", axes, ndim)?;
            if exclude {
                listed.iter().map(|l| !l).collect()
            } else {
                listed
            }
        }
    };
    let out: Vec<usize> = if keepdims {
        dims.iter()
            .zip(&mask)
            .map(|(&d, &r)| if r { 1 } else { d })
            .collect()
    } else {
        let kept: Vec<usize> = dims
            .iter()
            .zip(&mask)
            .filter(|(_, r)| !**r)
            .map(|(&d, _)| d)
            .collect();
        if kept.is_empty() { vec![1] } else { kept }
    };
    Ok((Shape::new(out), mask))
}

fn layout_error(op: &str, arg: &str, expected: usize, got: &Shape) -> Error {
    Error::ShapeMismatch {
        op: op.into(),
        arg: arg.into(),
        expected: format!("{expected} element(s)"),
        got: got.clone(),
    }
}

fn dtype_error(op: &str, arg: &str, want: simpleop::DType, got: simpleop::DType) -> Error {
    Error::DTypeMismatch {
        op: op.into(),
        arg: arg.into(),
        expected: if want.is_float() {
            format!("{want}")
        } else {
            "a float dtype (float32, float64, float16, bfloat16)".into()
        },
        got,
    }
}

/// Checks that `blob` (named `arg`) has `len` elements and dtype `dtype`.
pub(crate) fn check_layout(
    op: &str,
    arg: &str,
    shape: &Shape,
    blob_dtype: simpleop::DType,
    len: usize,
    dtype: simpleop::DType,
) -> Result<()> {
    if blob_dtype != dtype {
        return Err(dtype_error(op, arg, dtype, blob_dtype));
    }
    if shape.size() != len {
        return Err(layout_error(op, arg, len, shape));
    }
    Ok(())
}

/// Converts an f64 result into `T`'s compute type.
#[inline(always)]
fn cv<T: Float>(v: f64) -> T::Compute {
    <T::Compute as Element>::from_f64(v)
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

/// A reduction: how one group of values becomes one output, and its gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reducer {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    /// L1 (`1`) or L2 (`2`) norm.
    Norm(i64),
    ArgMax,
    ArgMin,
}

impl Reducer {
    /// Reduces one group (given in walk order), in f64.
    fn reduce(self, values: impl Iterator<Item = f64>, n: usize) -> f64 {
        // Sums start from +0.0, as NumPy's: Rust's `Sum` for floats starts
        // from -0.0, which an empty group would return.
        let sum = |v: &mut dyn Iterator<Item = f64>| v.fold(0.0, |a, b| a + b);
        let mut values = values;
        match self {
            Reducer::Sum => sum(&mut values),
            Reducer::Mean => sum(&mut values) / n as f64,
            Reducer::Prod => values.product(),
            Reducer::Norm(1) => sum(&mut values.map(f64::abs)),
            Reducer::Norm(_) => sum(&mut values.map(|v| v * v)).sqrt(),
            // NaN propagates, as in mshadow's maximum/minimum reducers.
            Reducer::Max => {
                values.fold(
                    f64::NEG_INFINITY,
                    |a, v| {
                        if a.is_nan() || a >= v { a } else { v }
                    },
                )
            }
            Reducer::Min => values.fold(
                f64::INFINITY,
                |a, v| {
                    if a.is_nan() || a <= v { a } else { v }
                },
            ),
            Reducer::ArgMax | Reducer::ArgMin => {
                let max = self == Reducer::ArgMax;
                let mut best: Option<(usize, f64)> = None;
                for (i, v) in values.enumerate() {
                    let better = match best {
                        None => true,
                        Some((_, b)) if b.is_nan() => false,
                        Some((_, b)) => v.is_nan() || if max { v > b } else { v < b },
                    };
                    if better {
                        best = Some((i, v));
                    }
                }
                best.map_or(0.0, |(i, _)| i as f64)
            }
        }
    }
}

impl Reducer {
    /// The core's row reducer for the reducers that sum.
    fn row(self) -> Option<RowReducer> {
        match self {
            Reducer::Sum => Some(RowReducer::Sum),
            Reducer::Mean => Some(RowReducer::Mean),
            Reducer::Norm(1) => Some(RowReducer::SumAbs),
            Reducer::Norm(_) => Some(RowReducer::Norm2),
            _ => None,
        }
    }

    /// [`Reducer::reduce`] over a contiguous group, for the reducers that
    /// sum: [`RowReducer::reduce`], whose summation order a fused program
    /// feeding the reduction tile by tile reproduces bit for bit.
    fn reduce_run<T: Float>(self, xs: &[T]) -> Option<f64> {
        self.row().map(|r| r.reduce(xs))
    }
}

/// The row reduction `op` computes on `inputs[0]` with `p` (for `fn rows`):
/// `Some` when its reducer sums and it reduces exactly the trailing axes.
fn row_reduction<P: AxesArgs>(
    op: &str,
    default: Reducer,
    inputs: &[Shape],
    p: &P,
) -> Result<Option<RowReduction>> {
    let Some(reducer) = p.reducer(default).row() else {
        return Ok(None);
    };
    let (axis, keepdims, exclude) = p.axes(op)?;
    let [shape] = inputs else {
        return Err(Error::invalid(
            op,
            "data",
            format!("one input shape, got {}", inputs.len()),
        ));
    };
    let (_, mask) = reduce_axes(op, shape, axis, keepdims, exclude)?;
    let Some(first) = mask.iter().position(|&m| m) else {
        return Ok(None);
    };
    if !mask[first..].iter().all(|&m| m) {
        return Ok(None);
    }
    // No row reduction for a row past usize: no array has one.
    let len = Shape::new(&shape.dims()[first..]).checked_size();
    Ok(len
        .filter(|&len| len > 0)
        .map(|len| RowReduction { reducer, len }))
}

/// `dst[o] (=|+=) reduce(src[outer[o] + inner[..]])` per `req`.
pub(crate) fn reduce_blob(
    op: &str,
    reducer: Reducer,
    plan: &AxesPlan,
    src: &TBlob<'_>,
    dst: &mut TBlobMut<'_>,
    req: OpReqType,
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    check_layout(
        op,
        "output",
        dst.shape(),
        dst.dtype(),
        plan.outer.len(),
        src.dtype(),
    )?;
    let n = plan.inner.len();
    if src.len() != plan.outer.len() * n {
        return Err(layout_error(op, "data", plan.outer.len() * n, src.shape()));
    }
    simpleop::dispatch_float!(src.dtype(), T => {
        let xs = src.as_slice::<T>()?;
        let ys = dst.as_slice_mut::<T>()?;
        // Trailing axes reduced: each group is one run of memory. (Empty
        // groups take the walk: their starts may lie past an empty input.)
        let contiguous = n > 0 && plan.inner.iter().enumerate().all(|(i, &r)| i == r);
        // Outputs are independent: split them over threads when each
        // thread gets enough elements to read.
        simpleop::kernel::par_chunks_mut(ys, n, |start, ys| {
            let outer = &plan.outer[start..start + ys.len()];
            for (o, (y, &base)) in ys.iter_mut().zip(outer).enumerate() {
                // The next group while this one sums: a row is often one
                // page, where the hardware prefetcher stops.
                if contiguous && let Some(&next) = outer.get(o + 1) {
                    prefetch(&xs[next..next + n]);
                }
                let run = contiguous.then(|| reducer.reduce_run(&xs[base..base + n])).flatten();
                let v = run.unwrap_or_else(|| {
                    reducer.reduce(plan.inner.iter().map(|&r| xs[base + r].to_f64()), n)
                });
                req.assign(y, cv::<T>(v));
            }
        });
        Ok(())
    }, _ => Err(dtype_error(op, "data", src.dtype(), src.dtype())))
}

/// `dst[outer[o] + inner[r]] (=|+=) src[o]` for every `r`: broadcasting
/// along the plan's reduced axes, per `req`.
pub(crate) fn broadcast_blob(
    op: &str,
    plan: &AxesPlan,
    src: &TBlob<'_>,
    dst: &mut TBlobMut<'_>,
    req: OpReqType,
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let total = plan.outer.len() * plan.inner.len();
    check_layout(op, "output", dst.shape(), dst.dtype(), total, src.dtype())?;
    if src.len() != plan.outer.len() {
        return Err(layout_error(op, "data", plan.outer.len(), src.shape()));
    }
    simpleop::dispatch_float!(src.dtype(), T => {
        let xs = src.as_slice::<T>()?;
        let ys = dst.as_slice_mut::<T>()?;
        plan.for_each(|o, i| req.assign(&mut ys[i], xs[o].to_compute()));
        Ok(())
    }, _ => Err(dtype_error(op, "data", src.dtype(), src.dtype())))
}

/// The forward value `what` a gradient reads, or an error when it is absent.
fn need<'a, 'b>(op: &str, blob: Option<&'a TBlob<'b>>, what: &str) -> Result<&'a TBlob<'b>> {
    blob.ok_or_else(|| Error::invalid(op, what, "the gradient reads it"))
}

/// What a reduction's gradient reads: the output gradient, and the forward
/// output and input when the reducer needs them.
#[derive(Clone, Copy)]
struct GradSources<'a, 'b> {
    dy: &'a TBlob<'b>,
    y: Option<&'a TBlob<'b>>,
    x: Option<&'a TBlob<'b>>,
}

/// The gradient of a reduction: `grad[outer[o] + inner[r]] (=|+=) dy[o] ·
/// ∂y[o]/∂x[..]`, per `req`. The forward output and input are needed by
/// every reducer but `Sum`, `Mean` and the arg searches.
fn reduce_grad_blob(
    op: &str,
    reducer: Reducer,
    plan: &AxesPlan,
    src: GradSources<'_, '_>,
    grad: &mut TBlobMut<'_>,
    req: OpReqType,
) -> Result<()> {
    let GradSources { dy, y, x } = src;
    if req == OpReqType::Null {
        return Ok(());
    }
    let dtype = grad.dtype();
    let outs = plan.outer.len();
    let n = plan.inner.len();
    check_layout(op, "out_grad", dy.shape(), dy.dtype(), outs, dtype)?;
    check_layout(op, "data_grad", grad.shape(), dtype, outs * n, dtype)?;
    if let Some(y) = y {
        check_layout(op, "output", y.shape(), y.dtype(), outs, dtype)?;
    }
    if let Some(x) = x {
        check_layout(op, "data", x.shape(), x.dtype(), outs * n, dtype)?;
    }
    simpleop::dispatch_float!(dtype, T => {
        let dys = dy.as_slice::<T>()?;
        let gs = grad.as_slice_mut::<T>()?;
        match reducer {
            Reducer::Sum | Reducer::Mean => {
                let scale = if reducer == Reducer::Mean { 1.0 / n as f64 } else { 1.0 };
                plan.for_each(|o, i| req.assign(&mut gs[i], cv::<T>(dys[o].to_f64() * scale)));
            }
            Reducer::Max | Reducer::Min => {
                // Every element equal to the extreme gets the whole `dy`, as in MXNet.
                let (yb, xb) = (need(op, y, "output")?, need(op, x, "data")?);
                let (ys, xs) = (yb.as_slice::<T>()?, xb.as_slice::<T>()?);
                plan.for_each(|o, i| {
                    let v = if xs[i].to_f64() == ys[o].to_f64() { dys[o].to_f64() } else { 0.0 };
                    req.assign(&mut gs[i], cv::<T>(v));
                });
            }
            Reducer::Norm(ord) => {
                let (yb, xb) = (need(op, y, "output")?, need(op, x, "data")?);
                let (ys, xs) = (yb.as_slice::<T>()?, xb.as_slice::<T>()?);
                plan.for_each(|o, i| {
                    let (xv, yv) = (xs[i].to_f64(), ys[o].to_f64());
                    let d = if ord == 1 {
                        // MXNet's sign: 0 at ±0 and NaN
                        <f64 as Float>::sign(xv)
                    } else if yv == 0.0 {
                        0.0
                    } else {
                        xv / yv
                    };
                    req.assign(&mut gs[i], cv::<T>(dys[o].to_f64() * d));
                });
            }
            Reducer::Prod => {
                // The product of the others, from prefix and suffix products,
                // so zeros in the group are handled exactly.
                let xb = need(op, x, "data")?;
                let xs = xb.as_slice::<T>()?;
                let mut suffix = vec![1.0f64; n + 1];
                for (o, &base) in plan.outer.iter().enumerate() {
                    for r in (0..n).rev() {
                        suffix[r] = suffix[r + 1] * xs[base + plan.inner[r]].to_f64();
                    }
                    let mut prefix = 1.0f64;
                    for (r, &off) in plan.inner.iter().enumerate() {
                        let i = base + off;
                        let v = dys[o].to_f64() * prefix * suffix[r + 1];
                        req.assign(&mut gs[i], cv::<T>(v));
                        prefix *= xs[i].to_f64();
                    }
                }
            }
            Reducer::ArgMax | Reducer::ArgMin => {
                // MXNet's zero gradient (`MakeZeroGradNodes`).
                for g in gs.iter_mut() {
                    req.assign(g, cv::<T>(0.0));
                }
            }
        }
        Ok(())
    }, _ => Err(dtype_error(op, "data_grad", dtype, dtype)))
}

// ---------------------------------------------------------------------------
// Glue used by the op modules
// ---------------------------------------------------------------------------

/// The plan of a reduce-axes op over an input of `shape`.
fn axes_plan(
    op: &str,
    shape: &Shape,
    axis: Option<&[i64]>,
    keepdims: bool,
    exclude: bool,
) -> Result<(Shape, AxesPlan)> {
    let (out, mask) = reduce_axes(op, shape, axis, keepdims, exclude)?;
    Ok((out, AxesPlan::new(op, shape, &mask)?))
}

/// What every reduce op's kwargs provide.
trait AxesArgs {
    fn axes(&self, op: &str) -> Result<(Option<&[i64]>, bool, bool)>;
    /// Rejects kwargs the op accepts but does not support; the shape rule
    /// asks first.
    fn check_supported(&self, _op: &str) -> Result<()> {
        Ok(())
    }
    fn reducer(&self, default: Reducer) -> Reducer {
        default
    }
}

impl AxesArgs for ReduceAxesParams {
    fn axes(&self, _op: &str) -> Result<(Option<&[i64]>, bool, bool)> {
        Ok((self.axis.as_deref(), self.keepdims, self.exclude))
    }
}

impl AxesArgs for NormParams {
    fn axes(&self, op: &str) -> Result<(Option<&[i64]>, bool, bool)> {
        if self.ord != 1 && self.ord != 2 {
            return Err(Error::BadKwarg {
                op: op.into(),
                arg: "ord".into(),
                reason: format!("expected 1 or 2, got {}", self.ord),
            });
        }
        Ok((self.axis.as_deref(), self.keepdims, self.exclude))
    }
    fn reducer(&self, _default: Reducer) -> Reducer {
        Reducer::Norm(self.ord)
    }
    fn check_supported(&self, op: &str) -> Result<()> {
        if self.out_dtype.is_some() {
            return Err(Error::BadKwarg {
                op: op.into(),
                arg: "out_dtype".into(),
                reason: "only None (the input's dtype) is supported".into(),
            });
        }
        Ok(())
    }
}

/// The axis (`None` = every axis, flattened) of an arg-search op. An
/// empty axis is an error, as NumPy's "attempt to get argmax of an empty
/// sequence": there is no index to give (whether or not other axes leave
/// any output).
fn arg_axes(op: &str, shape: &Shape, p: &ArgReduceParams) -> Result<(Shape, AxesPlan)> {
    let axis = arg_axis(op, shape, p)?;
    let axes = axis.map(|k| [k as i64]);
    axes_plan(op, shape, axes.as_ref().map(|a| &a[..]), p.keepdims, false)
}

/// The output shape of an arg-search op (no plan: shape rules allocate nothing).
fn arg_shape(op: &str, shape: &Shape, p: &ArgReduceParams) -> Result<Shape> {
    let axis = arg_axis(op, shape, p)?.map(|k| [k as i64]);
    let axes = axis.as_ref().map(|a| &a[..]);
    Ok(reduce_axes(op, shape, axes, p.keepdims, false)?.0)
}

/// The resolved axis of an arg-search op, checked non-empty.
fn arg_axis(op: &str, shape: &Shape, p: &ArgReduceParams) -> Result<Option<usize>> {
    let axis = p
        .axis
        .map(|a| resolve_axis(op, "axis", a, shape.ndim(), 0))
        .transpose()?;
    let empty = match axis {
        None => shape.size() == 0,
        Some(k) => shape.dims()[k] == 0,
    };
    if empty {
        let what = match p.axis {
            None => "the flattened array (axis None)".to_string(),
            Some(a) => format!("axis {a}"),
        };
        return Err(Error::invalid(
            op,
            "axis",
            format!("{what} of the input {shape} is empty: there is no index to return"),
        ));
    }
    Ok(axis)
}

fn reduce_shape<P: AxesArgs>(op: &str, inputs: &[Shape], p: &P) -> Result<Shape> {
    p.check_supported(op)?;
    let (axis, keepdims, exclude) = p.axes(op)?;
    Ok(reduce_axes(op, &inputs[0], axis, keepdims, exclude)?.0)
}

fn reduce_forward<P: AxesArgs>(
    op: &str,
    default: Reducer,
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &P,
) -> Result<()> {
    let (axis, keepdims, exclude) = p.axes(op)?;
    let x = &inputs[0];
    let (_, plan) = axes_plan(op, x.shape(), axis, keepdims, exclude)?;
    reduce_blob(op, p.reducer(default), &plan, x, out, req)
}

fn reduce_backward<P: AxesArgs>(
    op: &str,
    default: Reducer,
    src: GradSources<'_, '_>,
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &P,
) -> Result<()> {
    let (axis, keepdims, exclude) = p.axes(op)?;
    let g = &mut grads[0];
    let (_, plan) = axes_plan(op, g.shape(), axis, keepdims, exclude)?;
    reduce_grad_blob(op, p.reducer(default), &plan, src, g, req[0])
}

fn arg_forward(
    op: &str,
    reducer: Reducer,
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &ArgReduceParams,
) -> Result<()> {
    let x = &inputs[0];
    let (_, plan) = arg_axes(op, x.shape(), p)?;
    reduce_blob(op, reducer, &plan, x, out, req)
}

fn arg_backward(
    op: &str,
    reducer: Reducer,
    dy: &TBlob<'_>,
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &ArgReduceParams,
) -> Result<()> {
    let g = &mut grads[0];
    let (_, plan) = arg_axes(op, g.shape(), p)?;
    let src = GradSources {
        dy,
        y: None,
        x: None,
    };
    reduce_grad_blob(op, reducer, &plan, src, g, req[0])
}

// ---------------------------------------------------------------------------
// Ops
// ---------------------------------------------------------------------------

reductions! {
    /// Sum over `axis` (all axes by default), accumulated in f64; the gradient
    /// broadcasts `dy` back.
    sum [alias = "sum_axis", linear]: ReduceAxesParams, Reducer::Sum, rows "sum",
        forward "Σ data", backward(dy) "`data_grad = dy` broadcast over the reduced axes.";

    /// Mean over `axis` (all axes by default), accumulated in f64; the gradient
    /// is `dy / n` broadcast back.
    mean [linear]: ReduceAxesParams, Reducer::Mean, rows "mean",
        forward "Σ data / n", backward(dy) "`data_grad = dy / n` broadcast over the reduced axes.";

    /// Maximum over `axis` (all axes by default); NaN propagates. The gradient
    /// goes to every element equal to the maximum, as in MXNet.
    max [alias = "max_axis"]: ReduceAxesParams, Reducer::Max,
        forward "max data", backward(dy, y, x) "`data_grad = dy · (data == out)`.";

    /// Minimum over `axis` (all axes by default); NaN propagates. The gradient
    /// goes to every element equal to the minimum, as in MXNet.
    min [alias = "min_axis"]: ReduceAxesParams, Reducer::Min,
        forward "min data", backward(dy, y, x) "`data_grad = dy · (data == out)`.";

    /// Product over `axis` (all axes by default), in f64. The gradient is `dy`
    /// times the product of the *other* elements, so zeros are exact (MXNet's
    /// `dy · y / x` gives NaN there).
    prod []: ReduceAxesParams, Reducer::Prod,
        forward "Π data", backward(dy, x) "`data_grad[i] = dy · Π_{j≠i} data[j]` within each group.";

    /// The vector norm over `axis` (all axes by default): L2 (`ord=2`, the
    /// default) or L1 (`ord=1`), in f64. The gradient is `dy · x / y` (L2; 0
    /// where the norm is 0) or `dy · sign(x)` (L1).
    norm []: NormParams, Reducer::Norm(2), rows "norm",
        forward "‖data‖", backward(dy, y, x) "`data_grad = dy · data / out` (L2) or `dy · sign(data)` (L1).";
}

arg_searches! {
    /// Index of the maximum along `axis` (of the flattened array when `axis` is
    /// `None`), as a float of the input dtype; the first one wins on ties. The
    /// gradient is zero, as MXNet's.
    argmax: Reducer::ArgMax;

    /// Index of the minimum along `axis` (of the flattened array when `axis` is
    /// `None`), as a float of the input dtype; the first one wins on ties. The
    /// gradient is zero, as MXNet's.
    argmin: Reducer::ArgMin;
}

/// `sum`'s and `mean`'s gradients as ops, which give them second
/// derivatives (`simpleop::composition`): the output gradient with the
/// reduced axes kept, broadcast back to the input, divided by the count
/// for `mean`.
fn reduce_gradient(p: &GradParts<'_>, op: &str, mean: bool) -> Result<Vec<Option<NDArray>>> {
    let params = p.env.require_kwargs::<ReduceAxesParams>(op)?;
    let (Some(x), Some(dy)) = (p.inputs.first(), p.out_grads.first()) else {
        return Err(Error::invalid(
            op,
            "gradient composition",
            "the input and the output's gradient",
        ));
    };
    let (kept, _) = reduce_axes(op, x.shape(), params.axis.as_deref(), true, params.exclude)?;
    let dy = invoke("Reshape", &[dy], &Attrs::new().with("shape", &kept))?;
    let dx = invoke(
        "broadcast_to",
        &[&dy],
        &Attrs::new().with("shape", x.shape()),
    )?;
    if !mean {
        return Ok(vec![Some(dx)]);
    }
    let count = x.size().checked_div(kept.size()).unwrap_or(1).max(1);
    let dx = invoke("_div_scalar", &[&dx], &Attrs::new().with("scalar", count))?;
    Ok(vec![Some(dx)])
}

fn sum_gradient(p: &GradParts<'_>) -> Result<Vec<Option<NDArray>>> {
    reduce_gradient(p, "sum", false)
}

fn mean_gradient(p: &GradParts<'_>) -> Result<Vec<Option<NDArray>>> {
    reduce_gradient(p, "mean", true)
}

simpleop::gradient_composition!("sum", sum_gradient);
simpleop::gradient_composition!("mean", mean_gradient);
