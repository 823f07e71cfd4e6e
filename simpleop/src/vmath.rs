//! Branch-free `f32` vector-math kernels.
//!
//! Every function here is `#[inline(always)]`, free of data-dependent branches,
//! table lookups and libm calls, so that a per-element loop over a slice
//! auto-vectorises (SSE2, AVX2+FMA, AVX-512).  Conditionals are only written as
//! `if c { a } else { b }` over already-computed values, which LLVM lowers to
//! blends.
//!
//! Each function comes in two forms that differ only in how `a * b + c` is
//! evaluated: the plain form ([`exp`], ...) rounds twice and gives the same
//! bits on every target; the [`fma`] form ([`fma::exp`], ...) fuses it into
//! one multiply-add, which is faster where the CPU has FMA and is
//! what the AVX2 and AVX-512 tile loops use.  Both meet the bounds below.
//! [`avx512`] and [`avx2`] have explicit 16- and 8-lane forms of `exp`,
//! `tanh`, `sigmoid` and `ln` that return the [`fma`] forms' bits with
//! fewer instructions; the built-in ops run them through
//! [`crate::kernel::VectorForm`]s.
//!
//! Polynomial coefficients were fitted for this module (near-minimax via
//! Lawson-iterated, error-weighted least squares on Chebyshev nodes with the
//! target evaluated in extended precision, then rounded to `f32` one
//! coefficient at a time with re-fitting of the rest) over the reduced
//! intervals stated on each function.
//!
//! # Measured accuracy
//!
//! Maximum error in ULP (ordered-integer distance between the result and the
//! correctly rounded `f64` reference; in the subnormal range one ULP is
//! 2^-149, i.e. this is an absolute error bound there).  Reference: std's
//! `f64` functions; for `erf` an `f64` series implemented in the tests.
//! "Exhaustive" = every `f32` input (all 2^32 bit patterns; for the
//! logarithms all non-negative patterns, negatives are NaN by a select),
//! checked once with a release build outside this file.  The unit tests
//! below re-check the same bounds on a sample: every 601st bit pattern of
//! the finite range, both signs (7.1 M points), plus 2^20 evenly spaced bit
//! patterns per sign in the range given in brackets.
//!
//! The bounds hold for both forms: the [`fma`] forms were also checked
//! exhaustively (same inputs, same maxima), and the unit tests sweep both.
//! `tanh` and `sigmoid` were checked in the AVX-512 loop that LLVM
//! vectorises them into (all 2^32 inputs, both forms), which also confirmed
//! that their results never leave \[-1, 1\] and \[0, 1\], are exactly ±1,
//! 1 or 0 wherever the correctly rounded value is, and that `tanh` is odd
//! bit for bit (signed zeros included); the two forms differ by at most
//! 2 ULP (`tanh`) and 4 ULP (`sigmoid`) from each other.
//!
//! | function  | max ULP | checked over |
//! |-----------|---------|--------------|
//! | `exp`     | 1 | exhaustive; tests + \[0, 1\] + \[80, 104\] (overflow and subnormal results) |
//! | `exp_m1`  | 1 | exhaustive; tests + \[0, 1\] |
//! | `ln`      | 1 | exhaustive (subnormals included; 7.4e7 inputs reach 1 in the `fma` form, 1.5e7 in the plain one); tests + \[0.5, 2\] |
//! | `ln_1p`   | 1 | exhaustive; tests + \[0, 1\] |
//! | `log2`    | 1 | exhaustive; tests + \[0.5, 2\] |
//! | `log10`   | 1 | exhaustive; tests + \[0.5, 2\] |
//! | `tanh`    | 3 | exhaustive (10 inputs reach 3 in the `fma` form, 50 in the plain one, all with 0.0309 <= \|x\| < 0.0626; 1.4e6 reach 2); tests + \[0, 2\] + \[8, 10\] (saturation) |
//! | `sigmoid` | 2 | exhaustive (about 4.8e6 inputs reach 2); tests + \[0, 20\] + \[80, 104\] (subnormal results) |
//! | `erf`     | 1 | exhaustive (subnormals included); tests + \[0, 4\] |
//! | `sin`     | 1 | exhaustive over \|x\| <= 2^24; tests: every 293rd pattern of \|x\| <= 2^24, + \[0, 8\], + the f32 nearest k·π/2 and its two neighbours for 0 < k < 2^20 |
//! | `cos`     | 1 | same as `sin` |
//! | `pow`     | 0 measured (1 asserted) | 10^6 pseudo-random (x, y): x any positive finite, y scaled so x^y spans the f32 range, plus negative x with integer y; special values checked bit-for-bit against `f32::powf` |
//!
//! `sin`/`cos`: the argument reduction is Cody–Waite in `f64` with a two-part
//! π/2 (29 + 53 bits), exact for |x| <= 2^24.  Beyond that the result is
//! finite and within \[-1, 1\] but meaningless; ±inf and NaN give NaN.
//! The reduction (and all of `pow`) runs in `f64`, which still vectorises
//! but at half the lane count.
//!
//! Special values follow std: NaN in gives NaN out, `exp` overflows to +inf
//! and underflows gradually through the subnormals, `ln(0) = -inf`,
//! `ln(x < 0) = NaN`, `ln_1p(-1) = -inf`, `tanh(±inf) = ±1`, `erf(±inf) = ±1`,
//! signed zeros are preserved by the odd functions.

