//! Runtime instruction-set dispatch for the elementwise tile loops.
//!
//! An op author writes a scalar kernel generic over [`Float`]. The drivers in
//! [`crate::kernel`] run it over tiles through the [`TileJob`]s here; each
//! job is compiled once per instruction set with `#[target_feature]`, the
//! kernel is inlined into it (`#[inline(always)]` all the way down), and
//! LLVM vectorises the loop — branches in the kernel become blends, and the
//! [`Float`] transcendentals for f32 are branch-free polynomials
//! ([`crate::vmath`]) that vectorise with it. The best set the CPU has is
//! chosen at run time, once.
//!
//! Where the set has fused multiply-add (AVX2, AVX-512, NEON), kernels run
//! with `T = F32Fma` for f32 ([`TileJob::run_fma`]): the same `f32`
//! arithmetic, but the vector math's polynomials use FMA, which makes
//! `exp`, `tanh`, `sigmoid` and `log` 1.2–1.45× faster. Results then may
//! differ from the scalar build's in the last bit, within the documented
//! bounds; every SIMD set gives the same bits as every other.
//!
//! `SIMPLEOP_ISA=scalar|avx2|avx512` (read at the first dispatch) or
//! [`set_active`] pick a lower set, which is how the benchmark shows what
//! vectorisation buys.

use std::sync::atomic::{AtomicU8, Ordering};

use super::vector::{Avx512Loops, Stores, VectorLoop};
use super::{MapFn, MapGrad};
use crate::{DType, Error, Float, Result};

/// An instruction set the tile loops are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain code for the target's baseline (SSE2 on x86-64).
    Scalar,
    /// AArch64 Advanced SIMD (the baseline there).
    Neon,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// AVX-512 F/BW/DQ/VL with FMA and F16C (512-bit vectors).
    Avx512,
}

impl Isa {
    /// The lower-case name used by `SIMPLEOP_ISA` and the benchmark.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Neon => "neon",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses [`Isa::name`].
    pub fn from_name(name: &str) -> Option<Isa> {
        [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .find(|i| i.name() == name)
    }

    /// Whether this CPU can run code compiled for `self`.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512dq")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }
}

/// The best instruction set this CPU supports.
pub fn best() -> Isa {
    [Isa::Avx512, Isa::Avx2, Isa::Neon]
        .into_iter()
        .find(|i| i.is_supported())
        .unwrap_or(Isa::Scalar)
}

/// 0 = not chosen yet; otherwise `Isa as u8 + 1`.
static ACTIVE: AtomicU8 = AtomicU8::new(0);

fn decode(v: u8) -> Isa {
    match v {
        1 => Isa::Scalar,
        2 => Isa::Neon,
        3 => Isa::Avx2,
        _ => Isa::Avx512,
    }
}

fn encode(isa: Isa) -> u8 {
    isa as u8 + 1
}

/// The instruction set the tile loops use now.
#[inline]
pub fn active() -> Isa {
    match ACTIVE.load(Ordering::Relaxed) {
        0 => choose(),
        v => decode(v),
    }
}

#[cold]
fn choose() -> Isa {
    let requested = std::env::var("SIMPLEOP_ISA")
        .ok()
        .and_then(|s| Isa::from_name(s.trim()));
    let isa = requested.filter(|i| i.is_supported()).unwrap_or_else(best);
    ACTIVE.store(encode(isa), Ordering::Relaxed);
    isa
}

/// Selects the instruction set for every later tile loop in this process,
/// for example [`Isa::Scalar`] to measure what vectorisation buys.
pub fn set_active(isa: Isa) -> Result<()> {
    if !isa.is_supported() {
        return Err(Error::invalid(
            "simd",
            "isa",
            format!("this CPU cannot run `{}` code", isa.name()),
        ));
    }
    ACTIVE.store(encode(isa), Ordering::Relaxed);
    Ok(())
}

/// Holds the process-wide instruction set and cache size for one of the
/// crate's tests, which run on parallel threads: tests that change them,
/// or count on them, take turns, and the values come back on drop (after
/// a panic too).
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
        ACTIVE.store(encode(self.isa), Ordering::Relaxed);
        CACHE_BYTES.store(self.cache, Ordering::Relaxed);
    }
}

/// A loop body compiled once per instruction set. Implementations mark
/// `run` `#[inline(always)]` so that it is compiled inside the
/// `#[target_feature]` function that calls it.
pub trait TileJob: Sized {
    /// Runs the loop.
    fn run(self);
    /// Runs the loop where the CPU has fused multiply-add: kernels run in
    /// [`Float::Fma`], so an f32 kernel's vector math uses
    /// [`crate::vmath::fma`]. Jobs without kernels run as [`TileJob::run`].
    #[inline(always)]
    fn run_fma(self) {
        self.run()
    }

    /// Runs the loop inside the AVX-512 dispatch; jobs whose kernels have
    /// a [`VectorForm`](super::VectorForm) run it here, the rest as
    /// [`TileJob::run_fma`].
    ///
    /// # Safety
    /// The CPU must have what [`Isa::Avx512`] stands for (AVX-512F, BW,
    /// DQ and VL, with AVX2, FMA and F16C).
    #[inline(always)]
    unsafe fn run_avx512(self) {
        self.run_fma()
    }
}

/// Runs `job` compiled for the active instruction set.
#[inline]
pub fn run<J: TileJob>(job: J) {
    // SAFETY: `active` only returns an instruction set the CPU supports.
    unsafe { run_on(active(), job) }
}

/// Runs `job` compiled for `isa`, which was [`active`] when the caller
/// read it (so that what it computed can be labelled with the set that
/// computed it), or plainly if the CPU lacks `isa`.
pub(crate) fn run_with<J: TileJob>(isa: Isa, job: J) {
    if isa.is_supported() {
        // SAFETY: checked just now.
        unsafe { run_on(isa, job) }
    } else {
        job.run()
    }
}

