//! Shape manipulation: `Reshape`, `Flatten`, `expand_dims` (copies under a
//! new shape), `transpose`, `SwapAxis`, `slice_axis` and `reverse` (strided
//! views).
//!
//! The copies and views share one kernel, `strided_copy`: a row-major walk
//! over a shape with arbitrary (possibly negative) input strides, used to
//! gather in the forward pass and to scatter in the backward pass.

use serde::{Deserialize, Serialize};
use simpleop::{Error, Float, OpReqType, Result, Shape, TBlob, TBlobMut, simple_op};

use crate::reduce::{axes_mask, check_layout, resolve_axis};

/// Keyword arguments of [`reshape()`] (MXNet's `ReshapeParam`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ReshapeParams {
    /// The new shape. Besides sizes, MXNet's codes: `0` copies the input
    /// dimension, `-1` infers one dimension from the rest, `-2` copies all
    /// remaining input dimensions, `-3` merges two input dimensions, `-4`
    /// splits one input dimension into the next two entries (one may be
    /// `-1`).
    pub shape: Vec<i64>,
    /// Apply the codes right to left.
    pub reverse: bool,
}

/// Keyword arguments of [`transpose()`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct TransposeParams {
    /// The permutation: output axis `i` is input axis `axes[i]` (negative
    /// counts from the end). Empty (the default) reverses the axes.
    pub axes: Vec<i64>,
}

/// Keyword arguments of [`expand_dims()`]; `axis` is required.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ExpandDimsParams {
    /// Where the new axis goes, in `-ndim-1..=ndim`.
    pub axis: i64,
}

/// Keyword arguments of [`slice_axis()`]; `axis` and `begin` are required.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct SliceAxisParams {
    /// The axis to slice (negative counts from the end).
    pub axis: i64,
    /// First index (negative counts from the end).
    pub begin: i64,
    /// One past the last index (negative counts from the end); `None` is
    /// the end of the axis.
    pub end: Option<i64>,
}

/// Keyword arguments of [`swap_axis()`] (MXNet's `SwapAxisParam`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct SwapAxisParams {
    /// The first axis (default 0; negative counts from the end).
    pub dim1: i64,
    /// The second axis (default 0; negative counts from the end).
    pub dim2: i64,
}

/// Keyword arguments of [`reverse()`]; `axis` is required.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ReverseParams {
    /// The axes to reverse (an int or a tuple; negative counts from the end).
    pub axis: Vec<i64>,
}

fn bad(op: &str, arg: &str, reason: String) -> Error {
    Error::BadKwarg {
        op: op.into(),
        arg: arg.into(),
        reason,
    }
}

// ---------------------------------------------------------------------------
// The strided kernel
// ---------------------------------------------------------------------------

/// `v` as an offset, saturated: shape rules also see shapes no array has
/// (whose views are never walked), and must not overflow on them.
fn to_isize(v: usize) -> isize {
    isize::try_from(v).unwrap_or(isize::MAX)
}

/// A row-major walk over `dims` yielding `start + Σ index[k] · strides[k]`.
#[derive(Clone, Debug, PartialEq)]
struct View {
    dims: Vec<usize>,
    strides: Vec<isize>,
    start: isize,
}

impl View {
    /// The identity view of a contiguous shape.
    fn contiguous(shape: &Shape) -> Self {
        View {
            dims: shape.dims().to_vec(),
            strides: shape.strides().iter().map(|&s| to_isize(s)).collect(),
            start: 0,
        }
    }

    fn len(&self) -> usize {
        // saturating as `Shape::size`: only real arrays' views are walked
        self.dims.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }

