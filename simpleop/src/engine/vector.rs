//! Hand-vectorised forms of unary kernels, one per instruction set.
//!
//! An op's scalar `forward` runs everywhere, auto-vectorised. Where the
//! compiler cannot reach an instruction that matters (AVX-512's `vscalefps`
//! for exp) or cannot see a shorter sequence (min/max clamps, a sign copied
//! with logic, f16/bf16 converted in registers), an elementwise op with one
//! input can also name a [`VectorForm`] with `#[simple_op(vector = ...)]`.
//! A form holds loops per instruction set: AVX-512 (16 lanes, the `x86`
//! module here) and AVX2 with FMA and F16C (8 lanes, `vector_avx2`). The
//! tile loops call the loops of the active set, in eager calls and fused
//! programs alike: on f32 tiles, and on f16/bf16 storage directly,
//! converting in registers instead of through f32 tile buffers. Each must
//! compute what the scalar form computes in the FMA tile loops, bit for
//! bit (any NaN for a NaN), since which one runs depends on the machine.

use half::{bf16, f16};

#[cfg(target_arch = "x86_64")]
use crate::engine::vector_avx2;

/// A loop `out[j] = f(x[j])` over two slices of one length, writing `out`
/// as [`Stores`] asks.
pub type VectorLoop<T> = unsafe fn(&[T], &mut [T], Stores);

/// How a [`VectorLoop`] may write its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stores {
    /// Plain stores: the output stays in the caches for whoever reads it.
    Cached,
    /// The output is large and read by no one soon: the loop may write
    /// whole cache lines with streaming (non-temporal) stores, which skip
    /// reading each line for ownership. Such stores are weakly ordered;
    /// the caller fences them (`sfence`) before the output is used.
    Streamed,
}

/// A unary function over slices, in explicit vector code for the
/// instruction sets it covers (AVX-512: F, BW, DQ and VL, what
/// `Isa::Avx512` stands for; AVX2 with FMA and F16C, `Isa::Avx2`), on f32
/// and on f16/bf16 storage (computing in f32). f64 kernels never use it.
#[derive(Clone, Copy, Debug)]
pub struct VectorForm {
    name: &'static str,
    avx512: Option<Avx512Loops>,
    avx2: Option<Avx2Loops>,
}

/// A [`VectorForm`]'s loops for one instruction set.
#[derive(Clone, Copy, Debug)]
pub struct VectorLoops {
    /// Over f32.
    pub f32: VectorLoop<f32>,
    /// Over f16 storage: widen, compute in f32, narrow to nearest even.
    pub f16: Option<VectorLoop<f16>>,
    /// Over bf16 storage: widen, compute in f32, narrow to nearest even
    /// (NaNs quiet), as `half::bf16::from_f32` does.
    pub bf16: Option<VectorLoop<bf16>>,
}

/// The AVX-512 loops of a [`VectorForm`].
pub type Avx512Loops = VectorLoops;
/// The AVX2 loops of a [`VectorForm`].
pub type Avx2Loops = VectorLoops;

impl VectorForm {
    /// A form with AVX-512 loops.
    ///
    /// # Safety
    /// Each loop must be sound to call on any CPU with what
    /// `Isa::Avx512` stands for (AVX-512F, BW,
    /// DQ and VL, with AVX2, FMA and F16C) with two slices of equal length,
    /// and write to every `out[j]` bit for bit what the op's scalar
    /// `forward` gives for `x[j]` with `T = Float::Fma` of f32 (converted
    /// as documented on `VectorLoops` for the half types; a NaN result
    /// may be any NaN, since which operand's NaN an FMA passes on is the
    /// compiler's choice in the scalar form).
    pub const unsafe fn with_avx512(name: &'static str, loops: Avx512Loops) -> Self {
        VectorForm {
            name,
            avx512: Some(loops),
            avx2: None,
        }
    }

    /// This form with AVX2 loops as well (or instead, on a
    /// [`VectorForm::scalar_only`] form).
    ///
    /// # Safety
    /// Each loop must be sound to call on any CPU with what `Isa::Avx2`
    /// stands for (AVX2, FMA and F16C) with two slices of equal length,
    /// and write to every `out[j]` bit for bit what the op's scalar
    /// `forward` gives for `x[j]` with `T = Float::Fma` of f32 (converted
    /// as documented on `VectorLoops` for the half types; a NaN result may
    /// be any NaN), as for [`VectorForm::with_avx512`].
    pub const unsafe fn with_avx2(self, loops: Avx2Loops) -> Self {
        VectorForm {
            avx2: Some(loops),
            ..self
        }
    }

    /// A form with no vector code, so the scalar kernel always runs (the
    /// built-in forms on other architectures).
    pub const fn scalar_only(name: &'static str) -> Self {
        VectorForm {
            name,
            avx512: None,
            avx2: None,
        }
    }

    /// The function's name, for diagnostics.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The AVX-512 loops, if the form has them.
    pub(crate) fn avx512(&self) -> Option<&Avx512Loops> {
        self.avx512.as_ref()
    }

