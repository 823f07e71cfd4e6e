//! `_backward`'s gradient for a single-output elementwise op: at each
//! output element the op's gradient `g_i(dy, y, x)` (one per argument) is
//! evaluated with `dy`, `y` and every `x` seeded as dual variables; the
//! partials of `Σ_i w_i · g_i`, with `w_i` the gradient reaching
//! `_backward`'s output `i`, are the gradients of `dy`, `y` and the `x`s.
//! Broadcast arguments read `x` and `w` at their broadcast position, and
//! their gradients are summed back to their shapes (in f64). Half types
//! compute in f32, as their first derivatives do.
//!
//! A scalar loop: second derivatives are for small graphs
//! (Hessian-vector products, gradient penalties), where the first
//! derivative's SIMD paths would buy little.

use crate::backward_op::{Layout, NAME};
use crate::engine::buffers::Indexer;
use crate::kernel::{GradDerivativeFn, GradDerivativeFns};
use crate::{
    DType, Element, EnvArguments, Error, Float, GradArgs, OpReqType, Result, Shape, TBlob,
    TBlobMut, dispatch_float,
};

/// The second derivative through `fns`.
pub(super) fn backward<'a, 'b>(
    fns: GradDerivativeFns,
    l: &Layout,
    env: &EnvArguments,
    inputs: &[&'a TBlob<'b>],
    args: &'a GradArgs<'b>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let point = Point::read(l, inputs, args)?;
    match point.dy.dtype() {
        DType::F64 => point.run::<f64>(fns.f64, env, grads, reqs),
        DType::F32 | DType::F16 | DType::BF16 => point.run::<f32>(fns.f32, env, grads, reqs),
        other => Err(Error::invalid(
            NAME,
            "out_grad",
            format!("a float dtype, got {other}"),
        )),
    }
}

/// A `_backward` call's inputs and the gradients reaching its outputs.
struct Point<'a, 'b> {
    dy: &'a TBlob<'b>,
    y: Option<&'a TBlob<'b>>,
    xs: Vec<&'a TBlob<'b>>,
    /// Per argument; `None` where nothing read that gradient.
    ws: Vec<Option<&'a TBlob<'b>>>,
}

impl<'a, 'b> Point<'a, 'b> {
    /// `inputs` are every input, checked present (`super::every_input`).
    fn read(l: &Layout, inputs: &[&'a TBlob<'b>], args: &'a GradArgs<'b>) -> Result<Point<'a, 'b>> {
        let dy = inputs[0];
        let y = l.reads_outputs.then(|| inputs[1]);
        if let Some(y) = y
            && y.shape() != dy.shape()
        {
            return Err(Error::ShapeMismatch {
                op: NAME.into(),
                arg: "output".into(),
                expected: dy.shape().to_string(),
                got: y.shape().clone(),
            });
        }
        let xs = inputs[l.first_argument()..].to_vec();
        let ws: Vec<_> = (0..l.arguments)
            .map(|i| args.out_grads.get(i).and_then(Option::as_ref))
            .collect();
        for (i, (w, x)) in ws.iter().zip(&xs).enumerate() {
            if let Some(w) = w
                && w.shape() != x.shape()
            {
                return Err(Error::ShapeMismatch {
                    op: NAME.into(),
                    arg: format!("gradient of output {i}"),
                    expected: x.shape().to_string(),
                    got: w.shape().clone(),
                });
            }
        }
        Ok(Point { dy, y, xs, ws })
    }