use std::f32::consts::{LN_2, LOG2_E};

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;

/// `1.5 * 2^23`: adding and subtracting it rounds an `f32` with |v| < 2^22
/// to the nearest integer (ties to even); the integer is then in the low
/// mantissa bits of the sum.
pub(crate) const ROUND_MAGIC: f32 = 12_582_912.0;
/// High part of ln 2 (15 significant bits, so `n * LN2_HI` is exact).
pub(crate) const LN2_HI: f32 = 0.693_145_75;
/// Low part of ln 2.
pub(crate) const LN2_LO: f32 = 1.428_606_8e-6;
/// High part of log2(e) (12 significant bits).
const LOG2E_HI: f32 = 1.442_382_8;
/// Low part of log2(e).
const LOG2E_LO: f32 = 3.122_284e-4;
/// High part of log10(e) (12 significant bits).
const LOG10E_HI: f32 = 0.434_204_1;
/// Low part of log10(e).
const LOG10E_LO: f32 = 9.038_034e-5;
/// log10(e).
const LOG10E: f32 = std::f32::consts::LOG10_E;
/// High part of log10(2) (15 significant bits).
const LOG10_2_HI: f32 = 0.301_025_4;
/// Low part of log10(2).
const LOG10_2_LO: f32 = 4.605_039e-6;

