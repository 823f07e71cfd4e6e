//! Joining and splitting along an axis: [`concat()`] (`Concat`),
//! [`slice_channel()`] (`SliceChannel`/`split`), [`stack()`] and
//! [`add_n()`] (`add_n`/`ElementWiseSum`). The first three are copies of
//! contiguous blocks: an array seen as `outer × len × inner` around the
//! axis contributes `len × inner` elements per outer index.

use serde::{Deserialize, Serialize};
use simpleop::{
    Element, Float, OpReqType, Result, Shape, TBlob, TBlobMut, dispatch_any, dispatch_float,
    simple_op,
};

use crate::common::{axis_of, bad_kwarg, float_error, shape_error, split_at_axis};

/// `dst (=|+=) src` per `req`.
fn assign<E: Element>(dst: &mut [E], src: &[E], req: OpReqType) {
    match req {
        OpReqType::Null => {}
        OpReqType::WriteTo | OpReqType::WriteInplace => dst.copy_from_slice(src),
        OpReqType::AddTo => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = E::from_f64(d.to_f64() + s.to_f64());
            }
        }
    }
}

/// Where one part sits in the joined array: `outer` blocks of `total ×
/// inner` elements, the part's `len × inner` of each starting at `start ×
/// inner`.
#[derive(Clone, Copy)]
struct Block {
    outer: usize,
    inner: usize,
    total: usize,
    start: usize,
    len: usize,
}

impl Block {
    /// Writes the part `src` into the joined `dst`.
    fn join<E: Element>(self, src: &[E], dst: &mut [E], req: OpReqType) {
        let n = self.len * self.inner;
        if n == 0 {
            return;
        }
        for o in 0..self.outer {
            let at = (o * self.total + self.start) * self.inner;
            assign(&mut dst[at..at + n], &src[o * n..(o + 1) * n], req);
        }
    }
    /// Writes the part of the joined `src` into `dst`.
    fn part<E: Element>(self, src: &[E], dst: &mut [E], req: OpReqType) {
        let n = self.len * self.inner;
        if n == 0 {
            return;
        }
        for o in 0..self.outer {
            let at = (o * self.total + self.start) * self.inner;
            assign(&mut dst[o * n..(o + 1) * n], &src[at..at + n], req);
        }
    }
}

/// The blocks of parts with axis lengths `lens` joined at axis `k` of
/// `dims` (any part's dims).
fn blocks(dims: &[usize], k: usize, lens: &[usize]) -> Vec<Block> {
    let (outer, _, inner) = split_at_axis(dims, k);
    let total = lens.iter().sum();
    let mut start = 0;
    lens.iter()
        .map(|&len| {
            start += len;
            Block {
                outer,
                inner,
                total,
                start: start - len,
                len,
            }
        })
        .collect()
}

/// Joins `parts` into `out` along the blocks.
fn join_all(
    op: &str,
    parts: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    bl: &[Block],
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let dtype = out.dtype();
    dispatch_any!(dtype, E => {
        let dst = out.as_slice_mut::<E>()?;
        for (p, b) in parts.iter().zip(bl) {
            crate::common::require_same_dtype(op, "input", p.dtype(), dtype, "the output")?;
            b.join(p.as_slice::<E>()?, dst, req);
        }
    });
    Ok(())
}

