//! Shared helpers for the workspace tests: loading the MXNet conformance
//! cases (`tests/conformance/*.jsonl`, format in `shared/conformance/FORMAT.md`)
//! and evaluating single-op cases eagerly.

use std::collections::BTreeMap;

use serde::Deserialize;
use simpleop::{Attrs, DType, NDArray, OpReqType, Shape, eager};

/// One array as the case files store it.
#[derive(Clone, Debug, Deserialize)]
pub struct ArrayJson {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Dtype name.
    pub dtype: String,
    /// Values: numbers or "nan", "inf", "-inf".
    pub data: Vec<serde_json::Value>,
}

impl ArrayJson {
    /// The values as f64.
    pub fn values(&self) -> Vec<f64> {
        self.data
            .iter()
            .map(|v| match v {
                serde_json::Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
                serde_json::Value::String(s) => simpleop::attrs::parse_f64(s).unwrap_or(f64::NAN),
                _ => f64::NAN,
            })
            .collect()
    }
    /// As an NDArray of its dtype.
    pub fn to_ndarray(&self) -> Result<NDArray, String> {
        let dtype = DType::from_name(&self.dtype).ok_or(format!("unknown dtype {}", self.dtype))?;
        NDArray::from_f64(&self.values(), Shape::new(self.shape.clone()), dtype)
            .map_err(|e| e.to_string())
    }
}

/// A graph node of MXNet's symbol JSON.
#[derive(Clone, Debug, Deserialize)]
pub struct NodeJson {
    /// Op name, `null` for variables.
    pub op: String,
    /// Node name.
    pub name: String,
    /// String attributes.
    #[serde(default)]
    pub attrs: BTreeMap<String, String>,
    /// `[node, output, version]` entries.
    #[serde(default)]
    pub inputs: Vec<Vec<usize>>,
}

/// The symbol part of a case.
#[derive(Clone, Debug, Deserialize)]
pub struct SymbolJson {
    /// Nodes in topological order.
    pub nodes: Vec<NodeJson>,
}

/// Expected results.
#[derive(Clone, Debug, Deserialize)]
pub struct Expect {
    /// Forward outputs.
    pub outputs: Vec<ArrayJson>,
    /// Gradients by argument name.
    #[serde(default)]
    pub grads: BTreeMap<String, ArrayJson>,
}

/// One conformance case.
#[derive(Clone, Debug, Deserialize)]
pub struct Case {
    /// Case name.
    pub name: String,
    /// The graph.
    pub symbol: SymbolJson,
    /// Argument values.
    pub inputs: BTreeMap<String, ArrayJson>,
    /// Head gradients, when backward is checked.
    #[serde(default)]
    pub head_grads: Option<Vec<ArrayJson>>,
    /// Gradient request per argument.
    #[serde(default)]
    pub grad_req: BTreeMap<String, String>,
    /// Initial gradient buffers for `add`.
    #[serde(default)]
    pub grad_init: BTreeMap<String, ArrayJson>,
    /// What MXNet computed.
    pub expect: Expect,
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

/// Parses a `.jsonl` file of cases.
pub fn load_cases(text: &str) -> Result<Vec<Case>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

impl Case {
    /// The single op node, when the graph is exactly one op over variables.
    pub fn single_op(&self) -> Option<&NodeJson> {
        let ops: Vec<&NodeJson> = self
            .symbol
            .nodes
            .iter()
            .filter(|n| n.op != "null")
            .collect();
        match ops.as_slice() {
            [one]
                if one
                    .inputs
                    .iter()
                    .all(|i| self.symbol.nodes[i[0]].op == "null") =>
            {
                Some(one)
            }
            _ => None,
        }
    }
}

/// Compares `got` with `want` as FORMAT.md says; `Err` describes the worst element.
pub fn compare(
    what: &str,
    got: &NDArray,
    want: &ArrayJson,
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    if got.shape().dims() != want.shape.as_slice() {
        return Err(format!("{what}: shape {} != {:?}", got.shape(), want.shape));
    }
    if got.dtype().name() != want.dtype {
        return Err(format!("{what}: dtype {} != {}", got.dtype(), want.dtype));
    }
    let mut worst: Option<(usize, f64, f64, f64)> = None;
    for (i, (a, e)) in got.to_f64_vec().into_iter().zip(want.values()).enumerate() {
        let ok = (a.is_nan() && e.is_nan()) || a == e || (a - e).abs() <= atol + rtol * e.abs();
        if !ok {
            let excess = (a - e).abs() - (atol + rtol * e.abs());
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

/// Evaluates a single-op case eagerly, forward and (when asked) backward.
pub fn run_single_op(case: &Case) -> Result<(), String> {
    let node = case.single_op().ok_or("not a single-op graph")?;
    let entry = eager::lookup(&node.op).map_err(|e| e.to_string())?;
    let op = entry.def;
    let attrs: Attrs = node
        .attrs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let env = (op.parse)(op, &attrs).map_err(|e| e.to_string())?;
    let names: Vec<&str> = node
        .inputs
        .iter()
        .map(|i| case.symbol.nodes[i[0]].name.as_str())
        .collect();
    let inputs: Vec<NDArray> = names
        .iter()
        .map(|n| {
            case.inputs
                .get(*n)
                .ok_or(format!("no input {n}"))?
                .to_ndarray()
        })
        .collect::<Result<_, _>>()?;
    let refs: Vec<&NDArray> = inputs.iter().collect();
    let out = eager::invoke_with(op, &refs, &env).map_err(|e| e.to_string())?;
    compare(
        "output",
        &out,
        &case.expect.outputs[0],
        case.rtol,
        case.atol,
    )?;
    let Some(heads) = &case.head_grads else {
        return Ok(());
    };
    let dy = heads[0].to_ndarray()?;
    let reqs: Vec<OpReqType> = names
        .iter()
        .map(|n| {
            OpReqType::from_name(case.grad_req.get(*n).map_or("null", String::as_str))
                .unwrap_or(OpReqType::Null)
        })
        .collect();
    if reqs.iter().all(|r| *r == OpReqType::Null) {
        return Ok(());
    }
    let mut grads: Vec<NDArray> = names
        .iter()
        .zip(&inputs)
        .map(|(n, x)| match case.grad_init.get(*n) {
            Some(init) => init.to_ndarray(),
            None => Ok(NDArray::zeros(x.shape().clone(), x.dtype())),
        })
        .collect::<Result<_, _>>()?;
    eager::invoke_backward(op, &env, &dy, Some(&out), &refs, &mut grads, &reqs)
        .map_err(|e| e.to_string())?;
    for (i, n) in names.iter().enumerate() {
        if let Some(want) = case.expect.grads.get(*n)
            && reqs[i] != OpReqType::Null
        {
            compare(&format!("grad {n}"), &grads[i], want, case.rtol, case.atol)?;
        }
    }
    Ok(())
}
