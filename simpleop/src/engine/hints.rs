//! Memory hints for the tile loops: prefetching, the last-level cache size,
//! and streaming (non-temporal) stores past it.

use std::sync::atomic::Ordering;

use crate::engine::isa::{Isa, active};
use crate::engine::switch::Switch;

static PREFETCH: Switch = Switch::on();

/// Whether long loops ask for their next block ahead (on unless
/// `SIMPLEOP_PREFETCH=0` at the first use, or [`set_prefetch`]).
#[inline]
pub fn prefetch_enabled() -> bool {
    PREFETCH.get()
}

/// Turns software prefetching of the next block on or off for later
/// loops, which is how the benchmark shows what it buys.
pub fn set_prefetch(on: bool) {
    PREFETCH.set(on);
}

static OP_LOOP_PREFETCH: Switch = Switch::with_default(None, || !cpu_is_amd());

/// Whether single-op loops (one kernel streaming over whole arrays, the
/// elementwise drivers) prefetch their next block, given that
/// [`prefetch_enabled`]. `SIMPLEOP_OP_LOOP_PREFETCH=0` or `=1` at the
/// first use, or [`set_op_loop_prefetch`], decides; otherwise it depends
/// on the CPU's maker: it is off on AMD CPUs, whose hardware prefetcher
/// already keeps up with a single streaming kernel (asking ahead there only
/// slows these loops), and on elsewhere, where these loops are slower
/// without it. Costlier fused programs prefetch on both: it pays for them
/// on either maker (see bench/RESULTS.md).
#[inline]
pub fn op_loop_prefetch_enabled() -> bool {
    OP_LOOP_PREFETCH.get()
}

/// Turns prefetching in single-op loops on or off for later calls; see
/// [`op_loop_prefetch_enabled`].
pub fn set_op_loop_prefetch(on: bool) {
    OP_LOOP_PREFETCH.set(on);
}

/// Whether the CPU's vendor string (CPUID leaf 0) is AMD's.
fn cpu_is_amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // `__cpuid` is a safe function on recent toolchains and an unsafe
        // one before them (this crate's `rust-version` is older).
        #[allow(unused_unsafe)]
        // SAFETY: CPUID exists on every x86-64 CPU; leaf 0 only reads the
        // vendor string and the highest leaf.
        let r = unsafe { std::arch::x86_64::__cpuid(0) };
        let vendor: Vec<u8> = [r.ebx, r.edx, r.ecx]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        vendor == b"AuthenticAMD"
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Outputs of at least this many bytes may be written with streaming
/// stores (twice the L2 of a typical server core: such an output leaves
/// the private caches before anyone reads it); see [`streams_past_caches`].
pub const STREAM_MIN_BYTES: usize = 8 << 20;

/// [`last_level_cache_bytes`] before it is read (or after it is reset).
const CACHE_UNREAD: usize = usize::MAX;
static CACHE_BYTES: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(CACHE_UNREAD);

/// The size of the last-level cache as Linux reports it for CPU 0
/// (`/sys/devices/system/cpu/cpu0/cache/index*/size` of the highest
/// level), read once; 0 where unknown. [`set_last_level_cache_bytes`]
/// overrides it.
pub fn last_level_cache_bytes() -> usize {
    let b = CACHE_BYTES.load(Ordering::Relaxed);
    if b != CACHE_UNREAD {
        return b;
    }
    let read = read_last_level_cache().unwrap_or(0);
    // A size set meanwhile wins over the one read.
    match CACHE_BYTES.compare_exchange(CACHE_UNREAD, read, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => read,
        Err(set) => set,
    }
}

/// Sets the last-level cache size the streaming decision assumes (0: as
/// if there were none, so every output of [`STREAM_MIN_BYTES`] streams),
/// for later calls: for machines whose reported cache is not what a
/// process gets (a VM sharing it), and for tests of the streaming paths.
pub fn set_last_level_cache_bytes(bytes: usize) {
    CACHE_BYTES.store(bytes.min(CACHE_UNREAD - 1), Ordering::Relaxed);
}

fn read_last_level_cache() -> Option<usize> {
    let mut best: Option<(u32, usize)> = None;
    for k in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{k}");
        let (Ok(level), Ok(size)) = (
            std::fs::read_to_string(format!("{dir}/level")),
            std::fs::read_to_string(format!("{dir}/size")),
        ) else {
            continue;
        };
        let level: u32 = level.trim().parse().ok()?;
        let size = size.trim();
        let (digits, unit) = match size.strip_suffix('K') {
            Some(d) => (d, 1 << 10),
            None => match size.strip_suffix('M') {
                Some(d) => (d, 1 << 20),
                None => (size, 1),
            },
        };
        let bytes = digits.parse::<usize>().ok()? * unit;
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, bytes));
        }
    }
    best.map(|(_, b)| b)
}