/// e^r = 1 + r + r^2 P(r), r in [-ln2/2, ln2/2].
pub(crate) const EXP_P: [f32; 5] = [
    0.499_999_94,
    0.166_665_21,
    0.041_668_26,
    0.008_368_669,
    0.001_382_136_3,
];
/// e^r - 1 = r + r^2 P(r), r in [-ln2/2, ln2/2] (relative-error fit).
const EXPM1_P: [f32; 6] = [
    0.5,
    0.166_666_66,
    0.041_666_493,
    0.008_333_545,
    0.001_393_231_9,
    0.000_197_624_51,
];
/// ln(1+f) = f + f^2 R(f), f in [sqrt(1/2)-1, sqrt(2)-1], for [`ln`]
/// (relative error 3.0e-8 before rounding).
const LN_R: [f32; 8] = [
    -0.499_999_9,
    0.333_339_48,
    -0.250_017_85,
    0.199_621_57,
    -0.165_700_3,
    0.149_167_63,
    -0.143_098_68,
    0.087_405_376,
];
/// ln(1+f) = f + f^2 Q(f), same interval, one degree more (4.2e-9) for the
/// functions that recombine in more steps.
const LN_Q: [f32; 9] = [
    -0.499_999_88,
    0.333_333_25,
    -0.250_016,
    0.200_02,
    -0.166_087_63,
    0.141_812_19,
    -0.132_446_89,
    0.129_084_99,
    -0.076_228_62,
];
/// (e^{2h} - 1)/2 = h + h^2 G(h), h in [-ln2/4, ln2/4] (relative-error fit,
/// 1.4e-8 before rounding; one coefficient more would give 4e-10 and a
/// 2 ULP `tanh`, but cost more time than it is worth).
pub(crate) const TANH_G: [f32; 5] = [
    0.999_999_94,
    0.666_661_86,
    0.333_339_5,
    0.133_860_02,
    0.044_384_88,
];
/// Beyond this |x|, tanh(x) rounds to ±1 (it does from 9.011 on), and so
/// does the formula: there `f + 1` rounds to `f`.
pub(crate) const TANH_CLAMP: f32 = 9.1;
/// The n for which `exp`'s p 2^n (p = e^r in [0.70, 1.42]) is a normal,
/// finite float, so adding n to p's exponent field is the exact product:
/// the AVX2 forms' shortcut past the two scalings by 2^(n/2).
#[cfg(target_arch = "x86_64")]
pub(crate) const EXP_NORMAL_N: (i32, i32) = (-125, 127);
/// erf(x) = x + x E(x^2), |x| in [0, 1].
const ERF_S: [f32; 8] = [
    0.128_379_17,
    -0.376_126_3,
    0.112_836_316,
    -0.026_856_491,
    0.005_195_774,
    -0.000_811_715_26,
    8.619_014e-5,
    -2.156_915_1e-6,
];
/// erf(x) = 1 - exp(G(x - 2.5) - x^2), x in [1, 4].
const ERF_G: [f32; 8] = [
    -1.556_815_3,
    -0.352_680_5,
    0.056_108_04,
    -0.010_854_354,
    0.002_165_170_2,
    -0.000_431_919_56,
    6.145_134e-5,
    -2.173_923_2e-5,
];
/// sin(r) = r + r^3 S(r^2), |r| <= pi/4.
const SIN_S: [f32; 4] = [
    -0.166_666_67,
    0.008_333_379,
    -0.000_198_530_92,
    2.833_073e-6,
];
/// cos(r) = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4.
const COS_C: [f32; 4] = [
    0.041_666_668,
    -0.001_388_898,
    2.482_202_2e-5,
    -2.888_124_6e-7,
];
/// `1.5 * 2^52`, the `f64` rounding constant.
const ROUND_MAGIC_F64: f64 = 6_755_399_441_055_744.0;
/// High part of pi/2 (29 significant bits: `q * PIO2_HI` exact for q < 2^24).
const PIO2_HI: f64 = 1.570_796_325_802_803;
/// Low part of pi/2.
const PIO2_LO: f64 = 9.920_935_796_805_404e-10;

/// `a * b + c`, fused (one rounding) when `FMA`.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// Horner evaluation of `c[0] + c[1] x + ... + c[N-1] x^(N-1)`.
#[inline(always)]
fn poly<const FMA: bool, const N: usize>(x: f32, c: &[f32; N]) -> f32 {
    let mut acc = c[N - 1];
    let mut i = N - 1;
    while i > 0 {
        i -= 1;
        acc = madd::<FMA>(acc, x, c[i]);
    }
    acc
}

/// 2^n as `f32` for n in [-126, 127] (no range check).
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

/// Rounds `v` (|v| < 2^22) to the nearest integer, returned as float and int.
#[inline(always)]
fn round_int(v: f32) -> (f32, i32) {
    let t = v + ROUND_MAGIC;
    let n = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    (t - ROUND_MAGIC, n)
}

