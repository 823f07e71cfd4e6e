use simpleop::simple_op;

// `fn rows` describes a reduction over trailing axes: not an elementwise op's...
#[simple_op]
mod my_abs {
    use simpleop::kernel::RowReduction;
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x.abs()
    }
    pub fn rows(_inputs: &[Shape]) -> Result<Option<RowReduction>> {
        Ok(None)
    }
}

// ... nor a blob-form op of another pattern.
#[simple_op(blob)]
mod my_copy {
    use simpleop::kernel::RowReduction;
    use simpleop::prelude::*;
    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }
    pub fn forward(inputs: &[TBlob<'_>], out: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
    pub fn rows(_inputs: &[Shape]) -> Result<Option<RowReduction>> {
        Ok(None)
    }
}

fn main() {}
