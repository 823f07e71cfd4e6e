//! The gradient check of ops with several outputs or aux states: head
//! gradients on the chosen outputs, fresh aux states for every call (a
//! training call updates them), and every request of the backward pass.

use super::measure::{GradReport, central_differences, compare, tolerance};
use crate::{DType, EnvArguments, Error, NDArray, OpDef, OpReqType, Result, Shape, eager};

/// One configured check of an op that is not simple.
pub(super) struct General<'a> {
    pub(super) op: &'static OpDef,
    pub(super) env: &'a EnvArguments,
    pub(super) shapes: &'a [Shape],
    pub(super) base: &'a [Vec<f64>],
    pub(super) seed: u64,
    pub(super) train: bool,
    pub(super) heads: Option<&'a [usize]>,
}

impl General<'_> {
    /// The aux states' shapes, inferred from the arguments'.
    fn aux_shapes(&self) -> Result<Vec<Shape>> {
        let op = self.op;
        let n = self.shapes.len();
        let mut all: Vec<Option<Shape>> = self.shapes.iter().cloned().map(Some).collect();
        all.extend(op.aux_states.iter().map(|_| None));
        if let Some(complete) = op.complete_shapes {
            complete(op, &mut all, self.env)?;
        }
        all[n..]
            .iter()
            .zip(op.aux_states)
            .map(|(s, name)| {
                s.clone().ok_or_else(|| {
                    Error::invalid(
                        op.name,
                        *name,
                        "the check cannot infer this aux state's shape",
                    )
                })
            })
            .collect()
    }

    /// Every output of a forward pass over `xs` with fresh aux states
    /// (uniform in `[0.5, 1.5)`, valid variances), in `dtype`.
    fn forward(&self, xs: &[NDArray], dtype: DType) -> Result<Vec<NDArray>> {
        let mut aux: Vec<NDArray> = self
            .aux_shapes()?
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                NDArray::random_uniform(s, 0.5, 1.5, dtype, self.seed.wrapping_add(50 + i as u64))
            })
            .collect::<Result<_>>()?;
        let mut refs: Vec<&mut NDArray> = aux.iter_mut().collect();
        let inputs: Vec<&NDArray> = xs.iter().collect();
        let _mode = eager::TrainingGuard::new(self.train);
        eager::invoke_outputs(self.op, &inputs, &mut refs, self.env)
    }

    fn has_head(&self, k: usize) -> bool {
        self.heads.is_none_or(|h| h.contains(&k))
    }

    pub(super) fn run(&self, dtype: DType, report: &mut GradReport) -> Result<()> {
        let op = self.op;
        let inputs: Vec<NDArray> = self
            .base
            .iter()
            .zip(self.shapes)
            .map(|(v, s)| NDArray::from_f64(v, s.clone(), dtype))
            .collect::<Result<_>>()?;
        let outs = self.forward(&inputs, dtype)?;
        if op.gradient.is_none() {
            return Err(Error::NoGradient { op: op.name.into() });
        }
        let dys: Vec<Option<NDArray>> = outs
            .iter()
            .enumerate()
            .map(|(k, o)| {
                let seed = self.seed ^ (0xD1 + k as u64);
                let head = self.has_head(k) && o.dtype().is_float();
                head.then(|| NDArray::random_uniform(o.shape().clone(), -1.0, 1.0, dtype, seed))
                    .transpose()
            })
            .collect::<Result<_>>()?;
        let numeric = self.numeric(&inputs, &dys)?;
        let tol = tolerance(dtype);
        let n = inputs.len();
        let init: Vec<NDArray> = inputs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                NDArray::random_uniform(x.shape().clone(), -1.0, 1.0, dtype, 100 + i as u64)
            })
            .collect::<Result<_>>()?;
        let x_refs: Vec<&NDArray> = inputs.iter().collect();
        let out_refs: Vec<&NDArray> = outs.iter().collect();
        let dy_refs: Vec<Option<&NDArray>> = dys.iter().map(Option::as_ref).collect();
        for req in [OpReqType::WriteTo, OpReqType::AddTo, OpReqType::Null] {
            let mut grads: Vec<NDArray> = match req {
                OpReqType::WriteTo => inputs
                    .iter()
                    .map(|x| NDArray::full(x.shape().clone(), f64::NAN, dtype))
                    .collect(),
                _ => init.iter().map(NDArray::deep_copy).collect(),
            };
            eager::invoke_backward_outputs(
                op,
                self.env,
                &dy_refs,
                &out_refs,
                &x_refs,
                &mut grads,
                &vec![req; n],
            )?;
            let mut worst = 0.0f64;
            for i in 0..n {
                let base = init[i].to_f64_vec();
                let want: Vec<f64> = match req {
                    OpReqType::AddTo => base.iter().zip(&numeric[i]).map(|(a, b)| a + b).collect(),
                    OpReqType::Null => base,
                    _ => numeric[i].clone(),
                };
                let arg = format!("{}_grad", op.input_name(i));
                let got = grads[i].to_f64_vec();
                worst = worst.max(compare(op, &arg, dtype, req, &got, &want, tol)?);
            }
            report.rows.push((dtype, req, worst));
        }
        Ok(())
    }

    /// Central differences in f64 of `Σ_k <output_k, dy_k>`.
    fn numeric(&self, inputs: &[NDArray], dys: &[Option<NDArray>]) -> Result<Vec<Vec<f64>>> {
        let x64: Vec<NDArray> = inputs.iter().map(|x| x.astype(DType::F64)).collect();
        let dy64: Vec<Option<Vec<f64>>> = dys
            .iter()
            .map(|d| d.as_ref().map(|d| d.astype(DType::F64).to_f64_vec()))
            .collect();
        let loss = |xs: &[NDArray]| -> Result<f64> {
            let outs = self.forward(xs, DType::F64)?;
            Ok(outs
                .iter()
                .zip(&dy64)
                .filter_map(|(o, d)| d.as_ref().map(|d| (o, d)))
                .map(|(o, d)| {
                    o.to_f64_vec()
                        .iter()
                        .zip(d)
                        .map(|(a, b)| a * b)
                        .sum::<f64>()
                })
                .sum())
        };
        central_differences(&x64, loss)
    }
}
