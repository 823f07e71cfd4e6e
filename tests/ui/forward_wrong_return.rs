use simpleop::simple_op;

#[simple_op]
mod mixed {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> (T, u8) {
        (x, 0)
    }
}

#[simple_op]
mod too_many {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> (T, T, T, T, T) {
        (x, x, x, x, x)
    }
}

fn main() {}
