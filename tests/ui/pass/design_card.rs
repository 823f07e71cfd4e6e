use simpleop::simple_op;

/// Smooth L1 loss: quadratic within 1/sigma^2 of zero, linear outside.
#[simple_op(inplace = "OutIn", scalar)]
mod smooth_l1 {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T, sigma: T) -> T {
        let s2 = sigma * sigma;
        if x.abs() < T::one() / s2 {
            T::from_f64(0.5) * x * x * s2
        } else {
            x.abs() - T::from_f64(0.5) / s2
        }
    }

    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, sigma: T) -> T {
        let s2 = sigma * sigma;
        if x.abs() < T::one() / s2 {
            dy * (s2 * *x)
        } else {
            dy * x.sign()
        }
    }
}

fn main() {}
