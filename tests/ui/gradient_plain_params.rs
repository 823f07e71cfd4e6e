use simpleop::simple_op;

#[simple_op]
mod square {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> T {
        x * x
    }

    pub fn backward<T: Float>(dy: T, x: T) -> T {
        dy * (x + x)
    }
}

fn main() {}
