use simpleop::simple_op;

#[simple_op(inplace = "LhsOut")]
mod decay {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(m: &mut T, w: T) -> T {
        *m = *m * T::from_f64(0.9);
        w + *m
    }
}

fn main() {}
