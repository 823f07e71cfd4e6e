//! Random graphs of elementwise ops (with an optional reduction at the
//! end), for the properties that every way of running a graph agrees: the
//! planner's, fusion's and the eager tape's.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use simpleop::symbol::{BindConfig, Executor, GradReq, Symbol};
use simpleop::{Attrs, DType, NDArray, OpDef, OpForm, ParamKind, Pattern, Registry, Shape};
use simpleop::{autograd, eager};

/// The ops a random graph draws from: one or two inputs, elementwise,
/// with a gradient, no randomness, no state.
pub fn graph_ops() -> Vec<&'static OpDef> {
    Registry::global()
        .unwrap()
        .iter()
        .map(|o| o.def)
        .filter(|d| {
            matches!(d.num_inputs(), 1 | 2)
                && d.form == OpForm::Elementwise
                && d.pattern == Pattern::Elementwise
                && matches!(d.params, ParamKind::None | ParamKind::Scalar)
                && d.gradient.is_some()
                && !d.resources.rng
                && d.mutate_inputs.is_empty()
        })
        .collect()
}

/// A random graph: each node is (op pick, input picks) over earlier values.
#[derive(Clone, Debug)]
pub struct Recipe {
    pub vars: usize,
    pub dims: Vec<usize>,
    pub dtype: DType,
    pub nodes: Vec<(usize, usize, usize)>,
    pub heads: Vec<usize>,
    pub reqs: Vec<GradReq>,
    pub seed: u64,
}

pub fn recipe() -> impl Strategy<Value = Recipe> {
    (
        1usize..=3,
        prop_oneof![
            Just(vec![5]),
            Just(vec![2, 3]),
            Just(vec![3, 1, 4]),
            Just(vec![33])
        ],
        prop_oneof![
            Just(DType::F32),
            Just(DType::F64),
            Just(DType::F16),
            Just(DType::BF16)
        ],
        prop::collection::vec((any::<usize>(), any::<usize>(), any::<usize>()), 1..12),
        prop::collection::vec(any::<usize>(), 1..4),
        prop::collection::vec(
            prop_oneof![
                Just(GradReq::Write),
                Just(GradReq::Add),
                Just(GradReq::Null)
            ],
            3,
        ),
        any::<u64>(),
    )
        .prop_map(|(vars, dims, dtype, nodes, heads, reqs, seed)| Recipe {
            vars,
            dims,
            dtype,
            nodes,
            heads,
            reqs,
            seed,
        })
}

pub struct Built {
    pub symbol: Symbol,
    pub names: Vec<String>,
}

/// What a random graph may end in, picked by its seed's high bits: nothing,
/// or a reduction (op, axis, keepdims). Over the last axis of a 2- or 3-d
/// shape, fusion runs it slab by slab behind the elementwise ops; over
/// axis 0, or on a 1-d shape, after them.
const ENDINGS: [Option<(&str, i64, bool)>; 6] = [
    None,
    None,
    Some(("sum", -1, false)),
    Some(("mean", -1, true)),
    Some(("max", -1, false)),
    Some(("sum", 0, false)),
];

