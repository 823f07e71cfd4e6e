//! The conformance runner: reference cases (graphs, inputs, and what a
//! reference implementation computed; format in `tests/conformance/FORMAT.md`)
//! checked through the symbolic [`Executor`](simpleop::symbol::Executor) and,
//! independently, op by op through the [`NDArray`] API with a reverse-mode
//! pass of its own.
//!
//! ```no_run
//! let text = std::fs::read_to_string("tests/conformance/mxnet-ops.jsonl").unwrap();
//! let cases = simpleop_cli::conformance::parse_cases(&text).unwrap();
//! let report = simpleop_cli::conformance::check(&cases);
//! println!("{}", report.summary()); // "141 passed, 0 failed"
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::Deserialize;

use simpleop::symbol::{BindConfig, GradReq, Symbol, Topology};
use simpleop::{DType, Error, NDArray, OpReqType, Result, autograd, eager};

/// One array as case files store it: row-major values as numbers or the
/// strings `"nan"`, `"inf"`, `"-inf"`.
#[derive(Clone, Debug, Deserialize)]
pub struct ArrayData {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Dtype name (`float32`, `bfloat16`, `int64`, ...).
    pub dtype: String,
    /// The values.
    pub data: Vec<serde_json::Value>,
}

impl ArrayData {
    /// The values as f64.
    pub fn values(&self) -> Result<Vec<f64>> {
        self.data
            .iter()
            .map(|v| match v {
                serde_json::Value::Number(n) => n.as_f64().ok_or(()),
                serde_json::Value::String(s) => simpleop::attrs::parse_f64(s).ok_or(()),
                _ => Err(()),
            })
            .map(|r| r.map_err(|()| case_error("array value is neither a number nor nan/inf")))
            .collect()
    }

    /// As an [`NDArray`] of its dtype.
    pub fn to_ndarray(&self) -> Result<NDArray> {
        let dtype = DType::from_name(&self.dtype)
            .ok_or_else(|| case_error(format!("unknown dtype `{}`", self.dtype)))?;
        NDArray::from_f64(&self.values()?, self.shape.clone(), dtype)
    }
}

/// What the reference computed.
#[derive(Clone, Debug, Deserialize)]
pub struct Expected {
    /// Forward outputs, one per head.
    pub outputs: Vec<ArrayData>,
    /// Gradients by argument name.
    #[serde(default)]
    pub grads: BTreeMap<String, ArrayData>,
    /// Aux states after the case ran, by name.
    #[serde(default)]
    pub aux: BTreeMap<String, ArrayData>,
}

/// One conformance case.
#[derive(Clone, Debug, Deserialize)]
pub struct Case {
    /// Case name, e.g. `smooth_l1/scalar=1.0`.
    pub name: String,
    /// Who computed it, e.g. `mxnet-1.9.1`.
    #[serde(default)]
    pub source: Option<String>,
    /// MXNet symbol JSON.
    pub symbol: serde_json::Value,
    /// Argument values by name.
    pub inputs: BTreeMap<String, ArrayData>,
    /// Head gradients; absent when only the forward pass is checked.
    #[serde(default)]
    pub head_grads: Option<Vec<ArrayData>>,
    /// `write`, `add` or `null` per argument.
    #[serde(default)]
    pub grad_req: BTreeMap<String, String>,
    /// Initial gradient buffers for `add`.
    #[serde(default)]
    pub grad_init: BTreeMap<String, ArrayData>,
    /// Initial aux states by name.
    #[serde(default)]
    pub aux: BTreeMap<String, ArrayData>,
    /// Training mode for a forward-only case.
    #[serde(default)]
    pub train: bool,
    /// The reference's results.
    pub expect: Expected,
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

fn case_error(reason: impl Into<String>) -> Error {
    Error::Conformance {
        reason: reason.into(),
    }
}

/// Parses a `.jsonl` file: one case per non-blank line.
pub fn parse_cases(text: &str) -> Result<Vec<Case>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| case_error(format!("line {}: {e}", i + 1)))
        })
        .collect()
}

