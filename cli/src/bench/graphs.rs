//! The graphs behind the fused rows, and how the rows bind them.

use std::collections::HashMap;

use simpleop::symbol::{BindConfig, Executor, Symbol};
use simpleop::{Attrs, NDArray, Result};

/// `chain6/eager` as a graph over `x` and `y`.
pub fn chain6_symbol() -> Result<Symbol> {
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let s = |v: f64| Attrs::new().with("scalar", v);
    let a = Symbol::invoke("_mul_scalar", &[&x], &s(0.5))?;
    let a = Symbol::invoke("_plus_scalar", &[&a], &s(1.0))?;
    let a = Symbol::invoke("relu", &[&a], &Attrs::new())?;
    let a = Symbol::invoke("tanh", &[&a], &Attrs::new())?;
    let a = Symbol::invoke("elemwise_mul", &[&a, &y], &Attrs::new())?;
    Symbol::invoke("elemwise_add", &[&a, &x], &Attrs::new())
}

/// `sum((x - y)², axis = 1)`: squared distances of rows.
pub fn row_sq_dist_symbol() -> Result<Symbol> {
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let d = Symbol::invoke("elemwise_sub", &[&x, &y], &Attrs::new())?;
    let sq = Symbol::invoke("square", &[&d], &Attrs::new())?;
    Symbol::invoke("sum", &[&sq], &Attrs::new().with("axis", 1))
}

/// `relu(dot(x, w) + b)`: a dense layer, `b` broadcast along the rows.
pub fn dense_symbol() -> Result<Symbol> {
    let x = Symbol::var("x");
    let w = Symbol::var("w");
    let b = Symbol::var("b");
    let d = Symbol::invoke("dot", &[&x, &w], &Attrs::new())?;
    let s = Symbol::invoke("broadcast_add", &[&d, &b], &Attrs::new())?;
    Symbol::invoke("relu", &[&s], &Attrs::new())
}

/// `smooth_l1(x, scalar = 1)` from primitive ops:
/// `where(|x| < 1, 0.5 x², |x| - 0.5)`.
pub fn smooth_l1_symbol() -> Result<Symbol> {
    let x = Symbol::var("x");
    let s = |v: f64| Attrs::new().with("scalar", v);
    let a = Symbol::invoke("abs", &[&x], &Attrs::new())?;
    let small = Symbol::invoke("_lesser_scalar", &[&a], &s(1.0))?;
    let sq = Symbol::invoke("square", &[&x], &Attrs::new())?;
    let quad = Symbol::invoke("_mul_scalar", &[&sq], &s(0.5))?;
    let lin = Symbol::invoke("_minus_scalar", &[&a], &s(0.5))?;
    Symbol::invoke("where", &[&small, &quad, &lin], &Attrs::new())
}

/// Code generation off, the rest as by default.
pub(super) fn interpreted_config() -> BindConfig {
    BindConfig {
        codegen: false,
        ..BindConfig::default()
    }
}

/// Fusion off, the rest as by default.
pub(super) fn unfused_config() -> BindConfig {
    BindConfig {
        fusion: false,
        ..BindConfig::default()
    }
}

pub(super) fn bind_inference(
    graph: &Symbol,
    args: &[(&str, &NDArray)],
    config: BindConfig,
) -> Result<Executor> {
    let args = args
        .iter()
        .map(|(n, a)| ((*n).to_owned(), (*a).clone()))
        .collect();
    graph.bind_with(args, HashMap::new(), HashMap::new(), config)
}
