//! Random symbol JSON: valid graphs (built with the symbol API, plus a
//! hand-written MXNet file) mutated as text and as JSON (input indices out
//! of range, on themselves or ahead, huge shapes in hints and attributes,
//! missing keys, other registered ops), then loaded, inferred, bound, run
//! forward and backward, each step feeding the next while it succeeds.
//! Every step must return `Ok` or `Err`; a panic fails the test and prints
//! the input.
//!
//! A short run is part of `cargo test`; the environment of
//! `simpleop_tests::fuzz` (`SIMPLEOP_FUZZ_CASES`, `_SEED`, `_TRACE`) sets a
//! long one.

use std::collections::HashMap;

use serde_json::{Value, json};
use simpleop::symbol::{GradReq, Symbol};
use simpleop::{Attrs, OpDef, Registry, Result, Shape};
use simpleop_tests::fuzz::{self, Rng};

/// Arguments of more elements than this (together) are not bound, nor
/// plans of more bytes run: huge shapes are the mutations' favourite, and
/// the point here is the graph code, not the allocator.
const MAX_BIND_ELEMENTS: usize = 1 << 20;
const MAX_PLANNED_BYTES: usize = 64 << 20;

/// Shapes given to the arguments that neither a hint nor inference
/// shapes (one per input, picked by its length): empty and scalar ones
/// included.
const DEFAULT_SHAPES: &[&[usize]] = &[&[2, 3], &[3], &[1], &[2, 3, 4], &[0, 3], &[]];

fn op(name: &str, inputs: &[&Symbol], attrs: &[(&str, &str)]) -> Symbol {
    let attrs: Attrs = attrs.iter().copied().collect();
    Symbol::invoke(name, inputs, &attrs).unwrap()
}

fn hinted(name: &str, shape: &str) -> Symbol {
    Symbol::var_with_attrs(name, Attrs::from([("__shape__", shape)]))
}

/// Valid graphs covering the op kinds and attribute forms.
fn seeds() -> Vec<String> {
    let (x, y) = (Symbol::var("x"), Symbol::var("y"));
    let unary = ["relu", "sigmoid", "tanh", "exp", "square", "abs"]
        .iter()
        .fold(x.clone(), |s, o| op(o, &[&s], &[]));
    let binary = (&(&(&x + &y).unwrap() * &y).unwrap() - &(&x / &y).unwrap()).unwrap();
    let b = hinted("b", "(3,)");
    let broadcast = op(
        "broadcast_mul",
        &[&op("broadcast_add", &[&x, &b], &[]), &b],
        &[],
    );
    let sum = op("sum", &[&x], &[("axis", "1"), ("keepdims", "True")]);
    let mean = op("mean", &[&op("exp", &[&x], &[])], &[("axis", "(0,)")]);
    let reductions = Symbol::group(&[sum, mean, op("norm", &[&y], &[])]);
    let scalars = [
        ("_plus_scalar", "1.5"),
        ("_mul_scalar", "-2"),
        ("_rdiv_scalar", "3"),
        ("_power_scalar", "2"),
        ("_maximum_scalar", "0"),
    ]
    .iter()
    .fold(x.clone(), |s, (o, v)| op(o, &[&s], &[("scalar", v)]));
    let r = hinted("r", "(2, 3, 4)");
    let reshapes = Symbol::group(&[
        op("Reshape", &[&r], &[("shape", "(-1,)")]),
        op("Reshape", &[&r], &[("shape", "(0, -1)")]),
        op("Reshape", &[&r], &[("shape", "(-2,)")]),
        op("Reshape", &[&r], &[("shape", "(-3, -2)")]),
        op("Reshape", &[&r], &[("shape", "(-4, 1, -1, -2)")]),
    ]);
    let h = Symbol::var_with_attrs(
        "h",
        Attrs::from([("__shape__", "(4, 2)"), ("__dtype__", "1")]),
    );
    let w = Symbol::var_with_attrs(
        "w",
        Attrs::from([("__shape__", "(2, 5)"), ("__dtype__", "1")]),
    );
    let hints = op(
        "softmax",
        &[&op("dot", &[&h, &op("_copy", &[&w], &[])], &[])],
        &[("axis", "-1")],
    );
    let shaping = Symbol::group(&[
        op("transpose", &[&r], &[("axes", "(2, 0, 1)")]),
        op(
            "slice_axis",
            &[&x],
            &[("axis", "1"), ("begin", "0"), ("end", "2")],
        ),
        op("clip", &[&x], &[("a_min", "-1"), ("a_max", "1")]),
        op("expand_dims", &[&y], &[("axis", "0")]),
    ]);
    let mut all: Vec<String> = [
        unary, binary, broadcast, reductions, scalars, reshapes, hints, shaping,
    ]
    .iter()
    .map(Symbol::to_json)
    .collect();
    all.push(MXNET_FILE.to_owned());
    all
}

