//! Indexing with index arrays: [`embedding()`] (`Embedding`), [`take()`],
//! [`pick()`] and [`one_hot()`].
//!
//! Indices arrive as arrays of any dtype, floats included, as MXNet gives
//! them, and are converted as MXNet's kernels do: truncated toward zero
//! (`static_cast`), then clipped to the axis or wrapped around it
//! (`mode`). Gradients reach the data through a scatter-add accumulated in
//! f64; the indices get a zero gradient (MXNet's `MakeZeroGradNodes`).

use serde::{Deserialize, Serialize};
use simpleop::{
    Element, Error, Float, OpReqType, Result, Shape, TBlob, TBlobMut, dispatch_any, dispatch_float,
    simple_op,
};

use crate::common::{
    IndexMode, axis_of, bad_kwarg, bring_index, check_blob, dtype_attr, float_error, meta,
    meta_mut, shape_error, split_at_axis, store, truncate_index, values_f64, zero_grad,
};

/// How [`take()`] treats an index outside the axis (MXNet's `mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TakeMode {
    /// Clip to the nearest end (the default).
    #[default]
    Clip,
    /// Wrap around (Python's modulo).
    Wrap,
    /// An error naming the first bad index: every index must lie in
    /// `[0, len − 1]` (compared as given, before truncation).
    Raise,
}

/// How [`pick()`] treats an index outside the axis (MXNet's `mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PickMode {
    /// Clip to the nearest end (the default).
    #[default]
    Clip,
    /// Wrap around (Python's modulo).
    Wrap,
}

/// Keyword arguments of [`embedding()`] (MXNet's `EmbeddingParam`);
/// `input_dim` and `output_dim` are required.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct EmbeddingParams {
    /// The number of rows of `weight` (the vocabulary size).
    pub input_dim: usize,
    /// The number of columns of `weight` (the embedding size).
    pub output_dim: usize,
    /// MXNet's weight dtype, used there when the weight's is unknown; the
    /// output takes `weight`'s dtype (default `float32`).
    #[serde(default = "float32")]
    pub dtype: String,
    /// Only `False`: the weight gradient is dense.
    #[serde(default)]
    pub sparse_grad: bool,
}

fn float32() -> String {
    "float32".into()
}

/// Keyword arguments of [`take()`] (MXNet's `TakeParam`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct TakeParams {
    /// The axis of `a` to take along (default 0; negative counts from the
    /// end).
    pub axis: i64,
    /// `clip` (default), `wrap` or `raise`.
    pub mode: TakeMode,
}

/// Keyword arguments of [`pick()`] (MXNet's `PickParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct PickParams {
    /// The axis to pick along (default -1). MXNet's `None` is refused, as
    /// MXNet does.
    pub axis: Option<i64>,
    /// Keep the picked axis as size 1.
    pub keepdims: bool,
    /// `clip` (default) or `wrap`.
    pub mode: PickMode,
}

impl Default for PickParams {
    fn default() -> Self {
        PickParams {
            axis: Some(-1),
            keepdims: false,
            mode: PickMode::Clip,
        }
    }
}

/// Keyword arguments of [`one_hot()`] (MXNet's `OneHotParam`); `depth`
/// is required.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct OneHotParams {
    /// The length of the new last axis.
    pub depth: i64,
    /// The value at the index (default 1).
    #[serde(default = "one")]
    pub on_value: f64,
    /// The value elsewhere (default 0).
    #[serde(default)]
    pub off_value: f64,
    /// The output dtype (default `float32`; any of simpleop's dtypes).
    #[serde(default = "float32")]
    pub dtype: String,
}

