//! Half-type I/O: how f16 and bf16 storage converts to and from f32 a tile
//! at a time.
//!
//! f16 and bf16 share one generic [`TileIo`] impl over a private trait
//! for the two formats (`HalfFormat`), whose associated items name each
//! format's conversions. A trait works here, where a macro would only
//! repeat the text: the `#[target_feature]` loops are not generic (their
//! intrinsics differ per format) but are reached through plain functions
//! and `#[inline(always)]` lane types, which generic code calls exactly as
//! the per-format impls did, so the results are the same bits.

use crate::Float;
use crate::engine::isa::{Isa, TileJob, active, run};
use crate::engine::vector::{VectorLoop, VectorLoops};

/// How a storage type moves to and from its compute type, a tile at a time.
///
/// f32 and f64 are their own compute type and are borrowed directly; f16
/// converts with F16C where present; bf16 widens with integer ops that
/// vectorise (it is the upper half of an f32) and narrows with AVX-512
/// BF16 where present.
pub trait TileIo: Float {
    /// The slice itself, when the storage type is the compute type.
    fn as_compute(s: &[Self]) -> Option<&[Self::Compute]>;
    /// As [`TileIo::as_compute`], writable.
    fn as_compute_mut(s: &mut [Self]) -> Option<&mut [Self::Compute]>;
    /// Converts `src` into `dst` (same length).
    fn load(src: &[Self], dst: &mut [Self::Compute]);
    /// Writes `src` into `dst`, or adds it when `add`.
    fn store(dst: &mut [Self], src: &[Self::Compute], add: bool);
    /// A vector form's loop (of one instruction set's `loops`) over
    /// storage of this (non-compute) type, which converts in registers;
    /// `None` for f32/f64, whose tiles need no conversion.
    #[inline(always)]
    fn half_loop(_: &VectorLoops) -> Option<VectorLoop<Self>> {
        None
    }
    /// Widens 32 elements to the compute type inside an AVX-512 loop: in
    /// registers for the half types, with their vector forms'
    /// conversions; element by element for the rest (which
    /// [`ConvertMap`] never converts). The elements may land in `dst` in
    /// any order that [`TileIo::narrow32_avx512`] undoes (bf16 widens in
    /// 128-bit lanes), which an elementwise kernel does not notice as long
    /// as all its inputs are widened alike.
    ///
    /// # Safety
    /// The caller is compiled for what [`Isa::Avx512`] stands for, so
    /// that this inlines into it, and the CPU has it.
    #[cfg(target_arch = "x86_64")]
    #[doc(hidden)]
    #[inline(always)]
    unsafe fn widen32_avx512(src: &[Self; 32], dst: &mut [Self::Compute; 32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_compute();
        }
    }
    /// The inverse of [`TileIo::widen32_avx512`] (order included),
    /// rounding to nearest even as [`Float::from_compute`] does.
    ///
    /// # Safety
    /// As for [`TileIo::widen32_avx512`].
    #[cfg(target_arch = "x86_64")]
    #[doc(hidden)]
    #[inline(always)]
    unsafe fn narrow32_avx512(src: &[Self::Compute; 32], dst: &mut [Self; 32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = Self::from_compute(*s);
        }
    }
    /// As [`TileIo::widen32_avx512`], inside an AVX2 loop: F16C for f16,
    /// integer shifts for bf16 (which splits even from odd elements).
    ///
    /// # Safety
    /// The caller is compiled for what [`Isa::Avx2`] stands for, so that
    /// this inlines into it, and the CPU has it.
    #[cfg(target_arch = "x86_64")]
    #[doc(hidden)]
    #[inline(always)]
    unsafe fn widen32_avx2(src: &[Self; 32], dst: &mut [Self::Compute; 32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_compute();
        }
    }
    /// The inverse of [`TileIo::widen32_avx2`] (order included), rounding
    /// to nearest even as [`Float::from_compute`] does.
    ///
    /// # Safety
    /// As for [`TileIo::widen32_avx2`].
    #[cfg(target_arch = "x86_64")]
    #[doc(hidden)]
    #[inline(always)]
    unsafe fn narrow32_avx2(src: &[Self::Compute; 32], dst: &mut [Self; 32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = Self::from_compute(*s);
        }
    }
    /// [`TileIo::narrow32_avx512`] where the CPU also has AVX-512 BF16,
    /// whose conversion bf16 uses.
    ///
    /// # Safety
    /// As for [`TileIo::widen32_avx512`], with AVX-512 BF16 as well.
    #[cfg(target_arch = "x86_64")]
    #[doc(hidden)]
    #[inline(always)]
    unsafe fn narrow32_avx512bf16(src: &[Self::Compute; 32], dst: &mut [Self; 32]) {
        // SAFETY: the caller's contract covers this one's.
        unsafe { Self::narrow32_avx512(src, dst) }
    }
}

