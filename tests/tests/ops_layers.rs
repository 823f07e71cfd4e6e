//! The issue-34 layer ops: every differentiable one through the gradient
//! checker (every float dtype, every request type it allows, in place where
//! declared); the loss heads, whose gradient is by design not the
//! derivative, against their formulas for every dtype and request type;
//! the source ops' request handling; integer outputs; and errors that name
//! op, argument and expectation.

use simpleop::gradcheck::GradCheck;
use simpleop::{Attrs, DType, NDArray, OpReqType, eager};
use simpleop_tests::check_gradients;

fn check(g: GradCheck) {
    check_gradients(g, true)
}

/// Values away from the kinks at 0.
fn kink_free() -> Vec<f64> {
    vec![-2.5, -1.5, -0.7, -0.3, 0.2, 0.6, 1.3, 2.7]
}

#[test]
fn activation_gradients() {
    simpleop_ops::link();
    for act in ["relu", "sigmoid", "tanh", "softrelu", "softsign"] {
        check(
            GradCheck::new("Activation")
                .attr("act_type", act)
                .shapes(&[&[2, 4]])
                .inputs(vec![kink_free()]),
        );
    }
}

#[test]
fn leaky_relu_gradients() {
    simpleop_ops::link();
    for (act, slope) in [
        ("leaky", 0.1),
        ("leaky", -0.3),
        ("elu", 0.5),
        ("elu", -0.5),
        ("selu", 0.25),
        ("gelu", 0.25),
        ("rrelu", 0.25),
    ] {
        check(
            GradCheck::new("LeakyReLU")
                .attr("act_type", act)
                .attr("slope", slope)
                .shapes(&[&[2, 4]])
                .inputs(vec![kink_free()]),
        );
    }
}

#[test]
fn normalisation_gradients() {
    simpleop_ops::link();
    check(GradCheck::new("InstanceNorm").shapes(&[&[2, 3, 4], &[3], &[3]]));
    check(
        GradCheck::new("InstanceNorm")
            .attr("eps", 0.1)
            .shapes(&[&[2, 2, 2, 3], &[2], &[2]]),
    );
    // Head gradients on the output only: MXNet ignores those on the
    // mean and std outputs.
    check(
        GradCheck::new("LayerNorm")
            .shapes(&[&[3, 5], &[5], &[5]])
            .heads(&[0]),
    );
    check(
        GradCheck::new("LayerNorm")
            .attr("axis", 0)
            .attr("eps", 1e-3)
            .shapes(&[&[4, 3], &[4], &[4]])
            .heads(&[0]),
    );
    check(
        GradCheck::new("LayerNorm")
            .attr("axis", 1)
            .attr("output_mean_var", "True")
            .shapes(&[&[2, 3, 2], &[3], &[3]])
            .heads(&[0]),
    );
}

/// Indices halfway between integers: the checker's probes do not move
/// them across a truncation, so their numeric gradient is the zero the
/// ops register.
#[test]
fn indexing_gradients() {
    simpleop_ops::link();
    let weight: Vec<f64> = (0..20).map(|i| (i as f64 * 0.37).sin()).collect();
    check_gradients(
        GradCheck::new("Embedding")
            .attr("input_dim", 5)
            .attr("output_dim", 4)
            .shapes(&[&[2, 3], &[5, 4]])
            .inputs(vec![vec![0.5, 2.5, 4.5, 2.5, 1.5, 7.5], weight.clone()]),
        false,
    );
    check_gradients(
        GradCheck::new("take")
            .shapes(&[&[4, 3], &[5]])
            .inputs(vec![weight[..12].to_vec(), vec![0.5, 3.5, 1.5, 1.5, 9.5]]),
        false,
    );
    check_gradients(
        GradCheck::new("take")
            .attr("axis", 1)
            .attr("mode", "wrap")
            .shapes(&[&[4, 3], &[2, 2]])
            .inputs(vec![weight[..12].to_vec(), vec![-1.5, 2.5, 1.5, 4.5]]),
        false,
    );
    check_gradients(
        GradCheck::new("pick")
            .shapes(&[&[3, 4], &[3]])
            .inputs(vec![weight[..12].to_vec(), vec![0.5, 3.5, 2.5]]),
        false,
    );
    check_gradients(
        GradCheck::new("pick")
            .attr("axis", 0)
            .attr("keepdims", true)
            .attr("mode", "wrap")
            .shapes(&[&[3, 4], &[1, 4]])
            .inputs(vec![weight[..12].to_vec(), vec![0.5, -1.5, 2.5, 4.5]]),
        false,
    );
    check_per_dtype(|d| {
        GradCheck::new("one_hot")
            .attr("depth", 4)
            .attr("dtype", d.name())
            .shapes(&[&[2, 3]])
            .inputs(vec![vec![0.5, 3.5, 5.5, -1.5, 1.5, 2.5]])
    });
}