    /// Calls `f(k, offset)` for the `k`-th element of the walk.
    fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        let n = self.len();
        if n == 0 {
            return;
        }
        let nd = self.dims.len();
        let mut index = vec![0usize; nd];
        let mut offset = self.start;
        for k in 0..n {
            f(k, offset as usize);
            for a in (0..nd).rev() {
                index[a] += 1;
                offset += self.strides[a];
                if index[a] < self.dims[a] {
                    break;
                }
                offset -= self.strides[a] * self.dims[a] as isize;
                index[a] = 0;
            }
        }
    }

    /// The smallest and largest offsets the walk visits.
    fn span(&self) -> (isize, isize) {
        let mut lo = self.start;
        let mut hi = self.start;
        for (&d, &s) in self.dims.iter().zip(&self.strides) {
            let reach = s.saturating_mul(to_isize(d.max(1) - 1));
            if reach < 0 {
                lo = lo.saturating_add(reach);
            } else {
                hi = hi.saturating_add(reach);
            }
        }
        (lo, hi)
    }
}

/// Whether the view reads `src` (gather: `dst[k] = src[view[k]]`) or
/// writes `dst` (scatter: `dst[view[k]] = src[k]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Gather,
    Scatter,
}

/// Copies between `src` and `dst` through `view`, honouring `req`. In a
/// scatter that does not cover `dst`, the rest is zeroed under `WriteTo`
/// and left alone under `AddTo` (the gradient of a slice).
fn strided_copy(
    op: &str,
    view: &View,
    dir: Dir,
    src: &TBlob<'_>,
    dst: &mut TBlobMut<'_>,
    req: OpReqType,
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let (walked, dst_arg, src_arg) = match dir {
        Dir::Gather => (src.len(), "output", "data"),
        Dir::Scatter => (dst.len(), "data_grad", "out_grad"),
    };
    let (gathered, gathered_shape) = match dir {
        Dir::Gather => (dst.len(), dst.shape().clone()),
        Dir::Scatter => (src.len(), src.shape().clone()),
    };
    check_layout(
        op,
        dst_arg,
        dst.shape(),
        dst.dtype(),
        dst.len(),
        src.dtype(),
    )?;
    let (lo, hi) = view.span();
    if view.len() != gathered || (view.len() > 0 && (lo < 0 || hi as usize >= walked)) {
        return Err(Error::ShapeMismatch {
            op: op.into(),
            arg: src_arg.into(),
            expected: format!("{} element(s) covered by the view", view.len()),
            got: gathered_shape,
        });
    }
    simpleop::dispatch_float!(src.dtype(), T => {
        let xs = src.as_slice::<T>()?;
        let ys = dst.as_slice_mut::<T>()?;
        match dir {
            Dir::Gather => view.for_each(|k, i| req.assign(&mut ys[k], xs[i].to_compute())),
            Dir::Scatter => {
                if view.len() < ys.len() && req != OpReqType::AddTo {
                    ys.fill(T::zero());
                }
                view.for_each(|k, i| req.assign(&mut ys[i], xs[k].to_compute()));
            }
        }
        Ok(())
    }, _ => Err(Error::DTypeMismatch {
        op: op.into(),
        arg: src_arg.into(),
        expected: "a float dtype (float32, float64, float16, bfloat16)".into(),
        got: src.dtype(),
    }))
}

/// Copies `src` into `dst` element by element (same size, any shapes).
fn copy(op: &str, src: &TBlob<'_>, dst: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
    if req != OpReqType::Null && src.len() != dst.len() {
        return Err(Error::ShapeMismatch {
            op: op.into(),
            arg: "output".into(),
            expected: format!("{} element(s), as the source {}", src.len(), src.shape()),
            got: dst.shape().clone(),
        });
    }
    // The same dtype written whole: one slice copy (a reshape on the
    // training path was a twentieth of a step through the strided walk).
    if src.dtype() == dst.dtype()
        && matches!(req, OpReqType::WriteTo | OpReqType::WriteInplace)
        && src.dtype().is_float()
    {
        if src.byte_range() == dst.byte_range() {
            return Ok(());
        }
        simpleop::dispatch_float!(src.dtype(), T => {
            dst.as_slice_mut::<T>()?.copy_from_slice(src.as_slice::<T>()?);
            return Ok(());
        }, _ => {});
    }
    let view = View::contiguous(dst.shape());
    strided_copy(op, &view, Dir::Gather, src, dst, req)
}

