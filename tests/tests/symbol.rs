//! Symbols: composition, arguments and outputs, inference, JSON, binding,
//! forward and backward, against hand-computed values and MXNet's results.

use std::collections::HashMap;

use simpleop::symbol::{GradReq, Symbol};
use simpleop::{Attrs, DType, Error, NDArray, Shape};
use simpleop_ops::{ReduceAxesParams, broadcast_add, dot, relu, sigmoid, sum, tanh};

fn arr(v: &[f64], shape: &[usize]) -> NDArray {
    NDArray::from_f64(v, Shape::new(shape.to_vec()), DType::F64).unwrap()
}

fn map<V>(items: Vec<(&str, V)>) -> HashMap<String, V> {
    items.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

#[test]
fn typed_functions_build_graphs_and_run_eagerly() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let w = Symbol::var("w");
    let b = Symbol::var("b");
    let h = relu(&broadcast_add(&dot(&x, &w, Default::default()).unwrap(), &b).unwrap()).unwrap();
    let loss = sum(&h, ReduceAxesParams::default()).unwrap();
    assert_eq!(loss.list_arguments(), ["x", "w", "b"]);
    assert_eq!(loss.list_outputs().len(), 1);
    assert!(loss.list_outputs()[0].starts_with("sum"));
    // The same typed function on arrays computes now.
    let xa = arr(&[1.0, -2.0], &[1, 2]);
    let r = relu(&xa).unwrap();
    assert_eq!(r.to_f64_vec(), [1.0, 0.0]);
}

#[test]
fn forward_and_backward_match_hand_computed_values() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    // z = tanh(x) * y + x; dz/dx = (1 - tanh²x) y + 1, dz/dy = tanh x.
    let z = (&(&tanh(&x).unwrap() * &y).unwrap() + &x).unwrap();
    let xv = [0.5, -1.0, 2.0];
    let yv = [1.5, 2.0, -0.5];
    let args = map(vec![("x", arr(&xv, &[3])), ("y", arr(&yv, &[3]))]);
    let grads = map(vec![
        ("x", NDArray::zeros([3], DType::F64)),
        ("y", NDArray::zeros([3], DType::F64)),
    ]);
    let reqs = map(vec![("x", GradReq::Write), ("y", GradReq::Write)]);
    let mut exe = z.bind(args, grads, reqs).unwrap();
    exe.forward(true).unwrap();
    let out = exe.outputs()[0].to_f64_vec();
    for i in 0..3 {
        let t = xv[i].tanh();
        assert!((out[i] - (t * yv[i] + xv[i])).abs() < 1e-12);
    }
    exe.backward(&[]).unwrap();
    let gx = exe.grad("x").unwrap().to_f64_vec();
    let gy = exe.grad("y").unwrap().to_f64_vec();
    for i in 0..3 {
        let t = xv[i].tanh();
        assert!(
            (gx[i] - ((1.0 - t * t) * yv[i] + 1.0)).abs() < 1e-12,
            "{gx:?}"
        );
        assert!((gy[i] - t).abs() < 1e-12);
    }
    // `add` accumulates into the buffer across backward passes.
    let args = map(vec![("x", arr(&xv, &[3])), ("y", arr(&yv, &[3]))]);
    let grads = map(vec![("x", arr(&[10.0, 10.0, 10.0], &[3]))]);
    let reqs = map(vec![("x", GradReq::Add)]);
    let mut exe = z.bind(args, grads, reqs).unwrap();
    exe.forward(true).unwrap();
    exe.backward(&[]).unwrap();
    exe.forward(true).unwrap();
    exe.backward(&[]).unwrap();
    let gx2 = exe.grad("x").unwrap().to_f64_vec();
    for i in 0..3 {
        assert!((gx2[i] - (10.0 + 2.0 * gx[i])).abs() < 1e-12);
    }
    assert!(exe.grad("y").is_none());
}

#[test]
fn a_value_used_twice_by_one_node_gets_both_gradients() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let y = (&x * &x).unwrap();
    let args = map(vec![("x", arr(&[3.0, -2.0], &[2]))]);
    let grads = map(vec![("x", NDArray::zeros([2], DType::F64))]);
    let mut exe = y
        .bind(args, grads, map(vec![("x", GradReq::Write)]))
        .unwrap();
    exe.forward(true).unwrap();
    exe.backward(&[arr(&[1.0, 0.5], &[2])]).unwrap();
    assert_eq!(exe.grad("x").unwrap().to_f64_vec(), [6.0, -2.0]);
}

