//! Unary elementwise math: rounding, powers and roots, exponentials and
//! logarithms, trigonometric and hyperbolic functions, special functions.
//!
//! Gradients follow MXNet 1.x. Where the derivative is a function of the
//! output (`exp`, `sqrt`, `tanh`, `sigmoid`, ...) the gradient reads the
//! output only, so the forward may also run in place over its input.

use simpleop::simple_op;

/// Absolute value: `|x|`.
#[simple_op(inplace = "OutIn", lanes = simpleop::kernel::LaneOp::Abs)]
pub mod abs {
    use simpleop::prelude::*;
    /// `|x|`.
    pub fn forward<T: Float>(x: T) -> T {
        x.abs()
    }
    /// `dy · sign(x)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * x.sign()
    }
}

/// Sign: -1, 0 or 1 (0 for NaN, as in MXNet and PyTorch). The gradient is
/// zero.
#[simple_op(inplace = "InOut, OutIn")]
pub mod sign {
    use simpleop::prelude::*;
    /// `sign(x)`.
    pub fn forward<T: Float>(x: T) -> T {
        x.sign()
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// Rounds to the nearest integer, halves away from zero. The gradient is
/// zero.
#[simple_op(inplace = "InOut, OutIn")]
pub mod round {
    use simpleop::prelude::*;
    /// `round(x)`.
    pub fn forward<T: Float>(x: T) -> T {
        x.round()
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// Ceiling: the smallest integer not less than `x`. The gradient is zero.
#[simple_op(inplace = "InOut, OutIn")]
pub mod ceil {
    use simpleop::prelude::*;
    /// `ceil(x)`.
    pub fn forward<T: Float>(x: T) -> T {
        x.ceil()
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// Floor: the largest integer not greater than `x`. The gradient is zero.
#[simple_op(inplace = "InOut, OutIn")]
pub mod floor {
    use simpleop::prelude::*;
    /// `floor(x)`.
    pub fn forward<T: Float>(x: T) -> T {
        x.floor()
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// Truncation towards zero: the integer part of `x`. The gradient is zero.
#[simple_op(inplace = "InOut, OutIn")]
pub mod trunc {
    use simpleop::prelude::*;
    /// `trunc(x)`.
    pub fn forward<T: Float>(x: T) -> T {
        x.trunc()
    }
    /// 0.
    pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
        T::zero()
    }
}

/// Square: `x²`.
#[simple_op(inplace = "OutIn", lanes = simpleop::kernel::LaneOp::Square)]
pub mod square {
    use simpleop::prelude::*;
    /// `x · x`.
    pub fn forward<T: Float>(x: T) -> T {
        x * x
    }
    /// `2 dy · x`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * (T::from_f64(2.0) * *x)
    }
}

/// Square root: `√x`.
#[simple_op(inplace = "InOut, OutIn")]
pub mod sqrt {
    use simpleop::prelude::*;
    /// `√x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.sqrt()
    }
    /// `dy · 0.5 / y`.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        dy * (T::from_f64(0.5) / *y)
    }
}

/// Reciprocal square root: `1 / √x`.
#[simple_op(inplace = "InOut, OutIn")]
pub mod rsqrt {
    use simpleop::prelude::*;
    /// `1 / √x`.
    pub fn forward<T: Float>(x: T) -> T {
        T::one() / x.sqrt()
    }
    /// `-0.5 dy · y³` (`= -0.5 x^-1.5`).
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        dy * (T::from_f64(-0.5) * *y * *y * *y)
    }
}

/// Cube root: `∛x`.
#[simple_op(inplace = "InOut, OutIn")]
pub mod cbrt {
    use simpleop::prelude::*;
    /// `∛x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.cbrt()
    }
    /// `dy / (3 y²)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        dy / (T::from_f64(3.0) * *y * *y)
    }
}

/// Exponential: `e^x`.
#[simple_op(inplace = "InOut, OutIn", vector = simpleop::kernel::forms::EXP, lanes = simpleop::kernel::LaneOp::Exp)]
pub mod exp {
    use simpleop::prelude::*;
    /// `e^x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.exp()
    }
    /// `dy · y`.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        dy * *y
    }
}

/// `e^x - 1`, accurate for small `x`.
#[simple_op(inplace = "InOut, OutIn")]
pub mod expm1 {
    use simpleop::prelude::*;
    /// `e^x - 1`.
    pub fn forward<T: Float>(x: T) -> T {
        x.exp_m1()
    }
    /// `dy · (y + 1)` (`= dy · e^x`).
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        dy * (*y + T::one())
    }
}

/// Natural logarithm: `ln x`.
#[simple_op(inplace = "OutIn", vector = simpleop::kernel::forms::LN)]
pub mod log {
    use simpleop::prelude::*;
    /// `ln x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.ln()
    }
    /// `dy / x`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy / *x
    }
}

/// `ln(1 + x)`, accurate for small `x`.
#[simple_op(inplace = "OutIn")]
pub mod log1p {
    use simpleop::prelude::*;
    /// `ln(1 + x)`.
    pub fn forward<T: Float>(x: T) -> T {
        x.ln_1p()
    }
    /// `dy / (1 + x)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy / (T::one() + *x)
    }
}

