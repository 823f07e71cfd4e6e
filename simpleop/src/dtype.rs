//! Element types: [`DType`], the [`Element`] storage trait and the [`Float`]
//! compute trait that op kernels are written against.
//!
//! Dtype dispatch lives in this module and nowhere else: [`dispatch_float!`](crate::dispatch_float)
//! and [`dispatch_any!`](crate::dispatch_any) turn a runtime [`DType`] into a monomorphised call.

use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Rem, Sub, SubAssign};

pub use half::{bf16, f16};

mod fma;
#[doc(hidden)]
pub use fma::F32Fma;

/// The element type of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 16-bit IEEE float (computed in f32).
    F16,
    /// bfloat16 (computed in f32).
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 8-bit unsigned integer.
    U8,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U8,
    ];
    /// The dtypes that implement [`Float`].
    pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    /// Whether kernels written against [`Float`] run on this dtype.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// The name MXNet and NumPy use (`float32`, `bfloat16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
        }
    }

    /// Parses an MXNet/NumPy dtype name; `None` when unknown.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// MXNet's type flag (`mshadow::TypeFlag`: 0 float32, 1 float64, 2
    /// float16, 3 uint8, 4 int32, 6 int64, 12 bfloat16), as graph files
    /// write a variable's `__dtype__`.
    pub const fn mxnet_flag(self) -> i32 {
        match self {
            DType::F32 => 0,
            DType::F64 => 1,
            DType::F16 => 2,
            DType::U8 => 3,
            DType::I32 => 4,
            DType::I64 => 6,
            DType::BF16 => 12,
        }
    }

    /// The dtype of MXNet type flag `flag`; `None` for flags without one
    /// here (int8, bool, ...).
    pub fn from_mxnet_flag(flag: i32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.mxnet_flag() == flag)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for u8 {}
}

/// A type that can be stored in an array. Implemented for the seven [`DType`]s.
pub trait Element:
    sealed::Sealed + bytemuck::Pod + Copy + Send + Sync + fmt::Debug + PartialOrd + 'static
{
    /// The runtime tag of this type.
    const DTYPE: DType;
    /// Widens to f64 (exact for every type but i64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// Narrows from f64 with the usual `as` rounding (saturating for integers).
    fn from_f64(v: f64) -> Self;
}

macro_rules! impl_int_element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { v as $t }
        }
    )*};
}
impl_int_element!(i32 => I32, i64 => I64, u8 => U8);

