//! Reductions (`sum`, `mean`, `max`, `min`, `prod`, `norm`, `argmax`,
//! `argmin`), broadcasting (`broadcast_to`, `broadcast_axis`) and shape ops
//! (`Reshape`, `Flatten`, `expand_dims`, `transpose`, `slice_axis`,
//! `reverse`): gradient checks on every float dtype and request type, values
//! against hand-computed results, MXNet attribute strings, errors, and the
//! MXNet conformance cases of these ops.

use simpleop::gradcheck::GradCheck;
use std::collections::HashMap;

use simpleop::symbol::Symbol;
use simpleop::{Attrs, DType, Error, NDArray, OpReqType, Pattern, Registry, Shape, eager};
use simpleop_ops as ops;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// `0, 1, ..., n-1` in `shape`, float32.
fn iota(shape: &[usize]) -> NDArray {
    let n: usize = shape.iter().product();
    NDArray::arange(0.0, n as f64, 1.0, DType::F32)
        .unwrap()
        .reshape(shape)
        .unwrap()
}

fn arr(v: &[f64], shape: &[usize]) -> NDArray {
    NDArray::from_f64(v, shape, DType::F32).unwrap()
}

fn call(op: &str, x: &NDArray, attrs: &[(&str, &str)]) -> NDArray {
    let attrs: Attrs = attrs.iter().copied().collect();
    eager::invoke(op, &[x], &attrs).unwrap_or_else(|e| panic!("{op} {attrs:?}: {e}"))
}

fn call_err(op: &str, x: &NDArray, attrs: &[(&str, &str)]) -> Error {
    let attrs: Attrs = attrs.iter().copied().collect();
    match eager::invoke(op, &[x], &attrs) {
        Ok(y) => panic!("{op} {attrs:?} succeeded with shape {}", y.shape()),
        Err(e) => e,
    }
}

/// Asserts `y` has shape `shape` and values `want`.
fn assert_array(y: &NDArray, shape: &[usize], want: &[f64]) {
    assert_eq!(y.shape().dims(), shape, "shape");
    let got = y.to_f64_vec();
    assert_eq!(got.len(), want.len(), "length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "element {i}: got {a}, want {b} (all: {got:?})"
        );
    }
}

/// The input gradients of `op` for `dy`.
fn grads(op: &str, attrs: &[(&str, &str)], x: &NDArray, dy: &NDArray) -> NDArray {
    let def = eager::lookup(op).unwrap().def;
    let attrs: Attrs = attrs.iter().copied().collect();
    let env = (def.parse)(def, &attrs).unwrap();
    eager::gradient(def, &env, &[x], dy).unwrap().remove(0)
}

/// Runs the check and asserts a row for every float dtype and request.
fn check(g: GradCheck) {
    let report = g.run().unwrap_or_else(|e| panic!("{e}"));
    for dtype in DType::FLOATS {
        for req in [OpReqType::Null, OpReqType::WriteTo, OpReqType::AddTo] {
            let rows = report
                .rows
                .iter()
                .filter(|(d, r, _)| *d == dtype && *r == req)
                .count();
            // One forward and one backward row each.
            assert_eq!(rows, 2, "{}: rows for {dtype} {req:?}", report.op);
        }
    }
}

/// `n` distinct values, multiples of 1/8 in [-1.5, 1.5), exact in every
/// float dtype, in a scrambled order (no ties for max/min/argmax).
fn distinct(n: usize) -> Vec<f64> {
    assert!(n <= 24);
    // 7 is coprime with 24, so `7 k mod 24` never repeats.
    (0..n)
        .map(|k| ((k * 7) % 24) as f64 * 0.125 - 1.5)
        .collect()
}

// ---------------------------------------------------------------------------
// Gradient checks: every op, every float dtype, every request
// ---------------------------------------------------------------------------

/// String attributes of one call.
type AttrList<'a> = &'a [(&'a str, &'a str)];

const AXES_CASES: [AttrList<'static>; 6] = [
    &[],
    &[("axis", "1")],
    &[("axis", "(0, 2)"), ("keepdims", "True")],
    &[("axis", "-1")],
    &[("axis", "1"), ("exclude", "True")],
    &[("axis", "None"), ("keepdims", "True")],
];

fn with_attrs(mut g: GradCheck, attrs: &[(&str, &str)]) -> GradCheck {
    for (k, v) in attrs {
        g = g.attr(k, v);
    }
    g
}

#[test]
fn gradcheck_sum_mean_prod() {
    simpleop_ops::link();
    for attrs in AXES_CASES {
        for op in ["sum", "mean", "prod"] {
            check(with_attrs(GradCheck::new(op).shapes(&[&[2, 3, 4]]), attrs));
        }
    }
    // Zeros in the product: the gradient is the product of the others.
    check(
        GradCheck::new("prod")
            .attr("axis", 1)
            .shapes(&[&[2, 4]])
            .inputs(vec![vec![0.0, 1.5, -2.0, 0.5, 0.0, 0.0, 1.25, -0.75]]),
    );
}

#[test]
fn gradcheck_max_min_on_distinct_values() {
    simpleop_ops::link();
    for attrs in AXES_CASES {
        for op in ["max", "min"] {
            check(with_attrs(
                GradCheck::new(op)
                    .shapes(&[&[2, 3, 4]])
                    .inputs(vec![distinct(24)]),
                attrs,
            ));
        }
    }
}

