//! Names and arguments MXNet graphs carry: the legacy op names MXNet 1.9.1
//! still loads, and MXNet attribute fields that simpleop accepts at the
//! values whose meaning it implements (and refuses, by name, otherwise).

use simpleop::{Attrs, DType, Error, NDArray, eager};

fn arr(v: &[f64], shape: &[usize]) -> NDArray {
    NDArray::from_f64(v, shape, DType::F32).unwrap()
}

#[test]
fn legacy_names_run_the_ops_they_name() {
    simpleop_ops::link();
    let x = arr(&[-1.5, 0.0, 2.0, 3.5], &[2, 2]);
    let y = arr(&[0.5, 1.0, -2.0, 4.0], &[2, 2]);
    let s = Attrs::from([("scalar", "2")]);
    let none = Attrs::new();
    let unary = [
        ("_PlusScalar", "_plus_scalar"),
        ("_MinusScalar", "_minus_scalar"),
        ("_RMinusScalar", "_rminus_scalar"),
        ("_MulScalar", "_mul_scalar"),
        ("_DivScalar", "_div_scalar"),
        ("_RDivScalar", "_rdiv_scalar"),
        ("_PowerScalar", "_power_scalar"),
        ("_RPowerScalar", "_rpower_scalar"),
        ("_MaximumScalar", "_maximum_scalar"),
        ("_MinimumScalar", "_minimum_scalar"),
        ("_EqualScalar", "_equal_scalar"),
        ("_GreaterScalar", "_greater_scalar"),
        ("_LesserScalar", "_lesser_scalar"),
    ];
    for (old, new) in unary {
        let a = eager::invoke(old, &[&x], &s).unwrap();
        let b = eager::invoke(new, &[&x], &s).unwrap();
        assert_eq!(a, b, "{old}");
    }
    assert_eq!(eager::invoke("identity", &[&x], &none).unwrap(), x);
    let binary = [
        ("_Plus", "elemwise_add"),
        ("_plus", "elemwise_add"),
        ("_add", "elemwise_add"),
        ("_Minus", "elemwise_sub"),
        ("_minus", "elemwise_sub"),
        ("_sub", "elemwise_sub"),
        ("_Mul", "elemwise_mul"),
        ("_mul", "elemwise_mul"),
        ("_Div", "elemwise_div"),
        ("_div", "elemwise_div"),
        ("_Power", "_power"),
        ("_Maximum", "_maximum"),
        ("_Minimum", "_minimum"),
        ("_Hypot", "_hypot"),
        ("_Equal", "broadcast_equal"),
        ("broadcast_plus", "broadcast_add"),
        ("broadcast_minus", "broadcast_sub"),
    ];
    let ypos = arr(&[0.5, 1.0, 2.0, 4.0], &[2, 2]);
    for (old, new) in binary {
        let rhs = if old == "_Power" { &ypos } else { &y };
        let lhs = if old == "_Power" { &ypos } else { &x };
        let a = eager::invoke(old, &[lhs, rhs], &none).unwrap();
        let b = eager::invoke(new, &[lhs, rhs], &none).unwrap();
        assert_eq!(a, b, "{old}");
    }
}

#[test]
fn comparisons_cover_every_relation_against_scalars_and_arrays() {
    simpleop_ops::link();
    let x = arr(&[-1.0, 0.5, 0.5, 2.0], &[4]);
    let y = arr(&[-1.0, 1.0, 0.0, 2.0], &[4]);
    let s = Attrs::from([("scalar", "0.5")]);
    let cases: [(&str, &str, [f64; 4], [f64; 4]); 6] = [
        ("equal", "==", [0., 1., 1., 0.], [1., 0., 0., 1.]),
        ("not_equal", "!=", [1., 0., 0., 1.], [0., 1., 1., 0.]),
        ("greater", ">", [0., 0., 0., 1.], [0., 0., 1., 0.]),
        ("greater_equal", ">=", [0., 1., 1., 1.], [1., 0., 1., 1.]),
        ("lesser", "<", [1., 0., 0., 0.], [0., 1., 0., 0.]),
        ("lesser_equal", "<=", [1., 1., 1., 0.], [1., 1., 0., 1.]),
    ];
    for (name, rel, vs_scalar, vs_y) in cases {
        let a = eager::invoke(&format!("_{name}_scalar"), &[&x], &s).unwrap();
        assert_eq!(a.to_f64_vec(), vs_scalar, "x {rel} 0.5");
        for op in [format!("_{name}"), format!("broadcast_{name}")] {
            let b = eager::invoke(&op, &[&x, &y], &Attrs::new()).unwrap();
            assert_eq!(b.to_f64_vec(), vs_y, "{op}: x {rel} y");
        }
    }
}

#[test]
fn mxnet_attribute_fields_are_accepted_at_the_values_simpleop_implements() {
    simpleop_ops::link();
    let x = arr(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let ok = |op: &str, attrs: &[(&str, &str)], ins: &[&NDArray]| {
        eager::invoke(op, ins, &Attrs::from_iter(attrs.iter().copied()))
            .unwrap_or_else(|e| panic!("{op} {attrs:?}: {e}"))
    };
    let refused =
        |op: &str, attrs: &[(&str, &str)], ins: &[&NDArray], arg: &str| match eager::invoke(
            op,
            ins,
            &Attrs::from_iter(attrs.iter().copied()),
        )
        .unwrap_err()
        {
            Error::BadKwarg { op: o, arg: a, .. } => {
                assert_eq!((o.as_str(), a.as_str()), (op, arg))
            }
            e => panic!("{op} {attrs:?}: {e:?}"),
        };
    let plain = ok("softmax", &[], &[&x]);
    assert_eq!(
        ok(
            "softmax",
            &[("dtype", "None"), ("use_length", "False")],
            &[&x]
        ),
        plain
    );
    let log = ok("log_softmax", &[], &[&x]);
    assert_eq!(ok("log_softmax", &[("dtype", "None")], &[&x]), log);
    refused("softmax", &[("dtype", "float64")], &[&x], "dtype");
    refused(
        "log_softmax",
        &[("use_length", "True")],
        &[&x],
        "use_length",
    );
    let n = ok("norm", &[], &[&x]);
    assert_eq!(ok("norm", &[("out_dtype", "None")], &[&x]), n);
    refused("norm", &[("out_dtype", "float64")], &[&x], "out_dtype");
    let d = ok("dot", &[], &[&x, &x]);
    assert_eq!(ok("dot", &[("forward_stype", "None")], &[&x, &x]), d);
    assert_eq!(ok("dot", &[("forward_stype", "default")], &[&x, &x]), d);
    refused(
        "dot",
        &[("forward_stype", "csr")],
        &[&x, &x],
        "forward_stype",
    );
    let b = x.reshape([1, 2, 2]).unwrap();
    ok("batch_dot", &[("forward_stype", "None")], &[&b, &b]);
    refused(
        "batch_dot",
        &[("forward_stype", "row_sparse")],
        &[&b, &b],
        "forward_stype",
    );
}
