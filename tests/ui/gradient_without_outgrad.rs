use simpleop::simple_op;

#[simple_op]
mod square {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> T {
        x * x
    }

    pub fn backward<T: Float>(x: In0<T>) -> T {
        T::from_f64(2.0) * *x
    }
}

fn main() {}
