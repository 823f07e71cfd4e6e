use simpleop::simple_op;

// Helpers longer than a name the attribute reads, or much shorter, are not
// taken for typos of it.
#[simple_op]
mod cube {
    use simpleop::prelude::*;

    fn shapes() -> usize {
        1
    }

    fn backwards<T: Float>(x: T) -> T {
        x * x * T::from_f64(3.0)
    }

    fn row<T: Float>(x: T) -> T {
        x * x * x
    }

    pub fn forward<T: Float>(x: T) -> T {
        row(x) * T::from_f64(shapes() as f64)
    }

    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        *dy * backwards(*x)
    }
}

fn main() {
    let x = simpleop::NDArray::from_vec(vec![2.0f32], [1]).unwrap();
    assert_eq!(cube(&x).unwrap().to_f64_vec(), [8.0]);
}