/// The scalar type op kernels are written against.
///
/// Implemented for `f32`, `f64`, [`f16`](struct@f16) and [`bf16`]. The framework runs
/// kernels for the half types in f32 (`Compute = f32`) and converts at the
/// edges, so a kernel instantiated with `T = f16` is only seen by code that
/// calls it directly.
///
/// Every method is a plain scalar function; kernels written with them are
/// monomorphised per compute type and vectorised by the drivers
/// ([`crate::kernel::simd`]). For f32, `exp`, `exp_m1`, `ln`, `ln_1p`,
/// `log2`, `log10`, `tanh`, `sigmoid`, `erf`, `sin`, `cos` and `powf` are
/// branch-free polynomials ([`crate::vmath`], with their measured error in
/// ULP) that vectorise with the kernel; f64 uses std's (libm) functions.
pub trait Float:
    Element
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Rem<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
{
    /// The type the framework computes in: `f32` for f32/f16/bf16, `f64` for f64.
    type Compute: Float<Compute = Self::Compute>;
    /// What the AVX2 and AVX-512 tile loops run kernels in: for `f32`, an
    /// `f32` whose vector math uses fused multiply-adds ([`F32Fma`]); `Self`
    /// otherwise. Not part of the kernel author's API.
    #[doc(hidden)]
    type Fma: Float;
    /// Converts to the compute type.
    fn to_compute(self) -> Self::Compute;
    /// Converts from the compute type (round to nearest even).
    fn from_compute(c: Self::Compute) -> Self;

    /// 0.
    fn zero() -> Self;
    /// 1.
    fn one() -> Self;
    /// Positive infinity.
    fn infinity() -> Self;
    /// Negative infinity.
    fn neg_infinity() -> Self;
    /// A quiet NaN.
    fn nan() -> Self;

    /// `|x|`.
    fn abs(self) -> Self;
    /// -1, 0 or 1: +0 for ±0 and for NaN, as MXNet's and PyTorch's `sign`
    /// (NumPy's gives NaN for NaN).
    fn sign(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Cube root.
    fn cbrt(self) -> Self;
    /// e^x.
    fn exp(self) -> Self;
    /// e^x - 1.
    fn exp_m1(self) -> Self;
    /// Natural log.
    fn ln(self) -> Self;
    /// ln(1 + x).
    fn ln_1p(self) -> Self;
    /// log2.
    fn log2(self) -> Self;
    /// log10.
    fn log10(self) -> Self;
    /// x^y.
    fn powf(self, y: Self) -> Self;
    /// sin.
    fn sin(self) -> Self;
    /// cos.
    fn cos(self) -> Self;
    /// tan.
    fn tan(self) -> Self;
    /// asin.
    fn asin(self) -> Self;
    /// acos.
    fn acos(self) -> Self;
    /// atan.
    fn atan(self) -> Self;
    /// sinh.
    fn sinh(self) -> Self;
    /// cosh.
    fn cosh(self) -> Self;
    /// tanh.
    fn tanh(self) -> Self;
    /// The error function.
    fn erf(self) -> Self;
    /// The logistic function `1 / (1 + e^-x)`, accurate for large |x|.
    fn sigmoid(self) -> Self;
    /// The gamma function.
    fn gamma(self) -> Self;
    /// sqrt(x² + y²) without undue overflow.
    fn hypot(self, y: Self) -> Self;
    /// Largest integer ≤ x.
    fn floor(self) -> Self;
    /// Smallest integer ≥ x.
    fn ceil(self) -> Self;
    /// Nearest integer, halves away from zero.
    fn round(self) -> Self;
    /// Integer part.
    fn trunc(self) -> Self;
    /// `a > b ? a : b`, the branch-free form that vectorises: `other` when
    /// either is NaN (unlike the `_maximum` op, which propagates NaN).
    #[inline(always)]
    fn max(self, other: Self) -> Self {
        if self > other { self } else { other }
    }
    /// `a < b ? a : b`: `other` when either is NaN.
    #[inline(always)]
    fn min(self, other: Self) -> Self {
        if self < other { self } else { other }
    }
    /// 1 / x.
    #[inline(always)]
    fn recip(self) -> Self {
        Self::one() / self
    }
    /// True for NaN.
    fn is_nan(self) -> bool;
}

macro_rules! native_unary {
    ($t:ident; $($m:ident),*) => {$(
        #[inline(always)]
        fn $m(self) -> Self { $t::$m(self) }
    )*};
}

/// f64 math: std (libm quality, scalar) and libm's erf.
mod vm64 {
    pub use libm::erf;
    macro_rules! std64 {
        ($($m:ident => $s:ident),*) => {$(
            #[inline(always)]
            pub fn $m(x: f64) -> f64 { x.$s() }
        )*};
    }
    std64!(exp => exp, exp_m1 => exp_m1, ln => ln, ln_1p => ln_1p, log2 => log2, log10 => log10,
           sin => sin, cos => cos, tanh => tanh);
    #[inline(always)]
    pub fn pow(x: f64, y: f64) -> f64 {
        x.powf(y)
    }
    /// `1/(1+e^-x)`, from `e^-|x|` so that it is accurate for large |x|.
    #[inline(always)]
    pub fn sigmoid(x: f64) -> f64 {
        let e = (-x.abs()).exp();
        let s = 1.0 / (1.0 + e);
        if x >= 0.0 { s } else { e * s }
    }
}

macro_rules! vector_math {
    ($vm:path; $($m:ident),*) => {$(
        #[inline(always)]
        fn $m(self) -> Self { { use $vm as vm; vm::$m(self) } }
    )*};
}

macro_rules! impl_native_float {
    ($t:ident, $d:ident, $vm:path, $gamma:path, $fma:ty) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
        impl Float for $t {
            type Compute = $t;
            type Fma = $fma;
            #[inline(always)]
            fn to_compute(self) -> $t {
                self
            }
            #[inline(always)]
            fn from_compute(c: $t) -> Self {
                c
            }
            #[inline(always)]
            fn zero() -> Self {
                0.0
            }
            #[inline(always)]
            fn one() -> Self {
                1.0
            }
            #[inline(always)]
            fn infinity() -> Self {
                $t::INFINITY
            }
            #[inline(always)]
            fn neg_infinity() -> Self {
                $t::NEG_INFINITY
            }
            #[inline(always)]
            fn nan() -> Self {
                $t::NAN
            }
            native_unary!($t; abs, sqrt, cbrt, tan, asin, acos, atan, sinh, cosh, floor, ceil, round, trunc);
            vector_math!($vm; exp, exp_m1, ln, ln_1p, log2, log10, sin, cos, tanh, erf, sigmoid);
            #[inline(always)]
            fn sign(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            }
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                { use $vm as vm; vm::pow(self, y) }
            }
            #[inline(always)]
            fn gamma(self) -> Self {
                $gamma(self)
            }
            #[inline(always)]
            fn hypot(self, y: Self) -> Self {
                $t::hypot(self, y)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
        }
    };
}
impl_native_float!(f32, F32, crate::vmath, libm::tgammaf, F32Fma);
impl_native_float!(f64, F64, vm64, libm::tgamma, f64);

