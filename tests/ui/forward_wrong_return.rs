use simpleop::simple_op;

#[simple_op]
mod duplicate {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> (T, T) {
        (x, x)
    }
}

fn main() {}