/// Which way a case was evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Bound to an executor (memory planning on or off).
    Executor {
        /// Whether the executor planned memory.
        memory_planning: bool,
    },
    /// Op by op through the NDArray API, with the conformance runner's own
    /// reverse-mode pass over each op's backward kernel.
    Eager,
    /// Op by op through the NDArray API under `autograd::record`, then
    /// `autograd::backward`: the eager tape.
    Tape,
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Executor {
                memory_planning: true,
            } => f.write_str("executor"),
            Path::Executor {
                memory_planning: false,
            } => f.write_str("executor (no planning)"),
            Path::Eager => f.write_str("eager"),
            Path::Tape => f.write_str("eager tape"),
        }
    }
}

/// A case that failed on one path.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The case name.
    pub case: String,
    /// The path it failed on.
    pub path: Path,
    /// What differed (with the worst element) or the error raised.
    pub reason: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FAIL {} [{}]: {}", self.case, self.path, self.reason)
    }
}

/// The outcome of a run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Cases that passed on every path.
    pub passed: usize,
    /// One entry per failing case and path.
    pub failures: Vec<Failure>,
    /// Number of cases that failed on at least one path.
    pub failed: usize,
}

impl Report {
    /// `N passed, M failed`.
    pub fn summary(&self) -> String {
        format!("{} passed, {} failed", self.passed, self.failed)
    }
    /// Whether every case passed.
    pub fn ok(&self) -> bool {
        self.failed == 0
    }
}

/// Checks every case through the executor and eagerly.
pub fn check(cases: &[Case]) -> Report {
    check_paths(
        cases,
        &[
            Path::Executor {
                memory_planning: true,
            },
            Path::Eager,
        ],
    )
}

/// Checks every case along each of `paths`, with storage for overwriting
/// poisoned (see [`simpleop::pool::set_poison`]) so that a kernel that skips
/// elements shows NaN there.
pub fn check_paths(cases: &[Case], paths: &[Path]) -> Report {
    let _poison = simpleop::pool::PoisonGuard::hold();
    let mut report = Report::default();
    for case in cases {
        let mut ok = true;
        for &path in paths {
            if let Err(reason) = run(case, path) {
                ok = false;
                report.failures.push(Failure {
                    case: case.name.clone(),
                    path,
                    reason,
                });
            }
        }
        if ok {
            report.passed += 1;
        } else {
            report.failed += 1;
        }
    }
    report
}

/// Runs one case along one path; `Err` says what differed.
pub fn run(case: &Case, path: Path) -> std::result::Result<(), String> {
    let r = match path {
        Path::Executor { memory_planning } => run_executor(case, memory_planning),
        Path::Eager => run_eager(case),
        Path::Tape => run_tape(case),
    };
    r.map_err(|e| match e {
        Failed::Error(e) => e.to_string(),
        Failed::Mismatch(m) => m,
    })
}

enum Failed {
    Error(Error),
    Mismatch(String),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Self {
        Failed::Error(e)
    }
}

/// Compares `got` with `want` as FORMAT.md says: same shape and dtype, and
/// `|a - e| <= atol + rtol·|e|` per element (NaN matches NaN, an infinity
/// the same infinity). `Err` names the worst element.
pub fn compare(
    what: &str,
    got: &NDArray,
    want: &ArrayData,
    rtol: f64,
    atol: f64,
) -> std::result::Result<(), String> {
    if got.shape().dims() != want.shape.as_slice() {
        return Err(format!("{what}: shape {} != {:?}", got.shape(), want.shape));
    }
    if got.dtype().name() != want.dtype {
        return Err(format!("{what}: dtype {} != {}", got.dtype(), want.dtype));
    }
    let expected = want.values().map_err(|e| e.to_string())?;
    let mut worst: Option<(usize, f64, f64, f64)> = None;
    for (i, (a, e)) in got.to_f64_vec().into_iter().zip(expected).enumerate() {
        let same = (a.is_nan() && e.is_nan()) || a == e;
        let bound = atol + rtol * e.abs();
        // NaN differences (NaN against a number, inf against -inf) fail.
        let within = (a - e).abs() <= bound;
        if !same && !within {
            let excess = if (a - e).is_nan() {
                f64::INFINITY
            } else {
                (a - e).abs() - bound
            };
            if worst.is_none_or(|w| excess > w.3) {
                worst = Some((i, a, e, excess));
            }
        }
    }
    match worst {
        None => Ok(()),
        Some((i, a, e, _)) => Err(format!("{what}: element {i}: got {a}, expected {e}")),
    }
}