fn one() -> f64 {
    1.0
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

/// `scratch` (f64 sums) written into `g` as `req` says.
fn assign_sums(g: &mut TBlobMut<'_>, sums: &[f64], req: OpReqType, op: &str) -> Result<()> {
    dispatch_float!(g.dtype(), T => {
        for (d, &v) in g.as_slice_mut::<T>()?.iter_mut().zip(sums) {
            req.assign(d, <<T as Float>::Compute as Element>::from_f64(v));
        }
        Ok(())
    }, _ => Err(float_error(op, "gradient", g.dtype())))
}

/// A float blob's elements as f64 (head gradients to scatter).
fn floats_f64(op: &str, b: &TBlob<'_>) -> Result<Vec<f64>> {
    dispatch_float!(b.dtype(), T => {
        Ok(b.as_slice::<T>()?.iter().map(|v| v.to_f64()).collect())
    }, _ => Err(float_error(op, "out_grad", b.dtype())))
}

/// Gathers `rows` of `row_len` elements of `src` into `out`, honouring
/// `req`: output row `r` (within block `h`) is source row `pick(h, r)`.
fn gather_rows(
    src: &TBlob<'_>,
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    row_len: usize,
    map: impl Fn(usize) -> usize,
    op: &str,
) -> Result<()> {
    dispatch_float!(src.dtype(), T => {
        let (xs, ys) = (src.as_slice::<T>()?, out.as_slice_mut::<T>()?);
        if row_len > 0 {
            for (r, row) in ys.chunks_mut(row_len).enumerate() {
                let from = map(r) * row_len;
                for (o, &v) in row.iter_mut().zip(&xs[from..from + row_len]) {
                    req.assign(o, v.to_compute());
                }
            }
        }
        Ok(())
    }, _ => Err(float_error(op, "data", src.dtype())))
}

// ---------------------------------------------------------------------------
// Embedding
// ---------------------------------------------------------------------------

const EMB: &str = "Embedding";

fn embedding_shape(inputs: &[Shape], p: &EmbeddingParams) -> Result<Shape> {
    if p.sparse_grad {
        return Err(bad_kwarg(
            EMB,
            "sparse_grad",
            "only False is supported: the weight gradient is dense",
        ));
    }
    dtype_attr(EMB, "dtype", &p.dtype)?;
    for (arg, v) in [("input_dim", p.input_dim), ("output_dim", p.output_dim)] {
        if v == 0 {
            return Err(bad_kwarg(EMB, arg, "expected at least 1, got 0"));
        }
    }
    let want = Shape::new([p.input_dim, p.output_dim]);
    if inputs[1] != want {
        return Err(shape_error(
            EMB,
            "weight",
            format!("{want}, (input_dim, output_dim)"),
            &inputs[1],
        ));
    }
    let mut dims = inputs[0].dims().to_vec();
    dims.push(p.output_dim);
    Ok(Shape::new(dims))
}

/// Each index's row of `weight`, clipped as MXNet's `TakeZeroAxisCPU<clip>`.
fn embedding_rows(data: &TBlob<'_>, p: &EmbeddingParams) -> Result<Vec<usize>> {
    Ok(values_f64(data)?
        .into_iter()
        .map(|v| bring_index(truncate_index(v), p.input_dim, IndexMode::Clip))
        .collect())
}

/// Maps indices to vectors (MXNet's `Embedding`): `out[..., :] =
/// weight[index, :]` for `data` holding indices of any dtype (floats, as
/// MXNet passes them), truncated and clipped to `[0, input_dim)`.
///
/// The weight gradient is dense, the head gradient's rows summed into the
/// rows they came from; `data` gets a zero gradient (MXNet refuses to
/// compute one).
#[simple_op(name = "Embedding", blob, inputs = ["data", "weight"], kwargs = EmbeddingParams, pattern = "injective")]
pub mod embedding {
    use super::EmbeddingParams;
    use simpleop::prelude::*;

    /// `data.shape + (output_dim,)`; `weight` is `(input_dim, output_dim)`.
    pub fn shape(inputs: &[Shape], p: &EmbeddingParams) -> Result<Shape> {
        super::embedding_shape(inputs, p)
    }

    /// `weight` is `(input_dim, output_dim)`, whatever `data` is.
    pub fn input_shapes(shapes: &mut [Option<Shape>], p: &EmbeddingParams) -> Result<()> {
        shapes[1].get_or_insert_with(|| Shape::new(vec![p.input_dim, p.output_dim]));
        Ok(())
    }

    /// `weight`'s dtype, a float; `data` may be any dtype.
    pub fn dtype(inputs: &[DType]) -> Result<DType> {
        crate::common::require_float(super::EMB, "weight", inputs[1])
    }

    /// `out (=|+=) weight[data]`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &EmbeddingParams,
    ) -> Result<()> {
        let (data, weight) = super::two(super::EMB, inputs)?;
        let shapes = [data.shape().clone(), weight.shape().clone()];
        let oshape = super::embedding_shape(&shapes, p)?;
        if req == OpReqType::Null {
            return Ok(());
        }
        crate::common::check_blob(
            super::EMB,
            "output",
            crate::common::meta_mut(out),
            &oshape,
            weight.dtype(),
        )?;
        let rows = super::embedding_rows(data, p)?;
        super::gather_rows(weight, out, req, p.output_dim, |r| rows[r], super::EMB)
    }

    /// `weight_grad[j] (=|+=) Σ dy[i]` over the `i` with index `j`;
    /// `data_grad` is zero.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        p: &EmbeddingParams,
    ) -> Result<()> {
        super::embedding_backward(&dy, &x, grads, req, p)
    }
}

