//! Binary elementwise math: powers, maximum, minimum and hypotenuse, in a
//! same-shape form (`_power`, ...) and a NumPy broadcasting form
//! (`broadcast_power`, ...) that share their kernels.

use simpleop::simple_op;

/// `a ^ b` elementwise, for arrays of the same shape. Not in place: the
/// gradient reads both inputs.
#[simple_op(name = "_power", inplace = "OutLhs", alias = "_Power")]
pub mod power {
    use simpleop::prelude::*;
    /// `a^b`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        a.powf(b)
    }
    /// `(dy · b · a^(b-1), dy · y · ln a)`, MXNet's formula: NaN for `a` at
    /// `b = 0` where `a^(b-1)` is not finite (a = 0, NaN), though `a^0` is
    /// flat, and NaN for `b` at `a = 0`, though `0^b` (b > 0) is flat (the
    /// exact check's documented cases).
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>, a: In0<T>, b: In1<T>) -> (T, T) {
        (dy * (*b * a.powf(*b - T::one())), dy * (*y * a.ln()))
    }
}

/// Elementwise maximum of two arrays of the same shape; NaN in either
/// propagates, as in MXNet and PyTorch. The gradient goes to `a` where
/// `a >= b` and to `b` where `a < b`, so to neither where one is NaN:
/// MXNet's convention, which on ties credits `a` though the forward
/// returns `b` (the exact check's documented case).
#[simple_op(name = "_maximum", inplace = "OutLhs", alias = "_Maximum")]
pub mod maximum {
    use simpleop::prelude::*;
    /// `a` if it is NaN or greater, else `b` (MXNet's `IsNan(a) ? a :
    /// (a > b ? a : b)`).
    pub fn forward<T: Float>(a: T, b: T) -> T {
        if a > b || a.is_nan() { a } else { b }
    }
    /// `(a >= b ? dy : 0, a < b ? dy : 0)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, a: In0<T>, b: In1<T>) -> (T, T) {
        let to_a = if *a >= *b { *dy } else { T::zero() };
        let to_b = if *a < *b { *dy } else { T::zero() };
        (to_a, to_b)
    }
}

/// Elementwise minimum of two arrays of the same shape; NaN in either
/// propagates, as in MXNet and PyTorch. The gradient goes to `a` where
/// `a <= b` and to `b` where `a > b`, so to neither where one is NaN
/// (MXNet's convention; see `_maximum`).
#[simple_op(name = "_minimum", inplace = "OutLhs", alias = "_Minimum")]
pub mod minimum {
    use simpleop::prelude::*;
    /// `a` if it is NaN or less, else `b`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        if a < b || a.is_nan() { a } else { b }
    }
    /// `(a <= b ? dy : 0, a > b ? dy : 0)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, a: In0<T>, b: In1<T>) -> (T, T) {
        let to_a = if *a <= *b { *dy } else { T::zero() };
        let to_b = if *a > *b { *dy } else { T::zero() };
        (to_a, to_b)
    }
}

/// Hypotenuse `√(a² + b²)` of two arrays of the same shape, without undue
/// overflow.
#[simple_op(name = "_hypot", inplace = "OutLhs", alias = "_Hypot")]
pub mod hypot {
    use simpleop::prelude::*;
    /// `√(a² + b²)`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        a.hypot(b)
    }
    /// `(dy · a / y, dy · b / y)`. In bf16 `y` is read rounded, which at
    /// subnormal inputs is far from `√(a² + b²)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>, a: In0<T>, b: In1<T>) -> (T, T) {
        (dy * (*a / *y), dy * (*b / *y))
    }
}

broadcast_twins! {
    /// `a ^ b` elementwise with NumPy broadcasting.
    broadcast_power = power [inplace = "OutLhs"] (y: OutValue, a: In0, b: In1)
        forward "`a^b`." backward "`(dy · b · a^(b-1), dy · y · ln a)`, summed over broadcast axes.";

    /// Elementwise maximum with NumPy broadcasting, NaN propagating; the
    /// gradient goes to `a` where `a >= b` and to `b` where `a < b`.
    broadcast_maximum = maximum [inplace = "OutLhs"] (a: In0, b: In1)
        forward "As `_maximum`."
        backward "`(a >= b ? dy : 0, a < b ? dy : 0)`, summed over broadcast axes.";

    /// Elementwise minimum with NumPy broadcasting, NaN propagating; the
    /// gradient goes to `a` where `a <= b` and to `b` where `a > b`.
    broadcast_minimum = minimum [inplace = "OutLhs"] (a: In0, b: In1)
        forward "As `_minimum`."
        backward "`(a <= b ? dy : 0, a > b ? dy : 0)`, summed over broadcast axes.";
}
