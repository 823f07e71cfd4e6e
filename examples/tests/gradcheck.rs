//! Gradient checks and value tests for the ops of `simpleop-examples`.

use simpleop::gradcheck::{GradCheck, GradReport};
use simpleop::{Attrs, DType, EnvArguments, Error, NDArray, OpReqType, eager, f16};
use simpleop_examples::{
    RowScaleParams, row_scale, row_scale_into, scaled_tanh, scaled_tanh_inplace, softplus,
    softplus_inplace, softplus_into,
};

/// Asserts `got` and `want` agree elementwise within `rtol`·|want| + `atol`.
#[track_caller]
fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "element {i} of {}: got {g}, want {w}",
            got.len()
        );
    }
}

/// Asserts the report has rows for every float dtype and that each dtype
/// was checked for every request type in `reqs`.
#[track_caller]
fn assert_covers(report: &GradReport, reqs: &[OpReqType]) {
    for dtype in DType::FLOATS {
        for &req in reqs {
            assert!(
                report.rows.iter().any(|&(d, r, _)| d == dtype && r == req),
                "{}: no row for ({dtype}, {req:?}) in {:?}",
                report.op,
                report.rows
            );
        }
    }
    for &(d, r, worst) in &report.rows {
        assert!(
            worst <= 1.0,
            "{}: ({d}, {r:?}) worst ratio {worst}",
            report.op
        );
    }
}

const ALL_REQS: [OpReqType; 4] = [
    OpReqType::Null,
    OpReqType::WriteTo,
    OpReqType::AddTo,
    OpReqType::WriteInplace,
];

// ---- gradient checks -------------------------------------------------------

#[test]
fn softplus_gradcheck() {
    let report = GradCheck::new("softplus").run();
    assert!(report.is_ok(), "{report:?}");
    let report = report.unwrap();
    assert_eq!(report.op, "softplus");
    // WriteInplace rows come from the in-place gradient (`OutIn`).
    assert_covers(&report, &ALL_REQS);
}

#[test]
fn softplus_gradcheck_wide_range() {
    // Crosses the x > 20 switch and the region where e^x underflows.
    let report = GradCheck::new("softplus")
        .range(-40.0, 40.0)
        .dtypes(&[DType::F64, DType::F32])
        .run();
    assert!(report.is_ok(), "{report:?}");
}

#[test]
fn scaled_tanh_gradcheck() {
    let report = GradCheck::new("scaled_tanh").attr("scalar", 0.7).run();
    assert!(report.is_ok(), "{report:?}");
    let report = report.unwrap();
    assert_eq!(report.op, "scaled_tanh");
    assert_covers(&report, &ALL_REQS);
}

#[test]
fn row_scale_gradcheck() {
    let report = GradCheck::new("row_scale")
        .attr("factor", 0.5)
        .shapes(&[&[3, 4]])
        .run();
    assert!(report.is_ok(), "{report:?}");
    let report = report.unwrap();
    assert_eq!(report.op, "row_scale");
    // A blob op declares no in-place options, so no WriteInplace rows.
    assert_covers(
        &report,
        &[OpReqType::Null, OpReqType::WriteTo, OpReqType::AddTo],
    );
    assert!(
        report
            .rows
            .iter()
            .all(|&(_, r, _)| r != OpReqType::WriteInplace),
        "{:?}",
        report.rows
    );
}

#[test]
fn row_scale_gradcheck_other_shapes() {
    for shape in [&[1usize, 5][..], &[5, 1], &[4, 3]] {
        let report = GradCheck::new("row_scale")
            .attr("factor", -1.25)
            .shapes(&[shape])
            .run();
        assert!(report.is_ok(), "{shape:?}: {report:?}");
    }
}

// ---- forward values --------------------------------------------------------