/// The dispatch behind [`run`] and [`run_with`].
///
/// # Safety
/// The CPU supports `isa`.
#[inline(always)]
unsafe fn run_on<J: TileJob>(isa: Isa, job: J) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract.
        Isa::Avx512 => unsafe { run_avx512(job) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { run_avx2(job) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => job.run_fma(),
        _ => job.run(),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(
    enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi1,bmi2,lzcnt,popcnt"
)]
fn run_avx512<J: TileJob>(job: J) {
    // SAFETY: `run_on` calls this only for `Isa::Avx512` on a CPU that
    // supports it (its caller's contract).
    unsafe { job.run_avx512() }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,bmi1,bmi2,lzcnt,popcnt")]
fn run_avx2<J: TileJob>(job: J) {
    job.run_fma()
}

/// `out[j] = kernel(ins[0][j], .., ins[N-1][j])` over compute-type slices of
/// equal length.
pub struct MapTile<'a, K, C, const N: usize> {
    /// The op's forward kernel.
    pub kernel: &'a K,
    /// The inputs, each at least `out.len()` long.
    pub ins: [&'a [C]; N],
    /// The result.
    pub out: &'a mut [C],
}

/// Elements per block of a [`MapTile`] loop. Blocks are fixed-size arrays,
/// so the vector loop over one has no bounds checks and no scalar
/// remainder: over plain slices LLVM leaves the last 1-16 elements of every
/// call to a scalar loop, which on a 1024-element tile of `tanh` costs as
/// much as the vector part.
const BLOCK: usize = 256;
/// Loops over fewer bytes of output than this (cache-resident tiles) run
/// without prefetching.
const PREFETCH_MIN: usize = 64 * 1024;

/// A switch that is `default()` unless its environment variable is set
/// at the first read (`0` is off, anything else on), and that the program
/// may flip later.
pub(super) struct Switch {
    var: &'static str,
    default: fn() -> bool,
    /// 0 = not read yet, 1 = off, 2 = on.
    state: AtomicU8,
}

impl Switch {
    /// On by default.
    pub(super) const fn new(var: &'static str) -> Switch {
        Switch::with_default(var, || true)
    }

    pub(super) const fn with_default(var: &'static str, default: fn() -> bool) -> Switch {
        Switch {
            var,
            default,
            state: AtomicU8::new(0),
        }
    }

    #[inline]
    pub(super) fn get(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            0 => {
                let on =
                    std::env::var(self.var).map_or_else(|_| (self.default)(), |v| v.trim() != "0");
                // A value set meanwhile wins over the first read.
                let v = if on { 2 } else { 1 };
                match self
                    .state
                    .compare_exchange(0, v, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => on,
                    Err(set) => set == 2,
                }
            }
            v => v == 2,
        }
    }

    pub(super) fn set(&self, on: bool) {
        self.state.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    }
}

static PREFETCH: Switch = Switch::new("SIMPLEOP_PREFETCH");

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

static OP_LOOP_PREFETCH: Switch =
    Switch::with_default("SIMPLEOP_OP_LOOP_PREFETCH", || !cpu_is_amd());

/// Whether single-op loops (one kernel streaming over whole arrays, the
/// elementwise drivers) prefetch their next block, given that
/// [`prefetch_enabled`]. `SIMPLEOP_OP_LOOP_PREFETCH=0` or `=1` at the
/// first use, or [`set_op_loop_prefetch`], decides; otherwise it depends
/// on the CPU's maker. On a 2-core Xeon these loops ran 1.3–1.6x slower
/// without it (16M `elemwise_add`); on a 2-core EPYC (Zen 4) VM they ran
/// faster without it (`elemwise_add` 3.1–3.4 against 6.2–6.6 ms, `relu`
/// 2.5–2.6 against 3.3–3.7, in alternating `simpleop bench` runs), so it is
/// off on AMD CPUs and on elsewhere. Costlier fused programs prefetch on
/// both: without it, `chain6/fused` took 12 ms instead of 7.6 on the EPYC.
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
/// output is better left in the cache for whoever reads it next: 4M f16
/// `relu` (16 MB in all, a 32 MB L3) took 0.043 ns per element with plain
/// stores against 0.086 streamed on the Zen 4 VM, while 8M f32 `relu`
/// took 0.09–0.16 streamed against 0.22–0.25 plain.
pub fn streams_past_caches(out_bytes: usize, touched_bytes: usize) -> bool {
    past_caches(out_bytes, touched_bytes, last_level_cache_bytes()) && stream_stores_enabled()
}

/// [`streams_past_caches`]'s sizes rule for a last-level cache of `llc`.
fn past_caches(out_bytes: usize, touched_bytes: usize, llc: usize) -> bool {
    out_bytes >= STREAM_MIN_BYTES && touched_bytes >= llc / 4 * 3
}

static STREAM: Switch = Switch::new("SIMPLEOP_STREAM");

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

impl<K: MapFn<N>, C: Float, const N: usize> MapTile<'_, K, C, N> {
    /// The plain loop, for the remainder after the blocks.
    #[inline(always)]
    fn apply_slices(kernel: &K, ins: [&[C]; N], out: &mut [C]) {
        let ins: [&[C]; N] = ins.map(|s| &s[..out.len()]);
        for (j, o) in out.iter_mut().enumerate() {
            let mut x: [C; N] = std::array::from_fn(|i| ins[i][j]);
            *o = kernel.apply(&mut x);
        }
    }
}

impl<K: MapFn<N>, C: Float, const N: usize> TileJob for MapTile<'_, K, C, N> {
    /// Whole blocks, then the remainder. Long loops also ask for the next
    /// block's inputs while computing this one: measured here, the hardware
    /// prefetcher alone leaves memory and compute serialised on 16M-element
    /// loops.
    #[inline(always)]
    fn run(self) {
        let n = self.out.len();
        // A local copy: the compiler cannot see that stores to `out` leave
        // `*self.kernel` alone, and would reload (and convert) a scalar
        // parameter for every vector.
        let kernel = *self.kernel;
        let ins: [&[C]; N] = self.ins.map(|s| &s[..n]);
        let ahead = std::mem::size_of_val(self.out) >= PREFETCH_MIN;
        let mut blocks = self.out.chunks_exact_mut(BLOCK);
        for (b, out) in (&mut blocks).enumerate() {
            let start = b * BLOCK;
            if ahead {
                let next = (start + BLOCK).min(n)..(start + 2 * BLOCK).min(n);
                for x in &ins {
                    prefetch_op_loop(&x[next.clone()]);
                }
            }
            let out: &mut [C; BLOCK] = out.try_into().expect("exact chunk");
            let xs: [&[C; BLOCK]; N] = ins.map(|s| {
                s[start..start + BLOCK]
                    .try_into()
                    .expect("inside the input")
            });
            for (j, o) in out.iter_mut().enumerate() {
                let mut x: [C; N] = std::array::from_fn(|i| xs[i][j]);
                *o = kernel.apply(&mut x);
            }
        }
        let rest = blocks.into_remainder();
        let done = n - rest.len();
        Self::apply_slices(&kernel, ins.map(|s| &s[done..]), rest);
    }

    #[inline(always)]
    fn run_fma(self) {
        MapTile {
            kernel: self.kernel,
            ins: self.ins.map(bytemuck::cast_slice::<C, C::Fma>),
            out: bytemuck::cast_slice_mut::<C, C::Fma>(self.out),
        }
        .run()
    }

    /// f32 tiles of a kernel with an AVX-512 vector form run that form, a
    /// block at a time with the next block's input asked for on long
    /// loops, as in [`TileJob::run`].
    #[inline(always)]
    unsafe fn run_avx512(self) {
        let Some(simd_loop) = f32_form::<K, C, N>(self.kernel) else {
            return self.run_fma();
        };
        let out: &mut [f32] = bytemuck::cast_slice_mut(self.out);
        let x: &[f32] = &bytemuck::cast_slice(self.ins[0])[..out.len()];
        if std::mem::size_of_val(out) < PREFETCH_MIN {
            // SAFETY: the caller guarantees what `Isa::Avx512` stands
            // for; the slices are one length.
            unsafe { simd_loop(x, out, Stores::Cached) };
            return;
        }
        let n = x.len();
        for (b, (xb, ob)) in x.chunks(BLOCK).zip(out.chunks_mut(BLOCK)).enumerate() {
            let next = ((b + 1) * BLOCK).min(n)..((b + 2) * BLOCK).min(n);
            prefetch_op_loop(&x[next]);
            // SAFETY: as above.
            unsafe { simd_loop(xb, ob, Stores::Cached) };
        }
    }
}