// ---------------------------------------------------------------------------
// Shape rules
// ---------------------------------------------------------------------------

/// MXNet's `InferReshapeShape`: the new shape from the codes in `p.shape`.
fn reshape_shape(input: &Shape, p: &ReshapeParams) -> Result<Shape> {
    let mut walk = ReshapeWalk {
        input,
        spec: &p.shape,
        src: input.dims().to_vec(),
        s: 0,
        out: Vec::new(),
        infer: None,
    };
    let mut codes = p.shape.clone();
    if p.reverse {
        walk.src.reverse();
        codes.reverse();
    }
    let mut i = 0usize;
    while i < codes.len() {
        i += walk.step(&codes[i..])?;
    }
    let mut out = walk.infer_missing()?;
    if p.reverse {
        out.reverse();
    }
    let out = Shape::new(out);
    // Element counts checked: a count past usize is never equal to another.
    let size = input.checked_size();
    if size.is_none() || out.checked_size() != size {
        return Err(reshape_error(format!(
            "cannot reshape the input {input} ({}) to {out} ({})",
            elements(input),
            elements(&out)
        )));
    }
    Ok(out)
}

fn reshape_error(reason: String) -> Error {
    bad("Reshape", "shape", reason)
}

/// [`reshape_shape`]'s walk over the codes: the input dimensions it reads
/// (reversed under `reverse`, as the codes) and the output so far.
struct ReshapeWalk<'a> {
    input: &'a Shape,
    /// The codes as given, for messages.
    spec: &'a [i64],
    src: Vec<usize>,
    /// The next input dimension to read.
    s: usize,
    out: Vec<usize>,
    /// Where the `-1` dimension stands in `out`.
    infer: Option<usize>,
}

impl ReshapeWalk<'_> {
    /// Reads the next input dimension for the code `what`.
    fn next_src(&mut self, what: &str) -> Result<usize> {
        let d = self.src.get(self.s).copied().ok_or_else(|| {
            reshape_error(format!(
                "{:?}: `{what}` needs input dimension {} but the input {} has {}",
                self.spec,
                self.s,
                self.input,
                self.input.ndim()
            ))
        })?;
        self.s += 1;
        Ok(d)
    }

    /// Applies the code at the head of `codes`; returns how many codes it
    /// used (`-4` takes the two after it).
    fn step(&mut self, codes: &[i64]) -> Result<usize> {
        match codes[0] {
            0 => {
                let d = self.next_src("0")?;
                self.out.push(d);
            }
            -1 => {
                if self.infer.is_some() {
                    return Err(reshape_error(format!(
                        "{:?}: only one dimension can be -1",
                        self.spec
                    )));
                }
                self.infer = Some(self.out.len());
                self.out.push(1);
                self.s += 1;
            }
            -2 => {
                if let Some(rest) = self.src.get(self.s..) {
                    self.out.extend_from_slice(rest);
                    self.s = self.src.len();
                }
            }
            -3 => self.merge()?,
            -4 => {
                self.split(codes.get(1..3))?;
                return Ok(3);
            }
            d if d > 0 => {
                self.out.push(d as usize);
                self.s += 1;
            }
            d => {
                return Err(reshape_error(format!("{:?}: unknown code {d}", self.spec)));
            }
        }
        Ok(1)
    }

    /// `-3`: the product of the next two input dimensions.
    fn merge(&mut self) -> Result<()> {
        let a = self.next_src("-3")?;
        let b = self.next_src("-3")?;
        let d = a.checked_mul(b).ok_or_else(|| {
            reshape_error(format!(
                "{:?}: -3 merges {a} × {b}, more than usize::MAX",
                self.spec
            ))
        })?;
        self.out.push(d);
        Ok(())
    }

    /// `-4, a, b`: the next input dimension split into `a × b`, one of
    /// which may be -1.
    fn split(&mut self, parts: Option<&[i64]>) -> Result<()> {
        let d = self.next_src("-4")?;
        let Some(&[a, b]) = parts else {
            return Err(reshape_error(format!(
                "{:?}: -4 must be followed by two dimensions",
                self.spec
            )));
        };
        // In u64: `d` may exceed i64::MAX, and `a · b` overflow.
        let d64 = d as u64;
        let (a, b) = match (a, b) {
            (-1, -1) => {
                return Err(reshape_error(format!(
                    "{:?}: the two dimensions after -4 cannot both be -1",
                    self.spec
                )));
            }
            (-1, b) if b > 0 => ((d64 / b as u64) as i64, b),
            (a, -1) if a > 0 => (a, (d64 / a as u64) as i64),
            (a, b) => (a, b),
        };
        let product = u64::try_from(a)
            .ok()
            .zip(u64::try_from(b).ok())
            .and_then(|(a, b)| a.checked_mul(b));
        if product != Some(d64) {
            return Err(reshape_error(format!(
                "{:?}: -4 splits dimension {d} into {a} × {b}, which does not match",
                self.spec
            )));
        }
        self.out.push(a as usize);
        self.out.push(b as usize);
        Ok(())
    }

    /// The output with the `-1` dimension (if any) set so that the element
    /// counts match.
    fn infer_missing(mut self) -> Result<Vec<usize>> {
        let Some(k) = self.infer else {
            return Ok(self.out);
        };
        let size = self.input.checked_size();
        let known = Shape::new(self.out.clone()).checked_size();
        match (size, known) {
            (Some(n), Some(known)) if known > 0 && n % known == 0 => self.out[k] = n / known,
            _ => {
                return Err(reshape_error(format!(
                    "cannot infer the -1 dimension of {:?} for the input {} ({})",
                    self.spec,
                    self.input,
                    elements(self.input)
                )));
            }
        }
        Ok(self.out)
    }
}

