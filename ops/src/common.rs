//! Helpers the layer, indexing, ordering and init families share: errors
//! that name op, argument and expectation, MXNet's index conversions, and
//! writes that honour a request for any dtype.

use simpleop::{DType, Element, Error, OpReqType, Result, Shape, TBlob, TBlobMut, dispatch_any};

/// A keyword argument `arg` of `op` is unusable, for `reason`.
pub(crate) fn bad_kwarg(op: &str, arg: &str, reason: impl Into<String>) -> Error {
    Error::BadKwarg {
        op: op.into(),
        arg: arg.into(),
        reason: reason.into(),
    }
}

/// Argument `arg` of `op` has dtype `got` where a float was expected.
pub(crate) fn float_error(op: &str, arg: &str, got: DType) -> Error {
    Error::DTypeMismatch {
        op: op.into(),
        arg: arg.into(),
        expected: "a float dtype (float32, float64, float16, bfloat16)".into(),
        got,
    }
}

/// Argument `arg` of `op` has shape `got` where `expected` was.
pub(crate) fn shape_error(op: &str, arg: &str, expected: impl Into<String>, got: &Shape) -> Error {
    Error::ShapeMismatch {
        op: op.into(),
        arg: arg.into(),
        expected: expected.into(),
        got: got.clone(),
    }
}

/// Errors unless `dtype` is a float, naming `arg`.
pub(crate) fn require_float(op: &str, arg: &str, dtype: DType) -> Result<DType> {
    if dtype.is_float() {
        Ok(dtype)
    } else {
        Err(float_error(op, arg, dtype))
    }
}

/// Errors unless `got` is `want` (the dtype of `of`), naming `arg`.
pub(crate) fn require_same_dtype(
    op: &str,
    arg: &str,
    got: DType,
    want: DType,
    of: &str,
) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::DTypeMismatch {
            op: op.into(),
            arg: arg.into(),
            expected: format!("{want} (the dtype of `{of}`)"),
            got,
        })
    }
}

/// A dtype attribute as MXNet writes it (`float32`, `int32`, ...), among
/// the dtypes simpleop has. MXNet's `int8` and `bool` are refused by name.
pub(crate) fn dtype_attr(op: &str, arg: &str, name: &str) -> Result<DType> {
    DType::from_name(name.trim()).ok_or_else(|| {
        bad_kwarg(
            op,
            arg,
            format!(
                "expected one of float32, float64, float16, bfloat16, int32, int64, uint8, got `{name}`"
            ),
        )
    })
}

/// Errors unless a blob has `shape` and `dtype`, naming `arg`: executors
/// other than the eager one might not check before calling a kernel.
pub(crate) fn check_blob(
    op: &str,
    arg: &str,
    (got_shape, got_dtype): (&Shape, DType),
    shape: &Shape,
    dtype: DType,
) -> Result<()> {
    if got_shape != shape {
        return Err(shape_error(op, arg, shape.to_string(), got_shape));
    }
    if got_dtype != dtype {
        return Err(Error::DTypeMismatch {
            op: op.into(),
            arg: arg.into(),
            expected: dtype.to_string(),
            got: got_dtype,
        });
    }
    Ok(())
}

/// The shape and dtype of a blob, for [`check_blob`].
pub(crate) fn meta<'a>(b: &'a TBlob<'_>) -> (&'a Shape, DType) {
    (b.shape(), b.dtype())
}

/// The shape and dtype of a writable blob, for [`check_blob`].
pub(crate) fn meta_mut<'a>(b: &'a TBlobMut<'_>) -> (&'a Shape, DType) {
    (b.shape(), b.dtype())
}

/// Every element of `b`, any dtype, as f64 (indices and labels).
pub(crate) fn values_f64(b: &TBlob<'_>) -> Result<Vec<f64>> {
    Ok(dispatch_any!(b.dtype(), L => {
        b.as_slice::<L>()?.iter().map(|v| v.to_f64()).collect()
    }))
}

/// MXNet's `static_cast<int64_t>` of an index held as a float: truncation
/// toward zero; NaN is 0 and infinities saturate, as Rust's `as` does.
#[inline]
pub(crate) fn truncate_index(v: f64) -> i64 {
    v as i64
}

/// How an index outside `0..len` is brought in (MXNet's `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IndexMode {
    /// To the nearest end.
    Clip,
    /// Modulo `len`, Python's sign rule.
    Wrap,
}

/// `j` brought into `0..len` (`len > 0`) under `mode`.
#[inline]
pub(crate) fn bring_index(j: i64, len: usize, mode: IndexMode) -> usize {
    let k = len as i64;
    match mode {
        IndexMode::Clip => j.clamp(0, k - 1) as usize,
        IndexMode::Wrap => j.rem_euclid(k) as usize,
    }
}

/// Writes `v` into `dst` as `req` says, for any element type (the integer
/// outputs of `one_hot`, `argsort` and the fill ops).
#[inline]
pub(crate) fn store<E: Element>(dst: &mut E, v: f64, req: OpReqType) {
    match req {
        OpReqType::Null => {}
        OpReqType::WriteTo | OpReqType::WriteInplace => *dst = E::from_f64(v),
        OpReqType::AddTo => *dst = E::from_f64(dst.to_f64() + v),
    }
}

/// Zeroes a gradient for `WriteTo`/`WriteInplace`; leaves it for `AddTo`
/// (adding zero) and `Null` (whose buffer may be a placeholder).
pub(crate) fn zero_grad(g: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
    if matches!(req, OpReqType::WriteTo | OpReqType::WriteInplace) {
        dispatch_any!(g.dtype(), L => {
            g.as_slice_mut::<L>()?.fill(<L as Element>::from_f64(0.0));
        });
    }
    Ok(())
}

/// Resolves a possibly negative axis of an `ndim`-D array, or errors
/// naming `op` and `arg`.
pub(crate) fn axis_of(op: &str, arg: &str, axis: i64, ndim: usize) -> Result<usize> {
    crate::reduce::resolve_axis(op, arg, axis, ndim, 0)
}

/// `dims[..k]`, `dims[k]`, `dims[k+1..]` as element counts.
pub(crate) fn split_at_axis(dims: &[usize], k: usize) -> (usize, usize, usize) {
    let prod = |d: &[usize]| d.iter().fold(1usize, |n, &v| n.saturating_mul(v));
    (prod(&dims[..k]), dims[k], prod(&dims[k + 1..]))
}
