//! What a gradient check measures: the report, the tolerances per dtype,
//! and the element-wise comparison both checks share.

use crate::{DType, Error, NDArray, OpDef, OpReqType, Result};

/// What one check measured.
#[derive(Clone, Debug, PartialEq)]
pub struct GradReport {
    /// The op.
    pub op: String,
    /// One row per (dtype, request) tried: the worst error relative to the
    /// tolerance (≤ 1 passes).
    pub rows: Vec<(DType, OpReqType, f64)>,
}

pub(super) fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-6, 1e-6),
        DType::F32 => (1e-3, 1e-3),
        DType::F16 => (1e-2, 1e-2),
        _ => (4e-2, 4e-2),
    }
}

/// The error for element `index` of `arg`: `got` (analytic) is not
/// `want` (numeric, or the expected value).
pub(super) fn mismatch(
    op: &OpDef,
    arg: &str,
    dtype: DType,
    req: OpReqType,
    index: usize,
    (got, want): (f64, f64),
) -> Error {
    Error::GradCheck {
        op: op.name.into(),
        arg: arg.into(),
        dtype,
        req,
        index,
        analytic: got,
        numeric: want,
    }
}

pub(super) fn compare(
    op: &OpDef,
    arg: &str,
    dtype: DType,
    req: OpReqType,
    got: &[f64],
    want: &[f64],
    (rtol, atol): (f64, f64),
) -> Result<f64> {
    let mut worst = 0.0f64;
    for (index, (&a, &n)) in got.iter().zip(want).enumerate() {
        let ratio = (a - n).abs() / (atol + rtol * n.abs());
        // NaN ratios fail too.
        if ratio.is_nan() || ratio > 1.0 {
            return Err(mismatch(op, arg, dtype, req, index, (a, n)));
        }
        worst = worst.max(ratio);
    }
    Ok(worst)
}

/// Central differences of `loss` at `x` (f64 arrays), one gradient per
/// array, with a step relative to each element's size.
pub(super) fn central_differences(
    x: &[NDArray],
    loss: impl Fn(&[NDArray]) -> Result<f64>,
) -> Result<Vec<Vec<f64>>> {
    let mut grads = Vec::with_capacity(x.len());
    for i in 0..x.len() {
        let vals = x[i].to_f64_vec();
        let mut g = vec![0.0; vals.len()];
        for (j, gj) in g.iter_mut().enumerate() {
            let h = 1e-6 * vals[j].abs().max(1.0);
            let mut probe = x.to_vec();
            let mut plus = vals.clone();
            plus[j] += h;
            probe[i] = NDArray::from_slice(&plus, x[i].shape().clone())?;
            let lp = loss(&probe)?;
            let mut minus = vals.clone();
            minus[j] -= h;
            probe[i] = NDArray::from_slice(&minus, x[i].shape().clone())?;
            let lm = loss(&probe)?;
            *gj = (lp - lm) / (2.0 * h);
        }
        grads.push(g);
    }
    Ok(grads)
}
