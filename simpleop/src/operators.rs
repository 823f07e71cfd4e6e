//! Arithmetic operators on [`NDArray`], mapped to the standard registered
//! ops (MXNet names), so they need `simpleop-ops` linked.
//!
//! Binary operators return `Result<NDArray>` (as candle does): a shape
//! mismatch is an error, not a panic. `a + b` is `elemwise_add` when the
//! shapes agree and `broadcast_add` otherwise; `a + 2.0` is `_plus_scalar`.
//!
//! Compound assignment cannot return a `Result`, so `+=`, `-=`, `*=` and
//! `/=` panic on a bad input; the `try_*` methods are their fallible forms.
//! `a += &b` accumulates `b` into `a`'s buffer with [`OpReqType::AddTo`].

use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

use crate::{EnvArguments, NDArray, OpDef, OpReqType, Result, eager};

fn op(name: &str) -> Result<&'static OpDef> {
    Ok(eager::lookup(name)?.def)
}

fn binary(same: &str, bcast: &str, a: &NDArray, b: &NDArray) -> Result<NDArray> {
    let name = if a.shape() == b.shape() { same } else { bcast };
    eager::invoke_with(op(name)?, &[a, b], &EnvArguments::none())
}

/// `target` updated in place by `same` (shapes equal) or `bcast`.
fn binary_inplace(target: &mut NDArray, other: &NDArray, same: &str, bcast: &str) -> Result<()> {
    let name = if target.shape() == other.shape() {
        same
    } else {
        bcast
    };
    eager::invoke_inplace(op(name)?, target, &[other], &EnvArguments::none())
}

/// `same` of `other` (shapes equal) accumulated into `target` with
/// `AddTo`; else `bcast` of `target` and `other`, in place.
fn accumulate(target: &mut NDArray, other: &NDArray, same: &str, bcast: &str) -> Result<()> {
    if target.shape() == other.shape() {
        let env = EnvArguments::none();
        eager::invoke_into(op(same)?, &[other], &env, target, OpReqType::AddTo)
    } else {
        binary_inplace(target, other, same, bcast)
    }
}

fn scalar(name: &str, a: &NDArray, s: f64) -> Result<NDArray> {
    eager::invoke_with(op(name)?, &[a], &EnvArguments::scalar(s))
}

impl NDArray {
    /// `self += other` as `AddTo`: `other` (same shape) is accumulated into
    /// this buffer; a broadcast `other` goes through `broadcast_add` in place.
    pub fn try_add_assign(&mut self, other: &NDArray) -> Result<()> {
        accumulate(self, other, "_copy", "broadcast_add")
    }
    /// `self -= other`: `-other` accumulated with `AddTo`, or `broadcast_sub` in place.
    pub fn try_sub_assign(&mut self, other: &NDArray) -> Result<()> {
        accumulate(self, other, "negative", "broadcast_sub")
    }
    /// `self *= other`, in place when the storage is not shared.
    pub fn try_mul_assign(&mut self, other: &NDArray) -> Result<()> {
        binary_inplace(self, other, "elemwise_mul", "broadcast_mul")
    }
    /// `self /= other`, in place when the storage is not shared.
    pub fn try_div_assign(&mut self, other: &NDArray) -> Result<()> {
        binary_inplace(self, other, "elemwise_div", "broadcast_div")
    }
    /// Applies a scalar op (`_plus_scalar`, ...) in place.
    pub fn try_scalar_assign(&mut self, op_name: &str, s: f64) -> Result<()> {
        eager::invoke_inplace(op(op_name)?, self, &[], &EnvArguments::scalar(s))
    }
}

macro_rules! binary_ops {
    ($($Trait:ident $method:ident $same:literal $bcast:literal $scalar:literal $rscalar:literal;)*) => {$(
        impl $Trait<&NDArray> for &NDArray {
            type Output = Result<NDArray>;
            fn $method(self, rhs: &NDArray) -> Result<NDArray> {
                binary($same, $bcast, self, rhs)
            }
        }
        impl $Trait<NDArray> for NDArray {
            type Output = Result<NDArray>;
            fn $method(self, rhs: NDArray) -> Result<NDArray> {
                binary($same, $bcast, &self, &rhs)
            }
        }
        impl $Trait<&NDArray> for NDArray {
            type Output = Result<NDArray>;
            fn $method(self, rhs: &NDArray) -> Result<NDArray> {
                binary($same, $bcast, &self, rhs)
            }
        }
        impl $Trait<f64> for &NDArray {
            type Output = Result<NDArray>;
            fn $method(self, rhs: f64) -> Result<NDArray> {
                scalar($scalar, self, rhs)
            }
        }
        impl $Trait<f64> for NDArray {
            type Output = Result<NDArray>;
            fn $method(self, rhs: f64) -> Result<NDArray> {
                scalar($scalar, &self, rhs)
            }
        }
        impl $Trait<&NDArray> for f64 {
            type Output = Result<NDArray>;
            fn $method(self, rhs: &NDArray) -> Result<NDArray> {
                scalar($rscalar, rhs, self)
            }
        }
    )*};
}

binary_ops! {
    Add add "elemwise_add" "broadcast_add" "_plus_scalar" "_plus_scalar";
    Sub sub "elemwise_sub" "broadcast_sub" "_minus_scalar" "_rminus_scalar";
    Mul mul "elemwise_mul" "broadcast_mul" "_mul_scalar" "_mul_scalar";
    Div div "elemwise_div" "broadcast_div" "_div_scalar" "_rdiv_scalar";
}

impl Neg for &NDArray {
    type Output = Result<NDArray>;
    fn neg(self) -> Result<NDArray> {
        eager::invoke_with(op("negative")?, &[self], &EnvArguments::none())
    }
}
impl Neg for NDArray {
    type Output = Result<NDArray>;
    fn neg(self) -> Result<NDArray> {
        -&self
    }
}

macro_rules! assign_ops {
    ($($Trait:ident $method:ident $try:ident $scalar:literal;)*) => {$(
        impl $Trait<&NDArray> for NDArray {
            /// # Panics
            /// On a shape or dtype mismatch; use the `try_` method to get a `Result`.
            fn $method(&mut self, rhs: &NDArray) {
                if let Err(e) = self.$try(rhs) {
                    panic!("{e}");
                }
            }
        }
        impl $Trait<NDArray> for NDArray {
            /// # Panics
            /// On a shape or dtype mismatch; use the `try_` method to get a `Result`.
            fn $method(&mut self, rhs: NDArray) {
                if let Err(e) = self.$try(&rhs) {
                    panic!("{e}");
                }
            }
        }
        impl $Trait<f64> for NDArray {
            /// # Panics
            /// When the standard ops are not linked or the dtype is not a float.
            fn $method(&mut self, rhs: f64) {
                if let Err(e) = self.try_scalar_assign($scalar, rhs) {
                    panic!("{e}");
                }
            }
        }
    )*};
}

assign_ops! {
    AddAssign add_assign try_add_assign "_plus_scalar";
    SubAssign sub_assign try_sub_assign "_minus_scalar";
    MulAssign mul_assign try_mul_assign "_mul_scalar";
    DivAssign div_assign try_div_assign "_div_scalar";
}
