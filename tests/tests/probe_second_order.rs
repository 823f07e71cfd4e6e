//! Review probe for the second-derivative API (`_backward`,
//! `Symbol::gradient`, `autograd::grad_with(create_graph)`,
//! `GradCheck::run_gradgrad`) and the small direct backward path: hostile
//! input must give `Err`, never a panic, abort or hang; results must not
//! be silently wrong.

use std::collections::HashMap;

use simpleop::autograd::{self, GradOptions};
use simpleop::eager;
use simpleop::gradcheck::GradCheck;
use simpleop::symbol::GradReq;
use simpleop::{
    Attrs, DType, Device, EnvArguments, GradArgs, NDArray, OpCall, OpReqType, RunContext, Shape,
    Symbol, TBlob, TBlobMut,
};

fn var(name: &str) -> Symbol {
    Symbol::var(name)
}

fn attrs(kv: &[(&str, &str)]) -> Attrs {
    kv.iter().map(|(k, v)| (*k, *v)).collect()
}

fn call(op: &str, inputs: &[&Symbol], kv: &[(&str, &str)]) -> Symbol {
    Symbol::invoke(op, inputs, &attrs(kv)).unwrap()
}

fn arr(v: &[f64], shape: &[usize]) -> NDArray {
    NDArray::from_f64(v, shape.to_vec(), DType::F64).unwrap()
}

fn eval(s: &Symbol, args: &[(&str, &NDArray)]) -> simpleop::Result<Vec<Vec<f64>>> {
    let args: HashMap<String, NDArray> = args
        .iter()
        .map(|(k, v)| (k.to_string(), (*v).clone()))
        .collect();
    let mut exe = s.bind(args, HashMap::new(), HashMap::new())?;
    exe.forward(false)?;
    Ok(exe.outputs().iter().map(NDArray::to_f64_vec).collect())
}

fn create_graph() -> GradOptions {
    GradOptions {
        create_graph: true,
        ..Default::default()
    }
}

fn backward_by_name(fwd: &str, inputs: &[&NDArray]) -> simpleop::Result<NDArray> {
    eager::invoke("_backward", inputs, &attrs(&[("forward_op", fwd)]))
}

// ---------------------------------------------------------------------
// `_backward` called by name with bad input.
// ---------------------------------------------------------------------

#[test]
fn backward_op_wrong_arity_is_an_error() {
    simpleop_ops::link();
    let x = arr(&[0.5, 1.0], &[2]);
    // tanh reads its output: (dy, y, x).
    assert!(backward_by_name("tanh", &[]).is_err());
    assert!(backward_by_name("tanh", &[&x]).is_err());
    assert!(backward_by_name("tanh", &[&x, &x]).is_err());
    assert!(backward_by_name("tanh", &[&x, &x, &x, &x]).is_err());
    // dot: (dc, a, b), two outputs.
    let a = arr(&[1.0; 6], &[2, 3]);
    let r = eager::invoke_outputs(
        eager::lookup("_backward").unwrap().def,
        &[&a, &a],
        &mut [],
        &(eager::lookup("_backward").unwrap().def.parse)(
            eager::lookup("_backward").unwrap().def,
            &attrs(&[("forward_op", "dot")]),
        )
        .unwrap(),
    );
    assert!(r.is_err());
}

#[test]
fn backward_op_wrong_out_grad_shape_is_an_error() {
    simpleop_ops::link();
    let x = arr(&[0.5, 1.0, 2.0], &[3]);
    let y = eager::invoke("tanh", &[&x], &Attrs::new()).unwrap();
    let dy_bad = arr(&[1.0, 1.0], &[2]);
    assert!(backward_by_name("tanh", &[&dy_bad, &y, &x]).is_err());
    let dy_bad2 = arr(&[1.0; 6], &[3, 2]);
    assert!(backward_by_name("tanh", &[&dy_bad2, &y, &x]).is_err());
    // relu reads its output only through `y`? exp reads the output too.
    let dy = arr(&[1.0, 1.0, 1.0], &[3]);
    assert!(backward_by_name("exp", &[&dy, &dy_bad, &x]).is_err());
    // dot with a dc of the wrong shape.
    let a = arr(&[1.0; 6], &[2, 3]);
    let b = arr(&[1.0; 12], &[3, 4]);
    let dc = arr(&[1.0; 6], &[2, 3]);
    assert!(backward_by_name("dot", &[&dc, &a, &b]).is_err());
    // dot with inner dimensions that do not match.
    let b_bad = arr(&[1.0; 8], &[2, 4]);
    let dc = arr(&[1.0; 8], &[2, 4]);
    assert!(backward_by_name("dot", &[&dc, &a, &b_bad]).is_err());
}

#[test]
fn backward_op_unknown_empty_or_recursive_forward_op_is_an_error() {
    simpleop_ops::link();
    let x = arr(&[0.5], &[1]);
    for fwd in [
        "no_such_op",
        "",
        "/",
        "//",
        "_backward",
        "_backward/",
        "_backward/_backward",
        "_backward/_backward/_backward/_backward/_backward/tanh",
        "_backward/_backward/_backward/_backward/_backward/_backward/_backward/_backward/tanh",
        "tanh/",
        "tanh/tanh",
    ] {
        let r = backward_by_name(fwd, &[&x, &x, &x]);
        assert!(r.is_err(), "forward_op = {fwd:?} accepted");
    }
    // A deep nesting string must not blow up (no unbounded recursion).
    let deep = format!("{}tanh", "_backward/".repeat(100_000));
    assert!(backward_by_name(&deep, &[&x, &x, &x]).is_err());
    // Symbol construction with the same.
    let a = var("a");
    for fwd in ["", "_backward", "no_such_op", deep.as_str()] {
        assert!(Symbol::invoke("_backward", &[&a], &attrs(&[("forward_op", fwd)])).is_err());
    }
}

#[test]
fn backward_op_forward_op_with_a_trailing_path_on_a_plain_op_is_an_error() {
    simpleop_ops::link();
    let x = arr(&[0.5], &[1]);
    let y = eager::invoke("tanh", &[&x], &Attrs::new()).unwrap();
    for fwd in ["tanh/", "tanh/tanh", "tanh/no_such_op"] {
        assert!(
            backward_by_name(fwd, &[&x, &y, &x]).is_err(),
            "forward_op = {fwd:?} accepted"
        );
    }
}

#[test]
fn backward_op_nested_once_runs_and_checks_shapes() {
    simpleop_ops::link();
    // `_backward/dot`: `_backward` of `_backward(dot)`. Inputs: gradients of
    // (a_grad, b_grad), then (dc, a, b). Outputs: gradients of dc, a, b.
    let def = eager::lookup("_backward").unwrap().def;
    let env = (def.parse)(def, &attrs(&[("forward_op", "_backward/dot")])).unwrap();
    let a = arr(&[0.5; 6], &[2, 3]);
    let b = arr(&[0.25; 12], &[3, 4]);
    let dc = arr(&[1.0; 8], &[2, 4]);
    let ok = eager::invoke_outputs(def, &[&a, &b, &dc, &a, &b], &mut [], &env);
    let ok = ok.expect("a well-formed second-order call runs");
    assert_eq!(ok.len(), 3);
    // Wrong shapes for the gradients reaching a_grad / b_grad.
    let bad = eager::invoke_outputs(def, &[&b, &a, &dc, &a, &b], &mut [], &env);
    assert!(bad.is_err());
    // Third order of dot: no gradient, but the forward runs.
    let env3 = (def.parse)(def, &attrs(&[("forward_op", "_backward/_backward/dot")]));
    assert!(env3.is_ok());
}

