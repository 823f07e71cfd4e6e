//! Lookup tables for one-input kernels over the half types.
//!
//! f16 and bf16 have 65,536 values each. A kernel whose result depends on
//! its one input alone (no scalar, kwargs, random stream or state) is
//! therefore a table of 65,536 results, which the executor builds once, by
//! running the kernel over every bit pattern exactly as the compute path
//! would (widen, the kernel in f32 on the active instruction set, round to
//! nearest even), and then reads with AVX-512 gathers when that is faster
//! on the machine. The
//! results are the compute path's bits, because they are its results (NaN
//! payloads included for the built-in vector forms; a user `VectorForm`
//! whose half-type loop differs from its f32 loop only in NaN bits may
//! give another NaN).
//!
//! This relies on the kernel contract: a forward kernel is a pure function
//! of its arguments that does not panic on any input value, since the
//! build evaluates it on every pattern, including ones the program never
//! passes. An op whose kernel reads other state, or checks its domain by
//! panicking, says `#[simple_op(impure)]` and is never tabulated; a build
//! that panics anyway is caught, and the op computes from then on.
//!
//! The attribute gives every other one-input elementwise op one
//! [`HalfTables`] (a `static`, 128 KB per half type once built, kept for
//! the life of the process: the memory is bounded by the number of such
//! ops a program uses). The executor reads it for writes (fresh, into an
//! output, or in place) of at least [`TABLE_MIN_LEN`] elements whose input
//! has the output's shape, when the op costs at least [`TABLE_MIN_COST`]
//! (cheaper ops convert and compute faster, and stream their stores past
//! the caches); accumulating (`AddTo`) and broadcast calls compute. Each
//! instruction set has its own table, built and timed under it.
//! [`set_half_tables`] (or `SIMPLEOP_HALF_TABLES=0`) turns the route off,
//! which is how the benchmark shows what it buys.
//!
//! Whether it is faster depends on the CPU's gathers, so each op's first
//! table, once built, is timed against converting and computing on the
//! same patterns, and dropped if slower (see [`set_half_table_timing`]).
//! Where AVX-512 gathers are fast, reading is faster than computing, in
//! cache and past it; where gathers are slow, computing wins, and the
//! timing keeps those ops computing (figures in bench/RESULTS.md).

use std::sync::OnceLock;

use crate::engine::half_io::TileIo;
use crate::engine::isa as simd;
use crate::engine::switch::Switch;

/// Bit patterns of a 16-bit type.
pub(crate) const PATTERNS: usize = 1 << 16;

/// Elements each route is timed over when a table is built (a quarter of
/// the patterns: in the L2 cache, as a call's tiles are). The timing runs
/// the kernel `5 * TIMING_SAMPLE` more times.
pub const TIMING_SAMPLE: usize = 1 << 14;

/// Calls over fewer elements compute instead: building a table costs
/// 65,536 evaluations once, and timing it 5 × [`TIMING_SAMPLE`] more,
/// about four times what the first call of this size computes, repaid by
/// the calls after it.
pub const TABLE_MIN_LEN: usize = 1 << 15;

/// Ops cheaper than this per element ([`crate::OpDef::cost`]: 1, plus 10
/// per transcendental call in the kernel) compute instead: they are bound
/// by memory, and converting in registers is cheaper than a gather. So in
/// practice a kernel is tabulated when it calls a transcendental.
pub const TABLE_MIN_COST: u32 = 4;

/// The instruction sets a table may be built under, one slot each, in
/// slot order.
const SETS: [simd::Isa; 4] = [
    simd::Isa::Scalar,
    simd::Isa::Neon,
    simd::Isa::Avx2,
    simd::Isa::Avx512,
];
const ISAS: usize = SETS.len();

/// An op's tables, one per half type and instruction set, each built at
/// its first use under that set. The attribute declares one per eligible
/// op; see the module documentation.
///
/// Per set, because a table holds the results of the active set's
/// compute path (the plain and fused forms of the vector math differ in
/// the last bit) and its timing against that path: a program that
/// switches sets (`Tuning::isa`, the benchmark's `--isa avx512,avx2`)
/// gets each set's own decision, not the first set's.
pub struct HalfTables {
    pub(crate) f16: [OnceLock<Route>; ISAS],
    pub(crate) bf16: [OnceLock<Route>; ISAS],
}

