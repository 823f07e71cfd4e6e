//! Elementwise ops with several outputs: the forward returns a tuple.

use simpleop::simple_op;

/// `(sin x, cos x)` from one pass over `x`.
#[simple_op(output_names = ["sin", "cos"])]
pub mod sincos {
    use simpleop::prelude::*;

    /// Both functions of one element.
    pub fn forward<T: Float>(x: T) -> (T, T) {
        (x.sin(), x.cos())
    }

    /// `dsin · cos x − dcos · sin x`, from the outputs; an output no one
    /// read has a zero gradient here.
    pub fn backward<T: Float>(dys: OutGrads<[T; 2]>, ys: OutValues<[T; 2]>) -> T {
        dys[0] * ys[1] - dys[1] * ys[0]
    }
}

/// Polar to Cartesian coordinates: `(r cos θ, r sin θ)`.
#[simple_op(output_names = ["x", "y"])]
pub mod polar_to_xy {
    use simpleop::prelude::*;

    /// Both coordinates of one point.
    pub fn forward<T: Float>(r: T, theta: T) -> (T, T) {
        (r * theta.cos(), r * theta.sin())
    }

    /// `dr = dx cos θ + dy sin θ`, `dθ = −dx · y + dy · x`.
    pub fn backward<T: Float>(
        dys: OutGrads<[T; 2]>,
        xy: OutValues<[T; 2]>,
        theta: In1<T>,
    ) -> (T, T) {
        let (c, s) = (theta.cos(), theta.sin());
        let dr = dys[0] * c + dys[1] * s;
        let dtheta = dys[1] * xy[0] - dys[0] * xy[1];
        (dr, dtheta)
    }
}