#[test]
fn gradcheck_norm() {
    simpleop_ops::link();
    for attrs in AXES_CASES {
        check(with_attrs(
            GradCheck::new("norm").shapes(&[&[2, 3, 4]]),
            attrs,
        ));
    }
    // L1 away from the kink at 0.
    check(
        GradCheck::new("norm")
            .attr("ord", 1)
            .attr("axis", "(1,)")
            .shapes(&[&[2, 3, 4]])
            .inputs(vec![distinct(24).iter().map(|v| v + 0.0625).collect()]),
    );
}

#[test]
fn gradcheck_argmax_argmin_zero_gradient() {
    simpleop_ops::link();
    for op in ["argmax", "argmin"] {
        for attrs in [
            &[][..],
            &[("axis", "1")],
            &[("axis", "-1"), ("keepdims", "True")],
        ] {
            check(with_attrs(
                GradCheck::new(op)
                    .shapes(&[&[2, 3, 4]])
                    .inputs(vec![distinct(24)]),
                attrs,
            ));
        }
    }
}

#[test]
fn gradcheck_broadcast_ops() {
    simpleop_ops::link();
    check(
        GradCheck::new("broadcast_to")
            .attr("shape", "(2, 3, 0)")
            .shapes(&[&[2, 1, 4]]),
    );
    check(
        GradCheck::new("broadcast_to")
            .attr("shape", "(3, 2, 4)")
            .shapes(&[&[1, 1, 4]]),
    );
    check(
        GradCheck::new("broadcast_axis")
            .attr("axis", "(1, -1)")
            .attr("size", "(3, 4)")
            .shapes(&[&[2, 1, 1]]),
    );
    check(
        GradCheck::new("broadcast_axis")
            .attr("axis", 0)
            .attr("size", 3)
            .shapes(&[&[1, 4]]),
    );
}

