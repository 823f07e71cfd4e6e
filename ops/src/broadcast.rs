//! Explicit broadcasting: `broadcast_to` and `broadcast_axis`.
//!
//! Both repeat the input along axes where it has size 1. They run on the
//! reduction plan of `reduce.rs` read backwards: output element
//! `outer[o] + inner[r]` is input element `o`, and the gradient sums the
//! output gradient over the broadcast axes back to the input shape.

use serde::{Deserialize, Serialize};
use simpleop::{Error, OpReqType, Result, Shape, TBlob, TBlobMut, simple_op};

use crate::reduce::{AxesPlan, Reducer, broadcast_blob, reduce_blob, resolve_axis};

/// Keyword arguments of [`broadcast_to()`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct BroadcastToParams {
    /// The target shape, with as many dimensions as the input; 0 keeps the
    /// input's dimension.
    pub shape: Vec<i64>,
}

/// Keyword arguments of [`broadcast_axis()`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct BroadcastAxisParams {
    /// The axes to broadcast (negative counts from the end); the input has
    /// size 1 there.
    pub axis: Vec<i64>,
    /// The size to broadcast each axis to, one per axis.
    pub size: Vec<i64>,
}

fn bad(op: &str, arg: &str, reason: String) -> Error {
    Error::BadKwarg {
        op: op.into(),
        arg: arg.into(),
        reason,
    }
}

/// The output shape of `broadcast_to`.
fn broadcast_to_shape(input: &Shape, p: &BroadcastToParams) -> Result<Shape> {
    const OP: &str = "broadcast_to";
    if p.shape.len() != input.ndim() {
        return Err(bad(
            OP,
            "shape",
            format!(
                "{:?} has {} dimension(s) but the input {input} has {}",
                p.shape,
                p.shape.len(),
                input.ndim()
            ),
        ));
    }
    let dims = input
        .dims()
        .iter()
        .zip(&p.shape)
        .map(|(&d, &s)| match s {
            0 => Ok(d),
            s if s > 0 && (d == 1 || d as i64 == s) => Ok(s as usize),
            s => Err(bad(
                OP,
                "shape",
                format!(
                    "cannot broadcast the input {input} to {:?} (dimension {d} to {s})",
                    p.shape
                ),
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Shape::new(dims))
}

/// The output shape of `broadcast_axis`.
fn broadcast_axis_shape(input: &Shape, p: &BroadcastAxisParams) -> Result<Shape> {
    const OP: &str = "broadcast_axis";
    if p.axis.len() != p.size.len() {
        return Err(bad(
            OP,
            "size",
            format!(
                "{} size(s) for {} axis/axes; give one size per axis",
                p.size.len(),
                p.axis.len()
            ),
        ));
    }
    let mut dims = input.dims().to_vec();
    for (&a, &s) in p.axis.iter().zip(&p.size) {
        let k = resolve_axis(OP, "axis", a, input.ndim(), 0)?;
        if s < 0 {
            return Err(bad(
                OP,
                "size",
                format!("sizes must be non-negative, got {s}"),
            ));
        }
        if input.dims()[k] != 1 && input.dims()[k] as i64 != s {
            return Err(bad(
                OP,
                "axis",
                format!(
                    "axis {a} of the input {input} has size {}, not 1",
                    input.dims()[k]
                ),
            ));
        }
        dims[k] = s as usize;
    }
    Ok(Shape::new(dims))
}

/// The plan over the output: the broadcast axes are the ones that grew.
fn plan(op: &str, input: &Shape, output: &Shape) -> Result<AxesPlan> {
    let grown: Vec<bool> = input
        .dims()
        .iter()
        .zip(output.dims())
        .map(|(i, o)| i != o)
        .collect();
    AxesPlan::new(op, output, &grown)
}

/// The output shape an op of this family computes from its input's shape
/// and kwargs.
type GrowRule<P> = fn(&Shape, &P) -> Result<Shape>;

/// The output shape: the rule's own.
fn grown_shape<P>(rule: GrowRule<P>, input: &Shape, p: &P) -> Result<Shape> {
    rule(input, p)
}

/// Forward: repeats `x` along the axes `rule` grows, honouring `req`.
fn forward_blob<P>(
    op: &str,
    rule: GrowRule<P>,
    x: &TBlob<'_>,
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    p: &P,
) -> Result<()> {
    let plan = plan(op, x.shape(), &rule(x.shape(), p)?)?;
    broadcast_blob(op, &plan, x, out, req)
}

/// Gradient: sums `dy` back over the axes `rule` grows.
fn backward_blob<P>(
    op: &str,
    rule: GrowRule<P>,
    dy: &TBlob<'_>,
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    p: &P,
) -> Result<()> {
    let g = &mut grads[0];
    let plan = plan(op, g.shape(), &rule(g.shape(), p)?)?;
    reduce_blob(op, Reducer::Sum, &plan, dy, g, req[0])
}

unary_kwarg_ops! {
    via (grown_shape, forward_blob, backward_blob);

    /// Broadcasts the input to `shape` (same number of dimensions; 0 keeps a
    /// dimension, and only size-1 dimensions may grow). The gradient sums back
    /// over the broadcast axes.
    broadcast_to [pattern = "broadcast", linear]: BroadcastToParams = broadcast_to_shape,
        shape "The input shape with each size-1 axis grown to `shape`'s.",
        forward "Repeats the input along the grown axes, honouring `req`.",
        backward "`data_grad = Σ dy` over the grown axes.";

    /// Broadcasts size-1 axes `axis` to `size` (one size per axis). The
    /// gradient sums back over those axes.
    broadcast_axis [pattern = "broadcast", alias = "broadcast_axes", linear]:
        BroadcastAxisParams = broadcast_axis_shape,
        shape "The input shape with `axis[i]` set to `size[i]`.",
        forward "Repeats the input along `axis`, honouring `req`.",
        backward "`data_grad = Σ dy` over `axis`.";
}