    /// The inputs in gradient order: `dy`, `y` when read, the arguments.
    fn inputs(&self) -> impl Iterator<Item = &TBlob<'b>> {
        std::iter::once(self.dy)
            .chain(self.y)
            .chain(self.xs.iter().copied())
    }

    /// The loop in compute type `C`, then the writes.
    fn run<C: Float>(
        &self,
        f: GradDerivativeFn<C>,
        env: &EnvArguments,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
    ) -> Result<()> {
        let out = self.dy.shape();
        let n = out.size();
        let offsets = self
            .xs
            .iter()
            .map(|x| broadcast_offsets(x.shape(), out))
            .collect::<Result<Vec<_>>>()?;
        let dy = values::<C>(self.dy)?;
        let y = self.y.map(values::<C>).transpose()?;
        let xs = self
            .xs
            .iter()
            .map(|x| values::<C>(x))
            .collect::<Result<Vec<_>>>()?;
        let ws = self
            .ws
            .iter()
            .map(|w| w.map(values::<C>).transpose())
            .collect::<Result<Vec<_>>>()?;
        let m = xs.len();
        let mut sums: Vec<Vec<f64>> = self.inputs().map(|b| vec![0.0; b.len()]).collect();
        let (mut at, mut weights, mut partials) = (
            vec![C::zero(); 2 + m],
            vec![C::zero(); m],
            vec![C::zero(); 2 + m],
        );
        let y_slot = usize::from(self.y.is_some());
        for j in 0..n {
            at[0] = dy[j];
            at[1] = y.as_ref().map_or(C::zero(), |y| y[j]);
            for i in 0..m {
                let o = offsets[i][j];
                at[2 + i] = xs[i][o];
                weights[i] = ws[i].as_ref().map_or(C::zero(), |w| w[o]);
            }
            f(env, &at, &weights, &mut partials)?;
            sums[0][j] = partials[0].to_f64();
            if y_slot == 1 {
                sums[1][j] = partials[1].to_f64();
            }
            for i in 0..m {
                sums[1 + y_slot + i][offsets[i][j]] += partials[2 + i].to_f64();
            }
        }
        for ((g, sum), &req) in grads.iter_mut().zip(&sums).zip(reqs) {
            write(g, sum, req)?;
        }
        Ok(())
    }
}

/// A blob's values in compute type `C` (exact: half types and f32 widen).
pub(super) fn values<C: Float>(b: &TBlob<'_>) -> Result<Vec<C>> {
    dispatch_float!(b.dtype(), S => Ok(b
        .as_slice::<S>()?
        .iter()
        .map(|v| C::from_f64(v.to_f64()))
        .collect()),
        _ => Err(Error::invalid(NAME, "inputs", format!("a float dtype, got {}", b.dtype()))))
}

/// For each element of `out`, the offset of the element of `x` that
/// NumPy broadcasting reads there (the engine's broadcast indexer).
fn broadcast_offsets(x: &Shape, out: &Shape) -> Result<Vec<usize>> {
    if !x.broadcasts_to(out) {
        return Err(Error::ShapeMismatch {
            op: NAME.into(),
            arg: "argument".into(),
            expected: format!("a shape that broadcasts to {out}"),
            got: x.clone(),
        });
    }
    let n = out.size();
    let mut offsets = Vec::with_capacity(n);
    if n > 0 {
        Indexer::new(x, out).for_each_run(0, n, |_, at, run, step| {
            offsets.extend((0..run).map(|t| at + t * step));
        });
    }
    Ok(offsets)
}

/// Writes `sum` into `g` (its dtype) honouring `req`.
pub(super) fn write(g: &mut TBlobMut<'_>, sum: &[f64], req: OpReqType) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let dtype = g.dtype();
    dispatch_float!(dtype, S => {
        for (d, &v) in g.as_slice_mut::<S>()?.iter_mut().zip(sum) {
            *d = match req {
                OpReqType::AddTo => <S as Element>::from_f64(d.to_f64() + v),
                _ => <S as Element>::from_f64(v),
            };
        }
        Ok(())
    }, _ => Err(Error::invalid(NAME, "gradients", format!("a float dtype, got {dtype}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_offsets_follow_numpy() {
        let out = Shape::new([2, 3]);
        assert_eq!(
            broadcast_offsets(&Shape::new([2, 3]), &out).unwrap(),
            [0, 1, 2, 3, 4, 5]
        );
        assert_eq!(
            broadcast_offsets(&Shape::new([3]), &out).unwrap(),
            [0, 1, 2, 0, 1, 2]
        );
        assert_eq!(
            broadcast_offsets(&Shape::new([2, 1]), &out).unwrap(),
            [0, 0, 0, 1, 1, 1]
        );
        assert_eq!(broadcast_offsets(&Shape::new([1]), &out).unwrap(), [0; 6]);
        assert!(broadcast_offsets(&Shape::new([2]), &out).is_err());
        assert!(broadcast_offsets(&Shape::new([1, 2, 3]), &out).is_err());
    }
}
