//! Arithmetic between an array and a scalar (`scalar` attribute).

use simpleop::simple_op;

/// `x + scalar`.
#[simple_op(name = "_plus_scalar", scalar, inplace = "InOut, OutIn", lanes = simpleop::kernel::LaneOp::AddScalar, alias = "_PlusScalar")]
pub mod plus_scalar {
    use simpleop::prelude::*;
    /// `x + s`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        x + s
    }
    /// `dy`.
    pub fn backward<T: Float>(dy: OutGrad<T>) -> T {
        *dy
    }
}

/// `x - scalar`.
#[simple_op(name = "_minus_scalar", scalar, inplace = "InOut, OutIn", lanes = simpleop::kernel::LaneOp::SubScalar, alias = "_MinusScalar")]
pub mod minus_scalar {
    use simpleop::prelude::*;
    /// `x - s`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        x - s
    }
    /// `dy`.
    pub fn backward<T: Float>(dy: OutGrad<T>) -> T {
        *dy
    }
}

/// `scalar - x`.
#[simple_op(name = "_rminus_scalar", scalar, inplace = "InOut, OutIn", lanes = simpleop::kernel::LaneOp::RSubScalar, alias = "_RMinusScalar")]
pub mod rminus_scalar {
    use simpleop::prelude::*;
    /// `s - x`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        s - x
    }
    /// `-dy`.
    pub fn backward<T: Float>(dy: OutGrad<T>) -> T {
        -*dy
    }
}

/// `x * scalar`.
#[simple_op(name = "_mul_scalar", scalar, inplace = "InOut, OutIn", lanes = simpleop::kernel::LaneOp::MulScalar, alias = "_MulScalar", linear)]
pub mod mul_scalar {
    use simpleop::prelude::*;
    /// `x * s`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        x * s
    }
    /// `dy * s`.
    pub fn backward<T: Float>(dy: OutGrad<T>, s: T) -> T {
        dy * s
    }
}

/// `x / scalar`.
#[simple_op(
    name = "_div_scalar",
    scalar,
    inplace = "InOut, OutIn",
    alias = "_DivScalar",
    linear
)]
pub mod div_scalar {
    use simpleop::prelude::*;
    /// `x / s`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        x / s
    }
    /// `dy / s`.
    pub fn backward<T: Float>(dy: OutGrad<T>, s: T) -> T {
        dy / s
    }
}

/// `scalar / x`. Not in place: the gradient reads `x`.
#[simple_op(
    name = "_rdiv_scalar",
    scalar,
    inplace = "OutIn",
    alias = "_RDivScalar"
)]
pub mod rdiv_scalar {
    use simpleop::prelude::*;
    /// `s / x`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        s / x
    }
    /// `-dy · s / x²`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, s: T) -> T {
        -(dy * s) / (*x * *x)
    }
}

/// `x ^ scalar`. Not in place: the gradient reads `x`.
#[simple_op(
    name = "_power_scalar",
    scalar,
    inplace = "OutIn",
    alias = "_PowerScalar"
)]
pub mod power_scalar {
    use simpleop::prelude::*;
    /// `x^s`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        x.powf(s)
    }
    /// `dy · s · x^(s-1)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, s: T) -> T {
        dy * (s * x.powf(s - T::one()))
    }
}

/// `scalar ^ x`. The gradient reads the output only, so the forward may run
/// in place.
#[simple_op(
    name = "_rpower_scalar",
    scalar,
    inplace = "InOut, OutIn",
    alias = "_RPowerScalar"
)]
pub mod rpower_scalar {
    use simpleop::prelude::*;
    /// `s^x`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        s.powf(x)
    }
    /// `dy · y · ln s`, from the stored output: infinite in f16 where `y`
    /// overflowed to inf though the derivative is finite.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>, s: T) -> T {
        dy * (*y * s.ln())
    }
}

/// `max(x, scalar)`, NaN propagating; the gradient flows to `x` where
/// `x >= scalar`.
#[simple_op(
    name = "_maximum_scalar",
    scalar,
    inplace = "OutIn",
    alias = "_MaximumScalar"
)]
pub mod maximum_scalar {
    use simpleop::prelude::*;
    /// `x` if it is NaN or greater, else `s`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        crate::binary::maximum::forward(x, s)
    }
    /// `x >= s ? dy : 0`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, s: T) -> T {
        if *x >= s { *dy } else { T::zero() }
    }
}

/// `min(x, scalar)`, NaN propagating; the gradient flows to `x` where
/// `x <= scalar`.
#[simple_op(
    name = "_minimum_scalar",
    scalar,
    inplace = "OutIn",
    alias = "_MinimumScalar"
)]
pub mod minimum_scalar {
    use simpleop::prelude::*;
    /// `x` if it is NaN or less, else `s`.
    pub fn forward<T: Float>(x: T, s: T) -> T {
        crate::binary::minimum::forward(x, s)
    }
    /// `x <= s ? dy : 0`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, s: T) -> T {
        if *x <= s { *dy } else { T::zero() }
    }
}
