//! The elementwise op families (`math`, `scalar` powers and extrema,
//! `compare`, `binary`, `select`): every op passes the gradient checker on
//! every float dtype and request type, its forward matches hand-computed
//! f64 references, and it is registered with a description.

use simpleop::gradcheck::GradCheck;
use simpleop::{Attrs, DType, Error, NDArray, OpReqType, Registry, eager};
use simpleop_tests::check_gradients;

const UNARY: [&str; 30] = [
    "abs",
    "sign",
    "round",
    "ceil",
    "floor",
    "trunc",
    "square",
    "sqrt",
    "rsqrt",
    "cbrt",
    "exp",
    "expm1",
    "log",
    "log1p",
    "log2",
    "log10",
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "sinh",
    "cosh",
    "tanh",
    "sigmoid",
    "softsign",
    "reciprocal",
    "erf",
    "gamma",
];

const SCALAR: [&str; 4] = [
    "_power_scalar",
    "_rpower_scalar",
    "_maximum_scalar",
    "_minimum_scalar",
];

const COMPARE: [&str; 6] = [
    "_equal_scalar",
    "_greater_scalar",
    "_lesser_scalar",
    "broadcast_equal",
    "broadcast_greater",
    "broadcast_lesser",
];

const BINARY: [&str; 7] = [
    "_power",
    "_maximum",
    "_minimum",
    "_hypot",
    "broadcast_power",
    "broadcast_maximum",
    "broadcast_minimum",
];

/// Away from 0, integers and half-integers even after rounding to bf16
/// (kinks of abs, steps of sign/round/ceil/floor/trunc).
fn off_grid() -> Vec<f64> {
    vec![-1.8, -1.3, -0.7, -0.2, 0.3, 0.8, 1.2, 1.7]
}

/// `n` values in `[-2, 2)` on the grid `offset + k/4`, in a scrambled order.
/// Values from grids with offsets 0.1 and 0.225 differ by at least 0.125,
/// so comparisons and extrema between them never tie, even in bf16.
fn grid(n: usize, offset: f64) -> Vec<f64> {
    (0..n)
        .map(|i| -2.0 + offset + 0.25 * ((i * 7 + 3) % 16) as f64)
        .collect()
}

fn check(g: GradCheck) {
    check_gradients(g, true)
}

/// Runs `op` by name on f64 inputs `(values, shape)` and returns the output.
fn eval(op: &str, attrs: &[(&str, f64)], inputs: &[(&[f64], &[usize])], dtype: DType) -> NDArray {
    let arrays: Vec<NDArray> = inputs
        .iter()
        .map(|(v, s)| NDArray::from_f64(v, *s, dtype).unwrap())
        .collect();
    let refs: Vec<&NDArray> = arrays.iter().collect();
    let mut a = Attrs::new();
    for (k, v) in attrs {
        a.insert(*k, v);
    }
    eager::invoke(op, &refs, &a).unwrap_or_else(|e| panic!("{op}: {e}"))
}

fn assert_close(op: &str, got: &[f64], want: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len(), "{op}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rtol * w.abs().max(1e-300) || (g.is_nan() && w.is_nan()),
            "{op}: element {i}: got {g}, expected {w}"
        );
    }
}

/// Checks a unary (optionally scalar) op against references in f64, and
/// in f32 with a tolerance fit for single precision.
fn unary_values(op: &str, attrs: &[(&str, f64)], x: &[f64], want: &[f64]) {
    let shape = [x.len()];
    let y = eval(op, attrs, &[(x, &shape)], DType::F64);
    assert_eq!(y.dtype(), DType::F64);
    assert_close(op, &y.to_f64_vec(), want, 1e-14);
    let y = eval(op, attrs, &[(x, &shape)], DType::F32);
    assert_eq!(y.dtype(), DType::F32);
    assert_close(op, &y.to_f64_vec(), want, 1e-6);
}

#[test]
fn unary_math_gradients() {
    simpleop_ops::link();
    let shape: &[&[usize]] = &[&[2, 4]];
    for op in ["abs", "sign", "round", "ceil", "floor", "trunc"] {
        check(GradCheck::new(op).shapes(shape).inputs(vec![off_grid()]));
    }
    // Cube root: both signs, away from the infinite slope at 0.
    check(
        GradCheck::new("cbrt")
            .shapes(shape)
            .inputs(vec![vec![-2.0, -1.1, -0.6, -0.3, 0.3, 0.6, 1.1, 2.0]]),
    );
    // Smooth on [-2, 2).
    for op in [
        "square", "exp", "expm1", "sin", "cos", "arctan", "sinh", "cosh", "tanh", "sigmoid",
        "softsign", "erf",
    ] {
        check(GradCheck::new(op));
    }
    // Positive inputs only.
    for op in ["sqrt", "rsqrt", "log", "log2", "log10", "reciprocal"] {
        check(GradCheck::new(op).range(0.5, 2.0));
    }
    check(GradCheck::new("log1p").range(-0.5, 2.0));
    // Away from the poles at ±π/2.
    check(GradCheck::new("tan").range(-1.2, 1.2));
    // Inside (-1, 1), away from the infinite slopes at ±1.
    for op in ["arcsin", "arccos"] {
        check(GradCheck::new(op).range(-0.9, 0.9));
    }
    // A second draw for the reciprocal on negative inputs.
    check(GradCheck::new("reciprocal").range(-2.0, -0.5).seed(7));
}