#[test]
fn several_heads_and_a_head_consumed_inside() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let s = sigmoid(&x).unwrap();
    let t = (&s * 3.0).unwrap();
    let g = Symbol::group(&[s.clone(), t, x.clone()]);
    assert_eq!(g.num_outputs(), 3);
    let args = map(vec![("x", arr(&[0.0, 1.0], &[2]))]);
    let grads = map(vec![("x", NDArray::zeros([2], DType::F64))]);
    let mut exe = g
        .bind(args, grads, map(vec![("x", GradReq::Write)]))
        .unwrap();
    exe.forward(true).unwrap();
    assert_eq!(exe.outputs()[2].to_f64_vec(), [0.0, 1.0]);
    exe.backward(&[]).unwrap();
    // d/dx [s + 3 s + x] = 4 s (1 - s) + 1.
    let gx = exe.grad("x").unwrap().to_f64_vec();
    for (i, xv) in [0.0f64, 1.0].iter().enumerate() {
        let sv = 1.0 / (1.0 + (-xv).exp());
        assert!((gx[i] - (4.0 * sv * (1.0 - sv) + 1.0)).abs() < 1e-12);
    }
}

#[test]
fn shapes_and_types_are_inferred_from_partial_information() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let z = relu(&(&x + &y).unwrap()).unwrap();
    let got = z
        .infer_shape(&map(vec![("x", Shape::new(vec![2, 3]))]))
        .unwrap();
    assert!(got.is_complete());
    assert_eq!(got.argument_shapes[1].as_ref().unwrap().dims(), [2, 3]);
    let types = z.infer_type(&map(vec![("y", DType::F16)])).unwrap();
    assert_eq!(types.argument_types, [Some(DType::F16), Some(DType::F16)]);
    assert_eq!(types.output_types, [Some(DType::F16)]);
    // dot cannot infer its weight: left unknown, not an error.
    let w = Symbol::var("w");
    let d = dot(&x, &w, Default::default()).unwrap();
    let got = d
        .infer_shape(&map(vec![("x", Shape::new(vec![2, 3]))]))
        .unwrap();
    assert!(!got.is_complete());
    // A mismatch names the node and the op.
    let named =
        Symbol::invoke_named("elemwise_add", &[&x, &y], &Attrs::new(), Some("plus")).unwrap();
    let err = named
        .infer_shape(&map(vec![
            ("x", Shape::new(vec![2, 3])),
            ("y", Shape::new(vec![3, 2])),
        ]))
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("`plus`") && msg.contains("elemwise_add"),
        "{msg}"
    );
}

