//! Neural-network ops: [`softmax()`], [`log_softmax()`] and
//! [`softmax_cross_entropy()`].
//!
//! All three are numerically stable (the maximum is subtracted before
//! exponentiating) and compute in `T::Compute` (f32 for the half types),
//! with one lane of scratch from the temp-space resource holding the
//! widened, scaled inputs and then their exponentials.

use serde::{Deserialize, Serialize};
use simpleop::composition::GradParts;
use simpleop::eager::invoke;
use simpleop::{
    Attrs, DType, Element, EnvArguments, Error, Float, NDArray, OpReqType, Result, Shape, TBlob,
    TBlobMut, dispatch_any, dispatch_float, simple_op,
};

/// Keyword arguments of [`softmax()`] and [`log_softmax()`].
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct SoftmaxParams {
    /// The axis to normalise along; negative counts from the end. Defaults
    /// to -1.
    pub axis: i64,
    /// Divides the input before normalising; `None` means 1.
    pub temperature: Option<f64>,
    /// MXNet's output dtype; only `None` (the input's dtype) is supported,
    /// the value MXNet writes by default.
    pub dtype: Option<String>,
    /// MXNet's per-row valid lengths (a second input); only `false`.
    pub use_length: bool,
}

impl Default for SoftmaxParams {
    fn default() -> Self {
        SoftmaxParams {
            axis: -1,
            temperature: None,
            dtype: None,
            use_length: false,
        }
    }
}

/// An array seen as `outer × len × inner`, normalised along `len`: lane
/// `(o, j)` is the elements `(o·len + i)·inner + j` for `i < len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lanes {
    outer: usize,
    len: usize,
    inner: usize,
}

impl Lanes {
    /// The first element of every lane, in storage order of the lanes.
    fn starts(self) -> impl Iterator<Item = usize> {
        (0..self.outer)
            .flat_map(move |o| (0..self.inner).map(move |j| o * self.len * self.inner + j))
    }
}

/// Checks the kwargs against `shape` and returns the lanes and `1 / temperature`.
fn softmax_geometry(op: &str, shape: &Shape, p: &SoftmaxParams) -> Result<(Lanes, f64)> {
    let unsupported = |arg: &str, reason: &str| Error::BadKwarg {
        op: op.into(),
        arg: arg.into(),
        reason: reason.into(),
    };
    if p.dtype.is_some() {
        return Err(unsupported(
            "dtype",
            "only None (the input's dtype) is supported; cast the input with `Cast` or `astype`",
        ));
    }
    if p.use_length {
        return Err(unsupported("use_length", "only False is supported"));
    }
    let ndim = shape.ndim() as i64;
    let axis = if p.axis < 0 { p.axis + ndim } else { p.axis };
    if ndim == 0 || !(0..ndim).contains(&axis) {
        return Err(Error::BadKwarg {
            op: op.into(),
            arg: "axis".into(),
            reason: format!(
                "axis {} is out of range for input shape {shape} ({ndim} dimension(s))",
                p.axis
            ),
        });
    }
    let t = p.temperature.unwrap_or(1.0);
    if !t.is_finite() || t == 0.0 {
        return Err(Error::BadKwarg {
            op: op.into(),
            arg: "temperature".into(),
            reason: format!("expected a finite non-zero number, got {t}"),
        });
    }
    let dims = shape.dims();
    let axis = axis as usize;
    let lanes = Lanes {
        // saturating: shape rules see shapes no array has (never walked)
        outer: dims[..axis].iter().fold(1, |n, &d| n.saturating_mul(d)),
        len: dims[axis],
        inner: dims[axis + 1..].iter().fold(1, |n, &d| n.saturating_mul(d)),
    };
    Ok((lanes, 1.0 / t))
}

fn float_error(op: &str, arg: &str, got: DType) -> Error {
    Error::DTypeMismatch {
        op: op.into(),
        arg: arg.into(),
        expected: "a float dtype (float32, float64, float16, bfloat16)".into(),
        got,
    }
}