#[test]
fn unary_math_values() {
    simpleop_ops::link();
    use std::f64::consts::{E, FRAC_PI_2, FRAC_PI_4, FRAC_PI_6, LN_2, PI};
    unary_values(
        "abs",
        &[],
        &[-2.5, -0.0, 0.0, 1.25, 3.0],
        &[2.5, 0.0, 0.0, 1.25, 3.0],
    );
    unary_values(
        "sign",
        &[],
        &[-2.5, -0.1, 0.0, 0.1, 7.0],
        &[-1.0, -1.0, 0.0, 1.0, 1.0],
    );
    // Halves away from zero, as MXNet.
    unary_values(
        "round",
        &[],
        &[-2.5, -1.5, -0.5, 0.4, 0.5, 1.5, 2.5, 2.6],
        &[-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 3.0],
    );
    unary_values(
        "ceil",
        &[],
        &[-2.5, -0.5, 0.2, 1.0, 1.01],
        &[-2.0, 0.0, 1.0, 1.0, 2.0],
    );
    unary_values(
        "floor",
        &[],
        &[-2.5, -0.5, 0.2, 1.0, 1.99],
        &[-3.0, -1.0, 0.0, 1.0, 1.0],
    );
    unary_values(
        "trunc",
        &[],
        &[-2.7, -0.5, 0.2, 1.0, 1.99],
        &[-2.0, 0.0, 0.0, 1.0, 1.0],
    );
    unary_values(
        "square",
        &[],
        &[-3.0, -0.5, 0.0, 1.5],
        &[9.0, 0.25, 0.0, 2.25],
    );
    unary_values(
        "sqrt",
        &[],
        &[0.0, 0.25, 4.0, 2.0],
        &[0.0, 0.5, 2.0, 2f64.sqrt()],
    );
    unary_values("rsqrt", &[], &[0.25, 4.0, 16.0], &[2.0, 0.5, 0.25]);
    unary_values(
        "cbrt",
        &[],
        &[-8.0, 0.0, 27.0, 0.125],
        &[-2.0, 0.0, 3.0, 0.5],
    );
    unary_values("exp", &[], &[0.0, 1.0, -1.0, LN_2], &[1.0, E, 1.0 / E, 2.0]);
    unary_values(
        "expm1",
        &[],
        &[0.0, 1.0, LN_2, 1e-10],
        &[0.0, E - 1.0, 1.0, 1.00000000005e-10],
    );
    unary_values("log", &[], &[1.0, E, 0.5], &[0.0, 1.0, -LN_2]);
    unary_values(
        "log1p",
        &[],
        &[0.0, E - 1.0, 1e-10],
        &[0.0, 1.0, 9.9999999995e-11],
    );
    unary_values("log2", &[], &[1.0, 8.0, 0.25], &[0.0, 3.0, -2.0]);
    unary_values("log10", &[], &[1.0, 1000.0, 0.01], &[0.0, 3.0, -2.0]);
    unary_values("sin", &[], &[0.0, FRAC_PI_6, FRAC_PI_2], &[0.0, 0.5, 1.0]);
    unary_values("cos", &[], &[0.0, PI / 3.0, PI], &[1.0, 0.5, -1.0]);
    unary_values("tan", &[], &[0.0, FRAC_PI_4, -FRAC_PI_4], &[0.0, 1.0, -1.0]);
    unary_values(
        "arcsin",
        &[],
        &[0.0, 0.5, -1.0],
        &[0.0, FRAC_PI_6, -FRAC_PI_2],
    );
    unary_values("arccos", &[], &[1.0, 0.5, -1.0], &[0.0, PI / 3.0, PI]);
    unary_values(
        "arctan",
        &[],
        &[0.0, 1.0, -1.0],
        &[0.0, FRAC_PI_4, -FRAC_PI_4],
    );
    // sinh 1 = (e - 1/e)/2, cosh 1 = (e + 1/e)/2, tanh 1 = (e² - 1)/(e² + 1).
    unary_values("sinh", &[], &[0.0, 1.0], &[0.0, 1.1752011936438014]);
    unary_values("cosh", &[], &[0.0, 1.0], &[1.0, 1.5430806348152437]);
    unary_values(
        "tanh",
        &[],
        &[0.0, 1.0, -1.0],
        &[0.0, 0.7615941559557649, -0.7615941559557649],
    );
    unary_values(
        "sigmoid",
        &[],
        &[0.0, 1.0, -1.0],
        &[0.5, 0.7310585786300049, 0.2689414213699951],
    );
    unary_values("softsign", &[], &[0.0, 1.0, -3.0], &[0.0, 0.5, -0.75]);
    unary_values("reciprocal", &[], &[2.0, -0.25, 8.0], &[0.5, -4.0, 0.125]);
    unary_values(
        "erf",
        &[],
        &[0.0, 0.5, 1.0, -1.0],
        &[
            0.0,
            0.5204998778130465,
            0.8427007929497149,
            -0.8427007929497149,
        ],
    );
}