/// For ops whose output dtype is an argument (`one_hot`, `argsort`): the
/// checker draws head gradients in the dtype it tries, so each dtype is
/// checked with the output dtype set to it.
fn check_per_dtype(make: impl Fn(DType) -> GradCheck) {
    for dtype in DType::FLOATS {
        let report = make(dtype)
            .dtypes(&[dtype])
            .run()
            .unwrap_or_else(|e| panic!("{e}"));
        for req in [OpReqType::Null, OpReqType::WriteTo, OpReqType::AddTo] {
            assert_eq!(
                report
                    .rows
                    .iter()
                    .filter(|(d, r, _)| *d == dtype && *r == req)
                    .count(),
                2,
                "{}: forward and backward rows for {dtype} {req:?}",
                report.op
            );
        }
    }
}

#[test]
fn shape_and_ordering_gradients() {
    simpleop_ops::link();
    check_gradients(
        GradCheck::new("SwapAxis")
            .attr("dim1", 0)
            .attr("dim2", 2)
            .shapes(&[&[2, 3, 4]]),
        false,
    );
    check(
        GradCheck::new("swapaxes")
            .attr("dim1", 1)
            .attr("dim2", 1)
            .shapes(&[&[2, 3]]),
    );
    // distinct values, well apart, so no probe reorders them
    let distinct = vec![
        0.3, -1.2, 1.9, -0.4, 1.1, -1.9, 0.7, -0.9, 1.5, 0.0, -1.6, 0.5,
    ];
    for (axis, asc) in [("-1", "True"), ("0", "False"), ("None", "True")] {
        check_gradients(
            GradCheck::new("sort")
                .attr("axis", axis)
                .attr("is_ascend", asc)
                .shapes(&[&[3, 4]])
                .inputs(vec![distinct.clone()]),
            axis != "None",
        );
        check_per_dtype(|d| {
            GradCheck::new("argsort")
                .attr("axis", axis)
                .attr("is_ascend", asc)
                .attr("dtype", d.name())
                .shapes(&[&[3, 4]])
                .inputs(vec![distinct.clone()])
        });
    }
}

#[test]
fn fill_ops_honour_forward_requests() {
    simpleop_ops::link();
    for (op, value) in [("_zeros", None), ("_ones", None), ("_full", Some(2.5))] {
        for dtype in ["float32", "float64", "float16", "bfloat16"] {
            let mut g = GradCheck::new(op)
                .attr("shape", "(3, 4)")
                .attr("dtype", dtype);
            if let Some(v) = value {
                g = g.attr("value", v);
            }
            // one row per (checked dtype, request): the output's dtype is
            // the argument's, whatever dtype the checker tries
            assert_eq!(g.run().unwrap().rows.len(), 3 * 4, "{op} {dtype}");
        }
    }
    let y = eager::invoke(
        "_full",
        &[],
        &Attrs::from([("shape", "(2, 3)"), ("value", "-1.5")]),
    )
    .unwrap();
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(y.to_f64_vec(), vec![-1.5; 6]);
}

