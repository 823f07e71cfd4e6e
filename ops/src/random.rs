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

    /// The output shape is the `shape` argument; `low` and `high` must be
    /// finite with `low <= high` (MXNet's check).
    pub fn shape(_inputs: &[Shape], p: &UniformParams) -> Result<Shape> {
        let bad = |arg: &str, reason: String| Error::BadKwarg {
            op: "_random_uniform".into(),
            arg: arg.into(),
            reason,
        };
        for (arg, v) in [("low", p.low), ("high", p.high)] {
            if !v.is_finite() {
                return Err(bad(arg, format!("expected a finite number, got {v}")));
            }
        }
        if p.low > p.high {
            return Err(bad(
                "high",
                format!("expected at least `low` ({}), got {}", p.low, p.high),
            ));
        }
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

/// Arguments of [`random_normal()`].
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct NormalParams {
    /// Mean of the distribution.
    pub loc: f64,
    /// Standard deviation (≥ 0).
    pub scale: f64,
    /// Output shape.
    pub shape: Vec<usize>,
    /// Output dtype name (`float32`, ...).
    pub dtype: String,
    /// MXNet's device attribute; accepted and ignored on the CPU.
    pub ctx: String,
}

impl Default for NormalParams {
    fn default() -> Self {
        NormalParams {
            loc: 0.0,
            scale: 1.0,
            shape: Vec::new(),
            dtype: "float32".into(),
            ctx: String::new(),
        }
    }
}

/// Samples from the normal distribution with mean `loc` and standard
/// deviation `scale`; reproducible for a given seed, and equal to
/// [`simpleop::NDArray::random_normal`] with that seed.
#[simple_op(name = "_random_normal", kwargs = NormalParams, resources(rng))]
pub mod random_normal {
    use super::NormalParams;
    use simpleop::prelude::*;

    /// The output shape is the `shape` argument; `loc` must be finite and
    /// `scale` finite and non-negative.
    pub fn shape(_inputs: &[Shape], p: &NormalParams) -> Result<Shape> {
        for (arg, v, ok) in [
            ("loc", p.loc, p.loc.is_finite()),
            ("scale", p.scale, p.scale.is_finite() && p.scale >= 0.0),
        ] {
            if !ok {
                return Err(Error::BadKwarg {
                    op: "_random_normal".into(),
                    arg: arg.into(),
                    reason: format!(
                        "expected a finite{} number, got {v}",
                        if arg == "scale" { " non-negative" } else { "" }
                    ),
                });
            }
        }
        Ok(Shape::new(p.shape.clone()))
    }

    /// The output dtype is the `dtype` argument.
    pub fn dtype(_inputs: &[DType], p: &NormalParams) -> Result<DType> {
        super::float_dtype("_random_normal", &p.dtype)
    }

    /// One sample: `loc + scale · z` with `z` standard normal.
    pub fn forward<T: Float>(p: &NormalParams, rng: &mut Rng) -> T {
        T::from_f64(p.loc + p.scale * rng.normal())
    }
}