#[test]
fn gamma_forward_only() {
    simpleop_ops::link();
    let sqrt_pi = std::f64::consts::PI.sqrt();
    unary_values(
        "gamma",
        &[],
        &[5.0, 1.0, 0.5, 1.5, 3.0, -0.5],
        &[24.0, 1.0, sqrt_pi, sqrt_pi / 2.0, 2.0, -2.0 * sqrt_pi],
    );
    // No gradient: the checker says so after checking the forward requests.
    let err = GradCheck::new("gamma").range(0.5, 3.0).run().unwrap_err();
    assert!(matches!(err, simpleop::Error::NoGradient { .. }), "{err}");
    let op = Registry::global().unwrap().get("gamma").unwrap().def;
    assert!(op.gradient.is_none());
    assert!(op.inplace.gradient.is_none());
    // Forward requests on every dtype: in place, add-to, and half types.
    for dtype in DType::FLOATS {
        let mut x = NDArray::from_f64(&[5.0, 3.0, 0.5], [3], dtype).unwrap();
        let mut acc = NDArray::full([3], 1.0, dtype);
        simpleop_ops::gamma_into(&x, &mut acc, OpReqType::AddTo).unwrap();
        simpleop_ops::gamma_inplace(&mut x).unwrap();
        let tol = if dtype == DType::BF16 { 1e-2 } else { 1e-3 };
        assert_close("gamma", &x.to_f64_vec(), &[24.0, 2.0, sqrt_pi], tol);
        assert_close("gamma", &acc.to_f64_vec(), &[25.0, 3.0, 1.0 + sqrt_pi], tol);
    }
}

#[test]
fn forward_in_place_where_the_gradient_allows() {
    simpleop_ops::link();
    let reg = Registry::global().unwrap();
    // Forward in place exactly when the gradient does not read the input.
    for op in UNARY.iter().chain(&SCALAR).chain(&COMPARE).chain(&BINARY) {
        let def = reg.get(op).unwrap().def;
        let reads_input = def.gradient.is_some_and(|g| g.needs_inputs != 0);
        assert_eq!(def.inplace.forward.is_some(), !reads_input, "{op}");
        assert_eq!(
            def.inplace.gradient.is_some(),
            def.gradient.is_some(),
            "{op}"
        );
    }
    for op in [
        "sign",
        "round",
        "sqrt",
        "rsqrt",
        "cbrt",
        "exp",
        "expm1",
        "tan",
        "tanh",
        "sigmoid",
        "reciprocal",
    ] {
        assert!(reg.get(op).unwrap().def.inplace.forward.is_some(), "{op}");
    }
    let mut x = NDArray::from_f64(&[0.0, 1.0], [2], DType::F32).unwrap();
    simpleop_ops::exp_inplace(&mut x).unwrap();
    assert_close("exp", &x.to_f64_vec(), &[1.0, std::f64::consts::E], 1e-6);
}

