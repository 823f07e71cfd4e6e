//! Sorting along an axis: [`sort()`] (the values) and [`argsort()`] (the
//! indices), MXNet's single-output forms.
//!
//! Both sort stably: equal values keep their order, in both directions,
//! which is what MXNet's CPU kernel (`std::sort`, an insertion sort for up
//! to 16 elements) gives on the short axes it is used on; for longer axes
//! MXNet's tie order is unspecified. `-0` and `+0` are equal. NaN has no
//! place in a strict order (MXNet's result with NaN is unspecified): here
//! it counts as larger than every number, last ascending and first
//! descending.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use simpleop::{
    DType, Element, Error, Float, OpReqType, Result, Shape, TBlob, TBlobMut, dispatch_any,
    dispatch_float, simple_op,
};

use crate::common::{
    axis_of, bad_kwarg, check_blob, dtype_attr, float_error, meta, meta_mut, split_at_axis, store,
};

/// Keyword arguments of [`sort()`] (MXNet's `SortParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct SortParams {
    /// The axis to sort along (default -1); `None` sorts the flattened
    /// array, giving a 1-D output.
    pub axis: Option<i64>,
    /// Ascending (the default) or descending.
    pub is_ascend: bool,
}

impl Default for SortParams {
    fn default() -> Self {
        SortParams {
            axis: Some(-1),
            is_ascend: true,
        }
    }
}

/// Keyword arguments of [`argsort()`] (MXNet's `ArgSortParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ArgSortParams {
    /// The axis to sort along (default -1); `None` sorts the flattened
    /// array, giving a 1-D output.
    pub axis: Option<i64>,
    /// Ascending (the default) or descending.
    pub is_ascend: bool,
    /// The dtype of the indices (default `float32`); it must hold every
    /// index exactly.
    pub dtype: String,
}

impl Default for ArgSortParams {
    fn default() -> Self {
        ArgSortParams {
            axis: Some(-1),
            is_ascend: true,
            dtype: "float32".into(),
        }
    }
}

/// The data as `outer × len × inner`, sorted along `len`, and the output
/// shape.
fn sort_geometry(
    op: &str,
    data: &Shape,
    axis: Option<i64>,
) -> Result<((usize, usize, usize), Shape)> {
    match axis {
        None => {
            let n = data.size();
            Ok(((1, n, 1), Shape::new([n])))
        }
        Some(a) => {
            if data.ndim() == 0 {
                return Err(crate::common::shape_error(
                    op,
                    "data",
                    "at least 1 dimension (or axis=None)",
                    data,
                ));
            }
            let k = axis_of(op, "axis", a, data.ndim())?;
            Ok((split_at_axis(data.dims(), k), data.clone()))
        }
    }
}

/// NaN above every number; ±0 equal.
fn ascending(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        (x, y) => x.cmp(&y),
    }
}

/// Calls `f(lane_start, stride, order)` for every lane with its stable
/// order (`order[i]` is the position along the axis of the `i`-th value).
fn for_each_sorted<T: Float>(
    x: &[T],
    (outer, len, inner): (usize, usize, usize),
    is_ascend: bool,
    mut f: impl FnMut(usize, usize, &[usize]),
) {
    // No lanes hold anything (and there may be 2⁴⁰ empty ones).
    if x.is_empty() {
        return;
    }
    let mut order: Vec<usize> = Vec::with_capacity(len);
    let mut keys: Vec<f64> = Vec::with_capacity(len);
    for o in 0..outer {
        for j in 0..inner {
            let start = o * len * inner + j;
            keys.clear();
            keys.extend((0..len).map(|i| x[start + i * inner].to_f64()));
            order.clear();
            order.extend(0..len);
            if is_ascend {
                order.sort_by(|&a, &b| ascending(keys[a], keys[b]));
            } else {
                order.sort_by(|&a, &b| ascending(keys[b], keys[a]));
            }
            f(start, inner, &order);
        }
    }
}

fn one<'a, 'b>(op: &str, inputs: &'a [TBlob<'b>]) -> Result<&'a TBlob<'b>> {
    match inputs {
        [x] => Ok(x),
        _ => Err(Error::Arity {
            op: op.into(),
            expected: 1,
            got: inputs.len(),
        }),
    }
}

