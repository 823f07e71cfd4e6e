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
//! [`avx512`] has explicit 16-lane forms of `exp`, `tanh`, `sigmoid` and
//! `ln` that return the [`fma`] forms' bits with fewer instructions; the
//! built-in ops run them through [`crate::kernel::vector`].
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
mod tests {
    use super::*;

    /// `[(name, plain form), ("fma::name", fused form)]`, optionally with a
    /// reference function as a third element.
    macro_rules! both_forms {
        ($f:ident) => {
            [
                (stringify!($f), $f as fn(f32) -> f32),
                (concat!("fma::", stringify!($f)), fma::$f as fn(f32) -> f32),
            ]
        };
        ($f:ident, $r:expr) => {
            [
                (stringify!($f), $f as fn(f32) -> f32, $r as fn(f64) -> f64),
                (
                    concat!("fma::", stringify!($f)),
                    fma::$f as fn(f32) -> f32,
                    $r as fn(f64) -> f64,
                ),
            ]
        };
    }

    /// Maps an `f32` to an integer that is monotonic in its value.
    fn ord(x: f32) -> i64 {
        let b = x.to_bits() as i32;
        i64::from(if b < 0 { i32::MIN.wrapping_sub(b) } else { b })
    }

    /// ULP distance between `got` and the correctly rounded `want`.
    fn ulp_dist(got: f32, want: f64) -> u64 {
        let w = want as f32;
        match (got.is_nan(), w.is_nan()) {
            (true, true) => 0,
            (false, false) => (ord(got) - ord(w)).unsigned_abs(),
            _ => u64::MAX,
        }
    }