    /// The AVX2 loops, if the form has them.
    pub(crate) fn avx2(&self) -> Option<&Avx2Loops> {
        self.avx2.as_ref()
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use half::{bf16, f16};

    /// How one storage type goes to and from 16 f32 lanes (also what the
    /// chunked half-type loops of kernels without a form convert with).
    pub(in crate::engine) trait Lanes {
        /// The storage type.
        type Elem;
        /// The lanes `m` selects from `p` (others zero).
        ///
        /// # Safety
        /// The caller is compiled for the features the type needs (see
        /// [`map`]); every selected lane is readable.
        unsafe fn load(p: *const Self::Elem, m: __mmask16) -> __m512;
        /// Stores the lanes `m` selects to `p`.
        ///
        /// # Safety
        /// As for `load`; every selected lane is writable.
        unsafe fn store(p: *mut Self::Elem, m: __mmask16, v: __m512);
        /// Lanes `0..32` from `p` as two vectors, in any split that
        /// [`Lanes::store2`] and [`Lanes::stream2`] undo (an elementwise
        /// function does not care which lane holds which element).
        ///
        /// # Safety
        /// As for `load`; the 32 lanes are readable.
        #[inline(always)]
        unsafe fn load2(p: *const Self::Elem) -> (__m512, __m512) {
            // SAFETY: the caller's contract.
            unsafe { (Self::load(p, !0), Self::load(p.add(16), !0)) }
        }
        /// Stores a [`Lanes::load2`] pair's results to lanes `0..32`.
        ///
        /// # Safety
        /// As for `load`; the 32 lanes are writable.
        #[inline(always)]
        unsafe fn store2(p: *mut Self::Elem, a: __m512, b: __m512) {
            // SAFETY: the caller's contract.
            unsafe {
                Self::store(p, !0, a);
                Self::store(p.add(16), !0, b);
            }
        }
        /// As [`Lanes::store2`], with streaming stores of whole cache
        /// lines.
        ///
        /// # Safety
        /// As for `load`; the 32 lanes are writable and `p` is 64-byte
        /// aligned. The stores are weakly ordered (the caller fences).
        unsafe fn stream2(p: *mut Self::Elem, a: __m512, b: __m512);
    }

    /// Lanes `0..32` of `src` widened into `dst` in [`Lanes::load2`]'s
    /// order (for loops that compute from an f32 buffer).
    ///
    /// # Safety
    /// As for [`Lanes::load`].
    #[inline(always)]
    pub(in crate::engine) unsafe fn widen32<L: Lanes>(src: &[L::Elem; 32], dst: &mut [f32; 32]) {
        // SAFETY: the caller's contract; both arrays hold the 32 lanes.
        unsafe {
            let (a, b) = L::load2(src.as_ptr());
            _mm512_storeu_ps(dst.as_mut_ptr(), a);
            _mm512_storeu_ps(dst.as_mut_ptr().add(16), b);
        }
    }

    /// The inverse of [`widen32`], order included.
    ///
    /// # Safety
    /// As for [`Lanes::store`].
    #[inline(always)]
    pub(in crate::engine) unsafe fn narrow32<L: Lanes>(src: &[f32; 32], dst: &mut [L::Elem; 32]) {
        // SAFETY: the caller's contract; both arrays hold the 32 lanes.
        unsafe {
            let a = _mm512_loadu_ps(src.as_ptr());
            let b = _mm512_loadu_ps(src.as_ptr().add(16));
            L::store2(dst.as_mut_ptr(), a, b)
        }
    }

    /// Two 16-lane halves of 16-bit results as one 64-byte line.
    ///
    /// # Safety
    /// The CPU has AVX-512F and BW (every caller is compiled for them).
    #[inline(always)]
    unsafe fn join(a: __m256i, b: __m256i) -> __m512i {
        // SAFETY: the caller's contract (register-only operations).
        unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b) }
    }

    pub(super) struct F32;
    pub(in crate::engine) struct F16;
    /// bf16 narrowed with integer operations.
    pub(in crate::engine) struct Bf16;
    /// bf16 narrowed by AVX-512 BF16's `vcvtneps2bf16`.
    pub(in crate::engine) struct Bf16Native;

    impl Lanes for F32 {
        type Elem = f32;
        #[inline(always)]
        unsafe fn load(p: *const f32, m: __mmask16) -> __m512 {
            // SAFETY: the caller's contract.
            unsafe { _mm512_maskz_loadu_ps(m, p) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, m: __mmask16, v: __m512) {
            // SAFETY: the caller's contract.
            unsafe { _mm512_mask_storeu_ps(p, m, v) }
        }
        #[inline(always)]
        unsafe fn stream2(p: *mut f32, a: __m512, b: __m512) {
            // SAFETY: the caller's contract; `p + 16` is 64 bytes further,
            // so aligned as well.
            unsafe {
                _mm512_stream_ps(p, a);
                _mm512_stream_ps(p.add(16), b);
            }
        }
    }

    impl Lanes for F16 {
        type Elem = f16;
        #[inline(always)]
        unsafe fn load(p: *const f16, m: __mmask16) -> __m512 {
            // SAFETY: the caller's contract; f16 is 16 plain bits.
            unsafe { _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p.cast())) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f16, m: __mmask16, v: __m512) {
            // SAFETY: as above.
            unsafe { _mm256_mask_storeu_epi16(p.cast(), m, f16_narrow(v)) }
        }
        #[inline(always)]
        unsafe fn stream2(p: *mut f16, a: __m512, b: __m512) {
            // SAFETY: the caller's contract.
            unsafe { _mm512_stream_si512(p.cast(), join(f16_narrow(a), f16_narrow(b))) }
        }
    }

    /// f32 -> f16 bits, to nearest even.
    ///
    /// # Safety
    /// The CPU has AVX-512F and BW (every caller is compiled for them).
    #[inline(always)]
    unsafe fn f16_narrow(v: __m512) -> __m256i {
        // SAFETY: the caller's contract (a register-only operation).
        unsafe { _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(v) }
    }

    /// [`Lanes::store2`] and [`Lanes::stream2`] of a bf16 lane type: the
    /// pair packed into one 64-byte line by `$pack`, stored or streamed.
    macro_rules! bf16_pair_stores {
        ($pack:ident) => {
            #[inline(always)]
            unsafe fn store2(p: *mut bf16, a: __m512, b: __m512) {
                // SAFETY: the caller's contract (which includes what
                // `$pack` needs).
                unsafe { _mm512_storeu_si512(p.cast(), $pack(a, b)) }
            }
            #[inline(always)]
            unsafe fn stream2(p: *mut bf16, a: __m512, b: __m512) {
                // SAFETY: as above.
                unsafe { _mm512_stream_si512(p.cast(), $pack(a, b)) }
            }
        };
    }

    impl Lanes for Bf16 {
        type Elem = bf16;
        #[inline(always)]
        unsafe fn load(p: *const bf16, m: __mmask16) -> __m512 {
            // SAFETY: the caller's contract; bf16 is the top half of an f32.
            unsafe {
                let h = _mm256_maskz_loadu_epi16(m, p.cast());
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
            }
        }
        #[inline(always)]
        unsafe fn store(p: *mut bf16, m: __mmask16, v: __m512) {
            // SAFETY: the caller's contract.
            unsafe { _mm256_mask_storeu_epi16(p.cast(), m, _mm512_cvtepi32_epi16(bf16_bits(v))) }
        }
        /// One 64-byte load, widened in 128-bit lanes (see [`split_lane`]).
        #[inline(always)]
        unsafe fn load2(p: *const bf16) -> (__m512, __m512) {
            // SAFETY: the caller's contract.
            unsafe {
                let v = _mm512_loadu_si512(p.cast());
                let z = _mm512_setzero_si512();
                (
                    _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, v)),
                    _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, v)),
                )
            }
        }
        bf16_pair_stores!(bf16_pack);
    }

    /// Where element `k` of 32 sits after [`Bf16::load2`]: `(second
    /// vector?, lane)`. Unpacking works within 128-bit lanes, so the first
    /// vector holds elements 0-3, 8-11, 16-19 and 24-27, the second the
    /// rest; for an elementwise function that order is as good as any, and
    /// the stores put each element back.
    pub(super) const fn split_lane(k: usize) -> (bool, usize) {
        (k % 8 >= 4, k / 8 * 4 + k % 4)
    }

    /// `round_bf16` in lanes: nearest even by adding 0x7fff plus the kept
    /// lowest bit, NaNs made quiet instead; the bf16 bits in the low half
    /// of each 32-bit lane.
    ///
    /// # Safety
    /// The CPU has AVX-512F and BW (every caller is compiled for them).
    #[inline(always)]
    unsafe fn bf16_bits(v: __m512) -> __m512i {
        // SAFETY: the caller's contract (register-only operations).
        unsafe {
            let b = _mm512_castps_si512(v);
            let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
            let rounded = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
            let quiet = _mm512_or_si512(b, _mm512_set1_epi32(0x0040_0000));
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            _mm512_srli_epi32::<16>(_mm512_mask_blend_epi32(nan, rounded, quiet))
        }
    }

    /// The 32 results of a [`Bf16::load2`] pair, rounded, in element
    /// order: packing works within 128-bit lanes too, and undoes the split.
    ///
    /// # Safety
    /// The CPU has AVX-512F and BW (every caller is compiled for them).
    #[inline(always)]
    unsafe fn bf16_pack(a: __m512, b: __m512) -> __m512i {
        // SAFETY: the caller's contract (register-only operations); every
        // lane is at most 0xffff, so the saturation never acts.
        unsafe { _mm512_packus_epi32(bf16_bits(a), bf16_bits(b)) }
    }

    /// Word `k` of the result: the word of `vcvtne2ps2bf16(b, a)` (a's
    /// lanes, then b's) that holds element `k` after [`Bf16::load2`].
    const SPLIT_ORDER: [u16; 32] = {
        let mut idx = [0u16; 32];
        let mut k = 0;
        while k < 32 {
            let (second, lane) = split_lane(k);
            idx[k] = (lane + if second { 16 } else { 0 }) as u16;
            k += 1;
        }
        idx
    };

    impl Lanes for Bf16Native {
        type Elem = bf16;
        #[inline(always)]
        unsafe fn load(p: *const bf16, m: __mmask16) -> __m512 {
            // SAFETY: the caller's contract.
            unsafe { Bf16::load(p, m) }
        }
        /// The instruction flushes subnormal inputs to zero, which `half`
        /// does not, so a vector holding one narrows as [`Bf16`] does.
        #[inline(always)]
        unsafe fn store(p: *mut bf16, m: __mmask16, v: __m512) {
            // SAFETY: the caller's contract (which includes AVX-512 BF16);
            // `__m256bh` and `__m256i` are both 32 plain bytes.
            unsafe {
                if _mm512_mask_fpclass_ps_mask::<SUBNORMAL>(m, v) != 0 {
                    return Bf16::store(p, m, v);
                }
                let h = std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(v));
                _mm256_mask_storeu_epi16(p.cast(), m, h)
            }
        }
        #[inline(always)]
        unsafe fn load2(p: *const bf16) -> (__m512, __m512) {
            // SAFETY: the caller's contract.
            unsafe { Bf16::load2(p) }
        }
        bf16_pair_stores!(bf16_pack_native);
    }

    /// `fpclass`'s class bit for subnormals.
    const SUBNORMAL: i32 = 0x20;

    /// [`bf16_pack`] with one `vcvtne2ps2bf16` and a word permutation,
    /// unless a lane is subnormal (see [`Bf16Native::store`]).
    ///
    /// # Safety
    /// The CPU has AVX-512 BF16 (the callers' target).
    #[inline(always)]
    unsafe fn bf16_pack_native(a: __m512, b: __m512) -> __m512i {
        // SAFETY: the caller's contract; `__m512bh` and `__m512i` are both
        // 64 plain bytes; `SPLIT_ORDER` is 64 readable bytes.
        unsafe {
            if (_mm512_fpclass_ps_mask::<SUBNORMAL>(a) | _mm512_fpclass_ps_mask::<SUBNORMAL>(b))
                != 0
            {
                return bf16_pack(a, b);
            }
            let h = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(b, a));
            _mm512_permutexvar_epi16(_mm512_loadu_si512(SPLIT_ORDER.as_ptr().cast()), h)
        }
    }

    /// `x <= 0 ? 0 : x`: keeps the lanes that are not less than or equal
    /// to zero (positives and NaNs, `_CMP_NLE_UQ`) and zeroes the rest, so
    /// -0 gives +0 and NaN passes through.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn relu(x: __m512) -> __m512 {
        let keep = _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(x, _mm512_setzero_ps());
        _mm512_maskz_mov_ps(keep, x)
    }

    /// [`map`] with streaming stores or without, as `stores` asks.
    ///
    /// # Safety
    /// As for [`map`].
    #[inline(always)]
    pub(super) unsafe fn run<L: Lanes>(
        f: impl Fn(__m512) -> __m512,
        f2: impl Fn(__m512, __m512) -> (__m512, __m512),
        x: &[L::Elem],
        out: &mut [L::Elem],
        stores: crate::engine::vector::Stores,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            match stores {
                crate::engine::vector::Stores::Cached => map::<L, false>(f, f2, x, out),
                crate::engine::vector::Stores::Streamed => map::<L, true>(f, f2, x, out),
            }
        }
    }

    /// `out[j] = f(x[j])`, 32 lanes (two vectors, so that two results are
    /// in flight; `f2` is `f` on both) at a time, then 16; the tail runs
    /// masked (lanes past the end are computed on zeros and not stored). With `STREAM`, lanes up
    /// to `out`'s first 64-byte boundary are stored plainly and the whole
    /// lines after it with streaming stores, which the caller fences.
    ///
    /// # Safety
    /// The caller is compiled for AVX-512F, BW, DQ and VL (and BF16 for
    /// [`Bf16Native`]), so that everything here inlines into it, and the
    /// CPU has them.
    ///
    /// # Panics
    /// If the lengths differ.
    #[inline(always)]
    pub(super) unsafe fn map<L: Lanes, const STREAM: bool>(
        f: impl Fn(__m512) -> __m512,
        f2: impl Fn(__m512, __m512) -> (__m512, __m512),
        x: &[L::Elem],
        out: &mut [L::Elem],
    ) {
        assert_eq!(x.len(), out.len(), "vector loop over slices of one length");
        let n = x.len();
        let (src, dst) = (x.as_ptr(), out.as_mut_ptr());
        // SAFETY (whole body): every unmasked access covers lanes
        // `i..i + 32` with that bound checked against `n`; the rest are
        // masked to lanes below `head` (`<= n`) or `n`; the features are
        // the caller's contract. Streamed lines start where `dst + i` is 64-byte
        // aligned: `i` starts at `head` and steps by 32 lanes, a multiple
        // of 64 bytes for both lane widths.
        unsafe {
            let mut i = 0;
            if STREAM {
                let head = dst.align_offset(64).min(n);
                while i < head {
                    let lanes = (head - i).min(16);
                    let m = ((1u32 << lanes) - 1) as __mmask16;
                    L::store(dst.add(i), m, f(L::load(src.add(i), m)));
                    i += lanes;
                }
                while i + 32 <= n {
                    let (a, b) = L::load2(src.add(i));
                    let (a, b) = f2(a, b);
                    L::stream2(dst.add(i), a, b);
                    i += 32;
                }
            }
            while i + 32 <= n {
                let (a, b) = L::load2(src.add(i));
                let (a, b) = f2(a, b);
                L::store2(dst.add(i), a, b);
                i += 32;
            }
            while i < n {
                let lanes = (n - i).min(16);
                let m = ((1u32 << lanes) - 1) as __mmask16;
                L::store(dst.add(i), m, f(L::load(src.add(i), m)));
                i += lanes;
            }
        }
    }
}