/// Rounds `a * b` (|a b| < 2^22) to the nearest integer, returned as float
/// and int; the product is not rounded first in the fused form.
#[inline(always)]
fn round_int_mul<const FMA: bool>(a: f32, b: f32) -> (f32, i32) {
    let t = madd::<FMA>(a, b, ROUND_MAGIC);
    let n = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    (t - ROUND_MAGIC, n)
}

/// Cody–Waite reduction `x = n ln2 + r`; returns (r, n).
#[inline(always)]
fn exp_reduce<const FMA: bool>(x: f32) -> (f32, i32) {
    let (nf, n) = round_int(x * LOG2_E);
    // nf * LN2_HI is exact, so fusing the first step gives the same bits
    // in one operation fewer
    (madd::<FMA>(-nf, LN2_LO, madd::<FMA>(-nf, LN2_HI, x)), n)
}

/// e^x.
///
/// Reduction x = n ln2 + r with |r| <= ln2/2, degree-6 polynomial for e^r,
/// scaling by 2^n in two steps so that overflow gives +inf and underflow is
/// gradual (subnormal results are correctly scaled, not flushed).
#[inline(always)]
fn exp_g<const FMA: bool>(x: f32) -> f32 {
    let xc = x.clamp(-104.0, 89.0); // NaN passes through
    let (r, n) = exp_reduce::<FMA>(xc);
    let p = 1.0 + madd::<FMA>(r * r, poly::<FMA, 5>(r, &EXP_P), r);
    let n1 = n >> 1;
    p * pow2i(n1) * pow2i(n.wrapping_sub(n1))
}

/// e^x - 1, accurate near zero.
///
/// Same reduction as [`exp`]; recombined as `2^n p + (2^n - 1)` where
/// `p = e^r - 1`, or `(p + 1) 2^n - 1` once `2^n - 1` is no longer exact.
#[inline(always)]
fn exp_m1_g<const FMA: bool>(x: f32) -> f32 {
    let xc = x.clamp(-30.0, 89.0);
    let (r, n) = exp_reduce::<FMA>(xc);
    let p = madd::<FMA>(r * r, poly::<FMA, 6>(r, &EXPM1_P), r);
    let n1 = n >> 1;
    let s1 = pow2i(n1);
    let s2 = pow2i(n.wrapping_sub(n1));
    let s = s1 * s2;
    let small = madd::<FMA>(p, s, s - 1.0);
    let big = (p + 1.0) * s1 * s2 - 1.0;
    let res = if n > 24 { big } else { small };
    // keep the sign of zero; NaN already propagates through `p`
    if x == 0.0 { x } else { res }
}

/// Splits `x > 0` (subnormals included) as `x = 2^k (1 + f)` with
/// `1 + f` in [sqrt(1/2), sqrt(2)); returns (k, f).  Garbage for x <= 0,
/// inf, NaN.
#[inline(always)]
fn ln_reduce(x: f32) -> (f32, f32) {
    const SQRT_HALF_BITS: u32 = 0x3f35_04f3;
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    let kadj: i32 = if sub { -23 } else { 0 };
    let ix = xs.to_bits().wrapping_sub(SQRT_HALF_BITS);
    let k = ((ix as i32) >> 23).wrapping_add(kadj);
    let m = f32::from_bits((ix & 0x007f_ffff).wrapping_add(SQRT_HALF_BITS));
    (k as f32, m - 1.0)
}

/// [`ln_reduce`] plus f^2 Q(f), so that ln(1+f) ~= f + f^2 Q(f).
#[inline(always)]
fn ln_parts<const FMA: bool>(x: f32) -> (f32, f32, f32) {
    let (k, f) = ln_reduce(x);
    (k, f, f * f * poly::<FMA, 9>(f, &LN_Q))
}

