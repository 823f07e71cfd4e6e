//! The AVX2 side of the vector forms ([`crate::engine::vector`]): how f32,
//! f16 and bf16 storage go to and from eight f32 lanes, and the loop that
//! maps a lane function over a slice with them.
//!
//! AVX2 has no 16-bit masked loads or stores, and f32 tails are rare
//! enough that their cost does not matter, so a tail of fewer than eight
//! lanes goes through an eight-lane buffer on the stack (f32 with
//! `vmaskmovps` instead, which keeps a call on one element short). f16
//! converts with F16C (`vcvtph2ps`, `vcvtps2ph` to nearest even); bf16 is
//! the top half of an f32 and converts with integer shifts, narrowing to
//! nearest even with NaNs made quiet as `half::bf16::from_f32` does (16
//! at a time split into even and odd elements, which needs no shuffle).
//! [`widen32`] and [`narrow32`] serve the chunked loops of half-type
//! kernels without a form (`engine::tiles`). Everything here is inlined
//! into `#[target_feature(enable = "avx2,fma,f16c")]` callers.

use std::arch::x86_64::*;

use half::{bf16, f16};

/// How one storage type goes to and from 8 f32 lanes.
pub(in crate::engine) trait Lanes {
    /// The storage type.
    type Elem: bytemuck::Pod;
    /// Lanes `0..8` from `p`.
    ///
    /// # Safety
    /// The caller is compiled for AVX2, FMA and F16C, and the CPU has
    /// them; the 8 lanes are readable.
    unsafe fn load(p: *const Self::Elem) -> __m256;
    /// Stores lanes `0..8` to `p`.
    ///
    /// # Safety
    /// As for `load`; the 8 lanes are writable.
    unsafe fn store(p: *mut Self::Elem, v: __m256);
    /// Lanes `0..n` from `p` (`n < 8`), the rest zero.
    ///
    /// # Safety
    /// As for `load`; the `n` lanes are readable.
    #[inline(always)]
    unsafe fn load_part(p: *const Self::Elem, n: usize) -> __m256 {
        let mut buf: [Self::Elem; 8] = bytemuck::Zeroable::zeroed();
        // SAFETY: the caller's contract; `buf` holds 8 > n lanes.
        unsafe {
            std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n.min(8));
            Self::load(buf.as_ptr())
        }
    }
    /// Stores lanes `0..n` of `v` to `p` (`n < 8`).
    ///
    /// # Safety
    /// As for `load`; the `n` lanes are writable.
    #[inline(always)]
    unsafe fn store_part(p: *mut Self::Elem, n: usize, v: __m256) {
        let mut buf: [Self::Elem; 8] = bytemuck::Zeroable::zeroed();
        // SAFETY: the caller's contract; `buf` holds 8 > n lanes.
        unsafe {
            Self::store(buf.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n.min(8));
        }
    }
    /// Lanes `0..16` from `p` as two vectors, in any split that
    /// [`Lanes::store2`] and [`Lanes::stream2`] undo (an elementwise
    /// function does not care which lane holds which element).
    ///
    /// # Safety
    /// As for `load`; the 16 lanes are readable.
    #[inline(always)]
    unsafe fn load2(p: *const Self::Elem) -> (__m256, __m256) {
        // SAFETY: the caller's contract.
        unsafe { (Self::load(p), Self::load(p.add(8))) }
    }
    /// Stores a [`Lanes::load2`] pair's results to lanes `0..16`.
    ///
    /// # Safety
    /// As for `load`; the 16 lanes are writable.
    #[inline(always)]
    unsafe fn store2(p: *mut Self::Elem, a: __m256, b: __m256) {
        // SAFETY: the caller's contract.
        unsafe {
            Self::store(p, a);
            Self::store(p.add(8), b);
        }
    }
    /// As [`Lanes::store2`], with streaming stores.
    ///
    /// # Safety
    /// As for `load`; the 16 lanes are writable and `p` is 32-byte
    /// aligned. The stores are weakly ordered (the caller fences).
    unsafe fn stream2(p: *mut Self::Elem, a: __m256, b: __m256);
}