/// Graphs as MXNet 1.9.1 writes them for `mx.sym.var('x', shape=(2, 3),
/// dtype=..., lr_mult=2.0, init=mx.init.Zero())`; MXNet's answers are in
/// the comments.
#[test]
fn mxnet_shape_and_dtype_hints_stand_in_for_values_not_given() {
    simpleop_ops::link();
    let mixed = r#"{"nodes": [{"op": "null", "name": "x", "attrs": {"__dtype__": "0", "__init__": "[\"zero\", {}]", "__lr_mult__": "2.0", "__shape__": "(2, 3)"}, "inputs": []}, {"op": "null", "name": "w", "inputs": []}, {"op": "elemwise_mul", "name": "_mul0", "inputs": [[0, 0, 0], [1, 0, 0]]}, {"op": "relu", "name": "r", "inputs": [[2, 0, 0]]}], "arg_nodes": [0, 1], "node_row_ptr": [0, 1, 2, 3, 4], "heads": [[3, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}"#;
    let g = Symbol::from_json(mixed).unwrap();
    let s = g.infer_shape(&HashMap::new()).unwrap();
    let want = Some(Shape::new([2, 3]));
    assert_eq!(s.argument_shapes, [want.clone(), want.clone()]);
    assert_eq!(s.output_shapes, [want]);
    let t = g.infer_type(&HashMap::new()).unwrap();
    assert_eq!(t.argument_types, [Some(DType::F32), Some(DType::F32)]);
    // a given shape wins over the hint: MXNet's infer_shape(x=(4, 5)) too
    let s = g
        .infer_shape(&map(vec![("x", Shape::new([4, 5]))]))
        .unwrap();
    assert_eq!(s.output_shapes, [Some(Shape::new([4, 5]))]);
    // the hints survive a round trip
    let back = Symbol::from_json(&g.to_json()).unwrap();
    assert_eq!(
        back.infer_shape(&HashMap::new()).unwrap(),
        g.infer_shape(&HashMap::new()).unwrap()
    );

    // MXNet's simple_bind makes x a float16 (2, 3) array
    let half = r#"{"nodes": [{"op": "null", "name": "x", "attrs": {"__dtype__": "2", "__shape__": "(2, 3)"}, "inputs": []}, {"op": "exp", "name": "exp0", "inputs": [[0, 0, 0]]}], "arg_nodes": [0], "node_row_ptr": [0, 1, 2], "heads": [[1, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}"#;
    let g = Symbol::from_json(half).unwrap();
    let mut ex = g
        .simple_bind(&HashMap::new(), &HashMap::new(), HashMap::new())
        .unwrap();
    ex.forward(false).unwrap();
    let out = &ex.outputs()[0];
    assert_eq!((out.dtype(), out.shape().dims()), (DType::F16, &[2, 3][..]));
    assert_eq!(
        out.to_f64_vec(),
        [1.0; 6],
        "exp of the zeros simple_bind made"
    );
    // a dtype given to simple_bind wins over the hint
    let ex = g
        .simple_bind(
            &HashMap::new(),
            &map(vec![("x", DType::F64)]),
            HashMap::new(),
        )
        .unwrap();
    assert_eq!(ex.outputs()[0].dtype(), DType::F64);

    let var = |key: &str, value: &str| {
        let x = Symbol::var_with_attrs("x", Attrs::from([(key, value)]));
        relu(&x).unwrap()
    };
    // unknown dimensions (0) and rank (()) leave the shape to inference;
    // a trailing comma and Python 2's longs are MXNet's too
    for (hint, want) in [
        ("(0, 3)", None),
        ("()", None),
        ("(3,)", Some(Shape::new([3]))),
        ("[2, 4]", Some(Shape::new([2, 4]))),
        ("(2L, 3L)", Some(Shape::new([2, 3]))),
    ] {
        let s = var("__shape__", hint).infer_shape(&HashMap::new()).unwrap();
        assert_eq!(s.output_shapes, [want], "{hint}");
    }
    for (key, bad) in [
        ("__shape__", "(2, a)"),
        ("__shape__", "2, 3"),
        ("__dtype__", "float32"),
        // int8: MXNet has it, simpleop does not
        ("__dtype__", "5"),
    ] {
        let g = var(key, bad);
        let err = if key == "__shape__" {
            g.infer_shape(&HashMap::new()).unwrap_err()
        } else {
            g.infer_type(&HashMap::new()).unwrap_err()
        };
        let msg = err.to_string();
        assert!(
            msg.contains("`x`") && msg.contains(key) && msg.contains(bad),
            "{msg}"
        );
    }
}

#[test]
fn json_round_trips_and_bad_json_is_an_error() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let y = Symbol::invoke(
        "clip",
        &[&x],
        &Attrs::new().with("a_min", -1).with("a_max", 1),
    )
    .unwrap();
    let z = sum(&y, ReduceAxesParams::default()).unwrap();
    let text = z.to_json();
    let back = Symbol::from_json(&text).unwrap();
    assert_eq!(back.to_json(), text);
    assert_eq!(back.list_arguments(), ["x"]);
    for bad in [
        "",
        "{",
        "[]",
        r#"{"nodes": 3, "heads": []}"#,
        r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}], "heads": [[5, 0, 0]]}"#,
        r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "relu", "name": "r", "inputs": [[1, 0, 0]]}], "heads": [[1, 0, 0]]}"#,
        r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "relu", "name": "r", "inputs": [[0, 0]]}, {"op": "relu", "name": "r2", "inputs": ["a"]}], "heads": [[2, 0, 0]]}"#,
        r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "relu", "name": "r", "inputs": [[0, 0, 0], [0, 0, 0]]}], "heads": [[1, 0, 0]]}"#,
        r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "clip", "name": "c", "attrs": {"a_min": "zero", "a_max": "1"}, "inputs": [[0, 0, 0]]}], "heads": [[1, 0, 0]]}"#,
    ] {
        assert!(Symbol::from_json(bad).is_err(), "accepted: {bad}");
    }
    let err = Symbol::from_json(
        r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "rleu", "name": "r", "inputs": [[0, 0, 0]]}], "heads": [[1, 0, 0]]}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("did you mean `relu`"), "{err}");
}

