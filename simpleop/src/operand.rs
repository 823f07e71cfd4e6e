//! [`Operand`]: what the typed op functions accept, so one generated
//! function serves both front ends: `relu(&x)` runs now on an [`NDArray`]
//! and adds a node on a [`Symbol`].

use crate::symbol::Symbol;
use crate::{EnvArguments, NDArray, OpDef, Result, eager};

/// A value an op can be applied to: an array (eager) or a symbol (graph).
pub trait Operand: Sized {
    /// Applies `op` with parsed arguments `env` to `inputs`.
    fn apply(op: &'static OpDef, inputs: &[&Self], env: &EnvArguments) -> Result<Self>;
}

impl Operand for NDArray {
    fn apply(op: &'static OpDef, inputs: &[&Self], env: &EnvArguments) -> Result<Self> {
        eager::invoke_with(op, inputs, env)
    }
}

impl Operand for Symbol {
    fn apply(op: &'static OpDef, inputs: &[&Self], env: &EnvArguments) -> Result<Self> {
        Symbol::apply(op, inputs, env)
    }
}
