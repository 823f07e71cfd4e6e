use simpleop::simple_op;

#[simple_op(blob)]
mod passthrough {
    use simpleop::prelude::*;

    pub fn forward(inputs: &[TBlob], out: &mut TBlobMut, req: OpReqType) -> Result<()> {
        let _ = (inputs, out, req);
        Ok(())
    }
}

fn main() {}