/// The AVX-512 loops of a built-in form from a 16-lane function `$path`,
/// `$f16` computing its bits on every f16 value widened to f32, and
/// `$pair` on two vectors at once (f32, bf16).
macro_rules! avx512_loops {
    ($path:path) => {
        avx512_loops!($path, f16: $path)
    };
    ($path:path, f16: $f16:path) => {
        avx512_loops!($path, f16: $f16, pair: |a, b| ($path(a), $path(b)))
    };
    ($path:path, f16: $f16:path, pair: $pair:expr) => {
        Avx512Loops {
            f32: {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
                fn simd_loop(x: &[f32], out: &mut [f32], stores: Stores) {
                    // SAFETY: compiled for what `map` needs.
                    unsafe { x86::run::<x86::F32>(|v| $path(v), $pair, x, out, stores) }
                }
                simd_loop
            },
            f16: Some({
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
                fn simd_loop(x: &[f16], out: &mut [f16], stores: Stores) {
                    // SAFETY: as above.
                    unsafe { x86::run::<x86::F16>(|v| $f16(v), |a, b| ($f16(a), $f16(b)), x, out, stores) }
                }
                simd_loop
            }),
            bf16: Some({
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")]
                fn native(x: &[bf16], out: &mut [bf16], stores: Stores) {
                    // SAFETY: as above, BF16 included.
                    unsafe { x86::run::<x86::Bf16Native>(|v| $path(v), $pair, x, out, stores) }
                }
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
                fn simd_loop(x: &[bf16], out: &mut [bf16], stores: Stores) {
                    if std::arch::is_x86_feature_detected!("avx512bf16") {
                        // SAFETY: the CPU has AVX-512 BF16, and the
                        // rest (this function's features).
                        unsafe { native(x, out, stores) }
                    } else {
                        // SAFETY: compiled for what `map` needs.
                        unsafe { x86::run::<x86::Bf16>(|v| $path(v), $pair, x, out, stores) }
                    }
                }
                simd_loop
            }),
        }
    };
}

