//! [`F32Fma`]: `f32` whose vector math uses fused multiply-adds.
//!
//! The AVX2 and AVX-512 tile loops run an op's kernel with `T = F32Fma`
//! instead of `T = f32` ([`Float::Fma`]), so that its transcendentals use
//! [`crate::vmath::fma`]. Everything else is plain `f32` arithmetic: a
//! kernel's own `a * b + c` is still rounded twice, so the kernel means what
//! its author wrote.

use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Rem, Sub, SubAssign};

use crate::dtype::types::{DType, Element, Float, sealed};
use crate::vmath;

/// `f32` for kernels inside FMA tile loops; not a storage type.
#[doc(hidden)]
#[derive(Clone, Copy, Default, PartialEq, PartialOrd)]
#[repr(transparent)]
pub struct F32Fma(pub f32);

impl fmt::Debug for F32Fma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

// SAFETY: `repr(transparent)` over `f32`, which is `Zeroable` and `Pod`.
unsafe impl bytemuck::Zeroable for F32Fma {}
// SAFETY: as above; no padding, every bit pattern valid.
unsafe impl bytemuck::Pod for F32Fma {}

impl sealed::Sealed for F32Fma {}

macro_rules! binary_ops {
    ($($tr:ident::$m:ident, $atr:ident::$am:ident);* $(;)?) => {$(
        impl $tr for F32Fma {
            type Output = F32Fma;
            #[inline(always)]
            fn $m(self, rhs: F32Fma) -> F32Fma {
                F32Fma($tr::$m(self.0, rhs.0))
            }
        }
        impl $atr for F32Fma {
            #[inline(always)]
            fn $am(&mut self, rhs: F32Fma) {
                $atr::$am(&mut self.0, rhs.0)
            }
        }
    )*};
}
binary_ops!(Add::add, AddAssign::add_assign; Sub::sub, SubAssign::sub_assign; Mul::mul, MulAssign::mul_assign);

impl Div for F32Fma {
    type Output = F32Fma;
    #[inline(always)]
    fn div(self, rhs: F32Fma) -> F32Fma {
        F32Fma(self.0 / rhs.0)
    }
}

impl Rem for F32Fma {
    type Output = F32Fma;
    #[inline(always)]
    fn rem(self, rhs: F32Fma) -> F32Fma {
        F32Fma(self.0 % rhs.0)
    }
}

impl Neg for F32Fma {
    type Output = F32Fma;
    #[inline(always)]
    fn neg(self) -> F32Fma {
        F32Fma(-self.0)
    }
}

impl Element for F32Fma {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self.0)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        F32Fma(v as f32)
    }
}

/// Methods that are `f32`'s own.
macro_rules! as_f32 {
    ($($m:ident),*) => {$(
        #[inline(always)]
        fn $m(self) -> Self { F32Fma(<f32 as Float>::$m(self.0)) }
    )*};
}

/// Methods with a fused form in `vmath::fma`.
macro_rules! fused {
    ($($m:ident),*) => {$(
        #[inline(always)]
        fn $m(self) -> Self { F32Fma(vmath::fma::$m(self.0)) }
    )*};
}

impl Float for F32Fma {
    type Compute = F32Fma;
    type Fma = F32Fma;
    #[inline(always)]
    fn to_compute(self) -> F32Fma {
        self
    }
    #[inline(always)]
    fn from_compute(c: F32Fma) -> Self {
        c
    }
    #[inline(always)]
    fn zero() -> Self {
        F32Fma(0.0)
    }
    #[inline(always)]
    fn one() -> Self {
        F32Fma(1.0)
    }
    #[inline(always)]
    fn infinity() -> Self {
        F32Fma(f32::INFINITY)
    }
    #[inline(always)]
    fn neg_infinity() -> Self {
        F32Fma(f32::NEG_INFINITY)
    }
    #[inline(always)]
    fn nan() -> Self {
        F32Fma(f32::NAN)
    }
    as_f32!(
        abs, sign, sqrt, cbrt, tan, asin, acos, atan, sinh, cosh, gamma, floor, ceil, round, trunc
    );
    fused!(
        exp, exp_m1, ln, ln_1p, log2, log10, sin, cos, tanh, erf, sigmoid
    );
    #[inline(always)]
    fn powf(self, y: Self) -> Self {
        F32Fma(vmath::pow(self.0, y.0))
    }
    #[inline(always)]
    fn hypot(self, y: Self) -> Self {
        F32Fma(self.0.hypot(y.0))
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        self.0.is_nan()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_f32_and_math_is_within_an_ulp_of_it() {
        let (a, b) = (F32Fma(1.5), F32Fma(-0.25));
        assert_eq!((a + b).0, 1.25);
        assert_eq!((a * b).0, -0.375);
        assert_eq!((a % F32Fma(1.0)).0, 0.5);
        assert_eq!(<F32Fma as Float>::sign(b).0, -1.0);
        for x in [-3.0f32, -0.5, 0.1, 0.7, 2.0, 9.5] {
            let (p, f) = (<f32 as Float>::tanh(x), F32Fma(x).tanh().0);
            assert!(
                (p.to_bits() as i64 - f.to_bits() as i64).abs() <= 1,
                "tanh({x})"
            );
            let (p, f) = (<f32 as Float>::exp(x), F32Fma(x).exp().0);
            assert!(
                (p.to_bits() as i64 - f.to_bits() as i64).abs() <= 1,
                "exp({x})"
            );
        }
        assert!(bytemuck::cast_slice::<f32, F32Fma>(&[1.0, 2.0])[1] == F32Fma(2.0));
    }
}
