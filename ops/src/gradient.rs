//! Ops that pass values but stop gradients: `BlockGrad` and the constant
//! `zeros_like` / `ones_like`. Their gradient is zero by definition, not
//! the derivative (which is 1 for `BlockGrad`), as in MXNet.

use simpleop::simple_op;

/// Identity forward, zero gradient: what flows through it is treated as a
/// constant (a target network's output, a detached statistic). MXNet's
/// `BlockGrad`, also `stop_gradient`; PyTorch's `detach`.
#[simple_op(name = "BlockGrad", inplace = "InOut, OutIn", alias = "stop_gradient")]
pub mod block_grad {
    use simpleop::prelude::*;
    /// `x`.
    pub fn forward<T: Float>(x: T) -> T {
        x
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// Zeros of the input's shape and dtype; the gradient is zero (the zero
/// map is linear, and its own adjoint).
#[simple_op(inplace = "InOut, OutIn", linear)]
pub mod zeros_like {
    use simpleop::prelude::*;
    /// 0, whatever `x` is (NaN included).
    pub fn forward<T: Float>(_x: T) -> T {
        T::zero()
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// Ones of the input's shape and dtype; the gradient is zero.
#[simple_op(inplace = "InOut, OutIn")]
pub mod ones_like {
    use simpleop::prelude::*;
    /// 1, whatever `x` is (NaN included).
    pub fn forward<T: Float>(_x: T) -> T {
        T::one()
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}