/// f32 lanes.
pub(in crate::engine) struct F32;
/// f16 lanes, converted with F16C.
pub(in crate::engine) struct F16;
/// bf16 lanes, converted with integer operations.
pub(in crate::engine) struct Bf16;

/// The first `n` of eight 32-bit lanes, as a `vmaskmovps` mask.
///
/// # Safety
/// The CPU has AVX2 (every caller is compiled for it).
#[inline(always)]
unsafe fn first(n: usize) -> __m256i {
    // SAFETY: the caller's contract (register-only operations).
    unsafe {
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(n.min(8) as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    }
}

impl Lanes for F32 {
    type Elem = f32;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: the caller's contract.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        // SAFETY: the caller's contract.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    /// Masked: lanes past `n` are neither read nor faulted on.
    #[inline(always)]
    unsafe fn load_part(p: *const f32, n: usize) -> __m256 {
        // SAFETY: the caller's contract; only the first `n` lanes load.
        unsafe { _mm256_maskload_ps(p, first(n)) }
    }
    #[inline(always)]
    unsafe fn store_part(p: *mut f32, n: usize, v: __m256) {
        // SAFETY: the caller's contract; only the first `n` lanes store.
        unsafe { _mm256_maskstore_ps(p, first(n), v) }
    }
    #[inline(always)]
    unsafe fn stream2(p: *mut f32, a: __m256, b: __m256) {
        // SAFETY: the caller's contract; `p + 8` is 32 bytes further, so
        // aligned as well.
        unsafe {
            _mm256_stream_ps(p, a);
            _mm256_stream_ps(p.add(8), b);
        }
    }
}

/// f32 -> f16 bits, to nearest even.
///
/// # Safety
/// The CPU has F16C (every caller is compiled for it).
#[inline(always)]
unsafe fn f16_narrow(v: __m256) -> __m128i {
    // SAFETY: the caller's contract (a register-only operation).
    unsafe { _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(v) }
}

impl Lanes for F16 {
    type Elem = f16;
    #[inline(always)]
    unsafe fn load(p: *const f16) -> __m256 {
        // SAFETY: the caller's contract; f16 is 16 plain bits.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f16, v: __m256) {
        // SAFETY: as above.
        unsafe { _mm_storeu_si128(p.cast(), f16_narrow(v)) }
    }
    #[inline(always)]
    unsafe fn stream2(p: *mut f16, a: __m256, b: __m256) {
        // SAFETY: the caller's contract.
        unsafe { _mm256_stream_si256(p.cast(), _mm256_set_m128i(f16_narrow(b), f16_narrow(a))) }
    }
}

/// `round_bf16` in lanes: nearest even by adding 0x7fff plus the kept
/// lowest bit, NaNs made quiet instead; the bf16 bits in the high half of
/// each 32-bit lane (the low half is left over from rounding).
///
/// # Safety
/// The CPU has AVX2 (every caller is compiled for it).
#[inline(always)]
unsafe fn bf16_high(v: __m256) -> __m256i {
    // SAFETY: the caller's contract (register-only operations).
    unsafe {
        let b = _mm256_castps_si256(v);
        let quiet = _mm256_or_si256(b, _mm256_set1_epi32(0x0040_0000));
        let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
        _mm256_blendv_epi8(bf16_high_not_nan(v), quiet, nan)
    }
}

/// [`bf16_high`] for lanes that hold no NaN: rounding to nearest even
/// alone (a NaN could round to infinity or flip its sign).
///
/// # Safety
/// The CPU has AVX2 (every caller is compiled for it).
#[inline(always)]
unsafe fn bf16_high_not_nan(v: __m256) -> __m256i {
    // SAFETY: the caller's contract (register-only operations).
    unsafe {
        let b = _mm256_castps_si256(v);
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(b), _mm256_set1_epi32(1));
        _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)))
    }
}

/// [`bf16_high`] with the bf16 bits moved to the low half of each lane.
///
/// # Safety
/// The CPU has AVX2 (every caller is compiled for it).
#[inline(always)]
unsafe fn bf16_bits(v: __m256) -> __m256i {
    // SAFETY: the caller's contract (register-only operations).
    unsafe { _mm256_srli_epi32::<16>(bf16_high(v)) }
}