fn symbol(case: &Case) -> Result<Symbol> {
    Symbol::from_json(&case.symbol.to_string())
}

fn grad_req(case: &Case, name: &str) -> Result<GradReq> {
    match case.grad_req.get(name) {
        None => Ok(GradReq::Null),
        Some(r) => GradReq::from_name(r)
            .ok_or_else(|| case_error(format!("argument `{name}`: bad grad_req `{r}`"))),
    }
}

fn head_grads(case: &Case) -> Result<Option<Vec<NDArray>>> {
    case.head_grads
        .as_ref()
        .map(|h| h.iter().map(ArrayData::to_ndarray).collect())
        .transpose()
}

fn check_outputs(case: &Case, outputs: &[NDArray]) -> std::result::Result<(), Failed> {
    if outputs.len() != case.expect.outputs.len() {
        return Err(Failed::Mismatch(format!(
            "{} outputs, expected {}",
            outputs.len(),
            case.expect.outputs.len()
        )));
    }
    for (i, (got, want)) in outputs.iter().zip(&case.expect.outputs).enumerate() {
        compare(&format!("output {i}"), got, want, case.rtol, case.atol)
            .map_err(Failed::Mismatch)?;
    }
    Ok(())
}

fn check_grad(case: &Case, name: &str, got: Option<&NDArray>) -> std::result::Result<(), Failed> {
    let Some(want) = case.expect.grads.get(name) else {
        return Ok(());
    };
    let got = got.ok_or_else(|| Failed::Mismatch(format!("grad {name}: not computed")))?;
    compare(&format!("grad {name}"), got, want, case.rtol, case.atol).map_err(Failed::Mismatch)
}

fn check_aux(case: &Case, name: &str, got: Option<&NDArray>) -> std::result::Result<(), Failed> {
    let Some(want) = case.expect.aux.get(name) else {
        return Ok(());
    };
    let got = got.ok_or_else(|| Failed::Mismatch(format!("aux {name}: not bound")))?;
    compare(&format!("aux {name}"), got, want, case.rtol, case.atol).map_err(Failed::Mismatch)
}

/// Whether the case's forward pass runs in training mode.
fn training(case: &Case) -> bool {
    case.head_grads.is_some() || case.train
}

/// What one path computed for a case: the outputs, the gradient of
/// every argument the case names in `expect.grads`, and the aux states.
struct Computed {
    outputs: Vec<NDArray>,
    grads: HashMap<String, Option<NDArray>>,
    aux: HashMap<String, Option<NDArray>>,
}

impl Computed {
    /// Checks everything against the case's MXNet values.
    fn check(&self, case: &Case) -> std::result::Result<(), Failed> {
        check_outputs(case, &self.outputs)?;
        for (name, g) in &self.grads {
            check_grad(case, name, g.as_ref())?;
        }
        for (name, a) in &self.aux {
            check_aux(case, name, a.as_ref())?;
        }
        Ok(())
    }
}

fn run_executor(case: &Case, memory_planning: bool) -> std::result::Result<(), Failed> {
    let config = BindConfig {
        memory_planning,
        ..BindConfig::default()
    };
    executor_results(case, config)?.check(case)
}

fn executor_results(case: &Case, config: BindConfig) -> Result<Computed> {
    let sym = symbol(case)?;
    let mut args = HashMap::new();
    for (k, v) in case.inputs.iter().chain(&case.aux) {
        args.insert(k.clone(), v.to_ndarray()?);
    }
    let heads = head_grads(case)?;
    let mut grads = HashMap::new();
    let mut reqs = HashMap::new();
    if heads.is_some() {
        for name in case.grad_req.keys() {
            let req = grad_req(case, name)?;
            reqs.insert(name.clone(), req);
            let a = args.get(name).ok_or_else(|| {
                case_error(format!("grad_req names `{name}`, which has no input"))
            })?;
            let buffer = match (req, case.grad_init.get(name)) {
                (GradReq::Null, _) => continue,
                (GradReq::Add, Some(init)) => init.to_ndarray()?,
                _ => zeros_like(a),
            };
            grads.insert(name.clone(), buffer);
        }
    }
    let mut exe = sym.bind_with(args, grads, reqs, config)?;
    exe.forward(training(case))?;
    let outputs = exe.outputs().to_vec();
    let mut grads = HashMap::new();
    if let Some(heads) = heads {
        exe.backward(&heads)?;
        for name in case.expect.grads.keys() {
            grads.insert(name.clone(), exe.grad(name).cloned());
        }
    }
    let aux = case.expect.aux.keys();
    let aux = aux.map(|n| (n.clone(), exe.aux(n).cloned())).collect();
    Ok(Computed {
        outputs,
        grads,
        aux,
    })
}

