//! A third-party op library built on `simpleop` alone.
//!
//! It shows the three ways of writing an op with `#[simple_op]`:
//!
//! * [`softplus()`]: an elementwise unary op without parameters whose
//!   gradient reads the input (T2) and is written in place over the output
//!   gradient;
//! * [`scaled_tanh()`]: an elementwise op with a `scalar` whose gradient
//!   reads the forward output (T1), in place both ways;
//! * [`row_scale()`]: a blob-form op with serde keyword arguments
//!   ([`RowScaleParams`]), its own shape function, dtype dispatch and
//!   explicit [`OpReqType`] handling;
//! * [`running_centre()`]: a blob-form op with two outputs and an aux
//!   state updated in training, like BatchNorm;
//! * [`sincos()`] and [`polar_to_xy()`]: elementwise ops whose forward
//!   returns a tuple (two outputs), with gradients reading every output's
//!   gradient (`OutGrads<[T; 2]>`).
//!
//! Every op gets a typed eager function (`softplus(&x)`), an `_into`
//! variant and an `_inplace` variant, and is callable by name through
//! [`simpleop::eager::invoke`]. A binary that only uses the ops by name
//! must call [`link`] once so this crate is linked.
//!
//! ```
//! use std::collections::HashMap;
//! use simpleop::symbol::{GradReq, Symbol};
//! use simpleop::{DType, NDArray};
//! use simpleop_examples::{RowScaleParams, row_scale, softplus};
//! # fn main() -> simpleop::Result<()> {
//! // Eagerly.
//! let x = NDArray::from_vec(vec![0.0f32, 1.0, -1.0, 2.0], [2, 2])?;
//! let y = row_scale(&softplus(&x)?, RowScaleParams { factor: 2.0 })?;
//! assert!((y.to_vec::<f32>()?[0] - 2.0 * std::f32::consts::LN_2).abs() < 1e-6);
//!
//! // In a graph, differentiated by the executor.
//! let xs = Symbol::var("x");
//! let ys = row_scale(&softplus(&xs)?, RowScaleParams { factor: 2.0 })?;
//! let args = HashMap::from([("x".to_string(), x)]);
//! let grads = HashMap::from([("x".to_string(), NDArray::zeros([2, 2], DType::F32))]);
//! let reqs = HashMap::from([("x".to_string(), GradReq::Write)]);
//! let mut exe = ys.bind(args, grads, reqs)?;
//! exe.forward(true)?;
//! exe.backward(&[])?;
//! // d/dx at x = 0 in row 0: factor · 1 · sigmoid(0) = 1.
//! assert!((exe.grad("x").unwrap().to_vec::<f32>()?[0] - 1.0).abs() < 1e-6);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

use serde::{Deserialize, Serialize};
use simpleop::{Element, Error, Float, OpReqType, Result, Shape, simple_op};

simpleop::link_ops!();

mod centre;
mod polar;
pub use centre::{RunningCentreParams, running_centre, running_centre_symbol};
pub use polar::{polar_to_xy, polar_to_xy_symbol, sincos, sincos_symbol};

/// Softplus, a smooth ReLU: `ln(1 + e^x)`.
#[simple_op(inplace = "OutIn")]
pub mod softplus {
    use simpleop::prelude::*;

    /// Above this, `ln(1 + e^x)` equals `x` to working precision (and `e^x`
    /// would overflow in f16/f32 soon after).
    const LINEAR_ABOVE: f64 = 20.0;

    /// `ln(1 + e^x)`, and `x` itself for large `x`. Both sides are plain
    /// values, so the branch is a blend and the kernel vectorises.
    pub fn forward<T: Float>(x: T) -> T {
        let soft = x.exp().ln_1p();
        if x > T::from_f64(LINEAR_ABOVE) {
            x
        } else {
            soft
        }
    }

    /// `dy · sigmoid(x)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * x.sigmoid()
    }
}

/// `tanh(scalar · x)`.
#[simple_op(scalar, inplace = "InOut, OutIn")]
pub mod scaled_tanh {
    use simpleop::prelude::*;

    /// `tanh(s x)`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        (s * x).tanh()
    }

    /// `dy · s · (1 − y²)`, from the output alone, so the forward may
    /// overwrite its input.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>, s: T) -> T {
        dy * (s * (T::one() - *y * *y))
    }
}

/// Keyword arguments of [`row_scale()`].
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct RowScaleParams {
    /// Row `i` is multiplied by `factor · (i + 1)`. Defaults to 1.
    pub factor: f64,
}

impl Default for RowScaleParams {
    fn default() -> Self {
        RowScaleParams { factor: 1.0 }
    }
}