macro_rules! native_tile_io {
    ($($t:ty),*) => {$(
        impl TileIo for $t {
            #[inline(always)]
            fn as_compute(s: &[Self]) -> Option<&[Self]> {
                Some(s)
            }
            #[inline(always)]
            fn as_compute_mut(s: &mut [Self]) -> Option<&mut [Self]> {
                Some(s)
            }
            #[inline]
            fn load(src: &[Self], dst: &mut [Self]) {
                dst.copy_from_slice(src);
            }
            #[inline]
            fn store(dst: &mut [Self], src: &[Self], add: bool) {
                if add {
                    run(AddTile { dst, src });
                } else {
                    dst.copy_from_slice(src);
                }
            }
        }
    )*};
}
native_tile_io!(f32, f64);

/// Elements converted per step when a store must read the old values.
const CONVERT_CHUNK: usize = 256;

/// The two half-precision storage formats, f16 and bf16: one [`TileIo`]
/// impl serves both, and what differs is only which conversions run.
///
/// A trait, not a macro: the `#[target_feature]` conversion loops stay
/// per format (their intrinsics differ), and what the trait names are the
/// plain functions that pick one at run time and the
/// `#[inline(always)]` lane types of the vector loops, which generic code
/// calls and inlines as the per-type impls did.
trait HalfFormat: Float<Compute = f32> {
    /// How the vector loops convert this format (`vector::x86::Lanes`).
    #[cfg(target_arch = "x86_64")]
    type Lanes: crate::engine::vector::x86::Lanes<Elem = Self>;
    /// As `Lanes`, narrowing with AVX-512 BF16 where the format uses it.
    #[cfg(target_arch = "x86_64")]
    type NativeLanes: crate::engine::vector::x86::Lanes<Elem = Self>;
    /// How the AVX2 loops convert this format (`vector_avx2::Lanes`).
    #[cfg(target_arch = "x86_64")]
    type Avx2Lanes: crate::engine::vector_avx2::Lanes<Elem = Self>;
    /// A vector form's loop over this format.
    fn half_loop(loops: &VectorLoops) -> Option<VectorLoop<Self>>;
    /// Widens `src` into `dst` (same length).
    fn widen(src: &[Self], dst: &mut [f32]);
    /// Narrows `src` into `dst`, or adds it to `dst` when `add`.
    fn narrow(dst: &mut [Self], src: &[f32], add: bool);
}