/// As [`MapTile`], for kernels that also update their inputs in place: the
/// inputs' new values are written back into `ins`.
pub struct MapTileMut<'a, K, C, const N: usize> {
    /// The op's forward kernel.
    pub kernel: &'a K,
    /// The inputs, updated in place.
    pub ins: [&'a mut [C]; N],
    /// The result.
    pub out: &'a mut [C],
}

impl<K: MapFn<N>, C: Float, const N: usize> TileJob for MapTileMut<'_, K, C, N> {
    #[inline(always)]
    fn run(self) {
        let (ins, kernel) = (self.ins, *self.kernel);
        for (j, o) in self.out.iter_mut().enumerate() {
            let mut x: [C; N] = std::array::from_fn(|i| ins[i][j]);
            *o = kernel.apply(&mut x);
            for i in 0..N {
                ins[i][j] = x[i];
            }
        }
    }

    #[inline(always)]
    fn run_fma(self) {
        MapTileMut {
            kernel: self.kernel,
            ins: self.ins.map(bytemuck::cast_slice_mut::<C, C::Fma>),
            out: bytemuck::cast_slice_mut::<C, C::Fma>(self.out),
        }
        .run()
    }
}

/// As [`MapTile`] for outputs written with streaming stores: a tile at a
/// time into the L1 buffer `res`, then [`stream_copy`] to `out` (or, where
/// an f32 vector form runs, its loop streaming straight from registers),
/// asking for the next tile's inputs meanwhile. The caller must call
/// [`stream_fence`] after, on the same thread (crate-private for that).
pub(crate) struct StreamMap<'a, K, C, const N: usize> {
    /// The op's forward kernel.
    pub kernel: &'a K,
    /// The inputs, each `out.len()` long.
    pub ins: [&'a [C]; N],
    /// The result.
    pub out: &'a mut [C],
    /// The tile buffer; its length is the tile size.
    pub res: &'a mut [C],
}

/// The AVX-512 loop of the kernel's vector form over f32 compute slices
/// (unary kernels only; f16/bf16 storage goes through
/// [`TileIo::avx512_loop`] instead, f64 has none): the one place the f32
/// tile loops decide whether a form runs.
#[inline(always)]
fn f32_form<K: MapFn<N>, C: Float, const N: usize>(kernel: &K) -> Option<VectorLoop<f32>> {
    match kernel.vector() {
        Some(v) if N == 1 && C::DTYPE == DType::F32 => v.avx512().map(|l| l.f32),
        _ => None,
    }
}

/// Which of its loops a job that builds [`MapTile`]s runs them with.
#[derive(Clone, Copy)]
enum Mode {
    Plain,
    Fma,
    /// Only passed by [`TileJob::run_avx512`], whose caller vouches for
    /// the CPU.
    Avx512,
}

/// The most output bytes a staged tile computes before streaming them out
/// (where neither [`stream_chunks_avx512`] nor [`convert_chunks_avx512`]
/// runs: AVX2 and plain code). On the Zen 5 VM (probe:
/// `smooth_l1`'s body, 16M f32, two threads, each timed in pairs with a
/// loop streaming from registers) 1 KB tiles took 1.27-1.35x that loop's
/// time and 4 KB tiles (the tile size) 1.36-1.50x.
pub(crate) const STAGED_TILE_BYTES: usize = 1024;

/// Elements of `T` in a staged tile of at most `cap` elements.
#[inline]
fn staged_tile<T>(cap: usize) -> usize {
    (STAGED_TILE_BYTES / std::mem::size_of::<T>().max(1))
        .min(cap)
        .max(1)
}

/// Elements per chunk that [`stream_chunks_avx512`] computes before
/// streaming it out: four cache lines of f32.
const STREAM_CHUNK: usize = 64;

/// A chunk's results, line-aligned so that no load of a line splits.
#[repr(C, align(64))]
struct ChunkLines<T>([T; STREAM_CHUNK]);

/// `out[j] = kernel(ins[0][j], ..)` with streaming stores straight after
/// the kernel, for kernels without a vector form: the lanes up to `out`'s
/// first 64-byte boundary and the tail are stored plainly; in between,
/// each chunk of [`STREAM_CHUNK`] results is computed into a line-aligned
/// buffer that stays in registers or L1, then streamed out a line at a
/// time. Against computing a 1024-element tile and streaming it out
/// afterwards, this interleaves the inputs' loads with the stores finely,
/// as a vector form's loop does: on the Zen 5 VM (probe, `smooth_l1`'s
/// body, 16M f32, two threads, timed in pairs) 1.01-1.04x the time of a
/// hand-written loop streaming from registers, against 1.3-1.5x for the
/// tile at any size from 128 to 2048 elements and 1.15-1.2x for plain
/// stores. The caller fences.
///
/// # Safety
/// The CPU has what [`Isa::Avx512`] stands for, and the caller is
/// compiled for it (this inlines into `run_avx512`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn stream_chunks_avx512<K: MapFn<N>, D: Float, const N: usize>(
    kernel: &K,
    ins: [&[D]; N],
    out: &mut [D],
) {
    let n = out.len();
    // A local copy, as in `MapTile::run`.
    let kernel = *kernel;
    let ins: [&[D]; N] = ins.map(|s| &s[..n]);
    let head = out.as_ptr().align_offset(64).min(n);
    MapTile::<K, D, N>::apply_slices(&kernel, ins.map(|s| &s[..head]), &mut out[..head]);
    let mut chunk = ChunkLines([D::zero(); STREAM_CHUNK]);
    let mut start = head;
    while start + STREAM_CHUNK <= n {
        if (start - head).is_multiple_of(BLOCK) {
            let next = (start + BLOCK).min(n)..(start + 2 * BLOCK).min(n);
            for x in &ins {
                prefetch_op_loop(&x[next.clone()]);
            }
        }
        let xs: [&[D; STREAM_CHUNK]; N] = ins.map(|s| {
            s[start..start + STREAM_CHUNK]
                .try_into()
                .expect("inside the input")
        });
        for (j, o) in chunk.0.iter_mut().enumerate() {
            let mut x: [D; N] = std::array::from_fn(|i| xs[i][j]);
            *o = kernel.apply(&mut x);
        }
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut out[start..start + STREAM_CHUNK]);
        // SAFETY: `dst` starts on a line: `start - head` is a multiple of
        // `STREAM_CHUNK`, whose bytes are a multiple of 64 for 4- and
        // 8-byte types; both slices are that many bytes. The features are
        // the caller's contract.
        unsafe { x86::stream_avx512(dst, bytemuck::cast_slice(&chunk.0)) };
        start += STREAM_CHUNK;
    }
    MapTile::<K, D, N>::apply_slices(&kernel, ins.map(|s| &s[start..]), &mut out[start..]);
}