/// "N elements", or "more than usize::MAX elements" when the count overflows.
fn elements(shape: &Shape) -> String {
    shape.checked_size().map_or_else(
        || "more than usize::MAX elements".into(),
        |n| format!("{n} elements"),
    )
}

/// `Flatten`'s `(d0, d1 · d2 · …)`.
fn flatten_shape(input: &Shape) -> Result<Shape> {
    match input.dims() {
        [] => Err(Error::ShapeMismatch {
            op: "Flatten".into(),
            arg: "data".into(),
            expected: "an array with at least one dimension".into(),
            got: input.clone(),
        }),
        [d0, rest @ ..] => {
            let rest = Shape::new(rest).checked_size();
            let rest = rest.ok_or_else(|| Error::ShapeMismatch {
                op: "Flatten".into(),
                arg: "data".into(),
                expected: "trailing dimensions whose product fits usize".into(),
                got: input.clone(),
            })?;
            Ok(Shape::new([*d0, rest]))
        }
    }
}

/// The input shape with a 1 inserted at `axis`.
fn expand_dims_shape(input: &Shape, p: &ExpandDimsParams) -> Result<Shape> {
    let k = resolve_axis("expand_dims", "axis", p.axis, input.ndim(), 1)?;
    let mut dims = input.dims().to_vec();
    dims.insert(k, 1);
    Ok(Shape::new(dims))
}

/// The resolved permutation of `transpose`.
fn permutation(input: &Shape, p: &TransposeParams) -> Result<Vec<usize>> {
    let nd = input.ndim();
    if p.axes.is_empty() {
        return Ok((0..nd).rev().collect());
    }
    if p.axes.len() != nd {
        return Err(bad(
            "transpose",
            "axes",
            format!(
                "{:?} has {} axes but the input {input} has {nd}",
                p.axes,
                p.axes.len()
            ),
        ));
    }
    axes_mask("transpose", "axes", &p.axes, nd)?;
    p.axes
        .iter()
        .map(|&a| resolve_axis("transpose", "axes", a, nd, 0))
        .collect()
}

