//! Explicit AVX-512 forms of [`super::fma::exp`], [`super::fma::tanh`],
//! [`super::fma::sigmoid`] and [`super::fma::ln`], sixteen lanes at a time.
//!
//! Each follows its scalar form operation for operation, so it returns the
//! same bits (the tests compare them over a sweep of every exponent), but
//! with instructions the auto-vectoriser cannot emit from scalar code:
//! `vscalefps` multiplies by 2^n in one instruction with overflow to
//! infinity and correctly rounded subnormal results (the scalar form needs
//! eight integer and float operations for the same), `vrndscaleps` rounds
//! to an integer, `vpternlogd` copies a sign bit, `vfixupimmps` answers the
//! special inputs of a logarithm, and masked operations replace selects.
//! `exp` takes 14 vector instructions instead of 22; `tanh` and `sigmoid`,
//! which end in a division (slow for 16 lanes, and it dominates), gain
//! little.

use std::arch::x86_64::*;

use super::{EXP_P, LN_R, LN2_HI, LN2_LO, ROUND_MAGIC, TANH_CLAMP, TANH_G};
use std::f32::consts::LOG2_E;

#[target_feature(enable = "avx512f")]
#[inline]
fn splat(v: f32) -> __m512 {
    _mm512_set1_ps(v)
}

/// Horner evaluation of `c[0] + c[1] x + ..`, as `super::poly`.
#[target_feature(enable = "avx512f")]
#[inline]
fn poly<const N: usize>(x: __m512, c: &[f32; N]) -> __m512 {
    let mut acc = splat(c[N - 1]);
    let mut i = N - 1;
    while i > 0 {
        i -= 1;
        acc = _mm512_fmadd_ps(acc, x, splat(c[i]));
    }
    acc
}

/// `1 + r + r^2 P(r)` ~= e^r for the reduced argument, as in `super::exp_g`.
#[target_feature(enable = "avx512f")]
#[inline]
fn exp_reduced(r: __m512) -> __m512 {
    let rr = _mm512_mul_ps(r, r);
    _mm512_add_ps(splat(1.0), _mm512_fmadd_ps(rr, poly(r, &EXP_P), r))
}

/// Rounds `a * b + ROUND_MAGIC` in one step and takes the magic away: the
/// nearest integer to the unrounded product, as `super::round_int_mul`.
#[target_feature(enable = "avx512f")]
#[inline]
fn round_mul(a: __m512, b: f32) -> __m512 {
    _mm512_sub_ps(
        _mm512_fmadd_ps(a, splat(b), splat(ROUND_MAGIC)),
        splat(ROUND_MAGIC),
    )
}

