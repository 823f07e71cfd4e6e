//! Numerical gradient checking for any registered op, and the exact check
//! ([`ExactCheck`]) of an elementwise op's written gradient against the
//! derivative of its forward on dual numbers.
//!
//! [`GradCheck`] compares an op's registered gradient with central
//! differences of its forward pass computed in f64, for every float dtype
//! and every [`OpReqType`] the op allows, and also checks that the forward
//! kernel honours each request type.
//!
//! ```
//! use simpleop::gradcheck::GradCheck;
//! simpleop_ops::link(); // the crate defining `smooth_l1`
//! GradCheck::new("smooth_l1")
//!     .attr("scalar", 1.0)
//!     .shapes(&[&[3, 4]])
//!     .range(-3.0, 3.0)
//!     .run()?;
//! # Ok::<(), simpleop::Error>(())
//! ```

mod exact;
mod general;
mod measure;

pub use exact::{Disagreement, ExactCheck, ExactReport};
pub use measure::GradReport;
use measure::{central_differences, compare, mismatch, tolerance};

use crate::{Attrs, DType, EnvArguments, Error, NDArray, OpDef, OpReqType, Result, Shape, eager};

/// A configured gradient check. Build with [`GradCheck::new`], finish with
/// [`GradCheck::run`].
#[derive(Clone, Debug)]
pub struct GradCheck {
    op: String,
    attrs: Attrs,
    shapes: Vec<Shape>,
    inputs: Option<Vec<Vec<f64>>>,
    low: f64,
    high: f64,
    seed: u64,
    dtypes: Vec<DType>,
    /// Training mode for the forward passes.
    train: bool,
    /// The outputs that get a head gradient; `None`: every output.
    heads: Option<Vec<usize>>,
}

impl GradCheck {
    /// Checks op `name` with default settings: every float dtype, inputs
    /// uniform in `[-2, 2)`, shape `(3, 4)` for every input.
    pub fn new(name: &str) -> Self {
        GradCheck {
            op: name.to_string(),
            attrs: Attrs::new(),
            shapes: Vec::new(),
            inputs: None,
            low: -2.0,
            high: 2.0,
            seed: 42,
            dtypes: DType::FLOATS.to_vec(),
            train: false,
            heads: None,
        }
    }
    /// Runs the forward passes in training mode (batch statistics,
    /// dropout with the check's seed).
    pub fn train(mut self) -> Self {
        self.train = true;
        self
    }
    /// Gives head gradients to these outputs only (an op with several
    /// outputs whose others, like BatchNorm's statistics, have none).
    pub fn heads(mut self, outputs: &[usize]) -> Self {
        self.heads = Some(outputs.to_vec());
        self
    }
    /// Sets one attribute (as a graph would: `("scalar", 1.0)`).
    pub fn attr(mut self, key: &str, value: impl ToString) -> Self {
        self.attrs.insert(key, value);
        self
    }
    /// Sets all attributes.
    pub fn attrs(mut self, attrs: Attrs) -> Self {
        self.attrs = attrs;
        self
    }
    /// The input shapes, one per input.
    pub fn shapes(mut self, shapes: &[&[usize]]) -> Self {
        self.shapes = shapes.iter().map(|s| Shape::from(*s)).collect();
        self
    }
    /// Explicit input values (f64, one vector per input, shapes from [`Self::shapes`]).
    pub fn inputs(mut self, values: Vec<Vec<f64>>) -> Self {
        self.inputs = Some(values);
        self
    }
    /// The range random inputs are drawn from; pick one that avoids kinks.
    pub fn range(mut self, low: f64, high: f64) -> Self {
        self.low = low;
        self.high = high;
        self
    }
    /// The seed of the random inputs and head gradients.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Restricts the dtypes checked.
    pub fn dtypes(mut self, dtypes: &[DType]) -> Self {
        self.dtypes = dtypes.to_vec();
        self
    }

