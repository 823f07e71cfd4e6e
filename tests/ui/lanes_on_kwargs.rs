use simpleop::simple_op;

pub struct Params {
    pub alpha: f64,
}

// A lane sees the inputs and at most a scalar; kwargs it cannot read.
#[simple_op(kwargs = Params, lanes = simpleop::kernel::LaneOp::Relu)]
mod my_leaky {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, p: &super::Params) -> T {
        if x > T::zero() { x } else { x * T::from_f64(p.alpha) }
    }
}

// ... nor an input updated in place.
#[simple_op(lanes = simpleop::kernel::LaneOp::Abs)]
mod my_state {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: &mut T) -> T {
        *x = x.abs();
        *x
    }
}

fn main() {}