macro_rules! half_unary {
    ($($m:ident),*) => {$(
        #[inline(always)]
        fn $m(self) -> Self { Self::from_f32(<f32 as Float>::$m(self.to_f32())) }
    )*};
}

/// `v` rounded to f32 toward zero, with the last bit set when that lost
/// anything ("round to odd"). Rounding the result to nearest once more, to
/// a format at least two bits narrower (f16, bf16), gives `v` correctly
/// rounded to that format; going through `v as f32` would round twice and
/// turn some values just above a tie into the tie.
fn f64_to_f32_odd(v: f64) -> f32 {
    let r = v as f32;
    if f64::from(r) == v || v.is_nan() {
        return r;
    }
    // `r` is the nearest f32 (±inf past the largest); one step toward zero
    // of its magnitude when it rounded away from zero. Never from zero:
    // a zero `r` is no larger than `v`.
    let bits = r.to_bits();
    let toward_zero = if f64::from(r).abs() > v.abs() {
        bits - 1
    } else {
        bits
    };
    f32::from_bits(toward_zero | 1)
}

macro_rules! impl_half_float {
    ($t:ident, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                $t::to_f64(self)
            }
            /// Correctly rounded (nearest, ties to even). `half`'s own
            /// `from_f64` decides ties on the upper 32 bits of the f64
            /// alone, so it rounds some values down that lie above a tie,
            /// exact f32 values among them.
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                $t::from_f32(f64_to_f32_odd(v))
            }
        }
        impl Float for $t {
            type Compute = f32;
            type Fma = $t;
            #[inline(always)]
            fn to_compute(self) -> f32 {
                self.to_f32()
            }
            #[inline(always)]
            fn from_compute(c: f32) -> Self {
                $t::from_f32(c)
            }
            #[inline(always)]
            fn zero() -> Self {
                $t::ZERO
            }
            #[inline(always)]
            fn one() -> Self {
                $t::ONE
            }
            #[inline(always)]
            fn infinity() -> Self {
                $t::INFINITY
            }
            #[inline(always)]
            fn neg_infinity() -> Self {
                $t::NEG_INFINITY
            }
            #[inline(always)]
            fn nan() -> Self {
                $t::NAN
            }
            half_unary!(
                abs, sign, sqrt, cbrt, exp, exp_m1, ln, ln_1p, log2, log10, sin, cos, tan, asin,
                acos, atan, sinh, cosh, tanh, erf, sigmoid, gamma, floor, ceil, round, trunc
            );
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                Self::from_f32(<f32 as Float>::powf(self.to_f32(), y.to_f32()))
            }
            #[inline(always)]
            fn hypot(self, y: Self) -> Self {
                Self::from_f32(self.to_f32().hypot(y.to_f32()))
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
        }
    };
}
impl_half_float!(f16, F16);
impl_half_float!(bf16, BF16);

/// Runs `$body` with `$T` bound to the Rust type of a float [`DType`];
/// evaluates `$otherwise` for integer dtypes.
///
/// This and [`dispatch_any!`](crate::dispatch_any) are the only places where a runtime dtype
/// becomes a static type.
///
/// `$T` is an alias of a concrete type (`f32`, ...), not a generic
/// parameter, so its associated types need the trait named:
/// `<T as Float>::Compute`, not `T::Compute` (error E0223). Kernels with
/// more than a line or two read best as a generic `fn kernel<T: Float>`
/// that the body calls, as the built-in blob ops do.
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:expr, _ => $otherwise:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::bf16;
                $body
            }
            _ => $otherwise,
        }
    };
}

