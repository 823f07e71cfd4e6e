use simpleop::simple_op;

#[simple_op]
mod square {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> T {
        x * x
    }

    pub fn backwrd<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        *dy * (*x + *x)
    }

    // a helper whose name is far from the attribute's is fine
    pub fn twice<T: Float>(x: T) -> T {
        x + x
    }
}

fn main() {}