#[test]
fn integer_outputs() {
    simpleop_ops::link();
    let ones = eager::invoke(
        "_ones",
        &[],
        &Attrs::from([("shape", "(2, 2)"), ("dtype", "int32")]),
    )
    .unwrap();
    assert_eq!(
        (ones.dtype(), ones.to_f64_vec()),
        (DType::I32, vec![1.0; 4])
    );
    let idx = NDArray::from_f64(&[0.0, 2.9, -1.0, 7.0], [4], DType::F32).unwrap();
    let oh = eager::invoke(
        "one_hot",
        &[&idx],
        &Attrs::from([("depth", "3"), ("dtype", "int64"), ("on_value", "5")]),
    )
    .unwrap();
    assert_eq!(oh.dtype(), DType::I64);
    assert_eq!(
        oh.to_f64_vec(),
        [5., 0., 0., 0., 0., 5., 0., 0., 0., 0., 0., 0.]
    );
    let x = NDArray::from_f64(&[3.0, 1.0, 2.0, 1.0], [4], DType::F32).unwrap();
    let a = eager::invoke("argsort", &[&x], &Attrs::from([("dtype", "int32")])).unwrap();
    assert_eq!(
        (a.dtype(), a.to_f64_vec()),
        (DType::I32, vec![1.0, 3.0, 2.0, 0.0])
    );
    let d = eager::invoke("argsort", &[&x], &Attrs::from([("is_ascend", "False")])).unwrap();
    assert_eq!(
        d.to_f64_vec(),
        vec![0.0, 2.0, 1.0, 3.0],
        "ties keep their order"
    );
}

// ------------------------------------------------------------ loss heads

/// Runs `op`'s forward and backward eagerly for every float dtype and
/// request type and compares with `want_out` and `want_grad` (computed
/// here in f64 from the formula), with the dtype's tolerance. `label_grad`
/// must be zero. The head gradient is random: the loss heads ignore it.
fn check_loss_head(
    op: &str,
    attrs: &Attrs,
    data: (&[usize], &[f64]),
    label: (&[usize], &[f64]),
    want_out: &[f64],
    want_grad: &[f64],
) {
    let entry = eager::lookup(op).unwrap();
    let def = entry.def;
    let env = (def.parse)(def, attrs).unwrap();
    for dtype in DType::FLOATS {
        let tol = match dtype {
            DType::F64 => 1e-12,
            DType::F32 => 1e-6,
            DType::F16 => 4e-3,
            _ => 3e-2,
        };
        let close = |got: &[f64], want: &[f64], what: &str| {
            assert_eq!(got.len(), want.len(), "{op} {dtype} {what}");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "{op} {dtype} {what}[{i}]: {g} vs {w}"
                );
            }
        };
        let x = NDArray::from_f64(data.1, data.0.to_vec(), dtype).unwrap();
        let l = NDArray::from_f64(label.1, label.0.to_vec(), dtype).unwrap();
        let y = eager::invoke_with(def, &[&x, &l], &env).unwrap();
        close(&y.to_f64_vec(), want_out, "output");
        // forward requests
        let mut o = NDArray::full(y.shape().clone(), 7.0, dtype);
        eager::invoke_into(def, &[&x, &l], &env, &mut o, OpReqType::Null).unwrap();
        assert!(
            o.to_f64_vec().iter().all(|&v| v == 7.0),
            "{op} {dtype} Null"
        );
        eager::invoke_into(def, &[&x, &l], &env, &mut o, OpReqType::AddTo).unwrap();
        let plus: Vec<f64> = want_out.iter().map(|v| v + 7.0).collect();
        close(&o.to_f64_vec(), &plus, "output AddTo");
        let dy = NDArray::random_uniform(y.shape().clone(), -1.0, 1.0, dtype, 5).unwrap();
        for req in [OpReqType::WriteTo, OpReqType::AddTo, OpReqType::Null] {
            let start = if req == OpReqType::WriteTo {
                f64::NAN
            } else {
                0.5
            };
            let mut grads = vec![
                NDArray::full(x.shape().clone(), start, dtype),
                NDArray::full(l.shape().clone(), start, dtype),
            ];
            eager::invoke_backward(def, &env, &dy, Some(&y), &[&x, &l], &mut grads, &[req, req])
                .unwrap();
            let (want, want_label): (Vec<f64>, f64) = match req {
                OpReqType::WriteTo => (want_grad.to_vec(), 0.0),
                OpReqType::AddTo => (want_grad.iter().map(|v| v + 0.5).collect(), 0.5),
                _ => (vec![0.5; want_grad.len()], 0.5),
            };
            close(&grads[0].to_f64_vec(), &want, &format!("data_grad {req:?}"));
            let lg = grads[1].to_f64_vec();
            assert!(
                lg.iter().all(|&v| v == want_label),
                "{op} {dtype} label_grad {req:?}: {lg:?}"
            );
        }
    }
}

