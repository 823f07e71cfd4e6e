use simpleop::simple_op;

#[simple_op(inplac = "OutIn")]
mod negative {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> T {
        -x
    }

    pub fn backward<T: Float>(dy: OutGrad<T>) -> T {
        -*dy
    }
}

fn main() {}