/// The exact softplus: `ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|)`.
fn softplus_exact(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// What the op computes by definition: `x` above 20, exact below.
fn softplus_ref(x: f64) -> f64 {
    if x > 20.0 { x } else { softplus_exact(x) }
}

#[test]
fn softplus_values_f64() {
    let xs = [-50.0, -30.0, -1.0, 0.0, 1e-8, 1.0, 2.5, 19.9, 20.5, 100.0];
    let x = NDArray::from_slice(&xs, [xs.len()]).unwrap();
    let y = softplus(&x).unwrap().to_f64_vec();
    let want: Vec<f64> = xs.iter().map(|&v| softplus_ref(v)).collect();
    assert_close(&y, &want, 1e-14, 0.0);
    // Hand-computed anchors.
    assert!(
        (y[3] - std::f64::consts::LN_2).abs() < 1e-16,
        "softplus(0) = {}",
        y[3]
    );
    assert!(
        (y[5] - 1.313_261_687_518_222_8).abs() < 1e-15,
        "softplus(1) = {}",
        y[5]
    );
    assert!(
        (y[2] - 0.313_261_687_518_222_8).abs() < 1e-15,
        "softplus(-1) = {}",
        y[2]
    );
    assert_eq!(y[9], 100.0, "no overflow for large x");
    // Returning `x` above 20 drops ln(1 + e^-x) < e^-20 ≈ 2.1e-9.
    for (&v, &got) in xs.iter().zip(&y) {
        assert!(
            (got - softplus_exact(v)).abs() < 2.1e-9,
            "softplus({v}) = {got}"
        );
    }
}

#[test]
fn softplus_every_float_dtype_and_by_name() {
    let xs = [-3.0, -0.5, 0.0, 0.75, 4.0, 25.0];
    let want: Vec<f64> = xs.iter().map(|&v| softplus_ref(v)).collect();
    for (dtype, rtol) in [
        (DType::F64, 1e-14),
        (DType::F32, 1e-6),
        (DType::F16, 2e-3),
        (DType::BF16, 1e-2),
    ] {
        let x = NDArray::from_f64(&xs, [2, 3], dtype).unwrap();
        let typed = softplus(&x).unwrap();
        assert_eq!(typed.dtype(), dtype);
        assert_eq!(typed.shape().dims(), &[2, 3]);
        assert_close(&typed.to_f64_vec(), &want, rtol, 0.0);
        let by_name = eager::invoke("softplus", &[&x], &Attrs::new()).unwrap();
        assert_eq!(typed, by_name, "{dtype}");
    }
}

#[test]
fn softplus_into_and_inplace() {
    let x = NDArray::from_vec(vec![-1.0f64, 0.0, 1.0], [3]).unwrap();
    let y = softplus(&x).unwrap().to_f64_vec();

    let mut out = NDArray::full([3], 10.0, DType::F64);
    softplus_into(&x, &mut out, OpReqType::AddTo).unwrap();
    assert_close(
        &out.to_f64_vec(),
        &y.iter().map(|v| v + 10.0).collect::<Vec<_>>(),
        1e-15,
        0.0,
    );

    let mut out = NDArray::full([3], 10.0, DType::F64);
    softplus_into(&x, &mut out, OpReqType::Null).unwrap();
    assert_eq!(out.to_f64_vec(), vec![10.0; 3]);

    softplus_into(&x, &mut out, OpReqType::WriteTo).unwrap();
    assert_eq!(out.to_f64_vec(), y);

    // softplus declares no forward in-place option: the handle is replaced.
    let mut z = x.deep_copy();
    softplus_inplace(&mut z).unwrap();
    assert_eq!(z.to_f64_vec(), y);

    // A wrongly shaped output is rejected, naming the argument.
    let mut bad = NDArray::zeros([4], DType::F64);
    let e = softplus_into(&x, &mut bad, OpReqType::WriteTo).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "out"),
        "{e}"
    );
}

#[test]
fn scaled_tanh_values() {
    let xs = [-3.0f64, -0.5, 0.0, 0.5, 3.0];
    let x = NDArray::from_slice(&xs, [5]).unwrap();
    let want: Vec<f64> = xs.iter().map(|&v| (0.7 * v).tanh()).collect();
    assert_close(
        &scaled_tanh(&x, 0.7).unwrap().to_f64_vec(),
        &want,
        1e-15,
        0.0,
    );
    assert!((want[3] - 0.336_375_544_336_332_2).abs() < 1e-15);

    let by_name = eager::invoke("scaled_tanh", &[&x], &Attrs::from([("scalar", "0.7")])).unwrap();
    assert_close(&by_name.to_f64_vec(), &want, 1e-15, 0.0);

    // Forward in place (`InOut`): the target keeps its own buffer.
    let mut t = x.deep_copy();
    let before = t.blob().as_ptr();
    scaled_tanh_inplace(&mut t, 0.7).unwrap();
    assert_eq!(
        t.blob().as_ptr(),
        before,
        "computed in the target's own buffer"
    );
    assert_close(&t.to_f64_vec(), &want, 1e-15, 0.0);

    let h = NDArray::from_f64(&xs, [5], DType::F16).unwrap();
    let yh = scaled_tanh(&h, 0.7).unwrap();
    assert_eq!(yh.dtype(), DType::F16);
    assert_close(&yh.to_f64_vec(), &want, 1e-3, 1e-3);
    assert_eq!(yh.as_slice::<f16>().unwrap()[2], f16::ZERO);
}

