//! MXNet's activation layers: [`activation()`] (`Activation`, one op for
//! relu, sigmoid, tanh, softrelu and softsign) and [`leaky_relu_simple()`]
//! (`_LeakyReLU_simple`: the elementwise types of `LeakyReLU` — leaky,
//! elu, selu, gelu, and rrelu at inference — which
//! [`crate::leaky_relu::leaky_relu()`] runs them as).
//!
//! Both are elementwise ops with keyword arguments, so they fuse with their
//! neighbours like any unary op. `Activation`'s gradient reads the output
//! only, as MXNet's does for four of its five types, which lets the forward
//! run in place; `LeakyReLU`'s reads the input too (gelu needs it).

use serde::{Deserialize, Serialize};
use simpleop::{Float, simple_op};

/// What [`activation()`] computes (MXNet's `act_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActType {
    /// `max(x, 0)`, as the `relu` op (NaN passes through).
    Relu,
    /// `1 / (1 + e^-x)`, as the `sigmoid` op.
    Sigmoid,
    /// `tanh x`, as the `tanh` op.
    Tanh,
    /// Softplus, `ln(1 + e^x)`, and `x` itself above 20 (MXNet's cut-off).
    Softrelu,
    /// `x / (1 + |x|)`, as the `softsign` op.
    Softsign,
}

/// Keyword arguments of [`activation()`] (MXNet's `ActivationParam`);
/// `act_type` is required.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ActivationParams {
    /// The function: `relu`, `sigmoid`, `tanh`, `softrelu` or `softsign`.
    pub act_type: ActType,
}

/// MXNet's softrelu: `x` above 20, where `ln(1 + e^x)` is `x` in f32.
#[inline(always)]
fn softrelu<T: Float>(x: T) -> T {
    if x > T::from_f64(20.0) {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// The op of the same name, which executors run instead: its kernels are
/// vectorised and compile into fused programs, where this op's per-element
/// `match` on `act_type` does not. `softrelu` has no such op.
fn activation_simple_form(p: &ActivationParams) -> Option<&'static str> {
    match p.act_type {
        ActType::Relu => Some("relu"),
        ActType::Sigmoid => Some("sigmoid"),
        ActType::Tanh => Some("tanh"),
        ActType::Softsign => Some("softsign"),
        ActType::Softrelu => None,
    }
}

/// An activation function chosen by `act_type`, MXNet's `Activation` layer.
/// Each type computes exactly what the op of that name computes (`relu`,
/// `sigmoid`, `tanh`, `softsign`), so a graph may use either spelling.
///
/// The gradient reads the output alone, so the forward may overwrite its
/// input: relu `dy · (y > 0)` (NaN at NaN, as `relu`), sigmoid
/// `dy · y (1 − y)`, tanh `dy · (1 − y²)`, softrelu `dy · (1 − e^−y)`
/// (MXNet's `-expm1(-y)`: the smooth function's, which above 20, where
/// the forward is `x`, stays within f32 rounding of 1 but not f64's),
/// softsign `dy · (1 − |y|)²`, which equals MXNet's
/// `dy / (1 + |x|)²` (MXNet reads the input there; from the output, the
/// relative error grows as `ε·|x|`, below 1e-5 in f32 for `|x| < 100`).
#[simple_op(
    name = "Activation",
    kwargs = ActivationParams,
    inplace = "InOut, OutIn",
    simple_form = super::activation_simple_form
)]
pub mod activation {
    use super::{ActType, ActivationParams};
    use simpleop::prelude::*;

    /// The function `act_type` names.
    #[inline(always)]
    pub fn forward<T: Float>(data: T, p: &ActivationParams) -> T {
        let x = data;
        match p.act_type {
            ActType::Relu => crate::activation::relu::forward(x),
            ActType::Sigmoid => x.sigmoid(),
            ActType::Tanh => x.tanh(),
            ActType::Softrelu => super::softrelu(x),
            ActType::Softsign => x / (T::one() + x.abs()),
        }
    }