/// e^x, as [`super::fma::exp`].
///
/// # Safety
/// The CPU must have AVX-512F: safe to call from code compiled for it,
/// `unsafe` elsewhere.
#[target_feature(enable = "avx512f")]
#[inline]
pub fn exp(x: __m512) -> __m512 {
    // max/min return their second operand when either is NaN, so NaN
    // passes through, as with `clamp`
    let xc = _mm512_min_ps(splat(89.0), _mm512_max_ps(splat(-104.0), x));
    // the scalar form rounds the rounded product x * log2 e
    let nf = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(xc, splat(LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(nf, splat(LN2_HI), xc);
    let r = _mm512_fnmadd_ps(nf, splat(LN2_LO), r);
    // the scalar form scales by 2^(n/2) twice; both steps are exact except
    // the last when the result is subnormal, which one scalef rounds alike
    _mm512_scalef_ps(exp_reduced(r), nf)
}

/// tanh x, as [`super::fma::tanh`].
///
/// # Safety
/// The CPU must have AVX-512F: safe to call from code compiled for it,
/// `unsafe` elsewhere.
#[target_feature(enable = "avx512f")]
#[inline]
pub fn tanh(x: __m512) -> __m512 {
    const HALF_LN2: f32 = 0.5 * std::f32::consts::LN_2;
    let a = _mm512_abs_ps(x);
    let ac = _mm512_min_ps(splat(TANH_CLAMP), a);
    let nf = round_mul(ac, 2.0 * LOG2_E);
    let h = _mm512_fnmadd_ps(nf, splat(HALF_LN2), ac);
    let q = _mm512_fmadd_ps(_mm512_mul_ps(h, h), poly(h, &TANH_G), h);
    // 2^n for 0 <= n <= 26: exact
    let s = _mm512_scalef_ps(splat(1.0), nf);
    let f = _mm512_fmadd_ps(q, s, _mm512_fmsub_ps(s, splat(0.5), splat(0.5)));
    let t = _mm512_div_ps(f, _mm512_add_ps(f, splat(1.0)));
    // sign bit from x, the rest from t: bitwise select, mask ? x : t
    _mm512_castsi512_ps(_mm512_ternarylogic_epi32::<0xCA>(
        _mm512_set1_epi32(i32::MIN),
        _mm512_castps_si512(x),
        _mm512_castps_si512(t),
    ))
}

/// 1/(1 + e^-x), as [`super::fma::sigmoid`].
///
/// # Safety
/// The CPU must have AVX-512F: safe to call from code compiled for it,
/// `unsafe` elsewhere.
#[target_feature(enable = "avx512f")]
#[inline]
pub fn sigmoid(x: __m512) -> __m512 {
    const TWO_M64: f32 = 1.0 / 18_446_744_073_709_551_616.0; // 2^-64, exact
    let xc = _mm512_min_ps(splat(40.0), _mm512_max_ps(splat(-104.0), x));
    let nf = round_mul(xc, -LOG2_E);
    // -xc - nf LN2_HI, then - nf LN2_LO
    let r = _mm512_fnmsub_ps(nf, splat(LN2_HI), xc);
    let r = _mm512_fnmadd_ps(nf, splat(LN2_LO), r);
    // 2^(n - 64) is normal for every n the clamp allows: exact
    let s = _mm512_scalef_ps(splat(1.0), _mm512_sub_ps(nf, splat(64.0)));
    let d = _mm512_fmadd_ps(exp_reduced(r), s, splat(TWO_M64));
    _mm512_div_ps(splat(TWO_M64), d)
}

/// ln x, as [`super::fma::ln`].
///
/// # Safety
/// The CPU must have AVX-512F: safe to call from code compiled for it,
/// `unsafe` elsewhere.
#[target_feature(enable = "avx512f")]
#[inline]
pub fn ln(x: __m512) -> __m512 {
    ln_impl::<true>(x)
}

/// [`ln`] for lanes that hold no positive subnormal, such as f16 values
/// widened to f32 (the least f16, 2^-24, is a normal f32): the same bits
/// with the subnormal rescaling left out, three instructions fewer. Zeros
/// and negative numbers are answered by the special-value fix-up either
/// way, so skipping their rescaling changes nothing.
///
/// # Safety
/// The CPU must have AVX-512F: safe to call from code compiled for it,
/// `unsafe` elsewhere.
#[target_feature(enable = "avx512f")]
#[inline]
pub fn ln_no_subnormals(x: __m512) -> __m512 {
    ln_impl::<false>(x)
}

/// [`ln`] of two vectors: [`ln_no_subnormals`] on both unless either holds
/// a subnormal. The same bits as [`ln`] on each; one test per 32 lanes
/// instead of the three masked rescaling operations per 16, which cost
/// a large share of `ln`'s time (a test per vector costs more than it
/// saves).
///
/// # Safety
/// The CPU must have AVX-512F and DQ: safe to call from code compiled for
/// them, `unsafe` elsewhere.
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
pub fn ln_pair(a: __m512, b: __m512) -> (__m512, __m512) {
    // category 0x20: subnormal, either sign (negative ones are answered
    // alike on both paths, and are rare enough to take the slow one)
    let sub = _mm512_fpclass_ps_mask::<0x20>(a) | _mm512_fpclass_ps_mask::<0x20>(b);
    if sub == 0 {
        (ln_impl::<false>(a), ln_impl::<false>(b))
    } else {
        (ln_impl::<true>(a), ln_impl::<true>(b))
    }
}

/// [`ln`], rescaling subnormal inputs when `SUBNORMALS`.
#[target_feature(enable = "avx512f")]
#[inline]
fn ln_impl<const SUBNORMALS: bool>(x: __m512) -> __m512 {
    /// `vfixupimmps` answers per input class, four bits each from class 0
    /// up: NaN (quiet, signalling) -> x itself, ±0 -> -inf, +inf -> x,
    /// the rest (+1, negatives, finite positives) -> the value given,
    /// where negatives already hold `f32::NAN`: `log_specials` in three
    /// instructions instead of six (its NaN for negatives is positive,
    /// the instruction's own is not).
    const SPECIALS: i32 = 0x0010_0411;
    const SQRT_HALF_BITS: i32 = 0x3f35_04f3;
    // `ln_reduce`: subnormal (and non-positive) inputs scaled by 2^23
    // without SUBNORMALS the mask is the constant 0, and the compiler
    // drops the two masked operations with it
    let sub = if SUBNORMALS {
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, splat(f32::MIN_POSITIVE))
    } else {
        0
    };
    let xs = _mm512_mask_mul_ps(x, sub, x, splat(8_388_608.0));
    let ix = _mm512_sub_epi32(_mm512_castps_si512(xs), _mm512_set1_epi32(SQRT_HALF_BITS));
    let k = _mm512_srai_epi32::<23>(ix);
    let k = _mm512_mask_sub_epi32(k, sub, k, _mm512_set1_epi32(23));
    let m = _mm512_add_epi32(
        _mm512_and_si512(ix, _mm512_set1_epi32(0x007f_ffff)),
        _mm512_set1_epi32(SQRT_HALF_BITS),
    );
    let f = _mm512_sub_ps(_mm512_castsi512_ps(m), splat(1.0));
    let u = _mm512_fmadd_ps(_mm512_mul_ps(f, f), poly(f, &LN_R), f);
    let r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(k), splat(std::f32::consts::LN_2), u);
    let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
    let r = _mm512_mask_mov_ps(r, neg, splat(f32::NAN));
    _mm512_fixupimm_ps::<0>(r, x, _mm512_set1_epi32(SPECIALS))
}
