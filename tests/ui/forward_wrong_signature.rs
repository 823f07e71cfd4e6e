use simpleop::simple_op;

#[simple_op]
mod negative {
    pub fn forward(x: f32) -> f32 {
        -x
    }
}

fn main() {}
