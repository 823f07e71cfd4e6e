use simpleop::simple_op;

// Several outputs, but one `out` written.
#[simple_op(blob, outputs = 2)]
mod one_out {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Vec<Shape>> {
        Ok(vec![inputs[0].clone(); 2])
    }

    pub fn forward(inputs: &[TBlob], out: &mut TBlobMut, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
}

// Aux states the forward never takes.
#[simple_op(blob, aux = ["moving_mean"])]
mod aux_unread {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }

    pub fn forward(inputs: &[TBlob], out: &mut TBlobMut, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
}

// In place on an op with several outputs; names that do not match the count.
#[simple_op(blob, outputs = 2, output_names = ["a", "b", "c"], inplace = "InOut")]
mod inplace_multi {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Vec<Shape>> {
        Ok(vec![inputs[0].clone(); 2])
    }

    pub fn forward(inputs: &[TBlob], outs: &mut [TBlobMut], reqs: &[OpReqType]) -> Result<()> {
        let _ = (inputs, outs, reqs);
        Ok(())
    }
}

// A gradient reading one `OutGrad` of an op with several outputs.
#[simple_op(blob, outputs = 2)]
mod one_out_grad {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Vec<Shape>> {
        Ok(vec![inputs[0].clone(); 2])
    }

    pub fn forward(inputs: &[TBlob], outs: &mut [TBlobMut], reqs: &[OpReqType]) -> Result<()> {
        let _ = (inputs, outs, reqs);
        Ok(())
    }

    pub fn backward(dy: OutGrad<&TBlob>, grads: &mut [TBlobMut], reqs: &[OpReqType]) -> Result<()> {
        let _ = (dy, grads, reqs);
        Ok(())
    }
}

// A count from the kwargs of an op without kwargs; several outputs on the
// elementwise form.
#[simple_op(outputs = counted)]
mod elementwise_multi {
    pub fn forward<T: simpleop::Float>(x: T) -> T {
        x
    }
}

fn main() {}