impl std::fmt::Debug for HalfTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = |t: &[OnceLock<Route>; ISAS]| {
            let states: Vec<String> = t
                .iter()
                .zip(SETS.map(simd::Isa::name))
                .filter_map(|(t, isa)| {
                    let s = match t.get()? {
                        Route::Panicked => "disabled (the build panicked)",
                        Route::Slower => "disabled (slower than computing here)",
                        Route::Table(_) => "built",
                    };
                    Some(format!("{isa}: {s}"))
                })
                .collect();
            if states.is_empty() {
                "not built".to_string()
            } else {
                states.join(", ")
            }
        };
        f.debug_struct("HalfTables")
            .field("f16", &state(&self.f16))
            .field("bf16", &state(&self.bf16))
            .finish()
    }
}

impl HalfTables {
    /// No table built yet.
    #[allow(clippy::new_without_default)] // a `const fn` for `static`s
    pub const fn new() -> HalfTables {
        HalfTables {
            f16: [const { OnceLock::new() }; ISAS],
            bf16: [const { OnceLock::new() }; ISAS],
        }
    }

    /// The slot for storage type `S` under instruction set `isa` (`None`
    /// unless f16 or bf16, or for a set without a slot).
    pub(crate) fn slot<S: TileIo>(&self, isa: simd::Isa) -> Option<&OnceLock<Route>> {
        let k = SETS.iter().position(|&s| s == isa)?;
        match S::DTYPE {
            crate::DType::F16 => Some(&self.f16[k]),
            crate::DType::BF16 => Some(&self.bf16[k]),
            _ => None,
        }
    }
}

/// What an op does over one half type, decided at its first use.
pub(crate) enum Route {
    Table(HalfTable),
    /// Timed against converting and computing, and slower.
    Slower,
    /// The build panicked.
    Panicked,
}

/// The results of a kernel at every bit pattern of a 16-bit type, plus one
/// padding entry: a gather reads 32 bits at the entry's address, so the
/// last entry's read ends inside the table.
pub(crate) struct HalfTable {
    pub(crate) entries: Box<[u16]>,
    /// The instruction set the entries were computed with.
    pub(crate) isa: simd::Isa,
}

impl HalfTable {
    /// `out[i] = table[x[i]]` (same lengths).
    pub(crate) fn lookup(&self, x: &[u16], out: &mut [u16]) {
        debug_assert_eq!(x.len(), out.len());
        let n = x.len().min(out.len());
        // SAFETY: both pointers cover `n` elements; `out` is a unique
        // borrow, so it does not overlap `x`.
        unsafe { self.lookup_raw(x.as_ptr(), out.as_mut_ptr(), n) }
    }

    /// `xs[i] = table[xs[i]]`.
    pub(crate) fn lookup_in_place(&self, xs: &mut [u16]) {
        let p = xs.as_mut_ptr();
        // SAFETY: `p` covers `xs.len()` elements; source and destination
        // are the same memory, which `lookup_raw` allows.
        unsafe { self.lookup_raw(p, p, xs.len()) }
    }