/// The AVX2 loops of a built-in form from an 8-lane function, as
/// [`avx512_loops`].
macro_rules! avx2_loops {
    ($path:path) => {
        avx2_loops!($path, f16: $path)
    };
    ($path:path, f16: $f16:path) => {
        avx2_loops!($path, f16: $f16, pair: |a, b| ($path(a), $path(b)))
    };
    ($path:path, f16: $f16:path, pair: $pair:expr) => {
        Avx2Loops {
            f32: {
                #[target_feature(enable = "avx2,fma,f16c")]
                fn simd_loop(x: &[f32], out: &mut [f32], stores: Stores) {
                    let stream = stores == Stores::Streamed;
                    // SAFETY: compiled for what `map` needs.
                    unsafe { vector_avx2::run::<vector_avx2::F32>(|v| $path(v), $pair, x, out, stream) }
                }
                simd_loop
            },
            f16: Some({
                #[target_feature(enable = "avx2,fma,f16c")]
                fn simd_loop(x: &[f16], out: &mut [f16], stores: Stores) {
                    let stream = stores == Stores::Streamed;
                    let pair = |a, b| ($f16(a), $f16(b));
                    // SAFETY: as above.
                    unsafe { vector_avx2::run::<vector_avx2::F16>(|v| $f16(v), pair, x, out, stream) }
                }
                simd_loop
            }),
            bf16: Some({
                #[target_feature(enable = "avx2,fma,f16c")]
                fn simd_loop(x: &[bf16], out: &mut [bf16], stores: Stores) {
                    let stream = stores == Stores::Streamed;
                    // SAFETY: as above.
                    unsafe { vector_avx2::run::<vector_avx2::Bf16>(|v| $path(v), $pair, x, out, stream) }
                }
                simd_loop
            }),
        }
    };
}