    /// `dy` times the derivative, written in the output `y`.
    #[inline(always)]
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>, p: &ActivationParams) -> T {
        let one = T::one();
        match p.act_type {
            ActType::Relu => crate::activation::relu::backward(dy, y),
            ActType::Sigmoid => dy * (*y * (one - *y)),
            ActType::Tanh => dy * (one - *y * *y),
            ActType::Softrelu => dy * -(-*y).exp_m1(),
            ActType::Softsign => {
                let d = one - y.abs();
                dy * (d * d)
            }
        }
    }
}

/// What `LeakyReLU` computes (MXNet's `act_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum LeakyActType {
    /// `x > 0 ? x : slope · x` (the default).
    #[default]
    Leaky,
    /// Randomised leaky ReLU at inference: `leaky` with slope
    /// `(lower_bound + upper_bound) / 2`.
    Rrelu,
    /// `x > 0 ? x : slope · (e^x − 1)`.
    Elu,
    /// `λ · (x > 0 ? x : α (e^x − 1))` with MXNet's λ and α.
    Selu,
    /// `x · Φ(x) = ½ x (1 + erf(x / √2))`, the exact GELU.
    Gelu,
    /// `x > 0 ? x : gamma · x`, with `gamma` a second argument: one slope
    /// per channel (axis 1), or one for all.
    Prelu,
}

impl TryFrom<String> for LeakyActType {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.trim() {
            "leaky" => Ok(LeakyActType::Leaky),
            "rrelu" => Ok(LeakyActType::Rrelu),
            "elu" => Ok(LeakyActType::Elu),
            "selu" => Ok(LeakyActType::Selu),
            "gelu" => Ok(LeakyActType::Gelu),
            "prelu" => Ok(LeakyActType::Prelu),
            other => Err(format!(
                "expected one of leaky, prelu, rrelu, elu, selu, gelu, got `{other}`"
            )),
        }
    }
}

impl From<LeakyActType> for &'static str {
    fn from(t: LeakyActType) -> &'static str {
        match t {
            LeakyActType::Leaky => "leaky",
            LeakyActType::Rrelu => "rrelu",
            LeakyActType::Elu => "elu",
            LeakyActType::Selu => "selu",
            LeakyActType::Gelu => "gelu",
            LeakyActType::Prelu => "prelu",
        }
    }
}

/// Keyword arguments of `LeakyReLU` (MXNet's `LeakyReLUParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct LeakyReLUParams {
    /// The function (default `leaky`).
    pub act_type: LeakyActType,
    /// The negative slope of `leaky` and the scale of `elu` (default 0.25).
    pub slope: f64,
    /// The lower bound of `rrelu`'s slope (default 0.125).
    pub lower_bound: f64,
    /// The upper bound of `rrelu`'s slope (default 0.334).
    pub upper_bound: f64,
}

impl Default for LeakyReLUParams {
    fn default() -> Self {
        LeakyReLUParams {
            act_type: LeakyActType::Leaky,
            slope: 0.25,
            lower_bound: 0.125,
            upper_bound: 0.334,
        }
    }
}

/// SELU's α and λ as MXNet stores them (f32 constants, widened for f64).
const SELU_ALPHA: f32 = 1.673_263_2;
const SELU_LAMBDA: f32 = 1.050_701;

impl LeakyReLUParams {
    /// The slope of `leaky` and `elu`, and `rrelu`'s inference slope
    /// `(lower + upper) / 2`, each in f32 as MXNet's `float` fields.
    #[inline(always)]
    fn slope<T: Float>(&self) -> T {
        let s = match self.act_type {
            LeakyActType::Rrelu => (self.lower_bound as f32 + self.upper_bound as f32) / 2.0,
            _ => self.slope as f32,
        };
        T::from_f64(f64::from(s))
    }
}