fn softmax_rows(x: &[f64], cols: usize) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| (v - m).exp() / s).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn softmax_output_gradients_for_every_dtype_and_request() {
    simpleop_ops::link();
    let x = [
        0.5, -1.0, 2.0, 0.25, 1.5, 0.0, -0.5, 1.0, 0.75, -2.0, 0.5, 1.25,
    ];
    let sm = softmax_rows(&x, 4);
    let labels = [2.0, -1.0, 0.0];
    // plain: softmax − one_hot; the -1 label matches no class
    let mut g = sm.clone();
    g[2] -= 1.0;
    g[8] -= 1.0;
    for name in ["SoftmaxOutput", "Softmax"] {
        check_loss_head(name, &Attrs::new(), (&[3, 4], &x), (&[3], &labels), &sm, &g);
    }
    // ignore + valid + grad_scale: the ignored row is 0, the rest / 2 · 3
    let mut g2: Vec<f64> = g.iter().map(|v| v * 1.5).collect();
    g2[4..8].fill(0.0);
    let attrs = Attrs::from([
        ("use_ignore", "True"),
        ("normalization", "valid"),
        ("grad_scale", "3"),
    ]);
    check_loss_head(
        "SoftmaxOutput",
        &attrs,
        (&[3, 4], &x),
        (&[3], &labels),
        &sm,
        &g2,
    );
    // smoothing: target 1 − α at the label, α/(C−1) elsewhere
    let alpha = 0.3f32 as f64;
    let smooth = (0.3f32 / 3.0) as f64;
    let mut g3: Vec<f64> = sm.iter().map(|v| v - smooth).collect();
    g3[2] = sm[2] - (1.0 - alpha);
    g3[8] = sm[8] - (1.0 - alpha);
    let attrs = Attrs::from([("smooth_alpha", "0.3")]);
    check_loss_head(
        "SoftmaxOutput",
        &attrs,
        (&[3, 4], &x),
        (&[3], &labels),
        &sm,
        &g3,
    );
    // out_grad multiplies by the head gradient: checked apart (random dy)
}

#[test]
fn softmax_output_out_grad_multiplies_the_head_gradient() {
    simpleop_ops::link();
    let x = NDArray::from_f64(&[0.5, -1.0, 2.0, 0.25], [2, 2], DType::F64).unwrap();
    let l = NDArray::from_f64(&[1.0, 0.0], [2], DType::F64).unwrap();
    let attrs = Attrs::from([("out_grad", "True")]);
    let def = eager::lookup("SoftmaxOutput").unwrap().def;
    let env = (def.parse)(def, &attrs).unwrap();
    let y = eager::invoke_with(def, &[&x, &l], &env).unwrap();
    let dy = NDArray::from_f64(&[2.0, 3.0, -1.0, 0.5], [2, 2], DType::F64).unwrap();
    let mut grads = vec![
        NDArray::zeros([2, 2], DType::F64),
        NDArray::zeros([0], DType::F64),
    ];
    eager::invoke_backward(
        def,
        &env,
        &dy,
        Some(&y),
        &[&x, &l],
        &mut grads,
        &[OpReqType::WriteTo, OpReqType::Null],
    )
    .unwrap();
    let s = y.to_f64_vec();
    let want = [s[0] * 2.0, (s[1] - 1.0) * 3.0, -(s[2] - 1.0), s[3] * 0.5];
    for (g, w) in grads[0].to_f64_vec().iter().zip(want) {
        assert!((g - w).abs() < 1e-12, "{g} vs {w}");
    }
}