/// Whether a call should write an output of `out_bytes` with streaming
/// stores when it reads and writes `touched_bytes` in all: the output is
/// at least [`STREAM_MIN_BYTES`], and everything the call touches would
/// not stay in the last-level cache anyway (at least three quarters of
/// it), and streaming is on ([`stream_stores_enabled`]). Below that the
/// output is better left in the cache for whoever reads it next, where
/// plain stores beat streamed ones; past it, streaming wins.
pub fn streams_past_caches(out_bytes: usize, touched_bytes: usize) -> bool {
    past_caches(out_bytes, touched_bytes, last_level_cache_bytes()) && stream_stores_enabled()
}

/// [`streams_past_caches`]'s sizes rule for a last-level cache of `llc`.
fn past_caches(out_bytes: usize, touched_bytes: usize, llc: usize) -> bool {
    out_bytes >= STREAM_MIN_BYTES && touched_bytes >= llc / 4 * 3
}

static STREAM: Switch = Switch::on();

/// Whether long loops may write results that are large and read by no one
/// soon with streaming (non-temporal) stores (on unless
/// `SIMPLEOP_STREAM=0` at the first use, or [`set_stream_stores`]).
#[inline]
pub fn stream_stores_enabled() -> bool {
    STREAM.get()
}

/// Turns streaming stores on or off for later loops, which is how the
/// benchmark shows what they buy.
pub fn set_stream_stores(on: bool) {
    STREAM.set(on);
}

/// Copies `src` into `dst` (same length) with streaming stores where the
/// CPU has them: whole cache lines go to memory without first being read
/// for ownership, and without evicting the caller's working set. The
/// unaligned head and the tail use plain stores. Stores made this way are
/// weakly ordered: the writing thread must call [`stream_fence`] before
/// `dst` is touched again, by it or by any other thread (Rust counts an
/// unfenced access as a data race), which is why this is crate-private.
pub(crate) fn stream_copy<T: bytemuck::Pod>(dst: &mut [T], src: &[T]) {
    let n = dst.len().min(src.len());
    let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut dst[..n]);
    let src: &[u8] = bytemuck::cast_slice(&src[..n]);
    #[cfg(target_arch = "x86_64")]
    let (from, to) = {
        // Lines start where `dst`'s address is a multiple of 64.
        let head = dst.as_ptr().align_offset(64).min(dst.len());
        let lines = (dst.len() - head) / 64 * 64;
        let span = head..head + lines;
        match active() {
            // SAFETY: `active` only returns instruction sets the CPU has,
            // and `span` starts on a 64-byte boundary of `dst`. The stores'
            // weak ordering is this function's callers' to fence (above).
            Isa::Avx512 => unsafe { x86::stream_avx512(&mut dst[span.clone()], &src[span]) },
            // SAFETY: as above (64 is a multiple of AVX2's 32).
            Isa::Avx2 => unsafe { x86::stream_avx2(&mut dst[span.clone()], &src[span]) },
            _ => return dst.copy_from_slice(src),
        }
        (head, head + lines)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (from, to) = (0, 0);
    dst[..from].copy_from_slice(&src[..from]);
    dst[to..].copy_from_slice(&src[to..]);
}

/// Calls [`stream_fence`] when dropped, so a thread's streamed stores are
/// fenced on every way out of its work, unwinding included.
pub(crate) struct StreamFence;

impl Drop for StreamFence {
    fn drop(&mut self) {
        stream_fence();
    }
}