/// Applies the logarithm special cases: +inf -> +inf, 0 -> -inf,
/// negative or NaN -> NaN.
#[inline(always)]
fn log_specials(x: f32, r: f32) -> f32 {
    let r = if x < 0.0 { f32::NAN } else { r };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    // +inf and NaN in one test
    if x < f32::INFINITY { r } else { x }
}

/// Natural logarithm.
///
/// x = 2^k (1+f), ln x = k ln2 + u with u = f + f^2 R(f) ~= ln(1+f) and a
/// degree-7 R on [sqrt(1/2)-1, sqrt(2)-1]; subnormal inputs are pre-scaled
/// by 2^23.  u is formed first: |u| <= ln2/2 < |k ln2| unless k == 0, so
/// its rounding costs little, and one rounding follows.
#[inline(always)]
fn ln_g<const FMA: bool>(x: f32) -> f32 {
    let (k, f) = ln_reduce(x);
    let u = madd::<FMA>(f * f, poly::<FMA, 8>(f, &LN_R), f);
    let r = if FMA {
        // k LN_2 is exact inside the FMA; LN_2's own error (2.7e-9
        // relative) is far below an ulp
        madd::<FMA>(k, LN_2, u)
    } else {
        // k LN2_HI is exact, the product k LN_2 would not be
        madd::<FMA>(k, LN2_HI, u + k * LN2_LO)
    };
    log_specials(x, r)
}

/// Base-2 logarithm, with log2(e) applied in extra precision.
#[inline(always)]
fn log2_g<const FMA: bool>(x: f32) -> f32 {
    let (k, f, q) = ln_parts::<FMA>(x);
    let hi = f32::from_bits(f.to_bits() & 0xffff_f000);
    let lo = (f - hi) + q;
    let h = hi * LOG2E_HI; // exact
    let s = k + h;
    let err = h - (s - k); // Fast2Sum: |k| >= 1 > |h| or k == 0
    let r = s + (err + madd::<FMA>(lo, LOG2_E, hi * LOG2E_LO));
    log_specials(x, r)
}

/// Base-10 logarithm, with log10(e) and log10(2) applied in extra precision.
#[inline(always)]
fn log10_g<const FMA: bool>(x: f32) -> f32 {
    let (k, f, q) = ln_parts::<FMA>(x);
    let hi = f32::from_bits(f.to_bits() & 0xffff_f000);
    let lo = (f - hi) + q;
    let kh = k * LOG10_2_HI; // exact
    let h = hi * LOG10E_HI; // exact
    let s = kh + h;
    let err = h - (s - kh); // Fast2Sum: |kh| >= 0.30 > |h| or k == 0
    let r = s + (err + madd::<FMA>(k, LOG10_2_LO, madd::<FMA>(lo, LOG10E, hi * LOG10E_LO)));
    log_specials(x, r)
}

/// ln(1 + x), accurate near zero.
///
/// u = 1 + x is formed with its exact rounding error c (Fast2Sum), then
/// ln(1+x) = ln(u) + c/u with ln(u) from the reduction of [`ln`], summed
/// in extra precision.
#[inline(always)]
fn ln_1p_g<const FMA: bool>(x: f32) -> f32 {
    let u = 1.0 + x;
    let c = if x.abs() <= 1.0 {
        x - (u - 1.0)
    } else {
        1.0 - (u - x)
    };
    let (k, f, q) = ln_parts::<FMA>(u);
    let kh = k * LN2_HI;
    let s = kh + f;
    // Fast2Sum: |k ln2_hi| >= |f| unless k == 0, where the sum is exact
    let err = f - (s - kh);
    let r = s + (err + (q + madd::<FMA>(k, LN2_LO, c / u)));
    let r = if x == f32::INFINITY { x } else { r };
    let r = if u == 0.0 { f32::NEG_INFINITY } else { r };
    let r = if u < 0.0 { f32::NAN } else { r };
    let r = if x == 0.0 { x } else { r };
    if x.is_nan() { x } else { r }
}