/// Base-2 logarithm: `log₂ x`.
#[simple_op(inplace = "OutIn")]
pub mod log2 {
    use simpleop::prelude::*;
    /// `log₂ x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.log2()
    }
    /// `dy / (x ln 2)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy / (*x * T::from_f64(std::f64::consts::LN_2))
    }
}

/// Base-10 logarithm: `log₁₀ x`.
#[simple_op(inplace = "OutIn")]
pub mod log10 {
    use simpleop::prelude::*;
    /// `log₁₀ x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.log10()
    }
    /// `dy / (x ln 10)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy / (*x * T::from_f64(std::f64::consts::LN_10))
    }
}

/// Sine (radians).
#[simple_op(inplace = "OutIn")]
pub mod sin {
    use simpleop::prelude::*;
    /// `sin x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.sin()
    }
    /// `dy · cos x`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * x.cos()
    }
}

/// Cosine (radians).
#[simple_op(inplace = "OutIn")]
pub mod cos {
    use simpleop::prelude::*;
    /// `cos x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.cos()
    }
    /// `-dy · sin x`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        -(dy * x.sin())
    }
}

/// Tangent (radians).
#[simple_op(inplace = "InOut, OutIn")]
pub mod tan {
    use simpleop::prelude::*;
    /// `tan x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.tan()
    }
    /// `dy · (1 + y²)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        dy * (T::one() + *y * *y)
    }
}

/// Inverse sine, in `[-π/2, π/2]`; defined on `[-1, 1]`.
#[simple_op(inplace = "OutIn")]
pub mod arcsin {
    use simpleop::prelude::*;
    /// `asin x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.asin()
    }
    /// `dy / √(1 - x²)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy / (T::one() - *x * *x).sqrt()
    }
}

/// Inverse cosine, in `[0, π]`; defined on `[-1, 1]`.
#[simple_op(inplace = "OutIn")]
pub mod arccos {
    use simpleop::prelude::*;
    /// `acos x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.acos()
    }
    /// `-dy / √(1 - x²)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        -(dy / (T::one() - *x * *x).sqrt())
    }
}

/// Inverse tangent, in `(-π/2, π/2)`.
#[simple_op(inplace = "OutIn")]
pub mod arctan {
    use simpleop::prelude::*;
    /// `atan x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.atan()
    }
    /// `dy / (1 + x²)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy / (T::one() + *x * *x)
    }
}

/// Hyperbolic sine.
#[simple_op(inplace = "OutIn")]
pub mod sinh {
    use simpleop::prelude::*;
    /// `sinh x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.sinh()
    }
    /// `dy · cosh x`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * x.cosh()
    }
}

/// Hyperbolic cosine.
#[simple_op(inplace = "OutIn")]
pub mod cosh {
    use simpleop::prelude::*;
    /// `cosh x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.cosh()
    }
    /// `dy · sinh x`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * x.sinh()
    }
}

/// Hyperbolic tangent.
#[simple_op(inplace = "InOut, OutIn", vector = simpleop::kernel::forms::TANH, lanes = simpleop::kernel::LaneOp::Tanh)]
pub mod tanh {
    use simpleop::prelude::*;
    /// `tanh x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.tanh()
    }
    /// `dy · (1 - y²)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        dy * (T::one() - *y * *y)
    }
}

/// Logistic sigmoid: `1 / (1 + e^-x)`.
#[simple_op(inplace = "InOut, OutIn", vector = simpleop::kernel::forms::SIGMOID, lanes = simpleop::kernel::LaneOp::Sigmoid)]
pub mod sigmoid {
    use simpleop::prelude::*;
    /// `1 / (1 + e^-x)`, accurate for large |x| too.
    pub fn forward<T: Float>(x: T) -> T {
        x.sigmoid()
    }
    /// `dy · y (1 - y)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        dy * (*y * (T::one() - *y))
    }
}

/// Softsign: `x / (1 + |x|)`.
#[simple_op(inplace = "OutIn")]
pub mod softsign {
    use simpleop::prelude::*;
    /// `x / (1 + |x|)`.
    pub fn forward<T: Float>(x: T) -> T {
        x / (T::one() + x.abs())
    }
    /// `dy / (1 + |x|)²`: its limit 0 at ±inf, where the forward is NaN.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        let d = T::one() + x.abs();
        dy / (d * d)
    }
}

/// Reciprocal: `1 / x`.
#[simple_op(inplace = "InOut, OutIn")]
pub mod reciprocal {
    use simpleop::prelude::*;
    /// `1 / x`.
    pub fn forward<T: Float>(x: T) -> T {
        T::one() / x
    }
    /// `-dy · y²` (`= -dy / x²`).
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        -(dy * (*y * *y))
    }
}

/// The Gauss error function.
#[simple_op(inplace = "OutIn")]
pub mod erf {
    use simpleop::prelude::*;
    /// `erf x`.
    pub fn forward<T: Float>(x: T) -> T {
        x.erf()
    }
    /// `dy · 2/√π · e^(-x²)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * (T::from_f64(std::f64::consts::FRAC_2_SQRT_PI) * (-(*x * *x)).exp())
    }
}

/// The gamma function `Γ(x)` (forward only: no gradient).
#[simple_op(inplace = "InOut")]
pub mod gamma {
    use simpleop::prelude::*;
    /// `Γ(x)`.
    pub fn forward<T: Float>(x: T) -> T {
        x.gamma()
    }
}