fn sort_forward(
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &SortParams,
) -> Result<()> {
    let x = one("sort", inputs)?;
    let (lanes, oshape) = sort_geometry("sort", x.shape(), p.axis)?;
    if req == OpReqType::Null {
        return Ok(());
    }
    check_blob("sort", "output", meta_mut(out), &oshape, x.dtype())?;
    dispatch_float!(x.dtype(), T => {
        let (xs, ys) = (x.as_slice::<T>()?, out.as_slice_mut::<T>()?);
        for_each_sorted(xs, lanes, p.is_ascend, |start, stride, order| {
            for (i, &k) in order.iter().enumerate() {
                req.assign(&mut ys[start + i * stride], xs[start + k * stride].to_compute());
            }
        });
        Ok(())
    }, _ => Err(float_error("sort", "data", x.dtype())))
}

fn sort_backward(
    dy: &TBlob<'_>,
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &SortParams,
) -> Result<()> {
    if req[0] == OpReqType::Null {
        return Ok(());
    }
    let x = one("sort", inputs)?;
    let (lanes, oshape) = sort_geometry("sort", x.shape(), p.axis)?;
    check_blob("sort", "out_grad", meta(dy), &oshape, x.dtype())?;
    check_blob(
        "sort",
        "data_grad",
        meta_mut(&grads[0]),
        x.shape(),
        x.dtype(),
    )?;
    dispatch_float!(x.dtype(), T => {
        let (xs, d) = (x.as_slice::<T>()?, dy.as_slice::<T>()?);
        let g = grads[0].as_slice_mut::<T>()?;
        // a permutation: every element of the gradient is written once
        for_each_sorted(xs, lanes, p.is_ascend, |start, stride, order| {
            for (i, &k) in order.iter().enumerate() {
                req[0].assign(&mut g[start + k * stride], d[start + i * stride].to_compute());
            }
        });
        Ok(())
    }, _ => Err(float_error("sort", "data", x.dtype())))
}

/// Errors unless `dtype` holds every index below `len` exactly (MXNet's
/// check).
fn indices_fit(op: &str, dtype: DType, len: usize) -> Result<()> {
    let max_exact: u64 = match dtype {
        DType::F16 => 2048,
        DType::BF16 => 256,
        DType::U8 => 255,
        DType::F32 => 1 << 24,
        DType::I32 => i32::MAX as u64,
        _ => u64::MAX,
    };
    if len > 0 && (len - 1) as u64 > max_exact {
        return Err(bad_kwarg(
            op,
            "dtype",
            format!(
                "{dtype} cannot hold the index {} exactly; use a wider dtype",
                len - 1
            ),
        ));
    }
    Ok(())
}

fn argsort_forward(
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &ArgSortParams,
) -> Result<()> {
    let x = one("argsort", inputs)?;
    let (lanes, oshape) = sort_geometry("argsort", x.shape(), p.axis)?;
    let dtype = dtype_attr("argsort", "dtype", &p.dtype)?;
    indices_fit("argsort", dtype, lanes.1)?;
    if req == OpReqType::Null {
        return Ok(());
    }
    check_blob("argsort", "output", meta_mut(out), &oshape, dtype)?;
    dispatch_float!(x.dtype(), T => {
        let xs = x.as_slice::<T>()?;
        dispatch_any!(dtype, E => {
            let ys = out.as_slice_mut::<E>()?;
            for_each_sorted(xs, lanes, p.is_ascend, |start, stride, order| {
                for (i, &k) in order.iter().enumerate() {
                    store(&mut ys[start + i * stride], k as f64, req);
                }
            });
        });
        Ok(())
    }, _ => Err(float_error("argsort", "data", x.dtype())))
}

/// Sorts along `axis` (MXNet's `sort`; `axis=None` sorts the flattened
/// array into a 1-D output). The gradient routes each head gradient
/// element back to the position its value came from (MXNet's
/// `_backward_topk`); the order is recomputed from the input, so the
/// gradient reads it (T2).
#[simple_op(blob, kwargs = SortParams)]
pub mod sort {
    use super::SortParams;
    use simpleop::prelude::*;