/// Defines a built-in form from its AVX-512 and AVX2 lane functions (the
/// arguments of [`avx512_loops`] and [`avx2_loops`]).
macro_rules! builtin {
    ($(#[$doc:meta])* $name:ident, $f:ident, avx512: ($($a:tt)*), avx2: ($($b:tt)*)) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        // SAFETY: each loop is compiled for, and so requires, AVX-512F/BW/
        // DQ/VL (BF16 behind a runtime check) or AVX2/FMA/F16C, and checks
        // the lengths; the lane functions match the op's scalar FMA form
        // bit for bit and the conversions match `half`'s (both tested).
        pub const $name: VectorForm = unsafe {
            VectorForm::with_avx512(stringify!($f), avx512_loops!($($a)*))
                .with_avx2(avx2_loops!($($b)*))
        };
        $(#[$doc])*
        #[cfg(not(target_arch = "x86_64"))]
        pub const $name: VectorForm = VectorForm::scalar_only(stringify!($f));
    };
}

builtin!(
    /// e^x ([`crate::vmath::fma::exp`]).
    EXP, exp,
    avx512: (crate::vmath::avx512::exp),
    avx2: (crate::vmath::avx2::exp)
);
builtin!(
    /// tanh x ([`crate::vmath::fma::tanh`]).
    TANH, tanh,
    avx512: (crate::vmath::avx512::tanh),
    avx2: (crate::vmath::avx2::tanh)
);
builtin!(
    /// 1/(1 + e^-x) ([`crate::vmath::fma::sigmoid`]).
    SIGMOID, sigmoid,
    avx512: (crate::vmath::avx512::sigmoid),
    avx2: (crate::vmath::avx2::sigmoid)
);
builtin!(
    /// ln x ([`crate::vmath::fma::ln`]); f16 values are never f32
    /// subnormals, so their loop skips that rescaling, and the other loops
    /// skip it for two vectors at a time when neither holds one.
    LN, ln,
    avx512: (
        crate::vmath::avx512::ln, f16: crate::vmath::avx512::ln_no_subnormals,
        pair: |a, b| crate::vmath::avx512::ln_pair(a, b)
    ),
    avx2: (
        crate::vmath::avx2::ln, f16: crate::vmath::avx2::ln_no_subnormals,
        pair: |a, b| crate::vmath::avx2::ln_pair(a, b)
    )
);
builtin!(
    /// `max(x, 0)`, -0 giving +0 and NaN passing through as
    /// `if x <= 0 { 0 } else { x }` does. The compiler vectorises that
    /// alone; the form is for the half types, which it lets convert in
    /// registers: one pass over a tile instead of three through f32
    /// buffers, or two instead of four when the output is streamed through
    /// a staging tile.
    RELU, relu,
    avx512: (x86::relu),
    avx2: (vector_avx2::relu)
);

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::engine::isa::Isa;
    use crate::vmath;

    type Scalar = fn(f32) -> f32;
    /// relu's scalar kernel (`simpleop-ops`).
    fn relu(x: f32) -> f32 {
        if x <= 0.0 { 0.0 } else { x }
    }
    const FORMS: [(VectorForm, Scalar); 5] = [
        (EXP, vmath::fma::exp),
        (TANH, vmath::fma::tanh),
        (SIGMOID, vmath::fma::sigmoid),
        (LN, vmath::fma::ln),
        (RELU, relu),
    ];

    /// Picks one instruction set's loops from a form.
    type Pick = fn(&VectorForm) -> Option<&VectorLoops>;

    /// The instruction sets with loops that this CPU runs, each with how
    /// to pick its loops; the others are skipped, saying so.
    fn isas() -> Vec<(Isa, Pick)> {
        let all: [(Isa, Pick); 2] = [
            (Isa::Avx512, VectorForm::avx512),
            (Isa::Avx2, VectorForm::avx2),
        ];
        all.into_iter()
            .filter(|(isa, _)| {
                let on = isa.is_supported();
                if !on {
                    eprintln!("skipped {}: this CPU (or valgrind) lacks it", isa.name());
                }
                on
            })
            .collect()
    }

    /// `form`'s loops for `isa` (every built-in form has them all).
    fn loops(form: &VectorForm, pick: Pick) -> &VectorLoops {
        pick(form).expect("built in")
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// Every 4099th bit pattern (about 10^6, every exponent of both signs)
    /// and the edges of each function's clamps and scalings.
    fn inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (0..=u32::MAX).step_by(4099).map(f32::from_bits).collect();
        for x in [
            0.0,
            f32::MIN_POSITIVE,
            1e-40,
            1e-45,
            0.0309,
            0.0626,
            9.0,
            9.1,
            9.2,
            40.0,
            41.0,
            87.3,
            88.72,
            88.73,
            89.0,
            103.9,
            104.0,
            105.0,
            0.5,
            // ln's reduction switches at the f32 nearest sqrt(1/2)
            f32::from_bits(std::f32::consts::FRAC_1_SQRT_2.to_bits() - 1),
            std::f32::consts::FRAC_1_SQRT_2,
            f32::from_bits(std::f32::consts::FRAC_1_SQRT_2.to_bits() + 1),
            1.0,
            std::f32::consts::SQRT_2,
            2.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
        ] {
            xs.extend([x, -x]);
        }
        xs
    }

    /// `simd_loop` over `x` against `scalar`, bit for bit (any NaN for a
    /// NaN).
    fn check_f32(what: &str, simd_loop: VectorLoop<f32>, scalar: Scalar, x: &[f32]) {
        let mut out = vec![0.0; x.len()];
        // SAFETY: the caller checked the CPU; equal lengths.
        unsafe { simd_loop(x, &mut out, Stores::Cached) };
        for (&x, &y) in x.iter().zip(&out) {
            let want = scalar(x);
            assert!(
                same(y, want),
                "{what} at {x:e} ({:#010x}): {y:e}, scalar form {want:e}",
                x.to_bits()
            );
        }
    }

    #[test]
    fn f32_loops_match_the_scalar_fma_forms_bit_for_bit() {
        let xs = inputs();
        for (isa, pick) in isas() {
            for (form, scalar) in FORMS {
                let simd_loop = loops(&form, pick).f32;
                let what = format!("{} {}", isa.name(), form.name());
                // whole vectors, and tails of every length (from the end,
                // so that they hold the edge values)
                for len in (0..=33).chain([xs.len()]) {
                    check_f32(&what, simd_loop, scalar, &xs[xs.len() - len..]);
                }
            }
        }
    }

    /// Every f32 bit pattern through each instruction set's f32 loops,
    /// against the scalar FMA forms, bit for bit: with the exhaustive ULP
    /// checks of those forms (`vmath`'s docs), the accuracy of the loops.
    /// Minutes in a release build: `cargo test --release -p simpleop --lib
    /// every_f32 -- --ignored` (`SIMPLEOP_SWEEP_THIN=k` takes every k-th
    /// block of patterns only).
    #[test]
    #[ignore = "minutes in a release build; run by hand"]
    fn every_f32_through_the_f32_loops_gives_the_scalar_forms_bits() {
        const BLOCK: u64 = 1 << 20;
        let thin = std::env::var("SIMPLEOP_SWEEP_THIN")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1usize)
            .max(1);
        for (isa, pick) in isas() {
            for (form, scalar) in FORMS {
                let simd_loop = loops(&form, pick).f32;
                let what = format!("{} {}", isa.name(), form.name());
                for start in (0..1u64 << 32).step_by(BLOCK as usize * thin) {
                    let x: Vec<f32> = (start..start + BLOCK)
                        .map(|b| f32::from_bits(b as u32))
                        .collect();
                    check_f32(&what, simd_loop, scalar, &x);
                }
            }
        }
    }

    /// `ln`'s two-vector step takes its subnormal-free path unless a lane
    /// of either vector needs the rescaling: one subnormal at each lane of
    /// a step among normal numbers, zeros and negatives, on both paths,
    /// gives the scalar form's bits (f32; bf16 shares the lane function).
    #[test]
    fn ln_pairs_match_the_scalar_form_whichever_path_they_take() {
        let normal = |i: usize| match i % 5 {
            0 => 0.0,
            1 => -(i as f32),
            _ => 0.3 + i as f32 * 0.37,
        };
        let positive = |i: usize| 0.3 + i as f32 * 0.37;
        for (isa, pick) in isas() {
            let simd_loop = loops(&LN, pick).f32;
            for sub in [1e-45, 1e-40, -1e-40, f32::from_bits(0x007f_ffff)] {
                for around in [normal as fn(usize) -> f32, positive] {
                    for at in 0..=64 {
                        // `at == 64`: no subnormal at all
                        let x: Vec<f32> = (0..64)
                            .map(|i| if i == at { sub } else { around(i) })
                            .collect();
                        let what = format!("{} ln with {sub:e} at {at}", isa.name());
                        check_f32(&what, simd_loop, vmath::fma::ln, &x);
                    }
                }
            }
        }
    }

    /// `Stores::Streamed` writes what `Stores::Cached` writes, at every
    /// alignment of the output (plain head, whole streamed lines, masked
    /// tail), and nothing outside it.
    #[test]
    fn streamed_loops_write_what_cached_loops_write() {
        fn check<T: bytemuck::Pod>(name: &str, simd_loop: VectorLoop<T>, xs: &[T]) {
            let mut guard: T = bytemuck::Zeroable::zeroed();
            bytemuck::bytes_of_mut(&mut guard).fill(0x5a);
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 95, 1000] {
                let x = &xs[..len];
                let mut want = vec![guard; len];
                // SAFETY: the caller checked the CPU; equal lengths.
                unsafe { simd_loop(x, &mut want, Stores::Cached) };
                // 64-byte aligned storage, then every element offset into
                // the first two lines
                #[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
                #[repr(C, align(64))]
                struct Line([u8; 64]);
                let mut lines = vec![Line([0; 64]); (len + 80) * std::mem::size_of::<T>() / 64 + 2];
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut lines);
                let all: &mut [T] = bytemuck::cast_slice_mut(bytes);
                for offset in 0..=64 / std::mem::size_of::<T>() + 1 {
                    all.fill(guard);
                    let out = &mut all[offset..offset + len];
                    // SAFETY: as above.
                    unsafe { simd_loop(x, out, Stores::Streamed) };
                    crate::engine::hints::stream_fence();
                    let bits = |v: &[T]| bytemuck::cast_slice::<T, u8>(v).to_vec();
                    assert_eq!(
                        bits(&all[offset..offset + len]),
                        bits(&want),
                        "{name} {len}+{offset}"
                    );
                    assert!(
                        all[..offset]
                            .iter()
                            .chain(&all[offset + len..])
                            .all(|g| bytemuck::bytes_of(g) == bytemuck::bytes_of(&guard)),
                        "{name} {len}+{offset}: wrote outside"
                    );
                }
            }
        }
        let wide: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.013).collect();
        let f16s: Vec<f16> = wide.iter().map(|&x| f16::from_f32(x)).collect();
        let bf16s: Vec<bf16> = wide.iter().map(|&x| bf16::from_f32(x)).collect();
        for (isa, pick) in isas() {
            for (form, _) in FORMS {
                let loops = loops(&form, pick);
                let name = format!("{} {}", isa.name(), form.name());
                check(&name, loops.f32, &wide);
                check(&name, loops.f16.expect("built in"), &f16s);
                check(&name, loops.bf16.expect("built in"), &bf16s);
            }
        }
    }

    #[test]
    fn half_loops_widen_compute_in_f32_and_narrow_to_nearest() {
        for (isa, pick) in isas() {
            for (form, scalar) in FORMS {
                let loops = loops(&form, pick);
                let f16_loop = loops.f16.expect("built in");
                let bf16_loop = loops.bf16.expect("built in");
                // every pattern, then a tail
                check_half(isa, form, scalar, f16_loop, f16::from_f32, 13, true);
                check_half(isa, form, scalar, bf16_loop, bf16::from_f32, 11, true);
                // short calls of every length
                for len in 0..=17 {
                    check_half(isa, form, scalar, f16_loop, f16::from_f32, len, false);
                    check_half(isa, form, scalar, bf16_loop, bf16::from_f32, len, false);
                }
            }
        }
    }

    /// `simd_loop` over every pattern of a half type and then the first
    /// `tail` ones (or, unless `whole`, `tail` patterns from around 1.0
    /// only), against widen -> scalar form -> `narrow` (`half`'s
    /// `from_f32`: its bf16 `from_f64` misrounds some exact f32 values).
    fn check_half<H: crate::Float + bytemuck::Pod>(
        isa: Isa,
        form: VectorForm,
        scalar: Scalar,
        simd_loop: VectorLoop<H>,
        narrow: fn(f32) -> H,
        tail: u16,
        whole: bool,
    ) {
        let xs: Vec<H> = if whole {
            (0..=u16::MAX).chain(0..tail).map(bytemuck::cast).collect()
        } else {
            let one: u16 = bytemuck::cast(narrow(1.0));
            (one - 7..one - 7 + tail).map(bytemuck::cast).collect()
        };
        let mut out = vec![H::zero(); xs.len()];
        // SAFETY: the caller checked the CPU; equal lengths.
        unsafe { simd_loop(&xs, &mut out, Stores::Cached) };
        for (&x, &y) in xs.iter().zip(&out) {
            let want = narrow(scalar(x.to_f64() as f32));
            assert!(
                same(y.to_f64() as f32, want.to_f64() as f32),
                "{} {} {} at {x:?} (of {}): {y:?}, want {want:?}",
                isa.name(),
                H::DTYPE,
                form.name(),
                xs.len()
            );
        }
    }

    /// bf16 narrowing's hard cases first (ties to even either way, one
    /// rounding to infinity, NaNs, subnormals, both signs), then a spread
    /// of patterns; cut to whole blocks of `block`, which drops only
    /// sampled ones.
    fn bf16_narrowing_inputs(block: usize) -> Vec<f32> {
        let mut xs = Vec::new();
        for b in [
            0x3f80_8000u32,
            0x3f81_8000,
            0x0000_8000,
            0x0001_8000,
            0x007f_ffff,
            0x7fc0_0001,
            0xff80_0001,
            0x7f7f_ffff,
        ] {
            xs.extend([f32::from_bits(b), f32::from_bits(b ^ 0x8000_0000)]);
        }
        xs.extend((0..=u32::MAX).step_by(65_537).map(f32::from_bits));
        xs.truncate(xs.len() / block * block);
        xs
    }

    /// `got[i]` is `half`'s bf16 of `xs[i]`, bit for bit (NaNs included:
    /// both quiet them the same way).
    fn assert_narrowed_as_half(how: &str, xs: &[f32], got: &[bf16]) {
        assert_eq!(xs.len(), got.len(), "{how}");
        for (x, g) in xs.iter().zip(got) {
            let w = bf16::from_f32(*x);
            assert!(
                g.to_bits() == w.to_bits(),
                "{how}: {x:e} ({:#010x}) -> {:#06x}, half gives {:#06x}",
                x.to_bits(),
                g.to_bits(),
                w.to_bits()
            );
        }
    }

    /// AVX2's bf16 narrowing, in pairs and eight lanes at a time, against
    /// `half` on ties, subnormals, NaNs and a spread of patterns.
    #[test]
    fn avx2_bf16_narrowing_matches_half() {
        use crate::engine::vector_avx2::{self as lanes, Lanes};
        use std::arch::x86_64::{__m256, _mm256_loadu_ps};
        if !Isa::Avx2.is_supported() {
            eprintln!("skipped: this CPU (or valgrind) lacks AVX2");
            return;
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        fn narrow(xs: &[f32], pairs: &mut [bf16], singles: &mut [bf16]) {
            for (k, block) in xs.chunks_exact(16).enumerate() {
                let mut split = [[0.0f32; 8]; 2];
                for (e, &x) in block.iter().enumerate() {
                    let (second, lane) = lanes::split_lane(e);
                    split[usize::from(second)][lane] = x;
                }
                // SAFETY: compiled for AVX2; 8 readable lanes each, 16
                // writable lanes at `16 k`.
                unsafe {
                    let v: [__m256; 2] = split.map(|l| _mm256_loadu_ps(l.as_ptr()));
                    lanes::Bf16::store2(pairs.as_mut_ptr().add(16 * k), v[0], v[1]);
                    for h in 0..2 {
                        let v = _mm256_loadu_ps(block[8 * h..].as_ptr());
                        lanes::Bf16::store(singles.as_mut_ptr().add(16 * k + 8 * h), v);
                    }
                }
            }
        }
        let xs = bf16_narrowing_inputs(16);
        let mut pairs = vec![bf16::ZERO; xs.len()];
        let mut singles = vec![bf16::ZERO; xs.len()];
        // SAFETY: the CPU has AVX2, FMA and F16C (`Isa::Avx2`).
        unsafe { narrow(&xs, &mut pairs, &mut singles) };
        assert_narrowed_as_half("pairs", &xs, &pairs);
        assert_narrowed_as_half("singles", &xs, &singles);
    }

    /// Both bf16 narrowings, whichever the CPU picks, against `half` on
    /// ties, subnormals, NaNs and a spread of patterns.
    #[test]
    fn both_bf16_narrowings_match_half() {
        if !Isa::Avx512.is_supported() {
            eprintln!("skipped: this CPU (or valgrind) shows no AVX-512");
            return;
        }
        use std::arch::x86_64::{__m512, _mm512_loadu_ps};
        use x86::Lanes;
        /// Narrows `xs` (a multiple of 32 long) with `L`: each block of 32
        /// through `store2`, its lanes placed as `load2` places elements,
        /// and again 16 at a time through `store`.
        ///
        /// # Safety
        /// The CPU has what `L` needs.
        #[inline(always)]
        unsafe fn narrow<L: Lanes<Elem = bf16>>(
            xs: &[f32],
            pairs: &mut [bf16],
            singles: &mut [bf16],
        ) {
            for (k, block) in xs.chunks_exact(32).enumerate() {
                let mut lanes = [[0.0f32; 16]; 2];
                for (e, &x) in block.iter().enumerate() {
                    let (second, lane) = x86::split_lane(e);
                    lanes[usize::from(second)][lane] = x;
                }
                // SAFETY: the caller's contract; 16 readable lanes each,
                // 32 writable lanes at `32 k`.
                unsafe {
                    let v: [__m512; 2] = lanes.map(|l| _mm512_loadu_ps(l.as_ptr()));
                    L::store2(pairs.as_mut_ptr().add(32 * k), v[0], v[1]);
                    for h in 0..2 {
                        let v = _mm512_loadu_ps(block[16 * h..].as_ptr());
                        L::store(singles.as_mut_ptr().add(32 * k + 16 * h), !0, v);
                    }
                }
            }
        }
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
        fn integer(xs: &[f32], pairs: &mut [bf16], singles: &mut [bf16]) {
            // SAFETY: compiled for what `Bf16` needs.
            unsafe { narrow::<x86::Bf16>(xs, pairs, singles) }
        }
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")]
        fn native(xs: &[f32], pairs: &mut [bf16], singles: &mut [bf16]) {
            // SAFETY: compiled for what `Bf16Native` needs.
            unsafe { narrow::<x86::Bf16Native>(xs, pairs, singles) }
        }
        let xs = bf16_narrowing_inputs(32);
        let mut pairs = vec![bf16::ZERO; xs.len()];
        let mut singles = vec![bf16::ZERO; xs.len()];
        // SAFETY: the CPU has AVX-512.
        unsafe { integer(&xs, &mut pairs, &mut singles) };
        let mut runs = vec![
            ("integer, pairs", pairs.clone()),
            ("integer", singles.clone()),
        ];
        if std::arch::is_x86_feature_detected!("avx512bf16") {
            // SAFETY: and AVX-512 BF16.
            unsafe { native(&xs, &mut pairs, &mut singles) };
            runs.extend([("vcvtne2ps2bf16, pairs", pairs), ("vcvtneps2bf16", singles)]);
        }
        for (how, got) in runs {
            assert_narrowed_as_half(how, &xs, &got);
        }
    }
}