/// The view of `input` that `transpose` reads.
fn transpose_view(input: &Shape, p: &TransposeParams) -> Result<View> {
    let perm = permutation(input, p)?;
    let strides = input.strides();
    Ok(View {
        dims: perm.iter().map(|&a| input.dims()[a]).collect(),
        strides: perm.iter().map(|&a| to_isize(strides[a])).collect(),
        start: 0,
    })
}

/// The view of `input` that `SwapAxis` reads: `transpose` with two axes
/// exchanged.
fn swap_view(input: &Shape, p: &SwapAxisParams) -> Result<View> {
    let nd = input.ndim();
    let a = resolve_axis("SwapAxis", "dim1", p.dim1, nd, 0)?;
    let b = resolve_axis("SwapAxis", "dim2", p.dim2, nd, 0)?;
    let mut view = View::contiguous(input);
    view.dims.swap(a, b);
    view.strides.swap(a, b);
    Ok(view)
}

/// The view of `input` that `slice_axis` reads.
fn slice_view(input: &Shape, p: &SliceAxisParams) -> Result<View> {
    const OP: &str = "slice_axis";
    let k = resolve_axis(OP, "axis", p.axis, input.ndim(), 0)?;
    let size = input.dims()[k] as i64;
    let begin = if p.begin < 0 { p.begin + size } else { p.begin };
    let end = match p.end {
        None => size,
        Some(e) if e < 0 => e + size,
        Some(e) => e,
    };
    if begin < 0 || begin >= size {
        return Err(bad(
            OP,
            "begin",
            format!(
                "{} is out of range for axis {} of size {size}",
                p.begin, p.axis
            ),
        ));
    }
    if end > size || end <= begin {
        return Err(bad(
            OP,
            "end",
            format!(
                "{:?} gives the empty or out-of-range slice {begin}..{end} of axis {} (size {size})",
                p.end, p.axis
            ),
        ));
    }
    let mut view = View::contiguous(input);
    view.dims[k] = (end - begin) as usize;
    view.start = (begin as isize).saturating_mul(view.strides[k]);
    Ok(view)
}

/// The view of `input` that `reverse` reads.
fn reverse_view(input: &Shape, p: &ReverseParams) -> Result<View> {
    let mask = axes_mask("reverse", "axis", &p.axis, input.ndim())?;
    let mut view = View::contiguous(input);
    for (k, _) in mask.iter().enumerate().filter(|(_, m)| **m) {
        if view.dims[k] > 0 {
            let last = to_isize(view.dims[k] - 1);
            view.start = view
                .start
                .saturating_add(view.strides[k].saturating_mul(last));
        }
        view.strides[k] = -view.strides[k];
    }
    Ok(view)
}

/// The view an op of this family takes of an input of the given shape.
type ViewRule<P> = fn(&Shape, &P) -> Result<View>;

/// The shape of `rule`'s view of `input`.
fn view_shape<P>(rule: ViewRule<P>, input: &Shape, p: &P) -> Result<Shape> {
    Ok(Shape::new(rule(input, p)?.dims))
}

/// Forward: gathers `x` through `rule`'s view, honouring `req`.
fn view_gather<P>(
    op: &str,
    rule: ViewRule<P>,
    x: &TBlob<'_>,
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &P,
) -> Result<()> {
    let view = rule(x.shape(), p)?;
    strided_copy(op, &view, Dir::Gather, x, out, req)
}

/// Gradient: scatters `dy` back through the same view.
fn view_scatter<P>(
    op: &str,
    rule: ViewRule<P>,
    dy: &TBlob<'_>,
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &P,
) -> Result<()> {
    let view = rule(grads[0].shape(), p)?;
    strided_copy(op, &view, Dir::Scatter, dy, &mut grads[0], req[0])
}

// ---------------------------------------------------------------------------
// Ops
// ---------------------------------------------------------------------------

/// Reshapes to `shape` (with MXNet's codes 0, -1, -2, -3, -4 and `reverse`)
/// without changing the elements. The gradient reshapes back.
#[simple_op(blob, name = "Reshape", alias = "reshape", kwargs = ReshapeParams, pattern = "injective", linear)]
pub mod reshape {
    use super::ReshapeParams;
    use simpleop::prelude::*;