/// Errors unless `blob` has `shape` and `dtype` (executors other than the
/// eager one might not check), naming `arg`.
fn check_like(
    op: &str,
    arg: &str,
    blob_shape: &Shape,
    blob_dtype: DType,
    shape: &Shape,
    dtype: DType,
) -> Result<()> {
    if blob_shape != shape {
        return Err(Error::ShapeMismatch {
            op: op.into(),
            arg: arg.into(),
            expected: shape.to_string(),
            got: blob_shape.clone(),
        });
    }
    if blob_dtype != dtype {
        return Err(Error::DTypeMismatch {
            op: op.into(),
            arg: arg.into(),
            expected: dtype.to_string(),
            got: blob_dtype,
        });
    }
    Ok(())
}

/// Fills `s` with the lane at `start` scaled by `inv_t`, then replaces it
/// by `exp(s - max)`; returns `(max, Σ exp)`. A lane of `-inf`s gives
/// `max = -inf` and NaNs, as the mathematics does.
fn exp_lane<T: Float>(
    x: &[T],
    start: usize,
    inner: usize,
    inv_t: T::Compute,
    s: &mut [T::Compute],
) -> (T::Compute, T::Compute) {
    let mut max = <T::Compute as Float>::neg_infinity();
    for (i, v) in s.iter_mut().enumerate() {
        *v = x[start + i * inner].to_compute() * inv_t;
        max = max.max(*v);
    }
    let mut sum = <T::Compute as Float>::zero();
    for v in s.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    (max, sum)
}

/// `out (=|+=) softmax(x · inv_t)` (or its log) along the lanes.
fn softmax_lanes<T: Float>(
    x: &[T],
    out: &mut [T],
    lanes: Lanes,
    inv_t: f64,
    log: bool,
    req: OpReqType,
    scratch: &mut [T::Compute],
) {
    let inv_t = <T::Compute as Element>::from_f64(inv_t);
    let inner = lanes.inner;
    for start in lanes.starts() {
        let (max, sum) = exp_lane::<T>(x, start, inner, inv_t, scratch);
        if log {
            // `(x − max) − ln Σ`: the difference is exact near the maximum,
            // where `x − (max + ln Σ)` would round `max + ln Σ` first.
            let ln_sum = sum.ln();
            for i in 0..lanes.len {
                let at = start + i * inner;
                req.assign(&mut out[at], (x[at].to_compute() * inv_t - max) - ln_sum);
            }
        } else {
            let r = sum.recip();
            for (i, &e) in scratch.iter().enumerate() {
                req.assign(&mut out[start + i * inner], e * r);
            }
        }
    }
}

/// Backward of both: with `y` the forward output,
/// softmax: `dx = inv_t · y · (dy − Σ dy·y)`;
/// log_softmax: `dx = inv_t · (dy − exp(y) · Σ dy)`.
fn softmax_grad_lanes<T: Float>(
    dy: &[T],
    y: &[T],
    dx: &mut [T],
    lanes: Lanes,
    inv_t: f64,
    log: bool,
    req: OpReqType,
) {
    let inv_t = <T::Compute as Element>::from_f64(inv_t);
    let inner = lanes.inner;
    for start in lanes.starts() {
        let idx = (0..lanes.len).map(|i| start + i * inner);
        let mut acc = <T::Compute as Float>::zero();
        for at in idx.clone() {
            acc += if log {
                dy[at].to_compute()
            } else {
                dy[at].to_compute() * y[at].to_compute()
            };
        }
        for at in idx {
            let (g, v) = (dy[at].to_compute(), y[at].to_compute());
            let d = if log {
                g - v.exp() * acc
            } else {
                v * (g - acc)
            };
            req.assign(&mut dx[at], d * inv_t);
        }
    }
}

