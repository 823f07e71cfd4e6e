//! Explicit AVX2+FMA forms of [`super::fma::exp`], [`super::fma::tanh`],
//! [`super::fma::sigmoid`] and [`super::fma::ln`], eight lanes at a time.
//!
//! Each follows its scalar form operation for operation, or with an exact
//! step in place of two, so it returns the same bits (the tests compare
//! them over every exponent, and an ignored test over all 2^32 inputs).
//! AVX2 has no `vscalefps`, so 2^n is built from exponent bits as
//! `super::pow2i` does (`exp` scales by 2^(n/2) twice, which keeps
//! overflow and subnormal results exact). What the explicit code gains
//! over the auto-vectorised scalar form is min/max instead of
//! compare-and-blend clamps, a sign copied with two logical operations,
//! `exp` adding n to the exponent field when all eight results are normal
//! (the same bits, two multiplies fewer on the FMA pipes that bound it),
//! and `ln`'s subnormal rescaling skipped for two vectors at a time when
//! neither needs it.

use std::arch::x86_64::*;
use std::f32::consts::LOG2_E;

use super::{EXP_NORMAL_N, EXP_P, LN_R, LN2_HI, LN2_LO, ROUND_MAGIC, TANH_CLAMP, TANH_G};

#[target_feature(enable = "avx2,fma")]
#[inline]
fn splat(v: f32) -> __m256 {
    _mm256_set1_ps(v)
}

/// Horner evaluation of `c[0] + c[1] x + ..`, as `super::poly`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn poly<const N: usize>(x: __m256, c: &[f32; N]) -> __m256 {
    let mut acc = splat(c[N - 1]);
    let mut i = N - 1;
    while i > 0 {
        i -= 1;
        acc = _mm256_fmadd_ps(acc, x, splat(c[i]));
    }
    acc
}

/// `1 + r + r^2 P(r)` ~= e^r for the reduced argument, as in `super::exp_g`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn exp_reduced(r: __m256) -> __m256 {
    let rr = _mm256_mul_ps(r, r);
    _mm256_add_ps(splat(1.0), _mm256_fmadd_ps(rr, poly(r, &EXP_P), r))
}

/// `t - ROUND_MAGIC` as float and as integer, where `t` is a value plus
/// `ROUND_MAGIC` rounded once: `super::round_int`'s last steps.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn unmagic(t: __m256) -> (__m256, __m256i) {
    let n = _mm256_sub_epi32(
        _mm256_castps_si256(t),
        _mm256_set1_epi32(ROUND_MAGIC.to_bits() as i32),
    );
    (_mm256_sub_ps(t, splat(ROUND_MAGIC)), n)
}

/// 2^n for n in [-126, 127] from the exponent bits, as `super::pow2i`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn pow2i(n: __m256i) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        n,
        _mm256_set1_epi32(127),
    )))
}

/// e^x, as [`super::fma::exp`].
///
/// # Safety
/// The CPU must have AVX2 and FMA: safe to call from code compiled for
/// them, `unsafe` elsewhere.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub fn exp(x: __m256) -> __m256 {
    // max/min return their second operand when either is NaN, so NaN
    // passes through, as with `clamp`
    let xc = _mm256_min_ps(splat(89.0), _mm256_max_ps(splat(-104.0), x));
    // the scalar form rounds the rounded product x * log2 e
    let t = _mm256_add_ps(_mm256_mul_ps(xc, splat(LOG2_E)), splat(ROUND_MAGIC));
    let (nf, n) = unmagic(t);
    let r = _mm256_fnmadd_ps(nf, splat(LN2_HI), xc);
    let r = _mm256_fnmadd_ps(nf, splat(LN2_LO), r);
    let p = exp_reduced(r);
    // see EXP_NORMAL_N (NaN makes n huge and takes the general way)
    let (lo, hi) = EXP_NORMAL_N;
    let outside = _mm256_or_si256(
        _mm256_cmpgt_epi32(n, _mm256_set1_epi32(hi)),
        _mm256_cmpgt_epi32(_mm256_set1_epi32(lo), n),
    );
    if _mm256_testz_si256(outside, outside) != 0 {
        return _mm256_castsi256_ps(_mm256_add_epi32(
            _mm256_castps_si256(p),
            _mm256_slli_epi32::<23>(n),
        ));
    }
    let n1 = _mm256_srai_epi32::<1>(n);
    let n2 = _mm256_sub_epi32(n, n1);
    _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(n2))
}

/// tanh x, as [`super::fma::tanh`].
///
/// # Safety
/// The CPU must have AVX2 and FMA: safe to call from code compiled for
/// them, `unsafe` elsewhere.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub fn tanh(x: __m256) -> __m256 {
    const HALF_LN2: f32 = 0.5 * std::f32::consts::LN_2;
    let sign = splat(-0.0);
    let a = _mm256_andnot_ps(sign, x);
    // NaN in the second operand passes through
    let ac = _mm256_min_ps(splat(TANH_CLAMP), a);
    let t = _mm256_fmadd_ps(ac, splat(2.0 * LOG2_E), splat(ROUND_MAGIC));
    let (nf, n) = unmagic(t);
    let h = _mm256_fnmadd_ps(nf, splat(HALF_LN2), ac);
    let q = _mm256_fmadd_ps(_mm256_mul_ps(h, h), poly(h, &TANH_G), h);
    // 2^n for 0 <= n <= 26
    let s = pow2i(n);
    let f = _mm256_fmadd_ps(q, s, _mm256_fmsub_ps(s, splat(0.5), splat(0.5)));
    let t = _mm256_div_ps(f, _mm256_add_ps(f, splat(1.0)));
    // copysign(t, x)
    _mm256_or_ps(_mm256_andnot_ps(sign, t), _mm256_and_ps(sign, x))
}