#[test]
fn gradcheck_shape_ops() {
    simpleop_ops::link();
    let cases: [(&str, AttrList<'_>, &[usize]); 14] = [
        ("Reshape", &[("shape", "(4, -1)")], &[2, 3, 4]),
        ("reshape", &[("shape", "(0, -3)")], &[2, 3, 4]),
        ("Flatten", &[], &[2, 3, 4]),
        ("flatten", &[], &[5]),
        ("expand_dims", &[("axis", "-1")], &[2, 3]),
        ("expand_dims", &[("axis", "0")], &[2, 3]),
        ("transpose", &[], &[2, 3, 4]),
        ("transpose", &[("axes", "(1, 0, 2)")], &[2, 3, 4]),
        ("transpose", &[("axes", "(-1, 0, 1)")], &[2, 3, 4]),
        (
            "slice_axis",
            &[("axis", "1"), ("begin", "1"), ("end", "None")],
            &[2, 3, 4],
        ),
        (
            "slice_axis",
            &[("axis", "-1"), ("begin", "-3"), ("end", "-1")],
            &[2, 3, 4],
        ),
        ("reverse", &[("axis", "(0, 2)")], &[2, 3, 4]),
        ("flip", &[("axis", "1")], &[2, 3, 4]),
        ("reverse", &[("axis", "-1")], &[4]),
    ];
    for (op, attrs, shape) in cases {
        check(with_attrs(GradCheck::new(op).shapes(&[shape]), attrs));
    }
}

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

#[test]
fn reductions_over_an_empty_axis_give_their_identity() {
    simpleop_ops::link();
    let x = NDArray::zeros([2, 0, 3], DType::F32);
    for (op, want) in [("sum", 0.0), ("norm", 0.0)] {
        assert_array(&call(op, &x, &[("axis", "1")]), &[2, 3], &[want; 6]);
    }
    let nan = call("mean", &x, &[("axis", "1")]);
    assert!(
        nan.to_f64_vec().iter().all(|v| v.is_nan()),
        "mean of nothing"
    );
}

#[test]
fn sum_over_axes_matches_hand_computed_values() {
    simpleop_ops::link();
    let x = iota(&[2, 3, 4]); // x[i, j, k] = 12 i + 4 j + k
    assert_array(&call("sum", &x, &[]), &[1], &[276.0]);
    assert_array(&call("sum", &x, &[("axis", "None")]), &[1], &[276.0]);
    assert_array(&call("sum", &x, &[("axis", "()")]), &[1], &[276.0]);
    assert_array(
        &call("sum", &x, &[("keepdims", "True")]),
        &[1, 1, 1],
        &[276.0],
    );
    assert_array(
        &call("sum", &x, &[("axis", "1")]),
        &[2, 4],
        &[12.0, 15.0, 18.0, 21.0, 48.0, 51.0, 54.0, 57.0],
    );
    assert_array(
        &call("sum", &x, &[("axis", "(0, 2)")]),
        &[3],
        &[60.0, 92.0, 124.0],
    );
    assert_array(
        &call("sum", &x, &[("axis", "[0, 2]"), ("keepdims", "True")]),
        &[1, 3, 1],
        &[60.0, 92.0, 124.0],
    );
    assert_array(
        &call("sum", &x, &[("axis", "-1")]),
        &[2, 3],
        &[6.0, 22.0, 38.0, 54.0, 70.0, 86.0],
    );
    // exclude: reduce over every axis but 1.
    assert_array(
        &call("sum", &x, &[("axis", "1"), ("exclude", "True")]),
        &[3],
        &[60.0, 92.0, 124.0],
    );
    assert_array(
        &call(
            "sum",
            &x,
            &[("axis", "(1,)"), ("exclude", "True"), ("keepdims", "True")],
        ),
        &[1, 3, 1],
        &[60.0, 92.0, 124.0],
    );
    // exclude with negative axes: keep 0 and 2, reduce 1.
    assert_array(
        &call("sum", &x, &[("axis", "(0, -1)"), ("exclude", "True")]),
        &[2, 4],
        &[12.0, 15.0, 18.0, 21.0, 48.0, 51.0, 54.0, 57.0],
    );
    // Reducing every axis explicitly gives (1,), as MXNet 1.x.
    assert_array(&call("sum", &x, &[("axis", "(0, 1, 2)")]), &[1], &[276.0]);
}

#[test]
fn mean_max_min_prod_norm_values() {
    simpleop_ops::link();
    let x = iota(&[2, 3, 4]);
    assert_array(
        &call("mean", &x, &[("axis", "1")]),
        &[2, 4],
        &[4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0],
    );
    assert_array(&call("mean", &x, &[]), &[1], &[11.5]);
    assert_array(
        &call("max", &x, &[("axis", "(0, 2)")]),
        &[3],
        &[15.0, 19.0, 23.0],
    );
    assert_array(
        &call("min", &x, &[("axis", "-1"), ("keepdims", "True")]),
        &[2, 3, 1],
        &[0.0, 4.0, 8.0, 12.0, 16.0, 20.0],
    );
    let y = arr(&[-3.0, 1.0, 2.0, 0.5, -1.0, 4.0], &[2, 3]);
    assert_array(&call("max", &y, &[]), &[1], &[4.0]);
    assert_array(&call("min", &y, &[("axis", "0")]), &[3], &[-3.0, -1.0, 2.0]);
    assert_array(&call("prod", &y, &[("axis", "1")]), &[2], &[-6.0, -2.0]);
    assert_array(&call("prod", &y, &[]), &[1], &[12.0]);
    let z = arr(&[3.0, 4.0, 0.0, -6.0, 8.0, 0.0], &[2, 3]);
    assert_array(&call("norm", &z, &[("axis", "1")]), &[2], &[5.0, 10.0]);
    assert_array(&call("norm", &z, &[]), &[1], &[125f64.sqrt()]);
    assert_array(
        &call(
            "norm",
            &z,
            &[("axis", "-1"), ("ord", "1"), ("keepdims", "True")],
        ),
        &[2, 1],
        &[7.0, 14.0],
    );
    // NaN propagates through max.
    let n = arr(&[1.0, f64::NAN, 3.0], &[3]);
    assert!(call("max", &n, &[]).to_f64_vec()[0].is_nan());
}

#[test]
fn reductions_keep_the_dtype_and_compute_halves_accurately() {
    simpleop_ops::link();
    // 4096 ones: an f16 running sum would stall at 2048.
    for dtype in [DType::F16, DType::BF16] {
        let x = NDArray::ones([4096], dtype);
        let s = call("sum", &x, &[]);
        assert_eq!(s.dtype(), dtype);
        assert_eq!(s.to_f64_vec(), vec![4096.0]);
        let m = call("mean", &x, &[]);
        assert_eq!(m.to_f64_vec(), vec![1.0]);
    }
    let x = iota(&[2, 3]).astype(DType::F64);
    assert_eq!(call("argmax", &x, &[]).dtype(), DType::F64);
}

#[test]
fn long_contiguous_rows_reduce_like_an_f64_loop() {
    simpleop_ops::link();
    // Rows of 1,000 (31 blocks of the 32-lane loop and a remainder of 8)
    // and of 7 (remainder only), distinct values: every lane and the
    // remainder must count, once. 300 rows of 1,000 are enough work to
    // split the rows between threads, with the least grain.
    simpleop::Tuning::update(|t| t.parallel_work = 0).unwrap();
    for (rows, cols) in [(300usize, 1000usize), (3, 1000), (5, 7)] {
        let v: Vec<f64> = (0..rows * cols)
            .map(|i| ((i * 37) % 101) as f64 / 8.0 - 6.0)
            .collect();
        for dtype in [DType::F32, DType::F64] {
            let x = NDArray::from_f64(&v, [rows, cols], dtype).unwrap();
            for (op, f) in [
                (
                    "sum",
                    (|r: &[f64]| r.iter().sum::<f64>()) as fn(&[f64]) -> f64,
                ),
                ("mean", |r| r.iter().sum::<f64>() / r.len() as f64),
                ("norm", |r| r.iter().map(|v| v * v).sum::<f64>().sqrt()),
            ] {
                let want: Vec<f64> = v.chunks(cols).map(f).collect();
                let got = call(op, &x, &[("axis", "1")]).to_f64_vec();
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                        "{op} {dtype} cols {cols}: {g} vs {w}"
                    );
                }
            }
            // norm with ord 1 sums absolute values.
            let got = call("norm", &x, &[("axis", "1"), ("ord", "1")]).to_f64_vec();
            for (g, r) in got.iter().zip(v.chunks(cols)) {
                let w: f64 = r.iter().map(|v| v.abs()).sum();
                assert!((g - w).abs() <= 1e-6 * w, "norm ord 1: {g} vs {w}");
            }
        }
    }
}

#[test]
fn argmax_argmin_values() {
    simpleop_ops::link();
    let x = arr(&[1.0, 5.0, 5.0, -2.0, 0.0, 7.0, 3.0, -2.0], &[2, 4]);
    // Flattened (axis=None): index into the flat array, shape (1,).
    assert_array(&call("argmax", &x, &[]), &[1], &[5.0]);
    assert_array(&call("argmin", &x, &[("axis", "None")]), &[1], &[3.0]);
    assert_array(
        &call("argmax", &x, &[("axis", "None"), ("keepdims", "True")]),
        &[1, 1],
        &[5.0],
    );
    // Ties: the first wins.
    assert_array(&call("argmax", &x, &[("axis", "1")]), &[2], &[1.0, 1.0]);
    assert_array(&call("argmin", &x, &[("axis", "-1")]), &[2], &[3.0, 3.0]);
    assert_array(
        &call("argmax", &x, &[("axis", "0"), ("keepdims", "True")]),
        &[1, 4],
        &[0.0, 1.0, 0.0, 0.0],
    );
    assert_array(
        &call("argmin", &x, &[("axis", "0")]),
        &[4],
        &[1.0, 0.0, 1.0, 0.0],
    );
}

