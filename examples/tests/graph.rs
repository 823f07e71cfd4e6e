//! This crate's ops in a symbolic graph: autodiff through the executor
//! matches the closed-form gradient, with and without memory planning, and
//! the graph survives MXNet JSON.

use std::collections::HashMap;

use simpleop::symbol::{BindConfig, GradReq, Symbol};
use simpleop::{DType, NDArray, Shape};
use simpleop_examples::{RowScaleParams, row_scale, scaled_tanh, softplus};

/// `row_scale(scaled_tanh(softplus(x), 0.5), factor)`.
fn model(factor: f64) -> Symbol {
    let x = Symbol::var("x");
    let h = scaled_tanh(&softplus(&x).unwrap(), 0.5).unwrap();
    row_scale(&h, RowScaleParams { factor }).unwrap()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// dy/dx for head gradient `g` (row-major, `cols` per row).
fn expected_grad(x: &[f64], g: &[f64], cols: usize, factor: f64) -> Vec<f64> {
    x.iter()
        .zip(g)
        .enumerate()
        .map(|(i, (&x, &g))| {
            let sp = x.exp().ln_1p();
            let t = (0.5 * sp).tanh();
            g * factor * (i / cols + 1) as f64 * 0.5 * (1.0 - t * t) * sigmoid(x)
        })
        .collect()
}

#[test]
fn autodiff_through_our_ops_matches_the_closed_form() {
    let (rows, cols, factor) = (3, 4, 0.75);
    let xs: Vec<f64> = (0..rows * cols).map(|i| i as f64 * 0.37 - 2.0).collect();
    let gs: Vec<f64> = (0..rows * cols).map(|i| 1.0 - i as f64 * 0.1).collect();
    let want = expected_grad(&xs, &gs, cols, factor);
    for memory_planning in [true, false] {
        for dtype in [DType::F32, DType::F64] {
            let x = NDArray::from_f64(&xs, [rows, cols], dtype).unwrap();
            let args = HashMap::from([("x".to_string(), x)]);
            let grads = HashMap::from([("x".to_string(), NDArray::zeros([rows, cols], dtype))]);
            let reqs = HashMap::from([("x".to_string(), GradReq::Write)]);
            let mut exe = model(factor)
                .bind_with(
                    args,
                    grads,
                    reqs,
                    BindConfig {
                        memory_planning,
                        ..BindConfig::default()
                    },
                )
                .unwrap();
            exe.forward(true).unwrap();
            let head = NDArray::from_f64(&gs, [rows, cols], dtype).unwrap();
            exe.backward(&[head]).unwrap();
            let got = exe.grad("x").unwrap().to_f64_vec();
            let tol = if dtype == DType::F32 { 1e-6 } else { 1e-14 };
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "{dtype}, planning {memory_planning}: element {k}: got {g}, want {w}"
                );
            }
        }
    }
}

#[test]
fn graph_with_our_ops_round_trips_through_json_and_infers_shapes() {
    simpleop_examples::link();
    let y = model(2.0);
    let back = Symbol::from_json(&y.to_json()).unwrap();
    assert_eq!(back.to_json(), y.to_json());
    let known = HashMap::from([("x".to_string(), Shape::new(vec![5, 2]))]);
    let inferred = back.infer_shape(&known).unwrap();
    assert_eq!(inferred.output_shapes, [Some(Shape::new(vec![5, 2]))]);
    // row_scale's shape function rejects 1-D inputs, naming the node's op.
    let bad = HashMap::from([("x".to_string(), Shape::new(vec![5]))]);
    let err = back.infer_shape(&bad).unwrap_err().to_string();
    assert!(err.contains("row_scale"), "{err}");
}
