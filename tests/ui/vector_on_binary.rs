use simpleop::simple_op;

// A vector form sees one input only; `hypot` has two.
#[simple_op(vector = simpleop::kernel::forms::EXP)]
mod my_hypot {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(a: T, b: T) -> T {
        (a * a + b * b).sqrt()
    }
}

// ... and not the scalar either.
#[simple_op(scalar, vector = simpleop::kernel::forms::EXP)]
mod my_exp_times {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, scalar: T) -> T {
        x.exp() * scalar
    }
}

// ... nor an input updated in place.
#[simple_op(vector = simpleop::kernel::forms::EXP)]
mod my_state {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: &mut T) -> T {
        *x = x.exp();
        *x
    }
}

fn main() {}