fn embedding_backward(
    dy: &TBlob<'_>,
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &EmbeddingParams,
) -> Result<()> {
    let (data, weight) = two(EMB, inputs)?;
    let shapes = [data.shape().clone(), weight.shape().clone()];
    let oshape = embedding_shape(&shapes, p)?;
    check_blob(EMB, "out_grad", meta(dy), &oshape, weight.dtype())?;
    if req[0] != OpReqType::Null {
        check_blob(
            EMB,
            "data_grad",
            meta_mut(&grads[0]),
            data.shape(),
            data.dtype(),
        )?;
    }
    if req[1] != OpReqType::Null {
        check_blob(
            EMB,
            "weight_grad",
            meta_mut(&grads[1]),
            weight.shape(),
            weight.dtype(),
        )?;
        let rows = embedding_rows(data, p)?;
        let d = floats_f64(EMB, dy)?;
        let n = p.output_dim;
        let mut sums = vec![0.0f64; weight.len()];
        for (r, &j) in rows.iter().enumerate() {
            for c in 0..n {
                sums[j * n + c] += d[r * n + c];
            }
        }
        assign_sums(&mut grads[1], &sums, req[1], EMB)?;
    }
    zero_grad(&mut grads[0], req[0])
}

// ---------------------------------------------------------------------------
// take
// ---------------------------------------------------------------------------

const TAKE: &str = "take";

/// The output shape and `(before, len, after)` of `a` around the axis.
fn take_shape(a: &Shape, idx: &Shape, p: &TakeParams) -> Result<(Shape, (usize, usize, usize))> {
    if a.ndim() == 0 {
        return Err(shape_error(TAKE, "a", "at least 1 dimension", a));
    }
    let k = axis_of(TAKE, "axis", p.axis, a.ndim())?;
    let split = split_at_axis(a.dims(), k);
    if split.1 == 0 && idx.size() > 0 {
        return Err(shape_error(
            TAKE,
            "a",
            format!("a non-empty axis {} to take from", p.axis),
            a,
        ));
    }
    let mut dims = a.dims()[..k].to_vec();
    dims.extend_from_slice(idx.dims());
    dims.extend_from_slice(&a.dims()[k + 1..]);
    Ok((Shape::new(dims), split))
}

/// Each index brought into `0..len`; under `raise`, an error naming the
/// first index outside `[0, len − 1]`.
fn take_indices(idx: &TBlob<'_>, len: usize, mode: TakeMode) -> Result<Vec<usize>> {
    let values = values_f64(idx)?;
    if mode == TakeMode::Raise
        && let Some((i, v)) = values
            .iter()
            .enumerate()
            .find(|(_, v)| !(**v >= 0.0 && **v <= (len as f64 - 1.0)))
    {
        return Err(Error::invalid(
            TAKE,
            "indices",
            format!(
                "element {i} is {v}, outside [0, {}] (mode=raise)",
                len as i64 - 1
            ),
        ));
    }
    let mode = if mode == TakeMode::Clip {
        IndexMode::Clip
    } else {
        IndexMode::Wrap
    };
    Ok(values
        .into_iter()
        .map(|v| bring_index(truncate_index(v), len, mode))
        .collect())
}