    /// `data`'s shape, or `(size,)` for `axis=None`.
    pub fn shape(inputs: &[Shape], p: &SortParams) -> Result<Shape> {
        Ok(super::sort_geometry("sort", &inputs[0], p.axis)?.1)
    }

    /// `out (=|+=)` the sorted values.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &SortParams,
    ) -> Result<()> {
        super::sort_forward(inputs, out, req, p)
    }

    /// `data_grad[order[i]] (=|+=) dy[i]` along each lane.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        p: &SortParams,
    ) -> Result<()> {
        super::sort_backward(&dy, &x, grads, req, p)
    }
}

/// The indices that sort `data` along `axis` (MXNet's `argsort`;
/// `axis=None` indexes the flattened array), as `dtype` (default float32,
/// integers too). The gradient is zero, as MXNet's.
#[simple_op(blob, kwargs = ArgSortParams)]
pub mod argsort {
    use super::ArgSortParams;
    use simpleop::prelude::*;

    /// `data`'s shape, or `(size,)` for `axis=None`; `dtype` must hold the
    /// largest index exactly.
    pub fn shape(inputs: &[Shape], p: &ArgSortParams) -> Result<Shape> {
        let (lanes, shape) = super::sort_geometry("argsort", &inputs[0], p.axis)?;
        let dtype = crate::common::dtype_attr("argsort", "dtype", &p.dtype)?;
        super::indices_fit("argsort", dtype, lanes.1)?;
        Ok(shape)
    }

    /// The `dtype` argument; `data` must be a float.
    pub fn dtype(inputs: &[DType], p: &ArgSortParams) -> Result<DType> {
        crate::common::require_float("argsort", "data", inputs[0])?;
        crate::common::dtype_attr("argsort", "dtype", &p.dtype)
    }

    /// `out (=|+=)` the sorting indices.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &ArgSortParams,
    ) -> Result<()> {
        super::argsort_forward(inputs, out, req, p)
    }

    /// Zero: the indices do not change under small perturbations.
    pub fn backward(
        _dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        crate::common::zero_grad(&mut grads[0], req[0])
    }
}

/// Keyword arguments of [`topk()`] (MXNet's `TopKParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct TopKParams {
    /// The axis searched (default -1); `None` searches the flattened array.
    pub axis: Option<i64>,
    /// How many elements to keep; below 1, all of them.
    pub k: i64,
    /// `indices` (the default), `value`, `both` (values and indices) or
    /// `mask` (1 where an element is kept).
    pub ret_typ: String,
    /// Smallest first; the default keeps the largest.
    pub is_ascend: bool,
    /// The dtype of the indices (default `float32`).
    pub dtype: String,
}

impl Default for TopKParams {
    fn default() -> Self {
        TopKParams {
            axis: Some(-1),
            k: 1,
            ret_typ: "indices".into(),
            is_ascend: false,
            dtype: "float32".into(),
        }
    }
}

const TOPK: &str = "topk";

/// What a topk returns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RetTyp {
    Indices,
    Value,
    Both,
    Mask,
}

fn ret_typ(p: &TopKParams) -> Result<RetTyp> {
    Ok(match p.ret_typ.as_str() {
        "indices" => RetTyp::Indices,
        "value" => RetTyp::Value,
        "both" => RetTyp::Both,
        "mask" => RetTyp::Mask,
        r => {
            return Err(bad_kwarg(
                TOPK,
                "ret_typ",
                format!("expected `indices`, `value`, `both` or `mask`, got `{r}`"),
            ));
        }
    })
}

/// MXNet keeps values and indices for `value` (showing the values) and
/// `both`.
fn topk_count(p: &TopKParams) -> usize {
    match ret_typ(p) {
        Ok(RetTyp::Value | RetTyp::Both) => 2,
        _ => 1,
    }
}

fn topk_visible(p: &TopKParams) -> usize {
    match ret_typ(p) {
        Ok(RetTyp::Both) => 2,
        _ => 1,
    }
}