/// Runs `$body` with `$T` bound to the Rust type of any [`DType`].
#[macro_export]
macro_rules! dispatch_any {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::bf16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("float8"), None);
    }

    /// Every finite value of `T` (both signs), with the midpoint to the
    /// next one up: the midpoint rounds to the one with an even last bit,
    /// and anything above or below it (by one f64 ulp, or by an amount
    /// only the lower half of the f64 holds) to the nearer neighbour.
    fn rounds_from_f64_correctly<T: Element + Float>(
        bits: impl Fn(T) -> u16,
        from_bits: impl Fn(u16) -> T,
        max_bits: u16,
    ) {
        let to = |v: f64| bits(T::from_f64(v));
        for p in 0..=u16::MAX {
            let lo = from_bits(p).to_f64();
            let next = from_bits(p.wrapping_add(1)).to_f64();
            if !lo.is_finite() || !next.is_finite() || lo.to_bits() >> 63 != next.to_bits() >> 63 {
                continue;
            }
            assert_eq!(to(lo), p, "{lo} itself");
            if lo == 0.0 && next == 0.0 {
                continue;
            }
            let mid = (lo + next) / 2.0; // exact: f64 has bits to spare
            let even = if p % 2 == 0 { p } else { p + 1 };
            assert_eq!(to(mid), even, "the tie {mid} between {lo} and {next}");
            let (toward_next, toward_lo) = (
                mid + (next - lo) * 2f64.powi(-40),
                mid - (next - lo) * 2f64.powi(-40),
            );
            assert_eq!(
                to(toward_next),
                p + 1,
                "{toward_next}, just past the tie toward {next}"
            );
            assert_eq!(
                to(toward_lo),
                p,
                "{toward_lo}, just short of the tie, toward {lo}"
            );
            let up = f64::from_bits(mid.to_bits() + 1);
            assert_eq!(
                to(up),
                if mid.abs() < up.abs() { p + 1 } else { p },
                "one f64 ulp off the tie {mid}"
            );
        }
        assert!(T::from_f64(f64::NAN).to_f64().is_nan());
        assert_eq!(T::from_f64(f64::INFINITY).to_f64(), f64::INFINITY);
        assert_eq!(T::from_f64(f64::MAX).to_f64(), f64::INFINITY);
        assert_eq!(T::from_f64(-f64::MAX).to_f64(), f64::NEG_INFINITY);
        assert_eq!(bits(T::from_f64(-0.0)), 0x8000);
        for (tiny, zero) in [(f64::from_bits(1), 0), (-f64::from_bits(1), 0x8000)] {
            assert_eq!(
                bits(T::from_f64(tiny)),
                zero,
                "{tiny:e} is far below half a step"
            );
        }
        // Past the largest value: its tie with the next power of two
        // rounds to infinity (the even side), anything short of it to MAX.
        let max = from_bits(max_bits).to_f64();
        let step = max - from_bits(max_bits - 1).to_f64();
        for sign in [1.0, -1.0] {
            let tie = sign * (max + step / 2.0);
            assert!(
                T::from_f64(tie).to_f64().is_infinite(),
                "{tie:e}, the tie past MAX"
            );
            let below = f64::from_bits(tie.to_bits() - 1);
            assert_eq!(
                T::from_f64(below).to_f64(),
                sign * max,
                "{below:e}, short of the tie past MAX"
            );
        }
    }

    #[test]
    fn half_types_round_from_f64_correctly() {
        rounds_from_f64_correctly(f16::to_bits, f16::from_bits, 0x7bff);
        rounds_from_f64_correctly(bf16::to_bits, bf16::from_bits, 0x7f7f);
        // An exact f32 just above a bf16 tie (1 + 2^-8 + 2^-23): `half`'s
        // bf16::from_f64 took it for the tie and rounded down.
        let x = f32::from_bits(0x3f80_8001);
        assert_eq!(<bf16 as Element>::from_f64(f64::from(x)).to_bits(), 0x3f81);
        // Every 65,537th f32 pattern: f64 and f32 routes agree.
        for b in (0..=u32::MAX).step_by(65_537) {
            let x = f32::from_bits(b);
            if x.is_nan() {
                continue;
            }
            assert_eq!(
                <bf16 as Element>::from_f64(f64::from(x)).to_bits(),
                bf16::from_f32(x).to_bits(),
                "{x:e}"
            );
            assert_eq!(
                <f16 as Element>::from_f64(f64::from(x)).to_bits(),
                f16::from_f32(x).to_bits(),
                "{x:e}"
            );
        }
    }

    #[test]
    fn half_types_compute_in_f32() {
        let x = f16::from_f32(0.5);
        assert_eq!(x.exp().to_f32(), f16::from_f32(0.5f32.exp()).to_f32());
        assert_eq!(bf16::from_f32(-2.0).sign().to_f32(), -1.0);
        assert_eq!(<f32 as Float>::sign(0.0), 0.0);
        assert_eq!(<f64 as Float>::sign(f64::NAN).to_bits(), 0);
        assert_eq!(<f32 as Float>::sign(-0.0).to_bits(), 0);
    }

    #[test]
    fn dispatch_binds_the_right_type() {
        for d in DType::ALL {
            let size = dispatch_any!(d, T => std::mem::size_of::<T>());
            assert_eq!(size, d.size());
            let float = dispatch_float!(d, T => <T as Element>::DTYPE == d, _ => false);
            assert_eq!(float, d.is_float());
        }
    }
}