/// Hyperbolic tangent.
///
/// One formula for every |x| (no branch to select between): with
/// f = (e^{2|x|} - 1)/2, tanh|x| = f/(f + 1).  f comes from the reduction
/// |x| = n ln2/2 + h, |h| <= ln2/4, as f = 2^n q + (2^n - 1)/2 with
/// q = (e^{2h} - 1)/2 = h + h^2 G(h), so it is accurate near zero (n = 0:
/// f = q) and needs no range checks (0 <= n <= 26 after the clamp).  The
/// reduction subtracts n times ln2/2 rounded to `f32`, in one step: the
/// error this adds to e^{2|x|} grows with n, but the result's sensitivity to
/// it falls as e^{-2|x|}.  The sign is copied back, which keeps the sign of
/// zero.
#[inline(always)]
fn tanh_g<const FMA: bool>(x: f32) -> f32 {
    const HALF_LN2: f32 = 0.5 * std::f32::consts::LN_2;
    let a = x.abs();
    let ac = if a > TANH_CLAMP { TANH_CLAMP } else { a }; // NaN passes through
    let (nf, n) = round_int_mul::<FMA>(ac, 2.0 * LOG2_E);
    let h = madd::<FMA>(-nf, HALF_LN2, ac);
    let q = madd::<FMA>(h * h, poly::<FMA, 5>(h, &TANH_G), h);
    let s = pow2i(n);
    let f = madd::<FMA>(q, s, madd::<FMA>(s, 0.5, -0.5));
    (f / (f + 1.0)).copysign(x)
}

/// Logistic sigmoid 1/(1 + e^-x).
///
/// Computed as 2^-64 / (2^-64 + e^-x 2^-64) on x clamped to \[-104, 40\]
/// (beyond which it rounds to 0 or 1): e^-x 2^-64 = p 2^(n-64) is a normal
/// number over the whole range, so one `pow2i` scales it, and the quotient
/// is rounded once, also where it is subnormal (x < -87.3).  The relative
/// error of e^-x carries over unamplified for x < 0 and halved for x >= 0,
/// so large negative x keeps full relative accuracy.
#[inline(always)]
fn sigmoid_g<const FMA: bool>(x: f32) -> f32 {
    const TWO_M64: f32 = 1.0 / 18_446_744_073_709_551_616.0; // 2^-64, exact
    let xc = x.clamp(-104.0, 40.0); // NaN passes through
    let (nf, n) = round_int_mul::<FMA>(xc, -LOG2_E);
    let r = madd::<FMA>(-nf, LN2_LO, madd::<FMA>(-nf, LN2_HI, -xc));
    let p = 1.0 + madd::<FMA>(r * r, poly::<FMA, 5>(r, &EXP_P), r);
    TWO_M64 / madd::<FMA>(p, pow2i(n.wrapping_sub(64)), TWO_M64)
}

/// Error function.
///
/// |x| < 1: x + x E(x^2); 1 <= |x| <= 4: sign(x) (1 - exp(G(|x|-2.5) - x^2))
/// where G fits ln erfc(x) + x^2; |x| > 4 rounds to ±1.
#[inline(always)]
fn erf_g<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let small = madd::<FMA>(x, poly::<FMA, 8>(z, &ERF_S), x);
    let ac = if a > 4.0 { 4.0 } else { a }; // NaN passes through
    let g = poly::<FMA, 8>(ac - 2.5, &ERF_G);
    let big = (1.0 - exp_g::<FMA>(madd::<FMA>(-ac, ac, g))).copysign(x);
    if a < 1.0 { small } else { big }
}