/// Orders this thread's earlier streaming stores ([`stream_copy`]'s, and
/// a vector form's with `Stores::Streamed`) before its later stores (and
/// so before it signals that its work is done).
#[inline]
pub(crate) fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` only orders stores (SSE, in the x86-64 baseline).
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Asks for `data` to be brought into L1 ahead of use (nothing when
/// prefetching is off). For blob kernels that walk memory in pieces the
/// hardware prefetcher does not follow across (rows of a page each).
#[inline(always)]
pub fn prefetch<T>(data: &[T]) {
    prefetch_lines::<T, false>(data);
}

/// As [`prefetch`], for a single-op loop's next block: nothing unless
/// [`op_loop_prefetch_enabled`] too.
#[inline(always)]
pub fn prefetch_op_loop<T>(data: &[T]) {
    if op_loop_prefetch_enabled() {
        prefetch_lines::<T, false>(data);
    }
}

/// As [`prefetch`], into L2 only: what costly fused programs ask for,
/// where it measured faster than L1 (see `kernel::fused`).
#[inline(always)]
pub fn prefetch_l2<T>(data: &[T]) {
    prefetch_lines::<T, true>(data);
}

#[inline(always)]
fn prefetch_lines<T, const L2: bool>(data: &[T]) {
    if !prefetch_enabled() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T1, _mm_prefetch};
        let bytes = std::mem::size_of_val(data);
        let base = data.as_ptr().cast::<i8>();
        for off in (0..bytes).step_by(64) {
            // SAFETY: `base + off` lies inside `data`; a prefetch never
            // faults and has no effect on program state.
            unsafe {
                if L2 {
                    _mm_prefetch::<_MM_HINT_T1>(base.add(off));
                } else {
                    _mm_prefetch::<_MM_HINT_T0>(base.add(off));
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Holds the instruction set and cache size a test changes, one test at a
/// time, and restores them on drop.
#[cfg(test)]
pub(crate) struct Switches {
    isa: Isa,
    cache: usize,
    _turn: std::sync::MutexGuard<'static, ()>,
}

#[cfg(test)]
impl Switches {
    pub(crate) fn hold() -> Self {
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        Switches {
            isa: active(),
            cache: CACHE_BYTES.load(Ordering::Relaxed),
            _turn: turn,
        }
    }
}

#[cfg(test)]
impl Drop for Switches {
    fn drop(&mut self) {
        crate::engine::isa::restore(self.isa);
        CACHE_BYTES.store(self.cache, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::isa::set_active;
    #[test]
    fn cpu_vendor_matches_proc_cpuinfo() {
        if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo")
            && let Some(line) = info.lines().find(|l| l.starts_with("vendor_id"))
        {
            assert_eq!(cpu_is_amd(), line.contains("AuthenticAMD"), "{line}");
        }
    }

    #[test]
    fn stream_copy_copies_every_byte_at_any_alignment() {
        let src: Vec<f32> = (0..3000).map(|i| i as f32 * 0.25 - 7.0).collect();
        let _switches = Switches::hold();
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            if set_active(isa).is_err() {
                continue;
            }
            for offset in [0, 1, 3, 15, 16] {
                for len in [0, 1, 15, 16, 17, 64, 1000, 2900] {
                    let mut dst = vec![-1.0f32; 3100];
                    stream_copy(&mut dst[offset..offset + len], &src[..len]);
                    stream_fence();
                    assert_eq!(
                        &dst[offset..offset + len],
                        &src[..len],
                        "{isa:?} {offset} {len}"
                    );
                    assert!(dst[..offset].iter().all(|&v| v == -1.0), "{isa:?} before");
                    assert!(
                        dst[offset + len..].iter().all(|&v| v == -1.0),
                        "{isa:?} after"
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    /// `dst = src` in 64-byte lines with non-temporal stores; `dst` starts
    /// on a line and both are `dst.len()` bytes, a multiple of 64. Inlines
    /// into AVX-512 callers (`stream_chunks_avx512` calls it per chunk).
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(crate) unsafe fn stream_avx512(dst: &mut [u8], src: &[u8]) {
        for i in (0..dst.len().min(src.len()) / 64 * 64).step_by(64) {
            // SAFETY: `i + 64` bytes of both are in bounds, and `dst + i`
            // is 64-byte aligned (the caller's contract).
            unsafe {
                let v = _mm512_loadu_si512(src.as_ptr().add(i).cast());
                _mm512_stream_si512(dst.as_mut_ptr().add(i).cast(), v);
            }
        }
    }
    /// As [`stream_avx512`], 32 bytes at a time (`convert_chunks` in
    /// `engine::tiles` inlines it into AVX2 callers per chunk).
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) unsafe fn stream_avx2(dst: &mut [u8], src: &[u8]) {
        for i in (0..dst.len().min(src.len()) / 32 * 32).step_by(32) {
            // SAFETY: `i + 32` bytes of both are in bounds, and `dst + i`
            // is 32-byte aligned (the caller's contract).
            unsafe {
                let v = _mm256_loadu_si256(src.as_ptr().add(i).cast());
                _mm256_stream_si256(dst.as_mut_ptr().add(i).cast(), v);
            }
        }
    }
}
