//! Lane operations: an elementwise op's semantics in terms the fused-program
//! code generator can emit (`#[simple_op(lanes = ...)]`).

/// What an op computes, per lane, in terms the code generator can emit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LaneOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `x + s`.
    AddScalar,
    /// `x - s`.
    SubScalar,
    /// `s - x`.
    RSubScalar,
    /// `x * s`.
    MulScalar,
    /// `x <= 0 ? 0 : x` (NaN passes through).
    Relu,
    /// `|x|`.
    Abs,
    /// `-x`.
    Neg,
    /// `x * x`.
    Square,
    /// `tanh x` as [`crate::vmath::fma::tanh`].
    Tanh,
    /// `e^x` as [`crate::vmath::fma::exp`].
    Exp,
    /// `1 / (1 + e^-x)` as [`crate::vmath::fma::sigmoid`].
    Sigmoid,
    /// `x < s ? 1 : 0`.
    LessScalar,
    /// `c != 0 ? x : y`.
    Where,
}

impl LaneOp {
    /// Number of inputs.
    pub fn arity(self) -> usize {
        match self {
            LaneOp::Add | LaneOp::Sub | LaneOp::Mul => 2,
            LaneOp::Where => 3,
            _ => 1,
        }
    }
}

/// An op's lane form with its scalar argument (`0` when it has none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lane {
    /// The operation.
    pub op: LaneOp,
    /// The `scalar` argument, as the kernel sees it in f32.
    pub scalar: f32,
}