#[test]
fn scalar_ops() {
    simpleop_ops::link();
    for s in [2.5, -1.5, 0.5] {
        check(
            GradCheck::new("_power_scalar")
                .attr("scalar", s)
                .range(0.5, 2.0),
        );
    }
    for s in [2.0, 0.5] {
        check(GradCheck::new("_rpower_scalar").attr("scalar", s));
    }
    for op in ["_maximum_scalar", "_minimum_scalar"] {
        for s in [0.5, -1.0] {
            check(
                GradCheck::new(op)
                    .attr("scalar", s)
                    .shapes(&[&[3, 4]])
                    .inputs(vec![grid(12, 0.1)]),
            );
        }
    }

    unary_values(
        "_power_scalar",
        &[("scalar", 2.0)],
        &[-3.0, 0.5, 1.5],
        &[9.0, 0.25, 2.25],
    );
    unary_values(
        "_power_scalar",
        &[("scalar", 0.5)],
        &[4.0, 0.25, 2.0],
        &[2.0, 0.5, 2f64.sqrt()],
    );
    unary_values(
        "_power_scalar",
        &[("scalar", -1.0)],
        &[4.0, -0.5],
        &[0.25, -2.0],
    );
    unary_values(
        "_rpower_scalar",
        &[("scalar", 2.0)],
        &[3.0, -1.0, 0.5, 0.0],
        &[8.0, 0.5, 2f64.sqrt(), 1.0],
    );
    unary_values(
        "_rpower_scalar",
        &[("scalar", 0.5)],
        &[2.0, -3.0],
        &[0.25, 8.0],
    );
    unary_values(
        "_maximum_scalar",
        &[("scalar", 0.5)],
        &[-1.0, 0.5, 0.75, 3.0],
        &[0.5, 0.5, 0.75, 3.0],
    );
    unary_values(
        "_minimum_scalar",
        &[("scalar", 0.5)],
        &[-1.0, 0.5, 0.75, 3.0],
        &[-1.0, 0.5, 0.5, 0.5],
    );

    // Ties: the gradient goes to x, as MXNet's `x >= s` / `x <= s`.
    for (op, want) in [
        ("_maximum_scalar", [0.0, 1.0, 1.0]),
        ("_minimum_scalar", [1.0, 1.0, 0.0]),
    ] {
        let def = Registry::global().unwrap().get(op).unwrap().def;
        let env = (def.parse)(def, &Attrs::new().with("scalar", 0.5)).unwrap();
        let x = NDArray::from_f64(&[0.25, 0.5, 0.75], [3], DType::F64).unwrap();
        let y = eager::invoke_with(def, &[&x], &env).unwrap();
        let dy = NDArray::ones([3], DType::F64);
        let mut g = vec![NDArray::zeros([3], DType::F64)];
        eager::invoke_backward(
            def,
            &env,
            &dy,
            Some(&y),
            &[&x],
            &mut g,
            &[OpReqType::WriteTo],
        )
        .unwrap();
        assert_eq!(g[0].to_f64_vec(), want, "{op}");
    }
}