#[test]
fn backward_op_int_dtypes_and_mixed_dtypes_are_errors_not_panics() {
    simpleop_ops::link();
    for dtype in [DType::I32, DType::I64, DType::U8] {
        let x = NDArray::from_f64(&[1.0, 2.0], [2], dtype).unwrap();
        let _ = backward_by_name("tanh", &[&x, &x, &x]);
        let _ = backward_by_name("relu", &[&x, &x, &x]);
        let _ = backward_by_name("elemwise_mul", &[&x, &x, &x]);
        let a = NDArray::from_f64(&[1.0; 4], [2, 2], dtype).unwrap();
        let _ = backward_by_name("dot", &[&a, &a, &a]);
        let _ = backward_by_name(
            "sum",
            &[&NDArray::from_f64(&[1.0], [1], dtype).unwrap(), &a],
        );
    }
    // Mixed dtypes between the output gradient and the inputs.
    let x64 = arr(&[0.5, 0.25], &[2]);
    let x32 = x64.astype(DType::F32);
    let x16 = x64.astype(DType::F16);
    let _ = backward_by_name("tanh", &[&x32, &x64, &x16]);
    let _ = backward_by_name("elemwise_mul", &[&x32, &x64, &x16]);
    let a = arr(&[1.0; 4], &[2, 2]);
    let _ = backward_by_name("dot", &[&a.astype(DType::F32), &a, &a.astype(DType::BF16)]);
}

#[test]
fn backward_op_zero_size_arrays_do_not_panic() {
    simpleop_ops::link();
    let z = NDArray::zeros(Shape::new([0]), DType::F64);
    let z2 = NDArray::zeros(Shape::new([0, 3]), DType::F64);
    let _ = backward_by_name("tanh", &[&z, &z, &z]);
    let _ = backward_by_name("elemwise_mul", &[&z, &z, &z]);
    let _ = backward_by_name("sum", &[&NDArray::zeros(Shape::new([3]), DType::F64), &z2]);
    let _ = backward_by_name("mean", &[&NDArray::zeros(Shape::new([3]), DType::F64), &z2]);
    let _ = backward_by_name("softmax", &[&z2, &z2, &z2]);
    let w = NDArray::zeros(Shape::new([3, 0]), DType::F64);
    let dc = NDArray::zeros(Shape::new([0, 0]), DType::F64);
    let _ = backward_by_name("dot", &[&dc, &z2, &w]);
    // Second order through the graph with zero-size data.
    let x = var("x");
    for op in ["tanh", "sum", "mean", "softmax", "log_softmax"] {
        let g = call(op, &[&x], &[])
            .gradient(&["x"])
            .unwrap()
            .gradient(&["x"])
            .unwrap();
        let _ = eval(&g, &[("x", &z2)]);
    }
}

#[test]
fn backward_op_of_ops_without_gradient_or_with_aux_states_is_an_error() {
    simpleop_ops::link();
    let x = arr(&[0.5, 1.0], &[2]);
    for fwd in ["argmax", "BatchNorm", "gamma_no_such", "_backward"] {
        assert!(backward_by_name(fwd, &[&x, &x, &x]).is_err(), "{fwd}");
    }
    let a = var("a");
    for fwd in ["argmax", "BatchNorm"] {
        let s = Symbol::invoke("_backward", &[&a, &a, &a], &attrs(&[("forward_op", fwd)]));
        if let Ok(s) = s {
            assert!(eval(&s, &[("a", &x)]).is_err(), "{fwd}");
        }
    }
}

#[test]
fn backward_op_shape_inference_checks_the_output_inputs() {
    simpleop_ops::link();
    // `_backward(tanh)` inputs (dy, y, x): y of shape (2) while x is (3).
    let (dy, y, x) = (var("dy"), var("y"), var("x"));
    let s = call("_backward", &[&dy, &y, &x], &[("forward_op", "tanh")]);
    let known: HashMap<String, Shape> = [
        ("dy".to_string(), Shape::new([3])),
        ("y".to_string(), Shape::new([2])),
        ("x".to_string(), Shape::new([3])),
    ]
    .into_iter()
    .collect();
    assert!(s.infer_shape(&known).is_err());
}

#[test]
fn backward_op_with_a_bad_output_input_is_an_error_at_run_time() {
    simpleop_ops::link();
    let x = arr(&[0.5, 1.0, 2.0], &[3]);
    let dy = arr(&[1.0, 1.0, 1.0], &[3]);
    let y_bad = arr(&[1.0, 1.0], &[2]);
    assert!(backward_by_name("tanh", &[&dy, &y_bad, &x]).is_err());
    assert!(backward_by_name("sigmoid", &[&dy, &y_bad, &x]).is_err());
    let y2 = arr(&[1.0; 6], &[2, 3]);
    let _ = backward_by_name("softmax", &[&y2, &y_bad, &y2]);
}

// ---------------------------------------------------------------------
// `Symbol::gradient` with bad input.
// ---------------------------------------------------------------------

#[test]
fn gradient_unknown_names_and_head_grads_of_wrong_count_are_errors() {
    simpleop_ops::link();
    let x = var("x");
    let y = call("tanh", &[&x], &[]);
    assert!(y.gradient(&["nope"]).is_err());
    assert!(y.gradient(&["x", "nope"]).is_err());
    let h = var("h");
    assert!(y.gradient_with(&["x"], &[&h, &h]).is_err());
    // A multi-output head gradient.
    let split = call("SliceChannel", &[&h], &[("num_outputs", "2")]);
    assert!(y.gradient_with(&["x"], &[&split]).is_err());
    // Multi-output symbol with too few head grads.
    let both = Symbol::group(&[y.clone(), call("exp", &[&x], &[])]);
    assert!(both.gradient_with(&["x"], &[&h]).is_err());
    // Empty wrt: an empty symbol (no panic).
    let _ = y.gradient(&[]);
    // Empty symbol.
    let _ = Symbol::group(&[]).gradient(&["x"]);
}

#[test]
fn gradient_with_a_repeated_name_gives_the_same_gradient_twice() {
    simpleop_ops::link();
    let x = var("x");
    let y = call("tanh", &[&x], &[]);
    let x0 = arr(&[0.5, -0.25], &[2]);
    match y.gradient(&["x", "x"]) {
        Err(_) => {} // refusing is fine too
        Ok(g) => {
            let out = eval(&g, &[("x", &x0)]).unwrap();
            assert_eq!(out[0], out[1], "second copy of `x`'s gradient differs");
        }
    }
}

#[test]
fn gradient_through_aux_state_ops_is_an_error() {
    simpleop_ops::link();
    let x = var("x");
    let (g, b, m, v) = (var("g"), var("b"), var("m"), var("v"));
    let bn = call("BatchNorm", &[&x, &g, &b, &m, &v], &[]);
    let e = bn.gradient(&["x"]);
    assert!(e.is_err());
    // Aux-state names as wrt: error (or not a variable of the gradient).
    assert!(bn.gradient(&["m"]).is_err());
    assert!(bn.gradient(&["g", "b"]).is_err());
}

#[test]
fn gradient_of_multi_output_ops_matches_the_executor() {
    simpleop_ops::link();
    let x = var("x");
    let parts = call(
        "SliceChannel",
        &[&x],
        &[("num_outputs", "3"), ("axis", "1")],
    );
    // Only outputs 0 and 2 used, 2 twice.
    let p0 = parts.output(0).unwrap();
    let p2 = parts.output(2).unwrap();
    let t = call("elemwise_mul", &[&call("tanh", &[&p0], &[]), &p2], &[]);
    let loss = call("sum", &[&call("elemwise_add", &[&t, &p2], &[])], &[]);
    let g = loss.gradient(&["x"]).unwrap();
    let x0 = arr(&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3]);
    let got = eval(&g, &[("x", &x0)]).unwrap();
    // d/dx: col0: p2 (1 - tanh² p0); col1: 0; col2: tanh(p0) + 1.
    let v = x0.to_f64_vec();
    let mut want = vec![0.0; 6];
    for r in 0..2 {
        let (a, c) = (v[3 * r], v[3 * r + 2]);
        want[3 * r] = c * (1.0 - a.tanh().powi(2));
        want[3 * r + 2] = a.tanh() + 1.0;
    }
    simpleop_tests::assert_close(&got[0], &want, 1e-14, "split");
    // Second order through it.
    let _ = g.gradient(&["x"]);
}