impl<H: HalfFormat> TileIo for H {
    #[inline(always)]
    fn half_loop(loops: &VectorLoops) -> Option<VectorLoop<Self>> {
        <H as HalfFormat>::half_loop(loops)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen32_avx512(src: &[Self; 32], dst: &mut [f32; 32]) {
        // SAFETY: the caller's contract.
        unsafe { crate::engine::vector::x86::widen32::<H::Lanes>(src, dst) }
    }
    /// bf16 narrows with integer rounding here: `vcvtneps2bf16` needs
    /// AVX-512 BF16, which the loops this inlines into are not compiled
    /// for.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn narrow32_avx512(src: &[f32; 32], dst: &mut [Self; 32]) {
        // SAFETY: the caller's contract.
        unsafe { crate::engine::vector::x86::narrow32::<H::Lanes>(src, dst) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn narrow32_avx512bf16(src: &[f32; 32], dst: &mut [Self; 32]) {
        // SAFETY: the caller's contract, AVX-512 BF16 included.
        unsafe { crate::engine::vector::x86::narrow32::<H::NativeLanes>(src, dst) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen32_avx2(src: &[Self; 32], dst: &mut [f32; 32]) {
        // SAFETY: the caller's contract.
        unsafe { crate::engine::vector_avx2::widen32::<H::Avx2Lanes>(src, dst) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn narrow32_avx2(src: &[f32; 32], dst: &mut [Self; 32]) {
        // SAFETY: the caller's contract.
        unsafe { crate::engine::vector_avx2::narrow32::<H::Avx2Lanes>(src, dst) }
    }
    fn as_compute(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_compute_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
    #[inline]
    fn load(src: &[Self], dst: &mut [f32]) {
        H::widen(src, dst);
    }
    #[inline]
    fn store(dst: &mut [Self], src: &[f32], add: bool) {
        H::narrow(dst, src, add);
    }
}

impl HalfFormat for half::f16 {
    #[cfg(target_arch = "x86_64")]
    type Lanes = crate::engine::vector::x86::F16;
    #[cfg(target_arch = "x86_64")]
    type NativeLanes = crate::engine::vector::x86::F16;
    #[cfg(target_arch = "x86_64")]
    type Avx2Lanes = crate::engine::vector_avx2::F16;
    #[inline(always)]
    fn half_loop(loops: &VectorLoops) -> Option<VectorLoop<Self>> {
        loops.f16
    }
    #[inline]
    fn widen(src: &[Self], dst: &mut [f32]) {
        f16_to_f32(src, dst);
    }
    /// Adding reads the old values a chunk at a time.
    #[inline]
    fn narrow(dst: &mut [Self], src: &[f32], add: bool) {
        if !add {
            f32_to_f16(src, dst);
            return;
        }
        let mut old = [0.0f32; CONVERT_CHUNK];
        for (d, s) in dst.chunks_mut(CONVERT_CHUNK).zip(src.chunks(CONVERT_CHUNK)) {
            let old = &mut old[..d.len()];
            f16_to_f32(d, old);
            run(AddTile { dst: old, src: s });
            f32_to_f16(old, d);
        }
    }
}

impl HalfFormat for half::bf16 {
    #[cfg(target_arch = "x86_64")]
    type Lanes = crate::engine::vector::x86::Bf16;
    #[cfg(target_arch = "x86_64")]
    type NativeLanes = crate::engine::vector::x86::Bf16Native;
    #[cfg(target_arch = "x86_64")]
    type Avx2Lanes = crate::engine::vector_avx2::Bf16;
    #[inline(always)]
    fn half_loop(loops: &VectorLoops) -> Option<VectorLoop<Self>> {
        loops.bf16
    }
    #[inline]
    fn widen(src: &[Self], dst: &mut [f32]) {
        run(Bf16ToF32 { src, dst });
    }
    /// With AVX-512 BF16's conversion where the CPU has it (adding in
    /// registers), the rest with integer rounding.
    #[inline]
    fn narrow(dst: &mut [Self], src: &[f32], add: bool) {
        let n = src.len().min(dst.len());
        #[cfg(target_arch = "x86_64")]
        let done = if active() == Isa::Avx512 && is_x86_feature_detected!("avx512bf16") {
            // SAFETY: the CPU has AVX-512 (the active set) and AVX-512 BF16.
            unsafe { x86::f32_to_bf16_avx512bf16(&src[..n], &mut dst[..n], add) }
        } else {
            0
        };
        #[cfg(not(target_arch = "x86_64"))]
        let done = 0;
        run(F32ToBf16 {
            src: &src[done..n],
            dst: &mut dst[done..n],
            add,
        });
    }
}

/// f16 → f32 with the widest conversion instruction present (F16C:
/// 8 lanes; AVX-512: 16 lanes), else `half`'s.
fn f16_to_f32(src: &[half::f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    by_isa(
        src,
        dst,
        (x86::f16_to_f32_avx512, x86::f16_to_f32_avx2),
        half::f16::to_f32,
    );
    #[cfg(not(target_arch = "x86_64"))]
    {
        use half::slice::HalfFloatSliceExt;
        let n = src.len().min(dst.len());
        src[..n].convert_to_f32_slice(&mut dst[..n]);
    }
}

/// f32 → f16, rounding to nearest even, as [`f16_to_f32`].
fn f32_to_f16(src: &[f32], dst: &mut [half::f16]) {
    #[cfg(target_arch = "x86_64")]
    by_isa(
        src,
        dst,
        (x86::f32_to_f16_avx512, x86::f32_to_f16_avx2),
        half::f16::from_f32,
    );
    #[cfg(not(target_arch = "x86_64"))]
    {
        use half::slice::HalfFloatSliceExt;
        let n = src.len().min(dst.len());
        dst[..n].convert_from_f32_slice(&src[..n]);
    }
}

/// A vectorised conversion loop: how many leading elements it converted.
#[cfg(target_arch = "x86_64")]
type ConvertLoop<A, B> = unsafe fn(&[A], &mut [B]) -> usize;

/// A conversion over the common length of `src` and `dst`: the leading
/// elements by the active instruction set's loop (`avx512`, `avx2`; each
/// returns how many it converted), the rest by `one`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn by_isa<A: Copy, B>(
    src: &[A],
    dst: &mut [B],
    (avx512, avx2): (ConvertLoop<A, B>, ConvertLoop<A, B>),
    one: impl Fn(A) -> B,
) {
    let n = src.len().min(dst.len());
    let done = match active() {
        // SAFETY: `active` only returns instruction sets the CPU has.
        Isa::Avx512 => unsafe { avx512(&src[..n], &mut dst[..n]) },
        // SAFETY: as above.
        Isa::Avx2 => unsafe { avx2(&src[..n], &mut dst[..n]) },
        _ => 0,
    };
    for (d, s) in dst[done..n].iter_mut().zip(&src[done..n]) {
        *d = one(*s);
    }
}

/// Explicit F16C / AVX-512 conversions: LLVM cannot derive them from
/// scalar code. Each returns how many leading elements it converted (a
/// multiple of its lane count); the caller finishes the rest.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Round to nearest even.
    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT;

    #[target_feature(enable = "avx512f,avx2,f16c")]
    pub(super) fn f16_to_f32_avx512(src: &[half::f16], dst: &mut [f32]) -> usize {
        let n = src.len().min(dst.len()) / 16 * 16;
        for i in (0..n).step_by(16) {
            // SAFETY: `i + 16 <= n` elements of both slices are in bounds;
            // unaligned loads and stores are used.
            unsafe {
                let h = _mm256_loadu_si256(src.as_ptr().add(i).cast());
                _mm512_storeu_ps(dst.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
            }
        }
        n
    }

    #[target_feature(enable = "avx512f,avx2,f16c")]
    pub(super) fn f32_to_f16_avx512(src: &[f32], dst: &mut [half::f16]) -> usize {
        let n = src.len().min(dst.len()) / 16 * 16;
        for i in (0..n).step_by(16) {
            // SAFETY: as in `f16_to_f32_avx512`.
            unsafe {
                let v = _mm512_loadu_ps(src.as_ptr().add(i));
                let h = _mm512_cvtps_ph::<NEAREST>(v);
                _mm256_storeu_si256(dst.as_mut_ptr().add(i).cast(), h);
            }
        }
        n
    }

    /// f32 → bf16 with AVX-512 BF16's conversion (nearest even, NaNs made
    /// quiet as `round_bf16` does), adding to the old values first when
    /// `add`. The instruction flushes subnormal inputs to zero, which
    /// `half` does not; a vector holding one takes the integer rounding.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")]
    pub(super) fn f32_to_bf16_avx512bf16(src: &[f32], dst: &mut [half::bf16], add: bool) -> usize {
        /// `_mm512_fpclass_ps_mask`'s class bit for subnormals.
        const SUBNORMAL: i32 = 0x20;
        let n = src.len().min(dst.len()) / 16 * 16;
        for i in (0..n).step_by(16) {
            // SAFETY: `i + 16 <= n` elements of both slices are in bounds;
            // unaligned loads and stores are used, and `__m256bh` and
            // `__m256i` are both 32 plain bytes.
            unsafe {
                let mut v = _mm512_loadu_ps(src.as_ptr().add(i));
                if add {
                    let old = _mm256_loadu_si256(dst.as_ptr().add(i).cast());
                    let old = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(old));
                    v = _mm512_add_ps(_mm512_castsi512_ps(old), v);
                }
                if _mm512_fpclass_ps_mask::<SUBNORMAL>(v) != 0 {
                    let mut lanes = [0.0f32; 16];
                    _mm512_storeu_ps(lanes.as_mut_ptr(), v);
                    for (d, x) in dst[i..i + 16].iter_mut().zip(lanes) {
                        *d = half::bf16::from_bits(super::round_bf16(x));
                    }
                    continue;
                }
                let h = _mm512_cvtneps_pbh(v);
                _mm256_storeu_si256(
                    dst.as_mut_ptr().add(i).cast(),
                    std::mem::transmute::<__m256bh, __m256i>(h),
                );
            }
        }
        n
    }

    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn f16_to_f32_avx2(src: &[half::f16], dst: &mut [f32]) -> usize {
        let n = src.len().min(dst.len()) / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: `i + 8 <= n` elements of both slices are in bounds.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
        }
        n
    }

    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn f32_to_f16_avx2(src: &[f32], dst: &mut [half::f16]) -> usize {
        let n = src.len().min(dst.len()) / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: as in `f16_to_f32_avx2`.
            unsafe {
                let v = _mm256_loadu_ps(src.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<NEAREST>(v);
                _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), h);
            }
        }
        n
    }
}

#[inline(always)]
pub(crate) fn round_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    // Choose before narrowing, so that only one u32 -> u16 narrowing
    // (two uops on x86) runs per vector.
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1));
    let quiet = b | 0x0040_0000;
    ((if x.is_nan() { quiet } else { rounded }) >> 16) as u16
}

