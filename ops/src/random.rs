//! Sampling (source ops with the random resource).

use serde::{Deserialize, Serialize};
use simpleop::{DType, Error, Result, simple_op};

/// Arguments of [`random_uniform()`].
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct UniformParams {
    /// Lower bound (inclusive).
    pub low: f64,
    /// Upper bound (exclusive).
    pub high: f64,
    /// Output shape.
    pub shape: Vec<usize>,
    /// Output dtype name (`float32`, ...).
    pub dtype: String,
    /// MXNet's device attribute; accepted and ignored on the CPU.
    pub ctx: String,
}

impl Default for UniformParams {
    fn default() -> Self {
        UniformParams {
            low: 0.0,
            high: 1.0,
            shape: Vec::new(),
            dtype: "float32".into(),
            ctx: String::new(),
        }
    }
}

fn float_dtype(op: &str, name: &str) -> Result<DType> {
    DType::from_name(name)
        .filter(|d| d.is_float())
        .ok_or_else(|| Error::BadKwarg {
            op: op.into(),
            arg: "dtype".into(),
            reason: format!("expected float32, float64, float16 or bfloat16, got `{name}`"),
        })
}

/// Samples uniformly from `[low, high)`; reproducible for a given seed.
#[simple_op(name = "_random_uniform", kwargs = UniformParams, resources(rng))]
pub mod random_uniform {
    use super::UniformParams;
    use simpleop::prelude::*;

    /// The output shape is the `shape` argument.
    pub fn shape(_inputs: &[Shape], p: &UniformParams) -> Result<Shape> {
        Ok(Shape::new(p.shape.clone()))
    }

    /// The output dtype is the `dtype` argument.
    pub fn dtype(_inputs: &[DType], p: &UniformParams) -> Result<DType> {
        super::float_dtype("_random_uniform", &p.dtype)
    }

    /// One sample.
    pub fn forward<T: Float>(p: &UniformParams, rng: &mut Rng) -> T {
        T::from_f64(p.low + (p.high - p.low) * rng.uniform())
    }
}
