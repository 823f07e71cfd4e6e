//! Activation functions.

use simpleop::simple_op;

/// Rectified linear unit: `max(x, 0)`; NaN passes through, and so does its
/// gradient, as in MXNet and PyTorch (a NaN hidden behind a zero would hide
/// a diverging model).
#[simple_op(inplace = "InOut, OutIn", vector = simpleop::kernel::forms::RELU, lanes = simpleop::kernel::LaneOp::Relu)]
pub mod relu {
    use simpleop::prelude::*;

    /// `max(x, 0)`: +0 for -0 and for negatives, NaN for NaN.
    pub fn forward<T: Float>(x: T) -> T {
        if x <= T::zero() { T::zero() } else { x }
    }

    /// Passes the gradient where the output is positive; NaN where it is
    /// NaN (MXNet multiplies by `relu_grad(NaN) = NaN`).
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        if *y > T::zero() {
            *dy
        } else if y.is_nan() {
            *y
        } else {
            T::zero()
        }
    }
}
