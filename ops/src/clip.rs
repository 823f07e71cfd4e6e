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

/// Clips values to `[a_min, a_max]`; the gradient passes inside the bounds.
#[simple_op(kwargs = ClipParams, inplace = "OutIn")]
pub mod clip {
    use super::ClipParams;
    use simpleop::prelude::*;

    /// `min(max(x, a_min), a_max)`.
    pub fn forward<T: Float>(x: T, p: &ClipParams) -> T {
        x.max(T::from_f64(p.a_min)).min(T::from_f64(p.a_max))
    }

    /// `dy` where `a_min <= x <= a_max`, else 0.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, p: &ClipParams) -> T {
        if *x >= T::from_f64(p.a_min) && *x <= T::from_f64(p.a_max) {
            *dy
        } else {
            T::zero()
        }
    }
}
