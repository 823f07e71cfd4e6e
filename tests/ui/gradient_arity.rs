use simpleop::simple_op;

#[simple_op]
mod add {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(a: T, b: T) -> T {
        a + b
    }

    pub fn backward<T: Float>(dy: OutGrad<T>) -> T {
        *dy
    }
}

fn main() {}