    /// `SIMPLEOP_SWEEP_THIN=k` samples k times fewer points: the memcheck
    /// run in CI checks memory, not accuracy, at many times the cost per
    /// point.
    fn thinning() -> usize {
        std::env::var("SIMPLEOP_SWEEP_THIN")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1usize)
            .max(1)
    }

    /// Every `stride`-th bit pattern in `[lo_bits, hi_bits)`, both signs.
    fn sweep_bits(lo_bits: u32, hi_bits: u32, stride: u32) -> impl Iterator<Item = f32> {
        (lo_bits..hi_bits)
            .step_by(stride as usize * thinning())
            .flat_map(|b| [f32::from_bits(b), f32::from_bits(b | 0x8000_0000)])
    }

    /// About `n` points of each sign with magnitude in `[lo, hi]` (lo >= 0).
    fn sweep_range(lo: f32, hi: f32, n: u32) -> impl Iterator<Item = f32> {
        let (a, b) = (lo.to_bits(), hi.to_bits());
        sweep_bits(a, b + 1, ((b - a) / n).max(1))
    }

    /// All finite values, every 601st pattern, both signs.
    fn sweep_all() -> impl Iterator<Item = f32> {
        sweep_bits(0, 0x7f80_0000, 601)
    }

    /// Max ULP error of `f` against `reference` over `xs`; prints the worst.
    fn max_ulp(
        name: &str,
        f: fn(f32) -> f32,
        reference: fn(f64) -> f64,
        xs: impl Iterator<Item = f32>,
    ) -> u64 {
        let mut worst = (0u64, 0.0f32);
        let mut count = 0usize;
        for x in xs {
            let d = ulp_dist(f(x), reference(f64::from(x)));
            if d > worst.0 {
                worst = (d, x);
            }
            count += 1;
        }
        println!(
            "{name}: {count} points, max {} ulp at x = {:e} (got {:e}, want {:e})",
            worst.0,
            worst.1,
            f(worst.1),
            reference(f64::from(worst.1))
        );
        worst.0
    }

    /// Reference erf in `f64`: erf(x) = 2/sqrt(pi) e^{-x^2} sum 2^n x^{2n+1} / (2n+1)!!
    /// (all terms positive, so no cancellation); |x| >= 6 gives ±1.
    fn erf_ref(x: f64) -> f64 {
        let a = x.abs();
        if a.is_nan() {
            return f64::NAN;
        }
        if a >= 6.0 {
            return 1.0f64.copysign(x);
        }
        let z = a * a;
        let mut term = a;
        let mut sum = a;
        let mut n = 0.0;
        while term > sum * 1e-18 {
            n += 1.0;
            term *= 2.0 * z / (2.0 * n + 1.0);
            sum += term;
        }
        (std::f64::consts::FRAC_2_SQRT_PI * (-z).exp() * sum).copysign(x)
    }

    #[test]
    fn erf_reference_matches_known_values() {
        for (x, want) in [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (0.01, 0.011_283_415_555_849_618),
            (4.5, 0.999_999_999_803_384),
        ] {
            assert!((erf_ref(x) - want).abs() <= 4e-16 * want, "erf_ref({x})");
        }
    }

    fn sigmoid_ref(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    #[test]
    fn ulp_exp() {
        for (name, f) in both_forms!(exp) {
            let m = max_ulp(name, f, f64::exp, sweep_all())
                .max(max_ulp(name, f, f64::exp, sweep_range(0.0, 1.0, 1 << 20)))
                .max(max_ulp(
                    name,
                    f,
                    f64::exp,
                    sweep_range(80.0, 104.0, 1 << 19),
                ));
            assert!(m <= 1, "{name} {m}");
        }
    }

    #[test]
    fn ulp_exp_m1() {
        for (name, f) in both_forms!(exp_m1) {
            let m = max_ulp(name, f, f64::exp_m1, sweep_all()).max(max_ulp(
                name,
                f,
                f64::exp_m1,
                sweep_range(0.0, 1.0, 1 << 20),
            ));
            assert!(m <= 1, "{name} {m}");
        }
    }

    #[test]
    fn ulp_ln() {
        for (name, f) in both_forms!(ln) {
            let m = max_ulp(name, f, f64::ln, sweep_all()).max(max_ulp(
                name,
                f,
                f64::ln,
                sweep_range(0.5, 2.0, 1 << 20),
            ));
            assert!(m <= 1, "{name} {m}");
        }
    }

    #[test]
    fn ulp_log2_log10() {
        for (name, f, r) in both_forms!(log2, f64::log2)
            .into_iter()
            .chain(both_forms!(log10, f64::log10))
        {
            let m = max_ulp(name, f, r, sweep_all()).max(max_ulp(
                name,
                f,
                r,
                sweep_range(0.5, 2.0, 1 << 20),
            ));
            assert!(m <= 1, "{name} {m}");
        }
    }

    #[test]
    fn ulp_ln_1p() {
        for (name, f) in both_forms!(ln_1p) {
            let m = max_ulp(name, f, f64::ln_1p, sweep_all()).max(max_ulp(
                name,
                f,
                f64::ln_1p,
                sweep_range(0.0, 1.0, 1 << 20),
            ));
            assert!(m <= 1, "{name} {m}");
        }
    }

    #[test]
    fn ulp_tanh() {
        for (name, f) in both_forms!(tanh) {
            let m = max_ulp(name, f, f64::tanh, sweep_all())
                .max(max_ulp(name, f, f64::tanh, sweep_range(0.0, 2.0, 1 << 20)))
                .max(max_ulp(name, f, f64::tanh, sweep_range(8.0, 10.0, 1 << 18)));
            assert!(m <= 3, "{name} {m}");
        }
    }

    #[test]
    fn ulp_sigmoid() {
        for (name, f) in both_forms!(sigmoid) {
            let m = max_ulp(name, f, sigmoid_ref, sweep_all())
                .max(max_ulp(
                    name,
                    f,
                    sigmoid_ref,
                    sweep_range(0.0, 20.0, 1 << 20),
                ))
                .max(max_ulp(
                    name,
                    f,
                    sigmoid_ref,
                    sweep_range(80.0, 104.0, 1 << 19),
                ));
            assert!(m <= 2, "{name} {m}");
        }
    }

    #[test]
    fn ulp_erf() {
        for (name, f) in both_forms!(erf) {
            let m = max_ulp(name, f, erf_ref, sweep_all()).max(max_ulp(
                name,
                f,
                erf_ref,
                sweep_range(0.0, 4.0, 1 << 20),
            ));
            assert!(m <= 1, "{name} {m}");
        }
    }

    /// f32 values nearest k pi/2 (and their neighbours) for 0 < k < 2^20.
    fn near_multiples() -> impl Iterator<Item = f32> {
        (1..1u32 << 20).flat_map(|k| {
            let x = (f64::from(k) * std::f64::consts::FRAC_PI_2) as f32;
            [
                x,
                f32::from_bits(x.to_bits() + 1),
                f32::from_bits(x.to_bits() - 1),
            ]
        })
    }

    fn trig_sweep(name: &str, f: fn(f32) -> f32, r: fn(f64) -> f64) -> u64 {
        let lim = 16_777_216.0f32.to_bits() + 1;
        max_ulp(name, f, r, sweep_bits(0, lim, 293))
            .max(max_ulp(name, f, r, sweep_range(0.0, 8.0, 1 << 20)))
            .max(max_ulp(name, f, r, near_multiples()))
    }

    #[test]
    fn ulp_sin() {
        for (name, f) in both_forms!(sin) {
            let m = trig_sweep(name, f, f64::sin);
            assert!(m <= 1, "{name} {m}");
        }
    }

    #[test]
    fn ulp_cos() {
        for (name, f) in both_forms!(cos) {
            let m = trig_sweep(name, f, f64::cos);
            assert!(m <= 1, "{name} {m}");
        }
    }

    #[test]
    fn split_constants_are_short() {
        // the high parts must have enough trailing zero bits for exact products
        assert_eq!(LN2_HI.to_bits() & 0x1ff, 0);
        assert_eq!(LOG2E_HI.to_bits() & 0xfff, 0);
        assert_eq!(LOG10E_HI.to_bits() & 0xfff, 0);
        assert_eq!(LOG10_2_HI.to_bits() & 0x1ff, 0);
        assert_eq!(PIO2_HI.to_bits() & ((1 << 24) - 1), 0);
        assert!((f64::from(LN2_HI) + f64::from(LN2_LO) - std::f64::consts::LN_2).abs() < 1e-13);
        assert!(
            (f64::from(LOG2E_HI) + f64::from(LOG2E_LO) - std::f64::consts::LOG2_E).abs() < 1e-11
        );
        assert!(
            (f64::from(LOG10E_HI) + f64::from(LOG10E_LO) - std::f64::consts::LOG10_E).abs() < 1e-11
        );
        assert!(
            (f64::from(LOG10_2_HI) + f64::from(LOG10_2_LO) - std::f64::consts::LOG10_2).abs()
                < 1e-13
        );
        assert!((PIO2_HI + PIO2_LO - std::f64::consts::FRAC_PI_2).abs() < 1e-22);
    }

    #[test]
    fn ulp_pow() {
        let mut s = 0x9e37_79b9_u32;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        let mut worst = (0u64, 0.0f32, 0.0f32);
        let mut normal = 0usize;
        for i in 0..1_000_000u32 {
            // x: any positive finite bit pattern; y scaled so |y log2 x| mostly < 160
            let x = f32::from_bits(next() % 0x7f80_0000);
            let u = (next() >> 8) as f32 / 16_777_216.0 - 0.5;
            let lx = f64::from(x).log2().abs().max(1e-3);
            let y = match i % 3 {
                0 => (f64::from(u) * 320.0 / lx) as f32,
                1 => (u * 64.0).round(),
                _ => u * 8.0,
            };
            let x = if i % 3 == 1 && next() & 1 == 1 { -x } else { x };
            let d = ulp_dist(pow(x, y), f64::from(x).powf(f64::from(y)));
            normal += usize::from(pow(x, y).is_normal());
            if d > worst.0 {
                worst = (d, x, y);
            }
        }
        println!(
            "pow: max {} ulp at x = {:e}, y = {:e}; {normal} normal results",
            worst.0, worst.1, worst.2
        );
        assert!(worst.0 <= 1, "pow {worst:?}");
    }

    #[test]
    fn pow_special_values_match_std() {
        let vals = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            2.0,
            -2.0,
            3.0,
            -3.0,
            2.5,
            -2.5,
            1e-45,
            -1e-45,
            3e38,
            -3e38,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            8_388_609.0,
            -8_388_609.0,
            16_777_216.0,
            -16_777_217.0,
            0.999_999_9,
            1.000_000_1,
            127.0,
            -149.0,
            150.0,
        ];
        for &x in &vals {
            for &y in &vals {
                let (got, want) = (pow(x, y), x.powf(y));
                assert!(
                    same(got, want) || ulp_dist(got, f64::from(x).powf(f64::from(y))) <= 1,
                    "pow({x:e}, {y:e}) = {got:e}, std {want:e}"
                );
            }
        }
    }

    fn same(a: f32, b: f32) -> bool {
        (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
    }

    fn fused_form(name: &str) -> fn(f32) -> f32 {
        match name {
            "exp" => fma::exp,
            "exp_m1" => fma::exp_m1,
            "ln" => fma::ln,
            "log2" => fma::log2,
            "log10" => fma::log10,
            "ln_1p" => fma::ln_1p,
            "tanh" => fma::tanh,
            "sigmoid" => fma::sigmoid,
            "erf" => fma::erf,
            "sin" => fma::sin,
            "cos" => fma::cos,
            _ => panic!("no fused form of {name}"),
        }
    }

    #[test]
    fn special_values() {
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        type Case = (&'static str, fn(f32) -> f32, f32, f32);
        let cases: &[Case] = &[
            ("exp", exp, nan, nan),
            ("exp", exp, inf, inf),
            ("exp", exp, -inf, 0.0),
            ("exp", exp, 0.0, 1.0),
            ("exp", exp, -0.0, 1.0),
            ("exp", exp, 88.8, inf),
            ("exp", exp, -104.0, 0.0),
            ("exp", exp, -103.0, f32::from_bits(1)),
            ("exp_m1", exp_m1, nan, nan),
            ("exp_m1", exp_m1, inf, inf),
            ("exp_m1", exp_m1, -inf, -1.0),
            ("exp_m1", exp_m1, -0.0, -0.0),
            ("exp_m1", exp_m1, 0.0, 0.0),
            ("exp_m1", exp_m1, 88.8, inf),
            ("ln", ln, nan, nan),
            ("ln", ln, 0.0, -inf),
            ("ln", ln, -0.0, -inf),
            ("ln", ln, -1.0, nan),
            ("ln", ln, -inf, nan),
            ("ln", ln, inf, inf),
            ("ln", ln, 1.0, 0.0),
            ("ln", ln, -f32::from_bits(1), nan),
            ("ln", ln, -nan, nan),
            ("log2", log2, 8.0, 3.0),
            ("log2", log2, f32::from_bits(1), -149.0),
            ("log2", log2, 0.0, -inf),
            ("log2", log2, inf, inf),
            ("log2", log2, -2.0, nan),
            ("log10", log10, 1000.0, 3.0),
            ("log10", log10, 0.0, -inf),
            ("log10", log10, inf, inf),
            ("log10", log10, nan, nan),
            ("ln_1p", ln_1p, nan, nan),
            ("ln_1p", ln_1p, -1.0, -inf),
            ("ln_1p", ln_1p, -2.0, nan),
            ("ln_1p", ln_1p, -inf, nan),
            ("ln_1p", ln_1p, inf, inf),
            ("ln_1p", ln_1p, -0.0, -0.0),
            ("ln_1p", ln_1p, 0.0, 0.0),
            ("tanh", tanh, nan, nan),
            ("tanh", tanh, inf, 1.0),
            ("tanh", tanh, -inf, -1.0),
            ("tanh", tanh, -0.0, -0.0),
            ("tanh", tanh, 0.0, 0.0),
            ("tanh", tanh, 50.0, 1.0),
            ("tanh", tanh, 9.02, 1.0),
            ("tanh", tanh, -9.02, -1.0),
            ("tanh", tanh, f32::MAX, 1.0),
            ("tanh", tanh, f32::from_bits(1), f32::from_bits(1)),
            ("tanh", tanh, -f32::from_bits(1), -f32::from_bits(1)),
            ("sigmoid", sigmoid, nan, nan),
            ("sigmoid", sigmoid, inf, 1.0),
            ("sigmoid", sigmoid, -inf, 0.0),
            ("sigmoid", sigmoid, 0.0, 0.5),
            ("sigmoid", sigmoid, -0.0, 0.5),
            ("sigmoid", sigmoid, 40.0, 1.0),
            ("sigmoid", sigmoid, 17.5, 1.0),
            ("sigmoid", sigmoid, -104.0, 0.0),
            ("sigmoid", sigmoid, f32::MIN, 0.0),
            ("erf", erf, nan, nan),
            ("erf", erf, inf, 1.0),
            ("erf", erf, -inf, -1.0),
            ("erf", erf, -0.0, -0.0),
            ("erf", erf, 0.0, 0.0),
            ("sin", sin, nan, nan),
            ("sin", sin, inf, nan),
            ("sin", sin, -inf, nan),
            ("sin", sin, -0.0, -0.0),
            ("sin", sin, 0.0, 0.0),
            ("cos", cos, nan, nan),
            ("cos", cos, inf, nan),
            ("cos", cos, -inf, nan),
            ("cos", cos, 0.0, 1.0),
            ("cos", cos, -0.0, 1.0),
        ];
        for &(name, f, x, want) in cases {
            for (form, f) in [("", f), ("fma::", fused_form(name))] {
                assert!(
                    same(f(x), want),
                    "{form}{name}({x:e}) = {:e}, want {want:e}",
                    f(x)
                );
            }
        }
        // exp: gradual underflow and the overflow threshold
        assert!(exp(-100.0) > 0.0 && exp(-100.0) < f32::MIN_POSITIVE);
        assert!(ulp_dist(exp(-100.0), (-100.0f64).exp()) <= 1);
        let big = 88.72f32;
        assert!(ulp_dist(exp(big), f64::from(big).exp()) <= 1);
        assert!(exp(big).is_finite());
        // sigmoid of large negative x stays relatively accurate, and its
        // subnormal results are rounded once
        assert_eq!(ulp_dist(sigmoid(-80.0), sigmoid_ref(-80.0)), 0);
        for x in [-20.0f32, -88.0, -100.0, -103.0] {
            for f in [sigmoid, fma::sigmoid] {
                assert!(
                    ulp_dist(f(x), sigmoid_ref(f64::from(x))) <= 1,
                    "sigmoid({x})"
                );
            }
        }
        assert!(sigmoid(-100.0) > 0.0 && sigmoid(-100.0) < f32::MIN_POSITIVE);
        // out-of-range trig stays finite and bounded
        for x in [1e10f32, -3.3e20, f32::MAX, f32::MIN] {
            assert!(sin(x).abs() <= 1.0 && cos(x).abs() <= 1.0, "{x}");
        }
    }
}