    /// # Safety
    /// `src` is valid for reading and `dst` for writing `n` elements, and
    /// the two ranges are either the same or disjoint.
    unsafe fn lookup_raw(&self, src: *const u16, dst: *mut u16, n: usize) {
        #[cfg(target_arch = "x86_64")]
        if simd::active() == simd::Isa::Avx512 {
            // SAFETY: the CPU has AVX-512 F, BW and VL (what `active`'s
            // `Isa::Avx512` stands for); the table has
            // `PATTERNS + 1` entries (`build`); the ranges are the caller's.
            unsafe { x86::lookup(self.entries.as_ptr(), src, dst, n) };
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { self.lookup_scalar(src, dst, n) }
    }

    /// The plain loop of [`HalfTable::lookup_raw`].
    ///
    /// # Safety
    /// As for [`HalfTable::lookup_raw`].
    unsafe fn lookup_scalar(&self, src: *const u16, dst: *mut u16, n: usize) {
        let table: &[u16; PATTERNS + 1] = (&*self.entries).try_into().expect("built with padding");
        for i in 0..n {
            // SAFETY: `i < n`, the caller's bounds. Element `i` is read
            // before it is written, so an in-place call is sound.
            unsafe { *dst.add(i) = table[*src.add(i) as usize] };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Sixteen lanes at a time, two vectors per step so that two gathers
    /// are in flight; the tail under a mask.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL (the 256-bit masked loads and
    /// stores); `table` holds 65,537 entries; `src` and `dst` cover `n`
    /// elements and are the same or disjoint.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn lookup(table: *const u16, src: *const u16, dst: *mut u16, n: usize) {
        // Entry `k` is read as the 32 bits at byte `2k`: its own 16 bits
        // in the low half, which the narrowing keeps.
        let base = table.cast::<i32>();
        let mut i = 0;
        // SAFETY (whole body): every access is at `i..i + 32`, `i..i + 16`
        // with that bound checked, or masked to lanes below `n`; a gather
        // index is a 16-bit pattern, so its 32-bit read ends by byte
        // 2 * 65,535 + 4, inside the table. Each step loads its lanes
        // before it stores them, so `src == dst` is sound.
        unsafe {
            while i + 32 <= n {
                let a = _mm256_loadu_si256(src.add(i).cast());
                let b = _mm256_loadu_si256(src.add(i + 16).cast());
                let ga = _mm512_i32gather_epi32::<2>(_mm512_cvtepu16_epi32(a), base);
                let gb = _mm512_i32gather_epi32::<2>(_mm512_cvtepu16_epi32(b), base);
                _mm256_storeu_si256(dst.add(i).cast(), _mm512_cvtepi32_epi16(ga));
                _mm256_storeu_si256(dst.add(i + 16).cast(), _mm512_cvtepi32_epi16(gb));
                i += 32;
            }
            while i < n {
                let lanes = (n - i).min(16);
                let m: __mmask16 = (((1u32 << lanes) - 1) & 0xffff) as __mmask16;
                let a = _mm256_maskz_loadu_epi16(m, src.add(i).cast());
                let g = _mm512_mask_i32gather_epi32::<2>(
                    _mm512_setzero_si512(),
                    m,
                    _mm512_cvtepu16_epi32(a),
                    base,
                );
                _mm256_mask_storeu_epi16(dst.add(i).cast(), m, _mm512_cvtepi32_epi16(g));
                i += lanes;
            }
        }
    }
}

static HALF_TABLES: Switch = Switch::on();

/// Whether one-input kernels over f16/bf16 may read lookup tables (on
/// unless `SIMPLEOP_HALF_TABLES=0` at the first use, or
/// [`set_half_tables`]).
#[inline]
pub fn half_tables_enabled() -> bool {
    HALF_TABLES.get()
}

/// Turns the table route on or off for later calls. Results do not change
/// either way; the benchmark uses this to show the speed it buys.
pub fn set_half_tables(on: bool) {
    HALF_TABLES.set(on);
}

pub(crate) static TIMING: Switch = Switch::on();

/// Whether a table, once built, is timed against computing and dropped
/// when slower (on unless `SIMPLEOP_HALF_TABLE_TIMING=0` at the first use,
/// or [`set_half_table_timing`]). Off, every built table is read: how tests
/// reach the table loops on machines where computing wins. It only
/// affects tables built later.
pub fn half_table_timing_enabled() -> bool {
    TIMING.get()
}

/// Turns the timing of new tables on or off; see
/// [`half_table_timing_enabled`].
pub fn set_half_table_timing(on: bool) {
    TIMING.set(on);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table whose entry `k` is `k` scrambled, so every lane's index shows.
    fn table() -> HalfTable {
        let mut entries: Vec<u16> = (0..=u16::MAX).map(|k| k.rotate_left(5) ^ 0x5a5a).collect();
        entries.push(0);
        HalfTable {
            entries: entries.into_boxed_slice(),
            isa: simd::active(),
        }
    }

    #[test]
    fn both_loops_look_up_at_odd_addresses_with_tails_and_in_place() {
        // the AVX-512 loop runs only under that instruction set
        let _switches = crate::engine::hints::Switches::hold();
        let t = table();
        let want = |x: u16| x.rotate_left(5) ^ 0x5a5a;
        // Every pattern, then sub-slices at odd element offsets (2 bytes
        // past a vector boundary) with every length mod 32 class.
        let xs: Vec<u16> = (0..=u16::MAX).chain(0..200).collect();
        for (start, len) in [(0, xs.len()), (1, 1000), (3, 31), (5, 33), (7, 16), (9, 1)] {
            let x = &xs[start..start + len];
            let mut out = vec![0u16; len + 2];
            t.lookup(x, &mut out[1..=len]);
            assert!(
                x.iter().zip(&out[1..=len]).all(|(&a, &b)| b == want(a)),
                "{start}+{len}"
            );
            assert_eq!(
                (out[0], out[len + 1]),
                (0, 0),
                "{start}+{len}: wrote outside"
            );
            let mut inplace = x.to_vec();
            t.lookup_in_place(&mut inplace[..]);
            assert!(x.iter().zip(&inplace).all(|(&a, &b)| b == want(a)));
            // The plain loop on its own: the calls above take the AVX-512
            // loop where the CPU has it, and valgrind only sees this one.
            let mut plain = vec![0u16; len];
            // SAFETY: both cover `len` elements and do not overlap.
            unsafe { t.lookup_scalar(x.as_ptr(), plain.as_mut_ptr(), len) };
            assert!(x.iter().zip(&plain).all(|(&a, &b)| b == want(a)));
        }
    }
}