/// 1/(1 + e^-x), as [`super::fma::sigmoid`].
///
/// # Safety
/// The CPU must have AVX2 and FMA: safe to call from code compiled for
/// them, `unsafe` elsewhere.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub fn sigmoid(x: __m256) -> __m256 {
    const TWO_M64: f32 = 1.0 / 18_446_744_073_709_551_616.0; // 2^-64, exact
    let xc = _mm256_min_ps(splat(40.0), _mm256_max_ps(splat(-104.0), x));
    let t = _mm256_fmadd_ps(xc, splat(-LOG2_E), splat(ROUND_MAGIC));
    let (nf, n) = unmagic(t);
    // -xc - nf LN2_HI, then - nf LN2_LO
    let r = _mm256_fnmsub_ps(nf, splat(LN2_HI), xc);
    let r = _mm256_fnmadd_ps(nf, splat(LN2_LO), r);
    // 2^(n - 64) is normal for every n the clamp allows
    let s = pow2i(_mm256_sub_epi32(n, _mm256_set1_epi32(64)));
    let d = _mm256_fmadd_ps(exp_reduced(r), s, splat(TWO_M64));
    _mm256_div_ps(splat(TWO_M64), d)
}

/// ln x, as [`super::fma::ln`].
///
/// # Safety
/// The CPU must have AVX2 and FMA: safe to call from code compiled for
/// them, `unsafe` elsewhere.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub fn ln(x: __m256) -> __m256 {
    ln_impl::<true>(x)
}

/// [`ln`] for lanes that hold no positive subnormal, such as f16 values
/// widened to f32 (the least f16, 2^-24, is a normal f32): the same bits
/// with the subnormal rescaling left out. Zeros and negative numbers get
/// their special values either way, so skipping their rescaling changes
/// nothing.
///
/// # Safety
/// The CPU must have AVX2 and FMA: safe to call from code compiled for
/// them, `unsafe` elsewhere.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub fn ln_no_subnormals(x: __m256) -> __m256 {
    ln_impl::<false>(x)
}

/// [`ln`] of two vectors: [`ln_no_subnormals`] on both unless a lane of
/// either is below the least normal number, which two compares find for
/// 16 lanes, against five rescaling operations per 8. Zeros and
/// negatives take the full path too, which gives the same bits.
///
/// # Safety
/// The CPU must have AVX2 and FMA: safe to call from code compiled for
/// them, `unsafe` elsewhere.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub fn ln_pair(a: __m256, b: __m256) -> (__m256, __m256) {
    let least = splat(f32::MIN_POSITIVE);
    let small = _mm256_or_ps(
        _mm256_cmp_ps::<_CMP_LT_OQ>(a, least),
        _mm256_cmp_ps::<_CMP_LT_OQ>(b, least),
    );
    if _mm256_movemask_ps(small) == 0 {
        (ln_impl::<false>(a), ln_impl::<false>(b))
    } else {
        (ln_impl::<true>(a), ln_impl::<true>(b))
    }
}

/// [`ln`], rescaling subnormal inputs when `SUBNORMALS`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn ln_impl<const SUBNORMALS: bool>(x: __m256) -> __m256 {
    const SQRT_HALF_BITS: i32 = 0x3f35_04f3;
    // `ln_reduce`: subnormal (and non-positive) inputs scaled by 2^23,
    // their exponent taken down by 23
    let (xs, kadj) = if SUBNORMALS {
        let sub = _mm256_cmp_ps::<_CMP_LT_OQ>(x, splat(f32::MIN_POSITIVE));
        let scaled = _mm256_mul_ps(x, splat(8_388_608.0));
        let kadj = _mm256_and_si256(_mm256_castps_si256(sub), _mm256_set1_epi32(-23));
        (_mm256_blendv_ps(x, scaled, sub), kadj)
    } else {
        (x, _mm256_setzero_si256())
    };
    let ix = _mm256_sub_epi32(_mm256_castps_si256(xs), _mm256_set1_epi32(SQRT_HALF_BITS));
    let k = _mm256_add_epi32(_mm256_srai_epi32::<23>(ix), kadj);
    let m = _mm256_add_epi32(
        _mm256_and_si256(ix, _mm256_set1_epi32(0x007f_ffff)),
        _mm256_set1_epi32(SQRT_HALF_BITS),
    );
    let f = _mm256_sub_ps(_mm256_castsi256_ps(m), splat(1.0));
    let u = _mm256_fmadd_ps(_mm256_mul_ps(f, f), poly(f, &LN_R), f);
    let r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(k), splat(std::f32::consts::LN_2), u);
    // `log_specials`: negative -> NaN, 0 -> -inf, +inf and NaN -> x
    let zero = _mm256_setzero_ps();
    let r = _mm256_blendv_ps(r, splat(f32::NAN), _mm256_cmp_ps::<_CMP_LT_OQ>(x, zero));
    let r = _mm256_blendv_ps(
        r,
        splat(f32::NEG_INFINITY),
        _mm256_cmp_ps::<_CMP_EQ_OQ>(x, zero),
    );
    _mm256_blendv_ps(x, r, _mm256_cmp_ps::<_CMP_LT_OQ>(x, splat(f32::INFINITY)))
}
