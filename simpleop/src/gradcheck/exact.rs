//! The exact gradient check: an op's hand-written gradient against the
//! derivative of its own forward, which the forward computes when run on
//! dual numbers ([`crate::Dual`]). No finite differences are involved, so
//! points where those fail are fair game: kinks, branch boundaries, ±0,
//! ±inf and NaN.
//!
//! The points: for one input, a dense sweep of [-10, 10], a coarser one
//! out to ±50, powers of ten
//! from 1e-30 to 1e30 of both signs, the special values, the op's scalar
//! turning points (±s, ±1/s, ±s², ±1/s², ±1/(2s²)) and both sides of every
//! finite jump in the derivative the sweep finds, located by bisection to
//! adjacent doubles (in f64; rounded to a narrower dtype the two sides may
//! meet); for two and three inputs, every combination of a
//! smaller set. Each point is rounded to the dtype first.
//!
//! At each point the written gradient (from `eager::invoke_backward`, with
//! an output gradient of 2 so that a gradient that ignores it shows) is
//! compared with 2 times the dual derivative computed in the dtype's
//! compute type and rounded to the dtype. They agree when both are NaN,
//! when they are equal (±0 count as equal), or when both are finite and
//! differ by at most 8 ε (|derived| + 2), ε the dtype's epsilon: the two
//! round differently, and a gradient in f16 or bf16 that reads the stored
//! output reads it rounded. The `+ 2` (the output gradient's scale) is an
//! absolute floor: gradients smaller than about 16 ε are not told apart
//! (2e-6 in f32, 0.125 in bf16).

use crate::kernel::DerivativeFns;
use crate::{Attrs, DType, Device, EnvArguments, Error, NDArray, OpDef, OpReqType, Result, eager};

/// The output gradient every point is checked with.
const HEAD: f64 = 2.0;

/// Values every input takes, besides the sweeps.
const SPECIAL: [f64; 11] = [
    0.0,
    -0.0,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    1.0,
    -1.0,
    0.5,
    -0.5,
    1e-40,
    -1e-40,
];

/// A configured exact check. Build with [`ExactCheck::new`], finish with
/// [`ExactCheck::run`].
///
/// ```
/// use simpleop::gradcheck::ExactCheck;
/// simpleop_ops::link();
/// let report = ExactCheck::new("tanh").run()?;
/// assert!(report.disagreements.is_empty(), "{}", report.summary());
/// # Ok::<(), simpleop::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ExactCheck {
    op: String,
    attrs: Attrs,
    dtypes: Vec<DType>,
    points: Vec<f64>,
}

/// One point where the written gradient and the dual derivative differ.
#[derive(Clone, Debug, PartialEq)]
pub struct Disagreement {
    /// The dtype checked.
    pub dtype: DType,
    /// The inputs, rounded to `dtype`.
    pub inputs: Vec<f64>,
    /// Which input's gradient differs.
    pub input: usize,
    /// The written gradient's value (for an output gradient of 2).
    pub written: f64,
    /// Twice the dual derivative, rounded to `dtype`.
    pub derived: f64,
}

/// What [`ExactCheck::run`] found.
#[derive(Clone, Debug)]
pub struct ExactReport {
    /// The op checked.
    pub op: String,
    /// Points checked per dtype.
    pub points: usize,
    /// Every point where the two differ, in dtype order.
    pub disagreements: Vec<Disagreement>,
}

impl ExactReport {
    /// `Ok` when nothing disagrees; otherwise an error naming the op, the
    /// number of disagreements and the first.
    pub fn check(&self) -> Result<()> {
        match self.disagreements.first() {
            None => Ok(()),
            Some(d) => Err(Error::ExactCheck {
                op: self.op.clone(),
                count: self.disagreements.len(),
                first: describe(d),
            }),
        }
    }

    /// One line per disagreement.
    pub fn summary(&self) -> String {
        let lines: Vec<String> = self.disagreements.iter().map(describe).collect();
        format!(
            "{}: {} disagreement(s) over {} points per dtype\n{}",
            self.op,
            lines.len(),
            self.points,
            lines.join("\n")
        )
    }
}

fn describe(d: &Disagreement) -> String {
    format!(
        "{} at {:?}: input {} gradient written {}, derived {}",
        d.dtype, d.inputs, d.input, d.written, d.derived
    )
}