/// `dst[j] += src[j]`.
pub struct AddTile<'a, C> {
    /// Accumulated into.
    pub dst: &'a mut [C],
    /// Added.
    pub src: &'a [C],
}

impl<C: Float> TileJob for AddTile<'_, C> {
    #[inline(always)]
    fn run(self) {
        for (d, &s) in self.dst.iter_mut().zip(self.src) {
            *d += s;
        }
    }
}

/// bf16 bits to f32: the bf16 is the f32's upper half.
pub struct Bf16ToF32<'a> {
    /// bf16 values.
    pub src: &'a [half::bf16],
    /// f32 values.
    pub dst: &'a mut [f32],
}

impl TileJob for Bf16ToF32<'_> {
    #[inline(always)]
    fn run(self) {
        for (d, s) in self.dst.iter_mut().zip(self.src) {
            *d = f32::from_bits((s.to_bits() as u32) << 16);
        }
    }
}

/// f32 to bf16, rounding to nearest even; NaN stays a quiet NaN. With
/// `add`, `dst = round(dst + src)`.
pub struct F32ToBf16<'a> {
    /// f32 values.
    pub src: &'a [f32],
    /// bf16 values.
    pub dst: &'a mut [half::bf16],
    /// Accumulate instead of overwrite.
    pub add: bool,
}