fn softmax_forward(
    op: &str,
    log: bool,
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &SoftmaxParams,
    env: &EnvArguments,
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let x = inputs.first().ok_or(Error::Arity {
        op: op.into(),
        expected: 1,
        got: 0,
    })?;
    let (lanes, inv_t) = softmax_geometry(op, x.shape(), p)?;
    check_like(op, "output", out.shape(), out.dtype(), x.shape(), x.dtype())?;
    dispatch_float!(x.dtype(), T => {
        let touched = if x.is_empty() { 0 } else { lanes.len };
        let mut scratch = env.temp_space::<<T as Float>::Compute>(op, touched)?;
        softmax_lanes::<T>(x.as_slice()?, out.as_slice_mut()?, lanes, inv_t, log, req, &mut scratch);
        Ok(())
    }, _ => Err(float_error(op, "data", x.dtype())))
}

fn softmax_backward(
    op: &str,
    log: bool,
    dy: &TBlob<'_>,
    y: &TBlob<'_>,
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &SoftmaxParams,
) -> Result<()> {
    if req[0] == OpReqType::Null {
        return Ok(());
    }
    let (lanes, inv_t) = softmax_geometry(op, y.shape(), p)?;
    check_like(op, "out_grad", dy.shape(), dy.dtype(), y.shape(), y.dtype())?;
    let g = &mut grads[0];
    check_like(op, "data_grad", g.shape(), g.dtype(), y.shape(), y.dtype())?;
    dispatch_float!(y.dtype(), T => {
        softmax_grad_lanes::<T>(dy.as_slice()?, y.as_slice()?, g.as_slice_mut()?, lanes, inv_t, log, req[0]);
        Ok(())
    }, _ => Err(float_error(op, "output", y.dtype())))
}

softmaxes! {
    /// Softmax along `axis`: `exp(x/t) / Σ exp(x/t)` with `t = temperature`.
    softmax(false) backward "From the output alone (T1): `dx = y · (dy − Σ dy·y) / t`.";

    /// Log-softmax along `axis`: `x/t − log Σ exp(x/t)` with `t = temperature`.
    log_softmax(true) backward "From the output alone (T1): `dx = (dy − exp(y) · Σ dy) / t`.";
}

/// `softmax`'s and `log_softmax`'s gradients as ops, which give them
/// second derivatives (`simpleop::composition`): the formulas of
/// `softmax_grad_lanes` from the output `y`.
fn softmax_gradient(p: &GradParts<'_>, op: &str, log: bool) -> Result<Vec<Option<NDArray>>> {
    let params = p.env.require_kwargs::<SoftmaxParams>(op)?;
    let (Some(y), Some(dy)) = (p.outputs.first(), p.out_grads.first()) else {
        return Err(Error::invalid(
            op,
            "gradient composition",
            "the output and its gradient",
        ));
    };
    let none = Attrs::new();
    let sum_along = |a: &NDArray| {
        let attrs = Attrs::new()
            .with("axis", params.axis)
            .with("keepdims", true);
        invoke("sum", &[a], &attrs)
    };
    let dx = if log {
        let total = sum_along(dy)?;
        let e = invoke("exp", &[y], &none)?;
        let spread = invoke("broadcast_mul", &[&e, &total], &none)?;
        invoke("elemwise_sub", &[dy, &spread], &none)?
    } else {
        let weighted = sum_along(&invoke("elemwise_mul", &[dy, y], &none)?)?;
        let centred = invoke("broadcast_sub", &[dy, &weighted], &none)?;
        invoke("elemwise_mul", &[y, &centred], &none)?
    };
    let dx = match params.temperature {
        Some(t) if t != 1.0 => {
            invoke("_mul_scalar", &[&dx], &Attrs::new().with("scalar", 1.0 / t))?
        }
        _ => dx,
    };
    Ok(vec![Some(dx)])
}

fn softmax_composition(p: &GradParts<'_>) -> Result<Vec<Option<NDArray>>> {
    softmax_gradient(p, "softmax", false)
}

fn log_softmax_composition(p: &GradParts<'_>) -> Result<Vec<Option<NDArray>>> {
    softmax_gradient(p, "log_softmax", true)
}