/// `out[j] = kernel(ins[0][j], ..)` over half-type storage for kernels
/// without a vector form, converting in registers: each chunk of
/// [`STREAM_CHUNK`] elements is widened into a line-aligned f32 buffer
/// per input ([`TileIo::widen32_avx512`]), computed as the f32 tile loops
/// compute it, narrowed, and written out, plainly or (with `streamed`)
/// as whole streamed lines, the lanes before `out`'s first line and the
/// tail element by element. Against converting a tile into L1 buffers,
/// computing it into a third and converting that out (or into a fourth to
/// stream), this keeps every value in registers or one line of L1 and
/// interleaves loads and stores as [`stream_chunks_avx512`] does.
/// With `streamed` the caller fences. `BF16` narrows with AVX-512 BF16's
/// conversion ([`TileIo::narrow32_avx512bf16`]).
///
/// # Safety
/// The CPU has what [`Isa::Avx512`] stands for (and AVX-512 BF16 with
/// `BF16`), and the caller is compiled for it (this inlines into
/// `run_avx512` or [`convert_chunks_avx512bf16`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn convert_chunks_avx512<K: MapFn<N>, S: TileIo, const N: usize, const BF16: bool>(
    kernel: &K,
    ins: [&[S]; N],
    out: &mut [S],
    streamed: bool,
) {
    /// The f32 tile loops' element type for `S`'s compute type.
    type Lane<S> = <<S as Float>::Compute as Float>::Fma;
    /// One element as the f32 tile loops compute it (the plain head and
    /// tail).
    #[inline(always)]
    fn one<K: MapFn<N>, S: TileIo, const N: usize>(kernel: &K, xs: [S; N]) -> S {
        let mut x: [Lane<S>; N] = xs.map(|v| bytemuck::cast(v.to_compute()));
        S::from_compute(bytemuck::cast(kernel.apply(&mut x)))
    }
    let n = out.len();
    // A local copy, as in `MapTile::run`.
    let kernel = *kernel;
    let ins: [&[S]; N] = ins.map(|s| &s[..n]);
    let head = if streamed {
        out.as_ptr().align_offset(64).min(n)
    } else {
        0
    };
    for (j, o) in out[..head].iter_mut().enumerate() {
        *o = one(&kernel, std::array::from_fn(|i| ins[i][j]));
    }
    let mut wide: [ChunkLines<S::Compute>; N] =
        std::array::from_fn(|_| ChunkLines([S::Compute::zero(); STREAM_CHUNK]));
    let mut res = ChunkLines([S::Compute::zero(); STREAM_CHUNK]);
    let mut narrow = ChunkLines([S::zero(); STREAM_CHUNK]);
    let mut start = head;
    while start + STREAM_CHUNK <= n {
        if (start - head).is_multiple_of(BLOCK) {
            let next = (start + BLOCK).min(n)..(start + 2 * BLOCK).min(n);
            for x in &ins {
                prefetch_op_loop(&x[next.clone()]);
            }
        }
        for (w, x) in wide.iter_mut().zip(&ins) {
            let x = &x[start..start + STREAM_CHUNK];
            for (d, s) in w.0.chunks_exact_mut(32).zip(x.chunks_exact(32)) {
                // SAFETY: the caller's contract; 32 lanes each.
                unsafe {
                    S::widen32_avx512(
                        s.try_into().expect("32 lanes"),
                        d.try_into().expect("32 lanes"),
                    )
                };
            }
        }
        let xs: [&[Lane<S>; STREAM_CHUNK]; N] = std::array::from_fn(|i| {
            bytemuck::cast_slice(&wide[i].0[..])
                .try_into()
                .expect("one chunk")
        });
        let r: &mut [Lane<S>; STREAM_CHUNK] = bytemuck::cast_slice_mut(&mut res.0[..])
            .try_into()
            .expect("one chunk");
        for (j, o) in r.iter_mut().enumerate() {
            let mut x: [Lane<S>; N] = std::array::from_fn(|i| xs[i][j]);
            *o = kernel.apply(&mut x);
        }
        let dst = &mut out[start..start + STREAM_CHUNK];
        let to: &mut [S] = if streamed { &mut narrow.0 } else { dst };
        for (d, s) in to.chunks_exact_mut(32).zip(res.0.chunks_exact(32)) {
            let (s, d) = (
                s.try_into().expect("32 lanes"),
                d.try_into().expect("32 lanes"),
            );
            // SAFETY: the caller's contract (BF16 included); 32 lanes each.
            unsafe {
                if BF16 {
                    S::narrow32_avx512bf16(s, d)
                } else {
                    S::narrow32_avx512(s, d)
                }
            };
        }
        if streamed {
            let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut out[start..start + STREAM_CHUNK]);
            // SAFETY: `dst` starts on a line (`head` is `out`'s first and
            // `STREAM_CHUNK` elements of a half type are two lines) and is
            // 128 bytes long, as the chunk is. The features are the
            // caller's contract.
            unsafe { x86::stream_avx512(dst, bytemuck::cast_slice(&narrow.0)) };
        }
        start += STREAM_CHUNK;
    }
    for (j, o) in out[start..].iter_mut().enumerate() {
        *o = one(&kernel, std::array::from_fn(|i| ins[i][start + j]));
    }
}

/// [`convert_chunks_avx512`] narrowing with AVX-512 BF16: on the Zen 4 VM
/// the integer rounding made bf16 kernels without a form cost 1.3-1.5x
/// their f16 time in L2.
///
/// # Safety
/// The CPU has what [`Isa::Avx512`] stands for and AVX-512 BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(
    enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi1,bmi2,lzcnt,popcnt,avx512bf16"
)]
unsafe fn convert_chunks_avx512bf16<K: MapFn<N>, S: TileIo, const N: usize>(
    kernel: &K,
    ins: [&[S]; N],
    out: &mut [S],
    streamed: bool,
) {
    // SAFETY: the caller's contract, and this function's features.
    unsafe { convert_chunks_avx512::<K, S, N, true>(kernel, ins, out, streamed) }
}

