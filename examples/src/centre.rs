//! [`running_centre()`]: a third-party op with two outputs and an aux
//! state, the pattern of BatchNorm in a few lines.
//!
//! `data` `(N, F)` is centred per feature: in training with the batch's
//! mean, which also moves the aux state `running_mean` (`r = momentum·r +
//! (1 − momentum)·mean`); in inference with `running_mean`. The first
//! output is the centred data; the second, hidden unless
//! `visible_outputs` shows it, is the mean used, which backward reads.

use serde::{Deserialize, Serialize};
use simpleop::{Error, Result, Shape, simple_op};

/// Keyword arguments of [`running_centre()`].
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct RunningCentreParams {
    /// How much of the running mean a training step keeps.
    pub momentum: f64,
}

impl Default for RunningCentreParams {
    fn default() -> Self {
        RunningCentreParams { momentum: 0.9 }
    }
}

/// Rows and features of a `(N, F)` array.
fn rows_features(op: &str, data: &Shape) -> Result<(usize, usize)> {
    match data.dims() {
        [n, f] => Ok((*n, *f)),
        _ => Err(Error::ShapeMismatch {
            op: op.into(),
            arg: "data".into(),
            expected: "a 2-d array (rows, features)".into(),
            got: data.clone(),
        }),
    }
}

/// Centres each feature (column) of `data` with the batch mean in
/// training, updating the aux state `running_mean`, and with
/// `running_mean` in inference. Outputs: the centred data, and the mean
/// used.
#[simple_op(
    blob,
    name = "running_centre",
    inputs = ["data"],
    aux = ["running_mean"],
    kwargs = RunningCentreParams,
    outputs = 2,
    visible_outputs = 1,
    output_names = ["output", "mean"]
)]
pub mod running_centre {
    use super::RunningCentreParams;
    use simpleop::prelude::*;

    /// The data's shape, then `(F,)`.
    pub fn shape(inputs: &[Shape], _p: &RunningCentreParams) -> Result<Vec<Shape>> {
        let (_, f) = super::rows_features("running_centre", &inputs[0])?;
        Ok(vec![inputs[0].clone(), Shape::new(vec![f])])
    }

    /// `running_mean` is `(F,)`.
    pub fn input_shapes(shapes: &mut [Option<Shape>], _p: &RunningCentreParams) -> Result<()> {
        if let Some(data) = &shapes[0] {
            let (_, f) = super::rows_features("running_centre", data)?;
            shapes[1].get_or_insert_with(|| Shape::new(vec![f]));
        }
        Ok(())
    }

    /// `out = data − mean`; the mean is the batch's in training (and the
    /// running mean moves towards it), the running one otherwise.
    pub fn forward(
        inputs: &[TBlob<'_>],
        outs: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        aux: AuxStates<&mut [TBlobMut<'_>]>,
        ctx: &RunContext,
        p: &RunningCentreParams,
    ) -> Result<()> {
        let x = inputs[0].as_slice::<f32>()?;
        let (n, f) = super::rows_features("running_centre", inputs[0].shape())?;
        let running = aux.0[0].as_slice_mut::<f32>()?;
        let mean: Vec<f32> = if ctx.is_train {
            let mut m = vec![0.0f32; f];
            for row in x.chunks_exact(f) {
                m.iter_mut().zip(row).for_each(|(a, v)| *a += v / n as f32);
            }
            let k = p.momentum as f32;
            running
                .iter_mut()
                .zip(&m)
                .for_each(|(r, v)| *r = k * *r + (1.0 - k) * v);
            m
        } else {
            running.to_vec()
        };
        let (head, rest) = outs.split_at_mut(1);
        let y = head[0].as_slice_mut::<f32>()?;
        for (yr, xr) in y.chunks_exact_mut(f).zip(x.chunks_exact(f)) {
            for ((o, v), m) in yr.iter_mut().zip(xr).zip(&mean) {
                reqs[0].assign(o, v - m);
            }
        }
        if reqs[1] != OpReqType::Null {
            for (o, m) in rest[0].as_slice_mut::<f32>()?.iter_mut().zip(&mean) {
                reqs[1].assign(o, *m);
            }
        }
        Ok(())
    }

    /// The batch mean depends on every row: `dx = dy − mean_rows(dy) +
    /// dmean / N` (an output nothing read has a zero gradient).
    pub fn backward(
        dys: OutGrads<&[Option<TBlob<'_>>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
    ) -> Result<()> {
        let (n, f) = super::rows_features("running_centre", grads[0].shape())?;
        let dy = match &dys[0] {
            Some(d) => d.as_slice::<f32>()?.to_vec(),
            None => vec![0.0; n * f],
        };
        let dmean = match &dys[1] {
            Some(d) => d.as_slice::<f32>()?.to_vec(),
            None => vec![0.0; f],
        };
        let mut shift: Vec<f32> = dmean.iter().map(|d| d / n as f32).collect();
        for row in dy.chunks_exact(f) {
            shift
                .iter_mut()
                .zip(row)
                .for_each(|(s, v)| *s -= v / n as f32);
        }
        let dx = grads[0].as_slice_mut::<f32>()?;
        for (gr, dr) in dx.chunks_exact_mut(f).zip(dy.chunks_exact(f)) {
            for ((g, d), s) in gr.iter_mut().zip(dr).zip(&shift) {
                reqs[0].assign(g, d + s);
            }
        }
        Ok(())
    }
}