impl ExactCheck {
    /// Checks op `name` in every float dtype.
    pub fn new(name: &str) -> Self {
        ExactCheck {
            op: name.into(),
            attrs: Attrs::new(),
            dtypes: DType::FLOATS.to_vec(),
            points: Vec::new(),
        }
    }
    /// Sets one attribute (as a graph would: `("scalar", 1.0)`).
    pub fn attr(mut self, key: &str, value: impl ToString) -> Self {
        self.attrs.insert(key, value);
        self
    }
    /// Restricts the dtypes checked.
    pub fn dtypes(mut self, dtypes: &[DType]) -> Self {
        self.dtypes = dtypes.to_vec();
        self
    }
    /// More values every input takes (a kink the sweep would not find).
    pub fn points(mut self, values: &[f64]) -> Self {
        self.points.extend_from_slice(values);
        self
    }

    /// Runs the check. Errors when the op has no written gradient, or is
    /// not an elementwise op with one output and 1–3 inputs that update
    /// none of them (what dual numbers can run).
    pub fn run(&self) -> Result<ExactReport> {
        let entry = eager::lookup(&self.op)?;
        let op = entry.def;
        let duals = entry.kernels(Device::Cpu)?.derivative.ok_or_else(|| {
            Error::invalid(
                op.name,
                "op",
                "an elementwise op with one output and 1 to 3 inputs, none updated in place, for the exact check",
            )
        })?;
        if op.gradient.is_none() {
            return Err(Error::NoGradient { op: op.name.into() });
        }
        let env = (op.parse)(op, &self.attrs)?;
        let n = op.num_inputs();
        let points = self.grid(&duals, &env, n)?;
        let mut report = ExactReport {
            op: op.name.into(),
            points: points.len(),
            disagreements: Vec::new(),
        };
        for &dtype in &self.dtypes {
            self.check_dtype(op, &duals, &env, &points, dtype, &mut report)?;
        }
        Ok(report)
    }

    /// Every point, one vector per input.
    fn grid(&self, duals: &DerivativeFns, env: &EnvArguments, n: usize) -> Result<Vec<Vec<f64>>> {
        let mut values: Vec<f64> = SPECIAL.to_vec();
        values.extend(&self.points);
        values.extend(turning_points(&self.attrs));
        Ok(match n {
            1 => {
                values.extend(sweep(201, 10.0));
                // a coarser one out to ±50, where branches to asymptotes sit
                values.extend((21..=100).flat_map(|k| [k as f64 * 0.5, -(k as f64) * 0.5]));
                values.extend(powers_of_ten());
                values.extend(jumps(duals, env)?);
                values.into_iter().map(|v| vec![v]).collect()
            }
            2 => {
                values.extend(sweep(41, 4.0));
                product(&values, 2)
            }
            _ => {
                values.extend([2.0, -2.0, 1.5, -3.0]);
                product(&values, 3)
            }
        })
    }

    fn check_dtype(
        &self,
        op: &'static OpDef,
        duals: &DerivativeFns,
        env: &EnvArguments,
        points: &[Vec<f64>],
        dtype: DType,
        report: &mut ExactReport,
    ) -> Result<()> {
        let n = op.num_inputs();
        let len = points.len();
        let columns: Vec<NDArray> = (0..n)
            .map(|i| {
                let col: Vec<f64> = points.iter().map(|p| p[i]).collect();
                NDArray::from_f64(&col, [len], dtype)
            })
            .collect::<Result<_>>()?;
        let refs: Vec<&NDArray> = columns.iter().collect();
        let y = eager::invoke_with(op, &refs, env)?;
        let dy = NDArray::full([len], HEAD, dtype);
        let mut grads: Vec<NDArray> = (0..n).map(|_| NDArray::zeros([len], dtype)).collect();
        let reqs = vec![OpReqType::WriteTo; n];
        eager::invoke_backward(op, env, &dy, Some(&y), &refs, &mut grads, &reqs)?;
        let written: Vec<Vec<f64>> = grads.iter().map(NDArray::to_f64_vec).collect();
        let rounded: Vec<Vec<f64>> = columns.iter().map(NDArray::to_f64_vec).collect();
        let mut derived = vec![vec![0.0; len]; n];
        for p in 0..len {
            let x: Vec<f64> = (0..n).map(|i| rounded[i][p]).collect();
            let d = derivative(duals, env, &x, dtype)?;
            for i in 0..n {
                derived[i][p] = d[i];
            }
        }
        let derived: Vec<Vec<f64>> = derived
            .iter()
            .map(|d| NDArray::from_f64(d, [len], dtype).map(|a| a.to_f64_vec()))
            .collect::<Result<_>>()?;
        let eps = epsilon(dtype);
        for p in 0..len {
            for i in 0..n {
                let (w, d) = (written[i][p], derived[i][p]);
                if !agree(w, d, eps) {
                    report.disagreements.push(Disagreement {
                        dtype,
                        inputs: (0..n).map(|k| rounded[k][p]).collect(),
                        input: i,
                        written: w,
                        derived: d,
                    });
                }
            }
        }
        Ok(())
    }
}

