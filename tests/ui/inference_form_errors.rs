use simpleop::simple_op;

// An inference form on the elementwise form: the form replaces a blob op.
#[simple_op(inference_form = my_form)]
mod elementwise_with_form {
    use simpleop::prelude::*;

    pub fn forward<T: Float>(x: T) -> T {
        x
    }
}

// An inference form without kwargs: the function reads them.
#[simple_op(blob, inference_form = my_form)]
mod form_without_kwargs {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }

    pub fn forward(inputs: &[TBlob], out: &mut TBlobMut, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
}

// A value that is not a path.
#[simple_op(blob, inference_form = "my_form")]
mod form_not_a_path {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }

    pub fn forward(inputs: &[TBlob], out: &mut TBlobMut, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
}

fn main() {}