#[test]
fn row_scale_values() {
    let m: Vec<f64> = (1..=6).map(f64::from).collect();
    let x = NDArray::from_slice(&m, [3, 2]).unwrap();
    // rows × 0.5·1, 0.5·2, 0.5·3
    let want = [0.5, 1.0, 3.0, 4.0, 7.5, 9.0];
    let y = row_scale(&x, RowScaleParams { factor: 0.5 }).unwrap();
    assert_eq!(y.shape().dims(), &[3, 2]);
    assert_eq!(y.to_f64_vec(), want);
    let by_name = eager::invoke("row_scale", &[&x], &Attrs::from([("factor", "0.5")])).unwrap();
    assert_eq!(by_name, y);
    // The default factor is 1.
    let d = eager::invoke("row_scale", &[&x], &Attrs::new()).unwrap();
    assert_eq!(d.to_f64_vec(), [1.0, 2.0, 6.0, 8.0, 15.0, 18.0]);
    assert_eq!(RowScaleParams::default().factor, 1.0);

    for dtype in DType::FLOATS {
        let xd = x.astype(dtype);
        let yd = row_scale(&xd, RowScaleParams { factor: 0.5 }).unwrap();
        assert_eq!(yd.dtype(), dtype);
        assert_eq!(yd.to_f64_vec(), want, "{dtype}: exact in every float type");
    }

    // Every request type.
    let p = || RowScaleParams { factor: 0.5 };
    let mut out = NDArray::full([3, 2], 1.0, DType::F64);
    row_scale_into(&x, p(), &mut out, OpReqType::Null).unwrap();
    assert_eq!(out.to_f64_vec(), [1.0; 6]);
    row_scale_into(&x, p(), &mut out, OpReqType::AddTo).unwrap();
    assert_eq!(out.to_f64_vec(), want.map(|v| v + 1.0));
    row_scale_into(&x, p(), &mut out, OpReqType::WriteTo).unwrap();
    assert_eq!(out.to_f64_vec(), want);

    // Empty rows or columns are fine.
    let e = NDArray::zeros([0, 3], DType::F32);
    assert_eq!(row_scale(&e, p()).unwrap().shape().dims(), &[0, 3]);
    let e = NDArray::zeros([2, 0], DType::F32);
    assert_eq!(row_scale(&e, p()).unwrap().shape().dims(), &[2, 0]);
}

// ---- gradient values -------------------------------------------------------

#[test]
fn gradient_values() {
    let xs = [-2.0, 0.0, 1.5];
    let x = NDArray::from_slice(&xs, [3]).unwrap();
    let dy = NDArray::from_slice(&[1.0, 2.0, -1.0], [3]).unwrap();

    let g = eager::gradient(
        &simpleop_examples::softplus::OP,
        &EnvArguments::none(),
        &[&x],
        &dy,
    )
    .unwrap();
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    assert_close(
        &g[0].to_f64_vec(),
        &[sig(-2.0), 2.0 * 0.5, -sig(1.5)],
        1e-15,
        0.0,
    );

    let g = eager::gradient(
        &simpleop_examples::scaled_tanh::OP,
        &EnvArguments::scalar(0.7),
        &[&x],
        &dy,
    )
    .unwrap();
    let d = |v: f64| 0.7 * (1.0 - (0.7 * v).tanh().powi(2));
    assert_close(
        &g[0].to_f64_vec(),
        &[d(-2.0), 2.0 * 0.7, -d(1.5)],
        1e-14,
        0.0,
    );

    let m = NDArray::ones([3, 2], DType::F64);
    let g = eager::gradient(
        &simpleop_examples::row_scale::OP,
        &EnvArguments::kwargs(RowScaleParams { factor: 0.5 }),
        &[&m],
        &m,
    )
    .unwrap();
    assert_eq!(g[0].to_f64_vec(), [0.5, 0.5, 1.0, 1.0, 1.5, 1.5]);
}