#[test]
fn binding_errors_name_the_argument_or_op() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let z = (&x + &y).unwrap();
    let err = z
        .bind(
            map(vec![("x", arr(&[1.0], &[1]))]),
            HashMap::new(),
            HashMap::new(),
        )
        .unwrap_err();
    assert!(
        matches!(&err, Error::Argument { arg, .. } if arg == "y"),
        "{err}"
    );
    let err = z
        .bind(
            map(vec![("x", arr(&[1.0], &[1])), ("y", arr(&[1.0], &[1]))]),
            HashMap::new(),
            map(vec![("x", GradReq::Write)]),
        )
        .unwrap_err();
    assert!(err.to_string().contains("no gradient buffer"), "{err}");
    // A gradient through an op without one is a bind-time error naming it.
    let a = Symbol::invoke("gamma", &[&x], &Attrs::new()).unwrap();
    let err = a
        .bind(
            map(vec![("x", arr(&[1.0, 2.0], &[2]))]),
            map(vec![("x", NDArray::zeros([2], DType::F64))]),
            map(vec![("x", GradReq::Write)]),
        )
        .unwrap_err();
    assert!(err.to_string().contains("gamma"), "{err}");
    assert!(err.to_string().contains("`x`"), "{err}");
}

#[test]
fn executors_are_send_and_run_concurrently() {
    simpleop_ops::link();
    fn is_send<T: Send>() {}
    is_send::<simpleop::symbol::Executor>();
    let x = Symbol::var("x");
    let y = tanh(&(&x * 2.0).unwrap()).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let y = y.clone();
                s.spawn(move || {
                    let v = t as f64 * 0.1;
                    let mut exe = y
                        .bind(
                            map(vec![("x", arr(&[v; 1000], &[1000]))]),
                            HashMap::new(),
                            HashMap::new(),
                        )
                        .unwrap();
                    exe.forward(false).unwrap();
                    (v, exe.outputs()[0].to_f64_vec())
                })
            })
            .collect();
        for h in handles {
            let (v, out) = h.join().unwrap();
            assert!(out.iter().all(|o| (o - (2.0 * v).tanh()).abs() < 1e-15));
        }
    });
}

/// The README's "Use it in a graph" block, with its results checked.
#[test]
fn readme_graph_tour() -> simpleop::Result<()> {
    simpleop_ops::link();
    let (x, w, b) = (Symbol::var("x"), Symbol::var("w"), Symbol::var("b"));
    let h = relu(&broadcast_add(&dot(&x, &w, Default::default())?, &b)?)?;
    let loss = (&sum(&h, ReduceAxesParams::default())? * 0.5)?;
    assert_eq!(loss.list_arguments(), ["x", "w", "b"]);

    let known = HashMap::from([
        ("x".to_string(), Shape::new(vec![32, 8])),
        ("w".to_string(), Shape::new(vec![8, 4])),
        ("b".to_string(), Shape::new(vec![4])),
    ]);
    assert_eq!(
        loss.infer_shape(&known)?.output_shapes,
        [Some(Shape::new(vec![1]))]
    );
    let reqs = HashMap::from([
        ("w".to_string(), GradReq::Write),
        ("b".to_string(), GradReq::Add),
    ]);
    let mut exe = loss.simple_bind(&known, &HashMap::new(), reqs)?;
    let xv = NDArray::random_normal([32, 8], 0.0, 1.0, DType::F32, 7)?;
    exe.set_arg("x", &xv)?;
    exe.set_arg(
        "w",
        &NDArray::random_normal([8, 4], 0.0, 1.0, DType::F32, 8)?,
    )?;
    exe.forward(true)?;
    exe.backward(&[])?;
    // d loss / dw = 0.5 · xᵀ · 1[h > 0]; d loss / db = 0.5 · Σ_rows 1[h > 0].
    let w_now = exe.arg("w").unwrap().to_f64_vec();
    let x_now = xv.to_f64_vec();
    let mut dw = vec![0.0; 32];
    let mut db = vec![0.0; 4];
    for r in 0..32 {
        for j in 0..4 {
            let pre: f64 = (0..8).map(|k| x_now[r * 8 + k] * w_now[k * 4 + j]).sum();
            if pre > 0.0 {
                db[j] += 0.5;
                for k in 0..8 {
                    dw[k * 4 + j] += 0.5 * x_now[r * 8 + k];
                }
            }
        }
    }
    let got_dw = exe.grad("w").unwrap().to_f64_vec();
    let got_db = exe.grad("b").unwrap().to_f64_vec();
    for (g, e) in got_dw.iter().zip(&dw).chain(got_db.iter().zip(&db)) {
        assert!((g - e).abs() < 1e-4, "{g} vs {e}");
    }
    // An argument updated in place through `arg_mut` is what the next
    // step reads, and one replaced by a wrong shape is refused then.
    let before = exe.outputs()[0].to_f64_vec()[0];
    let w = exe.arg_mut("w").unwrap();
    *w = NDArray::zeros([8, 4], DType::F32);
    exe.forward(false)?;
    assert_eq!(exe.outputs()[0].to_f64_vec(), [0.0], "was {before}");
    *exe.arg_mut("w").unwrap() = NDArray::zeros([4, 8], DType::F32);
    let err = exe.forward(false).unwrap_err().to_string();
    assert!(
        err.contains("`w`") || err.contains("w:") || err.contains("(8, 4)"),
        "{err}"
    );
    assert!(exe.arg_mut("nope").is_none());
    let stats = exe.memory_stats();
    assert!(stats.planned_bytes < stats.unplanned_bytes, "{stats:?}");
    let json = loss.to_json();
    assert_eq!(Symbol::from_json(&json)?.to_json(), json);
    let dot = exe.to_dot();
    assert!(dot.contains("(32, 4) float32"), "{dot}");
    Ok(())
}

