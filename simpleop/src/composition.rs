//! Gradients written as compositions of registered ops (NNVM's
//! `FGradient`), which give blob ops second derivatives.
//!
//! A blob op's backward kernel is one opaque step; differentiating it
//! would need a second hand-written kernel. An op crate can instead
//! declare the gradient as eager calls of registered ops — `dot`'s is two
//! `dot`s, `sum`'s a broadcast — and register it with
//! [`gradient_composition!`](crate::gradient_composition):
//!
//! ```
//! use simpleop::composition::GradParts;
//! use simpleop::{Attrs, NDArray, Result, eager};
//! # simpleop_ops::link();
//! /// `_copy`'s gradient: the output gradient, copied.
//! fn copy_gradient(p: &GradParts<'_>) -> Result<Vec<Option<NDArray>>> {
//!     Ok(vec![Some(eager::invoke("_copy", &[&p.out_grads[0]], &Attrs::new())?)])
//! }
//! simpleop::gradient_composition!("_my_copy", copy_gradient);
//! ```
//!
//! The op's first derivative stays its backward kernel. Its second
//! derivative (the gradient of its `_backward` node, see
//! [`crate::backward_op`]) records the composition on the eager tape at
//! the call's real shapes and differentiates that. The composition must
//! compute what the kernel computes; `tests/` checks each one against its
//! kernel.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::{EnvArguments, NDArray, OpDef, Result};

/// What a composition reads: one call's arguments and the values around it.
pub struct GradParts<'a> {
    /// The op's parsed arguments.
    pub env: &'a EnvArguments,
    /// The op's arguments (inputs), in order.
    pub inputs: &'a [NDArray],
    /// The op's outputs (hidden ones included) when its gradient reads
    /// them ([`crate::GradSpec::needs_output`]); empty otherwise.
    pub outputs: &'a [NDArray],
    /// The gradient of each output.
    pub out_grads: &'a [NDArray],
}

/// A composition: one gradient per argument of the op, `None` for an
/// argument without one (its gradient is zero).
pub type CompositionFn = for<'a> fn(&GradParts<'a>) -> Result<Vec<Option<NDArray>>>;

/// An op's gradient composition.
pub struct GradientComposition {
    /// The op's registered name.
    pub op: &'static str,
    /// The composition.
    pub gradient: CompositionFn,
    /// Where it was registered (`file:line`).
    pub location: &'static str,
}

inventory::collect!(GradientComposition);

/// Registers `$f` as op `$op`'s gradient composition (see
/// [`crate::composition`]).
#[macro_export]
macro_rules! gradient_composition {
    ($op:expr, $f:path) => {
        $crate::__private::inventory::submit! {
            $crate::composition::GradientComposition {
                op: $op,
                gradient: $f,
                location: concat!(file!(), ":", line!()),
            }
        }
    };
}

/// The composition registered for `op`, if any (of two for one op, the
/// first `inventory` yields).
pub fn composition_of(op: &OpDef) -> Option<&'static GradientComposition> {
    static BY_NAME: OnceLock<HashMap<&'static str, &'static GradientComposition>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| {
            let mut map = HashMap::new();
            for c in inventory::iter::<GradientComposition> {
                map.entry(c.op).or_insert(c);
            }
            map
        })
        .get(op.name)
        .copied()
}