/// Reduces x = q pi/2 + r (|r| <= pi/4) in `f64`; returns (r, q mod 2^32).
#[inline(always)]
fn trig_reduce(x: f32) -> (f32, u32) {
    let xd = f64::from(x);
    let t = xd * std::f64::consts::FRAC_2_PI + ROUND_MAGIC_F64;
    let q = t.to_bits() as u32;
    let qf = t - ROUND_MAGIC_F64;
    let r = (xd - qf * PIO2_HI) - qf * PIO2_LO;
    // Only out-of-range (|x| > 2^24) arguments are affected by the clamp;
    // it keeps their (meaningless) results finite and within [-1, 1].
    ((r as f32).clamp(-1.0, 1.0), q)
}

/// Evaluates sin or cos of the reduced argument for quadrant `q`.
#[inline(always)]
fn trig_eval<const FMA: bool>(r: f32, q: u32) -> f32 {
    let z = r * r;
    let s = madd::<FMA>(r * z, poly::<FMA, 4>(z, &SIN_S), r);
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    let c = w + madd::<FMA>(z * z, poly::<FMA, 4>(z, &COS_C), (1.0 - w) - hz);
    let v = if q & 1 == 0 { s } else { c };
    f32::from_bits(v.to_bits() ^ ((q & 2) << 30))
}

/// Sine (radians). Accurate for |x| <= 2^24; see the module docs.
#[inline(always)]
fn sin_g<const FMA: bool>(x: f32) -> f32 {
    let (r, q) = trig_reduce(x);
    let s = trig_eval::<FMA>(r, q);
    if x == 0.0 { x } else { s } // keep the sign of zero
}

/// Cosine (radians). Accurate for |x| <= 2^24; see the module docs.
#[inline(always)]
fn cos_g<const FMA: bool>(x: f32) -> f32 {
    let (r, q) = trig_reduce(x);
    trig_eval::<FMA>(r, q.wrapping_add(1))
}

/// Defines the public plain and [`fma`] forms of each `name_g` function.
macro_rules! both_forms {
    ($($name:ident => $g:ident: $doc:literal),* $(,)?) => {
        $(
            #[doc = $doc]
            ///
            /// Plain form: separate multiply and add, the same bits everywhere.
            #[inline(always)]
            pub fn $name(x: f32) -> f32 {
                $g::<false>(x)
            }
        )*

        /// The same functions with fused multiply-adds: one rounding per
        /// `a * b + c`, within the same error bounds as the plain forms but
        /// not always the same bits.  Fast where the CPU has FMA (the AVX2
        /// and AVX-512 tile loops, AArch64); elsewhere `mul_add` is a libm
        /// call, so call the plain forms there.
        pub mod fma {
            $(
                #[doc = $doc]
                #[inline(always)]
                pub fn $name(x: f32) -> f32 {
                    super::$g::<true>(x)
                }
            )*
        }
    };
}

both_forms! {
    exp => exp_g: "e^x.",
    exp_m1 => exp_m1_g: "e^x - 1, accurate near zero.",
    ln => ln_g: "Natural logarithm.",
    log2 => log2_g: "Base-2 logarithm.",
    log10 => log10_g: "Base-10 logarithm.",
    ln_1p => ln_1p_g: "ln(1 + x), accurate near zero.",
    tanh => tanh_g: "Hyperbolic tangent.",
    sigmoid => sigmoid_g: "Logistic sigmoid 1/(1 + e^-x).",
    erf => erf_g: "The error function.",
    sin => sin_g: "Sine (radians), accurate for |x| <= 2^24.",
    cos => cos_g: "Cosine (radians), accurate for |x| <= 2^24.",
}

/// Exponent bias of `f64`.
const F64_BIAS: i64 = 1023;