#[test]
fn comparison_ops() {
    simpleop_ops::link();
    // Scalar forms: no input is within the finite-difference step of s.
    for op in [
        "_equal_scalar",
        "_not_equal_scalar",
        "_greater_scalar",
        "_greater_equal_scalar",
        "_lesser_scalar",
        "_lesser_equal_scalar",
    ] {
        for s in [0.5, -1.0, 0.4] {
            check(
                GradCheck::new(op)
                    .attr("scalar", s)
                    .shapes(&[&[3, 4]])
                    .inputs(vec![grid(12, 0.1)]),
            );
        }
    }
    // Broadcast forms: a and b on interleaved grids never tie.
    let shapes: [&[&[usize]]; 3] = [
        &[&[2, 3, 4], &[1, 3, 1]],
        &[&[3, 1], &[1, 5]],
        &[&[4], &[2, 3, 4]],
    ];
    for op in [
        "broadcast_equal",
        "broadcast_not_equal",
        "broadcast_greater",
        "broadcast_greater_equal",
        "broadcast_lesser",
        "broadcast_lesser_equal",
    ] {
        for (k, s) in shapes.iter().enumerate() {
            let n: Vec<usize> = s.iter().map(|d| d.iter().product()).collect();
            check_gradients(
                GradCheck::new(op)
                    .shapes(s)
                    .inputs(vec![grid(n[0], 0.1), grid(n[1], 0.225)]),
                k == 0,
            );
        }
    }
    // Same-shape, with ties, to see == at work (gradient: zero, checked
    // by the finite differences, which vanish on both sides of a tie for
    // equality).
    check(
        GradCheck::new("broadcast_equal")
            .shapes(&[&[6], &[6]])
            .inputs(vec![
                vec![-1.5, -0.5, 0.25, 0.5, 1.0, 1.75],
                vec![-1.5, 0.5, 0.25, -0.5, 1.0, 1.0],
            ]),
    );

    // Exactly 0 or 1, in the input's dtype, on every float dtype.
    let x = [-2.0, -0.5, 0.0, 0.5, 0.75, 3.0];
    let b = [0.5, 0.0, 0.0, 1.0, 0.75, -3.0];
    for dtype in DType::FLOATS {
        for (op, want) in [
            ("_equal_scalar", [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]),
            ("_greater_scalar", [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]),
            ("_lesser_scalar", [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]),
        ] {
            let y = eval(op, &[("scalar", 0.5)], &[(&x, &[6])], dtype);
            assert_eq!(y.dtype(), dtype, "{op}");
            assert_eq!(y.to_f64_vec(), want, "{op} {dtype}");
        }
        for (op, want) in [
            ("broadcast_equal", [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]),
            ("broadcast_greater", [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]),
            ("broadcast_lesser", [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]),
        ] {
            let y = eval(op, &[], &[(&x, &[6]), (&b, &[6])], dtype);
            assert_eq!(y.dtype(), dtype, "{op}");
            assert_eq!(y.to_f64_vec(), want, "{op} {dtype}");
        }
        // Broadcasting (2, 1) against (3,).
        let y = eval(
            "broadcast_greater",
            &[],
            &[(&[0.0, 2.0], &[2, 1]), (&[-1.0, 0.0, 1.0], &[3])],
            dtype,
        );
        assert_eq!(y.shape().dims(), &[2, 3]);
        assert_eq!(y.to_f64_vec(), [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        // Random inputs: every output is exactly 0 or 1.
        let r = NDArray::random_uniform([4, 5], -2.0, 2.0, dtype, 3).unwrap();
        let s = NDArray::random_uniform([1, 5], -2.0, 2.0, dtype, 4).unwrap();
        for op in COMPARE {
            let y = if op.starts_with('_') {
                eager::invoke(op, &[&r], &Attrs::new().with("scalar", 0.1)).unwrap()
            } else {
                eager::invoke(op, &[&r, &s], &Attrs::new()).unwrap()
            };
            assert!(
                y.to_f64_vec().iter().all(|v| *v == 0.0 || *v == 1.0),
                "{op} {dtype}"
            );
        }
    }
}

#[test]
fn binary_ops() {
    simpleop_ops::link();
    let n = 12;
    check(GradCheck::new("_power").range(0.5, 2.0));
    check(GradCheck::new("_hypot"));
    check(GradCheck::new("_hypot").range(0.5, 2.0).seed(3));
    for op in ["_maximum", "_minimum"] {
        check(
            GradCheck::new(op)
                .shapes(&[&[3, 4], &[3, 4]])
                .inputs(vec![grid(n, 0.1), grid(n, 0.225)]),
        );
        // And the other way round.
        check(
            GradCheck::new(op)
                .shapes(&[&[3, 4], &[3, 4]])
                .inputs(vec![grid(n, 0.225), grid(n, 0.1)]),
        );
    }
    let shapes: [&[&[usize]]; 3] = [
        &[&[2, 3, 4], &[1, 3, 1]],
        &[&[3, 1], &[1, 5]],
        &[&[4], &[2, 3, 4]],
    ];
    for (k, s) in shapes.iter().enumerate() {
        let first_is_output = k == 0;
        check_gradients(
            GradCheck::new("broadcast_power").shapes(s).range(0.5, 2.0),
            first_is_output,
        );
        let sizes: Vec<usize> = s.iter().map(|d| d.iter().product()).collect();
        for op in ["broadcast_maximum", "broadcast_minimum"] {
            check_gradients(
                GradCheck::new(op)
                    .shapes(s)
                    .inputs(vec![grid(sizes[0], 0.1), grid(sizes[1], 0.225)]),
                first_is_output,
            );
        }
    }

    let a = [2.0, 4.0, 9.0, 0.5, -2.0, 3.0];
    let b = [3.0, 0.5, -0.5, 2.0, 2.0, 4.0];
    let two = |op: &str, a: &[f64], b: &[f64]| {
        eval(op, &[], &[(a, &[a.len()]), (b, &[b.len()])], DType::F64).to_f64_vec()
    };
    let pow = [8.0, 2.0, 1.0 / 3.0, 0.25, 4.0, 81.0];
    let max = [3.0, 4.0, 9.0, 2.0, 2.0, 4.0];
    let min = [2.0, 0.5, -0.5, 0.5, -2.0, 3.0];
    assert_close("_power", &two("_power", &a, &b), &pow, 1e-14);
    assert_close("_maximum", &two("_maximum", &a, &b), &max, 0.0);
    assert_close("_minimum", &two("_minimum", &a, &b), &min, 0.0);
    assert_close(
        "_hypot",
        &two(
            "_hypot",
            &[3.0, -5.0, 0.0, 1e200],
            &[4.0, 12.0, -2.0, 1e200],
        ),
        &[5.0, 13.0, 2.0, 1e200 * 2f64.sqrt()],
        1e-14,
    );
    // The broadcast forms agree with the same-shape forms.
    for (bop, want) in [
        ("broadcast_power", &pow),
        ("broadcast_maximum", &max),
        ("broadcast_minimum", &min),
    ] {
        assert_close(bop, &two(bop, &a, &b), want, 1e-14);
    }
    // (2, 1) ^ (3,) -> (2, 3).
    let y = eval(
        "broadcast_power",
        &[],
        &[(&[2.0, 3.0], &[2, 1]), (&[0.0, 1.0, 2.0], &[3])],
        DType::F64,
    );
    assert_eq!(y.shape().dims(), &[2, 3]);
    assert_eq!(y.to_f64_vec(), [1.0, 2.0, 4.0, 1.0, 3.0, 9.0]);
    let y = eval(
        "broadcast_maximum",
        &[],
        &[(&[0.0, 2.0], &[2, 1]), (&[-1.0, 1.0, 3.0], &[3])],
        DType::F32,
    );
    assert_eq!(y.to_f64_vec(), [0.0, 1.0, 3.0, 2.0, 2.0, 3.0]);

    // Ties follow MXNet: maximum gives a where a >= b, minimum where a <= b.
    for (op, want_a, want_b) in [
        ("_maximum", [0.0, 1.0, 1.0], [1.0, 0.0, 0.0]),
        ("_minimum", [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]),
        ("broadcast_maximum", [0.0, 1.0, 1.0], [1.0, 0.0, 0.0]),
        ("broadcast_minimum", [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]),
    ] {
        let def = Registry::global().unwrap().get(op).unwrap().def;
        let env = (def.parse)(def, &Attrs::new()).unwrap();
        let a = NDArray::from_f64(&[0.25, 0.5, 0.75], [3], DType::F64).unwrap();
        let b = NDArray::full([3], 0.5, DType::F64);
        let y = eager::invoke_with(def, &[&a, &b], &env).unwrap();
        let dy = NDArray::ones([3], DType::F64);
        let mut g = vec![
            NDArray::zeros([3], DType::F64),
            NDArray::zeros([3], DType::F64),
        ];
        let reqs = [OpReqType::WriteTo; 2];
        eager::invoke_backward(def, &env, &dy, Some(&y), &[&a, &b], &mut g, &reqs).unwrap();
        assert_eq!(g[0].to_f64_vec(), want_a, "{op}");
        assert_eq!(g[1].to_f64_vec(), want_b, "{op}");
    }
}

#[test]
fn where_op() {
    simpleop_ops::link();
    // The condition's finite differences vanish even at 0 (both sides are
    // non-zero), so zeros and non-zeros can both be checked.
    let cond = vec![0.0, 1.0, -0.5, 0.0, 2.0, 0.0];
    check(
        GradCheck::new("where")
            .shapes(&[&[2, 3], &[2, 3], &[2, 3]])
            .inputs(vec![cond.clone(), grid(6, 0.1), grid(6, 0.225)]),
    );
    let shapes: [&[&[usize]]; 3] = [
        &[&[2, 3], &[1, 3], &[2, 1]],
        &[&[2, 1], &[2, 3], &[3]],
        &[&[3], &[4, 1], &[]],
    ];
    for (k, s) in shapes.into_iter().enumerate() {
        let sizes: Vec<usize> = s.iter().map(|d| d.iter().product()).collect();
        let c: Vec<f64> = (0..sizes[0])
            .map(|i| if i % 2 == 0 { 0.0 } else { 1.5 })
            .collect();
        check_gradients(
            GradCheck::new("where").shapes(s).inputs(vec![
                c,
                grid(sizes[1], 0.1),
                grid(sizes[2], 0.225),
            ]),
            // Only the first case's condition has the output's shape.
            k == 0,
        );
    }

    // Values, by name and through the typed function.
    for dtype in DType::FLOATS {
        let c = NDArray::from_f64(&cond, [2, 3], dtype).unwrap();
        let x = NDArray::from_f64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], dtype).unwrap();
        let y = NDArray::from_f64(&[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0], [2, 3], dtype).unwrap();
        let out = eager::invoke("where", &[&c, &x, &y], &Attrs::new()).unwrap();
        assert_eq!(out.dtype(), dtype);
        assert_eq!(out.to_f64_vec(), [-1.0, 2.0, 3.0, -4.0, 5.0, -6.0]);
        let out = simpleop_ops::r#where(&c, &x, &y).unwrap();
        assert_eq!(out.to_f64_vec(), [-1.0, 2.0, 3.0, -4.0, 5.0, -6.0]);
    }
    // Broadcast: a (2, 1) condition picks whole rows; y a scalar.
    let c = NDArray::from_f64(&[1.0, 0.0], [2, 1], DType::F64).unwrap();
    let x = NDArray::from_f64(&[1.0, 2.0, 3.0], [3], DType::F64).unwrap();
    let y = NDArray::from_f64(&[9.0], [], DType::F64).unwrap();
    let out = simpleop_ops::r#where(&c, &x, &y).unwrap();
    assert_eq!(out.shape().dims(), &[2, 3]);
    assert_eq!(out.to_f64_vec(), [1.0, 2.0, 3.0, 9.0, 9.0, 9.0]);

    // MXNet 1.x reads a 1-D condition of length x.shape[0] as picking
    // rows, NumPy broadcasting as picking columns: refused, naming the
    // condition and the reshape that gives MXNet's rows.
    let m = NDArray::from_f64(&[1., 2., 3., 4., 5., 6., 7., 8., 9.], [3, 3], DType::F32).unwrap();
    let zeros = NDArray::zeros([3, 3], DType::F32);
    let rows = NDArray::from_f64(&[1.0, 0.0, 1.0], [3], DType::F32).unwrap();
    match simpleop_ops::r#where(&rows, &m, &zeros).unwrap_err() {
        Error::ShapeMismatch {
            op, arg, expected, ..
        } => {
            assert_eq!((op.as_str(), arg.as_str()), ("where", "condition"));
            assert!(expected.contains("reshape it to (3, 1)"), "{expected}");
        }
        e => panic!("{e:?}"),
    }
    let out = simpleop_ops::r#where(&rows.reshape([3, 1]).unwrap(), &m, &zeros).unwrap();
    // MXNet 1.9.1: mx.nd.where([1, 0, 1], m, zeros) on this m
    assert_eq!(out.to_f64_vec(), [1., 2., 3., 0., 0., 0., 7., 8., 9.]);
    // where the axes differ, a 1-D condition broadcasts along the last one
    let x = NDArray::from_f64(&[1., 2., 3., 4., 5., 6.], [2, 3], DType::F32).unwrap();
    let out = simpleop_ops::r#where(&rows, &x, &NDArray::zeros([2, 3], DType::F32)).unwrap();
    assert_eq!(out.to_f64_vec(), [1., 0., 3., 4., 0., 6.]);
    // a mismatch names the argument that does not broadcast
    let two = NDArray::from_f64(&[1.0, 0.0], [2], DType::F32).unwrap();
    let e = simpleop_ops::r#where(&two, &m, &zeros).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "x"),
        "{e:?}"
    );

    // Gradient: zero for the condition, dy to the picked side.
    let def = Registry::global().unwrap().get("where").unwrap().def;
    let env = (def.parse)(def, &Attrs::new()).unwrap();
    let c = NDArray::from_f64(&[0.0, 1.0, -2.0], [3], DType::F64).unwrap();
    let x = NDArray::full([3], 5.0, DType::F64);
    let y = NDArray::full([3], 7.0, DType::F64);
    let out = eager::invoke_with(def, &[&c, &x, &y], &env).unwrap();
    let dy = NDArray::from_f64(&[0.5, 0.25, 2.0], [3], DType::F64).unwrap();
    let mut g: Vec<NDArray> = (0..3)
        .map(|_| NDArray::full([3], 9.0, DType::F64))
        .collect();
    eager::invoke_backward(
        def,
        &env,
        &dy,
        Some(&out),
        &[&c, &x, &y],
        &mut g,
        &[OpReqType::WriteTo; 3],
    )
    .unwrap();
    assert_eq!(g[0].to_f64_vec(), [0.0, 0.0, 0.0]);
    assert_eq!(g[1].to_f64_vec(), [0.0, 0.25, 2.0]);
    assert_eq!(g[2].to_f64_vec(), [0.5, 0.0, 0.0]);
}

