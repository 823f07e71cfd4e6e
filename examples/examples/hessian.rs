//! Gradients of gradients: a Hessian-vector product of a small perceptron
//! (with this crate's own `softplus` as the activation) against finite
//! differences of its gradients, and a WGAN-GP gradient penalty trained
//! for a few steps.
//!
//! ```text
//! cargo run --release --example hessian
//! ```

use std::collections::HashMap;

use simpleop::symbol::GradReq;
use simpleop::{Attrs, DType, NDArray, Result, Symbol};

fn op(name: &str, inputs: &[&Symbol], attrs: &[(&str, &str)]) -> Result<Symbol> {
    let attrs: Attrs = attrs.iter().map(|(k, v)| (*k, *v)).collect();
    Symbol::invoke(name, inputs, &attrs)
}

fn uniform(shape: &[usize], seed: u64) -> Result<NDArray> {
    NDArray::random_uniform(shape.to_vec(), -1.0, 1.0, DType::F64, seed)
}

/// `a + eps·v`, in `a`'s shape.
fn shifted(a: &NDArray, v: &NDArray, eps: f64) -> Result<NDArray> {
    let s: Vec<f64> = a
        .to_f64_vec()
        .iter()
        .zip(v.to_f64_vec())
        .map(|(a, v)| a + eps * v)
        .collect();
    NDArray::from_f64(&s, a.shape().clone(), DType::F64)
}

/// Every output of `s` at `args`.
fn eval(s: &Symbol, args: &[(&str, &NDArray)]) -> Result<Vec<Vec<f64>>> {
    let args = args
        .iter()
        .map(|(k, v)| (k.to_string(), (*v).clone()))
        .collect();
    let mut exe = s.bind(args, HashMap::new(), HashMap::new())?;
    exe.forward(false)?;
    Ok(exe.outputs().iter().map(NDArray::to_f64_vec).collect())
}

/// `H·v = ∇_w (∇_w loss · v)` for `loss = Σ (softplus(x·w1)·w2 − t)²`,
/// against central differences of `∇_w loss` along `v`.
fn hessian_vector_product() -> Result<()> {
    let (x, w1, w2, t) = (
        Symbol::var("x"),
        Symbol::var("w1"),
        Symbol::var("w2"),
        Symbol::var("t"),
    );
    let h = op("softplus", &[&op("dot", &[&x, &w1], &[])?], &[])?;
    let err = op("elemwise_sub", &[&op("dot", &[&h, &w2], &[])?, &t], &[])?;
    let loss = op("sum", &[&op("square", &[&err], &[])?], &[])?;
    let grads = loss.gradient(&["w1", "w2"])?;
    let (v1, v2) = (Symbol::var("v1"), Symbol::var("v2"));
    let along = |k: usize, v: &Symbol| -> Result<Symbol> {
        op(
            "sum",
            &[&op("elemwise_mul", &[&grads.output(k)?, v], &[])?],
            &[],
        )
    };
    let gv = op("elemwise_add", &[&along(0, &v1)?, &along(1, &v2)?], &[])?;
    let hv = gv.gradient(&["w1", "w2"])?;

    let (xv, tv) = (uniform(&[8, 3], 1)?, uniform(&[8, 2], 2)?);
    let (w1v, w2v) = (uniform(&[3, 6], 3)?, uniform(&[6, 2], 4)?);
    let (d1, d2) = (uniform(&[3, 6], 5)?, uniform(&[6, 2], 6)?);
    let exact = eval(
        &hv,
        &[
            ("x", &xv),
            ("t", &tv),
            ("w1", &w1v),
            ("w2", &w2v),
            ("v1", &d1),
            ("v2", &d2),
        ],
    )?;
    let eps = 1e-5;
    let at = |s: f64| -> Result<Vec<Vec<f64>>> {
        let (a, b) = (shifted(&w1v, &d1, s)?, shifted(&w2v, &d2, s)?);
        eval(&grads, &[("x", &xv), ("t", &tv), ("w1", &a), ("w2", &b)])
    };
    let (plus, minus) = (at(eps)?, at(-eps)?);
    let mut worst = 0.0f64;
    for k in 0..2 {
        for ((e, p), m) in exact[k].iter().zip(&plus[k]).zip(&minus[k]) {
            let numeric = (p - m) / (2.0 * eps);
            worst = worst.max((e - numeric).abs() / (1.0 + numeric.abs()));
        }
    }
    println!(
        "Hessian-vector product: largest relative difference from finite differences {worst:.2e}"
    );
    Ok(())
}

/// A critic `D(x) = Σ softplus(x·w1)·w2`, trained to bring
/// `mean((‖∇ₓD‖ − 1)²)` down.
fn gradient_penalty() -> Result<()> {
    let (x, w1, w2) = (Symbol::var("x"), Symbol::var("w1"), Symbol::var("w2"));
    let h = op("softplus", &[&op("dot", &[&x, &w1], &[])?], &[])?;
    let critic = op("sum", &[&op("dot", &[&h, &w2], &[])?], &[])?;
    let gx = critic.gradient(&["x"])?;
    let norms = op(
        "sqrt",
        &[&op(
            "sum",
            &[&op("square", &[&gx], &[])?],
            &[("axis", "1")],
        )?],
        &[],
    )?;
    let off = op("_minus_scalar", &[&norms], &[("scalar", "1")])?;
    let penalty = op("mean", &[&op("square", &[&off], &[])?], &[])?;

    let xv = uniform(&[16, 4], 11)?;
    let mut w = [uniform(&[4, 8], 12)?, uniform(&[8, 1], 13)?];
    let names = ["w1", "w2"];
    for step in 0..=40 {
        let mut args: HashMap<String, NDArray> = HashMap::from([("x".to_string(), xv.clone())]);
        let mut grads = HashMap::new();
        let mut reqs = HashMap::new();
        for (n, a) in names.iter().zip(&w) {
            args.insert(n.to_string(), a.clone());
            grads.insert(n.to_string(), NDArray::zeros(a.shape().clone(), DType::F64));
            reqs.insert(n.to_string(), GradReq::Write);
        }
        let mut exe = penalty.bind(args, grads, reqs)?;
        exe.forward(true)?;
        exe.backward(&[])?;
        if step % 10 == 0 {
            println!(
                "gradient penalty, step {step:2}: {:.6}",
                exe.outputs()[0].to_f64_vec()[0]
            );
        }
        for (k, n) in names.iter().enumerate() {
            let g = exe.grad(n).expect("bound with a gradient").clone();
            w[k] = shifted(&w[k], &g, -0.05)?;
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    simpleop_ops::link();
    simpleop_examples::link();
    hessian_vector_product()?;
    gradient_penalty()
}
