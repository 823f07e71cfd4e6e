//! Second derivatives: gradient graphs (`Symbol::gradient`) made of
//! `_backward` ops, differentiated again by duals of typed gradients
//! (elementwise ops) and by gradient compositions (`dot`, `sum`, `mean`,
//! `softmax`, `log_softmax`); `GradCheck::run_gradgrad`; a Hessian-vector
//! product and a gradient penalty against finite differences.

use std::collections::HashMap;

use simpleop::gradcheck::GradCheck;
use simpleop::symbol::GradReq;
use simpleop::{Attrs, DType, Error, NDArray, Symbol, simple_op};
use simpleop_tests::assert_close;

/// A user's smooth L1 with its own hand-written gradient.
#[simple_op(name = "_so_smooth_l1", scalar)]
mod so_smooth_l1 {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, sigma: T) -> T {
        let s2 = sigma * sigma;
        if x.abs() < T::one() / s2 {
            T::from_f64(0.5) * s2 * x * x
        } else {
            x.abs() - T::from_f64(0.5) / s2
        }
    }
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>, sigma: T) -> T {
        let s2 = sigma * sigma;
        if x.abs() < T::one() / s2 {
            dy * (s2 * *x)
        } else if *x > T::zero() {
            *dy
        } else {
            -*dy
        }
    }
}

fn var(name: &str) -> Symbol {
    Symbol::var(name)
}

fn call(op: &str, inputs: &[&Symbol], attrs: &[(&str, &str)]) -> Symbol {
    let attrs: Attrs = attrs.iter().map(|(k, v)| (*k, *v)).collect();
    Symbol::invoke(op, inputs, &attrs).unwrap()
}

/// Binds `s` to `args`, runs forward and returns every output in f64.
fn eval(s: &Symbol, args: &[(&str, &NDArray)]) -> Vec<Vec<f64>> {
    let args: HashMap<String, NDArray> = args
        .iter()
        .map(|(k, v)| (k.to_string(), (*v).clone()))
        .collect();
    let mut exe = s.bind(args, HashMap::new(), HashMap::new()).unwrap();
    exe.forward(false).unwrap();
    exe.outputs().iter().map(NDArray::to_f64_vec).collect()
}

fn points(dtype: DType) -> NDArray {
    let xs = [-3.0, -1.7, -0.9, -0.3, 0.0, 0.2, 0.45, 0.8, 1.3, 2.6];
    NDArray::from_f64(&xs, [xs.len()], dtype).unwrap()
}

/// Tolerance per dtype for values of order 1.
fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 4e-3,
        _ => 3e-2,
    }
}