/// The 16 results of a [`Bf16::load2`] pair, rounded, in element order:
/// each even element's bits shifted down into its lane's low half, each
/// odd one's left in the high half, and one word blend joins them. This
/// undoes the split with one shift and no shuffle.
///
/// # Safety
/// The CPU has AVX2 (every caller is compiled for it).
#[inline(always)]
unsafe fn bf16_pack(a: __m256, b: __m256) -> __m256i {
    // SAFETY: the caller's contract (register-only operations).
    unsafe {
        // One compare finds a NaN in either vector; without one (nearly
        // always) the rounding skips the quieting, three operations of
        // seven per vector.
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b);
        if _mm256_movemask_ps(nan) == 0 {
            let low = _mm256_srli_epi32::<16>(bf16_high_not_nan(a));
            _mm256_blend_epi16::<0b1010_1010>(low, bf16_high_not_nan(b))
        } else {
            _mm256_blend_epi16::<0b1010_1010>(bf16_bits(a), bf16_high(b))
        }
    }
}

/// Where element `k` of 16 sits after [`Bf16::load2`]: `(second
/// vector?, lane)`. The first vector holds the even elements, the second
/// the odd ones, each in order.
#[cfg(test)]
pub(super) const fn split_lane(k: usize) -> (bool, usize) {
    (k % 2 == 1, k / 2)
}

impl Lanes for Bf16 {
    type Elem = bf16;
    #[inline(always)]
    unsafe fn load(p: *const bf16) -> __m256 {
        // SAFETY: the caller's contract; bf16 is the top half of an f32.
        unsafe {
            let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
        }
    }
    #[inline(always)]
    unsafe fn store(p: *mut bf16, v: __m256) {
        // SAFETY: the caller's contract; the lanes are at most 0xffff.
        unsafe {
            let b = bf16_bits(v);
            let h = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b));
            _mm_storeu_si128(p.cast(), h)
        }
    }
    /// One 32-byte load split into even and odd elements (see
    /// `split_lane`): a bf16 is the high half of an f32, so an odd
    /// element only needs the even one below it cleared and an even one
    /// a shift, where widening in order would take two shuffles.
    #[inline(always)]
    unsafe fn load2(p: *const bf16) -> (__m256, __m256) {
        // SAFETY: the caller's contract.
        unsafe {
            let v = _mm256_loadu_si256(p.cast());
            let high = _mm256_set1_epi32(!0xffff);
            (
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v)),
                _mm256_castsi256_ps(_mm256_and_si256(v, high)),
            )
        }
    }
    #[inline(always)]
    unsafe fn store2(p: *mut bf16, a: __m256, b: __m256) {
        // SAFETY: the caller's contract.
        unsafe { _mm256_storeu_si256(p.cast(), bf16_pack(a, b)) }
    }
    #[inline(always)]
    unsafe fn stream2(p: *mut bf16, a: __m256, b: __m256) {
        // SAFETY: the caller's contract.
        unsafe { _mm256_stream_si256(p.cast(), bf16_pack(a, b)) }
    }
}

/// Lanes `0..32` of `src` widened into `dst` in [`Lanes::load2`]'s order,
/// 16 at a time (for loops that compute from an f32 buffer).
///
/// # Safety
/// As for [`Lanes::load`].
#[inline(always)]
pub(in crate::engine) unsafe fn widen32<L: Lanes>(src: &[L::Elem; 32], dst: &mut [f32; 32]) {
    // SAFETY: the caller's contract; both arrays hold lanes `h..h + 16`.
    unsafe {
        for h in [0, 16] {
            let (a, b) = L::load2(src.as_ptr().add(h));
            _mm256_storeu_ps(dst.as_mut_ptr().add(h), a);
            _mm256_storeu_ps(dst.as_mut_ptr().add(h + 8), b);
        }
    }
}

