use simpleop::simple_op;

#[simple_op]
mod named {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T, label: String) -> T {
        let _ = label;
        x
    }
}

fn main() {}
