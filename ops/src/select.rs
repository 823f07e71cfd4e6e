//! Selection between arrays.

use simpleop::simple_op;

/// Picks `x` where `condition` is non-zero and `y` elsewhere, with NumPy
/// broadcasting of all three inputs. Not differentiable in `condition`
/// (its gradient is zero); `x` and `y` get the output gradient where they
/// were picked.
///
/// MXNet 1.x takes a condition of `x`'s shape (as here) or a 1-D one of
/// length `x.shape[0]`, which selects whole rows. NumPy broadcasting
/// aligns a 1-D condition with the last axis instead, so such a condition
/// is refused rather than read the other way (reshape it to `(n, 1, ..)`
/// for MXNet's rows).
#[simple_op(name = "where", broadcast, inplace = "OutLhs", lanes = simpleop::kernel::LaneOp::Where)]
pub mod r#where {
    use simpleop::prelude::*;

    /// NumPy broadcasting of the three shapes (the rule of every
    /// `broadcast` op), refusing MXNet's 1-D row condition (see the op's
    /// documentation).
    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        if let [c, x, _] = inputs
            && let n = x.dims().first().copied().unwrap_or(1)
            && c.ndim() == 1
            && x.ndim() >= 2
            && c.dims()[0] == n
            && n != 1
        {
            let rows: String = x.dims()[1..].iter().map(|_| ", 1").collect();
            return Err(Error::ShapeMismatch {
                op: "where".into(),
                arg: "condition".into(),
                expected: format!(
                    "one that broadcasts with `x` {x} the NumPy way (along the last axis); \
                     MXNet 1.x selects rows of `x` with a 1-D condition of length {n}, \
                     reshape it to ({n}{rows}) for that"
                ),
                got: c.clone(),
            });
        }
        simpleop::op::broadcast_shape(&OP, inputs, &EnvArguments::none())
    }

    /// `condition != 0 ? x : y`.
    pub fn forward<T: Float>(condition: T, x: T, y: T) -> T {
        if condition != T::zero() { x } else { y }
    }
    /// `(0, condition != 0 ? dy : 0, condition == 0 ? dy : 0)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, condition: In0<T>) -> (T, T, T) {
        if *condition != T::zero() {
            (T::zero(), *dy, T::zero())
        } else {
            (T::zero(), T::zero(), *dy)
        }
    }
}
