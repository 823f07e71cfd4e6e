//! MXNet's loss heads: [`softmax_output()`] (`SoftmaxOutput`, also
//! `Softmax`) and the regression outputs [`linear_regression_output()`],
//! [`logistic_regression_output()`] and [`mae_regression_output()`].
//!
//! A loss head's forward is a plain function of `data` (softmax, identity,
//! sigmoid), and its gradient is the gradient *of the loss it stands for*:
//! it ignores the head gradient and gives, for example,
//! `(softmax(data) − one_hot(label)) · grad_scale`. So these gradients are
//! not the derivatives of the forward, by design, and the gradient checker
//! does not apply to them; `tests/tests/ops_layers.rs` checks them against
//! their formulas for every dtype and request type instead. `label` gets a
//! zero gradient.

use serde::{Deserialize, Serialize};
use simpleop::{
    Element, Error, Float, OpReqType, Result, Shape, TBlob, TBlobMut, dispatch_float, simple_op,
};

use crate::common::{
    bad_kwarg, check_blob, float_error, meta, meta_mut, require_same_dtype, shape_error,
    truncate_index, values_f64, zero_grad,
};

/// How [`softmax_output()`] divides its gradient (MXNet's `normalization`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Normalization {
    /// Not at all (the default).
    #[default]
    Null,
    /// By the number of labels (the batch size for 2-D data); with
    /// `multi_output`, by the batch size times the spatial size.
    Batch,
    /// By the number of labels that are not `ignore_label` (at least 1).
    Valid,
}

/// Keyword arguments of [`softmax_output()`] (MXNet's
/// `SoftmaxOutputParam`). The float fields are used as f32, MXNet's
/// `float`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct SoftmaxOutputParams {
    /// Scales the gradient (default 1).
    pub grad_scale: f64,
    /// The label whose rows get a zero gradient under `use_ignore`, and
    /// which `normalization=valid` does not count (default -1).
    pub ignore_label: f64,
    /// Softmax along axis 1 of `(N, C, d2, ...)` data, with labels
    /// `(N, d2, ...)`.
    pub multi_output: bool,
    /// Give rows labelled `ignore_label` a zero gradient.
    pub use_ignore: bool,
    /// Softmax along the last axis, whatever the data's rank, with labels
    /// of the data's shape without its last axis.
    pub preserve_shape: bool,
    /// `null`, `batch` or `valid`.
    pub normalization: Normalization,
    /// Multiply the gradient by the head gradient (see the op's notes).
    pub out_grad: bool,
    /// Label smoothing in `[0, 1]`: the target is `1 − α` for the label and
    /// `α / (C − 1)` elsewhere.
    pub smooth_alpha: f64,
}

impl Default for SoftmaxOutputParams {
    fn default() -> Self {
        SoftmaxOutputParams {
            grad_scale: 1.0,
            ignore_label: -1.0,
            multi_output: false,
            use_ignore: false,
            preserve_shape: false,
            normalization: Normalization::Null,
            out_grad: false,
            smooth_alpha: 0.0,
        }
    }
}

const SO: &str = "SoftmaxOutput";

/// An f32 attribute (MXNet's `float`) widened back to f64.
fn f32_attr(v: f64) -> f64 {
    f64::from(v as f32)
}

/// The data as `outer × classes × inner`, softmax along `classes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lanes {
    outer: usize,
    classes: usize,
    inner: usize,
}

/// What the gradient compares the output with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// `label` has `data`'s shape and holds probabilities.
    Probabilities,
    /// `label` holds one class index per lane (`outer · inner` of them).
    Classes,
}