#[test]
fn reduction_gradients_match_mxnet_rules() {
    simpleop_ops::link();
    // max: every element equal to the maximum gets dy.
    let x = arr(&[1.0, 5.0, 5.0, -2.0, 0.0, 7.0], &[2, 3]);
    let dy = arr(&[2.0, 3.0], &[2]);
    assert_array(
        &grads("max", &[("axis", "1")], &x, &dy),
        &[2, 3],
        &[0.0, 2.0, 2.0, 0.0, 0.0, 3.0],
    );
    assert_array(
        &grads("min", &[("axis", "1")], &x, &dy),
        &[2, 3],
        &[2.0, 0.0, 0.0, 3.0, 0.0, 0.0],
    );
    // sum and mean broadcast dy back.
    assert_array(
        &grads("sum", &[("axis", "1")], &x, &dy),
        &[2, 3],
        &[2.0, 2.0, 2.0, 3.0, 3.0, 3.0],
    );
    assert_array(
        &grads("mean", &[("axis", "0"), ("exclude", "True")], &x, &dy),
        &[2, 3],
        &[2.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0, 1.0, 1.0, 1.0],
    );
    // prod with zeros: the product of the others, no NaN.
    let p = arr(&[0.0, 2.0, 3.0, 0.0, 0.0, 4.0], &[2, 3]);
    assert_array(
        &grads("prod", &[("axis", "1")], &p, &dy),
        &[2, 3],
        &[12.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    );
    // norm: dy · x / ‖x‖, 0 for a zero norm.
    let z = arr(&[3.0, 4.0, 0.0, 0.0], &[2, 2]);
    assert_array(
        &grads("norm", &[("axis", "1")], &z, &dy),
        &[2, 2],
        &[1.2, 1.6, 0.0, 0.0],
    );
    // argmax: zero, as MXNet.
    assert_array(
        &grads("argmax", &[("axis", "1")], &x, &dy),
        &[2, 3],
        &[0.0; 6],
    );
}

#[test]
fn forward_and_backward_honour_every_request() {
    simpleop_ops::link();
    let x = iota(&[2, 3]);
    let p = ops::ReduceAxesParams {
        axis: Some(vec![1]),
        ..Default::default()
    };
    let mut out = arr(&[100.0, 200.0], &[2]);
    ops::sum_into(&x, p.clone(), &mut out, OpReqType::Null).unwrap();
    assert_eq!(out.to_f64_vec(), vec![100.0, 200.0]);
    ops::sum_into(&x, p.clone(), &mut out, OpReqType::AddTo).unwrap();
    assert_eq!(out.to_f64_vec(), vec![103.0, 212.0]);
    ops::sum_into(&x, p, &mut out, OpReqType::WriteTo).unwrap();
    assert_eq!(out.to_f64_vec(), vec![3.0, 12.0]);

    // slice_axis backward: AddTo leaves the outside alone, WriteTo zeroes it.
    let def = eager::lookup("slice_axis").unwrap().def;
    let attrs = Attrs::from([("axis", "1"), ("begin", "1"), ("end", "None")]);
    let env = (def.parse)(def, &attrs).unwrap();
    let y = eager::invoke_with(def, &[&x], &env).unwrap();
    assert_array(&y, &[2, 2], &[1.0, 2.0, 4.0, 5.0]);
    let dy = arr(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    for (req, want) in [
        (OpReqType::Null, [9.0; 6]),
        (OpReqType::AddTo, [9.0, 10.0, 11.0, 9.0, 12.0, 13.0]),
        (OpReqType::WriteTo, [0.0, 1.0, 2.0, 0.0, 3.0, 4.0]),
    ] {
        let mut g = vec![NDArray::full([2, 3], 9.0, DType::F32)];
        eager::invoke_backward(def, &env, &dy, Some(&y), &[&x], &mut g, &[req]).unwrap();
        assert_array(&g[0], &[2, 3], &want);
    }
}

#[test]
fn broadcast_values() {
    simpleop_ops::link();
    let x = arr(&[1.0, 2.0, 3.0], &[3, 1]);
    assert_array(
        &call("broadcast_to", &x, &[("shape", "(3, 2)")]),
        &[3, 2],
        &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0],
    );
    assert_array(
        &call("broadcast_to", &x, &[("shape", "(0, 2)")]),
        &[3, 2],
        &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0],
    );
    let r = arr(&[1.0, 2.0], &[1, 2]);
    assert_array(
        &call("broadcast_axis", &r, &[("axis", "0"), ("size", "3")]),
        &[3, 2],
        &[1.0, 2.0, 1.0, 2.0, 1.0, 2.0],
    );
    assert_array(
        &call("broadcast_axes", &r, &[("axis", "(-2,)"), ("size", "(2,)")]),
        &[2, 2],
        &[1.0, 2.0, 1.0, 2.0],
    );
    // The gradient sums back over the broadcast axes.
    let dy = iota(&[3, 2]);
    assert_array(
        &grads("broadcast_to", &[("shape", "(3, 2)")], &x, &dy),
        &[3, 1],
        &[1.0, 5.0, 9.0],
    );
    assert_array(
        &grads("broadcast_axis", &[("axis", "0"), ("size", "3")], &r, &dy),
        &[1, 2],
        &[6.0, 9.0],
    );
}

