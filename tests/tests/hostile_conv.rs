//! Hostile inputs to `Convolution` and `Deconvolution`: every bad kwarg,
//! shape and dtype is an `Err` naming the op and the argument (and what
//! was expected), on the eager path and in shape inference; never a
//! panic.

use std::collections::HashMap;

use simpleop::symbol::Symbol;
use simpleop::{DType, NDArray, Shape, eager};

use simpleop_tests::hostile::{attrs, refused};

const HUGE: &str = "1099511627776";

const X: &[usize] = &[1, 2, 5, 5];
const W: &[usize] = &[4, 2, 3, 3];

#[test]
fn convolution_kwargs_that_cannot_work() {
    let s: &[&[usize]] = &[X, W, &[4]];
    let k = ("kernel", "(3, 3)");
    let f = ("num_filter", "4");
    refused("Convolution", s, &[f], &["kernel", "required"]);
    refused("Convolution", s, &[k], &["num_filter", "positive"]);
    refused("Convolution", s, &[k, ("num_filter", "0")], &["num_filter"]);
    refused(
        "Convolution",
        s,
        &[k, ("num_filter", "-3")],
        &["num_filter"],
    );
    refused("Convolution", s, &[("kernel", "(0, 3)"), f], &["kernel"]);
    refused("Convolution", s, &[("kernel", "(3,)"), f], &["data", "3-D"]);
    refused(
        "Convolution",
        s,
        &[("kernel", "(1, 1, 1, 1)"), f],
        &["kernel", "1 to 3"],
    );
    refused(
        "Convolution",
        s,
        &[("kernel", "(7, 7)"), f],
        &["kernel", "exceeds"],
    );
    refused("Convolution", s, &[k, f, ("stride", "(0, 1)")], &["stride"]);
    refused(
        "Convolution",
        s,
        &[k, f, ("stride", "(1,)")],
        &["stride", "2 entries"],
    );
    refused("Convolution", s, &[k, f, ("dilate", "(0, 1)")], &["dilate"]);
    refused(
        "Convolution",
        s,
        &[k, f, ("dilate", "(3, 3)")],
        &["kernel", "exceeds"],
    );
    refused("Convolution", s, &[k, f, ("pad", "(-1, 0)")], &["pad"]);
    refused(
        "Convolution",
        s,
        &[k, f, ("pad", &format!("({HUGE}, 0)"))],
        &["pad"],
    );
    refused(
        "Convolution",
        s,
        &[("kernel", &format!("({HUGE}, 3)")), f],
        &["kernel"],
    );
    refused(
        "Convolution",
        s,
        &[k, f, ("num_group", "3")],
        &["num_group", "divisor"],
    );
    refused(
        "Convolution",
        s,
        &[k, f, ("num_group", "0")],
        &["num_group"],
    );
    refused(
        "Convolution",
        s,
        &[k, f, ("layout", "NHWC")],
        &["layout", "NCHW"],
    );
    refused("Convolution", s, &[k, f, ("bogus", "1")], &["bogus"]);
}

#[test]
fn convolution_weights_bias_and_data_of_the_wrong_shape() {
    let a = [("kernel", "(3, 3)"), ("num_filter", "4")];
    refused(
        "Convolution",
        &[X, &[4, 2, 3, 2], &[4]],
        &a,
        &["weight", "(4, 2, 3, 3)"],
    );
    refused("Convolution", &[X, &[4, 1, 3, 3], &[4]], &a, &["weight"]);
    refused("Convolution", &[X, W, &[3]], &a, &["bias", "(4,)"]);
    refused("Convolution", &[&[2, 5, 5], W, &[4]], &a, &["data", "4-D"]);
    let nb = [
        ("kernel", "(3, 3)"),
        ("num_filter", "4"),
        ("no_bias", "True"),
    ];
    simpleop_ops::link();
    let (x, w, b) = (
        NDArray::zeros(Shape::from(X), DType::F32),
        NDArray::zeros(Shape::from(W), DType::F32),
        NDArray::zeros(Shape::from([4]), DType::F32),
    );
    let err = eager::invoke("Convolution", &[&x, &w, &b], &attrs(&nb)).unwrap_err();
    assert!(err.to_string().contains("Convolution"), "{err}");
    let err = eager::invoke("Convolution", &[&x], &attrs(&a)).unwrap_err();
    assert!(err.to_string().contains("Convolution"), "{err}");
    // Integer data, and a weight of another dtype.
    let xi = NDArray::zeros(Shape::from(X), DType::I32);
    let err = eager::invoke("Convolution", &[&xi, &w, &b], &attrs(&a)).unwrap_err();
    assert!(err.to_string().contains("data"), "{err}");
    let w64 = NDArray::zeros(Shape::from(W), DType::F64);
    let err = eager::invoke("Convolution", &[&x, &w64, &b], &attrs(&a)).unwrap_err();
    assert!(err.to_string().contains("weight"), "{err}");
}

#[test]
fn deconvolution_kwargs_that_cannot_work() {
    let s: &[&[usize]] = &[&[1, 2, 3, 3], &[2, 2, 3, 3]];
    let k = ("kernel", "(3, 3)");
    let f = ("num_filter", "2");
    refused(
        "Deconvolution",
        s,
        &[k, f, ("adj", "(1, 1)")],
        &["adj", "stride"],
    );
    refused(
        "Deconvolution",
        s,
        &[k, f, ("pad", "(3, 3)")],
        &["pad", "no output"],
    );
    refused(
        "Deconvolution",
        s,
        &[k, f, ("target_shape", "(9, 9)")],
        &["target_shape"],
    );
    refused(
        "Deconvolution",
        s,
        &[k, f, ("target_shape", "(4,)")],
        &["target_shape"],
    );
    refused(
        "Deconvolution",
        s,
        &[k, ("num_filter", "3"), ("num_group", "2")],
        &["num_group"],
    );
    refused(
        "Deconvolution",
        &[&[1, 2, 3, 3], &[2, 3, 3, 3]],
        &[k, f],
        &["weight"],
    );
}

/// Sizes whose products overflow are refused in shape inference,
/// before anything is allocated.
#[test]
fn convolutions_whose_sizes_overflow_are_errors() {
    simpleop_ops::link();
    let a = attrs(&[("kernel", "(1, 1)"), ("num_filter", "2147483646")]);
    let vars = [Symbol::var("x"), Symbol::var("w"), Symbol::var("b")];
    let s = Symbol::invoke("Convolution", &[&vars[0], &vars[1], &vars[2]], &a).unwrap();
    let big = Shape::from([1 << 30, 1, 1 << 30, 1 << 30]);
    let known = HashMap::from([("x".to_string(), big)]);
    let err = s.infer_shape(&known).unwrap_err().to_string();
    assert!(err.contains("Convolution") && err.contains("data"), "{err}");
    assert!(err.contains("fit in memory"), "{err}");
    // A window whose volume alone overflows.
    let a = attrs(&[
        ("kernel", "(1073741824, 1073741824, 1073741824)"),
        ("num_filter", "1"),
    ]);
    let s = Symbol::invoke("Convolution", &[&vars[0], &vars[1], &vars[2]], &a).unwrap();
    let big = Shape::from([1, 1, 1 << 30, 1 << 30, 1 << 30]);
    let err = s
        .infer_shape(&HashMap::from([("x".to_string(), big)]))
        .unwrap_err();
    assert!(err.to_string().contains("fit in memory"), "{err}");
}
