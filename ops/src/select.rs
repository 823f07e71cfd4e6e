//! Selection between arrays.

use simpleop::simple_op;

/// Picks `x` where `condition` is non-zero and `y` elsewhere, with NumPy
/// broadcasting of all three inputs. Not differentiable in `condition`
/// (its gradient is zero); `x` and `y` get the output gradient where they
/// were picked.
#[simple_op(name = "where", broadcast, inplace = "OutLhs", lanes = simpleop::kernel::jit::LaneOp::Where)]
pub mod r#where {
    use simpleop::prelude::*;
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
