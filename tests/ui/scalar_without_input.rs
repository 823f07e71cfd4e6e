use simpleop::simple_op;

#[simple_op(scalar)]
mod twice {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x + x
    }
}

fn main() {}