#[test]
fn regression_output_gradients_for_every_dtype_and_request() {
    simpleop_ops::link();
    let x = [0.5, -1.0, 2.0, 0.25, 1.5, 0.0];
    let label = [1.0, -1.0, 0.5, 0.75, 1.5, -0.5];
    // m = 3 outputs per sample, grad_scale 2
    let attrs = Attrs::from([("grad_scale", "2")]);
    // MXNet's factor grad_scale / m, in f32
    let k = f64::from(2.0f32 / 3.0);
    let lin: Vec<f64> = x.iter().zip(&label).map(|(o, l)| (o - l) * k).collect();
    check_loss_head(
        "LinearRegressionOutput",
        &attrs,
        (&[2, 3], &x),
        (&[2, 3], &label),
        &x,
        &lin,
    );
    // MAE: +k above the label, −k at or below (the ties at 1 and 4)
    let mae: Vec<f64> = x
        .iter()
        .zip(&label)
        .map(|(o, l)| if o - l > 0.0 { k } else { -k })
        .collect();
    check_loss_head(
        "MAERegressionOutput",
        &attrs,
        (&[2, 3], &x),
        (&[2, 3], &label),
        &x,
        &mae,
    );
    let sig: Vec<f64> = x.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
    let lab01: Vec<f64> = label.iter().map(|l| l.abs() / 2.0).collect();
    let logi: Vec<f64> = sig.iter().zip(&lab01).map(|(o, l)| (o - l) * k).collect();
    check_loss_head(
        "LogisticRegressionOutput",
        &attrs,
        (&[2, 3], &x),
        (&[2, 3], &lab01),
        &sig,
        &logi,
    );
    // (N, 1) data with (N,) labels: m = 1
    let lin1: Vec<f64> = x.iter().zip(&label).map(|(o, l)| o - l).collect();
    check_loss_head(
        "LinearRegressionOutput",
        &Attrs::new(),
        (&[6, 1], &x),
        (&[6], &label),
        &x,
        &lin1,
    );
}

// ---------------------------------------------------------------- errors