/// Takes slices of `a` along `axis` at `indices` (MXNet's `take`): the
/// output is `a.shape[:axis] + indices.shape + a.shape[axis+1:]`. Indices
/// of any dtype are truncated, then clipped (`clip`), wrapped (`wrap`), or
/// must lie in `[0, len − 1]` (`raise`, an error otherwise).
///
/// `a`'s gradient sums the head gradient's slices into the slices they
/// came from; `indices` gets a zero gradient.
#[simple_op(blob, inputs = ["a", "indices"], kwargs = TakeParams, pattern = "injective")]
pub mod take {
    use super::TakeParams;
    use simpleop::prelude::*;

    /// `a.shape[:axis] + indices.shape + a.shape[axis+1:]`.
    pub fn shape(inputs: &[Shape], p: &TakeParams) -> Result<Shape> {
        Ok(super::take_shape(&inputs[0], &inputs[1], p)?.0)
    }

    /// `a`'s dtype, a float; `indices` may be any dtype.
    pub fn dtype(inputs: &[DType]) -> Result<DType> {
        crate::common::require_float(super::TAKE, "a", inputs[0])
    }

    /// `out (=|+=) a[..., indices, ...]`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &TakeParams,
    ) -> Result<()> {
        super::take_forward(inputs, out, req, p)
    }

    /// `a_grad` sums `dy`'s slices at their indices; `indices_grad` is zero.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        p: &TakeParams,
    ) -> Result<()> {
        super::take_backward(&dy, &x, grads, req, p)
    }
}

fn take_forward(
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &TakeParams,
) -> Result<()> {
    let (a, idx) = two(TAKE, inputs)?;
    let (oshape, (_, len, after)) = take_shape(a.shape(), idx.shape(), p)?;
    if req == OpReqType::Null {
        return Ok(());
    }
    check_blob(TAKE, "output", meta_mut(out), &oshape, a.dtype())?;
    let js = take_indices(idx, len, p.mode)?;
    let m = js.len();
    // output row r = (h, i): source row h·len + js[i], rows of `after`
    gather_rows(
        a,
        out,
        req,
        after,
        |r| (r / m.max(1)) * len + js[r % m.max(1)],
        TAKE,
    )
}

fn take_backward(
    dy: &TBlob<'_>,
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &TakeParams,
) -> Result<()> {
    let (a, idx) = two(TAKE, inputs)?;
    let (oshape, (before, len, after)) = take_shape(a.shape(), idx.shape(), p)?;
    check_blob(TAKE, "out_grad", meta(dy), &oshape, a.dtype())?;
    if req[1] != OpReqType::Null {
        check_blob(
            TAKE,
            "indices_grad",
            meta_mut(&grads[1]),
            idx.shape(),
            idx.dtype(),
        )?;
    }
    if req[0] != OpReqType::Null {
        check_blob(TAKE, "a_grad", meta_mut(&grads[0]), a.shape(), a.dtype())?;
        // MXNet's backward wraps under `raise` (the forward checked them)
        let mode = if p.mode == TakeMode::Clip {
            TakeMode::Clip
        } else {
            TakeMode::Wrap
        };
        let js = take_indices(idx, len, mode)?;
        let d = floats_f64(TAKE, dy)?;
        let m = js.len();
        let mut sums = vec![0.0f64; a.len()];
        for h in 0..before {
            for (i, &j) in js.iter().enumerate() {
                let (from, to) = ((h * m + i) * after, (h * len + j) * after);
                for t in 0..after {
                    sums[to + t] += d[from + t];
                }
            }
        }
        assign_sums(&mut grads[0], &sums, req[0], TAKE)?;
    }
    zero_grad(&mut grads[1], req[1])
}

// ---------------------------------------------------------------------------
// pick
// ---------------------------------------------------------------------------

const PICK: &str = "pick";

/// `data` as `(before, len, after)` around an axis.
type Split = (usize, usize, usize);

