use simpleop::simple_op;

#[simple_op(blob, inputs = ["data", "data"])]
mod twice {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }

    pub fn forward(inputs: &[TBlob], out: &mut TBlobMut, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
}

#[simple_op(blob, inputs = ["data", "moving-mean", 3])]
mod not_idents {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }

    pub fn forward(inputs: &[TBlob], out: &mut TBlobMut, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
}

#[simple_op(blob, inputs = ["data", "out"])]
mod reserved {
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