/// Checks the kwargs and the shapes; the softmax lanes and the target.
fn so_geometry(data: &Shape, label: &Shape, p: &SoftmaxOutputParams) -> Result<(Lanes, Target)> {
    let dims = data.dims();
    if dims.len() < 2 {
        return Err(shape_error(
            SO,
            "data",
            "at least 2 dimensions (batch, classes, ...)",
            data,
        ));
    }
    let alpha = f32_attr(p.smooth_alpha);
    if !(0.0..=1.0).contains(&alpha) {
        return Err(bad_kwarg(
            SO,
            "smooth_alpha",
            format!("expected a number in [0, 1], got {}", p.smooth_alpha),
        ));
    }
    if !f32_attr(p.grad_scale).is_finite() {
        return Err(bad_kwarg(
            SO,
            "grad_scale",
            format!("expected a finite number, got {}", p.grad_scale),
        ));
    }
    let size = |d: &[usize]| d.iter().fold(1usize, |n, &v| n.saturating_mul(v));
    let lanes = if p.multi_output {
        Lanes {
            outer: dims[0],
            classes: dims[1],
            inner: size(&dims[2..]),
        }
    } else if p.preserve_shape {
        Lanes {
            outer: size(&dims[..dims.len() - 1]),
            classes: dims[dims.len() - 1],
            inner: 1,
        }
    } else {
        Lanes {
            outer: dims[0],
            classes: size(&dims[1..]),
            inner: 1,
        }
    };
    if label == data {
        return Ok((lanes, Target::Probabilities));
    }
    let ok = if p.multi_output {
        if alpha != 0.0 {
            return Err(bad_kwarg(
                SO,
                "smooth_alpha",
                "label smoothing with multi_output=True is refused: MXNet 1.9.1 ignores smooth_alpha there",
            ));
        }
        let (n, s) = (dims[0], lanes.inner);
        let mut spatial = vec![n];
        spatial.extend_from_slice(&dims[2..]);
        let mut keep = dims.to_vec();
        keep[1] = 1;
        let shapes = [Shape::new([n, s]), Shape::new(spatial), Shape::new(keep)];
        if shapes.contains(label) {
            Ok(())
        } else {
            Err(format!(
                "{}, {} or {} (one class index per position)",
                shapes[0], shapes[1], shapes[2]
            ))
        }
    } else {
        if !p.preserve_shape && dims.len() > 2 {
            return Err(shape_error(
                SO,
                "data",
                "2 dimensions, or multi_output=True (softmax along axis 1) or preserve_shape=True \
                 (along the last axis) for more: MXNet 1.9.1 flattens such data to (batch, rest) but \
                 takes labels of the data's shape without its last axis",
                data,
            ));
        }
        let want = Shape::new(&dims[..dims.len() - 1]);
        if *label == want {
            Ok(())
        } else {
            Err(format!(
                "{want} (one class index per row), or {data} (probabilities)"
            ))
        }
    };
    ok.map_err(|expected| shape_error(SO, "label", expected, label))?;
    if lanes.classes < 2 && alpha != 0.0 {
        return Err(bad_kwarg(
            SO,
            "smooth_alpha",
            "label smoothing needs at least 2 classes",
        ));
    }
    Ok((lanes, Target::Classes))
}

/// `out (=|+=) softmax(x)` along the lanes, computed in `T::Compute`.
fn so_forward<T: Float>(x: &[T], out: &mut [T], lanes: Lanes, req: OpReqType) {
    let (c, inner) = (lanes.classes, lanes.inner);
    let mut e = vec![<T::Compute as Float>::zero(); c];
    for o in 0..lanes.outer {
        for j in 0..inner {
            let at = |i: usize| (o * c + i) * inner + j;
            let mut max = <T::Compute as Float>::neg_infinity();
            for i in 0..c {
                max = max.max(x[at(i)].to_compute());
            }
            let mut sum = <T::Compute as Float>::zero();
            for (i, v) in e.iter_mut().enumerate() {
                *v = (x[at(i)].to_compute() - max).exp();
                sum += *v;
            }
            let r = sum.recip();
            for (i, &v) in e.iter().enumerate() {
                req.assign(&mut out[at(i)], v * r);
            }
        }
    }
}

/// MXNet's SoftmaxOutput gradient, without the head gradient; `dy` is
/// applied by the caller when `out_grad` is set.
fn so_gradient(
    y: &[f64],
    labels: &[f64],
    lanes: Lanes,
    target: Target,
    p: &SoftmaxOutputParams,
) -> Vec<f64> {
    let scale = f32_attr(p.grad_scale);
    if target == Target::Probabilities {
        return y.iter().zip(labels).map(|(o, l)| (o - l) * scale).collect();
    }
    let (c, inner) = (lanes.classes, lanes.inner);
    let alpha = f32_attr(p.smooth_alpha);
    let smooth = if alpha == 0.0 {
        0.0
    } else {
        f64::from(alpha as f32 / (c as f32 - 1.0))
    };
    let ignore = truncate_index(f32_attr(p.ignore_label));
    let mut g = vec![0.0; y.len()];
    for o in 0..lanes.outer {
        for j in 0..inner {
            let k = truncate_index(labels[o * inner + j]);
            let at = |i: usize| (o * c + i) * inner + j;
            if p.use_ignore && k == ignore {
                continue;
            }
            for i in 0..c {
                let t = if i as i64 == k { 1.0 - alpha } else { smooth };
                g[at(i)] = y[at(i)] - t;
            }
        }
    }
    let count = labels.len();
    let valid = match p.normalization {
        Normalization::Null => 1,
        Normalization::Batch if p.multi_output => lanes.outer,
        Normalization::Batch => count,
        Normalization::Valid => labels
            .iter()
            .filter(|&&l| truncate_index(l) != ignore)
            .count()
            .max(1),
    };
    // MXNet: grad_scale / (valid ? 1 : spatial) / count, in f32
    let spatial = if p.multi_output && p.normalization != Normalization::Valid {
        inner
    } else {
        1
    };
    let factor = f64::from(p.grad_scale as f32 / spatial as f32 / valid as f32);
    for v in &mut g {
        *v *= factor;
    }
    g
}