#[test]
fn gradient_of_ops_with_hidden_outputs_does_not_panic() {
    simpleop_ops::link();
    let x = var("x");
    let (g, b) = (var("g"), var("b"));
    let x0 = arr(&[0.1, 0.7, -0.3, 0.4, 0.5, 0.6], &[2, 3]);
    let g0 = arr(&[1.0, 2.0, 0.5], &[3]);
    let b0 = arr(&[0.0, 0.1, 0.2], &[3]);
    let ln = call("LayerNorm", &[&x, &g, &b], &[]);
    let loss = call("sum", &[&call("tanh", &[&ln], &[])], &[]);
    if let Ok(grad) = loss.gradient(&["x"]) {
        let r = eval(&grad, &[("x", &x0), ("g", &g0), ("b", &b0)]);
        // Compare with the executor's backward.
        let args: HashMap<String, NDArray> = [("x", &x0), ("g", &g0), ("b", &b0)]
            .iter()
            .map(|(n, a)| (n.to_string(), (*a).clone()))
            .collect();
        let bufs = HashMap::from([("x".to_string(), NDArray::zeros([2, 3], DType::F64))]);
        let req = HashMap::from([("x".to_string(), GradReq::Write)]);
        let mut exe = loss.bind(args, bufs, req).unwrap();
        exe.forward(true).unwrap();
        exe.backward(&[]).unwrap();
        let want = exe.grad("x").unwrap().to_f64_vec();
        assert_eq!(r.unwrap()[0], want);
    }
    let d = call("Dropout", &[&x], &[("p", "0.5")]);
    if let Ok(grad) = call("sum", &[&d], &[]).gradient(&["x"]) {
        let _ = eval(&grad, &[("x", &x0)]);
    }
}

#[test]
fn gradient_of_ops_without_gradient_is_an_error() {
    simpleop_ops::link();
    let x = var("x");
    let a = call("argmax", &[&x], &[("axis", "0")]);
    let y = call("elemwise_add", &[&call("tanh", &[&x], &[]), &a], &[]);
    let _ = y.gradient(&["x"]); // argmax has no gradient: error or zero, no panic
    let r = call("_backward", &[&x, &x, &x], &[("forward_op", "tanh")]);
    let r3 = r.gradient(&["x"]).and_then(|g| g.gradient(&["x"]));
    assert!(r3.is_err());
}

#[test]
fn gradient_of_a_very_deep_chain_does_not_overflow_the_stack() {
    simpleop_ops::link();
    let x = var("x");
    let mut y = x.clone();
    for _ in 0..100_000 {
        y = call("sin", &[&y], &[]);
    }
    let g = y.gradient(&["x"]).expect("gradient of a deep chain");
    assert_eq!(g.num_outputs(), 1);
    let _ = g.to_json();
    drop(g);
    drop(y);
}

#[test]
fn gradient_graph_of_simple_form_ops_round_trips_through_json() {
    simpleop_ops::link();
    let x = var("x");
    let x0 = arr(&[-1.5, -0.2, 0.3, 2.0], &[4]);
    for (op, kv) in [
        ("Activation", &[("act_type", "softsign")][..]),
        ("LeakyReLU", &[("act_type", "elu"), ("slope", "0.3")][..]),
        ("LeakyReLU", &[("act_type", "leaky"), ("slope", "0.1")][..]),
    ] {
        let g = call(op, &[&x], kv).gradient(&["x"]).unwrap();
        let want = eval(&g, &[("x", &x0)]).unwrap();
        let back = Symbol::from_json(&g.to_json()).unwrap_or_else(|e| panic!("{op}: {e}"));
        assert_eq!(eval(&back, &[("x", &x0)]).unwrap(), want, "{op} {kv:?}");
        // Second order where there is one.
        if let Ok(g2) = g.gradient(&["x"]) {
            let want2 = eval(&g2, &[("x", &x0)]).unwrap();
            let back2 = Symbol::from_json(&g2.to_json()).unwrap();
            assert_eq!(eval(&back2, &[("x", &x0)]).unwrap(), want2, "{op} {kv:?}");
        }
    }
}

// ---------------------------------------------------------------------
// Math of the compositions through negative axes, exclude, keepdims,
// temperature, transposes and broadcasts, against finite differences.
// ---------------------------------------------------------------------

