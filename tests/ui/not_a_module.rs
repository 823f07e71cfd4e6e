use simpleop::simple_op;

#[simple_op]
pub fn negative(x: f32) -> f32 {
    -x
}

fn main() {}
