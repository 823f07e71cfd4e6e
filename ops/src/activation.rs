//! Activation functions.

use simpleop::simple_op;

/// Rectified linear unit: `max(x, 0)`.
#[simple_op(inplace = "InOut, OutIn", vector = simpleop::kernel::vector::RELU, lanes = simpleop::kernel::jit::LaneOp::Relu)]
pub mod relu {
    use simpleop::prelude::*;

    /// `max(x, 0)`.
    pub fn forward<T: Float>(x: T) -> T {
        if x > T::zero() { x } else { T::zero() }
    }

    /// Passes the gradient where the output is positive.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        if *y > T::zero() { *dy } else { T::zero() }
    }
}