/// The graph evaluated node by node with [`eager::invoke_with`]; backward
/// runs each node's registered gradient with [`eager::invoke_backward`],
/// accumulating into each value's gradient with `AddTo`.
fn run_eager(case: &Case) -> std::result::Result<(), Failed> {
    let g = symbol(case)?.topology()?;
    let mut aux = HashMap::new();
    for (k, v) in &case.aux {
        aux.insert(k.clone(), v.to_ndarray()?);
    }
    let mut args = HashMap::new();
    for (k, v) in &case.inputs {
        args.insert(k.clone(), v.to_ndarray()?);
    }
    let values = {
        let _mode = eager::TrainingGuard::new(training(case));
        eager_forward(&g, &args, &mut aux)?
    };
    for name in case.expect.aux.keys() {
        check_aux(case, name, aux.get(name))?;
    }
    let outputs: Vec<NDArray> = g.heads.iter().map(|&h| values[h].clone()).collect();
    check_outputs(case, &outputs)?;
    let Some(heads) = head_grads(case)? else {
        return Ok(());
    };
    if heads.len() != g.heads.len() {
        let msg = format!("{} head gradients for {} heads", heads.len(), g.heads.len());
        return Err(case_error(msg).into());
    }
    let (needs, reqs) = gradient_paths(case, &g)?;
    let mut grads = initial_grads(case, &g, &values, &reqs)?;
    for (&h, dy) in g.heads.iter().zip(heads) {
        if !needs[h] {
            continue;
        }
        match &mut grads[h] {
            Some(acc) => acc.try_add_assign(&dy)?,
            slot @ None => *slot = Some(dy.deep_copy()),
        }
    }
    for n in (0..g.nodes.len()).rev() {
        let dys: Vec<Option<NDArray>> = std::iter::once(n)
            .chain(g.nodes[n].more_outputs.iter().copied())
            .map(|o| grads[o].clone())
            .collect();
        if needs[n] && dys.iter().any(Option::is_some) {
            eager_node_backward(&g, n, &dys, &values, &needs, &mut grads)?;
        }
    }
    for (n, node) in g.nodes.iter().enumerate() {
        if node.op.is_none() && node.output_of.is_none() && reqs[n] != GradReq::Null {
            // No path from a head: the gradient is zero, as in MXNet.
            let got = grads[n].take().unwrap_or_else(|| zeros_like(&values[n]));
            check_grad(case, &node.name, Some(&got))?;
        }
    }
    Ok(())
}

/// The graph recorded op by op by the eager tape: each argument asking for
/// a gradient is a variable (`add` starting from the case's buffer), the
/// forward runs under [`autograd::record`], and [`autograd::backward`]
/// fills the variables' gradients.
fn run_tape(case: &Case) -> std::result::Result<(), Failed> {
    tape_results(case)?.check(case)
}