/// The output shape, the index shapes allowed, and the split of `data`.
fn pick_shape(data: &Shape, p: &PickParams) -> Result<(Shape, [Shape; 2], Split)> {
    let Some(axis) = p.axis else {
        return Err(bad_kwarg(
            PICK,
            "axis",
            "None is not supported (nor is it by MXNet): give an axis",
        ));
    };
    if data.ndim() == 0 {
        return Err(shape_error(PICK, "data", "at least 1 dimension", data));
    }
    let k = axis_of(PICK, "axis", axis, data.ndim())?;
    let split = split_at_axis(data.dims(), k);
    let mut kept = data.dims().to_vec();
    kept[k] = 1;
    let kept = Shape::new(kept);
    // MXNet's ReduceAxisShapeImpl: a 1-D input reduces to (1,)
    let dropped = if data.ndim() == 1 {
        Shape::new([1])
    } else {
        let mut d = data.dims().to_vec();
        d.remove(k);
        Shape::new(d)
    };
    if split.1 == 0 && split.0.saturating_mul(split.2) > 0 {
        return Err(shape_error(
            PICK,
            "data",
            format!("a non-empty axis {axis} to pick from"),
            data,
        ));
    }
    let out = if p.keepdims {
        kept.clone()
    } else {
        dropped.clone()
    };
    Ok((out, [kept, dropped], split))
}

fn pick_check(
    data: &Shape,
    index: &Shape,
    p: &PickParams,
) -> Result<(Shape, (usize, usize, usize))> {
    let (out, allowed, split) = pick_shape(data, p)?;
    if !allowed.contains(index) {
        return Err(shape_error(
            PICK,
            "index",
            format!(
                "{} or {}, one index per position of `data` {data} without the axis",
                allowed[1], allowed[0]
            ),
            index,
        ));
    }
    Ok((out, split))
}

fn pick_indices(index: &TBlob<'_>, len: usize, mode: PickMode) -> Result<Vec<usize>> {
    let mode = if mode == PickMode::Clip {
        IndexMode::Clip
    } else {
        IndexMode::Wrap
    };
    Ok(values_f64(index)?
        .into_iter()
        .map(|v| bring_index(truncate_index(v), len, mode))
        .collect())
}

/// Picks one element per position along `axis` (MXNet's `pick`, also
/// `choose_element_0index`): `out[i, j] = data[i, index[i, j], j]` for
/// the axis in the middle. Indices of any dtype are truncated, then
/// clipped (`clip`) or wrapped (`wrap`).
///
/// `data`'s gradient is the head gradient at the picked positions and 0
/// elsewhere; `index` gets a zero gradient.
#[simple_op(blob, inputs = ["data", "index"], kwargs = PickParams, alias = "choose_element_0index", pattern = "injective")]
pub mod pick {
    use super::PickParams;
    use simpleop::prelude::*;

    /// `data`'s shape without `axis` (with it as 1 under `keepdims`);
    /// `index` has either of those shapes.
    pub fn shape(inputs: &[Shape], p: &PickParams) -> Result<Shape> {
        Ok(super::pick_check(&inputs[0], &inputs[1], p)?.0)
    }

    /// `data`'s dtype, a float; `index` may be any dtype.
    pub fn dtype(inputs: &[DType]) -> Result<DType> {
        crate::common::require_float(super::PICK, "data", inputs[0])
    }

    /// `out (=|+=) data[..., index, ...]`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &PickParams,
    ) -> Result<()> {
        super::pick_forward(inputs, out, req, p)
    }

    /// `data_grad` is `dy` at the picked positions, 0 elsewhere;
    /// `index_grad` is zero.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        p: &PickParams,
    ) -> Result<()> {
        super::pick_backward(&dy, &x, grads, req, p)
    }
}

fn pick_forward(
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &PickParams,
) -> Result<()> {
    let (data, index) = two(PICK, inputs)?;
    let (oshape, (_, len, after)) = pick_check(data.shape(), index.shape(), p)?;
    if req == OpReqType::Null {
        return Ok(());
    }
    check_blob(PICK, "output", meta_mut(out), &oshape, data.dtype())?;
    let js = pick_indices(index, len, p.mode)?;
    // output element r = (h, t) reads (h·len + js[r])·after + t
    let after = after.max(1);
    gather_rows(
        data,
        out,
        req,
        1,
        |r| ((r / after) * len + js[r]) * after + r % after,
        PICK,
    )
}