impl<K: MapFn<N>, C: Float, const N: usize> StreamMap<'_, K, C, N> {
    /// # Safety
    /// `Mode::Avx512` only on a CPU with what [`Isa::Avx512`] stands for.
    #[inline(always)]
    unsafe fn go(self, mode: Mode) {
        let n = self.out.len();
        // An f32 vector form streams from registers: no staging tile.
        let simd_loop = match mode {
            Mode::Avx512 => f32_form::<K, C, N>(self.kernel),
            _ => None,
        };
        #[cfg(target_arch = "x86_64")]
        if let (Mode::Avx512, None) = (mode, simd_loop) {
            let ins = self.ins.map(bytemuck::cast_slice::<C, C::Fma>);
            let out = bytemuck::cast_slice_mut::<C, C::Fma>(self.out);
            // SAFETY: `Avx512` only on such a CPU (the caller's contract);
            // the caller fences (this type's contract).
            return unsafe { stream_chunks_avx512(self.kernel, ins, out) };
        }
        let cap = match simd_loop {
            Some(_) => self.res.len().max(1),
            None => staged_tile::<C>(self.res.len()),
        };
        let mut start = 0;
        while start < n {
            let len = cap.min(n - start);
            let ahead = (start + len)..(start + 2 * len).min(n);
            for x in &self.ins {
                prefetch_op_loop(&x[ahead.clone()]);
            }
            if let Some(simd_loop) = simd_loop {
                let x: &[f32] = bytemuck::cast_slice(&self.ins[0][start..start + len]);
                let out: &mut [f32] = bytemuck::cast_slice_mut(&mut self.out[start..start + len]);
                // SAFETY: `Avx512` only on such a CPU (the caller's
                // contract); both slices are `len` long; the caller fences
                // (this type's contract).
                unsafe { simd_loop(x, out, Stores::Streamed) };
                start += len;
                continue;
            }
            let tile = MapTile {
                kernel: self.kernel,
                ins: self.ins.map(|x| &x[start..start + len]),
                out: &mut self.res[..len],
            };
            match mode {
                Mode::Plain => tile.run(),
                Mode::Fma => tile.run_fma(),
                // SAFETY: the caller's contract.
                Mode::Avx512 => unsafe { tile.run_avx512() },
            }
            stream_copy(&mut self.out[start..start + len], &self.res[..len]);
            start += len;
        }
    }
}

impl<K: MapFn<N>, C: Float, const N: usize> TileJob for StreamMap<'_, K, C, N> {
    #[inline(always)]
    fn run(self) {
        // SAFETY: not the AVX-512 mode.
        unsafe { self.go(Mode::Plain) }
    }

    #[inline(always)]
    fn run_fma(self) {
        // SAFETY: not the AVX-512 mode.
        unsafe { self.go(Mode::Fma) }
    }

    #[inline(always)]
    unsafe fn run_avx512(self) {
        // SAFETY: the caller guarantees the CPU.
        unsafe { self.go(Mode::Avx512) }
    }
}

/// `out[j] = kernel(ins[0][j], ..)` over storage slices whose type is not
/// its compute type (f16, bf16): on AVX-512, a vector form's loop or
/// `convert_chunks_avx512`, converting in registers; elsewhere a tile at
/// a time, each input converted into its L1 buffer, the kernel run into
/// `res`, and the result converted back, all inside one dispatch. With
/// `staged` (crate-internal), the output is written with streaming
/// stores, which the caller then fences on the same thread: from
/// registers on AVX-512, otherwise converted into that L1 buffer and
/// copied out.
pub struct ConvertMap<'a, K, S: TileIo, const N: usize> {
    /// The op's forward kernel.
    pub kernel: &'a K,
    /// The inputs, each `out.len()` long.
    pub ins: [&'a [S]; N],
    /// The result.
    pub out: &'a mut [S],
    /// One tile buffer per input, each at least `res.len()` long.
    pub bufs: [&'a mut [S::Compute]; N],
    /// The tile's result; its length is the tile size.
    pub res: &'a mut [S::Compute],
    /// Asks for streaming stores, for outputs past the caches: a buffer of
    /// at least `res.len()` elements to convert the result into and stream
    /// out from when no vector form runs (unused when one does). Crate-private
    /// (so only the crate builds a `ConvertMap`): streamed stores need the
    /// fence that safe callers could forget.
    pub(crate) staged: Option<&'a mut [S]>,
}

impl<K: MapFn<N>, S: TileIo, const N: usize> ConvertMap<'_, K, S, N> {
    /// # Safety
    /// `Mode::Avx512` only on a CPU with what [`Isa::Avx512`] stands for.
    #[inline(always)]
    unsafe fn go(self, mode: Mode) {
        let n = self.out.len();
        let mut bufs = self.bufs;
        let mut staged = self.staged;
        // A vector form converts in registers, skipping the tile buffers,
        // and streams from them when asked to.
        let simd_loop = match (mode, self.kernel.vector()) {
            (Mode::Avx512, Some(v)) if N == 1 => v.avx512().and_then(S::avx512_loop),
            _ => None,
        };
        // Without a form, convert in registers a chunk at a time.
        #[cfg(target_arch = "x86_64")]
        if let (Mode::Avx512, None) = (mode, simd_loop) {
            let streamed = staged.is_some();
            if S::DTYPE == DType::BF16 && std::arch::is_x86_feature_detected!("avx512bf16") {
                // SAFETY: as below, and the CPU has AVX-512 BF16.
                return unsafe {
                    convert_chunks_avx512bf16(self.kernel, self.ins, self.out, streamed)
                };
            }
            // SAFETY: `Avx512` only on such a CPU (the caller's contract);
            // with `staged` the caller fences (this type's contract).
            return unsafe {
                convert_chunks_avx512::<K, S, N, false>(self.kernel, self.ins, self.out, streamed)
            };
        }
        let cap = match (&simd_loop, &staged) {
            (None, Some(_)) => staged_tile::<S>(self.res.len()),
            _ => self.res.len().max(1),
        };
        let mut start = 0;
        while start < n {
            let len = cap.min(n - start);
            let ahead = (start + len)..(start + 2 * len).min(n);
            if let Some(simd_loop) = simd_loop {
                prefetch_op_loop(&self.ins[0][ahead]);
                let x = &self.ins[0][start..start + len];
                let out = &mut self.out[start..start + len];
                // Streamed straight from registers: no staging buffer.
                let stores = match staged {
                    Some(_) => Stores::Streamed,
                    None => Stores::Cached,
                };
                // SAFETY: `Avx512` only on such a CPU (the caller's
                // contract); both slices are `len` long; with `staged`
                // the caller fences (its contract).
                unsafe { simd_loop(x, out, stores) };
                start += len;
                continue;
            }
            for (buf, x) in bufs.iter_mut().zip(&self.ins) {
                prefetch_op_loop(&x[ahead.clone()]);
                S::load(&x[start..start + len], &mut buf[..len]);
            }
            let ins: [&[S::Compute]; N] = std::array::from_fn(|i| &bufs[i][..len]);
            let tile = MapTile {
                kernel: self.kernel,
                ins,
                out: &mut self.res[..len],
            };
            match mode {
                Mode::Plain => tile.run(),
                Mode::Fma => tile.run_fma(),
                // SAFETY: the caller's contract.
                Mode::Avx512 => unsafe { tile.run_avx512() },
            }
            match staged.as_deref_mut() {
                Some(buf) => {
                    S::store(&mut buf[..len], &self.res[..len], false);
                    stream_copy(&mut self.out[start..start + len], &buf[..len]);
                }
                None => S::store(&mut self.out[start..start + len], &self.res[..len], false),
            }
            start += len;
        }
    }
}