#[test]
fn reshape_codes() {
    simpleop_ops::link();
    let x = iota(&[2, 3, 4]);
    let shape_of = |attrs: &[(&str, &str)]| call("Reshape", &x, attrs).shape().dims().to_vec();
    assert_eq!(shape_of(&[("shape", "(4, -1)")]), [4, 6]);
    assert_eq!(shape_of(&[("shape", "(0, -1)")]), [2, 12]);
    assert_eq!(shape_of(&[("shape", "(-1,)")]), [24]);
    assert_eq!(shape_of(&[("shape", "(-2,)")]), [2, 3, 4]);
    assert_eq!(shape_of(&[("shape", "(0, -2)")]), [2, 3, 4]);
    assert_eq!(shape_of(&[("shape", "(-3, 4)")]), [6, 4]);
    assert_eq!(shape_of(&[("shape", "(0, -3)")]), [2, 12]);
    assert_eq!(shape_of(&[("shape", "(-4, 1, 2, -2)")]), [1, 2, 3, 4]);
    assert_eq!(shape_of(&[("shape", "(0, -4, -1, 1, 0)")]), [2, 3, 1, 4]);
    assert_eq!(shape_of(&[("shape", "(2, 1, 1, 12)")]), [2, 1, 1, 12]);
    // MXNet's documented `reverse` example: (10, 5, 4) with (-1, 0).
    let y = NDArray::zeros([10, 5, 4], DType::F32);
    assert_eq!(
        call("reshape", &y, &[("shape", "(-1, 0)")]).shape().dims(),
        [40, 5]
    );
    assert_eq!(
        call("reshape", &y, &[("shape", "(-1, 0)"), ("reverse", "True")])
            .shape()
            .dims(),
        [50, 4]
    );
    // The elements are unchanged, and so is the gradient.
    let r = call("reshape", &x, &[("shape", "(4, 6)")]);
    assert_eq!(r.to_f64_vec(), x.to_f64_vec());
    let g = grads("Reshape", &[("shape", "(4, 6)")], &x, &r);
    assert_eq!(g.shape().dims(), [2, 3, 4]);
    assert_eq!(g.to_f64_vec(), x.to_f64_vec());
}

#[test]
fn shape_op_values() {
    simpleop_ops::link();
    let x = iota(&[2, 3]);
    assert_array(
        &call("Flatten", &iota(&[2, 3, 2]), &[]),
        &[2, 6],
        &iota(&[12]).to_f64_vec(),
    );
    assert_array(
        &call("flatten", &iota(&[3]), &[]),
        &[3, 1],
        &[0.0, 1.0, 2.0],
    );
    assert_array(
        &call("expand_dims", &x, &[("axis", "1")]),
        &[2, 1, 3],
        &x.to_f64_vec(),
    );
    assert_array(
        &call("expand_dims", &x, &[("axis", "-1")]),
        &[2, 3, 1],
        &x.to_f64_vec(),
    );
    assert_array(
        &call("expand_dims", &x, &[("axis", "-3")]),
        &[1, 2, 3],
        &x.to_f64_vec(),
    );
    assert_array(
        &call("transpose", &x, &[]),
        &[3, 2],
        &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0],
    );
    let t = call("transpose", &iota(&[2, 3, 4]), &[("axes", "(1, 2, 0)")]);
    assert_eq!(t.shape().dims(), [3, 4, 2]);
    // t[j, k, i] = x[i, j, k] = 12 i + 4 j + k.
    assert_eq!(t.to_f64_vec()[..4], [0.0, 12.0, 1.0, 13.0]);
    assert_eq!(t.to_f64_vec()[8], 4.0);
    assert_array(
        &call(
            "slice_axis",
            &x,
            &[("axis", "1"), ("begin", "0"), ("end", "2")],
        ),
        &[2, 2],
        &[0.0, 1.0, 3.0, 4.0],
    );
    assert_array(
        &call(
            "slice_axis",
            &x,
            &[("axis", "-1"), ("begin", "-2"), ("end", "None")],
        ),
        &[2, 2],
        &[1.0, 2.0, 4.0, 5.0],
    );
    assert_array(
        &call(
            "slice_axis",
            &x,
            &[("axis", "0"), ("begin", "1"), ("end", "2")],
        ),
        &[1, 3],
        &[3.0, 4.0, 5.0],
    );
    assert_array(
        &call("reverse", &x, &[("axis", "1")]),
        &[2, 3],
        &[2.0, 1.0, 0.0, 5.0, 4.0, 3.0],
    );
    assert_array(
        &call("flip", &x, &[("axis", "(0, 1)")]),
        &[2, 3],
        &[5.0, 4.0, 3.0, 2.0, 1.0, 0.0],
    );
    assert_array(
        &call("flip", &x, &[("axis", "-2")]),
        &[2, 3],
        &[3.0, 4.0, 5.0, 0.0, 1.0, 2.0],
    );
    // Gradients: inverse permutation, reversal, and the slice scattered back.
    let dy = iota(&[3, 2]);
    assert_array(
        &grads("transpose", &[], &x, &dy),
        &[2, 3],
        &[0.0, 2.0, 4.0, 1.0, 3.0, 5.0],
    );
    assert_array(
        &grads("reverse", &[("axis", "1")], &x, &x),
        &[2, 3],
        &[2.0, 1.0, 0.0, 5.0, 4.0, 3.0],
    );
}