/// The elementwise types of MXNet's `LeakyReLU`: `leaky`, `elu`, `selu`,
/// `gelu`, and `rrelu` with its inference slope
/// `(lower_bound + upper_bound) / 2`. `LeakyReLU` runs as this op for
/// them; `prelu` is refused (its slopes are a second argument).
///
/// Gradients are the derivatives, from the input's sign and the output:
/// leaky and rrelu `x > 0 ? 1 : slope`; elu `x > 0 ? 1 : y + slope`
/// (`= slope · e^x`); selu `x > 0 ? λ : y + λα` (`= λα e^x`); gelu
/// `Φ(x) + x φ(x)`. MXNet 1.9.1 differs in two places, where its
/// gradient is not the derivative: selu's is `λ (α + y)` below 0, and
/// its non-oneDNN path (float64, float16) tests the output's sign, so an
/// elu or leaky slope below 0 gets gradient 1 for negative inputs.
#[simple_op(name = "_LeakyReLU_simple", kwargs = LeakyReLUParams, inplace = "OutIn")]
pub mod leaky_relu_simple {
    use super::{LeakyActType, LeakyReLUParams, SELU_ALPHA, SELU_LAMBDA};
    use simpleop::prelude::*;

    /// The input's shape; `prelu` needs `LeakyReLU` and its `gamma`.
    pub fn shape(inputs: &[Shape], p: &LeakyReLUParams) -> Result<Shape> {
        if p.act_type == LeakyActType::Prelu {
            return Err(simpleop::Error::invalid(
                "_LeakyReLU_simple",
                "act_type",
                "prelu takes a second argument, gamma: call LeakyReLU",
            ));
        }
        Ok(inputs[0].clone())
    }

    /// The function `act_type` names.
    #[inline(always)]
    pub fn forward<T: Float>(data: T, p: &LeakyReLUParams) -> T {
        let (x, zero) = (data, T::zero());
        // prelu never gets here (`shape` refuses it)
        if matches!(
            p.act_type,
            LeakyActType::Leaky | LeakyActType::Rrelu | LeakyActType::Prelu
        ) {
            // the common case first, outside the match (measured faster)
            let s = p.slope::<T>();
            return if x > zero { x } else { x * s };
        }
        match p.act_type {
            LeakyActType::Leaky | LeakyActType::Rrelu | LeakyActType::Prelu => {
                if x > zero {
                    x
                } else {
                    x * p.slope::<T>()
                }
            }
            LeakyActType::Elu => {
                if x > zero {
                    x
                } else {
                    p.slope::<T>() * x.exp_m1()
                }
            }
            LeakyActType::Selu => {
                let lambda = T::from_f64(f64::from(SELU_LAMBDA));
                let alpha = T::from_f64(f64::from(SELU_ALPHA));
                lambda * if x > zero { x } else { alpha * x.exp_m1() }
            }
            LeakyActType::Gelu => {
                let half = T::from_f64(0.5);
                half * x * (T::one() + (x * T::from_f64(std::f64::consts::FRAC_1_SQRT_2)).erf())
            }
        }
    }

    /// `dy` times the derivative.
    #[inline(always)]
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>, x: In0<T>, p: &LeakyReLUParams) -> T {
        let (zero, one) = (T::zero(), T::one());
        let positive = *x > zero;
        let d = match p.act_type {
            LeakyActType::Leaky | LeakyActType::Rrelu | LeakyActType::Prelu => {
                if positive {
                    one
                } else {
                    p.slope::<T>()
                }
            }
            LeakyActType::Elu => {
                if positive {
                    one
                } else {
                    *y + p.slope::<T>()
                }
            }
            LeakyActType::Selu => {
                let lambda = T::from_f64(f64::from(SELU_LAMBDA));
                if positive {
                    lambda
                } else {
                    *y + lambda * T::from_f64(f64::from(SELU_ALPHA))
                }
            }
            LeakyActType::Gelu => {
                let z = *x * T::from_f64(std::f64::consts::FRAC_1_SQRT_2);
                let cdf = T::from_f64(0.5) * (one + z.erf());
                // φ(x) = e^(−x²/2) / √(2π)
                let pdf = (-(z * z)).exp() * T::from_f64(0.398_942_280_401_432_7);
                cdf + *x * pdf
            }
        };
        dy * d
    }
}
