//! Arrays made from their arguments alone (source ops): [`zeros()`]
//! (`_zeros`), [`ones()`] (`_ones`) and [`full()`] (`_full`), with MXNet's
//! `shape`, `dtype` and `ctx` arguments. Any of simpleop's dtypes may be
//! asked for, integers included.

use serde::{Deserialize, Serialize};
use simpleop::{DType, Error, OpReqType, Result, Shape, TBlob, TBlobMut, dispatch_any, simple_op};

use crate::common::{check_blob, dtype_attr, meta_mut, store};

/// Keyword arguments of [`zeros()`] and [`ones()`] (MXNet's
/// `InitOpParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct InitParams {
    /// The output shape (default `()`). In a graph a 0 is an unknown
    /// dimension when a consumer's shape inference determines it (Gluon's
    /// RNN begin states `(layers, 0, hidden)`), else a dimension of size
    /// 0, as it always is eagerly.
    pub shape: Vec<usize>,
    /// The output dtype (default `float32`).
    pub dtype: String,
    /// MXNet's device attribute; accepted and ignored on the CPU.
    pub ctx: String,
}

impl Default for InitParams {
    fn default() -> Self {
        InitParams {
            shape: Vec::new(),
            dtype: "float32".into(),
            ctx: String::new(),
        }
    }
}

/// Keyword arguments of [`full()`] (MXNet's `InitOpWithScalarParam`);
/// `value` is required.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct FullParams {
    /// The output shape (default `()`); 0s as in [`InitParams::shape`].
    #[serde(default)]
    pub shape: Vec<usize>,
    /// The output dtype (default `float32`).
    #[serde(default = "float32")]
    pub dtype: String,
    /// MXNet's device attribute; accepted and ignored on the CPU.
    #[serde(default)]
    pub ctx: String,
    /// The value of every element, converted to `dtype` as MXNet's
    /// `DType(value)` (integers truncate and saturate).
    pub value: f64,
}

fn float32() -> String {
    "float32".into()
}

/// Writes `value` into every element of `out`, after checking it against
/// the arguments.
fn fill(
    op: &str,
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    (shape, dtype, value): (&[usize], &str, f64),
) -> Result<()> {
    if !inputs.is_empty() {
        return Err(Error::Arity {
            op: op.into(),
            expected: 0,
            got: inputs.len(),
        });
    }
    let dtype: DType = dtype_attr(op, "dtype", dtype)?;
    if req == OpReqType::Null {
        return Ok(());
    }
    let want = fitted(shape, out.shape());
    check_blob(op, "output", meta_mut(out), &want, dtype)?;
    dispatch_any!(dtype, E => {
        for o in out.as_slice_mut::<E>()? {
            store(o, value, req);
        }
    });
    Ok(())
}

/// The output shape `shape` asks for: in a graph a 0 in `shape` is an
/// unknown dimension that inference may have completed (MXNet's reading),
/// so an output that agrees with the known dimensions is accepted.
fn fitted(shape: &[usize], out: &Shape) -> Shape {
    let fits = shape.len() == out.ndim()
        && shape
            .iter()
            .zip(out.dims())
            .all(|(&want, &got)| want == 0 || want == got);
    Shape::new(if fits {
        out.dims().to_vec()
    } else {
        shape.to_vec()
    })
}

macro_rules! fill_ops {
    ($(
        $(#[$doc:meta])* $module:ident = $name:tt, $params:ident, |$p:ident| $value:expr;
    )*) => {$(
        $(#[$doc])*
        #[simple_op(name = $name, blob, inputs = 0, kwargs = $params)]
        pub mod $module {
            use super::$params;
            use simpleop::prelude::*;

            /// The `shape` argument.
            pub fn shape(_inputs: &[Shape], p: &$params) -> Result<Shape> {
                Ok(Shape::new(p.shape.clone()))
            }

            /// The `dtype` argument.
            pub fn dtype(_inputs: &[DType], p: &$params) -> Result<DType> {
                crate::common::dtype_attr($name, "dtype", &p.dtype)
            }

            /// Every element (=|+=) the value.
            pub fn forward(
                inputs: &[TBlob<'_>],
                out: &mut TBlobMut<'_>,
                req: OpReqType,
                $p: &$params,
            ) -> Result<()> {
                super::fill($name, inputs, out, req, (&$p.shape, &$p.dtype, $value))
            }
        }
    )*};
}

fill_ops! {
    /// An array of zeros of `shape` and `dtype` (MXNet's `_zeros`, what
    /// `mx.sym.zeros` writes).
    zeros = "_zeros", InitParams, |p| 0.0;

    /// An array of ones of `shape` and `dtype` (MXNet's `_ones`, what
    /// `mx.sym.ones` writes).
    ones = "_ones", InitParams, |p| 1.0;

    /// An array of `shape` and `dtype` whose every element is `value`
    /// (MXNet's `_full`, what `mx.sym.full` writes).
    full = "_full", FullParams, |p| p.value;
}