#[test]
fn typed_functions_and_aliases() {
    simpleop_ops::link();
    let x = iota(&[2, 3]);
    let s = ops::sum(
        &x,
        ops::ReduceAxesParams {
            axis: Some(vec![-1]),
            keepdims: true,
            exclude: false,
        },
    )
    .unwrap();
    assert_array(&s, &[2, 1], &[3.0, 12.0]);
    let r = ops::reshape(
        &x,
        ops::ReshapeParams {
            shape: vec![3, -1],
            reverse: false,
        },
    )
    .unwrap();
    assert_eq!(r.shape().dims(), [3, 2]);
    let n = ops::norm(&x, ops::NormParams::default()).unwrap();
    assert_array(&n, &[1], &[55f64.sqrt()]);
    let registry = Registry::global().unwrap();
    for (alias, name) in [
        ("reshape", "Reshape"),
        ("flatten", "Flatten"),
        ("flip", "reverse"),
        ("broadcast_axes", "broadcast_axis"),
        ("sum_axis", "sum"),
        ("max_axis", "max"),
        ("min_axis", "min"),
    ] {
        assert_eq!(registry.get(alias).unwrap().def.name, name);
    }
    for (op, pattern) in [
        ("sum", Pattern::Reduction),
        ("argmax", Pattern::Reduction),
        ("norm", Pattern::Reduction),
        ("transpose", Pattern::Injective),
        ("Reshape", Pattern::Injective),
        ("broadcast_to", Pattern::Broadcast),
    ] {
        assert_eq!(registry.get(op).unwrap().def.pattern, pattern, "{op}");
    }
    // Kwargs written back as MXNet strings parse to the same thing.
    let def = registry.get("sum").unwrap().def;
    let env = (def.parse)(
        def,
        &Attrs::from([("axis", "(0, 2)"), ("keepdims", "True")]),
    )
    .unwrap();
    let attrs = (def.to_attrs)(def, &env).unwrap();
    assert_eq!(attrs.get("axis"), Some("(0, 2)"));
    assert_eq!(attrs.get("keepdims"), Some("True"));
    assert_eq!(attrs.get("exclude"), Some("False"));
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Asserts `e` is a kwarg error of `op` naming `arg`.
fn assert_kwarg_error(e: &Error, op: &str, arg: &str) {
    match e {
        Error::BadKwarg { op: o, arg: a, .. } => {
            assert_eq!((o.as_str(), a.as_str()), (op, arg), "{e}");
        }
        other => panic!("expected a kwarg error of `{op}` naming `{arg}`, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains(&format!("op `{op}`")), "{msg}");
    assert!(msg.contains(&format!("`{arg}`")), "{msg}");
}

#[test]
fn bad_axes_are_errors_naming_op_and_argument() {
    simpleop_ops::link();
    let x = iota(&[2, 3, 4]);
    for op in ["sum", "mean", "max", "min", "prod", "norm"] {
        assert_kwarg_error(&call_err(op, &x, &[("axis", "3")]), op, "axis");
        assert_kwarg_error(&call_err(op, &x, &[("axis", "-4")]), op, "axis");
        assert_kwarg_error(&call_err(op, &x, &[("axis", "(0, -3)")]), op, "axis");
        assert_kwarg_error(&call_err(op, &x, &[("axis", "x")]), op, "axis");
    }
    for op in ["argmax", "argmin"] {
        assert_kwarg_error(&call_err(op, &x, &[("axis", "5")]), op, "axis");
        assert_kwarg_error(&call_err(op, &x, &[("axis", "(0, 1)")]), op, "axis");
    }
    let e = call_err("sum", &x, &[("axis", "3")]);
    assert!(e.to_string().contains("out of range"), "{e}");
    assert_kwarg_error(&call_err("norm", &x, &[("ord", "3")]), "norm", "ord");
    assert_kwarg_error(&call_err("sum", &x, &[("axes", "1")]), "sum", "axes");
    assert_kwarg_error(
        &call_err("sum", &x, &[("keepdims", "maybe")]),
        "sum",
        "keepdims",
    );
    assert_kwarg_error(
        &call_err("expand_dims", &x, &[("axis", "4")]),
        "expand_dims",
        "axis",
    );
    assert_kwarg_error(
        &call_err("expand_dims", &x, &[("axis", "-5")]),
        "expand_dims",
        "axis",
    );
    let missing = call_err("expand_dims", &x, &[]);
    assert_kwarg_error(&missing, "expand_dims", "axis");
    assert!(missing.to_string().contains("missing required argument"));
    assert_kwarg_error(&call_err("reverse", &x, &[]), "reverse", "axis");
    assert_kwarg_error(&call_err("flip", &x, &[("axis", "3")]), "reverse", "axis");
    assert_kwarg_error(
        &call_err("flip", &x, &[("axis", "(1, 1)")]),
        "reverse",
        "axis",
    );
    assert_kwarg_error(
        &call_err("transpose", &x, &[("axes", "(0, 1)")]),
        "transpose",
        "axes",
    );
    assert_kwarg_error(
        &call_err("transpose", &x, &[("axes", "(0, 1, 1)")]),
        "transpose",
        "axes",
    );
    assert_kwarg_error(
        &call_err(
            "slice_axis",
            &x,
            &[("axis", "3"), ("begin", "0"), ("end", "1")],
        ),
        "slice_axis",
        "axis",
    );
    assert_kwarg_error(
        &call_err(
            "slice_axis",
            &x,
            &[("axis", "1"), ("begin", "3"), ("end", "None")],
        ),
        "slice_axis",
        "begin",
    );
    assert_kwarg_error(
        &call_err(
            "slice_axis",
            &x,
            &[("axis", "1"), ("begin", "2"), ("end", "1")],
        ),
        "slice_axis",
        "end",
    );
    assert_kwarg_error(
        &call_err(
            "slice_axis",
            &x,
            &[("axis", "1"), ("begin", "0"), ("end", "4")],
        ),
        "slice_axis",
        "end",
    );
    assert_kwarg_error(
        &call_err("broadcast_axis", &x, &[("axis", "1"), ("size", "5")]),
        "broadcast_axis",
        "axis",
    );
    assert_kwarg_error(
        &call_err("broadcast_axis", &x, &[("axis", "7"), ("size", "5")]),
        "broadcast_axis",
        "axis",
    );
    assert_kwarg_error(
        &call_err("broadcast_axis", &x, &[("axis", "(0, 1)"), ("size", "5")]),
        "broadcast_axis",
        "size",
    );
}

#[test]
fn incompatible_shapes_are_errors() {
    simpleop_ops::link();
    let x = iota(&[3, 4]);
    for shape in [
        "(5, 5)",
        "(5, -1)",
        "(-1, -1)",
        "(0, 0, 0)",
        "(-4, 2, 2, 4)",
        "(7,)",
    ] {
        let e = call_err("Reshape", &x, &[("shape", shape)]);
        assert_kwarg_error(&e, "Reshape", "shape");
    }
    let e = call_err("reshape", &x, &[("shape", "(5, 5)")]);
    assert!(e.to_string().contains("12 elements"), "{e}");
    assert_kwarg_error(
        &call_err("broadcast_to", &x, &[("shape", "(3, 5)")]),
        "broadcast_to",
        "shape",
    );
    assert_kwarg_error(
        &call_err("broadcast_to", &x, &[("shape", "(2, 3, 4)")]),
        "broadcast_to",
        "shape",
    );
    let scalar = NDArray::zeros(simpleop::Shape::scalar(), DType::F32);
    let e = eager::invoke("Flatten", &[&scalar], &Attrs::new()).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { op, .. } if op == "Flatten"),
        "{e}"
    );
    // Integer inputs are rejected by dtype inference, not by a panic.
    let ints = NDArray::zeros([2, 2], DType::I32);
    let e = eager::invoke("sum", &[&ints], &Attrs::new()).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
}

// ---------------------------------------------------------------------------
// MXNet conformance cases of these ops
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Empty axes, and shapes whose products overflow
// ---------------------------------------------------------------------------

const BIG: usize = 1 << 40;

/// `op` on `x` with `attrs`, typed.
fn call_dtype(op: &str, x: &NDArray, attrs: &[(&str, &str)]) -> Vec<f64> {
    call(op, x, attrs).to_f64_vec()
}

#[test]
fn sums_and_norms_over_an_empty_axis_are_positive_zero() {
    simpleop_ops::link();
    for dtype in [DType::F32, DType::F64, DType::F16] {
        let x = NDArray::zeros([2, 0, 3], dtype);
        for (op, attrs) in [
            ("sum", &[("axis", "1")][..]),
            ("sum", &[("axis", "(0, 1)")][..]),
            ("norm", &[("axis", "1")][..]),
            ("norm", &[("axis", "1"), ("ord", "1")][..]),
        ] {
            let y = call(op, &x, attrs);
            assert_eq!(y.dtype(), dtype);
            let got = y.to_f64_vec();
            assert!(!got.is_empty());
            // +0.0 exactly, as NumPy (an f64 sum starting from -0.0 gave -0.0)
            for v in got {
                assert_eq!(v.to_bits(), 0, "{op} {attrs:?} {dtype}: {v:?}");
            }
        }
        // Every axis of an empty array: shape (1,), +0.0.
        let flat = call_dtype("sum", &NDArray::zeros([0], dtype), &[]);
        assert_eq!(flat.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), [0]);
        // Typed element bits too (not just after widening to f64).
        if dtype == DType::F32 {
            let y = call("sum", &x, &[("axis", "1")]);
            assert!(y.to_vec::<f32>().unwrap().iter().all(|v| v.to_bits() == 0));
        }
        // MXNet's mean of nothing is 0/0 = NaN (NumPy agrees, with a warning);
        // prod of nothing is 1.
        assert!(
            call_dtype("mean", &x, &[("axis", "1")])
                .iter()
                .all(|v| v.is_nan())
        );
        assert_eq!(call_dtype("prod", &x, &[("axis", "1")]), [1.0; 6]);
    }
}