fn tape_results(case: &Case) -> Result<Computed> {
    let g = symbol(case)?.topology()?;
    let mut aux = HashMap::new();
    for (k, v) in &case.aux {
        aux.insert(k.clone(), v.to_ndarray()?);
    }
    let heads = head_grads(case)?;
    let mut args = HashMap::new();
    for (k, v) in &case.inputs {
        let mut a = v.to_ndarray()?;
        let req = match heads {
            Some(_) => grad_req(case, k)?,
            None => GradReq::Null,
        };
        if req != GradReq::Null {
            let buffer = match (req, case.grad_init.get(k)) {
                (GradReq::Add, Some(init)) => init.to_ndarray()?,
                _ => zeros_like(&a),
            };
            autograd::mark_variables(&mut [&mut a], vec![buffer], &[req])?;
        }
        args.insert(k.clone(), a);
    }
    let values = {
        let _mode = autograd::RecordingGuard::new(heads.is_some(), training(case));
        eager_forward(&g, &args, &mut aux)?
    };
    let aux = case
        .expect
        .aux
        .keys()
        .map(|n| (n.clone(), aux.get(n).cloned()));
    let aux = aux.collect();
    let outputs: Vec<NDArray> = g.heads.iter().map(|&h| values[h].clone()).collect();
    let Some(head_grads) = heads else {
        return Ok(Computed {
            outputs,
            grads: HashMap::new(),
            aux,
        });
    };
    if head_grads.len() != outputs.len() {
        let msg = format!(
            "{} head gradients for {} heads",
            head_grads.len(),
            outputs.len()
        );
        return Err(case_error(msg));
    }
    // Heads that no variable leads to take no part, as in the executor.
    let (recorded, dys): (Vec<&NDArray>, Vec<&NDArray>) = outputs
        .iter()
        .zip(&head_grads)
        .filter(|(y, _)| y.requires_grad())
        .unzip();
    if !recorded.is_empty() {
        autograd::backward(&recorded, &dys)?;
    }
    let grads = case.expect.grads.keys();
    let grads = grads.map(|n| (n.clone(), args.get(n).and_then(NDArray::grad)));
    Ok(Computed {
        outputs,
        grads: grads.collect(),
        aux,
    })
}

/// The eager tape against the executor without fusion (the same kernels in
/// the same order): outputs and every gradient the case names must agree
/// bit for bit. `Err` names the first value that differs.
pub fn tape_matches_executor_bitwise(case: &Case) -> std::result::Result<(), String> {
    let config = BindConfig {
        fusion: false,
        ..BindConfig::default()
    };
    let exe = executor_results(case, config).map_err(|e| e.to_string())?;
    let tape = tape_results(case).map_err(|e| e.to_string())?;
    let bits = |a: &NDArray| {
        a.to_f64_vec()
            .into_iter()
            .map(f64::to_bits)
            .collect::<Vec<_>>()
    };
    for (k, (e, t)) in exe.outputs.iter().zip(&tape.outputs).enumerate() {
        if bits(e) != bits(t) {
            return Err(format!("output {k} differs"));
        }
    }
    for (name, e) in &exe.grads {
        if e.as_ref().map(bits) != tape.grads.get(name).and_then(|t| t.as_ref().map(bits)) {
            return Err(format!("grad {name} differs"));
        }
    }
    Ok(())
}

fn zeros_like(a: &NDArray) -> NDArray {
    NDArray::zeros(a.shape().clone(), a.dtype())
}

/// Every node's value, in topological order; an op with several outputs
/// or aux states runs once through [`eager::invoke_outputs`], which
/// updates `aux` (by variable name) in training mode.
fn eager_forward(
    g: &Topology,
    args: &HashMap<String, NDArray>,
    aux: &mut HashMap<String, NDArray>,
) -> Result<Vec<NDArray>> {
    let mut values: Vec<NDArray> = Vec::with_capacity(g.nodes.len());
    let mut more: HashMap<usize, Vec<NDArray>> = HashMap::new();
    for (n, node) in g.nodes.iter().enumerate() {
        let v = match (node.op, node.output_of) {
            (None, Some((p, k))) => more[&p][k].clone(),
            (None, None) => match (args.get(&node.name), aux.get(&node.name)) {
                (Some(v), _) => v.clone(),
                (None, Some(a)) => a.clone(),
                (None, None) => {
                    return Err(Error::argument(&node.name, "the case gives no input"));
                }
            },
            (Some(op), _) if op.outputs.is_some() || !op.aux_states.is_empty() => {
                let n_args = node.inputs.len() - op.aux_states.len();
                let inputs: Vec<&NDArray> =
                    node.inputs[..n_args].iter().map(|&i| &values[i]).collect();
                let names: Vec<String> = node.inputs[n_args..]
                    .iter()
                    .map(|&i| g.nodes[i].name.clone())
                    .collect();
                let mut states: Vec<NDArray> = names
                    .iter()
                    .map(|s| {
                        aux.get(s)
                            .cloned()
                            .ok_or_else(|| Error::argument(s, "no aux state given"))
                    })
                    .collect::<Result<_>>()?;
                let mut refs: Vec<&mut NDArray> = states.iter_mut().collect();
                let outs = eager::invoke_outputs(op, &inputs, &mut refs, &node.env)
                    .map_err(|e| node.error(e))?;
                for (s, v) in names.into_iter().zip(states) {
                    aux.insert(s, v);
                }
                let first = outs[0].clone();
                more.insert(n, outs);
                first
            }
            (Some(op), _) => {
                let inputs: Vec<&NDArray> = node.inputs.iter().map(|&i| &values[i]).collect();
                eager::invoke_with(op, &inputs, &node.env).map_err(|e| node.error(e))?
            }
        };
        values.push(v);
    }
    Ok(values)
}

