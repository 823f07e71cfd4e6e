//! Typed gradient parameters. A backward function's parameter types say
//! what it reads, and so what the executor must keep from the forward pass
//! (the seed's T0/T1/T2 kinds).

use std::ops::{Add, Deref, Div, Mul, Sub};

use crate::Float;

macro_rules! wrapper {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name<T>(pub T);

        impl<T> Deref for $name<T> {
            type Target = T;
            #[inline(always)]
            fn deref(&self) -> &T {
                &self.0
            }
        }
        impl<T: Float> Mul<T> for $name<T> {
            type Output = T;
            #[inline(always)]
            fn mul(self, rhs: T) -> T { self.0 * rhs }
        }
        impl<T: Float> Add<T> for $name<T> {
            type Output = T;
            #[inline(always)]
            fn add(self, rhs: T) -> T { self.0 + rhs }
        }
        impl<T: Float> Sub<T> for $name<T> {
            type Output = T;
            #[inline(always)]
            fn sub(self, rhs: T) -> T { self.0 - rhs }
        }
        impl<T: Float> Div<T> for $name<T> {
            type Output = T;
            #[inline(always)]
            fn div(self, rhs: T) -> T { self.0 / rhs }
        }
    )*};
}

wrapper! {
    /// The gradient of the op's output (every gradient reads it).
    OutGrad;
    /// The op's forward output (a T1 gradient).
    OutValue;
    /// The first input (a T2 gradient).
    In0;
    /// The second input.
    In1;
    /// The third input.
    In2;
    /// All input blobs, for blob-form gradients that read the inputs.
    Inputs;
    /// Every output's gradient, for ops with several outputs: blob ops
    /// get `&[Option<TBlob>]` (`None` for an output nothing reads, whose
    /// gradient is zero), elementwise ops `[T; M]` (zero there).
    OutGrads;
    /// Every forward output, for ops with several outputs (`&[TBlob]`,
    /// or `[T; M]` elementwise).
    OutValues;
}

/// A blob forward's aux states (`aux = [...]`), in order: read in either
/// mode, written only in training (their requests are `Null` otherwise;
/// see [`crate::RunContext::is_train`]).
#[derive(Debug)]
pub struct AuxStates<T>(pub T);

impl<T> Deref for AuxStates<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for AuxStates<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}
