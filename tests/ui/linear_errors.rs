use simpleop::simple_op;

// A gradient reading its input is not linear in (dy, x) together.
#[simple_op(linear)]
mod reads_input {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x * x
    }
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * *x * T::from_f64(2.0)
    }
}

// Nor is one reading the output (blob form).
#[simple_op(blob, linear)]
mod reads_output {
    use simpleop::prelude::*;
    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }
    pub fn forward(inputs: &[TBlob], out: &mut TBlobMut, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        y: OutValue<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        let _ = (dy, y, grads, req);
        Ok(())
    }
}

// Linear, but without the adjoint it would be the gradient of.
#[simple_op(linear)]
mod no_backward {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        -x
    }
}

// A derived gradient reads the inputs.
#[simple_op(autodiff, linear)]
mod derived {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x + x
    }
}

// A random op is not linear: a second call draws other numbers.
#[simple_op(blob, linear, resources(rng))]
mod noisy {
    use simpleop::prelude::*;
    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }
    pub fn forward(
        inputs: &[TBlob],
        out: &mut TBlobMut,
        req: OpReqType,
        env: &EnvArguments,
    ) -> Result<()> {
        let _ = (inputs, out, req, env);
        Ok(())
    }
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        let _ = (dy, grads, req);
        Ok(())
    }
}

// A flag takes no value.
#[simple_op(linear = true)]
mod valued {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x
    }
}

fn main() {}
