//! Optimizer updates. Their state (momentum, Adam's moments) is updated in
//! place: the kernels take it as `&mut T`, which the framework records as
//! the op's mutated inputs (MXNet's `FMutateInputs`). `lr` is required, as
//! in MXNet; the other arguments have MXNet's defaults.

use serde::{Deserialize, Serialize};
use simpleop::simple_op;

fn one() -> f64 {
    1.0
}
fn no_clip() -> f64 {
    -1.0
}
fn beta1() -> f64 {
    0.9
}
fn beta2() -> f64 {
    0.999
}
fn epsilon() -> f64 {
    1e-8
}

/// Declares an optimizer's kwargs: `lr` and the optimizer's own `f64`
/// fields, then the arguments every update takes (`wd`, `rescale_grad`,
/// `clip_gradient`, `lazy_update`) with MXNet's defaults, in MXNet's order.
macro_rules! optimizer_params {
    (
        $(#[$doc:meta])* $name:ident {
            $(#[$lr:meta])* lr,
            $($(#[$field_doc:meta])* $field:ident,)*
        }
        $(#[$clip:meta])* clip_gradient
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
        pub struct $name {
            $(#[$lr])*
            pub lr: f64,
            $($(#[$field_doc])* pub $field: f64,)*
            /// Weight decay.
            #[serde(default)]
            pub wd: f64,
            /// Multiplies the gradient first.
            #[serde(default = "one")]
            pub rescale_grad: f64,
            $(#[$clip])*
            #[serde(default = "no_clip")]
            pub clip_gradient: f64,
            /// MXNet's sparse-update flag; accepted, dense arrays ignore it.
            #[serde(default)]
            pub lazy_update: bool,
        }
    };
}

/// `rescale · g`, clipped to `[-clip, clip]` when `clip >= 0`; a NaN
/// gradient stays NaN, as MXNet's `clip` (upper bound tested first).
#[inline(always)]
fn scaled_grad<T: simpleop::Float>(g: T, rescale: f64, clip: f64) -> T {
    let g = g * T::from_f64(rescale);
    if clip < 0.0 {
        return g;
    }
    let bound = T::from_f64(clip);
    crate::clip::clip_value(g, -bound, bound)
}

optimizer_params! {
    /// Arguments of [`sgd_update()`].
    SgdParams {
        /// Learning rate.
        lr,
    }
    /// Clips the rescaled gradient to `[-c, c]`; negative disables.
    clip_gradient
}

/// SGD step: `weight - lr · (clip(rescale_grad · grad) + wd · weight)`.
#[simple_op(kwargs = SgdParams, inplace = "LhsOut")]
pub mod sgd_update {
    use super::SgdParams;
    use simpleop::prelude::*;

    /// The updated weight.
    pub fn forward<T: Float>(weight: T, grad: T, p: &SgdParams) -> T {
        let g = super::scaled_grad(grad, p.rescale_grad, p.clip_gradient);
        (T::one() - T::from_f64(p.lr * p.wd)) * weight - T::from_f64(p.lr) * g
    }
}

optimizer_params! {
    /// Arguments of [`sgd_mom_update()`].
    SgdMomParams {
        /// Learning rate.
        lr,
        /// Momentum.
        #[serde(default)]
        momentum,
    }
    /// Clips the rescaled gradient to `[-c, c]`; negative disables.
    clip_gradient
}

/// SGD with momentum: `mom = momentum · mom - lr · (wd · weight + clip(rescale_grad · grad))`,
/// then `weight + mom`. `mom` is updated in place.
#[simple_op(kwargs = SgdMomParams, inplace = "LhsOut")]
pub mod sgd_mom_update {
    use super::SgdMomParams;
    use simpleop::prelude::*;

    /// The updated weight; writes the new momentum into `mom`.
    pub fn forward<T: Float>(weight: T, grad: T, mom: &mut T, p: &SgdMomParams) -> T {
        let g = super::scaled_grad(grad, p.rescale_grad, p.clip_gradient);
        *mom = T::from_f64(p.momentum) * *mom
            - T::from_f64(p.lr * p.wd) * weight
            - T::from_f64(p.lr) * g;
        weight + *mom
    }
}

optimizer_params! {
    /// Arguments of [`adam_update()`].
    AdamParams {
        /// Learning rate (bias correction is the caller's, as in MXNet).
        lr,
        /// Decay of the first moment.
        #[serde(default = "beta1")]
        beta1,
        /// Decay of the second moment.
        #[serde(default = "beta2")]
        beta2,
        /// Added to the denominator.
        #[serde(default = "epsilon")]
        epsilon,
    }
    /// Clips the gradient to `[-c, c]`; negative disables.
    clip_gradient
}

/// Adam step: `g = clip(rescale_grad · grad + wd · weight)`, `mean = β1 mean + (1-β1) g`,
/// `var = β2 var + (1-β2) g²`, then `weight - lr · mean / (sqrt(var) + ε)`.
/// `mean` and `var` are updated in place.
#[simple_op(kwargs = AdamParams, inplace = "LhsOut")]
pub mod adam_update {
    use super::AdamParams;
    use simpleop::prelude::*;

    /// The updated weight; writes the new moments into `mean` and `var`.
    pub fn forward<T: Float>(weight: T, grad: T, mean: &mut T, var: &mut T, p: &AdamParams) -> T {
        let g = grad * T::from_f64(p.rescale_grad) + T::from_f64(p.wd) * weight;
        let g = super::scaled_grad(g, 1.0, p.clip_gradient);
        *mean = T::from_f64(p.beta1) * *mean + T::from_f64(1.0 - p.beta1) * g;
        *var = T::from_f64(p.beta2) * *var + T::from_f64(1.0 - p.beta2) * g * g;
        weight - T::from_f64(p.lr) * *mean / (var.sqrt() + T::from_f64(p.epsilon))
    }
}