/// The inverse of [`widen32`], order included.
///
/// # Safety
/// As for [`Lanes::store`].
#[inline(always)]
pub(in crate::engine) unsafe fn narrow32<L: Lanes>(src: &[f32; 32], dst: &mut [L::Elem; 32]) {
    // SAFETY: the caller's contract; both arrays hold lanes `h..h + 16`.
    unsafe {
        for h in [0, 16] {
            let a = _mm256_loadu_ps(src.as_ptr().add(h));
            let b = _mm256_loadu_ps(src.as_ptr().add(h + 8));
            L::store2(dst.as_mut_ptr().add(h), a, b);
        }
    }
}

/// `x <= 0 ? 0 : x`: keeps the lanes that are not less than or equal to
/// zero (positives and NaNs, `_CMP_NLE_UQ`) and zeroes the rest, so -0
/// gives +0 and NaN passes through.
#[inline]
#[target_feature(enable = "avx2")]
pub(in crate::engine) fn relu(x: __m256) -> __m256 {
    _mm256_and_ps(_mm256_cmp_ps::<_CMP_NLE_UQ>(x, _mm256_setzero_ps()), x)
}

/// [`map`] with streaming stores or without.
///
/// # Safety
/// As for [`map`].
#[inline(always)]
pub(in crate::engine) unsafe fn run<L: Lanes>(
    f: impl Fn(__m256) -> __m256,
    f2: impl Fn(__m256, __m256) -> (__m256, __m256),
    x: &[L::Elem],
    out: &mut [L::Elem],
    stream: bool,
) {
    // SAFETY: the caller's contract.
    unsafe {
        if stream {
            map::<L, true>(f, f2, x, out)
        } else {
            map::<L, false>(f, f2, x, out)
        }
    }
}

/// `out[j] = f(x[j])`, 16 lanes (two vectors, so that two results are in
/// flight; `f2` is `f` on both) at a time, then 8, then the tail of fewer
/// than 8 (computed on zeros past the end, which are not stored). With
/// `STREAM`, lanes up to `out`'s first 64-byte boundary are stored
/// plainly and the 16-lane steps after it with streaming stores, which
/// the caller fences.
///
/// # Safety
/// The caller is compiled for AVX2, FMA and F16C, so that everything here
/// inlines into it, and the CPU has them.
///
/// # Panics
/// If the lengths differ.
#[inline(always)]
pub(in crate::engine) unsafe fn map<L: Lanes, const STREAM: bool>(
    f: impl Fn(__m256) -> __m256,
    f2: impl Fn(__m256, __m256) -> (__m256, __m256),
    x: &[L::Elem],
    out: &mut [L::Elem],
) {
    assert_eq!(x.len(), out.len(), "vector loop over slices of one length");
    let n = x.len();
    let (src, dst) = (x.as_ptr(), out.as_mut_ptr());
    // SAFETY (whole body): every full access covers lanes `i..i + 8` or
    // `i..i + 16` with that bound checked against `n` (or `head <= n`);
    // partial ones cover `i..n` or `i..head`; the features are the
    // caller's contract. Streamed steps start where `dst + i` is 64-byte
    // aligned and step by 16 lanes, 64 or 32 bytes: always 32-byte
    // aligned, as `stream2` needs.
    unsafe {
        let mut i = 0;
        if STREAM {
            let head = dst.align_offset(64).min(n);
            while i < head {
                let lanes = (head - i).min(8);
                if lanes == 8 {
                    L::store(dst.add(i), f(L::load(src.add(i))));
                } else {
                    L::store_part(dst.add(i), lanes, f(L::load_part(src.add(i), lanes)));
                }
                i += lanes;
            }
            while i + 16 <= n {
                let (a, b) = L::load2(src.add(i));
                let (a, b) = f2(a, b);
                L::stream2(dst.add(i), a, b);
                i += 16;
            }
        }
        while i + 16 <= n {
            let (a, b) = L::load2(src.add(i));
            let (a, b) = f2(a, b);
            L::store2(dst.add(i), a, b);
            i += 16;
        }
        if i + 8 <= n {
            L::store(dst.add(i), f(L::load(src.add(i))));
            i += 8;
        }
        if i < n {
            let lanes = n - i;
            L::store_part(dst.add(i), lanes, f(L::load_part(src.add(i), lanes)));
        }
    }
}