#[test]
fn argmax_argmin_over_an_empty_axis_are_errors() {
    simpleop_ops::link();
    let x = NDArray::zeros([2, 0, 3], DType::F32);
    for op in ["argmax", "argmin"] {
        for attrs in [&[("axis", "1")][..], &[("axis", "-2")][..], &[][..]] {
            let e = call_err(op, &x, attrs);
            assert!(
                matches!(&e, Error::InvalidArgument { op: o, arg, .. } if o == op && arg == "axis"),
                "{op} {attrs:?}: {e:?}"
            );
            assert!(e.to_string().contains("is empty"), "{e}");
        }
        // A non-empty axis of an empty array: an empty result, as NumPy.
        let y = call(op, &x, &[("axis", "2")]);
        assert_eq!(y.shape().dims(), [2, 0]);
        let y = call(op, &NDArray::zeros([0, 3], DType::F64), &[("axis", "1")]);
        assert_eq!(y.shape().dims(), [0]);
        // Symbolic inference refuses it too.
        let s = Symbol::invoke(
            op,
            &[&Symbol::var("x")],
            &[("axis", "0")].into_iter().collect(),
        );
        let known = HashMap::from([("x".to_string(), Shape::new([0, 4]))]);
        assert!(s.unwrap().infer_shape(&known).is_err());
    }
}

