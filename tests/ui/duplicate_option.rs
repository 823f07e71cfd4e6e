use simpleop::simple_op;

#[simple_op(scalar, scalar)]
mod plus_scalar {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T, s: T) -> T {
        x + s
    }
}

fn main() {}