/// Cuts `whole` into `parts` along the blocks; a missing part is zero
/// (an unread output's gradient).
fn part_all(
    op: &str,
    whole: &[Option<TBlob<'_>>],
    parts: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    bl: &[Block],
) -> Result<()> {
    for (k, p) in parts.iter_mut().enumerate() {
        let req = reqs[k];
        if req == OpReqType::Null {
            continue;
        }
        let src = &whole[k.min(whole.len() - 1)];
        dispatch_float!(p.dtype(), T => {
            let dst = p.as_slice_mut::<T>()?;
            match src {
                Some(s) => bl[k].part(s.as_slice::<T>()?, dst, req),
                None if req != OpReqType::AddTo => {
                    dst.fill(T::from_f64(0.0));
                }
                None => {}
            }
        }, _ => return Err(float_error(op, "gradient", p.dtype())));
    }
    Ok(())
}

/// Checks that `shapes` agree except along axis `k` (and have `ndim`
/// dimensions), naming input `i` on a mismatch.
fn agree_except(op: &str, shapes: &[Shape], k: Option<usize>) -> Result<()> {
    let first = &shapes[0];
    for (i, s) in shapes.iter().enumerate().skip(1) {
        let same = s.ndim() == first.ndim()
            && (0..s.ndim()).all(|d| Some(d) == k || s.dims()[d] == first.dims()[d]);
        if !same {
            let what = match k {
                Some(k) => format!("the shape of `arg0` {first} except along axis {k}"),
                None => format!("the shape of `arg0` {first}"),
            };
            return Err(shape_error(op, &format!("arg{i}"), what, s));
        }
    }
    Ok(())
}

/// The most inputs a `num_args` op takes: the names of more would be a
/// huge allocation for a hostile attribute.
const MAX_ARGS: usize = 1 << 16;

/// The argument names `arg0`, `arg1`, ... of a `num_args` op (at most
/// [`MAX_ARGS`]; [`some_args`] refuses more).
pub(crate) fn numbered(n: usize) -> Vec<String> {
    (0..n.min(MAX_ARGS)).map(|i| format!("arg{i}")).collect()
}

/// Between 1 and [`MAX_ARGS`] inputs.
pub(crate) fn some_args(op: &str, n: usize) -> Result<()> {
    if n == 0 || n > MAX_ARGS {
        return Err(bad_kwarg(
            op,
            "num_args",
            format!("expected 1 to {MAX_ARGS} inputs, got {n}"),
        ));
    }
    Ok(())
}

const CONCAT: &str = "Concat";
const SPLIT: &str = "SliceChannel";
const STACK: &str = "stack";
const ADD_N: &str = "add_n";

/// Keyword arguments of [`concat()`] (MXNet's `ConcatParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ConcatParams {
    /// The number of inputs.
    pub num_args: usize,
    /// The axis joined along (default 1; negative counts from the end).
    pub dim: i64,
}

impl Default for ConcatParams {
    fn default() -> Self {
        ConcatParams {
            num_args: 1,
            dim: 1,
        }
    }
}

pub(crate) fn concat_arguments(p: &ConcatParams) -> Vec<String> {
    numbered(p.num_args)
}

/// Axis and per-input lengths of a concat.
fn concat_axis(op: &str, shapes: &[Shape], p: &ConcatParams) -> Result<(usize, Vec<usize>)> {
    some_args(op, p.num_args)?;
    some_args(op, shapes.len())?;
    let k = axis_of(op, "dim", p.dim, shapes[0].ndim())?;
    agree_except(op, shapes, Some(k))?;
    Ok((k, shapes.iter().map(|s| s.dims()[k]).collect()))
}

/// The output shape of a concat named `op` (`Concat`, `_rnn_param_concat`).
pub(crate) fn concat_shape(op: &str, inputs: &[Shape], p: &ConcatParams) -> Result<Shape> {
    let (k, lens) = concat_axis(op, inputs, p)?;
    let mut dims = inputs[0].dims().to_vec();
    dims[k] = lens.iter().sum();
    Ok(Shape::new(dims))
}

/// The forward kernel of a concat named `op`.
pub(crate) fn concat_forward(
    op: &str,
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &ConcatParams,
) -> Result<()> {
    let shapes: Vec<Shape> = inputs.iter().map(|b| b.shape().clone()).collect();
    let (k, lens) = concat_axis(op, &shapes, p)?;
    let bl = blocks(shapes[0].dims(), k, &lens);
    join_all(op, inputs, out, req, &bl)
}

/// The backward kernel of a concat named `op`: each input's gradient is
/// its piece of `dy`.
pub(crate) fn concat_backward(
    op: &str,
    dy: &TBlob<'_>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    p: &ConcatParams,
) -> Result<()> {
    let shapes: Vec<Shape> = grads.iter().map(|b| b.shape().clone()).collect();
    let (k, lens) = concat_axis(op, &shapes, p)?;
    check_dy(op, dy, &concat_shape(op, &shapes, p)?)?;
    let bl = blocks(shapes[0].dims(), k, &lens);
    let whole = vec![Some(dy.clone()); grads.len()];
    part_all(op, &whole, grads, reqs, &bl)
}

