//! Comparisons: 1 where the relation holds, else 0, in the input's dtype.
//! Against a scalar (`scalar` attribute) or between two arrays with NumPy
//! broadcasting. As in MXNet, their gradients are zero.

use simpleop::simple_op;

comparisons! {
    /// `x == scalar`: 1 where equal, else 0. The gradient is zero.
    equal_scalar [name = "_equal_scalar", alias = "_EqualScalar"] ==
    /// `a == b` with NumPy broadcasting: 1 where equal, else 0. The gradients
    /// are zero.
    broadcast_equal [alias = "_equal, _Equal"];

    /// `x > scalar`: 1 where greater, else 0. The gradient is zero.
    greater_scalar [name = "_greater_scalar", alias = "_GreaterScalar"] >
    /// `a > b` with NumPy broadcasting: 1 where greater, else 0. The gradients
    /// are zero.
    broadcast_greater [alias = "_greater"];

    /// `x < scalar`: 1 where less, else 0. The gradient is zero.
    lesser_scalar [
        name = "_lesser_scalar",
        lanes = simpleop::kernel::LaneOp::LessScalar,
        alias = "_LesserScalar"
    ] <
    /// `a < b` with NumPy broadcasting: 1 where less, else 0. The gradients are
    /// zero.
    broadcast_lesser [alias = "_lesser"];

    /// `x != scalar`: 1 where different, else 0. The gradient is zero.
    not_equal_scalar [name = "_not_equal_scalar"] !=
    /// `a != b` with NumPy broadcasting: 1 where different, else 0. The gradients
    /// are zero. Also registered as MXNet's same-shape `_not_equal`.
    broadcast_not_equal [alias = "_not_equal"];

    /// `x >= scalar`: 1 where greater or equal, else 0. The gradient is zero.
    greater_equal_scalar [name = "_greater_equal_scalar"] >=
    /// `a >= b` with NumPy broadcasting: 1 where greater or equal, else 0. The gradients
    /// are zero. Also registered as MXNet's same-shape `_greater_equal`.
    broadcast_greater_equal [alias = "_greater_equal"];

    /// `x <= scalar`: 1 where less or equal, else 0. The gradient is zero.
    lesser_equal_scalar [name = "_lesser_equal_scalar"] <=
    /// `a <= b` with NumPy broadcasting: 1 where less or equal, else 0. The gradients
    /// are zero. Also registered as MXNet's same-shape `_lesser_equal`.
    broadcast_lesser_equal [alias = "_lesser_equal"];
}