/// Softmax of `data` with MXNet's loss-head gradient (MXNet's
/// `SoftmaxOutput`, also `Softmax`).
///
/// Forward: softmax along axis 1 with `multi_output`, along the last axis
/// with `preserve_shape`, otherwise over each row of 2-D `data`.
/// Backward ignores the head gradient and gives
/// `(softmax − target) · grad_scale / n`, where the target is the one-hot
/// of the label (labels are truncated to integers, as MXNet's
/// `static_cast<int>`; a label outside the classes matches none), smoothed
/// to `1 − α` and `α / (C − 1)` by `smooth_alpha`; rows labelled
/// `ignore_label` get 0 under `use_ignore`; `n` is 1, the number of labels
/// (`batch`; with `multi_output` the batch size, and the spatial size
/// divides too, as in MXNet) or the number not `ignore_label` (`valid`).
/// A `label` of `data`'s shape is a probability target: `(softmax − label)
/// · grad_scale`, without normalisation. `label` gets a zero gradient.
///
/// Two deliberate differences from MXNet 1.9.1: `out_grad=True` multiplies
/// by the head gradient, as documented (MXNet 1.9.1 passes the output in
/// its place); data of 3 or more dimensions needs `multi_output` or
/// `preserve_shape`, and `smooth_alpha` with `multi_output` is refused
/// (MXNet flattens such data but reads labels of another shape, and ignores
/// the smoothing, respectively).
#[simple_op(name = "SoftmaxOutput", alias = "Softmax", blob, inputs = ["data", "label"], kwargs = SoftmaxOutputParams)]
pub mod softmax_output {
    use super::SoftmaxOutputParams;
    use simpleop::prelude::*;

    /// `data`'s shape; `label` is one index per softmax lane, or `data`'s
    /// shape.
    pub fn shape(inputs: &[Shape], p: &SoftmaxOutputParams) -> Result<Shape> {
        super::so_geometry(&inputs[0], &inputs[1], p)?;
        Ok(inputs[0].clone())
    }

    /// `data`'s dtype, a float; `label` may be of any dtype.
    pub fn dtype(inputs: &[DType]) -> Result<DType> {
        crate::common::require_float(super::SO, "data", inputs[0])
    }

    /// `out (=|+=) softmax(data)` along the lanes.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &SoftmaxOutputParams,
    ) -> Result<()> {
        super::so_run_forward(inputs, out, req, p)
    }

    /// `data_grad (=|+=) (softmax − target) · scale`, the head gradient
    /// ignored unless `out_grad`; `label_grad` is zero.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        y: OutValue<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        p: &SoftmaxOutputParams,
    ) -> Result<()> {
        super::so_run_backward(&dy, &y, &x, grads, req, p)
    }
}

fn two<'a, 'b>(op: &str, inputs: &'a [TBlob<'b>]) -> Result<(&'a TBlob<'b>, &'a TBlob<'b>)> {
    match inputs {
        [a, b] => Ok((a, b)),
        _ => Err(Error::Arity {
            op: op.into(),
            expected: 2,
            got: inputs.len(),
        }),
    }
}

fn so_run_forward(
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &SoftmaxOutputParams,
) -> Result<()> {
    let (x, label) = two(SO, inputs)?;
    let (lanes, _) = so_geometry(x.shape(), label.shape(), p)?;
    if req == OpReqType::Null {
        return Ok(());
    }
    check_blob(SO, "output", meta_mut(out), x.shape(), x.dtype())?;
    dispatch_float!(x.dtype(), T => {
        so_forward::<T>(x.as_slice()?, out.as_slice_mut()?, lanes, req);
        Ok(())
    }, _ => Err(float_error(SO, "data", x.dtype())))
}

