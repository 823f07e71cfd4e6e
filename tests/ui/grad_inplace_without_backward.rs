use simpleop::simple_op;

#[simple_op(inplace = "OutIn")]
mod negative {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> T {
        -x
    }
}

fn main() {}