simpleop::gradient_composition!("softmax", softmax_composition);
simpleop::gradient_composition!("log_softmax", log_softmax_composition);

const SCE: &str = "softmax_cross_entropy";

/// `(N, C)` of `data` after checking `label` is `(N,)`.
fn sce_geometry(data: &Shape, label: &Shape) -> Result<(usize, usize)> {
    let &[n, c] = data.dims() else {
        return Err(Error::ShapeMismatch {
            op: SCE.into(),
            arg: "data".into(),
            expected: "a 2-D array (batch, classes)".into(),
            got: data.clone(),
        });
    };
    if label.dims() != [n] {
        return Err(Error::ShapeMismatch {
            op: SCE.into(),
            arg: "label".into(),
            expected: format!("({n},), one class index per row of `data` {data}"),
            got: label.clone(),
        });
    }
    Ok((n, c))
}

/// The class index of every row. Labels are rounded to the nearest
/// integer (MXNet truncates; the two agree on the integral labels it
/// expects, and rounding keeps a label that picked up float noise, such as
/// 2.9999999, on its class). Every label is checked before anything is
/// written, so a bad one leaves the outputs untouched.
/// What both kernels of `softmax_cross_entropy` read from its inputs:
/// `data`, `label`, the class count and the labels, checked.
struct SceOperands<'a, 'b> {
    data: &'a TBlob<'b>,
    label: &'a TBlob<'b>,
    classes: usize,
    labels: Vec<usize>,
}

/// Splits and checks `[data, label]`, for executors that do not run shape
/// inference first.
fn sce_operands<'a, 'b>(inputs: &'a [TBlob<'b>]) -> Result<SceOperands<'a, 'b>> {
    let [data, label] = inputs else {
        return Err(Error::Arity {
            op: SCE.into(),
            expected: 2,
            got: inputs.len(),
        });
    };
    let (_, classes) = sce_geometry(data.shape(), label.shape())?;
    let labels = sce_labels(label, classes)?;
    Ok(SceOperands {
        data,
        label,
        classes,
        labels,
    })
}

fn sce_labels(label: &TBlob<'_>, classes: usize) -> Result<Vec<usize>> {
    let values: Vec<f64> = dispatch_any!(label.dtype(), L => {
        label.as_slice::<L>()?.iter().map(|v| v.to_f64()).collect()
    });
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let r = v.round();
            if r.is_finite() && r >= 0.0 && r < classes as f64 {
                Ok(r as usize)
            } else {
                Err(Error::invalid(
                    SCE,
                    "label",
                    format!("element {i} is {v}, expected a class index in [0, {classes})"),
                ))
            }
        })
        .collect()
}

/// `Σ_i −log softmax(data_i)[label_i]`, accumulated in f64.
fn sce_loss<T: Float>(x: &[T], labels: &[usize], c: usize, scratch: &mut [T::Compute]) -> f64 {
    let one = <T::Compute as Float>::one();
    let mut total = 0.0f64;
    for (row, &l) in labels.iter().enumerate() {
        let (max, sum) = exp_lane::<T>(x, row * c, 1, one, scratch);
        let picked = x[row * c + l].to_compute();
        total += ((max - picked) + sum.ln()).to_f64();
    }
    total
}

/// `data_grad (=|+=) (softmax(data) − onehot(label)) · dy`.
fn sce_grad<T: Float>(
    x: &[T],
    labels: &[usize],
    c: usize,
    dy: T::Compute,
    g: &mut [T],
    req: OpReqType,
    scratch: &mut [T::Compute],
) {
    let one = <T::Compute as Float>::one();
    for (row, &l) in labels.iter().enumerate() {
        let (_, sum) = exp_lane::<T>(x, row * c, 1, one, scratch);
        let r = sum.recip();
        for (j, (d, &e)) in g[row * c..(row + 1) * c]
            .iter_mut()
            .zip(scratch.iter())
            .enumerate()
        {
            let p = e * r;
            let v = if j == l { p - one } else { p };
            req.assign(d, v * dy);
        }
    }
}