/// Checks the gradient buffers the output heads write: `data_grad` like
/// `data`, `label_grad` like `label`, each unless its request is `Null`.
fn check_grads(
    op: &str,
    x: &TBlob<'_>,
    label: &TBlob<'_>,
    grads: &[TBlobMut<'_>],
    req: &[OpReqType],
) -> Result<()> {
    for (k, (arg, like)) in [("data_grad", x), ("label_grad", label)]
        .into_iter()
        .enumerate()
    {
        if req[k] != OpReqType::Null {
            check_blob(op, arg, meta_mut(&grads[k]), like.shape(), like.dtype())?;
        }
    }
    Ok(())
}

fn so_run_backward(
    dy: &TBlob<'_>,
    y: &TBlob<'_>,
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &SoftmaxOutputParams,
) -> Result<()> {
    let (x, label) = two(SO, inputs)?;
    let (lanes, target) = so_geometry(x.shape(), label.shape(), p)?;
    check_blob(SO, "output", meta(y), x.shape(), x.dtype())?;
    if p.out_grad {
        check_blob(SO, "out_grad", meta(dy), x.shape(), x.dtype())?;
    }
    check_grads(SO, x, label, grads, req)?;
    if req[0] != OpReqType::Null {
        let labels = values_f64(label)?;
        dispatch_float!(x.dtype(), T => {
            let ys: Vec<f64> = y.as_slice::<T>()?.iter().map(|v| v.to_f64()).collect();
            let g = so_gradient(&ys, &labels, lanes, target, p);
            let heads = if p.out_grad { Some(dy.as_slice::<T>()?) } else { None };
            let dx = grads[0].as_slice_mut::<T>()?;
            for (i, (d, v)) in dx.iter_mut().zip(g).enumerate() {
                let v = match heads {
                    Some(h) => v * h[i].to_f64(),
                    None => v,
                };
                req[0].assign(d, <<T as Float>::Compute as Element>::from_f64(v));
            }
        }, _ => return Err(float_error(SO, "data", x.dtype())));
    }
    zero_grad(&mut grads[1], req[1])
}

// ---------------------------------------------------------------------------
// Regression outputs
// ---------------------------------------------------------------------------

/// Keyword arguments of the regression outputs (MXNet's
/// `RegressionOutputParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct RegressionOutputParams {
    /// Scales the gradient (default 1; used as an f32, MXNet's `float`).
    pub grad_scale: f64,
}

impl Default for RegressionOutputParams {
    fn default() -> Self {
        RegressionOutputParams { grad_scale: 1.0 }
    }
}

/// Which regression head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Regression {
    Linear,
    Logistic,
    Mae,
}

/// `label` must have `data`'s first dimension and size (MXNet's rule:
/// `(N, 1)` data takes `(N,)` labels, for example).
fn regression_shape(op: &str, data: &Shape, label: &Shape) -> Result<Shape> {
    if data.ndim() == 0 {
        return Err(shape_error(op, "data", "at least 1 dimension", data));
    }
    if label.ndim() == 0 || label.dims()[0] != data.dims()[0] || label.size() != data.size() {
        return Err(shape_error(
            op,
            "label",
            format!("the first dimension and the size of `data` {data}"),
            label,
        ));
    }
    Ok(data.clone())
}

fn regression_forward(
    op: &str,
    kind: Regression,
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
) -> Result<()> {
    let (x, label) = two(op, inputs)?;
    regression_shape(op, x.shape(), label.shape())?;
    if req == OpReqType::Null {
        return Ok(());
    }
    check_blob(op, "output", meta_mut(out), x.shape(), x.dtype())?;
    dispatch_float!(x.dtype(), T => {
        let (xs, ys) = (x.as_slice::<T>()?, out.as_slice_mut::<T>()?);
        for (o, &v) in ys.iter_mut().zip(xs) {
            let v = v.to_compute();
            req.assign(o, if kind == Regression::Logistic { v.sigmoid() } else { v });
        }
        Ok(())
    }, _ => Err(float_error(op, "data", x.dtype())))
}