fn err(op: &str, inputs: &[&NDArray], attrs: &[(&str, &str)]) -> String {
    let attrs: Attrs = attrs.iter().copied().collect();
    match eager::invoke(op, inputs, &attrs) {
        Ok(y) => panic!("{op} {attrs:?}: expected an error, got {y:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn errors_name_op_argument_and_expectation() {
    simpleop_ops::link();
    let x = NDArray::zeros([2, 3], DType::F32);
    // prelu's slopes are a second argument, which the call lacks.
    let e = err("LeakyReLU", &[&x], &[("act_type", "prelu")]);
    assert!(e.contains("LeakyReLU") && e.contains("gamma"), "{e}");
    let e = err("Activation", &[&x], &[("act_type", "swish")]);
    assert!(e.contains("Activation") && e.contains("act_type"), "{e}");
    let e = err("Activation", &[&x], &[]);
    assert!(e.contains("act_type"), "{e}");
    let (g, b) = (
        NDArray::zeros([3], DType::F32),
        NDArray::zeros([3], DType::F32),
    );
    // output_mean_var shows three outputs: the one-output call refuses it.
    let e = err("LayerNorm", &[&x, &g, &b], &[("output_mean_var", "True")]);
    assert!(e.contains("invoke_outputs"), "{e}");
    let e = err("LayerNorm", &[&x, &g, &b], &[("axis", "0")]);
    assert!(e.contains("gamma") && e.contains("(2,)"), "{e}");
    let e = err("InstanceNorm", &[&x, &g, &b], &[]);
    assert!(
        e.contains("InstanceNorm") && e.contains("data") && e.contains("3 dimensions"),
        "{e}"
    );
    let idx = NDArray::from_f64(&[0.0, 3.0], [2], DType::F32).unwrap();
    let e = err("take", &[&x, &idx], &[("mode", "raise")]);
    assert!(
        e.contains("take") && e.contains("indices") && e.contains("raise"),
        "{e}"
    );
    let e = err("take", &[&x, &idx], &[("axis", "2")]);
    assert!(e.contains("axis"), "{e}");
    let e = err("pick", &[&x, &idx], &[("axis", "None")]);
    assert!(e.contains("pick") && e.contains("axis"), "{e}");
    let idx3 = NDArray::zeros([3], DType::F32);
    let e = err("pick", &[&x, &idx3], &[]);
    assert!(e.contains("pick") && e.contains("index"), "{e}");
    let w = NDArray::zeros([4, 2], DType::F32);
    let e = err(
        "Embedding",
        &[&idx, &w],
        &[("input_dim", "5"), ("output_dim", "2")],
    );
    assert!(
        e.contains("Embedding") && e.contains("weight") && e.contains("(5, 2)"),
        "{e}"
    );
    let e = err(
        "Embedding",
        &[&idx, &w],
        &[
            ("input_dim", "4"),
            ("output_dim", "2"),
            ("sparse_grad", "True"),
        ],
    );
    assert!(e.contains("sparse_grad"), "{e}");
    let d3 = NDArray::zeros([2, 3, 4], DType::F32);
    let l3 = NDArray::zeros([2, 3], DType::F32);
    let e = err("SoftmaxOutput", &[&d3, &l3], &[]);
    assert!(
        e.contains("SoftmaxOutput") && e.contains("multi_output"),
        "{e}"
    );
    let e = err("SoftmaxOutput", &[&x, &idx3], &[]);
    assert!(e.contains("label") && e.contains("(2,)"), "{e}");
    let e = err(
        "SoftmaxOutput",
        &[&d3, &idx],
        &[("multi_output", "True"), ("smooth_alpha", "0.1")],
    );
    assert!(e.contains("smooth_alpha"), "{e}");
    let e = err("LinearRegressionOutput", &[&x, &idx], &[]);
    assert!(
        e.contains("LinearRegressionOutput") && e.contains("label"),
        "{e}"
    );
    let e = err("one_hot", &[&idx], &[("depth", "-1")]);
    assert!(e.contains("one_hot") && e.contains("depth"), "{e}");
    let e = err("_zeros", &[], &[("shape", "(2,)"), ("dtype", "int8")]);
    assert!(
        e.contains("_zeros") && e.contains("dtype") && e.contains("int8"),
        "{e}"
    );
    let long = NDArray::zeros([3000], DType::F32);
    let e = err("argsort", &[&long], &[("dtype", "float16")]);
    assert!(e.contains("argsort") && e.contains("float16"), "{e}");
    let e = err("SwapAxis", &[&x], &[("dim1", "0"), ("dim2", "5")]);
    assert!(e.contains("SwapAxis") && e.contains("dim2"), "{e}");
}

/// MXNet's attribute strings round-trip through a graph file.
#[test]
fn attributes_round_trip_through_json() {
    use simpleop::symbol::Symbol;
    simpleop_ops::link();
    let x = Symbol::var("x");
    for (op, attrs) in [
        ("Activation", Attrs::from([("act_type", "softrelu")])),
        (
            "LeakyReLU",
            Attrs::from([("act_type", "gelu"), ("slope", "0.1")]),
        ),
        ("SwapAxis", Attrs::from([("dim1", "0"), ("dim2", "1")])),
        (
            "sort",
            Attrs::from([("axis", "None"), ("is_ascend", "False")]),
        ),
    ] {
        let s = Symbol::invoke(op, &[&x], &attrs).unwrap();
        let back = Symbol::from_json(&s.to_json()).unwrap();
        assert_eq!(back.to_json(), s.to_json(), "{op}");
    }
}