/// As MXNet writes it: `attr` and `param` spellings, two-element inputs.
const MXNET_FILE: &str = r#"{
  "nodes": [
    {"op": "null", "name": "data", "attr": {"__shape__": "(2, 3)"}, "inputs": []},
    {"op": "null", "name": "weight", "attrs": {"__shape__": "(3, 4)", "__dtype__": "0"}, "inputs": []},
    {"op": "dot", "name": "fc", "inputs": [[0, 0, 0], [1, 0, 0]]},
    {"op": "null", "name": "bias", "attr": {"__shape__": "(4,)"}, "inputs": []},
    {"op": "broadcast_add", "name": "fc_bias", "inputs": [[2, 0, 0], [3, 0]]},
    {"op": "relu", "name": "act", "inputs": [[4, 0, 0]]},
    {"op": "sum", "name": "loss", "param": {"axis": "1", "keepdims": "True"}, "inputs": [[5, 0, 0]]}
  ],
  "arg_nodes": [0, 1, 3],
  "node_row_ptr": [0, 1, 2, 3, 4, 5, 6, 7],
  "heads": [[6, 0, 0]],
  "attrs": {"mxnet_version": ["int", 10500]}
}"#;

const ATTR_VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "-5",
    "2",
    "nan",
    "inf",
    "1e308",
    "True",
    "None",
    "",
    "()",
    "(0,)",
    "(-1,)",
    "(-2, -2)",
    "(-3,)",
    "(-4, -1, -1)",
    "(0, -4, 1, -1)",
    "(2, 3)",
    "(1000000, 1000000)",
    "(4294967296, 4294967296)",
    "(18446744073709551615,)",
    "(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)",
    "[2, 3]",
    "9223372036854775807",
    "-9223372036854775808",
];

const SHAPE_HINTS: &[&str] = &[
    "(2, 3)",
    "(3,)",
    "(1,)",
    "()",
    "(0, 3)",
    "(1048576, 1048576)",
    "(4294967296, 4294967296)",
    "(18446744073709551615, 2)",
    "(-1, 3)",
    "(2, 3, 4, 5, 6, 7, 8, 9)",
    "(3L, 2L)",
    "[2, 3]",
    "(2,, 3)",
    "junk",
];

/// An input entry that is wrong in one way or another.
fn bad_entry(rng: &mut Rng, here: usize, len: usize) -> Value {
    match rng.below(9) {
        0 => json!([here, 0, 0]),
        1 => json!([here + 1, 0, 0]),
        2 => json!([len + rng.below(3), 0, 0]),
        3 => json!([u64::MAX, 0, 0]),
        4 => json!([-1, 0, 0]),
        5 => json!([rng.below(here.max(1)), 1, 0]),
        6 => json!([rng.below(here.max(1))]),
        7 => json!(["0", 0, 0]),
        _ => json!([rng.below(here.max(1)), 0, 0, 0]),
    }
}