impl<K: MapFn<N>, S: TileIo, const N: usize> TileJob for ConvertMap<'_, K, S, N> {
    #[inline(always)]
    fn run(self) {
        // SAFETY: not the AVX-512 mode.
        unsafe { self.go(Mode::Plain) }
    }

    #[inline(always)]
    fn run_fma(self) {
        // SAFETY: not the AVX-512 mode.
        unsafe { self.go(Mode::Fma) }
    }

    #[inline(always)]
    unsafe fn run_avx512(self) {
        // SAFETY: the caller guarantees the CPU.
        unsafe { self.go(Mode::Avx512) }
    }
}

/// `out[i][j] = d input_i` at element `j`: a gradient kernel over tiles.
pub struct GradTile<'a, K, C, const N: usize> {
    /// The op's backward kernel.
    pub kernel: &'a K,
    /// The output gradient.
    pub dy: &'a [C],
    /// The forward output (zeros when the gradient does not read it).
    pub y: &'a [C],
    /// The inputs (zeros when the gradient does not read them).
    pub xs: [&'a [C]; N],
    /// One gradient per input.
    pub out: [&'a mut [C]; N],
}

impl<K: MapGrad<N>, C: Float, const N: usize> TileJob for GradTile<'_, K, C, N> {
    /// Whole blocks as fixed-size arrays, then the remainder (see
    /// `BLOCK`).
    #[inline(always)]
    fn run(self) {
        let n = self.dy.len();
        let kernel = *self.kernel; // see `MapTile::run`
        let (dy, y) = (&self.dy[..n], &self.y[..n]);
        let xs: [&[C]; N] = self.xs.map(|s| &s[..n]);
        let mut out: [&mut [C]; N] = self.out.map(|o| &mut o[..n]);
        let whole = n - n % BLOCK;
        for start in (0..whole).step_by(BLOCK) {
            let block = start..start + BLOCK;
            let dy: &[C; BLOCK] = dy[block.clone()].try_into().expect("inside");
            let y: &[C; BLOCK] = y[block.clone()].try_into().expect("inside");
            let xs: [&[C; BLOCK]; N] = xs.map(|s| s[block.clone()].try_into().expect("inside"));
            let g: [&mut [C; BLOCK]; N] = out
                .each_mut()
                .map(|o| (&mut o[block.clone()]).try_into().expect("inside"));
            for j in 0..BLOCK {
                let r = kernel.apply(dy[j], y[j], std::array::from_fn(|i| xs[i][j]));
                for i in 0..N {
                    g[i][j] = r[i];
                }
            }
        }
        for j in whole..n {
            let r = kernel.apply(dy[j], y[j], std::array::from_fn(|i| xs[i][j]));
            for i in 0..N {
                out[i][j] = r[i];
            }
        }
    }

    #[inline(always)]
    fn run_fma(self) {
        GradTile {
            kernel: self.kernel,
            dy: bytemuck::cast_slice::<C, C::Fma>(self.dy),
            y: bytemuck::cast_slice::<C, C::Fma>(self.y),
            xs: self.xs.map(bytemuck::cast_slice::<C, C::Fma>),
            out: self.out.map(bytemuck::cast_slice_mut::<C, C::Fma>),
        }
        .run()
    }
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

#[inline(always)]
fn round_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    // Choose before narrowing, so that only one u32 -> u16 narrowing
    // (two uops on x86) runs per vector.
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1));
    let quiet = b | 0x0040_0000;
    ((if x.is_nan() { quiet } else { rounded }) >> 16) as u16
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
    /// A vector form's AVX-512 loop over storage of this (non-compute)
    /// type, which converts in registers; `None` for f32/f64, whose tiles
    /// need no conversion.
    #[inline(always)]
    fn avx512_loop(_: &Avx512Loops) -> Option<VectorLoop<Self>> {
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

impl TileIo for half::f16 {
    #[inline(always)]
    fn avx512_loop(loops: &Avx512Loops) -> Option<VectorLoop<Self>> {
        loops.f16
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen32_avx512(src: &[Self; 32], dst: &mut [f32; 32]) {
        use super::vector::x86::{F16, widen32};
        // SAFETY: the caller's contract.
        unsafe { widen32::<F16>(src, dst) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn narrow32_avx512(src: &[f32; 32], dst: &mut [Self; 32]) {
        use super::vector::x86::{F16, narrow32};
        // SAFETY: the caller's contract.
        unsafe { narrow32::<F16>(src, dst) }
    }
    fn as_compute(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_compute_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
    #[inline]
    fn load(src: &[Self], dst: &mut [f32]) {
        f16_to_f32(src, dst);
    }
    #[inline]
    fn store(dst: &mut [Self], src: &[f32], add: bool) {
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

/// f16 → f32 with the widest conversion instruction present (F16C:
/// 8 lanes; AVX-512: 16 lanes), else `half`'s.
fn f16_to_f32(src: &[half::f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    #[cfg(target_arch = "x86_64")]
    {
        let done = match active() {
            // SAFETY: `active` only returns instruction sets the CPU has.
            Isa::Avx512 => unsafe { x86::f16_to_f32_avx512(&src[..n], &mut dst[..n]) },
            // SAFETY: as above.
            Isa::Avx2 => unsafe { x86::f16_to_f32_avx2(&src[..n], &mut dst[..n]) },
            _ => 0,
        };
        for (d, s) in dst[done..n].iter_mut().zip(&src[done..n]) {
            *d = s.to_f32();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use half::slice::HalfFloatSliceExt;
        src[..n].convert_to_f32_slice(&mut dst[..n]);
    }
}

/// f32 → f16, rounding to nearest even, as [`f16_to_f32`].
fn f32_to_f16(src: &[f32], dst: &mut [half::f16]) {
    let n = src.len().min(dst.len());
    #[cfg(target_arch = "x86_64")]
    {
        let done = match active() {
            // SAFETY: `active` only returns instruction sets the CPU has.
            Isa::Avx512 => unsafe { x86::f32_to_f16_avx512(&src[..n], &mut dst[..n]) },
            // SAFETY: as above.
            Isa::Avx2 => unsafe { x86::f32_to_f16_avx2(&src[..n], &mut dst[..n]) },
            _ => 0,
        };
        for (d, s) in dst[done..n].iter_mut().zip(&src[done..n]) {
            *d = half::f16::from_f32(*s);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use half::slice::HalfFloatSliceExt;
        dst[..n].convert_from_f32_slice(&src[..n]);
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

    /// `dst = src` in 64-byte lines with non-temporal stores; `dst` starts
    /// on a line and both are `dst.len()` bytes, a multiple of 64. Inlines
    /// into AVX-512 callers (`stream_chunks_avx512` calls it per chunk).
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn stream_avx512(dst: &mut [u8], src: &[u8]) {
        for i in (0..dst.len().min(src.len()) / 64 * 64).step_by(64) {
            // SAFETY: `i + 64` bytes of both are in bounds, and `dst + i`
            // is 64-byte aligned (the caller's contract).
            unsafe {
                let v = _mm512_loadu_si512(src.as_ptr().add(i).cast());
                _mm512_stream_si512(dst.as_mut_ptr().add(i).cast(), v);
            }
        }
    }

    /// As [`stream_avx512`], 32 bytes at a time.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn stream_avx2(dst: &mut [u8], src: &[u8]) {
        for i in (0..dst.len().min(src.len()) / 32 * 32).step_by(32) {
            // SAFETY: `i + 32` bytes of both are in bounds, and `dst + i`
            // is 32-byte aligned (the caller's contract).
            unsafe {
                let v = _mm256_loadu_si256(src.as_ptr().add(i).cast());
                _mm256_stream_si256(dst.as_mut_ptr().add(i).cast(), v);
            }
        }
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

impl TileIo for half::bf16 {
    #[inline(always)]
    fn avx512_loop(loops: &Avx512Loops) -> Option<VectorLoop<Self>> {
        loops.bf16
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen32_avx512(src: &[Self; 32], dst: &mut [f32; 32]) {
        use super::vector::x86::{Bf16, widen32};
        // SAFETY: the caller's contract.
        unsafe { widen32::<Bf16>(src, dst) }
    }
    /// With integer rounding: `vcvtneps2bf16` needs AVX-512 BF16, which
    /// the loops this inlines into are not compiled for.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn narrow32_avx512(src: &[f32; 32], dst: &mut [Self; 32]) {
        use super::vector::x86::{Bf16, narrow32};
        // SAFETY: the caller's contract.
        unsafe { narrow32::<Bf16>(src, dst) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn narrow32_avx512bf16(src: &[f32; 32], dst: &mut [Self; 32]) {
        use super::vector::x86::{Bf16Native, narrow32};
        // SAFETY: the caller's contract, AVX-512 BF16 included.
        unsafe { narrow32::<Bf16Native>(src, dst) }
    }
    fn as_compute(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_compute_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
    #[inline]
    fn load(src: &[Self], dst: &mut [f32]) {
        run(Bf16ToF32 { src, dst });
    }
    #[inline]
    fn store(dst: &mut [Self], src: &[f32], add: bool) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_stream_only_past_the_last_level_cache() {
        const MB: usize = 1 << 20;
        // 4M f16 relu: 8 MB out, 16 MB in all, in a 32 MB cache
        assert!(!past_caches(8 * MB, 16 * MB, 32 * MB));
        assert!(past_caches(8 * MB, 24 * MB, 32 * MB));
        assert!(past_caches(32 * MB, 64 * MB, 32 * MB));
        assert!(
            !past_caches(4 * MB, 64 * MB, 32 * MB),
            "small outputs never"
        );
        assert!(past_caches(8 * MB, 8 * MB, 0), "no cache known");
        if std::path::Path::new("/sys/devices/system/cpu/cpu0/cache/index0/size").exists() {
            assert!(read_last_level_cache().is_some_and(|b| b >= 1 << 15));
        }
    }

    #[test]
    fn op_loop_prefetch_changes_no_result() {
        // Long enough for the loop to prefetch (`PREFETCH_MIN`), ragged.
        let n = 100_003;
        let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
        let before = op_loop_prefetch_enabled();
        let outs: Vec<Vec<f32>> = [true, false]
            .into_iter()
            .map(|on| {
                set_op_loop_prefetch(on);
                assert_eq!(op_loop_prefetch_enabled(), on);
                let mut out = vec![0f32; n];
                run(MapTile {
                    kernel: &TwiceMinus,
                    ins: [&a, &b],
                    out: &mut out,
                });
                out
            })
            .collect();
        set_op_loop_prefetch(before);
        let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| (x * 2.0 - y).abs()).collect();
        assert_eq!(outs[0], want);
        assert_eq!(outs[1], want);
    }

    /// Skipped under valgrind (`.ci/valgrind`), whose emulated CPUID
    /// reports a vendor of its own.
    #[test]
    fn cpu_vendor_matches_proc_cpuinfo() {
        if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo")
            && let Some(line) = info.lines().find(|l| l.starts_with("vendor_id"))
        {
            assert_eq!(cpu_is_amd(), line.contains("AuthenticAMD"), "{line}");
        }
    }

    /// `x0 * 2 - x1`, with a branch, as an op author would write it.
    #[derive(Clone, Copy)]
    struct TwiceMinus;
    impl MapFn<2> for TwiceMinus {
        fn apply<T: Float>(&self, x: &mut [T; 2]) -> T {
            let d = x[0] * T::from_f64(2.0) - x[1];
            if d < T::zero() { -d } else { d }
        }
    }

    /// d/dx0 and d/dx1 of `dy * (x0 * 2 - x1)`, plus `y`.
    #[derive(Clone, Copy)]
    struct TwiceMinusGrad;
    impl MapGrad<2> for TwiceMinusGrad {
        fn apply<T: Float>(&self, dy: T, y: T, x: [T; 2]) -> [T; 2] {
            [dy * T::from_f64(2.0) + y, -dy * x[1]]
        }
    }

    #[test]
    fn grad_tile_covers_every_element_of_any_length() {
        for n in [0, 1, 255, 256, 257, 1000, 1024] {
            let v = |k: usize, s: f32| -> Vec<f32> {
                (0..n).map(|i| ((i * k) % 53) as f32 * s - 3.0).collect()
            };
            let (dy, y, a, b) = (v(3, 0.5), v(5, 0.25), v(7, 0.125), v(11, 1.5));
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                let (mut g0, mut g1) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                let job = GradTile {
                    kernel: &TwiceMinusGrad,
                    dy: &dy,
                    y: &y,
                    xs: [&a[..], &b[..]],
                    out: [&mut g0[..], &mut g1[..]],
                };
                run_with(isa, job);
                for j in 0..n {
                    assert_eq!(g0[j], dy[j] * 2.0 + y[j], "n = {n}, element {j}");
                    assert_eq!(g1[j], -dy[j] * b[j], "n = {n}, element {j}");
                }
            }
        }
    }

    #[test]
    fn map_tile_covers_every_element_of_any_length() {
        // around the block size, and long enough to take the prefetching
        // path (64 KB of output), with and without a remainder
        for n in [0, 1, 255, 256, 257, 1000, 16_384, 16_384 + 17, 40_000] {
            let a: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.25 - 7.0).collect();
            let b: Vec<f32> = (0..n).map(|i| (i % 31) as f32 * 0.5).collect();
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                let mut out = vec![f32::NAN; n];
                let job = MapTile {
                    kernel: &TwiceMinus,
                    ins: [&a[..], &b[..]],
                    out: &mut out,
                };
                run_with(isa, job);
                for j in 0..n {
                    let want = (a[j] * 2.0 - b[j]).abs();
                    assert_eq!(out[j], want, "n = {n}, element {j}, {}", isa.name());
                }
            }
        }
    }

    /// [`StreamMap`] writes what [`MapTile`] writes, at every element
    /// offset of the output across a line, for lengths around its chunks
    /// and tiles, on every instruction set, f32 and f64, and nothing
    /// outside it.
    #[test]
    fn stream_map_writes_what_map_tile_writes_at_any_alignment() {
        fn check<C: Float + std::fmt::Debug>() {
            let line = 64 / std::mem::size_of::<C>();
            let src = |k: usize| -> Vec<C> {
                (0..5000)
                    .map(|i| C::from_f64(((i * k) % 97) as f64 * 0.25 - 7.0))
                    .collect()
            };
            let (a, b) = (src(1), src(7));
            let guard = C::from_f64(-1234.5);
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                if !isa.is_supported() {
                    continue;
                }
                for len in [0, 1, 63, 64, 65, 200, 1024, 1025, 4000] {
                    let mut want = vec![guard; len];
                    run_with(
                        isa,
                        MapTile {
                            kernel: &TwiceMinus,
                            ins: [&a[..len], &b[..len]],
                            out: &mut want,
                        },
                    );
                    for offset in 0..=line {
                        let mut dst = vec![guard; len + 2 * line + 1];
                        let mut res = vec![C::zero(); 1024];
                        run_with(
                            isa,
                            StreamMap {
                                kernel: &TwiceMinus,
                                ins: [&a[..len], &b[..len]],
                                out: &mut dst[offset..offset + len],
                                res: &mut res,
                            },
                        );
                        stream_fence();
                        let at = |j: usize| format!("{isa:?} len {len} offset {offset} [{j}]");
                        for (j, w) in want.iter().enumerate() {
                            assert_eq!(dst[offset + j].to_f64(), w.to_f64(), "{}", at(j));
                        }
                        assert!(
                            dst[..offset].iter().all(|&v| v.to_f64() == -1234.5),
                            "{}",
                            at(0)
                        );
                        assert!(
                            dst[offset + len..].iter().all(|&v| v.to_f64() == -1234.5),
                            "{}",
                            at(len)
                        );
                    }
                }
            }
        }
        check::<f32>();
        check::<f64>();
    }

    /// [`ConvertMap`] over f16/bf16 storage, with and without streamed
    /// stores, writes each element's f32 tile result rounded to the
    /// storage type (the AVX-512 chunks convert in registers, in their own
    /// lane order for bf16), at every element offset across a line, for
    /// lengths around its chunks, on every instruction set, with special
    /// values among the inputs, and nothing outside the output.
    #[test]
    fn convert_map_writes_each_rounded_result_at_any_alignment() {
        fn check<S: TileIo<Compute = f32> + std::fmt::Debug>() {
            let line = 64 / std::mem::size_of::<S>();
            let specials = [
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                0.0,
                -0.0,
                6.0e-8,
                -1.0e-40,
                65504.0,
                3.0e38,
                1.0 + 1.0 / 2048.0,
            ];
            let src = |k: usize| -> Vec<S> {
                (0..5000)
                    .map(|i| match (i * k) % 61 {
                        j @ 0..10 => S::from_compute(specials[j]),
                        j => S::from_compute(((i * k) % 97) as f32 * 0.37 - 17.0 + j as f32 * 1e-3),
                    })
                    .collect()
            };
            let (a, b) = (src(1), src(7));
            let guard = S::from_compute(-1234.5);
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                if !isa.is_supported() {
                    continue;
                }
                for len in [0, 1, 31, 32, 63, 64, 65, 200, 1024, 1025, 4000] {
                    let wide =
                        |x: &[S]| -> Vec<f32> { x[..len].iter().map(|v| v.to_compute()).collect() };
                    let (wa, wb) = (wide(&a), wide(&b));
                    let mut res = vec![0.0f32; len];
                    run_with(
                        isa,
                        MapTile {
                            kernel: &TwiceMinus,
                            ins: [&wa[..], &wb[..]],
                            out: &mut res,
                        },
                    );
                    let want: Vec<S> = res.iter().map(|&r| S::from_compute(r)).collect();
                    for streamed in [false, true] {
                        for offset in 0..=line {
                            let mut dst = vec![guard; len + 2 * line + 1];
                            let (mut b0, mut b1, mut r) =
                                (vec![0.0; 512], vec![0.0; 512], vec![0.0; 512]);
                            let mut staged = [S::zero(); 512];
                            run_with(
                                isa,
                                ConvertMap {
                                    kernel: &TwiceMinus,
                                    ins: [&a[..len], &b[..len]],
                                    out: &mut dst[offset..offset + len],
                                    bufs: [&mut b0, &mut b1],
                                    res: &mut r,
                                    staged: streamed.then_some(&mut staged[..]),
                                },
                            );
                            stream_fence();
                            let at = |j: usize| {
                                format!(
                                    "{isa:?} streamed {streamed} len {len} offset {offset} [{j}]"
                                )
                            };
                            for (j, w) in want.iter().enumerate() {
                                let got = dst[offset + j];
                                let same = bytemuck::cast::<S, u16>(got)
                                    == bytemuck::cast::<S, u16>(*w)
                                    || (got.is_nan() && w.is_nan());
                                assert!(same, "{}: {got:?} != {w:?}", at(j));
                            }
                            let untouched =
                                |v: &[S]| v.iter().all(|&v| v.to_compute() == guard.to_compute());
                            assert!(untouched(&dst[..offset]), "{}", at(0));
                            assert!(untouched(&dst[offset + len..]), "{}", at(len));
                        }
                    }
                }
            }
        }
        check::<half::f16>();
        check::<half::bf16>();
    }

    #[test]
    fn names_round_trip_and_best_is_supported() {
        for isa in [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512] {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
        assert!(best().is_supported());
        assert!(Isa::Scalar.is_supported());
        assert!(active().is_supported());
    }

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

    #[test]
    fn bf16_stores_match_half_with_and_without_add() {
        // Every field, subnormals included (AVX-512 BF16 flushes them, so
        // this checks the fallback), at lengths with and without a tail.
        let xs: Vec<f32> = (0..100_003u32)
            .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9)))
            .chain([f32::from_bits(1), -1.0e-39, 1.1754942e-38, f32::NAN])
            .collect();
        let olds: Vec<half::bf16> = xs
            .iter()
            .rev()
            .map(|x| half::bf16::from_f32(x * 0.5))
            .collect();
        let _switches = Switches::hold();
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            if set_active(isa).is_err() {
                continue;
            }
            for len in [xs.len(), 16, 15, 33] {
                let mut got = vec![half::bf16::ZERO; len];
                <half::bf16 as TileIo>::store(&mut got, &xs[..len], false);
                let mut summed = olds[..len].to_vec();
                <half::bf16 as TileIo>::store(&mut summed, &xs[..len], true);
                for (j, x) in xs[..len].iter().enumerate() {
                    let want = half::bf16::from_f32(*x);
                    assert_eq!(got[j].to_bits(), want.to_bits(), "{isa:?} {x:e}");
                    let want = half::bf16::from_f32(olds[j].to_f32() + x);
                    assert_eq!(summed[j].to_bits(), want.to_bits(), "{isa:?} add {x:e}");
                }
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
