//! Loss functions.

use simpleop::simple_op;

/// Smooth L1 loss: quadratic within 1/sigma² of zero, linear outside
/// (`scalar` is sigma).
#[simple_op(inplace = "OutIn", scalar)]
pub mod smooth_l1 {
    use simpleop::prelude::*;

    /// `|x| - 0.5/sigma²` beyond `±1/sigma²`, `0.5 (sigma x)²` between (at
    /// the turning points and for NaN too), as MXNet's branches.
    pub fn forward<T: Float>(x: T, sigma: T) -> T {
        let s2 = sigma * sigma;
        let turn = T::one() / s2;
        if x > turn {
            x - T::from_f64(0.5) / s2
        } else if x < -turn {
            -x - T::from_f64(0.5) / s2
        } else {
            T::from_f64(0.5) * x * x * s2
        }
    }

    /// `dy` above `1/sigma²`, `-dy` below `-1/sigma²`, `dy · sigma² x`
    /// between (and for NaN, which so stays NaN), as MXNet's branches.
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, sigma: T) -> T {
        let s2 = sigma * sigma;
        let turn = T::one() / s2;
        if *x > turn {
            *dy
        } else if *x < -turn {
            -*dy
        } else {
            dy * (s2 * *x)
        }
    }
}
