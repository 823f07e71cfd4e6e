use simpleop::simple_op;

// One output gradient on an op with two outputs.
#[simple_op]
mod single_out_grad {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> (T, T) {
        (x, x)
    }

    pub fn backward<T: Float>(dy: OutGrad<T>) -> T {
        *dy
    }
}

// Every output's gradient, with the wrong count.
#[simple_op]
mod wrong_count {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> (T, T) {
        (x, x)
    }

    pub fn backward<T: Float>(dys: OutGrads<[T; 3]>) -> T {
        dys[0]
    }
}

// In place and a vector form assume one output; the names miscount.
#[simple_op(inplace = "InOut", vector = simpleop::kernel::forms::EXP, output_names = ["a"])]
mod one_output_options {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> (T, T) {
        (x, x)
    }
}

// `outputs = N` beside a tuple; a gradient returning two values for one input.
#[simple_op(outputs = 2)]
mod counted_twice {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> (T, T) {
        (x, x)
    }

    pub fn backward<T: Float>(dys: OutGrads<[T; 2]>) -> (T, T) {
        (dys[0], dys[1])
    }
}

// OutGrads on an op with one output.
#[simple_op]
mod one_output {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> T {
        x
    }

    pub fn backward<T: Float>(dys: OutGrads<[T; 1]>) -> T {
        dys[0]
    }
}

fn main() {}