pub fn build(r: &Recipe, ops: &[&'static OpDef], with_reduction: bool) -> Built {
    let names: Vec<String> = (0..r.vars).map(|i| format!("v{i}")).collect();
    let mut values: Vec<Symbol> = names.iter().map(|n| Symbol::var(n)).collect();
    for &(op, a, b) in &r.nodes {
        let def = ops[op % ops.len()];
        let x = &values[a % values.len()];
        let y = &values[b % values.len()];
        let inputs: Vec<&Symbol> = if def.num_inputs() == 1 {
            vec![x]
        } else {
            vec![x, y]
        };
        let attrs = match def.params {
            ParamKind::Scalar => Attrs::new().with("scalar", 0.75),
            _ => Attrs::new(),
        };
        let s = Symbol::invoke(def.name, &inputs, &attrs).unwrap();
        values.push(s);
    }
    let ending = ENDINGS[(r.seed >> 40) as usize % ENDINGS.len()].filter(|_| with_reduction);
    if let Some((op, axis, keepdims)) = ending {
        let attrs = Attrs::new().with("axis", axis).with("keepdims", keepdims);
        let last = values.last().expect("at least one node");
        let s = Symbol::invoke(op, &[last], &attrs).unwrap();
        values.push(s);
    }
    // Heads: distinct op nodes, the last one always among them.
    let n_ops = r.nodes.len() + usize::from(ending.is_some());
    let mut heads = vec![values.len() - 1];
    for &h in &r.heads {
        let i = r.vars + h % n_ops;
        if !heads.contains(&i) {
            heads.push(i);
        }
    }
    let symbol = Symbol::group(&heads.iter().map(|&i| values[i].clone()).collect::<Vec<_>>());
    Built { symbol, names }
}

/// The argument `i` of a recipe: its value, and its gradient buffer's
/// starting contents (for `add`; zeros for `write`).
fn argument(r: &Recipe, i: usize) -> (NDArray, NDArray) {
    let shape = Shape::new(r.dims.clone());
    let a = NDArray::random_uniform(shape.clone(), -1.5, 1.5, r.dtype, r.seed + i as u64);
    let init = match r.reqs[i] {
        GradReq::Add => NDArray::random_uniform(shape, -1.0, 1.0, r.dtype, r.seed ^ 77).unwrap(),
        _ => NDArray::zeros(shape, r.dtype),
    };
    (a.unwrap(), init)
}

/// Head `h`'s gradient in a recipe's backward.
fn head_grad(r: &Recipe, h: usize, shape: &Shape) -> NDArray {
    NDArray::random_uniform(shape.clone(), -1.0, 1.0, r.dtype, r.seed + 100 + h as u64).unwrap()
}

/// The recipe run eagerly under `autograd::record`, op by op in the
/// executor's order, then `autograd::backward` with the executor's head
/// gradients: outputs and each argument's gradient (`None` for an argument
/// the graph does not use or asks none for).
pub fn run_tape(r: &Recipe, b: &Built) -> (Vec<NDArray>, Vec<Option<NDArray>>) {
    let g = b.symbol.topology().unwrap();
    let mut vars: HashMap<&str, NDArray> = HashMap::new();
    for (i, name) in b.names.iter().enumerate() {
        let (mut a, init) = argument(r, i);
        if r.reqs[i] != GradReq::Null {
            autograd::mark_variables(&mut [&mut a], vec![init], &[r.reqs[i]]).unwrap();
        }
        vars.insert(name, a);
    }
    let used = b.symbol.list_arguments();
    let asks = |i: usize| used.contains(&b.names[i]) && r.reqs[i] != GradReq::Null;
    let train = (0..r.vars).any(asks);
    let mut values: Vec<NDArray> = Vec::with_capacity(g.nodes.len());
    autograd::record_with(train, || {
        for node in &g.nodes {
            let v = match node.op {
                None => vars[node.name.as_str()].clone(),
                Some(op) => {
                    let inputs: Vec<&NDArray> = node.inputs.iter().map(|&i| &values[i]).collect();
                    eager::invoke_with(op, &inputs, &node.env).unwrap()
                }
            };
            values.push(v);
        }
    });
    let outs: Vec<NDArray> = g.heads.iter().map(|&h| values[h].detach()).collect();
    // Heads no variable leads to take no part, as in the executor.
    let recorded: Vec<usize> = (0..g.heads.len())
        .filter(|&h| values[g.heads[h]].requires_grad())
        .collect();
    if train && !recorded.is_empty() {
        let heads: Vec<&NDArray> = recorded.iter().map(|&h| &values[g.heads[h]]).collect();
        let grads: Vec<NDArray> = recorded
            .iter()
            .map(|&h| head_grad(r, h, outs[h].shape()))
            .collect();
        let grad_refs: Vec<&NDArray> = grads.iter().collect();
        autograd::backward(&heads, &grad_refs).unwrap();
    }
    let grads = (0..r.vars)
        .map(|i| asks(i).then(|| vars[b.names[i].as_str()].grad().expect("a variable")))
        .collect();
    (outs, grads)
}

/// Binds, runs forward and backward, returns outputs and gradients.
pub fn run(
    r: &Recipe,
    b: &Built,
    config: BindConfig,
) -> (Vec<NDArray>, Vec<Option<NDArray>>, Executor) {
    let mut args = HashMap::new();
    let mut grads = HashMap::new();
    let mut reqs = HashMap::new();
    let used = b.symbol.list_arguments();
    for (i, n) in b.names.iter().enumerate() {
        if !used.contains(n) {
            continue;
        }
        let (a, init) = argument(r, i);
        args.insert(n.clone(), a);
        reqs.insert(n.clone(), r.reqs[i]);
        if r.reqs[i] != GradReq::Null {
            grads.insert(n.clone(), init);
        }
    }
    let train = reqs.values().any(|q| *q != GradReq::Null);
    let mut exe = b.symbol.bind_with(args, grads, reqs, config).unwrap();
    exe.forward(train).unwrap();
    if train {
        let heads: Vec<NDArray> = exe
            .outputs()
            .iter()
            .enumerate()
            .map(|(h, o)| head_grad(r, h, o.shape()))
            .collect();
        exe.backward(&heads).unwrap();
    }
    let outs = exe.outputs().to_vec();
    let grads = b.names.iter().map(|n| exe.grad(n).cloned()).collect();
    (outs, grads, exe)
}

/// The bits of every element (as f64), for exact comparisons.
pub fn bits(a: &NDArray) -> Vec<u64> {
    a.to_f64_vec().into_iter().map(f64::to_bits).collect()
}

/// 1,000 cases from a fixed seed, so the counts asserted below (how many
/// graphs exercised in-place writes, reuse, fusion) are reproducible.
pub fn fixed_runner() -> TestRunner {
    TestRunner::new_with_rng(
        ProptestConfig {
            cases: 1000,
            ..ProptestConfig::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    )
}
