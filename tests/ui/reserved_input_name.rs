use simpleop::simple_op;

#[simple_op]
mod copy_out {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(out: T) -> T {
        out
    }
}

fn main() {}