/// The `(rows, cols)` of a 2-D shape, or an error naming `arg`.
fn rows_cols(arg: &str, shape: &Shape) -> Result<(usize, usize)> {
    match *shape.dims() {
        [rows, cols] => Ok((rows, cols)),
        _ => Err(Error::ShapeMismatch {
            op: "row_scale".into(),
            arg: arg.into(),
            expected: "a 2-D array (rows, cols)".into(),
            got: shape.clone(),
        }),
    }
}

/// `dst[i, j] (=|+=) src[i, j] · factor · (i + 1)`, computed in `T::Compute`
/// (f32 for the half types), honouring `req`.
fn scale_rows<T: Float>(src: &[T], dst: &mut [T], cols: usize, factor: f64, req: OpReqType) {
    if cols == 0 {
        return;
    }
    for (i, (s_row, d_row)) in src.chunks(cols).zip(dst.chunks_mut(cols)).enumerate() {
        let k = <T::Compute as Element>::from_f64(factor * (i + 1) as f64);
        for (d, &s) in d_row.iter_mut().zip(s_row) {
            req.assign(d, s.to_compute() * k);
        }
    }
}

/// Errors unless `suspect` has the shape and dtype of `reference` (the
/// argument the framework has already validated), naming both.
fn check_same_layout(
    suspect: (&str, &Shape, simpleop::DType),
    reference: (&str, &Shape, simpleop::DType),
) -> Result<()> {
    let ((arg, shape, dtype), (ref_arg, ref_shape, ref_dtype)) = (suspect, reference);
    if shape != ref_shape {
        return Err(Error::ShapeMismatch {
            op: "row_scale".into(),
            arg: arg.into(),
            expected: format!("{ref_shape} (the shape of `{ref_arg}`)"),
            got: shape.clone(),
        });
    }
    if dtype != ref_dtype {
        return Err(Error::DTypeMismatch {
            op: "row_scale".into(),
            arg: arg.into(),
            expected: format!("{ref_dtype} (the dtype of `{ref_arg}`)"),
            got: dtype,
        });
    }
    Ok(())
}

/// Scales the rows of the 2-D `src` (named `src_arg`) into `dst`, which has
/// the same shape and dtype, per `req`.
fn row_scale_blob(
    src_arg: &str,
    src: &simpleop::TBlob<'_>,
    dst: &mut simpleop::TBlobMut<'_>,
    factor: f64,
    req: OpReqType,
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let (_, cols) = rows_cols(src_arg, src.shape())?;
    simpleop::dispatch_float!(src.dtype(), T => {
        scale_rows::<T>(src.as_slice::<T>()?, dst.as_slice_mut::<T>()?, cols, factor, req);
        Ok(())
    }, _ => Err(Error::DTypeMismatch {
        op: "row_scale".into(),
        arg: src_arg.into(),
        expected: "a float dtype (float32, float64, float16, bfloat16)".into(),
        got: src.dtype(),
    }))
}

/// Multiplies row `i` of a 2-D array by `factor · (i + 1)`.
#[simple_op(blob, inputs = 1, kwargs = RowScaleParams)]
pub mod row_scale {
    use super::RowScaleParams;
    use simpleop::prelude::*;

    /// The output has the input's shape, which must be 2-D; `factor` must
    /// be finite.
    pub fn shape(inputs: &[Shape], p: &RowScaleParams) -> Result<Shape> {
        if !p.factor.is_finite() {
            return Err(Error::BadKwarg {
                op: "row_scale".into(),
                arg: "factor".into(),
                reason: format!("expected a finite number, got {}", p.factor),
            });
        }
        super::rows_cols("data", &inputs[0])?;
        Ok(inputs[0].clone())
    }

    /// `out[i, :] = data[i, :] · factor · (i + 1)`, honouring `req`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &RowScaleParams,
    ) -> Result<()> {
        let x = &inputs[0];
        if req != OpReqType::Null {
            // Eager calls validate `out`; other executors might not.
            super::check_same_layout(
                ("output", out.shape(), out.dtype()),
                ("data", x.shape(), x.dtype()),
            )?;
        }
        super::row_scale_blob("data", x, out, p.factor, req)
    }

    /// The op is linear, so `data_grad[i, :] = dy[i, :] · factor · (i + 1)`.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        p: &RowScaleParams,
    ) -> Result<()> {
        let g = &mut grads[0];
        if req[0] != OpReqType::Null {
            // The framework checks `data_grad` against `data` but not the
            // output gradient against the output.
            super::check_same_layout(
                ("out_grad", dy.shape(), dy.dtype()),
                ("data_grad", g.shape(), g.dtype()),
            )?;
        }
        super::row_scale_blob("out_grad", &dy, g, p.factor, req[0])
    }
}