/// log2 of a positive finite `f32` (subnormals included), evaluated in `f64`
/// with absolute error below ~1e-15: x = 2^k m, m in [sqrt(1/2), sqrt(2)),
/// ln m = 2 atanh(s), s = (m-1)/(m+1), by its Taylor series to s^15.
/// Garbage for 0, inf, NaN and negative inputs.
#[inline(always)]
fn log2_f64(ax: f32) -> f64 {
    const SQRT_HALF_BITS: u32 = 0x3f35_04f3;
    let sub = ax < f32::MIN_POSITIVE;
    let xs = if sub { ax * 8_388_608.0 } else { ax };
    let kadj: i32 = if sub { -23 } else { 0 };
    let ix = xs.to_bits().wrapping_sub(SQRT_HALF_BITS);
    let k = ((ix as i32) >> 23).wrapping_add(kadj);
    let m = f64::from(f32::from_bits(
        (ix & 0x007f_ffff).wrapping_add(SQRT_HALF_BITS),
    ));
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    // sum_{j=0}^{7} z^j / (2j+1)
    let series = 1.0
        + z * (1.0 / 3.0
            + z * (1.0 / 5.0
                + z * (1.0 / 7.0
                    + z * (1.0 / 9.0 + z * (1.0 / 11.0 + z * (1.0 / 13.0 + z * (1.0 / 15.0)))))));
    f64::from(k) + (2.0 * s * series) * std::f64::consts::LOG2_E
}

/// 2^t in `f64` for any t (clamped to [-200, 200], which already over- or
/// underflows `f32`), relative error below ~1e-13: t = n + r, |r| <= 1/2,
/// e^{r ln2} by its Taylor series to degree 10.
#[inline(always)]
fn exp2_f64(t: f64) -> f64 {
    let tc = t.clamp(-200.0, 200.0);
    let big = tc + ROUND_MAGIC_F64;
    let n = (big.to_bits() as i64).wrapping_sub(ROUND_MAGIC_F64.to_bits() as i64);
    let u = (tc - (big - ROUND_MAGIC_F64)) * std::f64::consts::LN_2;
    // Taylor coefficients 1/j! of e^u, j = 0..=10
    const C: [f64; 11] = [
        1.0,
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5_040.0,
        1.0 / 40_320.0,
        1.0 / 362_880.0,
        1.0 / 3_628_800.0,
    ];
    let mut p = C[10];
    let mut j = 10;
    while j > 0 {
        j -= 1;
        p = p * u + C[j];
    }
    p * f64::from_bits((n.wrapping_add(F64_BIAS) as u64) << 52)
}

/// x^y with the special cases of std's `f32::powf` (C99 `pow`).
///
/// Computed as 2^(y log2|x|) in `f64` (own series for log2 and exp2, no
/// libm), then rounded once to `f32`, which also gives exact overflow to
/// infinity and gradual underflow. Negative x is allowed for integer y.
#[inline(always)]
pub fn pow(x: f32, y: f32) -> f32 {
    const TWO_23: f32 = 8_388_608.0;
    let ax = x.abs();
    let l = log2_f64(ax);
    let l = if ax == f32::INFINITY {
        f64::INFINITY
    } else {
        l
    };
    let l = if ax == 0.0 { f64::NEG_INFINITY } else { l };
    let r = exp2_f64(f64::from(y) * l) as f32;
    // integer / odd-integer classification of y (±inf counts as even)
    let ay = y.abs();
    let small = ay < TWO_23;
    let t = if small { ay + TWO_23 } else { ay };
    let is_int = if small { t - TWO_23 == ay } else { true };
    let odd = is_int & (t < 2.0 * TWO_23) & (t.to_bits() & 1 == 1);
    let r = if odd & x.is_sign_negative() { -r } else { r };
    let r = if (x < 0.0) & x.is_finite() & !is_int {
        f32::NAN
    } else {
        r
    };
    // |x| == 1 with y = ±inf gives 1 (0 * inf above would be NaN)
    let r = if (ax == 1.0) & (ay == f32::INFINITY) {
        1.0
    } else {
        r
    };
    let r = if x.is_nan() | y.is_nan() { f32::NAN } else { r };
    let r = if x == 1.0 { 1.0 } else { r };
    if y == 0.0 { 1.0 } else { r }
}

#[cfg(test)]
mod tests;