#[test]
fn run_gradgrad_on_composed_ops_with_awkward_attrs() {
    simpleop_ops::link();
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a [usize]]);
    let cases: &[Case] = &[
        ("sum", &[("axis", "-1")], &[&[2, 3, 2]]),
        (
            "sum",
            &[("axis", "(0, -1)"), ("keepdims", "true")],
            &[&[2, 3, 2]],
        ),
        ("sum", &[("axis", "1"), ("exclude", "true")], &[&[2, 3, 2]]),
        (
            "mean",
            &[("axis", "-2"), ("keepdims", "true")],
            &[&[2, 3, 2]],
        ),
        ("mean", &[("axis", "1"), ("exclude", "true")], &[&[2, 3, 2]]),
        ("mean", &[], &[&[2, 3]]),
        (
            "softmax",
            &[("axis", "0"), ("temperature", "2.5")],
            &[&[3, 2]],
        ),
        ("softmax", &[("axis", "-2")], &[&[2, 3, 2]]),
        (
            "log_softmax",
            &[("axis", "1"), ("temperature", "0.7")],
            &[&[2, 3]],
        ),
        ("dot", &[("transpose_a", "true")], &[&[3, 2], &[3, 4]]),
        ("dot", &[("transpose_b", "true")], &[&[2, 3], &[4, 3]]),
        (
            "dot",
            &[("transpose_a", "true"), ("transpose_b", "true")],
            &[&[3, 2], &[4, 3]],
        ),
        ("dot", &[], &[&[2, 2, 3], &[3, 2]]),
        ("dot", &[], &[&[3], &[3]]),
        ("dot", &[], &[&[3], &[3, 2]]),
        ("dot", &[("transpose_a", "true")], &[&[3, 2, 2], &[3, 2]]),
        ("broadcast_mul", &[], &[&[2, 3], &[1, 3]]),
        ("broadcast_div", &[], &[&[2, 1, 3], &[4, 1]]),
        ("broadcast_power", &[], &[&[2, 3], &[3]]),
    ];
    let mut failures = Vec::new();
    for (op, kv, shapes) in cases {
        let mut c = GradCheck::new(op).shapes(shapes).range(0.5, 1.5);
        for (k, v) in kv.iter() {
            c = c.attr(k, v);
        }
        if let Err(e) = c.run_gradgrad() {
            failures.push(format!("{op} {kv:?} {shapes:?}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn run_gradgrad_on_ops_without_second_derivative_is_an_error() {
    simpleop_ops::link();
    for (op, shapes) in [
        ("argmax", &[&[2usize, 3][..]][..]),
        ("max", &[&[2, 3]]),
        ("BatchNorm", &[&[2, 3], &[3], &[3], &[3], &[3]]),
        ("no_such_op", &[&[2]]),
        ("_backward", &[&[2]]),
        ("prod", &[&[2, 4]]),
    ] {
        let r = GradCheck::new(op).shapes(shapes).run_gradgrad();
        assert!(r.is_err(), "{op}");
    }
    // Wrong shape counts.
    assert!(
        GradCheck::new("dot")
            .shapes(&[&[2, 3]])
            .run_gradgrad()
            .is_err()
    );
    assert!(
        GradCheck::new("dot")
            .shapes(&[&[2, 3], &[4, 5]])
            .run_gradgrad()
            .is_err()
    );
    assert!(
        GradCheck::new("tanh")
            .shapes(&[&[2], &[2]])
            .run_gradgrad()
            .is_err()
    );
    assert!(
        GradCheck::new("tanh")
            .inputs(vec![])
            .run_gradgrad()
            .is_err()
    );
}

// ---------------------------------------------------------------------
// `grad_with(create_graph)`.
// ---------------------------------------------------------------------

#[test]
fn create_graph_on_freed_or_unrecorded_graphs_is_an_error() {
    simpleop_ops::link();
    let mut x = arr(&[0.5, 1.0], &[2]);
    x.attach_grad().unwrap();
    let y = autograd::record(|| eager::invoke("tanh", &[&x], &Attrs::new())).unwrap();
    autograd::grad(&[&y], &[&x], &[], false).unwrap();
    assert!(autograd::grad_with(&[&y], &[&x], &[], create_graph()).is_err());
    // Not recorded.
    let plain = eager::invoke("tanh", &[&x], &Attrs::new()).unwrap();
    assert!(autograd::grad_with(&[&plain], &[&x], &[], create_graph()).is_err());
    // Head grads of the wrong count, shape, dtype.
    let y = autograd::record(|| eager::invoke("tanh", &[&x], &Attrs::new())).unwrap();
    let h3 = arr(&[1.0; 3], &[3]);
    let h2 = arr(&[1.0; 2], &[2]);
    assert!(autograd::grad_with(&[&y], &[&x], &[&h3], create_graph()).is_err());
    assert!(autograd::grad_with(&[&y], &[&x], &[&h2, &h2], create_graph()).is_err());
    let h_i = NDArray::from_f64(&[1.0, 1.0], [2], DType::I32).unwrap();
    assert!(autograd::grad_with(&[&y], &[&x], &[&h_i], create_graph()).is_err());
    let h_f32 = h2.astype(DType::F32);
    let _ = autograd::grad_with(&[&y], &[&x], &[&h_f32], create_graph());
    assert!(!autograd::is_recording() && !autograd::is_training());
}

#[test]
fn create_graph_refuses_saved_values_modified_in_place() {
    simpleop_ops::link();
    let mut x = arr(&[0.5, 1.0], &[2]);
    x.attach_grad().unwrap();
    let (mut y, z) = autograd::record(|| -> simpleop::Result<_> {
        let y = eager::invoke("tanh", &[&x], &Attrs::new())?;
        let z = eager::invoke("elemwise_mul", &[&y, &y], &Attrs::new())?;
        Ok((y, z))
    })
    .unwrap();
    // `y` is saved by tanh (its output) and by elemwise_mul (its inputs).
    eager::invoke_inplace_by_name("_plus_scalar", &mut y, &[], &attrs(&[("scalar", "1")])).unwrap();
    let r = autograd::grad_with(&[&z], &[&x], &[], create_graph());
    assert!(
        matches!(r, Err(simpleop::Error::ModifiedInPlace { .. })),
        "{r:?}"
    );
}

#[test]
fn create_graph_through_aux_and_multi_output_ops() {
    simpleop_ops::link();
    let mut x = arr(&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3]);
    x.attach_grad().unwrap();
    // Multi-output: split, use part 0 in tanh and part 2 twice.
    let loss = autograd::record(|| -> simpleop::Result<_> {
        let parts = eager::invoke_outputs(
            eager::lookup("SliceChannel").unwrap().def,
            &[&x],
            &mut [],
            &{
                let def = eager::lookup("SliceChannel").unwrap().def;
                (def.parse)(def, &attrs(&[("num_outputs", "3"), ("axis", "1")]))?
            },
        )?;
        let t = eager::invoke("tanh", &[&parts[0]], &Attrs::new())?;
        let m = eager::invoke("elemwise_mul", &[&t, &parts[2]], &Attrs::new())?;
        let s = eager::invoke("elemwise_add", &[&m, &parts[2]], &Attrs::new())?;
        eager::invoke("sum", &[&s], &Attrs::new())
    })
    .unwrap();
    let plain = autograd::grad(&[&loss], &[&x], &[], true).unwrap();
    let recorded = autograd::grad_with(&[&loss], &[&x], &[], create_graph()).unwrap();
    assert_eq!(plain[0].to_f64_vec(), recorded[0].to_f64_vec());
    // The second derivative runs through `_backward(SliceChannel)`, which
    // is linear: with t = tanh(p0), ∇ₓ Σ ∇ₓloss is −2t(1−t²)·p2 + (1−t²)
    // in column 0, 0 in column 1 and 1−t² in column 2.
    let h = autograd::grad(&[&recorded[0]], &[&x], &[], false).unwrap();
    let v = x.to_f64_vec();
    let want: Vec<f64> = (0..6)
        .map(|i| {
            let (row, col) = (i / 3, i % 3);
            let (p0, p2) = (v[3 * row], v[3 * row + 2]);
            let (t, s) = (p0.tanh(), 1.0 - p0.tanh().powi(2));
            [-2.0 * t * s * p2 + s, 0.0, s][col]
        })
        .collect();
    simpleop_tests::assert_close(&h[0].to_f64_vec(), &want, 1e-14, "∇ₓ Σ ∇ₓloss");

    // BatchNorm (aux states): an error, and the modes are restored.
    let mut data = arr(&[0.1, 0.2, 0.3, 0.4], &[2, 2]);
    data.attach_grad().unwrap();
    let ones = arr(&[1.0, 1.0], &[2]);
    let zeros = arr(&[0.0, 0.0], &[2]);
    let out = autograd::record(|| {
        eager::invoke(
            "BatchNorm",
            &[&data, &ones, &zeros, &zeros, &ones],
            &Attrs::new(),
        )
    });
    if let Ok(out) = out {
        let r = autograd::pause(|| autograd::grad_with(&[&out], &[&data], &[], create_graph()));
        assert!(r.is_err());
        assert!(!autograd::is_recording() && !autograd::is_training());
    }
}

#[test]
fn create_graph_for_an_op_whose_gradient_reads_no_inputs() {
    simpleop_ops::link();
    // y = sum(broadcast_add(tanh(x), b) * x): broadcast_add's gradient reads
    // neither input; b is broadcast.
    let mut x = arr(&[0.1, -0.2, 0.3, 0.4, -0.5, 0.6], &[2, 3]);
    let mut b = arr(&[0.5, 1.5, -1.0], &[3]);
    x.attach_grad().unwrap();
    b.attach_grad().unwrap();
    let loss = autograd::record(|| -> simpleop::Result<_> {
        let t = eager::invoke("tanh", &[&x], &Attrs::new())?;
        let s = eager::invoke("broadcast_add", &[&t, &b], &Attrs::new())?;
        let m = eager::invoke("elemwise_mul", &[&s, &x], &Attrs::new())?;
        eager::invoke("sum", &[&m], &Attrs::new())
    })
    .unwrap();
    let g = autograd::grad_with(&[&loss], &[&x, &b], &[], create_graph()).unwrap();
    // dL/dx = s + x (1 - t²); dL/db_j = Σ_i x_ij.
    // d/dx Σ dL/dx = 2(1 - t²) + x(-2 t (1 - t²)); d/db Σ dL/dx = 2 (rows).
    let hx = autograd::grad(&[&g[0]], &[&x, &b], &[], true).unwrap();
    let v = x.to_f64_vec();
    let want: Vec<f64> = v
        .iter()
        .map(|&x| {
            let t = x.tanh();
            let s = 1.0 - t * t;
            2.0 * s + x * (-2.0 * t * s)
        })
        .collect();
    simpleop_tests::assert_close(&hx[0].to_f64_vec(), &want, 1e-14, "d/dx");
    simpleop_tests::assert_close(&hx[1].to_f64_vec(), &[2.0, 2.0, 2.0], 1e-14, "d/db");
    // d/dx Σ dL/db = 3·... no: Σ_j Σ_i x_ij → ones.
    let hb = autograd::grad(&[&g[1]], &[&x], &[], false).unwrap();
    assert_eq!(hb[0].to_f64_vec(), vec![1.0; 6]);
}

#[test]
fn modes_are_restored_when_the_composed_second_derivative_errors() {
    simpleop_ops::link();
    // `_backward(dot)` recorded, then differentiated with a head gradient
    // that makes the composed path fail or succeed: modes must come back.
    let mut a = arr(&[0.5; 6], &[2, 3]);
    let mut b = arr(&[0.25; 12], &[3, 4]);
    a.attach_grad().unwrap();
    b.attach_grad().unwrap();
    for train in [false, true] {
        let _t = autograd::TrainingGuard::new(train);
        let c = autograd::record(|| eager::invoke("dot", &[&a, &b], &Attrs::new())).unwrap();
        let g = autograd::grad_with(&[&c], &[&a, &b], &[], create_graph()).unwrap();
        assert_eq!(autograd::is_training(), train);
        assert!(!autograd::is_recording());
        let h = autograd::grad(&[&g[0], &g[1]], &[&a, &b], &[], false).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(autograd::is_training(), train);
        assert!(!autograd::is_recording());
        // Inside record too.
        autograd::record_with(!train, || {
            let c = eager::invoke("dot", &[&a, &b], &Attrs::new()).unwrap();
            let _ = autograd::grad_with(&[&c], &[&a, &b], &[], create_graph()).unwrap();
            assert!(autograd::is_recording());
            assert_eq!(autograd::is_training(), !train);
        });
    }
}

// ---------------------------------------------------------------------
// `_backward`'s backward kernel called directly with bad requests.
// ---------------------------------------------------------------------

fn backward_kernel(name: &str) -> simpleop::BackwardFn {
    eager::lookup(name)
        .unwrap()
        .kernels(Device::Cpu)
        .unwrap()
        .backward
        .unwrap()
}

#[test]
fn backward_op_kernels_honour_every_request() {
    simpleop_ops::link();
    let def = eager::lookup("_backward").unwrap().def;
    let env: EnvArguments = (def.parse)(def, &attrs(&[("forward_op", "elemwise_mul")])).unwrap();
    let ctx = RunContext::default();
    let call = OpCall {
        op: def,
        env: &env,
        ctx: &ctx,
    };
    let bw = backward_kernel("_backward");
    // _backward(elemwise_mul) inputs: dy, a, b; outputs ga = dy b, gb = dy a.
    // Its gradient with weights (wa, wb): d/ddy = wa b + wb a, d/da = wb dy,
    // d/db = wa dy.
    let (dy, a, b) = ([2.0f64, 3.0], [5.0f64, 7.0], [11.0f64, 13.0]);
    let (wa, wb) = ([1.0f64, 0.5], [0.25f64, 2.0]);
    let want = [
        [wa[0] * b[0] + wb[0] * a[0], wa[1] * b[1] + wb[1] * a[1]],
        [wb[0] * dy[0], wb[1] * dy[1]],
        [wa[0] * dy[0], wa[1] * dy[1]],
    ];
    for req in OpReqType::ALL {
        let blob = |v: &'static [f64]| TBlob::from_slice(v, [2]).unwrap();
        let (dyb, ab, bb) = (
            blob(Box::leak(Box::new(dy))),
            blob(Box::leak(Box::new(a))),
            blob(Box::leak(Box::new(b))),
        );
        let (wab, wbb) = (blob(Box::leak(Box::new(wa))), blob(Box::leak(Box::new(wb))));
        let args = GradArgs {
            out_grad: wab.clone(),
            output: None,
            inputs: vec![Some(dyb), Some(ab), Some(bb)].into(),
            out_grads: vec![Some(wab), Some(wbb)].into(),
            outputs: Default::default(),
        };
        let mut bufs = [[100.0f64; 2]; 3];
        {
            let [b0, b1, b2] = &mut bufs;
            let mut grads = [
                TBlobMut::from_slice(&mut b0[..], [2]).unwrap(),
                TBlobMut::from_slice(&mut b1[..], [2]).unwrap(),
                TBlobMut::from_slice(&mut b2[..], [2]).unwrap(),
            ];
            bw(&call, &args, &mut grads, &[req; 3]).unwrap();
        }
        for k in 0..3 {
            let expect: Vec<f64> = match req {
                OpReqType::Null => vec![100.0; 2],
                OpReqType::AddTo => want[k].iter().map(|v| v + 100.0).collect(),
                _ => want[k].to_vec(),
            };
            assert_eq!(bufs[k].to_vec(), expect, "{req:?} input {k}");
        }
        // Wrong number of requests / grads: an error.
        let mut one = [0.0f64; 2];
        let mut g1 = [TBlobMut::from_slice(&mut one[..], [2]).unwrap()];
        assert!(bw(&call, &args, &mut g1, &[req]).is_err());
    }
}

#[test]
fn backward_op_kernels_refuse_missing_inputs_and_bad_weights() {
    simpleop_ops::link();
    let def = eager::lookup("_backward").unwrap().def;
    let ctx = RunContext::default();
    let bw = backward_kernel("_backward");
    for fwd in ["elemwise_mul", "dot", "tanh"] {
        let env = (def.parse)(def, &attrs(&[("forward_op", fwd)])).unwrap();
        let call = OpCall {
            op: def,
            env: &env,
            ctx: &ctx,
        };
        let v = [1.0f64; 4];
        let blob = || TBlob::from_slice(&v[..], [2, 2]).unwrap();
        let small = [1.0f64; 3];
        let bad = TBlob::from_slice(&small[..], [3]).unwrap();
        let n = 3; // _backward of tanh or dot: three inputs
        // Missing inputs.
        let args = GradArgs {
            out_grad: blob(),
            output: None,
            inputs: vec![None; n].into(),
            out_grads: vec![Some(blob()); 2].into(),
            outputs: Default::default(),
        };
        let mut bufs = vec![[0.0f64; 4]; n];
        let mut grads: Vec<TBlobMut<'_>> = bufs
            .iter_mut()
            .map(|b| TBlobMut::from_slice(&mut b[..], [2, 2]).unwrap())
            .collect();
        assert!(bw(&call, &args, &mut grads, &vec![OpReqType::WriteTo; n]).is_err());
        // Weights of the wrong shape, and inputs of inconsistent shapes.
        let args = GradArgs {
            out_grad: blob(),
            output: None,
            inputs: vec![Some(blob()), Some(bad.clone()), Some(blob())].into(),
            out_grads: vec![Some(bad.clone()), Some(bad.clone())].into(),
            outputs: Default::default(),
        };
        let r = bw(&call, &args, &mut grads, &vec![OpReqType::WriteTo; n]);
        assert!(r.is_err(), "{fwd}");
    }
}

// ---------------------------------------------------------------------
// The small direct backward path against the general one.
// ---------------------------------------------------------------------

/// Bits of a backward through the fast path (WriteTo) and through the
/// general path (AddTo into zeros; `0 + v` is `v` for non-zero `v`).
#[test]
fn small_backward_gives_the_general_paths_bits() {
    simpleop_ops::link();
    let mut failures = Vec::new();
    for op in [
        "tanh",
        "sigmoid",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "relu",
        "softsign",
        "sin",
        "cos",
        "erf",
        "log1p",
        "expm1",
        "cbrt",
        "arctan",
        "square",
        "reciprocal",
        "gelu",
    ] {
        let Ok(entry) = eager::lookup(op) else {
            continue;
        };
        let def = entry.def;
        let Some(_) = def.gradient else { continue };
        if def.num_inputs() != 1 {
            continue;
        }
        for dtype in [DType::F32, DType::F64] {
            for n in [
                1usize, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257, 1000, 1023, 1024,
            ] {
                let xs: Vec<f64> = (0..n)
                    .map(|i| 0.05 + 2.9 * ((i * 37 % 101) as f64) / 101.0)
                    .collect();
                let x = NDArray::from_f64(&xs, [n], dtype).unwrap();
                let Ok(y) = eager::invoke(op, &[&x], &Attrs::new()) else {
                    continue;
                };
                let dys: Vec<f64> = (0..n).map(|i| 0.3 + ((i * 13 % 17) as f64) / 7.0).collect();
                let dy = NDArray::from_f64(&dys, [n], dtype).unwrap();
                let env = (def.parse)(def, &Attrs::new()).unwrap();
                let mut fast = [NDArray::zeros([n], dtype)];
                let mut general = [NDArray::zeros([n], dtype)];
                eager::invoke_backward(
                    def,
                    &env,
                    &dy,
                    Some(&y),
                    &[&x],
                    &mut fast,
                    &[OpReqType::WriteTo],
                )
                .unwrap();
                eager::invoke_backward(
                    def,
                    &env,
                    &dy,
                    Some(&y),
                    &[&x],
                    &mut general,
                    &[OpReqType::AddTo],
                )
                .unwrap();
                let (f, g) = (fast[0].to_f64_vec(), general[0].to_f64_vec());
                for (i, (a, b)) in f.iter().zip(&g).enumerate() {
                    let same = a.to_bits() == b.to_bits()
                        || (*a == 0.0 && *b == 0.0)
                        || (a.is_nan() && b.is_nan());
                    if !same {
                        failures.push(format!(
                            "{op} {dtype} n={n} [{i}]: fast {a:e} general {b:e}"
                        ));
                        break;
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Raw backward kernel calls where a gradient buffer is exactly a source
/// (dy, or an input), for every request: the fast path must agree with the
/// general path's alias handling.
#[test]
fn small_backward_with_a_gradient_aliasing_a_source_in_every_request() {
    simpleop_ops::link();
    let env = EnvArguments::none();
    let ctx = RunContext::default();
    let entry = eager::lookup("elemwise_mul").unwrap();
    let call = OpCall {
        op: entry.def,
        env: &env,
        ctx: &ctx,
    };
    let bw = entry.kernels(Device::Cpu).unwrap().backward.unwrap();
    let (dy0, a0, b0) = ([2.0f32, -3.0, 4.0], [5.0f32, 7.0, -1.5], [0.5f32, 6.0, 9.0]);
    // Gradients: ga = dy b, gb = dy a.
    for req in OpReqType::ALL {
        for alias in ["dy", "a", "b"] {
            // ga's buffer is the aliased source; gb separate.
            let (mut dy, mut a, mut b) = (dy0, a0, b0);
            let mut gb = [100.0f32; 3];
            let shared: *mut f32 = match alias {
                "dy" => dy.as_mut_ptr(),
                "a" => a.as_mut_ptr(),
                _ => b.as_mut_ptr(),
            };
            let init_ga: [f32; 3] = match alias {
                "dy" => dy0,
                "a" => a0,
                _ => b0,
            };
            let r = {
                // SAFETY: the views cover arrays that outlive the call;
                // exact aliasing of one gradient and one source is the
                // contract under test.
                let (dyb, ab, bb, ga) = unsafe {
                    (
                        TBlob::from_raw(dy.as_ptr().cast(), DType::F32, [3].into()),
                        TBlob::from_raw(a.as_ptr().cast(), DType::F32, [3].into()),
                        TBlob::from_raw(b.as_ptr().cast(), DType::F32, [3].into()),
                        TBlobMut::from_raw(shared.cast(), DType::F32, [3].into()),
                    )
                };
                let args = GradArgs {
                    out_grad: dyb,
                    output: None,
                    inputs: vec![Some(ab), Some(bb)].into(),
                    out_grads: Default::default(),
                    outputs: Default::default(),
                };
                let gbm = TBlobMut::from_slice(&mut gb[..], [3]).unwrap();
                let mut grads = [ga, gbm];
                bw(&call, &args, &mut grads, &[req, OpReqType::WriteTo])
            };
            r.unwrap_or_else(|e| panic!("{req:?} alias {alias}: {e}"));
            let ga_now: [f32; 3] = match alias {
                "dy" => dy,
                "a" => a,
                _ => b,
            };
            let want_ga: Vec<f32> = (0..3)
                .map(|i| {
                    let v = dy0[i] * b0[i];
                    match req {
                        OpReqType::Null => init_ga[i],
                        OpReqType::AddTo => init_ga[i] + v,
                        _ => v,
                    }
                })
                .collect();
            assert_eq!(ga_now.to_vec(), want_ga, "ga {req:?} alias {alias}");
            let want_gb: Vec<f32> = (0..3).map(|i| dy0[i] * a0[i]).collect();
            assert_eq!(gb.to_vec(), want_gb, "gb {req:?} alias {alias}");
        }
    }
}

#[test]
fn composed_backward_refuses_gradient_buffers_of_the_wrong_shape() {
    simpleop_ops::link();
    let def = eager::lookup("_backward").unwrap().def;
    let ctx = RunContext::default();
    let bw = backward_kernel("_backward");
    let env = (def.parse)(def, &attrs(&[("forward_op", "dot")])).unwrap();
    let call = OpCall {
        op: def,
        env: &env,
        ctx: &ctx,
    };
    // _backward(dot) with a, b of (2, 2): inputs dc, a, b; outputs ga, gb.
    let v = [0.5f64; 4];
    let blob = || TBlob::from_slice(&v[..], [2, 2]).unwrap();
    let args = GradArgs {
        out_grad: blob(),
        output: None,
        inputs: vec![Some(blob()), Some(blob()), Some(blob())].into(),
        out_grads: vec![Some(blob()), Some(blob())].into(),
        outputs: Default::default(),
    };
    // The gradient of `dc` given a buffer of 3 elements, of `b` of 9.
    let (mut g0, mut g1, mut g2) = ([7.0f64; 3], [7.0f64; 4], [7.0f64; 9]);
    let mut grads = [
        TBlobMut::from_slice(&mut g0[..], [3]).unwrap(),
        TBlobMut::from_slice(&mut g1[..], [2, 2]).unwrap(),
        TBlobMut::from_slice(&mut g2[..], [3, 3]).unwrap(),
    ];
    let r = bw(&call, &args, &mut grads, &[OpReqType::WriteTo; 3]);
    assert!(
        r.is_err(),
        "gradients of the wrong shape accepted: {g0:?} {g2:?}"
    );
}

#[test]
fn dual_backward_refuses_an_output_of_the_wrong_shape() {
    simpleop_ops::link();
    let def = eager::lookup("_backward").unwrap().def;
    let ctx = RunContext::default();
    let bw = backward_kernel("_backward");
    // `_backward(tanh)`: inputs dy, y, x (3 elements), but y has 1.
    let env = (def.parse)(def, &attrs(&[("forward_op", "tanh")])).unwrap();
    let call = OpCall {
        op: def,
        env: &env,
        ctx: &ctx,
    };
    let (v3, v1) = ([0.5f64; 3], [0.5f64; 1]);
    let args = GradArgs {
        out_grad: TBlob::from_slice(&v3[..], [3]).unwrap(),
        output: None,
        inputs: vec![
            Some(TBlob::from_slice(&v3[..], [3]).unwrap()),
            Some(TBlob::from_slice(&v1[..], [1]).unwrap()),
            Some(TBlob::from_slice(&v3[..], [3]).unwrap()),
        ]
        .into(),
        out_grads: vec![Some(TBlob::from_slice(&v3[..], [3]).unwrap())].into(),
        outputs: Default::default(),
    };
    let (mut g0, mut g1, mut g2) = ([0.0f64; 3], [0.0f64; 1], [0.0f64; 3]);
    let mut grads = [
        TBlobMut::from_slice(&mut g0[..], [3]).unwrap(),
        TBlobMut::from_slice(&mut g1[..], [1]).unwrap(),
        TBlobMut::from_slice(&mut g2[..], [3]).unwrap(),
    ];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        bw(&call, &args, &mut grads, &[OpReqType::WriteTo; 3])
    }));
    match r {
        Ok(r) => assert!(r.is_err(), "an output of the wrong shape accepted"),
        Err(_) => panic!("panicked on an output of the wrong shape"),
    }
}

#[test]
fn composed_backward_errors_restore_the_recording_modes() {
    simpleop_ops::link();
    let def = eager::lookup("_backward").unwrap().def;
    let ctx = RunContext::default();
    let bw = backward_kernel("_backward");
    let env = (def.parse)(def, &attrs(&[("forward_op", "dot")])).unwrap();
    let call = OpCall {
        op: def,
        env: &env,
        ctx: &ctx,
    };
    // dot of (2, 3) by (2, 3): the composition's products fail.
    let v = [0.5f64; 6];
    let v4 = [0.5f64; 4];
    let b6 = || TBlob::from_slice(&v[..], [2, 3]).unwrap();
    let args = GradArgs {
        out_grad: b6(),
        output: None,
        inputs: vec![
            Some(TBlob::from_slice(&v4[..], [2, 2]).unwrap()),
            Some(b6()),
            Some(b6()),
        ]
        .into(),
        out_grads: vec![Some(b6()), Some(b6())].into(),
        outputs: Default::default(),
    };
    let (mut g0, mut g1, mut g2) = ([0.0f64; 4], [0.0f64; 6], [0.0f64; 6]);
    let mut grads = [
        TBlobMut::from_slice(&mut g0[..], [2, 2]).unwrap(),
        TBlobMut::from_slice(&mut g1[..], [2, 3]).unwrap(),
        TBlobMut::from_slice(&mut g2[..], [2, 3]).unwrap(),
    ];
    for (rec, train) in [(false, false), (true, false), (false, true), (true, true)] {
        let _r = autograd::RecordingGuard::new(rec, train);
        let r = bw(&call, &args, &mut grads, &[OpReqType::WriteTo; 3]);
        assert!(r.is_err());
        assert_eq!(
            (autograd::is_recording(), autograd::is_training()),
            (rec, train)
        );
    }
}

#[test]
fn second_order_executor_backward_honours_add_requests() {
    simpleop_ops::link();
    let (x, w) = (var("x"), var("w"));
    let loss = call(
        "sum",
        &[&call("tanh", &[&call("dot", &[&x, &w], &[])], &[])],
        &[],
    );
    let g = loss.gradient(&["x"]).unwrap();
    // Head: sum of the gradient, differentiated by the executor.
    let head = call("sum", &[&call("elemwise_mul", &[&g, &g], &[])], &[]);
    let x0 = arr(&[0.1, -0.2, 0.3, 0.4, -0.5, 0.6], &[2, 3]);
    let w0 = arr(&[0.5, 0.25, -0.5, 1.0, 0.75, -0.25], &[3, 2]);
    let run = |req: GradReq, init: f64| {
        let args: HashMap<String, NDArray> = [("x", &x0), ("w", &w0)]
            .iter()
            .map(|(n, a)| (n.to_string(), (*a).clone()))
            .collect();
        let bufs: HashMap<String, NDArray> = [("x", [2usize, 3]), ("w", [3, 2])]
            .iter()
            .map(|(n, s)| {
                (
                    n.to_string(),
                    NDArray::from_f64(&[init; 6], *s, DType::F64).unwrap(),
                )
            })
            .collect();
        let reqs = HashMap::from([("x".to_string(), req), ("w".to_string(), req)]);
        let mut exe = head.bind(args, bufs, reqs).unwrap();
        exe.forward(true).unwrap();
        exe.backward(&[]).unwrap();
        (
            exe.grad("x").unwrap().to_f64_vec(),
            exe.grad("w").unwrap().to_f64_vec(),
        )
    };
    let (wx, ww) = run(GradReq::Write, 0.0);
    let (ax, aw) = run(GradReq::Add, 1.0);
    let plus = |v: &[f64]| v.iter().map(|a| a + 1.0).collect::<Vec<_>>();
    simpleop_tests::assert_close(&ax, &plus(&wx), 1e-14, "x add");
    simpleop_tests::assert_close(&aw, &plus(&ww), 1e-14, "w add");
    // And against the symbolic gradient of the gradient.
    let gg = head.gradient(&["x", "w"]).unwrap();
    let out = eval(&gg, &[("x", &x0), ("w", &w0)]).unwrap();
    simpleop_tests::assert_close(&out[0], &wx, 1e-14, "x");
    simpleop_tests::assert_close(&out[1], &ww, 1e-14, "w");
}

#[test]
fn create_graph_on_a_very_deep_eager_chain_does_not_overflow_the_stack() {
    simpleop_ops::link();
    let mut x = arr(&[0.5], &[1]);
    x.attach_grad().unwrap();
    let y = autograd::record(|| -> simpleop::Result<_> {
        let mut y = x.clone();
        for _ in 0..100_000 {
            y = eager::invoke("sin", &[&y], &Attrs::new())?;
        }
        Ok(y)
    })
    .unwrap();
    let g = autograd::grad_with(&[&y], &[&x], &[], create_graph()).unwrap();
    let h = autograd::grad(&[&g[0]], &[&x], &[], false).unwrap();
    assert!(h[0].to_f64_vec()[0].is_finite());
    drop(g);
    drop(y);
}

#[test]
fn backward_op_of_ops_updating_inputs_and_huge_shapes_is_an_error() {
    simpleop_ops::link();
    let x = arr(&[0.5, 1.0], &[2]);
    for fwd in ["sgd_update", "adam_update", "sgd_mom_update"] {
        assert!(
            backward_by_name(fwd, &[&x, &x, &x, &x, &x]).is_err(),
            "{fwd}"
        );
    }
    // Shape inference with shapes whose sizes overflow: errors, no panic.
    let (dy, a, b) = (var("dy"), var("a"), var("b"));
    let s = call("_backward", &[&dy, &a, &b], &[("forward_op", "dot")]);
    let huge = 1usize << 40;
    let known: HashMap<String, Shape> = [
        ("dy".to_string(), Shape::new([huge, huge])),
        ("a".to_string(), Shape::new([huge, huge])),
        ("b".to_string(), Shape::new([huge, huge])),
    ]
    .into_iter()
    .collect();
    let _ = s.infer_shape(&known);
    let t = call("_backward", &[&dy, &a], &[("forward_op", "sum")]);
    let known: HashMap<String, Shape> = [
        ("dy".to_string(), Shape::new([1])),
        ("a".to_string(), Shape::new([huge, huge, huge])),
    ]
    .into_iter()
    .collect();
    let _ = t.infer_shape(&known);
}

#[test]
fn second_order_in_half_types_through_compositions() {
    simpleop_ops::link();
    let x = var("x");
    let c = var("c");
    let y = call(
        "sum",
        &[&call(
            "elemwise_mul",
            &[&call("softmax", &[&x], &[("axis", "-1")]), &c],
            &[],
        )],
        &[],
    );
    let g = y.gradient(&["x"]).unwrap();
    let hv = call("sum", &[&call("elemwise_mul", &[&g, &c], &[])], &[])
        .gradient(&["x"])
        .unwrap();
    let x0 = arr(&[0.1, -0.4, 0.3, 0.9, -0.2, 0.5], &[2, 3]);
    let c0 = arr(&[1.0, 0.5, -0.5, 0.25, 2.0, -1.0], &[2, 3]);
    let want = eval(&hv, &[("x", &x0), ("c", &c0)]).unwrap();
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 2e-2), (DType::BF16, 1e-1)] {
        let got = eval(&hv, &[("x", &x0.astype(dtype)), ("c", &c0.astype(dtype))]).unwrap();
        simpleop_tests::assert_close(&got[0], &want[0], tol, &format!("{dtype}"));
    }
}

#[test]
fn create_graph_with_repeated_heads_and_inputs_and_a_variable_head() {
    simpleop_ops::link();
    let mut x = arr(&[0.5, -1.0], &[2]);
    x.attach_grad().unwrap();
    let y = autograd::record(|| eager::invoke("tanh", &[&x], &Attrs::new())).unwrap();
    let plain = autograd::grad(&[&y, &y], &[&x, &x], &[], true).unwrap();
    let rec = autograd::grad_with(&[&y, &y], &[&x, &x], &[], create_graph()).unwrap();
    assert_eq!(
        plain[0].to_f64_vec(),
        plain[1].to_f64_vec(),
        "plain grad, repeated input"
    );
    assert_eq!(
        rec[0].to_f64_vec(),
        rec[1].to_f64_vec(),
        "create_graph, repeated input"
    );
    assert_eq!(plain[0].to_f64_vec(), rec[0].to_f64_vec());
    // The head is the variable itself.
    let g = autograd::grad_with(&[&x], &[&x], &[], create_graph()).unwrap();
    assert_eq!(g[0].to_f64_vec(), vec![1.0, 1.0]);
    // The head is among the inputs.
    let g = autograd::grad_with(&[&y], &[&y, &x], &[], create_graph()).unwrap();
    assert_eq!(g[0].to_f64_vec(), vec![1.0, 1.0]);
    // Symbolic: the head is the variable.
    let xs = var("x");
    let s = xs.gradient(&["x"]).unwrap();
    assert_eq!(eval(&s, &[("x", &x)]).unwrap()[0], vec![1.0, 1.0]);
}

#[test]
fn create_graph_through_dropout_matches_the_plain_gradient() {
    simpleop_ops::link();
    let mut x = arr(&[0.5, -1.0, 2.0, 0.25, 1.5, -0.75, 0.1, 0.2], &[8]);
    x.attach_grad().unwrap();
    for train in [true, false] {
        let y = autograd::record_with(train, || -> simpleop::Result<_> {
            let d = eager::invoke("Dropout", &[&x], &attrs(&[("p", "0.5")]))?;
            eager::invoke("tanh", &[&d], &Attrs::new())
        })
        .unwrap();
        let plain = autograd::grad(&[&y], &[&x], &[], true).unwrap();
        let rec = autograd::grad_with(&[&y], &[&x], &[], create_graph()).unwrap();
        assert_eq!(plain[0].to_f64_vec(), rec[0].to_f64_vec(), "train {train}");
        let _ = autograd::grad(&[&rec[0]], &[&x], &[], false);
    }
}

#[test]
fn backward_op_of_an_op_without_layout_and_no_inputs_is_an_error() {
    simpleop_ops::link();
    let mut failures = Vec::new();
    for fwd in ["BatchNorm", "argmax", "sgd_update", "_backward/BatchNorm"] {
        let a = attrs(&[("forward_op", fwd)]);
        let r = std::panic::catch_unwind(|| {
            let e = eager::invoke("_backward", &[], &a);
            let def = eager::lookup("_backward").unwrap().def;
            let s = Symbol::invoke("_backward", &[], &a);
            let outs =
                (def.parse)(def, &a).map(|env| eager::invoke_outputs(def, &[], &mut [], &env));
            let s_ok = s
                .map(|s| {
                    let _ = s.infer_shape(&HashMap::new());
                    let _ = s.list_outputs();
                    let _ = s.to_json();
                    let _ = s.gradient(&["x"]);
                    let _ = s.bind(HashMap::new(), HashMap::new(), HashMap::new());
                    s.num_outputs()
                })
                .map_err(|e| e.to_string());
            (e.is_err(), s_ok, outs.map(|o| o.map(|v| v.len())))
        });
        let (eager_err, sym, outs) = r.unwrap_or_else(|_| panic!("{fwd}: panicked"));
        if !eager_err {
            failures.push(format!("{fwd}: eager call accepted"));
        }
        if sym.is_ok() {
            failures.push(format!(
                "{fwd}: symbol with {:?} outputs accepted",
                sym.ok()
            ));
        }
        if matches!(outs, Ok(Ok(_))) {
            failures.push(format!("{fwd}: invoke_outputs gave {outs:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn gradient_graphs_of_in_place_ops_equal_the_tape() {
    simpleop_ops::link();
    let x = var("x");
    let a = call("Activation", &[&x], &[("act_type", "tanh")]);
    let r = call("relu", &[&a], &[]);
    let s = call("sigmoid", &[&r], &[]);
    let e = call("exp", &[&s], &[]);
    let m = call("elemwise_mul", &[&e, &x], &[]);
    let loss = call("sum", &[&call("softmax", &[&m], &[])], &[]);
    let g = loss.gradient(&["x"]).unwrap();
    let g2 = call("sum", &[&call("square", &[&g], &[])], &[])
        .gradient(&["x"])
        .unwrap();
    let x0 = arr(&[0.3, -0.2, 0.9, 1.4, -0.7, 0.05], &[2, 3]);
    let sym = eval(&g, &[("x", &x0)]).unwrap();
    let sym2 = eval(&g2, &[("x", &x0)]).unwrap();
    let mut xe = x0.clone();
    xe.attach_grad().unwrap();
    let y = autograd::record(|| -> simpleop::Result<_> {
        let a = eager::invoke("Activation", &[&xe], &attrs(&[("act_type", "tanh")]))?;
        let r = eager::invoke("relu", &[&a], &Attrs::new())?;
        let s = eager::invoke("sigmoid", &[&r], &Attrs::new())?;
        let e = eager::invoke("exp", &[&s], &Attrs::new())?;
        let m = eager::invoke("elemwise_mul", &[&e, &xe], &Attrs::new())?;
        let p = eager::invoke("softmax", &[&m], &Attrs::new())?;
        eager::invoke("sum", &[&p], &Attrs::new())
    })
    .unwrap();
    let ge = autograd::grad_with(&[&y], &[&xe], &[], create_graph()).unwrap();
    assert_eq!(ge[0].to_f64_vec(), sym[0]);
    let sq = autograd::record(|| -> simpleop::Result<_> {
        let q = eager::invoke("square", &[&ge[0]], &Attrs::new())?;
        eager::invoke("sum", &[&q], &Attrs::new())
    })
    .unwrap();
    let ge2 = autograd::grad(&[&sq], &[&xe], &[], false).unwrap();
    simpleop_tests::assert_close(&ge2[0].to_f64_vec(), &sym2[0], 1e-13, "second order");
}

#[test]
fn run_gradgrad_of_a_backward_op_reports_the_missing_derivative() {
    simpleop_ops::link();
    let e = GradCheck::new("_backward")
        .attr("forward_op", "tanh")
        .shapes(&[&[2], &[2], &[2]])
        .run_gradgrad()
        .unwrap_err();
    assert!(
        matches!(e, simpleop::Error::NoGradient { .. }),
        "expected NoGradient, got: {e}"
    );
}