#[test]
fn op_definitions() {
    use simpleop::{GradKind, OpForm, ParamKind};
    let sp = &simpleop_examples::softplus::OP;
    assert_eq!(sp.inputs, &["x"]);
    assert_eq!(sp.gradient.unwrap().kind(), GradKind::T2);
    assert!(sp.inplace.forward.is_none() && sp.inplace.gradient.is_some());
    let st = &simpleop_examples::scaled_tanh::OP;
    assert!(matches!(st.params, ParamKind::Scalar));
    assert_eq!(st.gradient.unwrap().kind(), GradKind::T1);
    assert!(st.inplace.forward.is_some() && st.inplace.gradient.is_some());
    let rs = &simpleop_examples::row_scale::OP;
    assert_eq!(rs.form, OpForm::Blob);
    assert_eq!(rs.inputs, &["data"]);
    assert!(matches!(rs.params, ParamKind::Kwargs { fields, .. } if fields() == ["factor"]));
    assert_eq!(rs.gradient.unwrap().kind(), GradKind::T0);
}

// ---- errors ----------------------------------------------------------------

#[test]
fn bad_kwargs_name_the_argument() {
    let x = NDArray::ones([2, 2], DType::F32);

    let e = eager::invoke("row_scale", &[&x], &Attrs::from([("factor", "abc")])).unwrap_err();
    assert!(
        matches!(&e, Error::BadKwarg { op, arg, .. } if op == "row_scale" && arg == "factor"),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("`factor`") && e.to_string().contains("abc"),
        "{e}"
    );

    let e = eager::invoke("row_scale", &[&x], &Attrs::from([("fator", "2")])).unwrap_err();
    assert!(
        matches!(&e, Error::BadKwarg { arg, .. } if arg == "fator"),
        "{e:?}"
    );
    assert!(e.to_string().contains("expected one of: factor"), "{e}");

    // The gradient checker parses the same way.
    let e = GradCheck::new("row_scale")
        .attr("factor", "abc")
        .run()
        .unwrap_err();
    assert!(
        matches!(&e, Error::BadKwarg { arg, .. } if arg == "factor"),
        "{e:?}"
    );

    // A non-finite factor is rejected by the shape function.
    let e = eager::invoke("row_scale", &[&x], &Attrs::from([("factor", "inf")])).unwrap_err();
    assert!(
        matches!(&e, Error::BadKwarg { arg, .. } if arg == "factor"),
        "{e:?}"
    );

    // `scalar` belongs to scalar ops only.
    let e = eager::invoke("row_scale", &[&x], &Attrs::from([("scalar", "2")])).unwrap_err();
    assert!(matches!(&e, Error::UnexpectedScalar { .. }), "{e:?}");
    let e = eager::invoke("softplus", &[&x], &Attrs::from([("scalar", "2")])).unwrap_err();
    assert!(matches!(&e, Error::UnexpectedScalar { .. }), "{e:?}");
    let e = eager::invoke("scaled_tanh", &[&x], &Attrs::new()).unwrap_err();
    assert!(matches!(&e, Error::MissingScalar { .. }), "{e:?}");
    let e = eager::invoke("scaled_tanh", &[&x], &Attrs::from([("scalar", "x")])).unwrap_err();
    assert!(
        matches!(&e, Error::BadKwarg { arg, .. } if arg == "scalar"),
        "{e:?}"
    );
    let e = eager::invoke("softplus", &[&x], &Attrs::from([("beta", "2")])).unwrap_err();
    assert!(
        matches!(&e, Error::BadKwarg { arg, .. } if arg == "beta"),
        "{e:?}"
    );
}