/// `HEAD` times the partials at `x`, in `dtype`'s compute type (widened
/// to f64, not yet rounded to `dtype`).
fn derivative(
    duals: &DerivativeFns,
    env: &EnvArguments,
    x: &[f64],
    dtype: DType,
) -> Result<Vec<f64>> {
    if dtype == DType::F64 {
        let mut p = vec![0.0; x.len()];
        (duals.f64)(env, x, &mut p)?;
        return Ok(p.iter().map(|d| HEAD * d).collect());
    }
    let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let mut p = vec![0.0f32; x.len()];
    (duals.f32)(env, &x32, &mut p)?;
    Ok(p.iter().map(|&d| f64::from(HEAD as f32 * d)).collect())
}

/// Whether a written gradient `w` and a derived one `d` agree (see the
/// module docs).
fn agree(w: f64, d: f64, eps: f64) -> bool {
    if w.is_nan() || d.is_nan() {
        return w.is_nan() && d.is_nan();
    }
    w == d || (w.is_finite() && d.is_finite() && (w - d).abs() <= 8.0 * eps * (d.abs() + HEAD))
}

fn epsilon(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F32 => f64::from(f32::EPSILON),
        DType::F16 => 2f64.powi(-10),
        _ => 2f64.powi(-7),
    }
}

/// `count` evenly spaced values from `-half` to `half`.
fn sweep(count: usize, half: f64) -> impl Iterator<Item = f64> {
    (0..count).map(move |k| -half + 2.0 * half * k as f64 / (count - 1) as f64)
}

/// ±10^k for k in -30..=30.
fn powers_of_ten() -> impl Iterator<Item = f64> {
    (-30..=30).flat_map(|k| {
        let v = 10f64.powi(k);
        [v, -v]
    })
}

/// Where an op with scalar `s` typically turns: ±s, ±1/s, ±s², ±1/s²,
/// ±1/(2s²).
fn turning_points(attrs: &Attrs) -> Vec<f64> {
    let Some(s) = attrs.get("scalar").and_then(|v| v.parse::<f64>().ok()) else {
        return Vec::new();
    };
    let s2 = s * s;
    [s, 1.0 / s, s2, 1.0 / s2, 0.5 / s2]
        .into_iter()
        .filter(|v| v.is_finite())
        .flat_map(|v| [v, -v])
        .collect()
}

/// Every `n`-tuple of `values`.
fn product(values: &[f64], n: usize) -> Vec<Vec<f64>> {
    let mut out: Vec<Vec<f64>> = vec![Vec::new()];
    for _ in 0..n {
        out = out
            .into_iter()
            .flat_map(|p| {
                values.iter().map(move |&v| {
                    let mut q = p.clone();
                    q.push(v);
                    q
                })
            })
            .collect();
    }
    out
}

/// Both sides of each jump in the f64 derivative along a fine sweep of
/// [-10, 10]: where two neighbours' derivatives differ by more than a
/// smooth function's would, bisected down to adjacent doubles.
fn jumps(duals: &DerivativeFns, env: &EnvArguments) -> Result<Vec<f64>> {
    let slope = |x: f64| -> Result<f64> {
        let mut p = [0.0];
        (duals.f64)(env, &[x], &mut p)?;
        Ok(p[0])
    };
    let xs: Vec<f64> = sweep(4001, 10.0).collect();
    let mut found = Vec::new();
    for w in xs.windows(2) {
        let (mut a, mut b) = (w[0], w[1]);
        let (da, db) = (slope(a)?, slope(b)?);
        if !(da - db).abs().is_finite() || (da - db).abs() <= 0.05 * (1.0 + da.abs() + db.abs()) {
            continue;
        }
        // down to adjacent doubles: at most ~1100 halvings from any window
        for _ in 0..1100 {
            let m = 0.5 * (a + b);
            if m <= a || m >= b {
                break;
            }
            let dm = slope(m)?;
            if (dm - da).abs() <= (dm - db).abs() {
                a = m;
            } else {
                b = m;
            }
        }
        found.extend([a, b]);
    }
    Ok(found)
}