fn pick_backward(
    dy: &TBlob<'_>,
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &PickParams,
) -> Result<()> {
    let (data, index) = two(PICK, inputs)?;
    let (oshape, (_, len, after)) = pick_check(data.shape(), index.shape(), p)?;
    check_blob(PICK, "out_grad", meta(dy), &oshape, data.dtype())?;
    if req[1] != OpReqType::Null {
        check_blob(
            PICK,
            "index_grad",
            meta_mut(&grads[1]),
            index.shape(),
            index.dtype(),
        )?;
    }
    if req[0] != OpReqType::Null {
        check_blob(
            PICK,
            "data_grad",
            meta_mut(&grads[0]),
            data.shape(),
            data.dtype(),
        )?;
        let js = pick_indices(index, len, p.mode)?;
        let d = floats_f64(PICK, dy)?;
        let after = after.max(1);
        let mut sums = vec![0.0f64; data.len()];
        for (r, &j) in js.iter().enumerate() {
            sums[((r / after) * len + j) * after + r % after] += d[r];
        }
        assign_sums(&mut grads[0], &sums, req[0], PICK)?;
    }
    zero_grad(&mut grads[1], req[1])
}

// ---------------------------------------------------------------------------
// one_hot
// ---------------------------------------------------------------------------

const ONE_HOT: &str = "one_hot";

fn one_hot_depth(p: &OneHotParams) -> Result<usize> {
    usize::try_from(p.depth).map_err(|_| {
        bad_kwarg(
            ONE_HOT,
            "depth",
            format!("expected a non-negative integer, got {}", p.depth),
        )
    })
}

/// One-hot vectors of `depth` for `indices` of any dtype (MXNet's
/// `one_hot`): `on_value` at the truncated index, `off_value` elsewhere;
/// an index outside `[0, depth)` gives a row of `off_value`. The output
/// dtype is `dtype` (default float32; integer dtypes too). The gradient
/// to `indices` is zero.
#[simple_op(blob, kwargs = OneHotParams, pattern = "injective")]
pub mod one_hot {
    use super::OneHotParams;
    use simpleop::prelude::*;

    /// `indices.shape + (depth,)`.
    pub fn shape(inputs: &[Shape], p: &OneHotParams) -> Result<Shape> {
        let mut dims = inputs[0].dims().to_vec();
        dims.push(super::one_hot_depth(p)?);
        Ok(Shape::new(dims))
    }

    /// The `dtype` argument.
    pub fn dtype(_inputs: &[DType], p: &OneHotParams) -> Result<DType> {
        crate::common::dtype_attr(super::ONE_HOT, "dtype", &p.dtype)
    }

    /// `out (=|+=) index == j ? on_value : off_value`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &OneHotParams,
    ) -> Result<()> {
        super::one_hot_forward(inputs, out, req, p)
    }

    /// `indices_grad` is zero.
    pub fn backward(
        _dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        crate::common::zero_grad(&mut grads[0], req[0])
    }
}

fn one_hot_forward(
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &OneHotParams,
) -> Result<()> {
    let [idx] = inputs else {
        return Err(Error::Arity {
            op: ONE_HOT.into(),
            expected: 1,
            got: inputs.len(),
        });
    };
    let depth = one_hot_depth(p)?;
    let dtype = dtype_attr(ONE_HOT, "dtype", &p.dtype)?;
    let mut dims = idx.shape().dims().to_vec();
    dims.push(depth);
    if req == OpReqType::Null {
        return Ok(());
    }
    check_blob(ONE_HOT, "output", meta_mut(out), &Shape::new(dims), dtype)?;
    let js: Vec<i64> = values_f64(idx)?.into_iter().map(truncate_index).collect();
    dispatch_any!(dtype, E => {
        // MXNet casts the values to the output dtype first
        let (on, off) = (E::from_f64(p.on_value).to_f64(), E::from_f64(p.off_value).to_f64());
        let ys = out.as_slice_mut::<E>()?;
        if depth > 0 {
            for (row, &j) in ys.chunks_mut(depth).zip(&js) {
                for (c, o) in row.iter_mut().enumerate() {
                    store(o, if c as i64 == j { on } else { off }, req);
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_truncate_then_clip_or_wrap() {
        let idx = |v: f64, mode| bring_index(truncate_index(v), 4, mode);
        assert_eq!(idx(2.9, IndexMode::Clip), 2);
        assert_eq!(idx(-0.5, IndexMode::Clip), 0);
        assert_eq!(idx(-1.0, IndexMode::Wrap), 3);
        assert_eq!(idx(9.0, IndexMode::Clip), 3);
        assert_eq!(idx(9.0, IndexMode::Wrap), 1);
        assert_eq!(idx(f64::NAN, IndexMode::Clip), 0);
    }
}
