use simpleop::simple_op;

#[simple_op]
mod noise {
    use simpleop::prelude::*;

    pub fn shape(_inputs: &[Shape]) -> Result<Shape> {
        Ok(Shape::new(vec![4]))
    }

    pub fn forward<T: Float>(rng: &mut Rng) -> T {
        T::from_f64(rng.uniform())
    }
}

fn main() {}
