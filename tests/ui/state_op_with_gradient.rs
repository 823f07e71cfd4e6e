use simpleop::simple_op;

#[simple_op]
mod decay {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(w: T, m: &mut T) -> T {
        *m = *m * T::from_f64(0.9);
        w + *m
    }
    pub fn backward<T: Float>(dy: OutGrad<T>) -> (T, T) {
        (*dy, *dy)
    }
}

fn main() {}
