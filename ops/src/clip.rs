//! Clipping.

use serde::{Deserialize, Serialize};
use simpleop::simple_op;

/// Arguments of [`clip()`]: both bounds are required, as in MXNet.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ClipParams {
    /// Lower bound.
    pub a_min: f64,
    /// Upper bound.
    pub a_max: f64,
}

/// The bounds in `T`, through f32 as MXNet stores them.
fn bounds<T: simpleop::Float>(p: &ClipParams) -> (T, T) {
    let f32_bound = |v: f64| T::from_f64(f64::from(v as f32));
    (f32_bound(p.a_min), f32_bound(p.a_max))
}

/// `x > hi ? hi : x < lo ? lo : x`, MXNet's order: NaN passes through
/// (`Float::max`/`min` would drop it), and `hi` wins when `lo > hi`.
#[inline(always)]
pub(crate) fn clip_value<T: simpleop::Float>(x: T, lo: T, hi: T) -> T {
    if x > hi {
        hi
    } else if x < lo {
        lo
    } else {
        x
    }
}

/// Clips values to `[a_min, a_max]`; the gradient passes inside the bounds.
/// As in MXNet, NaN passes through, bounds with `a_min > a_max` give
/// `a_max` above `a_max` and `a_min` at or below it (the upper bound is
/// tested first), and the bounds are f32 (MXNet's `real_t`) whatever the
/// data's dtype, so float64 data is clipped at `f64::from(a_max as f32)`.
#[simple_op(kwargs = ClipParams, inplace = "OutIn")]
pub mod clip {
    use super::ClipParams;
    use simpleop::prelude::*;

    /// `x > a_max ? a_max : x < a_min ? a_min : x`, MXNet's order.
    pub fn forward<T: Float>(x: T, p: &ClipParams) -> T {
        let (lo, hi) = super::bounds::<T>(p);
        super::clip_value(x, lo, hi)
    }

    /// 0 where `x > a_max` or `x < a_min`, else `dy` (NaN included), as
    /// MXNet's.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, p: &ClipParams) -> T {
        let (lo, hi) = super::bounds::<T>(p);
        if *x > hi || *x < lo { T::zero() } else { *dy }
    }
}