impl TileJob for F32ToBf16<'_> {
    #[inline(always)]
    fn run(self) {
        if self.add {
            for (d, &s) in self.dst.iter_mut().zip(self.src) {
                let old = f32::from_bits((d.to_bits() as u32) << 16);
                *d = half::bf16::from_bits(round_bf16(old + s));
            }
        } else {
            for (d, &s) in self.dst.iter_mut().zip(self.src) {
                *d = half::bf16::from_bits(round_bf16(s));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::hints::Switches;
    use crate::engine::isa::{run_with, set_active};

    #[test]
    fn f16_conversions_match_half_on_every_isa() {
        let xs: Vec<f32> = (0..70_000)
            .map(|i| f32::from_bits(0x3300_0000u32.wrapping_add((i as u32).wrapping_mul(0x2f1b))))
            .chain([
                0.0,
                -0.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                65504.0,
                65520.0,
                1e-8,
            ])
            .collect();
        let _switches = Switches::hold();
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            if set_active(isa).is_err() {
                continue;
            }
            let mut h = vec![half::f16::ZERO; xs.len()];
            f32_to_f16(&xs, &mut h);
            let mut back = vec![0.0f32; xs.len()];
            f16_to_f32(&h, &mut back);
            for ((x, g), b) in xs.iter().zip(&h).zip(&back) {
                let want = half::f16::from_f32(*x);
                if x.is_nan() {
                    assert!(g.is_nan());
                } else {
                    assert_eq!(g.to_bits(), want.to_bits(), "{isa:?} {x}");
                }
                assert_eq!(b.to_bits(), g.to_f32().to_bits(), "{isa:?}");
            }
        }
    }

    #[test]
    fn bf16_conversions_match_half() {
        // Bit patterns spread over every field (sign, exponent, and the
        // low half that rounding reads), NaNs with payloads, and ties.
        let xs: Vec<f32> = (0..200_000u32)
            .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9)))
            .chain([
                0.0,
                -0.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                f32::from_bits(0x7f80_0001), // signalling NaN: comes back quiet
                f32::from_bits(0xffc1_2345),
                1.0 + 1.0 / 256.0,           // a tie: rounds down to even
                1.0 + 3.0 / 256.0,           // a tie: rounds up to even
                f32::from_bits(1),           // smallest subnormal
                f32::from_bits(0x7f7f_ffff), // rounds to +inf
                3.0e38,
            ])
            .collect();
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            let mut got = vec![half::bf16::ZERO; xs.len()];
            run_with(
                isa,
                F32ToBf16 {
                    src: &xs,
                    dst: &mut got,
                    add: false,
                },
            );
            for (x, g) in xs.iter().zip(&got) {
                let want = half::bf16::from_f32(*x);
                assert_eq!(
                    g.to_bits(),
                    want.to_bits(),
                    "{isa:?} {x:e} ({:#x})",
                    x.to_bits()
                );
            }
            let mut back = vec![0.0f32; xs.len()];
            run_with(
                isa,
                Bf16ToF32 {
                    src: &got,
                    dst: &mut back,
                },
            );
            for (g, b) in got.iter().zip(&back) {
                assert_eq!(b.to_bits(), g.to_f32().to_bits(), "{isa:?}");
            }
        }
    }
}