#[test]
fn every_op_is_registered_with_a_description() {
    simpleop_ops::link();
    let reg = Registry::global().unwrap();
    let all: Vec<&str> = UNARY
        .iter()
        .chain(&SCALAR)
        .chain(&COMPARE)
        .chain(&BINARY)
        .copied()
        .chain(["where"])
        .collect();
    assert_eq!(all.len(), 30 + 4 + 6 + 7 + 1);
    for op in all {
        assert!(reg.contains(op), "{op} is not registered");
        let def = reg.get(op).unwrap().def;
        assert_eq!(def.name, op);
        assert!(!def.description.trim().is_empty(), "{op}: no description");
        let grads = def.gradient.is_some();
        assert_eq!(grads, op != "gamma", "{op}: gradient");
    }
    assert_eq!(
        reg.get("where").unwrap().def.inputs,
        ["condition", "x", "y"]
    );
}

/// NaN passes through `relu`, `maximum` and `minimum` from either input,
/// in every form and dtype, as in MXNet and PyTorch (the f32 gradients are
/// MXNet's own, in `tests/conformance/mxnet-extra.jsonl`).
#[test]
fn extrema_and_relu_propagate_nan() {
    simpleop_ops::link();
    let nan = f64::NAN;
    let a = [nan, 1.0, nan, -2.0, 3.0, -0.0];
    let b = [1.0, nan, nan, -3.0, 4.0, 0.0];
    let max = [nan, nan, nan, -2.0, 4.0, 0.0];
    let min = [nan, nan, nan, -3.0, 3.0, 0.0];
    let shape = [a.len()];
    let max_half = [nan, 1.0, nan, 0.5, 3.0, 0.5];
    let min_half = [nan, 0.5, nan, -2.0, 0.5, -0.0];
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (op, want) in [("_maximum", &max), ("_minimum", &min)] {
            let got = eval(op, &[], &[(&a, &shape), (&b, &shape)], dtype).to_f64_vec();
            assert_close(&format!("{op} {dtype}"), &got, want, 0.0);
        }
        // Against one broadcast value, as against a scalar; a broadcast
        // NaN wins everywhere.
        for (op, scalar_op, want) in [
            ("broadcast_maximum", "_maximum_scalar", &max_half),
            ("broadcast_minimum", "_minimum_scalar", &min_half),
        ] {
            let got = eval(scalar_op, &[("scalar", 0.5)], &[(&a, &shape)], dtype);
            assert_close(
                &format!("{scalar_op} {dtype}"),
                &got.to_f64_vec(),
                want,
                0.0,
            );
            let got = eval(op, &[], &[(&a, &shape), (&[0.5], &[1])], dtype).to_f64_vec();
            assert_close(&format!("{op} {dtype}"), &got, want, 0.0);
            let got = eval(op, &[], &[(&a, &shape), (&[nan], &[1])], dtype).to_f64_vec();
            assert_close(&format!("{op} {dtype} NaN"), &got, &[nan; 6], 0.0);
        }
        let got = eval("relu", &[], &[(&a, &shape)], dtype).to_f64_vec();
        let want = [nan, 1.0, nan, 0.0, 3.0, 0.0];
        assert_close(&format!("relu {dtype}"), &got, &want, 0.0);
        // -0 gives +0
        assert_eq!(got[5].to_bits(), 0, "relu {dtype}: -0");
    }
}

