//! Comparisons: 1 where the relation holds, else 0, in the input's dtype.
//! Against a scalar (`scalar` attribute) or between two arrays with NumPy
//! broadcasting. As in MXNet, their gradients are zero.

use simpleop::simple_op;

/// `x == scalar`: 1 where equal, else 0. The gradient is zero.
#[simple_op(
    name = "_equal_scalar",
    scalar,
    inplace = "InOut, OutIn",
    alias = "_EqualScalar"
)]
pub mod equal_scalar {
    use simpleop::prelude::*;
    /// `x == s ? 1 : 0`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        if x == s { T::one() } else { T::zero() }
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// `x > scalar`: 1 where greater, else 0. The gradient is zero.
#[simple_op(
    name = "_greater_scalar",
    scalar,
    inplace = "InOut, OutIn",
    alias = "_GreaterScalar"
)]
pub mod greater_scalar {
    use simpleop::prelude::*;
    /// `x > s ? 1 : 0`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        if x > s { T::one() } else { T::zero() }
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// `x < scalar`: 1 where less, else 0. The gradient is zero.
#[simple_op(name = "_lesser_scalar", scalar, inplace = "InOut, OutIn", lanes = simpleop::kernel::LaneOp::LessScalar, alias = "_LesserScalar")]
pub mod lesser_scalar {
    use simpleop::prelude::*;
    /// `x < s ? 1 : 0`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        if x < s { T::one() } else { T::zero() }
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// `a == b` with NumPy broadcasting: 1 where equal, else 0. The gradients
/// are zero.
#[simple_op(broadcast, inplace = "LhsOut, OutLhs", alias = "_equal, _Equal")]
pub mod broadcast_equal {
    use simpleop::prelude::*;
    /// `a == b ? 1 : 0`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        super::equal_scalar::forward(a, b)
    }
    /// `(0, 0)`.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> (T, T) {
        (T::zero(), T::zero())
    }
}

/// `a > b` with NumPy broadcasting: 1 where greater, else 0. The gradients
/// are zero.
#[simple_op(broadcast, inplace = "LhsOut, OutLhs", alias = "_greater")]
pub mod broadcast_greater {
    use simpleop::prelude::*;
    /// `a > b ? 1 : 0`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        super::greater_scalar::forward(a, b)
    }
    /// `(0, 0)`.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> (T, T) {
        (T::zero(), T::zero())
    }
}

/// `a < b` with NumPy broadcasting: 1 where less, else 0. The gradients are
/// zero.
#[simple_op(broadcast, inplace = "LhsOut, OutLhs", alias = "_lesser")]
pub mod broadcast_lesser {
    use simpleop::prelude::*;
    /// `a < b ? 1 : 0`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        super::lesser_scalar::forward(a, b)
    }
    /// `(0, 0)`.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> (T, T) {
        (T::zero(), T::zero())
    }
}

/// `x != scalar`: 1 where different, else 0. The gradient is zero.
#[simple_op(name = "_not_equal_scalar", scalar, inplace = "InOut, OutIn")]
pub mod not_equal_scalar {
    use simpleop::prelude::*;
    /// `x != s ? 1 : 0`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        if x != s { T::one() } else { T::zero() }
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// `a != b` with NumPy broadcasting: 1 where different, else 0. The gradients
/// are zero. Also registered as MXNet's same-shape `_not_equal`.
#[simple_op(broadcast, inplace = "LhsOut, OutLhs", alias = "_not_equal")]
pub mod broadcast_not_equal {
    use simpleop::prelude::*;
    /// `a != b ? 1 : 0`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        super::not_equal_scalar::forward(a, b)
    }
    /// `(0, 0)`.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> (T, T) {
        (T::zero(), T::zero())
    }
}

/// `x >= scalar`: 1 where greater or equal, else 0. The gradient is zero.
#[simple_op(name = "_greater_equal_scalar", scalar, inplace = "InOut, OutIn")]
pub mod greater_equal_scalar {
    use simpleop::prelude::*;
    /// `x >= s ? 1 : 0`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        if x >= s { T::one() } else { T::zero() }
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// `a >= b` with NumPy broadcasting: 1 where greater or equal, else 0. The gradients
/// are zero. Also registered as MXNet's same-shape `_greater_equal`.
#[simple_op(broadcast, inplace = "LhsOut, OutLhs", alias = "_greater_equal")]
pub mod broadcast_greater_equal {
    use simpleop::prelude::*;
    /// `a >= b ? 1 : 0`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        super::greater_equal_scalar::forward(a, b)
    }
    /// `(0, 0)`.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> (T, T) {
        (T::zero(), T::zero())
    }
}

/// `x <= scalar`: 1 where less or equal, else 0. The gradient is zero.
#[simple_op(name = "_lesser_equal_scalar", scalar, inplace = "InOut, OutIn")]
pub mod lesser_equal_scalar {
    use simpleop::prelude::*;
    /// `x <= s ? 1 : 0`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        if x <= s { T::one() } else { T::zero() }
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// `a <= b` with NumPy broadcasting: 1 where less or equal, else 0. The gradients
/// are zero. Also registered as MXNet's same-shape `_lesser_equal`.
#[simple_op(broadcast, inplace = "LhsOut, OutLhs", alias = "_lesser_equal")]
pub mod broadcast_lesser_equal {
    use simpleop::prelude::*;
    /// `a <= b ? 1 : 0`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        super::lesser_equal_scalar::forward(a, b)
    }
    /// `(0, 0)`.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> (T, T) {
        (T::zero(), T::zero())
    }
}