    /// The input shapes (`(3, 4)` each unless given) and values (given,
    /// or uniform in the check's range, one seed per input) of `op`'s
    /// `n_in` arguments.
    fn base_inputs(&self, op: &OpDef, n_in: usize) -> Result<(Vec<Shape>, Vec<Vec<f64>>)> {
        let shapes: Vec<Shape> = if self.shapes.is_empty() {
            vec![Shape::from([3, 4]); n_in]
        } else {
            self.shapes.clone()
        };
        if shapes.len() != n_in {
            return Err(Error::Arity {
                op: op.name.into(),
                expected: n_in,
                got: shapes.len(),
            });
        }
        let base: Vec<Vec<f64>> = match &self.inputs {
            Some(v) => v.clone(),
            None => shapes
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    NDArray::random_uniform(
                        s.clone(),
                        self.low,
                        self.high,
                        DType::F64,
                        self.seed.wrapping_add(i as u64),
                    )
                    .map(|a| a.to_f64_vec())
                })
                .collect::<Result<_>>()?,
        };
        Ok((shapes, base))
    }

    /// Checks the op's second derivative (PyTorch's `gradgradcheck`): the
    /// gradient of its `_backward` op ([`crate::backward_op`]) against
    /// central differences of that op, as [`GradCheck::run`] checks any
    /// op. `_backward`'s inputs are an output gradient drawn from
    /// `[-1, 1)`, the op's outputs at the inputs (when its gradient reads
    /// them) and the inputs; its outputs are the input gradients.
    ///
    /// ```
    /// use simpleop::gradcheck::GradCheck;
    /// simpleop_ops::link();
    /// GradCheck::new("tanh").shapes(&[&[2, 3]]).run_gradgrad()?;
    /// GradCheck::new("dot").shapes(&[&[2, 3], &[3, 4]]).run_gradgrad()?;
    /// # Ok::<(), simpleop::Error>(())
    /// ```
    pub fn run_gradgrad(&self) -> Result<GradReport> {
        let op = eager::lookup(&self.op)?.def;
        let env = (op.parse)(op, &self.attrs)?.with_seed(self.seed);
        let layout = crate::backward_op::Layout::of(op, &env)?;
        let (shapes, base) = self.base_inputs(op, layout.arguments)?;
        let xs: Vec<NDArray> = base
            .iter()
            .zip(&shapes)
            .map(|(v, s)| NDArray::from_f64(v, s.clone(), DType::F64))
            .collect::<Result<_>>()?;
        let refs: Vec<&NDArray> = xs.iter().collect();
        let ys = eager::invoke_outputs(op, &refs, &mut [], &env)?;
        let mut values: Vec<Vec<f64>> = Vec::new();
        let mut all_shapes: Vec<Shape> = Vec::new();
        for (k, y) in ys.iter().enumerate().take(layout.outputs) {
            let seed = self.seed ^ 0xD1 ^ (k as u64);
            values.push(
                NDArray::random_uniform(y.shape().clone(), -1.0, 1.0, DType::F64, seed)?
                    .to_f64_vec(),
            );
            all_shapes.push(y.shape().clone());
        }
        if layout.reads_outputs {
            for y in ys.iter().take(layout.outputs) {
                values.push(y.to_f64_vec());
                all_shapes.push(y.shape().clone());
            }
        }
        for x in &xs {
            values.push(x.to_f64_vec());
            all_shapes.push(x.shape().clone());
        }
        let backward = &crate::backward_op::OP;
        let attrs = (backward.to_attrs)(backward, &crate::backward_op::env_for(op, &env))?;
        GradCheck {
            op: crate::backward_op::NAME.into(),
            attrs,
            shapes: all_shapes,
            inputs: Some(values),
            heads: None,
            ..self.clone()
        }
        .run()
    }

    /// Runs the check; errors on the first mismatch, naming op, argument,
    /// dtype, request and element.
    ///
    /// Poisons storage for overwriting while it runs (see
    /// [`crate::pool::set_poison`]), and starts `WriteTo` gradients from
    /// NaN, so a kernel that skips elements fails.
    pub fn run(&self) -> Result<GradReport> {
        let _poison = crate::pool::PoisonGuard::hold();
        let entry = eager::lookup(&self.op)?;
        let op = entry.def;
        let env = (op.parse)(op, &self.attrs)?.with_seed(self.seed);
        let n_in = op.num_arguments(&env);
        let (shapes, base) = self.base_inputs(op, n_in)?;
        let mut report = GradReport {
            op: op.name.into(),
            rows: Vec::new(),
        };
        if !op.is_simple() {
            let check = general::General {
                op,
                env: &env,
                shapes: &shapes,
                base: &base,
                seed: self.seed,
                train: self.train,
                heads: self.heads.as_deref(),
            };
            for &dtype in &self.dtypes {
                check.run(dtype, &mut report)?;
            }
            return Ok(report);
        }
        let _mode = eager::TrainingGuard::new(self.train);
        for &dtype in &self.dtypes {
            let inputs: Vec<NDArray> = base
                .iter()
                .zip(&shapes)
                .map(|(v, s)| NDArray::from_f64(v, s.clone(), dtype))
                .collect::<Result<_>>()?;
            let refs: Vec<&NDArray> = inputs.iter().collect();
            let out = eager::invoke_with(op, &refs, &env)?;
            check_forward_reqs(op, &env, &refs, &out, &mut report)?;
            if n_in == 0 {
                continue;
            }
            let Some(_) = op.gradient else {
                return Err(Error::NoGradient { op: op.name.into() });
            };
            let dy =
                NDArray::random_uniform(out.shape().clone(), -1.0, 1.0, dtype, self.seed ^ 0xD1)?;
            // Central differences in f64 at the dtype-rounded inputs.
            let x64: Vec<NDArray> = inputs.iter().map(|x| x.astype(DType::F64)).collect();
            let dy64 = dy.astype(DType::F64).to_f64_vec();
            let numeric = numeric_grads(op, &env, &x64, &dy64)?;
            check_backward_reqs(op, &env, &refs, &out, &dy, &numeric, dtype, &mut report)?;
        }
        Ok(report)
    }
}