/// One structural edit of a parsed graph document.
fn mutate_doc(doc: &mut Value, rng: &mut Rng, ops: &[&'static OpDef]) {
    let len = doc["nodes"].as_array().map_or(0, Vec::len);
    let i = rng.below(len);
    let Some(node) = doc["nodes"].get_mut(i) else {
        return;
    };
    match rng.below(14) {
        10 if i > 0 => {
            // Rewired to an earlier node: diamonds, `f(x, x)`, skips.
            if let Some(ins) = node["inputs"].as_array_mut().filter(|a| !a.is_empty()) {
                let k = rng.below(ins.len());
                ins[k] = json!([rng.below(i), 0, 0]);
            }
        }
        11 => {
            // Another op of the same arity, so that it likely loads.
            let arity = node["inputs"].as_array().map_or(0, Vec::len);
            let same: Vec<&OpDef> = ops
                .iter()
                .copied()
                .filter(|o| o.num_inputs() == arity)
                .collect();
            if !same.is_empty() {
                node["op"] = json!(rng.pick(&same).name);
            }
        }
        12 => {
            let flag = rng.below(16) as i64 - 2;
            node["attrs"]["__dtype__"] = json!(flag.to_string());
        }
        13 => {
            if let Some(heads) = doc["heads"].as_array_mut() {
                heads.push(json!([i, 0, 0]));
            }
        }
        0 => {
            // An input index out of range, on itself, ahead, malformed.
            let entry = bad_entry(rng, i, len);
            match node["inputs"].as_array_mut() {
                Some(ins) if !ins.is_empty() => {
                    let k = rng.below(ins.len());
                    ins[k] = entry;
                }
                _ => node["inputs"] = json!([entry]),
            }
        }
        1 => node["attrs"]["__shape__"] = json!(*rng.pick(SHAPE_HINTS)),
        2 => {
            let key = match node["attrs"].as_object() {
                Some(m) if !m.is_empty() && rng.chance(70) => {
                    m.keys().nth(rng.below(m.len())).unwrap().clone()
                }
                _ => rng
                    .pick(&["axis", "shape", "scalar", "keepdims", "axes", "__dtype__"])
                    .to_string(),
            };
            node["attrs"][key] = json!(*rng.pick(ATTR_VALUES));
        }
        3 => {
            let key = *rng.pick(&["op", "name", "attrs", "inputs"]);
            if let Some(m) = node.as_object_mut() {
                m.remove(key);
            }
        }
        4 => {
            let name = match rng.below(10) {
                0 => "null",
                1 => "no_such_op",
                _ => rng.pick(ops).name,
            };
            node["op"] = json!(name);
        }
        5 => {
            let key = *rng.pick(&["nodes", "heads", "arg_nodes", "node_row_ptr", "attrs"]);
            if let Some(m) = doc.as_object_mut() {
                m.remove(key);
            }
        }
        6 => {
            let entry = bad_entry(rng, len, len);
            let heads = [json!([]), json!([entry]), json!([[0, 0, 0], [0, 0, 0]])];
            doc["heads"] = rng.pick(&heads).clone();
        }
        7 => {
            // Another node's name: duplicate arguments, or shadowing.
            let other = doc["nodes"][rng.below(len)]["name"].clone();
            doc["nodes"][i]["name"] = other;
        }
        8 => {
            let copy = node.clone();
            if let Some(nodes) = doc["nodes"].as_array_mut() {
                nodes.insert(rng.below(len + 1), copy);
            }
        }
        _ => doc["arg_nodes"] = json!([rng.below(len + 2), i]),
    }
}

fn generate(rng: &mut Rng, seeds: &[String], ops: &[&'static OpDef]) -> String {
    let seed = rng.pick(seeds);
    let text = if rng.chance(60) {
        let mut doc: Value = serde_json::from_str(seed).unwrap();
        for _ in 0..1 + rng.below(3) {
            mutate_doc(&mut doc, rng, ops);
        }
        if rng.chance(50) {
            doc.to_string()
        } else {
            serde_json::to_string_pretty(&doc).unwrap()
        }
    } else {
        seed.clone()
    };
    // Most text edits break the JSON itself: fewer of them.
    if rng.chance(30) {
        fuzz::mutate_text(&text, rng)
    } else {
        text
    }
}

/// How far inputs got.
#[derive(Debug, Default)]
struct Stages {
    loaded: usize,
    inferred: usize,
    skipped: usize,
    bound: usize,
    forward: usize,
    backward: usize,
}

/// Shapes for the arguments no hint or inference shapes: `default`.
fn complete_shapes(sym: &Symbol, default: &[usize]) -> Result<HashMap<String, Shape>> {
    let hinted = sym.infer_shape(&HashMap::new())?;
    Ok(hinted
        .arguments
        .iter()
        .zip(&hinted.argument_shapes)
        .filter(|(_, s)| s.is_none())
        .map(|(a, _)| (a.clone(), Shape::new(default.to_vec())))
        .collect())
}

/// Loads, infers, binds and runs `text`; `Ok(true)` when some step gave
/// `Err` (the steps after it are not tried).
fn check(text: &str, st: &mut Stages) -> std::result::Result<bool, String> {
    let Ok(sym) = Symbol::from_json(text) else {
        return Ok(true);
    };
    st.loaded += 1;
    // What was loaded must save and load again, unchanged.
    let saved = sym.to_json();
    let again = Symbol::from_json(&saved).map_err(|e| format!("saved JSON does not load: {e}"))?;
    if again.to_json() != saved {
        return Err("saved JSON changes when loaded and saved again".into());
    }
    let _ = (
        sym.list_outputs(),
        sym.to_dot(),
        sym.infer_type(&HashMap::new()),
    );
    let default = DEFAULT_SHAPES[text.len() % DEFAULT_SHAPES.len()];
    let ran = complete_shapes(&sym, default).and_then(|known| run(&sym, &known, st));
    Ok(ran.is_err())
}

fn run(sym: &Symbol, known: &HashMap<String, Shape>, st: &mut Stages) -> Result<()> {
    let shapes = sym.infer_shape(known)?;
    st.inferred += 1;
    let total = shapes
        .argument_shapes
        .iter()
        .flatten()
        .try_fold(0usize, |t, s| t.checked_add(s.checked_size()?));
    if total.is_none_or(|t| t > MAX_BIND_ELEMENTS) {
        st.skipped += 1;
        return Ok(());
    }
    let all: HashMap<String, GradReq> = shapes
        .arguments
        .iter()
        .map(|a| (a.clone(), GradReq::Write))
        .collect();
    let no_dtypes = HashMap::new();
    // With gradients if every op on the way has one, else inference only.
    let (mut exe, train) = match sym.simple_bind(known, &no_dtypes, all) {
        Ok(exe) => (exe, true),
        Err(_) => (sym.simple_bind(known, &no_dtypes, HashMap::new())?, false),
    };
    st.bound += 1;
    let planned = exe.memory_stats().planned_bytes;
    if planned.max(exe.inference_memory_stats().planned_bytes) > MAX_PLANNED_BYTES {
        st.skipped += 1;
        return Ok(());
    }
    let _ = exe.to_dot();
    exe.forward(train)?;
    st.forward += 1;
    if train {
        exe.backward(&[])?;
        st.backward += 1;
    }
    Ok(())
}

#[test]
fn symbol_json_never_panics() {
    simpleop_ops::link();
    let registry = Registry::global().unwrap();
    let mut ops: Vec<&'static OpDef> = registry.iter().map(|r| r.def).collect();
    ops.sort_by_key(|o| o.name);
    let seeds = seeds();
    // Every seed runs the whole way.
    for s in &seeds {
        let mut st = Stages::default();
        let sym = Symbol::from_json(s).unwrap();
        let ran = complete_shapes(&sym, &[2, 3]).and_then(|known| run(&sym, &known, &mut st));
        assert!(ran.is_ok(), "{ran:?}\n{s}");
        assert_eq!((st.forward, st.backward), (1, 1), "{s}");
    }
    let mut st = Stages::default();
    let tally = fuzz::run(
        "symbol_json",
        fuzz::cases(50_000),
        |_, rng| generate(rng, &seeds, &ops),
        |t| fuzz::show_text(t),
        |t| check(t, &mut st),
    );
    eprintln!("fuzz symbol_json: stages reached {st:?}");
    // The mutations must not all be rejected at the door.
    assert!(st.loaded * 10 > tally.tried, "{st:?}");
    assert!(st.backward * 20 > tally.tried, "{st:?}");
}