/// MXNet's `Concat` (`concat`): joins its `num_args` inputs along `dim`;
/// they agree on every other axis. The gradient cuts the output gradient
/// back into the inputs' pieces.
#[simple_op(
    blob,
    name = "Concat",
    alias = "concat",
    kwargs = ConcatParams,
    arguments = super::concat_arguments,
    pattern = "injective",
    linear
)]
pub mod concat {
    use super::ConcatParams;
    use simpleop::prelude::*;

    /// The inputs' shape with `dim` the sum of theirs.
    pub fn shape(inputs: &[Shape], p: &ConcatParams) -> Result<Shape> {
        super::concat_shape(super::CONCAT, inputs, p)
    }

    /// Any dtype; the inputs share one.
    pub fn dtype(inputs: &[DType], _p: &ConcatParams) -> Result<DType> {
        super::same_dtype(super::CONCAT, inputs)
    }

    /// Copies each input's blocks into place.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &ConcatParams,
    ) -> Result<()> {
        super::concat_forward(super::CONCAT, inputs, out, req, p)
    }

    /// Each input's gradient is its piece of `dy`.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &ConcatParams,
    ) -> Result<()> {
        super::concat_backward(super::CONCAT, &dy, grads, reqs, p)
    }
}

/// The output gradient has the output's shape.
fn check_dy(op: &str, dy: &TBlob<'_>, want: &Shape) -> Result<()> {
    if dy.shape() != want {
        return Err(shape_error(op, "out_grad", want.to_string(), dy.shape()));
    }
    Ok(())
}

/// One dtype for all inputs, any dtype.
pub(crate) fn same_dtype(op: &str, inputs: &[simpleop::DType]) -> Result<simpleop::DType> {
    let first = *inputs
        .first()
        .ok_or_else(|| bad_kwarg(op, "num_args", "expected at least 1 input"))?;
    for (i, &d) in inputs.iter().enumerate() {
        crate::common::require_same_dtype(op, &format!("arg{i}"), d, first, "arg0")?;
    }
    Ok(first)
}

/// Keyword arguments of [`slice_channel()`] (MXNet's `SliceChannelParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct SliceChannelParams {
    /// How many equal pieces.
    pub num_outputs: usize,
    /// The axis cut (default 1; negative counts from the end).
    pub axis: i64,
    /// Drops the axis from the outputs; it must then have `num_outputs`
    /// elements.
    pub squeeze_axis: bool,
}

impl Default for SliceChannelParams {
    fn default() -> Self {
        SliceChannelParams {
            num_outputs: 1,
            axis: 1,
            squeeze_axis: false,
        }
    }
}

fn split_count(p: &SliceChannelParams) -> usize {
    p.num_outputs.clamp(1, MAX_ARGS)
}

/// The axis, the piece length and the piece shape of a split of `data`.
fn split_geometry(data: &Shape, p: &SliceChannelParams) -> Result<(usize, usize, Shape)> {
    let n = p.num_outputs;
    if n == 0 || n > MAX_ARGS {
        return Err(bad_kwarg(
            SPLIT,
            "num_outputs",
            format!("expected 1 to {MAX_ARGS}, got {n}"),
        ));
    }
    let k = axis_of(SPLIT, "axis", p.axis, data.ndim())?;
    let len = data.dims()[k];
    if !len.is_multiple_of(n) {
        return Err(shape_error(
            SPLIT,
            "data",
            format!("axis {k} divisible by num_outputs = {n}"),
            data,
        ));
    }
    let mut dims = data.dims().to_vec();
    dims[k] = len / n;
    if p.squeeze_axis {
        if len != n {
            return Err(shape_error(
                SPLIT,
                "data",
                format!("axis {k} of length num_outputs = {n} (squeeze_axis)"),
                data,
            ));
        }
        dims.remove(k);
    }
    Ok((k, len / n, Shape::new(dims)))
}

/// MXNet's `SliceChannel` (`split`): cuts `data` into `num_outputs` equal
/// pieces along `axis`, dropping the axis with `squeeze_axis`. The
/// gradient joins the outputs' gradients; an output nothing reads
/// contributes zeros.
#[simple_op(
    blob,
    name = "SliceChannel",
    alias = "split",
    kwargs = SliceChannelParams,
    outputs = super::split_count,
    pattern = "injective",
    linear
)]
pub mod slice_channel {
    use super::SliceChannelParams;
    use simpleop::prelude::*;