#[test]
fn row_scale_rejects_non_2d_without_panicking() {
    let result = std::panic::catch_unwind(|| {
        let mut errors = Vec::new();
        for shape in [&[4usize][..], &[], &[2, 3, 4]] {
            let x = NDArray::zeros(shape, DType::F32);
            errors.push(eager::invoke("row_scale", &[&x], &Attrs::new()).unwrap_err());
            errors.push(row_scale(&x, RowScaleParams::default()).unwrap_err());
            let mut out = x.clone();
            errors.push(
                row_scale_into(&x, RowScaleParams::default(), &mut out, OpReqType::WriteTo)
                    .unwrap_err(),
            );
        }
        errors
    });
    let errors = result.expect("row_scale panicked on a non-2-D input");
    assert_eq!(errors.len(), 9);
    for e in errors {
        assert!(
            matches!(&e, Error::ShapeMismatch { op, arg, .. } if op == "row_scale" && arg == "data"),
            "{e:?}"
        );
    }
}

#[test]
fn other_misuse_errors() {
    // Integer input: the dtype rule rejects it before the kernel runs.
    let i = NDArray::zeros([2, 2], DType::I32);
    let e = row_scale(&i, RowScaleParams::default()).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "data"),
        "{e:?}"
    );
    let e = softplus(&i).unwrap_err();
    assert!(matches!(&e, Error::DTypeMismatch { .. }), "{e:?}");

    // Wrong arity by name.
    let x = NDArray::ones([2, 2], DType::F32);
    let e = eager::invoke("row_scale", &[&x, &x], &Attrs::new()).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Arity {
                expected: 1,
                got: 2,
                ..
            }
        ),
        "{e:?}"
    );

    // An output of the wrong dtype.
    let mut out = NDArray::zeros([2, 2], DType::F64);
    let e =
        row_scale_into(&x, RowScaleParams::default(), &mut out, OpReqType::WriteTo).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "out"),
        "{e:?}"
    );

    // A typo in the op name suggests the real one.
    let e = eager::invoke("softplsu", &[&x], &Attrs::new()).unwrap_err();
    assert!(
        matches!(&e, Error::UnknownOp { suggestions, .. } if suggestions.iter().any(|s| s == "softplus")),
        "{e:?}"
    );
}

// ---- large arrays and attribute round trips --------------------------------

#[test]
fn large_arrays_match_elementwise_results() {
    simpleop::Tuning::update(|t| t.parallel_work = 0).unwrap();
    // Larger than the framework's parallel grain, with a ragged last tile.
    let n = 300_001;
    let xs: Vec<f64> = (0..n)
        .map(|i| (i as f64 / n as f64) * 60.0 - 30.0)
        .collect();
    for dtype in DType::FLOATS {
        let x = NDArray::from_f64(&xs, [n], dtype).unwrap();
        let xr = x.to_f64_vec();
        let y = softplus(&x).unwrap();
        let want: Vec<f64> = xr.iter().map(|&v| softplus_ref(v)).collect();
        // f16 flushes softplus(-30) ≈ 9e-14 to zero: allow its subnormal step.
        let (rtol, atol) = match dtype {
            DType::F64 => (1e-14, 0.0),
            DType::F32 => (1e-6, 1e-30),
            _ => (1e-2, 1e-7),
        };
        assert_close(&y.to_f64_vec(), &want, rtol, atol);

        // Forward in place over a large buffer equals the out-of-place result.
        let mut t = x.deep_copy();
        scaled_tanh_inplace(&mut t, 0.3).unwrap();
        assert_eq!(t, scaled_tanh(&x, 0.3).unwrap(), "{dtype}");

        // Gradient in place over a large output gradient equals the
        // out-of-place gradient.
        let dy = NDArray::full([n], 0.5, dtype);
        let op = &simpleop_examples::softplus::OP;
        let env = EnvArguments::none();
        let out = softplus(&x).unwrap();
        let separate = eager::gradient(op, &env, &[&x], &dy).unwrap();
        let mut g0 = dy.deep_copy();
        let in_place = eager::invoke_backward_inplace(
            op,
            &env,
            &mut g0,
            Some(&out),
            &[&x],
            &mut [],
            &[OpReqType::WriteTo],
        )
        .unwrap();
        assert!(in_place, "{dtype}");
        assert_eq!(g0, separate[0], "{dtype}");
    }
}