#[test]
fn json_is_laid_out_as_serde_json_prints_a_value() {
    simpleop_ops::link();
    let x = Symbol::var_with_attrs("x", Attrs::from([("__shape__", "(2,)")]));
    let clip = Attrs::new().with("a_min", -1).with("a_max", 1);
    let c = Symbol::invoke_named("clip", &[&x], &clip, Some("c")).unwrap();
    let text = Symbol::group(&[c, x]).to_json();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let want = serde_json::json!({
        "nodes": [
            {"op": "null", "name": "x", "attrs": {"__shape__": "(2,)"}, "inputs": []},
            {"op": "clip", "name": "c", "attrs": {"a_max": "1", "a_min": "-1"},
             "inputs": [[0, 0, 0]]},
        ],
        "arg_nodes": [0],
        "node_row_ptr": [0, 1, 2],
        "heads": [[1, 0, 0], [0, 0, 0]],
        "attrs": {"mxnet_version": ["int", 10901]},
    });
    assert_eq!(v, want);
    // Sorted keys and the same indentation, byte for byte.
    assert_eq!(serde_json::to_string_pretty(&v).unwrap(), text);
}

/// Values spread forward and backward over several passes: `t` is filled
/// from `u`'s other input before `x` (filled from `m`) reaches it, and
/// its own shape rule then disagrees, reported as a conflict.
#[test]
fn inference_spreads_both_ways_and_reports_late_conflicts() {
    simpleop_ops::link();
    let (x, w, k) = (Symbol::var("x"), Symbol::var("w"), Symbol::var("k"));
    let t = sum(&x, ReduceAxesParams::default()).unwrap();
    let u = (&t + &w).unwrap();
    let m = (&x + &k).unwrap();
    let g = Symbol::group(&[u, m]);
    assert_eq!(g.list_arguments(), ["x", "w", "k"]);
    let only_k = map(vec![("k", Shape::new(vec![2, 5]))]);
    let got = g.infer_shape(&only_k).unwrap();
    // `x` from `k` backwards, `t` from `x`, then `w` from `t` backwards.
    let x_shape = Some(Shape::new(vec![2, 5]));
    assert_eq!(got.argument_shapes[0], x_shape);
    assert_eq!(got.argument_shapes[2], x_shape);
    assert!(got.argument_shapes[1].is_some());
    assert_eq!(got.argument_shapes[1], got.output_shapes[0]);
    let both = map(vec![
        ("k", Shape::new(vec![2, 5])),
        ("w", Shape::new(vec![3])),
    ]);
    let err = g.infer_shape(&both).unwrap_err().to_string();
    assert!(err.contains("conflicts with (3,)"), "{err}");
    assert!(err.contains("sum"), "{err}");
    // Dtypes take the same route to the same kind of conflict.
    let types = map(vec![("k", DType::F16), ("w", DType::F64)]);
    let err = g.infer_type(&types).unwrap_err().to_string();
    assert!(err.contains("float16 conflicts with float64"), "{err}");
}
