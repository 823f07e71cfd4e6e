use simpleop::simple_op;

// A gradient written by hand as well as derived.
#[simple_op(autodiff)]
mod both {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x * x
    }
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * *x
    }
}

// A blob op has no scalar forward to run on dual numbers.
#[simple_op(blob, autodiff)]
mod blob_op {
    use simpleop::prelude::*;
    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }
    pub fn forward(inputs: &[TBlob], out: &mut TBlobMut, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
}

// Bounds a dual number may not meet.
#[simple_op(autodiff)]
mod not_float_only {
    use simpleop::prelude::*;
    pub fn forward<T: Float + Default>(x: T) -> T {
        x + T::default()
    }
}

// An input updated in place.
#[simple_op(autodiff)]
mod state {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, m: &mut T) -> T {
        *m = *m + x;
        x
    }
}

// Four inputs: a gradient reads at most three.
#[simple_op(autodiff)]
mod four {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(a: T, b: T, c: T, d: T) -> T {
        a * b + c * d
    }
}

// A flag takes no value.
#[simple_op(autodiff = true)]
mod valued {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x
    }
}

fn main() {}
