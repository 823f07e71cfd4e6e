use simpleop::simple_op;

#[simple_op(inplace = "InOut")]
mod add {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(a: T, b: T) -> T {
        a + b
    }
}

fn main() {}