    /// `num_outputs` pieces of one shape.
    pub fn shape(inputs: &[Shape], p: &SliceChannelParams) -> Result<Vec<Shape>> {
        let (_, _, piece) = super::split_geometry(&inputs[0], p)?;
        Ok(vec![piece; p.num_outputs])
    }

    /// Any dtype.
    pub fn dtype(inputs: &[DType], p: &SliceChannelParams) -> Result<Vec<DType>> {
        Ok(vec![inputs[0]; super::split_count(p)])
    }

    /// Copies each piece out.
    pub fn forward(
        inputs: &[TBlob<'_>],
        outs: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &SliceChannelParams,
    ) -> Result<()> {
        let data = &inputs[0];
        let (k, len, _) = super::split_geometry(data.shape(), p)?;
        let bl = super::blocks(data.shape().dims(), k, &vec![len; p.num_outputs]);
        super::part_any(data, outs, reqs, &bl)
    }

    /// `dx` joins the outputs' gradients.
    pub fn backward(
        dys: OutGrads<&[Option<TBlob<'_>>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &SliceChannelParams,
    ) -> Result<()> {
        let data = grads[0].shape().clone();
        let (k, len, piece) = super::split_geometry(&data, p)?;
        for dy in dys.iter().flatten() {
            super::check_dy(super::SPLIT, dy, &piece)?;
        }
        let bl = super::blocks(data.dims(), k, &vec![len; p.num_outputs]);
        super::join_grads(super::SPLIT, &dys, &mut grads[0], reqs[0], &bl)
    }
}

/// Cuts `whole` into `parts` (any dtype).
fn part_any(
    src: &TBlob<'_>,
    parts: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    bl: &[Block],
) -> Result<()> {
    dispatch_any!(src.dtype(), E => {
        let s = src.as_slice::<E>()?;
        for (k, p) in parts.iter_mut().enumerate() {
            if reqs[k] != OpReqType::Null {
                bl[k].part(s, p.as_slice_mut::<E>()?, reqs[k]);
            }
        }
    });
    Ok(())
}

/// Joins gradient pieces into `dx`; a missing piece is zero.
fn join_grads(
    op: &str,
    dys: &[Option<TBlob<'_>>],
    dx: &mut TBlobMut<'_>,
    req: OpReqType,
    bl: &[Block],
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    dispatch_float!(dx.dtype(), T => {
        let dst = dx.as_slice_mut::<T>()?;
        if req != OpReqType::AddTo && dys.iter().any(Option::is_none) {
            dst.fill(T::from_f64(0.0));
        }
        for (dy, b) in dys.iter().zip(bl) {
            if let Some(dy) = dy {
                b.join(dy.as_slice::<T>()?, dst, req);
            }
        }
        Ok(())
    }, _ => Err(float_error(op, "data", dx.dtype())))
}

/// Keyword arguments of [`stack()`] (MXNet's `StackParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct StackParams {
    /// The new axis's position in the output (default 0; negative counts
    /// from the end of the output).
    pub axis: i64,
    /// The number of inputs.
    pub num_args: usize,
}

impl Default for StackParams {
    fn default() -> Self {
        StackParams {
            axis: 0,
            num_args: 1,
        }
    }
}

fn stack_arguments(p: &StackParams) -> Vec<String> {
    numbered(p.num_args)
}

/// The new axis's position for inputs of `ndim` dimensions.
fn stack_axis(shapes: &[Shape], p: &StackParams) -> Result<usize> {
    some_args(STACK, p.num_args)?;
    some_args(STACK, shapes.len())?;
    agree_except(STACK, shapes, None)?;
    axis_of(STACK, "axis", p.axis, shapes[0].ndim() + 1)
}

/// MXNet's `stack`: joins `num_args` same-shape inputs along a new axis.
#[simple_op(blob, name = "stack", kwargs = StackParams, arguments = super::stack_arguments, pattern = "injective", linear)]
pub mod stack {
    use super::StackParams;
    use simpleop::prelude::*;

    /// The inputs' shape with a new axis of `num_args` at `axis`.
    pub fn shape(inputs: &[Shape], p: &StackParams) -> Result<Shape> {
        let k = super::stack_axis(inputs, p)?;
        let mut dims = inputs[0].dims().to_vec();
        dims.insert(k, inputs.len());
        Ok(Shape::new(dims))
    }

    /// Any dtype; the inputs share one.
    pub fn dtype(inputs: &[DType], _p: &StackParams) -> Result<DType> {
        super::same_dtype(super::STACK, inputs)
    }

    /// Input `i` fills index `i` of the new axis.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &StackParams,
    ) -> Result<()> {
        let shapes: Vec<Shape> = inputs.iter().map(|b| b.shape().clone()).collect();
        let k = super::stack_axis(&shapes, p)?;
        let bl = super::blocks(out.shape().dims(), k, &vec![1; inputs.len()]);
        super::join_all(super::STACK, inputs, out, req, &bl)
    }

    /// Input `i`'s gradient is index `i` of `dy` along the new axis.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &StackParams,
    ) -> Result<()> {
        let shapes: Vec<Shape> = grads.iter().map(|b| b.shape().clone()).collect();
        let k = super::stack_axis(&shapes, p)?;
        super::check_dy(super::STACK, &dy, &shape(&shapes, p)?)?;
        let bl = super::blocks(dy.shape().dims(), k, &vec![1; grads.len()]);
        let whole = vec![Some((*dy).clone()); grads.len()];
        super::part_all(super::STACK, &whole, grads, reqs, &bl)
    }
}

