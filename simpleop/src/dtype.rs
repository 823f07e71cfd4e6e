//! Element types: [`DType`], the [`Element`] storage trait and the [`Float`]
//! compute trait that op kernels are written against.
//!
//! Dtype dispatch lives in this module and nowhere else: [`dispatch_float!`](crate::dispatch_float)
//! and [`dispatch_any!`](crate::dispatch_any) turn a runtime [`DType`] into a monomorphised call.

pub use half::{bf16, f16};

mod dual;
mod fma;
mod types;
pub use dual::Dual;
#[doc(hidden)]
pub use fma::F32Fma;
pub(crate) use types::stored_as_dtype;
pub use types::{DType, Element, Float};

/// The `Float` methods every float type has under the same names: its
/// infinities, NaN and the NaN test.
macro_rules! special_floats {
    ($t:ident) => {
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
        #[inline(always)]
        fn is_nan(self) -> bool {
            $t::is_nan(self)
        }
    };
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
            special_floats!($t);
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
            special_floats!($t);
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
        $crate::__dispatch_dtype!($dtype, $T => $body,
            [F32 = f32, F64 = f64, F16 = $crate::f16, BF16 = $crate::bf16], _ => $otherwise)
    };
}

/// Runs `$body` with `$T` bound to the Rust type of any [`DType`].
#[macro_export]
macro_rules! dispatch_any {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::__dispatch_dtype!($dtype, $T => $body, [
            F32 = f32, F64 = f64, F16 = $crate::f16, BF16 = $crate::bf16,
            I32 = i32, I64 = i64, U8 = u8
        ])
    };
}

/// The `match` behind [`dispatch_float!`](crate::dispatch_float) and
/// [`dispatch_any!`](crate::dispatch_any): one arm per `DType::$variant`
/// listed, binding `$T` to `$ty`, and `$otherwise` for the rest.
#[doc(hidden)]
#[macro_export]
macro_rules! __dispatch_dtype {
    ($dtype:expr, $T:ident => $body:expr, [$($variant:ident = $ty:ty),* $(,)?] $(, _ => $otherwise:expr)?) => {
        match $dtype {
            $($crate::DType::$variant => {
                type $T = $ty;
                $body
            })*
            $(_ => $otherwise,)?
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