#[test]
fn shape_rules_with_overflowing_products_are_errors_not_wraps() {
    simpleop_ops::link();
    // Zero-element arrays may have dimensions whose product overflows.
    let x = NDArray::zeros([BIG, BIG, 0], DType::F32);
    // -3 merges 2^40 × 2^40.
    let e = call_err("Reshape", &x, &[("shape", "(-3, 0)")]);
    assert_kwarg_error(&e, "Reshape", "shape");
    assert!(e.to_string().contains("usize::MAX"), "{e}");
    // -4 splits into 2^62 × 2^62 (overflows i64).
    let y = NDArray::zeros([BIG, 0], DType::F32);
    let e = call_err(
        "Reshape",
        &y,
        &[("shape", "(-4, 4611686018427387904, 4611686018427387904, 0)")],
    );
    assert_kwarg_error(&e, "Reshape", "shape");
    // -4 that fits still works: 2^40 = 2^20 × 2^20.
    let z = call("Reshape", &y, &[("shape", "(-4, 1048576, -1, 0)")]);
    assert_eq!(z.shape().dims(), [1 << 20, 1 << 20, 0]);
    // Flatten's trailing product.
    let w = NDArray::zeros([0, BIG, BIG], DType::F32);
    let e = eager::invoke("Flatten", &[&w], &Attrs::new()).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { op, .. } if op == "Flatten"),
        "{e}"
    );
    // Strides of [0, 2^40, 2^40, 2^40] overflow: transposes, slices and
    // reversals of it are still empty arrays.
    let v = NDArray::zeros([0, BIG, BIG, BIG], DType::F32);
    assert_eq!(
        call("transpose", &v, &[]).shape().dims(),
        [BIG, BIG, BIG, 0]
    );
    let s = call(
        "slice_axis",
        &v,
        &[("axis", "1"), ("begin", "1099511627000")],
    );
    assert_eq!(s.shape().dims(), [0, 776, BIG, BIG]);
    assert_eq!(
        call("reverse", &v, &[("axis", "2")]).shape().dims(),
        [0, BIG, BIG, BIG]
    );
    // softmax's lanes: outer 0, inner 2^80.
    let sm = call("softmax", &v, &[("axis", "1")]);
    assert_eq!(sm.shape().dims(), [0, BIG, BIG, BIG]);
}

#[test]
fn symbolic_shape_rules_with_overflowing_products_are_errors() {
    simpleop_ops::link();
    let infer = |op: &str, attrs: &[(&str, &str)], shape: &[usize]| {
        let attrs: Attrs = attrs.iter().copied().collect();
        let s = Symbol::invoke(op, &[&Symbol::var("x")], &attrs).unwrap();
        let known = HashMap::from([("x".to_string(), Shape::new(shape))]);
        s.infer_shape(&known)
            .map(|i| i.output_shapes[0].clone().unwrap())
    };
    let huge = [1 << 33, 1 << 33];
    // Both sides saturated at usize::MAX once compared equal.
    let e = infer("Reshape", &[("shape", "(17179869184, 17179869184)")], &huge).unwrap_err();
    assert!(
        e.to_string().contains("more than usize::MAX elements"),
        "{e}"
    );
    assert!(!e.to_string().contains("18446744073709551615"), "{e}");
    assert!(infer("Reshape", &[("shape", "(-1,)")], &huge).is_err());
    assert!(infer("Flatten", &[], &[2, BIG, BIG]).is_err());
    // Rules that multiply nothing pass such shapes through unharmed.
    let sm = infer("softmax", &[("axis", "1")], &[BIG, BIG, BIG]).unwrap();
    assert_eq!(sm.dims(), [BIG, BIG, BIG]);
    let t = infer("transpose", &[], &[BIG, BIG, 3]).unwrap();
    assert_eq!(t.dims(), [3, BIG, BIG]);
    let sl = infer(
        "slice_axis",
        &[("axis", "0"), ("begin", "5")],
        &[BIG, BIG, BIG],
    )
    .unwrap();
    assert_eq!(sl.dims(), [BIG - 5, BIG, BIG]);
    let sum = infer("sum", &[("axis", "0")], &[BIG, BIG, BIG]).unwrap();
    assert_eq!(sum.dims(), [BIG, BIG]);
    let am = infer("argmax", &[("axis", "0")], &[BIG, BIG, BIG]).unwrap();
    assert_eq!(am.dims(), [BIG, BIG]);
    let d = Symbol::invoke(
        "dot",
        &[&Symbol::var("a"), &Symbol::var("b")],
        &Attrs::new(),
    )
    .unwrap();
    let known = HashMap::from([
        ("a".to_string(), Shape::new([BIG, BIG, 4])),
        ("b".to_string(), Shape::new([4, BIG, BIG])),
    ]);
    let out = d.infer_shape(&known).unwrap().output_shapes[0]
        .clone()
        .unwrap();
    assert_eq!(out.dims(), [BIG, BIG, BIG, BIG]);
}

#[test]
fn messages_never_print_saturated_element_counts() {
    simpleop_ops::link();
    let x = NDArray::zeros([0, BIG], DType::F32);
    let e = call_err(
        "Reshape",
        &x,
        &[("shape", "(1099511627776, 1099511627776)")],
    );
    assert!(
        e.to_string().contains("more than usize::MAX elements"),
        "{e}"
    );
    assert!(!e.to_string().contains("18446744073709551615"), "{e}");
    let e = NDArray::from_slice(&[1.0f32; 3], [BIG, BIG]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    assert!(!e.to_string().contains("18446744073709551615"), "{e}");
    assert!(
        e.to_string().contains("(1099511627776, 1099511627776)"),
        "{e}"
    );
    let e = NDArray::from_f64(&[1.0; 3], [2], DType::F64).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    assert_eq!(
        NDArray::from_f64(&[1.5, -2.0], [2, 1], DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        [1.5, -2.0]
    );
}