/// Zeroes a gradient for `WriteTo`/`WriteInplace`; leaves it for `AddTo`
/// (adding zero) and `Null`.
fn zero_grad(g: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
    if matches!(req, OpReqType::WriteTo | OpReqType::WriteInplace) {
        dispatch_any!(g.dtype(), L => {
            g.as_slice_mut::<L>()?.fill(<L as Element>::from_f64(0.0));
        });
    }
    Ok(())
}

/// Softmax cross-entropy of `data` (N, C) against class indices `label`
/// (N,), summed over the batch as MXNet does: the output has shape `(1,)`.
/// The gradient reaches `data` only; `label`'s gradient is zero.
#[simple_op(blob, inputs = 2, resources(temp))]
pub mod softmax_cross_entropy {
    use simpleop::prelude::*;

    /// `(1,)`; `data` must be 2-D and `label` hold one index per row.
    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        super::sce_geometry(&inputs[0], &inputs[1])?;
        Ok(Shape::new([1]))
    }

    /// `data`'s dtype, which must be a float; `label` may be any dtype.
    pub fn dtype(inputs: &[DType]) -> Result<DType> {
        if !inputs[0].is_float() {
            return Err(super::float_error(super::SCE, "data", inputs[0]));
        }
        Ok(inputs[0])
    }

    /// `out (=|+=) Σ_i (log Σ_j exp(data[i, j]) − data[i, label[i]])`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        env: &EnvArguments,
    ) -> Result<()> {
        let super::SceOperands {
            data: x,
            classes: c,
            labels,
            ..
        } = super::sce_operands(inputs)?;
        super::check_like(
            super::SCE,
            "output",
            out.shape(),
            out.dtype(),
            &Shape::new([1]),
            x.dtype(),
        )?;
        simpleop::dispatch_float!(x.dtype(), T => {
            let touched = if x.is_empty() { 0 } else { c };
            let mut scratch = env.temp_space::<<T as Float>::Compute>(super::SCE, touched)?;
            let loss = super::sce_loss::<T>(x.as_slice()?, &labels, c, &mut scratch);
            req.assign(&mut out.as_slice_mut::<T>()?[0], <<T as Float>::Compute as Element>::from_f64(loss));
            Ok(())
        }, _ => Err(super::float_error(super::SCE, "data", x.dtype())))
    }

    /// `data_grad = (softmax(data) − onehot(label)) · dy`; `label_grad` is
    /// zero (written as zeros for a write request).
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        env: &EnvArguments,
    ) -> Result<()> {
        let super::SceOperands {
            data,
            label,
            classes: c,
            labels,
        } = super::sce_operands(&x)?;
        super::check_like(
            super::SCE,
            "out_grad",
            dy.shape(),
            dy.dtype(),
            &Shape::new([1]),
            data.dtype(),
        )?;
        if req[0] != OpReqType::Null {
            let g = &mut grads[0];
            super::check_like(
                super::SCE,
                "data_grad",
                g.shape(),
                g.dtype(),
                data.shape(),
                data.dtype(),
            )?;
        }
        if req[1] != OpReqType::Null {
            let g = &grads[1];
            super::check_like(
                super::SCE,
                "label_grad",
                g.shape(),
                g.dtype(),
                label.shape(),
                label.dtype(),
            )?;
        }
        if req[0] != OpReqType::Null {
            simpleop::dispatch_float!(data.dtype(), T => {
                let d = dy.as_slice::<T>()?[0].to_compute();
                let touched = if data.is_empty() { 0 } else { c };
                let mut scratch = env.temp_space::<<T as Float>::Compute>(super::SCE, touched)?;
                super::sce_grad::<T>(data.as_slice()?, &labels, c, d, grads[0].as_slice_mut()?, req[0], &mut scratch);
            }, _ => return Err(super::float_error(super::SCE, "data", data.dtype())));
        }
        super::zero_grad(&mut grads[1], req[1])
    }
}