    /// The shape the codes describe; its size must be the input's.
    pub fn shape(inputs: &[Shape], p: &ReshapeParams) -> Result<Shape> {
        super::reshape_shape(&inputs[0], p)
    }

    /// Copies the elements, honouring `req`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &ReshapeParams,
    ) -> Result<()> {
        super::reshape_shape(inputs[0].shape(), p)?;
        super::copy("Reshape", &inputs[0], out, req)
    }

    /// Copies `dy` back under the input's shape.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        super::copy("Reshape", dy.0, &mut grads[0], req[0])
    }
}

/// Flattens to 2-D: `(d0, d1 · d2 · …)`. The gradient reshapes back.
#[simple_op(
    blob,
    name = "Flatten",
    alias = "flatten",
    pattern = "injective",
    linear
)]
pub mod flatten {
    use simpleop::prelude::*;

    /// `(d0, d1 · d2 · …)`; 1-D inputs become `(d0, 1)`.
    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        super::flatten_shape(&inputs[0])
    }

    /// Copies the elements, honouring `req`.
    pub fn forward(inputs: &[TBlob<'_>], out: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
        super::copy("Flatten", &inputs[0], out, req)
    }

    /// Copies `dy` back under the input's shape.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        super::copy("Flatten", dy.0, &mut grads[0], req[0])
    }
}

/// Inserts an axis of size 1 at `axis`. The gradient removes it.
#[simple_op(blob, kwargs = ExpandDimsParams, pattern = "injective", linear)]
pub mod expand_dims {
    use super::ExpandDimsParams;
    use simpleop::prelude::*;

    /// The input shape with a 1 at `axis`.
    pub fn shape(inputs: &[Shape], p: &ExpandDimsParams) -> Result<Shape> {
        super::expand_dims_shape(&inputs[0], p)
    }

    /// Copies the elements, honouring `req`.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &ExpandDimsParams,
    ) -> Result<()> {
        super::expand_dims_shape(inputs[0].shape(), p)?;
        super::copy("expand_dims", &inputs[0], out, req)
    }

    /// Copies `dy` back under the input's shape.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        super::copy("expand_dims", dy.0, &mut grads[0], req[0])
    }
}

unary_kwarg_ops! {
    via (view_shape, view_gather, view_scatter);

    /// Permutes the axes: output axis `i` is input axis `axes[i]`; no `axes`
    /// reverses them. The gradient applies the inverse permutation.
    transpose [pattern = "injective", linear]: TransposeParams = transpose_view,
        shape "The input dimensions, permuted.",
        forward "Gathers the permuted elements, honouring `req`.",
        backward "Scatters `dy` back through the same permutation.";

    /// Takes `begin..end` along `axis` (negative indices count from the end;
    /// `end=None` is the end of the axis). The gradient is `dy` inside the
    /// slice and 0 outside.
    slice_axis [pattern = "injective", linear]: SliceAxisParams = slice_view,
        shape "The input shape with `axis` of size `end - begin`.",
        forward "Gathers the slice, honouring `req`.",
        backward "Scatters `dy` into the slice; the rest is 0 (`WriteTo`) or left
alone (`AddTo`).";

    /// Exchanges axes `dim1` and `dim2` (MXNet's `SwapAxis`, also
    /// `swapaxes`). The gradient exchanges them back.
    swap_axis [name = "SwapAxis", alias = "swapaxes", pattern = "injective", linear]: SwapAxisParams = swap_view,
        shape "The input shape with `dim1` and `dim2` exchanged.",
        forward "Gathers the swapped elements, honouring `req`.",
        backward "Scatters `dy` back through the same swap.";

    /// Reverses the order of the elements along each axis in `axis`. The
    /// gradient reverses `dy` the same way.
    reverse [pattern = "injective", alias = "flip", linear]: ReverseParams = reverse_view,
        shape "The input shape.",
        forward "Gathers the reversed elements, honouring `req`.",
        backward "Reverses `dy` along the same axes.";
}