#[test]
fn kwargs_round_trip_through_attrs() {
    let op = &simpleop_examples::row_scale::OP;
    let env = EnvArguments::kwargs(RowScaleParams { factor: 0.25 });
    let attrs = (op.to_attrs)(op, &env).unwrap();
    assert_eq!(attrs.get("factor"), Some("0.25"));
    let back = (op.parse)(op, &attrs).unwrap();
    assert_eq!(
        back.require_kwargs::<RowScaleParams>("row_scale").unwrap(),
        &RowScaleParams { factor: 0.25 }
    );

    let op = &simpleop_examples::scaled_tanh::OP;
    let attrs = (op.to_attrs)(op, &EnvArguments::scalar(0.7)).unwrap();
    let back = (op.parse)(op, &attrs).unwrap();
    assert_eq!(back.scalar_value(), Some(0.7));
}

#[test]
fn row_scale_backward_checks_out_grad() {
    let op = &simpleop_examples::row_scale::OP;
    let env = EnvArguments::kwargs(RowScaleParams { factor: 2.0 });
    let x = NDArray::ones([2, 3], DType::F32);
    let reqs = [OpReqType::WriteTo];

    let dy = NDArray::ones([3, 2], DType::F32);
    let mut g = vec![NDArray::zeros([2, 3], DType::F32)];
    let e = eager::invoke_backward(op, &env, &dy, None, &[&x], &mut g, &reqs).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "out_grad"),
        "{e:?}"
    );

    let dy = NDArray::ones([2, 3], DType::F64);
    let e = eager::invoke_backward(op, &env, &dy, None, &[&x], &mut g, &reqs).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "out_grad"),
        "{e:?}"
    );
    assert_eq!(g[0].to_f64_vec(), [0.0; 6], "nothing written on error");

    // A mismatched dy is an error even when nothing would be written.
    let mut g = vec![NDArray::full([2, 3], 7.0, DType::F32)];
    assert!(
        eager::invoke_backward(op, &env, &dy, None, &[&x], &mut g, &[OpReqType::Null]).is_err()
    );

    // Null: nothing is written.
    let dy = NDArray::ones([2, 3], DType::F32);
    eager::invoke_backward(op, &env, &dy, None, &[&x], &mut g, &[OpReqType::Null]).unwrap();
    assert_eq!(g[0].to_f64_vec(), [7.0; 6]);

    // AddTo accumulates.
    eager::invoke_backward(op, &env, &dy, None, &[&x], &mut g, &[OpReqType::AddTo]).unwrap();
    assert_eq!(g[0].to_f64_vec(), [9.0, 9.0, 9.0, 11.0, 11.0, 11.0]);
}

#[test]
fn inplace_on_shared_storage_leaves_other_handles_alone() {
    let x = NDArray::from_vec(vec![0.5f32, -1.0], [2]).unwrap();
    let want = scaled_tanh(&x, 1.5).unwrap();
    let mut t = x.clone();
    assert!(t.shares_storage_with(&x));
    scaled_tanh_inplace(&mut t, 1.5).unwrap();
    assert_eq!(t, want);
    assert_eq!(x.to_vec::<f32>().unwrap(), [0.5, -1.0]);

    let mut r = NDArray::ones([2, 2], DType::F64);
    let keep = r.clone();
    simpleop_examples::row_scale_inplace(&mut r, RowScaleParams { factor: 3.0 }).unwrap();
    assert_eq!(r.to_f64_vec(), [3.0, 3.0, 6.0, 6.0]);
    assert_eq!(keep.to_f64_vec(), [1.0; 4]);
}

/// The exact check: each example's written gradient against the
/// dual-number derivative of its forward. `softplus` differs where its
/// forward switches to `x` (above 20): the forward's derivative there is 1,
/// the written gradient the smooth function's `sigmoid(x)`, which is
/// within rounding of 1 in f32 and the half types but not in f64.
#[test]
fn written_gradients_match_the_derivative_of_the_forward() {
    use simpleop::gradcheck::ExactCheck;
    simpleop_examples::link();
    let r = ExactCheck::new("scaled_tanh")
        .attr("scalar", 0.7)
        .run()
        .unwrap();
    assert!(r.disagreements.is_empty(), "{}", r.summary());
    let r = ExactCheck::new("softplus").run().unwrap();
    assert!(!r.disagreements.is_empty());
    for d in &r.disagreements {
        let x = d.inputs[0];
        assert!(
            d.dtype == DType::F64 && x > 20.0 && x < 40.0 && d.derived == 2.0,
            "{}",
            r.summary()
        );
        assert!((d.written - 2.0).abs() < 1e-8, "{d:?}");
    }
}
