use simpleop::simple_op;

#[simple_op(inplace = "InOut, OutIn")]
mod negate {
    //! Negation, documented from inside the module.
    #![allow(clippy::all)]
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        -x
    }
    pub fn backward<T: Float>(dy: OutGrad<T>) -> T {
        -*dy
    }
}

fn main() {
    assert_eq!(negate::OP.description, "Negation, documented from inside the module.");
}