fn regression_backward(
    op: &str,
    kind: Regression,
    y: &TBlob<'_>,
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &RegressionOutputParams,
) -> Result<()> {
    let (x, label) = two(op, inputs)?;
    regression_shape(op, x.shape(), label.shape())?;
    require_same_dtype(op, "label", label.dtype(), x.dtype(), "data")?;
    check_blob(op, "output", meta(y), x.shape(), x.dtype())?;
    check_grads(op, x, label, grads, req)?;
    if req[0] != OpReqType::Null {
        // MXNet: grad_scale / (label.Size() / label.shape[0]), in f32
        let num_output = match label.shape().dims()[0] {
            0 => 1,
            rows => label.len() / rows,
        };
        let factor = f64::from(f32_attr(p.grad_scale) as f32 / num_output as f32);
        dispatch_float!(x.dtype(), T => {
            let (ys, ls) = (y.as_slice::<T>()?, label.as_slice::<T>()?);
            let dx = grads[0].as_slice_mut::<T>()?;
            for ((d, &o), &l) in dx.iter_mut().zip(ys).zip(ls) {
                let diff = o.to_f64() - l.to_f64();
                let g = match kind {
                    // MXNet's minus_sign: 1 above the label, -1 at or below
                    Regression::Mae => if diff > 0.0 { 1.0 } else { -1.0 },
                    _ => diff,
                };
                req[0].assign(d, <<T as Float>::Compute as Element>::from_f64(g * factor));
            }
        }, _ => return Err(float_error(op, "data", x.dtype())));
    }
    zero_grad(&mut grads[1], req[1])
}

macro_rules! regression_outputs {
    ($(
        $(#[$doc:meta])* $module:ident = $name:tt, $kind:ident,
        forward $fdoc:literal, backward $bdoc:literal;
    )*) => {$(
        $(#[$doc])*
        #[simple_op(name = $name, blob, inputs = ["data", "label"], kwargs = RegressionOutputParams)]
        pub mod $module {
            use super::{Regression, RegressionOutputParams};
            use simpleop::prelude::*;

            /// `data`'s shape; `label` has `data`'s first dimension and size.
            pub fn shape(inputs: &[Shape]) -> Result<Shape> {
                super::regression_shape($name, &inputs[0], &inputs[1])
            }

            /// `data`'s dtype, a float; `label` has the same dtype.
            pub fn dtype(inputs: &[DType]) -> Result<DType> {
                let d = crate::common::require_float($name, "data", inputs[0])?;
                crate::common::require_same_dtype($name, "label", inputs[1], d, "data")?;
                Ok(d)
            }

            #[doc = $fdoc]
            pub fn forward(inputs: &[TBlob<'_>], out: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
                super::regression_forward($name, Regression::$kind, inputs, out, req)
            }

            #[doc = $bdoc]
            pub fn backward(
                _dy: OutGrad<&TBlob<'_>>,
                y: OutValue<&TBlob<'_>>,
                x: Inputs<&[TBlob<'_>]>,
                grads: &mut [TBlobMut<'_>],
                req: &[OpReqType],
                p: &RegressionOutputParams,
            ) -> Result<()> {
                super::regression_backward($name, Regression::$kind, &y, &x, grads, req, p)
            }
        }
    )*};
}

regression_outputs! {
    /// Squared-loss head (MXNet's `LinearRegressionOutput`): the forward is
    /// `data`; the gradient ignores the head gradient and is
    /// `(out − label) · grad_scale / m`, `m` the number of outputs per
    /// sample (`label.size / label.shape[0]`). `label` gets 0.
    linear_regression_output = "LinearRegressionOutput", Linear,
        forward "`out (=|+=) data`.",
        backward "`data_grad (=|+=) (out − label) · grad_scale / m`; `label_grad` is zero.";

    /// Logistic-loss head (MXNet's `LogisticRegressionOutput`): the forward
    /// is `sigmoid(data)`; the gradient ignores the head gradient and is
    /// `(out − label) · grad_scale / m`, the binary cross-entropy's
    /// gradient through the sigmoid. `label` gets 0.
    logistic_regression_output = "LogisticRegressionOutput", Logistic,
        forward "`out (=|+=) sigmoid(data)`.",
        backward "`data_grad (=|+=) (out − label) · grad_scale / m`; `label_grad` is zero.";

    /// Absolute-loss head (MXNet's `MAERegressionOutput`): the forward is
    /// `data`; the gradient ignores the head gradient and is
    /// `±grad_scale / m`, `+` where `out > label` and `−` at or below it
    /// (MXNet's `minus_sign`, so a tie gives `−`). `label` gets 0.
    mae_regression_output = "MAERegressionOutput", Mae,
        forward "`out (=|+=) data`.",
        backward "`data_grad (=|+=) sign(out − label) · grad_scale / m` (−1 at a tie); `label_grad` is zero.";
}