/// Which values lead to an argument that asks for a gradient, and each
/// argument's request (`Null` for op nodes).
fn gradient_paths(case: &Case, g: &Topology) -> Result<(Vec<bool>, Vec<GradReq>)> {
    let mut needs = vec![false; g.nodes.len()];
    let mut reqs = vec![GradReq::Null; g.nodes.len()];
    for (n, node) in g.nodes.iter().enumerate() {
        needs[n] = match (node.op, node.output_of) {
            (None, None) => {
                reqs[n] = grad_req(case, &node.name)?;
                reqs[n] != GradReq::Null
            }
            _ => node.inputs.iter().any(|&i| needs[i]),
        };
    }
    Ok((needs, reqs))
}

/// The gradient accumulators before backward: `add` starts from the
/// case's initial buffer (or zeros); everything else starts empty.
fn initial_grads(
    case: &Case,
    g: &Topology,
    values: &[NDArray],
    reqs: &[GradReq],
) -> Result<Vec<Option<NDArray>>> {
    let mut grads: Vec<Option<NDArray>> = vec![None; g.nodes.len()];
    for (n, node) in g.nodes.iter().enumerate() {
        if reqs[n] == GradReq::Add {
            grads[n] = Some(match case.grad_init.get(&node.name) {
                Some(init) => init.to_ndarray()?,
                None => zeros_like(&values[n]),
            });
        }
    }
    Ok(grads)
}

/// Node `n`'s registered gradient, given its outputs' gradients `dys`
/// (`None` for an output nothing read), added into the accumulators of its
/// arguments that need one: one call per argument, so an input used twice
/// by this node accumulates both contributions.
fn eager_node_backward(
    g: &Topology,
    n: usize,
    dys: &[Option<NDArray>],
    values: &[NDArray],
    needs: &[bool],
    grads: &mut [Option<NDArray>],
) -> Result<()> {
    let node = &g.nodes[n];
    let Some(op) = node.op else {
        return Ok(());
    };
    let n_args = node.inputs.len() - op.aux_states.len();
    let inputs: Vec<&NDArray> = node.inputs[..n_args].iter().map(|&i| &values[i]).collect();
    let outputs: Vec<&NDArray> = std::iter::once(n)
        .chain(node.more_outputs.iter().copied())
        .map(|o| &values[o])
        .collect();
    let general = op.outputs.is_some() || !op.aux_states.is_empty();
    for (slot, &i) in node.inputs[..n_args].iter().enumerate() {
        if !needs[i] {
            continue;
        }
        let (acc, req) = match grads[i].take() {
            Some(acc) => (acc, OpReqType::AddTo),
            None => (zeros_like(&values[i]), OpReqType::WriteTo),
        };
        // Every slot has its input's shape, as the kernels may read it
        // (a concat's gradient cuts `dy` by the inputs' shapes).
        let mut bufs: Vec<NDArray> = inputs.iter().map(|x| zeros_like(x)).collect();
        bufs[slot] = acc;
        let mut slot_reqs = vec![OpReqType::Null; inputs.len()];
        slot_reqs[slot] = req;
        let result = if general {
            let dy_refs: Vec<Option<&NDArray>> = dys.iter().map(Option::as_ref).collect();
            eager::invoke_backward_outputs(
                op, &node.env, &dy_refs, &outputs, &inputs, &mut bufs, &slot_reqs,
            )
        } else {
            let dy = dys[0]
                .as_ref()
                .ok_or_else(|| Error::graph("no output gradient"))?;
            eager::invoke_backward(
                op,
                &node.env,
                dy,
                Some(&values[n]),
                &inputs,
                &mut bufs,
                &slot_reqs,
            )
        };
        result.map_err(|e| node.error(e))?;
        grads[i] = Some(bufs.swap_remove(slot));
    }
    Ok(())
}