/// `d²/dx² op(x)` through two `gradient` calls, against `closed` at the
/// dtype's rounded points, in every float dtype.
fn check_second(op: &str, attrs: &[(&str, &str)], closed: impl Fn(f64) -> f64) {
    let x = var("x");
    let y = call(op, &[&x], attrs);
    let d2 = y.gradient(&["x"]).unwrap().gradient(&["x"]).unwrap();
    for dtype in DType::FLOATS {
        let x0 = points(dtype);
        let got = &eval(&d2, &[("x", &x0)])[0];
        let want: Vec<f64> = x0.to_f64_vec().into_iter().map(&closed).collect();
        assert_close(got, &want, tol(dtype), &format!("{op}'' in {dtype}"));
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn second_derivatives_match_closed_forms() {
    simpleop_ops::link();
    check_second("tanh", &[], |x| {
        let t = x.tanh();
        -2.0 * t * (1.0 - t * t)
    });
    check_second("sigmoid", &[], |x| {
        let s = sigmoid(x);
        s * (1.0 - s) * (1.0 - 2.0 * s)
    });
    // softplus is `Activation(act_type=softrelu)`: its elementwise form.
    check_second("Activation", &[("act_type", "softrelu")], |x| {
        let s = sigmoid(x);
        s * (1.0 - s)
    });
    check_second("_so_smooth_l1", &[("scalar", "1.5")], |x| {
        if x.abs() < 1.0 / 2.25 { 2.25 } else { 0.0 }
    });
}

#[test]
fn gradgradcheck_passes_for_elementwise_broadcast_and_composed_ops() {
    simpleop_ops::link();
    let f64_only = [DType::F64, DType::F32];
    for op in ["tanh", "sigmoid", "exp", "sin", "square", "negative"] {
        GradCheck::new(op)
            .shapes(&[&[2, 3]])
            .dtypes(&f64_only)
            .run_gradgrad()
            .unwrap();
    }
    GradCheck::new("log")
        .shapes(&[&[2, 3]])
        .range(0.5, 2.0)
        .dtypes(&f64_only)
        .run_gradgrad()
        .unwrap();
    for op in ["elemwise_mul", "elemwise_div", "elemwise_sub"] {
        GradCheck::new(op)
            .shapes(&[&[2, 3], &[2, 3]])
            .range(0.5, 2.0)
            .dtypes(&f64_only)
            .run_gradgrad()
            .unwrap();
    }
    GradCheck::new("broadcast_mul")
        .shapes(&[&[2, 3], &[1, 3]])
        .dtypes(&f64_only)
        .run_gradgrad()
        .unwrap();
    GradCheck::new("_so_smooth_l1")
        .attr("scalar", 1.0)
        .range(-0.8, 0.8)
        .shapes(&[&[2, 3]])
        .dtypes(&f64_only)
        .run_gradgrad()
        .unwrap();
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let (a, b): (&[usize], &[usize]) = match (ta, tb) {
            (false, false) => (&[2, 3], &[3, 4]),
            (true, false) => (&[3, 2], &[3, 4]),
            (false, true) => (&[2, 3], &[4, 3]),
            (true, true) => (&[3, 2], &[4, 3]),
        };
        GradCheck::new("dot")
            .attr("transpose_a", ta)
            .attr("transpose_b", tb)
            .shapes(&[a, b])
            .dtypes(&f64_only)
            .run_gradgrad()
            .unwrap();
    }
    GradCheck::new("dot")
        .shapes(&[&[2, 3, 2], &[2, 4]])
        .dtypes(&f64_only)
        .run_gradgrad()
        .unwrap();
    GradCheck::new("dot")
        .shapes(&[&[3], &[3]])
        .dtypes(&f64_only)
        .run_gradgrad()
        .unwrap();
    GradCheck::new("dot")
        .shapes(&[&[2, 3], &[3]])
        .dtypes(&f64_only)
        .run_gradgrad()
        .unwrap();
    for axis in ["None", "1", "(0, 2)", "-1"] {
        for op in ["sum", "mean"] {
            for keepdims in [false, true] {
                GradCheck::new(op)
                    .attr("axis", axis)
                    .attr("keepdims", keepdims)
                    .shapes(&[&[2, 3, 2]])
                    .dtypes(&f64_only)
                    .run_gradgrad()
                    .unwrap();
            }
        }
    }
    for op in ["softmax", "log_softmax"] {
        GradCheck::new(op)
            .shapes(&[&[2, 4]])
            .dtypes(&f64_only)
            .run_gradgrad()
            .unwrap();
        GradCheck::new(op)
            .attr("axis", 0)
            .attr("temperature", 2.0)
            .shapes(&[&[3, 2]])
            .dtypes(&f64_only)
            .run_gradgrad()
            .unwrap();
    }
}

#[test]
fn gradgradcheck_runs_in_half_types_too() {
    simpleop_ops::link();
    for op in ["tanh", "dot"] {
        let shapes: &[&[usize]] = if op == "dot" {
            &[&[2, 3], &[3, 2]]
        } else {
            &[&[2, 3]]
        };
        GradCheck::new(op)
            .shapes(shapes)
            .range(-1.0, 1.0)
            .dtypes(&[DType::F16, DType::BF16])
            .run_gradgrad()
            .unwrap();
    }
}

/// A two-layer perceptron's loss `Σ (tanh(x·w1)·w2 − t)²` on a batch.
fn mlp_loss() -> Symbol {
    let (x, w1, w2, t) = (var("x"), var("w1"), var("w2"), var("t"));
    let h = call("tanh", &[&call("dot", &[&x, &w1], &[])], &[]);
    let out = call("dot", &[&h, &w2], &[]);
    let err = call("elemwise_sub", &[&out, &t], &[]);
    call("sum", &[&call("square", &[&err], &[])], &[])
}

fn uniform(shape: &[usize], seed: u64) -> NDArray {
    NDArray::random_uniform(shape.to_vec(), -1.0, 1.0, DType::F64, seed).unwrap()
}

/// `a + eps·v`, in `a`'s shape (`v` read flat).
fn shifted(a: &NDArray, v: &NDArray, eps: f64) -> NDArray {
    let s: Vec<f64> = a
        .to_f64_vec()
        .iter()
        .zip(v.to_f64_vec())
        .map(|(a, v)| a + eps * v)
        .collect();
    NDArray::from_f64(&s, a.shape().clone(), DType::F64).unwrap()
}

#[test]
fn hessian_vector_product_of_an_mlp_matches_differences_of_gradients() {
    simpleop_ops::link();
    let loss = mlp_loss();
    let grads = loss.gradient(&["w1", "w2"]).unwrap();
    // H·v = ∇_w (∇_w loss · v).
    let (v1, v2) = (var("v1"), var("v2"));
    let dot_v = |g: Symbol, v: &Symbol| call("sum", &[&call("elemwise_mul", &[&g, v], &[])], &[]);
    let gv = call(
        "elemwise_add",
        &[
            &dot_v(grads.output(0).unwrap(), &v1),
            &dot_v(grads.output(1).unwrap(), &v2),
        ],
        &[],
    );
    let hv = gv.gradient(&["w1", "w2"]).unwrap();
    let (x, t) = (uniform(&[5, 3], 1), uniform(&[5, 2], 2));
    let (w1, w2) = (uniform(&[3, 4], 3), uniform(&[4, 2], 4));
    let (dv1, dv2) = (uniform(&[3, 4], 5), uniform(&[4, 2], 6));
    let got = eval(
        &hv,
        &[
            ("x", &x),
            ("t", &t),
            ("w1", &w1),
            ("w2", &w2),
            ("v1", &dv1),
            ("v2", &dv2),
        ],
    );
    let eps = 1e-5;
    let at = |s: f64| {
        let w1s = shifted(&w1, &dv1, s);
        let w2s = shifted(&w2, &dv2, s);
        eval(&grads, &[("x", &x), ("t", &t), ("w1", &w1s), ("w2", &w2s)])
    };
    let (plus, minus) = (at(eps), at(-eps));
    for k in 0..2 {
        let want: Vec<f64> = plus[k]
            .iter()
            .zip(&minus[k])
            .map(|(p, m)| (p - m) / (2.0 * eps))
            .collect();
        assert_close(&got[k], &want, 1e-6, &format!("H·v for w{}", k + 1));
    }
}

/// A critic `D(x) = Σ tanh(x·w1)·w2` and the gradient penalty
/// `mean((‖∇ₓD‖ − 1)²)` over the batch rows, as WGAN-GP trains it.
fn gradient_penalty() -> Symbol {
    let (x, w1, w2) = (var("x"), var("w1"), var("w2"));
    let h = call("tanh", &[&call("dot", &[&x, &w1], &[])], &[]);
    let critic = call("sum", &[&call("dot", &[&h, &w2], &[])], &[]);
    let gx = critic.gradient(&["x"]).unwrap();
    let norms = call(
        "sqrt",
        &[&call(
            "sum",
            &[&call("square", &[&gx], &[])],
            &[("axis", "1")],
        )],
        &[],
    );
    let off = call("_minus_scalar", &[&norms], &[("scalar", "1")]);
    call("mean", &[&call("square", &[&off], &[])], &[])
}

#[test]
fn a_gradient_penalty_trains_and_its_gradient_matches_differences() {
    simpleop_ops::link();
    let gp = gradient_penalty();
    let x = uniform(&[6, 3], 11);
    let (mut w1, mut w2) = (uniform(&[3, 5], 12), uniform(&[5, 1], 13));
    let step = |w1: &NDArray, w2: &NDArray| -> (f64, NDArray, NDArray) {
        let args = HashMap::from([
            ("x".to_string(), x.clone()),
            ("w1".to_string(), w1.clone()),
            ("w2".to_string(), w2.clone()),
        ]);
        let grads = HashMap::from([
            ("w1".to_string(), NDArray::zeros([3, 5], DType::F64)),
            ("w2".to_string(), NDArray::zeros([5, 1], DType::F64)),
        ]);
        let req = HashMap::from([
            ("w1".to_string(), GradReq::Write),
            ("w2".to_string(), GradReq::Write),
        ]);
        let mut exe = gp.bind(args, grads, req).unwrap();
        exe.forward(true).unwrap();
        exe.backward(&[]).unwrap();
        let loss = exe.outputs()[0].to_f64_vec()[0];
        (
            loss,
            exe.grad("w1").unwrap().clone(),
            exe.grad("w2").unwrap().clone(),
        )
    };
    // The executor's gradient of the penalty against central differences.
    let (_, g1, _) = step(&w1, &w2);
    let eps = 1e-6;
    let mut numeric = Vec::new();
    for i in 0..15 {
        let mut bump = vec![0.0; 15];
        bump[i] = 1.0;
        let v = NDArray::from_f64(&bump, [15], DType::F64).unwrap();
        let plus = shifted(&w1, &v, eps);
        let minus = shifted(&w1, &v, -eps);
        numeric.push((step(&plus, &w2).0 - step(&minus, &w2).0) / (2.0 * eps));
    }
    assert_close(&g1.to_f64_vec(), &numeric, 1e-6, "∂ penalty / ∂ w1");
    // A few steps of gradient descent lower the penalty.
    let first = step(&w1, &w2).0;
    for _ in 0..30 {
        let (_, g1, g2) = step(&w1, &w2);
        let lr = 0.05;
        w1 = shifted(&w1, &g1, -lr);
        w2 = shifted(&w2, &g2, -lr);
    }
    let last = step(&w1, &w2).0;
    assert!(last < 0.5 * first, "penalty {first} → {last}");
}

#[test]
fn gradient_graphs_equal_the_executors_backward_bit_for_bit() {
    simpleop_ops::link();
    let (x, w, b) = (var("x"), var("w"), var("b"));
    let h = call("tanh", &[&call("dot", &[&x, &w], &[])], &[]);
    let z = call("broadcast_add", &[&h, &b], &[]);
    let p = call("softmax", &[&z], &[]);
    let used_twice = call("elemwise_mul", &[&p, &h], &[]);
    let loss = call("sum", &[&used_twice], &[]);
    let grads = loss.gradient(&["x", "w", "b"]).unwrap();
    let (x0, w0) = (
        uniform(&[4, 3], 21).astype(DType::F32),
        uniform(&[3, 5], 22).astype(DType::F32),
    );
    let b0 = uniform(&[1, 5], 23).astype(DType::F32);
    let got = eval(&grads, &[("x", &x0), ("w", &w0), ("b", &b0)]);
    let names = ["x", "w", "b"];
    let args: HashMap<String, NDArray> = names
        .iter()
        .zip([&x0, &w0, &b0])
        .map(|(n, a)| (n.to_string(), a.clone()))
        .collect();
    let bufs: HashMap<String, NDArray> = args
        .iter()
        .map(|(n, a)| (n.clone(), NDArray::zeros(a.shape().clone(), DType::F32)))
        .collect();
    let req: HashMap<String, GradReq> = names
        .iter()
        .map(|n| (n.to_string(), GradReq::Write))
        .collect();
    let mut exe = loss.bind(args, bufs, req).unwrap();
    exe.forward(true).unwrap();
    exe.backward(&[]).unwrap();
    for (k, n) in names.iter().enumerate() {
        assert_eq!(got[k], exe.grad(n).unwrap().to_f64_vec(), "gradient of {n}");
    }
}

#[test]
fn gradient_graphs_round_trip_through_json() {
    simpleop_ops::link();
    let x = var("x");
    let g = call("softmax", &[&call("tanh", &[&x], &[])], &[("axis", "0")])
        .gradient(&["x"])
        .unwrap();
    let back = Symbol::from_json(&g.to_json()).unwrap();
    let x0 = uniform(&[3, 2], 31);
    assert_eq!(eval(&g, &[("x", &x0)]), eval(&back, &[("x", &x0)]));
    // A second-order graph names `_backward/_backward/…` paths.
    let g2 = g.gradient(&["x"]).unwrap();
    let json = g2.to_json();
    assert!(json.contains("_backward/softmax"), "{json}");
    let back = Symbol::from_json(&json).unwrap();
    assert_eq!(eval(&g2, &[("x", &x0)]), eval(&back, &[("x", &x0)]));
    // Hostile paths are errors, not deep recursion.
    let deep = format!("{}tanh", "_backward/".repeat(10_000));
    let attrs = Attrs::from([("forward_op", deep.as_str())]);
    assert!(Symbol::invoke("_backward", &[&var("a")], &attrs).is_err());
}

#[test]
fn ops_without_a_second_derivative_are_refused_by_name() {
    simpleop_ops::link();
    let x = var("x");
    let g = call("prod", &[&x], &[]).gradient(&["x"]).unwrap();
    let err = g
        .gradient(&["x"])
        .expect_err("prod's gradient has no gradient");
    assert!(matches!(&err, Error::Graph { .. }), "{err}");
    assert!(err.to_string().contains("`prod`"), "{err}");
    // Third order of tanh: `_backward`'s gradient is not differentiable.
    let t = call("tanh", &[&x], &[]);
    let d2 = t.gradient(&["x"]).unwrap().gradient(&["x"]).unwrap();
    assert!(d2.gradient(&["x"]).is_err());
    // An unknown variable, and an op without a gradient.
    assert!(
        t.gradient(&["nope"])
            .unwrap_err()
            .to_string()
            .contains("nope")
    );
    let a = call("gamma", &[&x], &[]);
    let err = call("elemwise_add", &[&a, &a], &[])
        .gradient(&["x"])
        .unwrap_err();
    assert!(err.to_string().contains("gamma"), "{err}");
}

#[test]
fn an_unread_output_gets_a_zero_gradient_and_head_gradients_scale() {
    simpleop_ops::link();
    let (x, y) = (var("x"), var("y"));
    let both = Symbol::group(&[call("tanh", &[&x], &[]), call("exp", &[&y], &[])]);
    let heads = [var("hx"), var("hy")];
    let g = both
        .gradient_with(&["x", "y"], &[&heads[0], &heads[1]])
        .unwrap();
    let x0 = NDArray::from_f64(&[0.3, -0.2], [2], DType::F64).unwrap();
    let y0 = NDArray::from_f64(&[0.1, 0.5], [2], DType::F64).unwrap();
    let hx = NDArray::from_f64(&[2.0, 3.0], [2], DType::F64).unwrap();
    let hy = NDArray::from_f64(&[0.0, 1.0], [2], DType::F64).unwrap();
    let out = eval(&g, &[("x", &x0), ("y", &y0), ("hx", &hx), ("hy", &hy)]);
    let want_x: Vec<f64> = [0.3f64, -0.2]
        .iter()
        .zip([2.0, 3.0])
        .map(|(x, h)| h * (1.0 - x.tanh().powi(2)))
        .collect();
    assert_close(&out[0], &want_x, 1e-14, "x");
    assert_close(&out[1], &[0.0, 0.5f64.exp()], 1e-14, "y");
    // `y` not reached: zeros.
    let only_x = call("tanh", &[&x], &[]);
    let g = Symbol::group(&[only_x.clone(), y.clone()])
        .gradient(&["x"])
        .unwrap();
    assert_eq!(g.num_outputs(), 1);
}

#[test]
fn the_backward_op_is_called_by_name_like_any_op() {
    simpleop_ops::link();
    // `_backward` of `tanh` (its gradient reads the output): inputs
    // `output_grad`, `output`, `data`.
    GradCheck::new("_backward")
        .attr("forward_op", "tanh")
        .shapes(&[&[2, 3], &[2, 3], &[2, 3]])
        .dtypes(&[DType::F64])
        .run()
        .unwrap();
    let x = NDArray::from_f64(&[0.5], [1], DType::F64).unwrap();
    let dy = NDArray::from_f64(&[2.0], [1], DType::F64).unwrap();
    let attrs = Attrs::from([("forward_op", "tanh")]);
    let y = NDArray::from_f64(&[0.5f64.tanh()], [1], DType::F64).unwrap();
    let dx = simpleop::eager::invoke("_backward", &[&dy, &y, &x], &attrs).unwrap();
    assert_close(
        &dx.to_f64_vec(),
        &[2.0 * (1.0 - 0.5f64.tanh().powi(2))],
        1e-15,
        "dx",
    );
    let missing = simpleop::eager::invoke("_backward", &[&dy, &y, &x], &Attrs::new());
    assert!(missing.unwrap_err().to_string().contains("forward_op"));
    let unknown = Attrs::from([("forward_op", "no_such_op")]);
    assert!(simpleop::eager::invoke("_backward", &[&dy, &y, &x], &unknown).is_err());
    let wrong = simpleop::eager::invoke("_backward", &[&dy, &x], &attrs);
    assert!(wrong.is_err());
}

/// Eager second derivative of `op` through `grad_with(create_graph)` and
/// `grad`, at the points of [`points`].
fn eager_second(op: &str, attrs: &[(&str, &str)], dtype: DType) -> Vec<f64> {
    use simpleop::autograd::{self, GradOptions};
    let attrs: Attrs = attrs.iter().map(|(k, v)| (*k, *v)).collect();
    let mut x = points(dtype);
    x.attach_grad().unwrap();
    let y = autograd::record(|| simpleop::eager::invoke(op, &[&x], &attrs)).unwrap();
    let options = GradOptions {
        create_graph: true,
        ..Default::default()
    };
    let dy = autograd::grad_with(&[&y], &[&x], &[], options).unwrap();
    autograd::grad(&[&dy[0]], &[&x], &[], false).unwrap()[0].to_f64_vec()
}

#[test]
fn the_eager_tape_gives_the_graphs_second_derivatives() {
    simpleop_ops::link();
    let cases: [(&str, &[(&str, &str)]); 4] = [
        ("tanh", &[]),
        ("sigmoid", &[]),
        ("Activation", &[("act_type", "softrelu")]),
        ("_so_smooth_l1", &[("scalar", "1.5")]),
    ];
    for (op, attrs) in cases {
        let x = var("x");
        let d2 = call(op, &[&x], attrs)
            .gradient(&["x"])
            .unwrap()
            .gradient(&["x"])
            .unwrap();
        for dtype in DType::FLOATS {
            let symbolic = &eval(&d2, &[("x", &points(dtype))])[0];
            assert_eq!(&eager_second(op, attrs, dtype), symbolic, "{op} in {dtype}");
        }
    }
}

#[test]
fn an_eager_hessian_vector_product_equals_the_graphs() {
    use simpleop::autograd::{self, GradOptions};
    simpleop_ops::link();
    let (x, t) = (uniform(&[5, 3], 1), uniform(&[5, 2], 2));
    let (mut w1, mut w2) = (uniform(&[3, 4], 3), uniform(&[4, 2], 4));
    let (v1, v2) = (uniform(&[3, 4], 5), uniform(&[4, 2], 6));
    w1.attach_grad().unwrap();
    w2.attach_grad().unwrap();
    let none = Attrs::new();
    let inv = |op: &str, ins: &[&NDArray]| simpleop::eager::invoke(op, ins, &none).unwrap();
    let loss = autograd::record(|| {
        let h = inv("tanh", &[&inv("dot", &[&x, &w1])]);
        let err = inv("elemwise_sub", &[&inv("dot", &[&h, &w2]), &t]);
        inv("sum", &[&inv("square", &[&err])])
    });
    let options = GradOptions {
        create_graph: true,
        ..Default::default()
    };
    let g = autograd::grad_with(&[&loss], &[&w1, &w2], &[], options).unwrap();
    let gv = autograd::record(|| {
        let a = inv("sum", &[&inv("elemwise_mul", &[&g[0], &v1])]);
        let b = inv("sum", &[&inv("elemwise_mul", &[&g[1], &v2])]);
        inv("elemwise_add", &[&a, &b])
    });
    let hv = autograd::grad(&[&gv], &[&w1, &w2], &[], false).unwrap();
    // The same product from the graph.
    let loss_sym = mlp_loss();
    let grads = loss_sym.gradient(&["w1", "w2"]).unwrap();
    let (sv1, sv2) = (var("v1"), var("v2"));
    let dot_v = |g: Symbol, v: &Symbol| call("sum", &[&call("elemwise_mul", &[&g, v], &[])], &[]);
    let sgv = call(
        "elemwise_add",
        &[
            &dot_v(grads.output(0).unwrap(), &sv1),
            &dot_v(grads.output(1).unwrap(), &sv2),
        ],
        &[],
    );
    let want = eval(
        &sgv.gradient(&["w1", "w2"]).unwrap(),
        &[
            ("x", &x),
            ("t", &t),
            ("w1", &w1),
            ("w2", &w2),
            ("v1", &v1),
            ("v2", &v2),
        ],
    );
    assert_close(&hv[0].to_f64_vec(), &want[0], 1e-12, "H·v, w1");
    assert_close(&hv[1].to_f64_vec(), &want[1], 1e-12, "H·v, w2");
}

#[test]
fn create_graph_sums_a_value_used_twice_and_keeps_the_graph() {
    use simpleop::autograd::{self, GradOptions};
    simpleop_ops::link();
    // y = x·x·x through a product used twice: dy = 3x², d²y = 6x.
    let mut x = NDArray::from_f64(&[0.5, -1.5, 2.0], [3], DType::F64).unwrap();
    x.attach_grad().unwrap();
    let none = Attrs::new();
    let y = autograd::record(|| {
        let sq = simpleop::eager::invoke("elemwise_mul", &[&x, &x], &none)?;
        simpleop::eager::invoke("elemwise_mul", &[&sq, &x], &none)
    })
    .unwrap();
    let options = GradOptions {
        create_graph: true,
        ..Default::default()
    };
    let dy = autograd::grad_with(&[&y], &[&x], &[], options).unwrap();
    assert_close(&dy[0].to_f64_vec(), &[0.75, 6.75, 12.0], 1e-15, "3x²");
    // The first graph is kept: a plain backward through it still runs.
    let again = autograd::grad(&[&y], &[&x], &[], true).unwrap();
    assert_eq!(again[0].to_f64_vec(), dy[0].to_f64_vec());
    let d2 = autograd::grad(&[&dy[0]], &[&x], &[], false).unwrap();
    assert_close(&d2[0].to_f64_vec(), &[3.0, -9.0, 12.0], 1e-15, "6x");
}

/// Every elementwise op whose gradient runs on dual numbers passes
/// `run_gradgrad` in f64, at inputs in `[0.55, 0.95)`: inside every
/// domain (log, sqrt, arcsin) and away from every kink and jump (0, ±1,
/// integers, halves, the scalar 1.5 and its `1/σ²`).
#[test]
fn every_twice_differentiable_elementwise_op_passes_gradgradcheck() {
    use simpleop::{Device, ParamKind, Registry};
    simpleop_ops::link();
    let mut checked = Vec::new();
    for entry in Registry::global().unwrap().iter() {
        let op = entry.def;
        let Ok(kernels) = entry.kernels(Device::Cpu) else {
            continue;
        };
        if kernels.grad_derivative.is_none() || op.name.starts_with("_bench") {
            continue;
        }
        let mut g = GradCheck::new(op.name)
            .range(0.55, 0.95)
            .dtypes(&[DType::F64]);
        match op.params {
            ParamKind::Scalar => g = g.attr("scalar", 1.5),
            ParamKind::Kwargs { .. } => continue, // each has its own attributes
            ParamKind::None => {}
        }
        let shapes: Vec<&[usize]> = vec![&[2, 3]; op.num_inputs()];
        g.shapes(&shapes)
            .run_gradgrad()
            .unwrap_or_else(|e| panic!("{}: {e}", op.name));
        checked.push(op.name);
    }
    assert!(
        checked.len() > 60,
        "only {} ops: {checked:?}",
        checked.len()
    );
}
