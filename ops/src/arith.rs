//! Elementwise arithmetic on arrays: same-shape (`elemwise_*`) and NumPy
//! broadcasting (`broadcast_*`) forms share their kernels.

use simpleop::simple_op;

/// Identity; `a += b` accumulates `_copy(b)` into `a` with `AddTo`.
#[simple_op(name = "_copy", inplace = "InOut, OutIn", alias = "identity", linear)]
pub mod copy {
    use simpleop::prelude::*;
    /// `x`.
    pub fn forward<T: Float>(x: T) -> T {
        x
    }
    /// `dy`.
    pub fn backward<T: Float>(dy: OutGrad<T>) -> T {
        *dy
    }
}

/// Numerical negative: `-x`.
#[simple_op(inplace = "InOut, OutIn", lanes = simpleop::kernel::LaneOp::Neg, linear)]
pub mod negative {
    use simpleop::prelude::*;
    /// `-x`.
    pub fn forward<T: Float>(x: T) -> T {
        -x
    }
    /// `-dy`.
    pub fn backward<T: Float>(dy: OutGrad<T>) -> T {
        -*dy
    }
}

/// Adds two arrays of the same shape.
#[simple_op(inplace = "LhsOut, OutLhs", lanes = simpleop::kernel::LaneOp::Add, alias = "_Plus, _plus, _add", linear)]
pub mod elemwise_add {
    use simpleop::prelude::*;
    /// `a + b`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        a + b
    }
    /// `(dy, dy)`.
    pub fn backward<T: Float>(dy: OutGrad<T>) -> (T, T) {
        (*dy, *dy)
    }
}

/// Subtracts two arrays of the same shape.
#[simple_op(inplace = "LhsOut, OutLhs", lanes = simpleop::kernel::LaneOp::Sub, alias = "_Minus, _minus, _sub", linear)]
pub mod elemwise_sub {
    use simpleop::prelude::*;
    /// `a - b`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        a - b
    }
    /// `(dy, -dy)`.
    pub fn backward<T: Float>(dy: OutGrad<T>) -> (T, T) {
        (*dy, -*dy)
    }
}

/// Multiplies two arrays of the same shape. Not in place: the gradient
/// reads both inputs.
#[simple_op(inplace = "OutLhs", lanes = simpleop::kernel::LaneOp::Mul, alias = "_Mul, _mul")]
pub mod elemwise_mul {
    use simpleop::prelude::*;
    /// `a * b`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        a * b
    }
    /// `(dy b, dy a)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, a: In0<T>, b: In1<T>) -> (T, T) {
        (dy * *b, dy * *a)
    }
}

/// Divides two arrays of the same shape. The gradient reads the output and
/// the divisor, so the forward may overwrite the dividend.
#[simple_op(inplace = "LhsOut, OutLhs", alias = "_Div, _div")]
pub mod elemwise_div {
    use simpleop::prelude::*;
    /// `a / b`.
    pub fn forward<T: Float>(a: T, b: T) -> T {
        a / b
    }
    /// `(dy / b, -dy · (a/b) / b)`.
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>, b: In1<T>) -> (T, T) {
        (dy / *b, -(dy * *y) / *b)
    }
}

broadcast_twins! {
    /// Adds two arrays with NumPy broadcasting.
    broadcast_add = elemwise_add [
        inplace = "LhsOut, OutLhs",
        lanes = simpleop::kernel::LaneOp::Add,
        alias = "broadcast_plus",
        linear
    ] () forward "`a + b`." backward "`(dy, dy)`, summed over broadcast axes by the framework.";

    /// Subtracts two arrays with NumPy broadcasting.
    broadcast_sub = elemwise_sub [
        inplace = "LhsOut, OutLhs",
        lanes = simpleop::kernel::LaneOp::Sub,
        alias = "broadcast_minus",
        linear
    ] () forward "`a - b`." backward "`(dy, -dy)`.";

    /// Multiplies two arrays with NumPy broadcasting.
    broadcast_mul = elemwise_mul [inplace = "OutLhs", lanes = simpleop::kernel::LaneOp::Mul]
        (a: In0, b: In1) forward "`a * b`." backward "`(dy b, dy a)`.";

    /// Divides two arrays with NumPy broadcasting.
    broadcast_div = elemwise_div [inplace = "LhsOut, OutLhs"]
        (y: OutValue, b: In1) forward "`a / b`." backward "`(dy / b, -dy · y / b)`.";
}