/// The lanes, the number kept, and the shape of the kept values.
fn topk_geometry(data: &Shape, p: &TopKParams) -> Result<((usize, usize, usize), usize, Shape)> {
    let (lanes, full) = sort_geometry(TOPK, data, p.axis)?;
    let len = lanes.1;
    let k = match usize::try_from(p.k) {
        Ok(k) if k >= 1 => k,
        _ => len,
    };
    if k > len {
        return Err(bad_kwarg(
            TOPK,
            "k",
            format!("expected at most the {len} elements along the axis, got {k}"),
        ));
    }
    let mut dims = full.dims().to_vec();
    match p.axis {
        None => dims = vec![k],
        Some(a) => dims[axis_of(TOPK, "axis", a, data.ndim())?] = k,
    }
    Ok((lanes, k, Shape::new(dims)))
}

fn topk_forward(
    x: &TBlob<'_>,
    outs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    p: &TopKParams,
) -> Result<()> {
    let (lanes, k, _) = topk_geometry(x.shape(), p)?;
    let typ = ret_typ(p)?;
    let index_dtype = dtype_attr(TOPK, "dtype", &p.dtype)?;
    indices_fit(TOPK, index_dtype, lanes.1)?;
    let (outer, len, inner) = lanes;
    if x.is_empty() {
        return Ok(());
    }
    // The kept elements' lane offsets, `k` per lane, in lane order.
    let mut picks: Vec<(usize, usize, usize)> = Vec::with_capacity(outer * inner * k);
    dispatch_float!(x.dtype(), T => {
        for_each_sorted(x.as_slice::<T>()?, lanes, p.is_ascend, |start, stride, order| {
            picks.extend(order[..k].iter().map(|&j| (start, stride, j)));
        });
    }, _ => return Err(float_error(TOPK, "data", x.dtype())));
    // Output element `(o, i, j)` of a `(outer, k, inner)` result.
    let at = |n: usize| {
        let (lane, i) = (n / k, n % k);
        let (o, j) = (lane / inner, lane % inner);
        (o * k + i) * inner + j
    };
    match typ {
        RetTyp::Mask => dispatch_float!(x.dtype(), T => {
            let m = outs[0].as_slice_mut::<T>()?;
            if reqs[0] != OpReqType::AddTo {
                for v in m.iter_mut() {
                    store(v, 0.0, reqs[0]);
                }
            }
            for &(start, stride, j) in &picks {
                store(&mut m[start + j * stride], 1.0, reqs[0]);
            }
        }, _ => return Err(float_error(TOPK, "data", x.dtype()))),
        RetTyp::Indices => dispatch_any!(index_dtype, E => {
            let ix = outs[0].as_slice_mut::<E>()?;
            for (n, &(_, _, j)) in picks.iter().enumerate() {
                store(&mut ix[at(n)], j as f64, reqs[0]);
            }
        }),
        RetTyp::Value | RetTyp::Both => {
            dispatch_float!(x.dtype(), T => {
                let xs = x.as_slice::<T>()?;
                let vals = outs[0].as_slice_mut::<T>()?;
                for (n, &(start, stride, j)) in picks.iter().enumerate() {
                    reqs[0].assign(&mut vals[at(n)], xs[start + j * stride].to_compute());
                }
            }, _ => return Err(float_error(TOPK, "data", x.dtype())));
            if reqs[1] != OpReqType::Null {
                dispatch_any!(index_dtype, E => {
                    let ix = outs[1].as_slice_mut::<E>()?;
                    for (n, &(_, _, j)) in picks.iter().enumerate() {
                        store(&mut ix[at(n)], j as f64, reqs[1]);
                    }
                });
            }
        }
    }
    let _ = len;
    Ok(())
}