/// Keyword arguments of [`add_n()`] (MXNet's `ElementWiseSumParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct AddNParams {
    /// The number of inputs.
    pub num_args: usize,
}

impl Default for AddNParams {
    fn default() -> Self {
        AddNParams { num_args: 1 }
    }
}

fn add_n_arguments(p: &AddNParams) -> Vec<String> {
    numbered(p.num_args)
}

/// MXNet's `add_n` (`ElementWiseSum`): the elementwise sum of `num_args`
/// same-shape inputs, accumulated in f64 and rounded once. Every input's
/// gradient is `dy`.
#[simple_op(
    blob,
    name = "add_n",
    alias = "ElementWiseSum",
    kwargs = AddNParams,
    arguments = super::add_n_arguments,
    linear
)]
pub mod add_n {
    use super::AddNParams;
    use simpleop::prelude::*;

    /// The inputs' common shape.
    pub fn shape(inputs: &[Shape], p: &AddNParams) -> Result<Shape> {
        super::some_args(super::ADD_N, p.num_args)?;
        super::some_args(super::ADD_N, inputs.len())?;
        super::agree_except(super::ADD_N, inputs, None)?;
        Ok(inputs[0].clone())
    }

    /// `out (=|+=) Σ inputs`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        _p: &AddNParams,
    ) -> Result<()> {
        super::sum_forward(inputs, out, req)
    }

    /// `dx_i = dy`.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        _p: &AddNParams,
    ) -> Result<()> {
        let n = grads.len();
        let shapes: Vec<Shape> = grads.iter().map(|b| b.shape().clone()).collect();
        super::check_dy(super::ADD_N, &dy, &shape(&shapes, _p)?)?;
        let bl = vec![
            super::Block {
                outer: 1,
                inner: dy.len(),
                total: 1,
                start: 0,
                len: 1,
            };
            n
        ];
        let whole = vec![Some((*dy).clone()); n];
        super::part_all(super::ADD_N, &whole, grads, reqs, &bl)
    }
}

fn sum_forward(inputs: &[TBlob<'_>], out: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let dtype = out.dtype();
    dispatch_float!(dtype, T => {
        let mut acc = vec![0.0f64; out.len()];
        for (i, x) in inputs.iter().enumerate() {
            crate::common::require_same_dtype(ADD_N, &format!("arg{i}"), x.dtype(), dtype, "the output")?;
            for (a, v) in acc.iter_mut().zip(x.as_slice::<T>()?) {
                *a += v.to_f64();
            }
        }
        for (o, a) in out.as_slice_mut::<T>()?.iter_mut().zip(acc) {
            req.assign(o, <<T as Float>::Compute as Element>::from_f64(a));
        }
        Ok(())
    }, _ => Err(float_error(ADD_N, "arg0", dtype)))
}