/// `zeros_like` and `ones_like` pass the gradient checker (their derivative
/// is zero). `BlockGrad`'s gradient is zero by definition, not its
/// derivative (1), so it is checked by value: the identity bit for bit on
/// every dtype, NaN included, under every request; its zero gradient in
/// graphs is checked against MXNet (`mxnet-extra.jsonl`, `BlockGrad/graph`).
#[test]
fn gradient_stopping_ops() {
    simpleop_ops::link();
    for op in ["zeros_like", "ones_like"] {
        check(GradCheck::new(op));
    }
    let bits = |a: &NDArray| -> Vec<u64> { a.to_f64_vec().iter().map(|v| v.to_bits()).collect() };
    for dtype in DType::FLOATS {
        let x = NDArray::from_f64(&[-1.5, f64::NAN, -0.0, 2.0], [2, 2], dtype).unwrap();
        for op in ["BlockGrad", "stop_gradient"] {
            let y = eager::invoke(op, &[&x], &Attrs::new()).unwrap();
            assert_eq!(bits(&y), bits(&x), "{op} {dtype}");
            let mut acc = NDArray::full([2, 2], 1.0, dtype);
            eager::invoke_into_by_name(op, &[&x], &Attrs::new(), &mut acc, OpReqType::AddTo)
                .unwrap();
            let got = acc.to_f64_vec();
            assert_eq!(
                [got[0], got[2], got[3]],
                [-0.5, 1.0, 3.0],
                "{op} {dtype} AddTo"
            );
            assert!(got[1].is_nan(), "{op} {dtype} AddTo");
            let mut inplace = x.deep_copy();
            eager::invoke_inplace_by_name(op, &mut inplace, &[], &Attrs::new()).unwrap();
            assert_eq!(bits(&inplace), bits(&x), "{op} {dtype} in place");
            let mut null = NDArray::full([2, 2], 3.0, dtype);
            eager::invoke_into_by_name(op, &[&x], &Attrs::new(), &mut null, OpReqType::Null)
                .unwrap();
            assert_eq!(null.to_f64_vec(), [3.0; 4], "{op} {dtype} null");
        }
        for (op, want) in [("zeros_like", 0.0), ("ones_like", 1.0)] {
            let y = eager::invoke(op, &[&x], &Attrs::new()).unwrap();
            assert_eq!((y.dtype(), y.to_f64_vec()), (dtype, vec![want; 4]), "{op}");
        }
    }
}
