use simpleop::simple_op;

#[simple_op(scalar, kwargs = Params)]
mod scaled {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> T {
        x
    }
}

fn main() {}