/// `value` and `both` send each kept value's gradient back to where it
/// came from (the indices output says where); the indices' and the mask's
/// gradients are zero, as in MXNet.
fn topk_backward(
    dys: &[Option<TBlob<'_>>],
    ys: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    p: &TopKParams,
) -> Result<()> {
    let req = reqs[0];
    if req == OpReqType::Null {
        return Ok(());
    }
    let data = grads[0].shape().clone();
    let (lanes, k, kept) = topk_geometry(&data, p)?;
    let (_, len, inner) = lanes;
    let typ = ret_typ(p)?;
    let dtype = grads[0].dtype();
    if let (RetTyp::Value | RetTyp::Both, Some(dy)) = (typ, &dys[0]) {
        check_blob(TOPK, "out_grad", meta(dy), &kept, dtype)?;
        let ix = ys.get(1).ok_or_else(|| {
            Error::invalid(TOPK, "outputs", "the gradient reads the indices output")
        })?;
        if ix.shape() != &kept {
            return Err(crate::common::shape_error(
                TOPK,
                "indices",
                kept.to_string(),
                ix.shape(),
            ));
        }
    }
    dispatch_float!(dtype, T => {
        let g = grads[0].as_slice_mut::<T>()?;
        if req != OpReqType::AddTo {
            g.fill(T::from_f64(0.0));
        }
        if let (RetTyp::Value | RetTyp::Both, Some(dy), Some(ix)) = (typ, &dys[0], ys.get(1)) {
            let (d, ix) = (dy.as_slice::<T>()?, crate::common::values_f64(ix)?);
            if let Some(&j) = ix.iter().find(|&&j| !(j >= 0.0 && j < len as f64)) {
                return Err(Error::invalid(TOPK, "indices", format!("index {j} outside 0..{len}")));
            }
            for (n, (&dv, &j)) in d.iter().zip(&ix).enumerate() {
                // `n` is `(o, i, jj)` of the `(outer, k, inner)` values.
                let (o, jj) = (n / (k * inner), n % inner);
                let at = (o * len + j as usize) * inner + jj;
                let v = g[at].to_f64() + dv.to_f64();
                g[at] = T::from_f64(v);
            }
        }
        Ok(())
    }, _ => Err(float_error(TOPK, "data", dtype)))
}

/// MXNet's `topk`: the `k` largest (or, `is_ascend`, smallest) elements
/// along `axis`, as indices, values, both, or a mask. With `value` the
/// indices are a hidden second output, which backward reads.
#[simple_op(
    blob,
    kwargs = TopKParams,
    outputs = super::topk_count,
    visible_outputs = super::topk_visible
)]
pub mod topk {
    use super::TopKParams;
    use simpleop::prelude::*;

    /// `k` along the axis for values and indices; `data`'s shape for the mask.
    pub fn shape(inputs: &[Shape], p: &TopKParams) -> Result<Vec<Shape>> {
        let (_, _, kept) = super::topk_geometry(&inputs[0], p)?;
        Ok(match super::ret_typ(p)? {
            super::RetTyp::Mask => vec![inputs[0].clone()],
            super::RetTyp::Indices => vec![kept],
            _ => vec![kept.clone(), kept],
        })
    }

    /// Values and masks take `data`'s dtype; indices take `dtype`.
    pub fn dtype(inputs: &[DType], p: &TopKParams) -> Result<Vec<DType>> {
        let index = crate::common::dtype_attr("topk", "dtype", &p.dtype)?;
        Ok(match super::ret_typ(p)? {
            super::RetTyp::Mask => vec![inputs[0]],
            super::RetTyp::Indices => vec![index],
            _ => vec![inputs[0], index],
        })
    }

    /// Sorts each lane and keeps the first `k`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        outs: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &TopKParams,
    ) -> Result<()> {
        super::topk_forward(&inputs[0], outs, reqs, p)
    }

    /// Scatters the values' gradient back.
    pub fn backward(
        dys: OutGrads<&[Option<TBlob<'_>>]>,
        ys: OutValues<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &TopKParams,
    ) -> Result<()> {
        super::topk_backward(&dys, &ys, grads, reqs, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_sorts_last_ascending_and_zeros_tie() {
        let mut v = [2.0, f64::NAN, -0.0, 0.0, -1.0];
        v.sort_by(|a, b| ascending(*a, *b));
        assert_eq!(v[0], -1.0);
        assert!(v[1] == 0.0 && v[1].is_sign_negative() && v[2] == 0.0 && v[2].is_sign_positive());
        assert!(v[4].is_nan());
    }
}