fn numeric_grads(
    op: &'static OpDef,
    env: &EnvArguments,
    x: &[NDArray],
    dy: &[f64],
) -> Result<Vec<Vec<f64>>> {
    let loss = |xs: &[NDArray]| -> Result<f64> {
        let refs: Vec<&NDArray> = xs.iter().collect();
        let y = eager::invoke_with(op, &refs, env)?.to_f64_vec();
        Ok(y.iter().zip(dy).map(|(a, b)| a * b).sum())
    };
    central_differences(x, loss)
}

fn exact(
    op: &OpDef,
    arg: &str,
    dtype: DType,
    req: OpReqType,
    got: &NDArray,
    want: &NDArray,
) -> Result<f64> {
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (index, (&a, &b)) in g.iter().zip(&w).enumerate() {
        if a != b && !(a.is_nan() && b.is_nan()) {
            return Err(mismatch(op, arg, dtype, req, index, (a, b)));
        }
    }
    Ok(0.0)
}

fn check_forward_reqs(
    op: &'static OpDef,
    env: &EnvArguments,
    x: &[&NDArray],
    out: &NDArray,
    report: &mut GradReport,
) -> Result<()> {
    let dtype = out.dtype();
    let init = NDArray::random_uniform(out.shape().clone(), -1.0, 1.0, dtype, 7)?;
    // Null leaves the output alone.
    let mut o = init.deep_copy();
    eager::invoke_into(op, x, env, &mut o, OpReqType::Null)?;
    report.rows.push((
        dtype,
        OpReqType::Null,
        exact(op, "output", dtype, OpReqType::Null, &o, &init)?,
    ));
    // WriteTo overwrites whatever was there.
    let mut o = init.deep_copy();
    eager::invoke_into(op, x, env, &mut o, OpReqType::WriteTo)?;
    report.rows.push((
        dtype,
        OpReqType::WriteTo,
        exact(op, "output", dtype, OpReqType::WriteTo, &o, out)?,
    ));
    // AddTo accumulates.
    let mut o = init.deep_copy();
    eager::invoke_into(op, x, env, &mut o, OpReqType::AddTo)?;
    let want: Vec<f64> = init
        .to_f64_vec()
        .iter()
        .zip(out.to_f64_vec())
        .map(|(a, b)| a + b)
        .collect();
    let tol = tolerance(dtype);
    report.rows.push((
        dtype,
        OpReqType::AddTo,
        compare(
            op,
            "output",
            dtype,
            OpReqType::AddTo,
            &o.to_f64_vec(),
            &want,
            tol,
        )?,
    ));
    // WriteInplace over input 0, when declared.
    if op.inplace.forward.is_some() && !x.is_empty() && x[0].shape() == out.shape() {
        let mut target = x[0].deep_copy();
        eager::invoke_inplace(op, &mut target, &x[1..], env)?;
        report.rows.push((
            dtype,
            OpReqType::WriteInplace,
            exact(op, "output", dtype, OpReqType::WriteInplace, &target, out)?,
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn check_backward_reqs(
    op: &'static OpDef,
    env: &EnvArguments,
    x: &[&NDArray],
    out: &NDArray,
    dy: &NDArray,
    numeric: &[Vec<f64>],
    dtype: DType,
    report: &mut GradReport,
) -> Result<()> {
    let tol = tolerance(dtype);
    let n = x.len();
    let init: Vec<NDArray> = x
        .iter()
        .enumerate()
        .map(|(i, xi)| {
            NDArray::random_uniform(xi.shape().clone(), -1.0, 1.0, dtype, 100 + i as u64)
        })
        .collect::<Result<_>>()?;
    for req in [OpReqType::WriteTo, OpReqType::AddTo, OpReqType::Null] {
        let mut grads: Vec<NDArray> = if req == OpReqType::WriteTo {
            let nan = |x: &&NDArray| NDArray::full(x.shape().clone(), f64::NAN, dtype);
            x.iter().map(nan).collect()
        } else {
            init.iter().map(NDArray::deep_copy).collect()
        };
        eager::invoke_backward(op, env, dy, Some(out), x, &mut grads, &vec![req; n])?;
        let mut worst = 0.0f64;
        for i in 0..n {
            let arg = format!("{}_grad", op.input_name(i));
            let base = init[i].to_f64_vec();
            let want: Vec<f64> = match req {
                OpReqType::AddTo => base.iter().zip(&numeric[i]).map(|(a, b)| a + b).collect(),
                OpReqType::Null => base.clone(),
                _ => numeric[i].clone(),
            };
            worst = worst.max(compare(
                op,
                &arg,
                dtype,
                req,
                &grads[i].to_f64_vec(),
                &want,
                tol,
            )?);
        }
        report.rows.push((dtype, req, worst));
    }
    if op.inplace.gradient.is_some() && x[0].shape() == dy.shape() {
        let mut g0 = dy.deep_copy();
        let mut rest: Vec<NDArray> = init[1..].iter().map(NDArray::deep_copy).collect();
        let reqs = vec![OpReqType::WriteTo; n];
        let in_place =
            eager::invoke_backward_inplace(op, env, &mut g0, Some(out), x, &mut rest, &reqs)?;
        if !in_place {
            return Err(Error::invalid(
                op.name,
                "out_grad",
                "declared gradient in-place option was not used",
            ));
        }
        let mut worst = compare(
            op,
            &format!("{}_grad", op.input_name(0)),
            dtype,
            OpReqType::WriteInplace,
            &g0.to_f64_vec(),
            &numeric[0],
            tol,
        )?;
        for i in 1..n {
            worst = worst.max(compare(
                op,
                &format!("{}_grad", op.input_name(i)),
                dtype,
                OpReqType::WriteInplace,
                &rest[i - 1].to_f64_vec(),
                &numeric[i],
                tol,
            )?);
        }
        report.rows.push((dtype, OpReqType::WriteInplace, worst));
    }
    Ok(())
}
