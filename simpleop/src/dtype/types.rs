//! The element types themselves: [`DType`], the [`Element`] storage trait and
//! the [`Float`] compute trait.

use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Rem, Sub, SubAssign};

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

pub(crate) mod sealed {
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

/// Whether `T` is as wide as its dtype's elements, so that arrays of the
/// dtype can be viewed as `T`. Every storage type is; a [`crate::Dual`],
/// which reports its value's dtype, is not.
#[inline(always)]
pub(crate) fn stored_as_dtype<T: Element>() -> bool {
    std::mem::size_of::<T>() == T::DTYPE.size()
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
/// Implemented for `f32`, `f64`, `f16` and `bf16`. The framework runs
/// kernels for the half types in f32 (`Compute = f32`) and converts at the
/// edges, so a kernel instantiated with `T = f16` is only seen by code that
/// calls it directly.
///
/// Every method is a plain scalar function; kernels written with them are
/// monomorphised per compute type and vectorised by the drivers
/// (`crate::kernel::simd`). For f32, `exp`, `exp_m1`, `ln`, `ln_1p`,
/// `log2`, `log10`, `tanh`, `sigmoid`, `erf`, `sin`, `cos` and `powf` are
/// branch-free polynomials (`crate::vmath`, with their measured error in
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
    /// True for ±0 exactly: for a [`Dual`](crate::Dual), a zero value with
    /// zero partials (what its chain rule tests). Not part of the kernel
    /// author's API.
    #[doc(hidden)]
    #[inline(always)]
    fn is_exact_zero(self) -> bool {
        self == Self::zero()
    }
}
