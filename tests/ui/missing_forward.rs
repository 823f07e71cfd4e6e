use simpleop::simple_op;

#[simple_op]
mod negative {
    use simpleop::prelude::*;

    pub fn forwrd<T: Float>(x: T) -> T {
        -x
    }
}

fn main() {}
