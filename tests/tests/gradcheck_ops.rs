//! Every standard op passes the gradient checker for every float dtype and
//! every request type it allows (forward and backward).

use simpleop::gradcheck::GradCheck;
use simpleop::{DType, OpReqType, Registry};

/// Values away from the kinks of relu, smooth_l1 (sigma = 1) and clip(-1, 1).
fn kink_free() -> Vec<f64> {
    vec![-2.5, -1.5, -0.7, -0.3, 0.2, 0.6, 1.3, 2.7]
}

fn check(g: GradCheck) {
    check_with(g, true)
}

/// `first_is_output`: input 0 has the output's shape, so in-place applies.
fn check_with(g: GradCheck, first_is_output: bool) {
    let report = g.run().unwrap_or_else(|e| panic!("{e}"));
    for dtype in DType::FLOATS {
        for req in [OpReqType::Null, OpReqType::WriteTo, OpReqType::AddTo] {
            assert!(
                report.rows.iter().any(|(d, r, _)| *d == dtype && *r == req),
                "{}: no row for {dtype} {req:?}",
                report.op
            );
        }
    }
    let op = Registry::global().unwrap().get(&report.op).unwrap().def;
    if op.inplace.gradient.is_some() || op.inplace.forward.is_some() {
        let inplace_rows = report
            .rows
            .iter()
            .filter(|(_, r, _)| *r == OpReqType::WriteInplace)
            .count();
        let want = if first_is_output {
            4 * (op.inplace.gradient.is_some() as usize + op.inplace.forward.is_some() as usize)
        } else {
            0
        };
        assert_eq!(inplace_rows, want, "{}: in-place rows", report.op);
    }
}

#[test]
fn unary_ops() {
    simpleop_ops::link();
    for op in ["relu", "negative", "_copy"] {
        check(
            GradCheck::new(op)
                .shapes(&[&[2, 4]])
                .inputs(vec![kink_free()]),
        );
    }
    check(
        GradCheck::new("smooth_l1")
            .attr("scalar", 1.0)
            .shapes(&[&[2, 4]])
            .inputs(vec![kink_free()]),
    );
    check(
        GradCheck::new("smooth_l1")
            .attr("scalar", 2.0)
            .shapes(&[&[2, 4]])
            .inputs(vec![kink_free()]),
    );
    check(
        GradCheck::new("clip")
            .attr("a_min", -1.0)
            .attr("a_max", 1.0)
            .shapes(&[&[2, 4]])
            .inputs(vec![kink_free()]),
    );
}

#[test]
fn scalar_ops() {
    simpleop_ops::link();
    for op in [
        "_plus_scalar",
        "_minus_scalar",
        "_rminus_scalar",
        "_mul_scalar",
        "_div_scalar",
    ] {
        check(GradCheck::new(op).attr("scalar", 1.5));
    }
    check(
        GradCheck::new("_rdiv_scalar")
            .attr("scalar", 1.5)
            .range(0.5, 2.0),
    );
}

#[test]
fn binary_ops() {
    simpleop_ops::link();
    for op in ["elemwise_add", "elemwise_sub", "elemwise_mul"] {
        check(GradCheck::new(op));
    }
    check(GradCheck::new("elemwise_div").range(0.5, 2.0));
}

#[test]
fn broadcast_ops_reduce_gradients_to_input_shapes() {
    simpleop_ops::link();
    let shapes: [&[&[usize]]; 3] = [
        &[&[2, 3, 4], &[1, 3, 1]],
        &[&[3, 1], &[1, 5]],
        &[&[4], &[2, 3, 4]],
    ];
    for (k, s) in shapes.into_iter().enumerate() {
        let first_is_output = k == 0;
        for op in ["broadcast_add", "broadcast_sub", "broadcast_mul"] {
            check_with(GradCheck::new(op).shapes(s), first_is_output);
        }
        check_with(
            GradCheck::new("broadcast_div").shapes(s).range(0.5, 2.0),
            first_is_output,
        );
    }
}

#[test]
fn source_op_honours_forward_requests() {
    simpleop_ops::link();
    let report = GradCheck::new("_random_uniform")
        .attr("shape", "(3, 4)")
        .attr("low", -1.0)
        .attr("high", 2.0)
        .run()
        .unwrap();
    assert_eq!(report.rows.len(), 3 * 4);
}

#[test]
fn a_broken_gradient_is_caught() {
    // The checker is only useful if it can fail: at relu's kink the
    // one-sided registered gradient (0) disagrees with the central
    // difference (0.5).
    simpleop_ops::link();
    let err = GradCheck::new("relu")
        .shapes(&[&[1]])
        .inputs(vec![vec![0.0]])
        .run()
        .unwrap_err();
    assert!(matches!(err, simpleop::Error::GradCheck { .. }), "{err}");
    assert!(err.to_string().contains("op `relu`"), "{err}");
}
